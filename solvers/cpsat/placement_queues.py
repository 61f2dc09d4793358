"""The entry's and the exit's queues: a CP-SAT relaxation that bounds a single-entry, single-exit segment.

A transformer block's attention segment forks from a norm into heads and joins them in a sum, and
both ends are expensive to cross (the norm's output and each head's projection are full
activations). A head whose inputs left the norm's device waits for that crossing, and a head
whose projection is off the sum's device pays a second one, so only a few heads can afford
either: the norm's device computes the inputs of the early heads one after another, and the sum's
device queues the projections of the late ones. Energy and flow bounds spread that work over all
devices and miss the queues; this model keeps just the two queues.

Why it holds (fix a schedule of makespan T; the entry s on device ``d_s``, the exit t on ``d_t``)
---------------------------------------------------------------------------------------------------
* For a child w of s and a parent x of t with a path w -> x: if w is off ``d_s`` and x off
  ``d_t``, both crossings lie on one chain, so T >= d(s) + c(s, w) + d(w) + lp(w, x) + d(x) +
  c(x, t) + d(t) (lp: the longest path strictly between, fastest durations). Below that: w on
  ``d_s`` or x on ``d_t``.
* The children on ``d_s`` run one at a time after s; each ends early enough for its least tail,
  and, when a parent x it reaches is off ``d_t``, for the chain to x and x's crossing.
* The parents on ``d_t`` run one at a time before t; each starts no earlier than its head, than
  c(s, w) + d(w) + lp(w, x) after s for each child w that reaches it from off ``d_s``, and than
  lp(w, x) (plus the cheapest crossing when ``d_t`` is not ``d_s``) after each such w on ``d_s``.
* Devices are interchangeable: ``d_t`` is ``d_s`` or not, two CP-SAT runs; the bound is the
  smaller of their best bounds (each a proven bound even when its run is cut short).

Only these two devices and the children and parents on them are modelled, so the model is small
(tens of optional intervals) and CP-SAT closes it in about a second on a 58-op attention segment.
"""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from incsched.problems import PlacementProblem

from .. import SolverSettings
from .params import make_solver, wall_capped

__all__ = ["queue_bound"]

#: Past this many children of the entry the model is not built: with 48 (a 16-head attention
#: segment) CP-SAT neither closes it nor beats the other bounds within seconds; with 24 (8 heads)
#: it closes in about one.
QUEUE_MAX_CHILDREN = 32


def queue_bound(problem: PlacementProblem, settings: SolverSettings, lower: int | None = None) -> tuple[int, bool]:
    """A lower bound on the makespan of a single-entry, single-exit problem of identical devices from its two queues.

    Parameters
    ----------
    problem : PlacementProblem
        One source, one sink, devices interchangeable (as `segment_bound`); anything else gets
        the trivial bound.
    settings : SolverSettings
        Budget of each of the two CP-SAT runs.
    lower : int, optional
        A bound already proven: the models start from it, no model runs when no two crossings
        reach above it, and the second case is skipped once the first cannot raise it.

    Returns
    -------
    (int, bool)
        The bound in ticks (at least ``problem.lower_bound_ticks()`` and ``lower``), and whether
        a deterministic run was cut by the wall clock.

    Examples
    --------
    Two branches of 10 ticks between an entry and an exit, every crossing 30 ticks: a branch off
    the entry's device waits 30 and then crosses again or queues on the exit's device, so one
    device runs both (22 ticks), where the work bound says 12.

    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["s", "a", "b", "t"], ["s", "s", "a", "b"], ["a", "b", "t", "t"],
    ...               out_bytes=[300, 300, 300, 0], compute_time={"cpu": [1.0, 10.0, 10.0, 1.0]})
    >>> p = PlacementProblem.identical(g, 2, bandwidth=10.0, time_unit=1.0)
    >>> p.lower_bound_ticks(), queue_bound(p, SolverSettings(time_limit=5))
    (12, (22, False))
    """
    trivial = max(problem.lower_bound_ticks(), int(lower or 0))
    g = problem.graph
    sources, sinks = np.flatnonzero(g.in_degree == 0), np.flatnonzero(g.out_degree == 0)
    if (problem.n_devices < 2 or len(sources) != 1 or len(sinks) != 1 or sources[0] == sinks[0]
            or len(problem.identical_devices) != 1 or np.any(~problem.allowed_devices())):
        return trivial, False
    if int(np.count_nonzero(g.src == sources[0])) > QUEUE_MAX_CHILDREN:
        return trivial, False
    queues = _Queues(problem, int(sources[0]), int(sinks[0]))
    if not any(queues.crossings(w, x) > trivial for w, x in queues.pairs()):
        return trivial, False  # nothing pins a node to either end: the model would prove no more
    best, capped = None, False
    for same in (True, False):
        value, cut = queues.solve(settings, same, trivial)
        best = value if best is None else min(best, value)
        capped = capped or cut
        if best <= trivial:
            break  # the smaller of the two cases can no longer raise the bound
    return max(trivial, int(best)), capped


class _Queues:
    """The entry's children, the exit's parents, and the chains between them, computed once."""

    def __init__(self, problem: PlacementProblem, entry: int, exit_: int):
        g, D = problem.graph, problem.n_devices
        self.dur = problem.durations()[:, 0].astype(np.int64).tolist()
        ticks = problem.transfer_ticks()
        cross = ticks[:, ~np.eye(D, dtype=bool)].min(axis=1).astype(np.int64).tolist()
        src, dst = g.src.tolist(), g.dst.tolist()
        self.entry, self.exit = entry, exit_
        self.children = {dst[e]: cross[e] for e in range(g.n_edges) if src[e] == entry}  # w -> c(s, w)
        self.parents = {src[e]: cross[e] for e in range(g.n_edges) if dst[e] == exit_}  # x -> c(x, t)
        self.cheapest = min(cross)
        dur = np.asarray(self.dur, dtype=np.float64)
        self.head = np.rint(g.top_level(dur, None)).astype(np.int64).tolist()  # free transfers: valid anywhere
        self.tail = (np.rint(g.bottom_level(dur, None)).astype(np.int64) - np.asarray(self.dur)).tolist()
        order = g.topological_order().tolist()
        ptr, nbr = g.succ_ptr.tolist(), g.succ_idx.tolist()
        # between[w][x]: the longest chain of durations strictly between child w and parent x (absent: no path)
        self.between = {w: _longest_from(w, order, ptr, nbr, self.dur, self.parents) for w in self.children}

    def chain(self, w: int, x: int) -> int:
        """d(w) + lp(w, x) + d(x): the work from w's start to x's end (w = x: d(w))."""
        return self.dur[w] if w == x else self.dur[w] + self.between[w][x] + self.dur[x]

    def crossings(self, w: int, x: int) -> int:
        """The least makespan with child w off the entry's device and parent x off the exit's."""
        return self.dur[self.entry] + self.children[w] + self.chain(w, x) + self.parents[x] + self.dur[self.exit]

    def pairs(self):
        for w in self.children:
            for x in self.parents:
                if w == x or x in self.between[w]:
                    yield w, x

    def solve(self, settings: SolverSettings, same: bool, lower: int) -> tuple[int, bool]:
        """CP-SAT's best bound with the exit on the entry's device (``same``) or not."""
        dur, s, t = self.dur, self.entry, self.exit
        ds, dt = dur[s], dur[t]
        horizon = int(sum(dur) + sum(self.children.values()) + sum(self.parents.values()) + 1)
        m = cp_model.CpModel()
        T = m.NewIntVar(lower, horizon, "makespan")
        early = {w: m.NewBoolVar(f"on_entry[{w}]") for w in self.children}  # w on d_s
        late = {x: m.NewBoolVar(f"on_exit[{x}]") for x in self.parents}  # x on d_t
        below: dict[int, cp_model.IntVar] = {}

        def shorter(length: int):
            """A literal for T < length."""
            if length not in below:
                lit = m.NewBoolVar(f"below[{length}]")
                m.Add(T <= length - 1).OnlyEnforceIf(lit)
                m.Add(T >= length).OnlyEnforceIf(lit.Not())
                below[length] = lit
            return below[length]

        w_end, w_iv = {}, {}
        for w in self.children:
            start, end = m.NewIntVar(ds, horizon, ""), m.NewIntVar(ds, horizon, "")
            w_end[w], w_iv[w] = end, m.NewOptionalIntervalVar(start, dur[w], end, early[w], f"child[{w}]")
            m.Add(end + self.tail[w] <= T).OnlyEnforceIf(early[w])
        x_start, x_iv = {}, {}
        for x in self.parents:
            start, end = m.NewIntVar(self.head[x], horizon, ""), m.NewIntVar(0, horizon, "")
            x_start[x] = start
            if x in early and same:  # a child of s and a parent of t: one node, one interval
                m.Add(early[x] == late[x])
                m.Add(start == w_end[x] - dur[x])
            else:
                x_iv[x] = m.NewOptionalIntervalVar(start, dur[x], end, late[x], f"parent[{x}]")
                m.Add(end + dt <= T).OnlyEnforceIf(late[x])
                if x in early:  # on d_s and on d_t, which differ: not both
                    m.AddBoolOr([early[x].Not(), late[x].Not()])
        for w, x in self.pairs():
            c_in, c_out = self.children[w], self.parents[x]
            length = self.crossings(w, x)
            if length > lower:  # both crossings on one chain: at least one end must be avoided
                m.AddBoolOr([early[w], late[x], shorter(length).Not()])
            # w on d_s, x off d_t: the chain from w's end and x's crossing fit before T
            m.Add(w_end[w] + self.chain(w, x) - dur[w] + c_out + dt <= T).OnlyEnforceIf([early[w], late[x].Not()])
            # x on d_t: released by w's crossing (w off d_s) or w's end (w on d_s)
            reach = self.chain(w, x) - dur[x]  # from w's start to x's start
            m.Add(x_start[x] >= ds + c_in + reach).OnlyEnforceIf([late[x], early[w].Not()])
            if w != x:
                gap = reach - dur[w] + (0 if same else self.cheapest)
                m.Add(x_start[x] >= w_end[w] + gap).OnlyEnforceIf([late[x], early[w]])
        if same:
            m.AddNoOverlap(list(w_iv.values()) + list(x_iv.values()))
        else:
            m.AddNoOverlap(list(w_iv.values()))
            m.AddNoOverlap(list(x_iv.values()))
        m.Minimize(T)
        solver = make_solver(settings)
        solver.Solve(m)
        return int(solver.BestObjectiveBound()), wall_capped(settings, solver)


def _longest_from(w: int, order: list[int], ptr: list[int], nbr: list[int], dur: list[int], targets) -> dict[int, int]:
    """For each target reachable from ``w``: the longest chain of durations strictly between them."""
    best = {w: 0}  # the longest chain of durations from w's end to each node's start
    for u in order:
        if u not in best:
            continue
        after = best[u] + (dur[u] if u != w else 0)
        for k in range(ptr[u], ptr[u + 1]):
            v = nbr[k]
            if after > best.get(v, -1):
                best[v] = after
    return {x: best[x] for x in targets if x in best and x != w}
