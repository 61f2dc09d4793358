"""A preemptive flow bound on placement makespans: per-node windows per device class, fed by the entry's device.

`incsched.bounds.placement.energy_bound` charges each set of nodes the *smallest* head and the
*smallest* tail among its members, per device class. On fork-joins with transfers several times
the compute those minima come from different kinds of node, and from nodes that cannot all be
early at once: a score op off the entry's device may start soon after the entry, but only once
the entry's device has run its head's projections, and that device runs one op at a time. Here
every node keeps its own window on every device class, the work that devices other than the
entry's can do before the entry's output could reach them is capped by what the entry's device
can feed them in that time (and the mirror at the exit), and the question "does the work fit by
T?" is a max flow; the least T that fits (bisection) bounds the makespan.

Why it holds (`flow_bound`)
---------------------------
Fix a schedule of makespan at most T. Devices fall into classes as in `energy_bound`: with an
entry anchor x (the single source) on device δ, and an exit anchor y (the single sink) on device
ε, either ε = δ (class δ: plain heads and tails; the D - 1 others: heads off x's device and
tails off y's) or not (δ: plain heads, tails off y; ε: heads off x, plain tails; the D - 2
others: both off). With 2 to D - 1 sources (sinks) and no single one, the anchor is the set of
them: k anchors sit on at most k devices, counted as exactly k with plain heads (only a
relaxation), and each way the entry's and the exit's k overlap is a case. Every node v on a
device of class c runs inside [H_c(v), T - Q_c(v)] (any valid heads and tails:
`transfer_heads`, `anchored_heads`, their energetic or CP-SAT raised versions). Cut time at the
window edges into intervals; in interval k of length L_k a node runs at most L_k (it sits on one
device, which runs one op at a time) and class c does at most count_c * L_k of work.

*Feeding.* Let HX(u) be u's head off every anchor's device (`anchored_heads`) and, for a window
length t, call u *pinned* when HX(u) + p(u) >= t: off the anchors' devices u cannot end before t.
A node v off the anchors' devices that starts at s < t (so HX(v) < t, and v runs at most
min(p(v), t - HX(v)) inside [0, t]) has every pinned ancestor, R(v), on the anchors' devices
(off them it would end at t or later, after v started); the way from each of them to v leaves
those devices over some edge not at an anchor, so they are done by s - λ (λ: the cheapest
crossing of an edge not at an anchor), and they start no earlier than the anchors' first end.
So the union S of the R(v) ran on at most k devices within k (t - start - λ). Charging each v's
work to R(v) in proportion to durations (rate(u) = sum over v with u in R(v) of work(v) /
p(R(v))), any such S carries at most sum over S of p(u) rate(u): the work off the anchors'
devices in [0, t] is at most the nodes with no pinned ancestor plus the fractional knapsack of
items (p(u), p(u) rate(u)) of that capacity: B_x(t), for every t (it bites until the anchors'
outputs can reach the other devices, t_x = start + the cheapest transfer out of an anchor; the
chain stops there). Mirrored at the exit: work off ε inside [T - t, T] is at most B_y(t).

So the schedule is a flow source -> v (p_v) -> (v, k) (L_k) -> (c, k) for the classes whose
window of v holds k -> sink (count_c * L_k), where the flow of the off-δ classes in intervals
inside [0, t] passes one arc of capacity B_x(t) (a chain over the time points t <= t_x), and the
same at the end (where the two chains' windows overlap, an interval joins one of them: where
the entry's budget stops being the smaller); it saturates every node's arc. When the maximum flow is short of the total work,
no schedule ends by T. Dropping a constraint (an interval in both the head and the tail chains,
window edges rounded outwards onto a coarser grid of time points) only relaxes the network, so a
coarse grid still refutes validly. T is claimed refuted only when every case is, and the
bisection only raises its low end past a refuted T, so what it returns is always a valid bound,
also when cut short. Integer ticks and an integer max flow (OR-Tools `SimpleMaxFlow`); the
knapsack in floating point, rounded up past its error before the floor (the work is whole ticks),
so rounding only ever relaxes.

Without feeding constraints the network's cuts include `energy_bound`'s sets (their windows
widened to the sets' minima), so with the same heads and tails, no coarsening and an exact search
(``precision=0``) this bound is never weaker than the energy bound; `placement_bound_details`
starts the search at the other families' maximum anyway.
"""

from __future__ import annotations

import numpy as np
from ortools.graph.python import max_flow

from ..graph.dag import ancestor_matrix
from ..problems.placement import PlacementProblem
from .placement_heads import INF, _anchor_sets, _anchors, _as_set, _costs, anchored_heads, anchored_tails, transfer_heads, transfer_tails

__all__ = ["flow_bound", "feeding_budget", "FLOW_MAX_POINTS", "FLOW_MAX_NODES", "FLOW_PRECISION"]

#: Most window edges kept per feasibility check; more are rounded outwards onto this many points.
FLOW_MAX_POINTS = 160

#: Relative width at which `flow_bound` stops its search (returning the refuted side).
FLOW_PRECISION = 1e-3

#: `incsched.bounds.placement.placement_bound_details` adds the flow bound on problems (and
#: segments) of at most this many nodes by default: 0.3 s at 60 nodes, 0.7 s on the 226-node
#: attention segment of a 32-head block, 0.4 s on a 397-node block (a 2-core VM). A wide
#: fork-join segment is where the feeding budget counts most (32 heads: 82,689 -> 110,152 ticks).
FLOW_MAX_NODES = 400


class feeding_budget:
    """B(t): most work the devices holding no anchor can do within t of the anchors' side.

    ``forward``: the anchors are sources (the single source, or every source) and B(t) bounds the
    work off their devices inside [0, t]; else the mirror at the sinks. See the module docstring
    for the proof; B is computed in floating point and rounded up by far more than its error (a
    larger budget only relaxes the network).

    Parameters
    ----------
    problem : PlacementProblem
    anchor : int or tuple of int
        The single source (``forward``) or sink, or a tuple of every source (sink).
    head : list of int
        Valid heads (``forward``) or tails of every node: the anchor's bounds when its side starts.
    forward : bool
    """

    def __init__(self, problem: PlacementProblem, anchor: int | tuple[int, ...], head, *, forward: bool = True):
        g = problem.graph
        dmin, cross = _costs(problem)
        anchors = _as_set(anchor)
        anc = ancestor_matrix(g)  # each node's ancestors; descendants, its transpose, when mirrored
        if forward:
            out_ptr, feid = g.succ_ptr.tolist(), g.succ_edge.tolist()
            off = anchored_heads(problem, anchor, list(head))
        else:
            out_ptr, feid = g.pred_ptr.tolist(), g.pred_edge.tolist()
            off = anchored_tails(problem, anchor, list(head))
            anc = np.ascontiguousarray(anc.T)
        n = g.n_nodes
        # k anchors sit on at most k devices: together they feed k times one device's time.
        self.devices = min(len(anchors), problem.n_devices)
        self.start = min(int(head[a]) + int(dmin[a]) for a in anchors)  # when an anchor's device is first free to feed
        # On the way from an anchor's device to a node off them some edge not at an anchor crosses:
        # what the anchors' devices ran for the node is done that much before it starts.
        at_anchor = {k for a in anchors for k in feid[out_ptr[a]:out_ptr[a + 1]]}
        self.lag = int(min((c for k, c in enumerate(cross) if k not in at_anchor), default=0)) if problem.n_devices > 1 else 0
        self._p = np.asarray(dmin, dtype=np.float64)
        self._off = np.asarray(off, dtype=np.float64)  # earliest start off every anchor's device (INF: an anchor)
        self._finish = self._off + self._p  # earliest end off the anchors' devices
        is_anchor = np.zeros(n, dtype=bool)
        is_anchor[list(anchors)] = True
        self._movable = ~is_anchor
        self._anc = anc
        self._memo: dict[int, int] = {}
        # reach: the budget holds at every t, but it bites before the anchors' outputs can reach
        # the other devices; the plain network takes over from there (and the mirrored chain keeps
        # the intervals near the other end).
        self.reach = min(self.start + int(min((cross[k] for k in at_anchor), default=INF)), INF)

    def __call__(self, t: int) -> int:
        """The budget within ``t`` of the anchors' side, in ticks (at most all movable work)."""
        t = int(t)
        if t not in self._memo:
            self._memo[t] = self._budget(t)
        return self._memo[t]

    def _budget(self, t: int) -> int:
        p, movable = self._p, self._movable
        # A node v off the anchors' devices running before t has started before t (so its off head
        # is below t) and runs at most t minus that head; every ancestor that cannot end before t
        # off the anchors' devices (pinned) ran on them, done by t - lag.
        early = movable & (self._off < t)
        work = np.where(early, np.minimum(p, t - self._off), 0.0)
        pinned = movable & (self._finish >= t)
        need = self._anc[:, pinned]  # [n, pinned]: each early node's pinned ancestors
        cost = need.astype(np.float64) @ p[pinned]  # their total duration
        # ... and the anchors' devices ran all of them: v starts no earlier than start + lag + their
        # total duration over the k devices, which caps its work by t as well.
        work = np.where(cost > 0, np.clip(np.minimum(work, t - self.start - self.lag - cost / self.devices), 0.0, None), work)
        fed = early & (cost > 0)
        free = float(work[early & (cost == 0)].sum())  # nothing pinned (or only zero-time nodes) behind it
        # Charge each fed node's work to its pinned ancestors in proportion to their durations: any
        # set of pinned nodes the anchors' devices ran pays at least that node's full share. So the
        # fed work is at most the fractional knapsack of items (duration, duration x rate).
        rate = need[fed].T.astype(np.float64) @ (work[fed] / cost[fed])  # per pinned node: work fed per tick
        cap = max(0, t - self.start - self.lag) * self.devices
        order = np.argsort(-rate, kind="stable")
        durations = p[pinned][order]
        taken = np.minimum(durations, np.maximum(0.0, cap - np.concatenate([[0.0], np.cumsum(durations)[:-1]])))
        value = free + float((taken * rate[order]).sum())
        # The work is whole ticks, so at most the knapsack's floor; the margin covers the floating
        # point error (relative 1e-15 per operation), so rounding can only relax.
        return int(value + value * 1e-9 + 1e-6)


def device_cases(problem: PlacementProblem, head, tail, entry, exit_):
    """The device classes ``[(heads, tails, count, off_entry, off_exit), ...]`` of each case (int64 arrays).

    ``entry`` / ``exit_``: None, one node, or a tuple of k nodes (every source or sink). k anchors
    sit on at most k devices; counting exactly k as the anchors' (plain heads or tails) only
    relaxes, and every way those k overlap the other side's is a case of its own.
    """
    D = problem.n_devices
    H = np.asarray(head, dtype=np.int64)
    Q = np.asarray(tail, dtype=np.int64)
    HX = np.asarray(anchored_heads(problem, entry, list(head)), dtype=np.int64) if entry is not None else H
    QY = np.asarray(anchored_tails(problem, exit_, list(tail)), dtype=np.int64) if exit_ is not None else Q
    if D == 1 or (entry is None and exit_ is None):
        return [[(H, Q, D, False, False)]]
    k_in = 0 if entry is None else min(len(_as_set(entry)), D)
    k_out = 0 if exit_ is None else min(len(_as_set(exit_)), D)
    if exit_ is None:
        return [[(H, Q, k_in, False, False), (HX, Q, D - k_in, True, False)]]
    if entry is None:
        return [[(H, Q, k_out, False, False), (H, QY, D - k_out, False, True)]]
    if entry == exit_ and not isinstance(entry, tuple):  # one node, source and sink at once
        return [[(H, Q, 1, False, False), (HX, QY, D - 1, True, True)]]
    # j devices hold an entry and an exit anchor, k_in - j an entry only, k_out - j an exit only
    return [[(H, Q, j, False, False), (H, QY, k_in - j, False, True), (HX, Q, k_out - j, True, False),
             (HX, QY, D - k_in - k_out + j, True, True)]
            for j in range(min(k_in, k_out), max(0, k_in + k_out - D) - 1, -1)]


def _fits(P: np.ndarray, classes, T: int, max_points: int, feed_in=None, feed_out=None) -> bool:
    """Whether one case's network carries all the work by T (module docstring)."""
    n = len(P)
    classes = [c for c in classes if c[2] > 0]
    if not classes:
        return False
    lo = np.stack([np.minimum(H, INF) for H, *_ in classes])  # [C, n]
    hi = np.stack([T - np.minimum(Q, INF) for _, Q, *_ in classes])
    allowed = np.stack([(H < INF) & (Q < INF) for H, Q, *_ in classes]) & (lo + P[None, :] <= hi)
    if not allowed.any(axis=0).all():
        return False  # some node fits on no device class
    lo = np.where(allowed, lo, 0)
    hi = np.where(allowed, hi, 0)
    points = np.unique(np.concatenate([lo[allowed], hi[allowed]]))
    if len(points) > max_points:
        points = np.unique(points[np.linspace(0, len(points) - 1, max_points).round().astype(np.int64)])
    reach_in = feed_in.reach if feed_in is not None and any(c[3] for c in classes) else None
    reach_out = T - feed_out.reach if feed_out is not None and any(c[4] for c in classes) else None
    if reach_in is not None and reach_out is not None and reach_out < reach_in:
        # The two chains' windows overlap and an interval passes one chain only: split where the
        # entry's budget stops being the smaller one (either split is valid: it drops constraints).
        split = reach_in
        for x in points[(points >= reach_out) & (points <= reach_in)]:
            if feed_in(int(x)) >= feed_out(int(T - x)):
                split = int(x)
                break
        reach_in = reach_out = split
    extra = [x for x in (reach_in, reach_out) if x is not None and points[0] < x < points[-1]]
    if extra:
        points = np.unique(np.concatenate([points, np.asarray(extra, dtype=np.int64)]))
    # Round window edges outwards onto the points (releases down, deadlines up): only relaxes.
    klo = np.clip(np.searchsorted(points, lo, side="right") - 1, 0, len(points) - 1)
    khi = np.clip(np.searchsorted(points, hi, side="left"), 0, len(points) - 1)
    L = np.diff(points).astype(np.int64)  # interval k = [points[k], points[k + 1])
    K, C = len(L), len(classes)
    if K == 0:
        return False
    counts = np.asarray([c[2] for c in classes], dtype=np.int64)
    # Ids: 0 source, 1 sink, nodes, (class, interval), feeding chains, then (node, interval).
    node0 = 2
    ck0 = node0 + n
    chain0 = ck0 + C * K
    tails, heads, caps = [np.zeros(n, np.int64)], [node0 + np.arange(n)], [P.astype(np.int64)]
    # (c, k) -> sink, or into a feeding chain: prefix chain node i gathers intervals ending at points[i + 1] <= reach_in
    # and passes on at most B_x(points[i + 1]); suffix chain node j gathers intervals starting at points[j] >= reach_out.
    target = np.full((C, K), 1, dtype=np.int64)
    nxt = chain0
    if reach_in is not None:
        ends = points[1:]
        pre = np.flatnonzero(ends <= reach_in)
        if len(pre):
            ids = nxt + np.arange(len(pre))
            nxt += len(pre)
            for ci, c in enumerate(classes):
                if c[3]:
                    target[ci, pre] = ids
            budget = np.asarray([feed_in(int(ends[i])) for i in pre], dtype=np.int64)
            tails.append(ids)
            heads.append(np.append(ids[1:], 1))
            caps.append(budget)
    if reach_out is not None:
        starts = points[:-1]
        suf = np.flatnonzero(starts >= reach_out)
        if len(suf):
            ids = nxt + np.arange(len(suf))
            nxt += len(suf)
            for ci, c in enumerate(classes):
                if c[4]:
                    free = target[ci, suf] == 1  # an interval already in the prefix chain keeps that one
                    target[ci, suf[free]] = ids[free]
            budget = np.asarray([feed_out(int(T - starts[j])) for j in suf], dtype=np.int64)
            tails.append(ids)
            heads.append(np.concatenate([[1], ids[:-1]]))
            caps.append(budget)
    for ci in range(C):
        tails.append(ck0 + ci * K + np.arange(K))
        heads.append(target[ci])
        caps.append(counts[ci] * L)
    ks = np.arange(K)
    member = allowed[:, :, None] & (ks[None, None, :] >= klo[:, :, None]) & (ks[None, None, :] < khi[:, :, None])  # [C, n, K]
    span = member.any(axis=0)
    vs, kk = np.nonzero(span)
    vk_id = np.full((n, K), -1, dtype=np.int64)
    vk_id[vs, kk] = nxt + np.arange(len(vs))
    tails.append(node0 + vs)
    heads.append(vk_id[vs, kk])
    caps.append(L[kk])
    for ci in range(C):
        v2, k2 = np.nonzero(member[ci])
        tails.append(vk_id[v2, k2])
        heads.append(ck0 + ci * K + k2)
        caps.append(L[k2])
    mf = max_flow.SimpleMaxFlow()
    mf.add_arcs_with_capacity(np.concatenate(tails).astype(np.int32), np.concatenate(heads).astype(np.int32),
                              np.concatenate(caps).astype(np.int64))
    status = mf.solve(0, 1)
    if status != mf.OPTIMAL:
        raise RuntimeError(f"max flow failed with status {status}")
    return int(mf.optimal_flow()) >= int(P.sum())


def flow_bound(
    problem: PlacementProblem,
    head: list[int] | None = None,
    tail: list[int] | None = None,
    *,
    lower: int = 0,
    feeding: bool = True,
    max_points: int = FLOW_MAX_POINTS,
    precision: float = FLOW_PRECISION,
    should_stop=None,
) -> int:
    """Least makespan the preemptive flow relaxation allows, in ticks (module docstring).

    Parameters
    ----------
    problem : PlacementProblem
        Any devices and links (fastest durations, cheapest transfers, as every family here).
    head, tail : list of int, optional
        Valid heads and tails (default `transfer_heads` / `transfer_tails`); the single source
        and sink, when there are such, anchor the device classes and the feeding budgets.
    lower : int
        A bound already known: the search starts there, and nothing below it is returned.
    feeding : bool
        Cap the work off the entry's (exit's) device near the ends (`feeding_budget`).
    max_points : int
        Most window edges per check (more are rounded outwards: weaker, never invalid).
    precision : float
        The search stops once the least makespan is bracketed this tightly (relative): the
        low end is returned, so a coarser search is faster and a little weaker, never invalid.
    should_stop : callable, optional
        Asked between checks; once true the bound refuted so far is returned (still valid).

    Returns
    -------
    int
        A lower bound on the makespan, at least ``lower``.

    Examples
    --------
    A fork of two 10-tick branches with transfers of 10 on two devices: the second device can
    only start at 11, and a branch there must send its output back (optimum 22).

    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["s", "a", "b", "t"], ["s", "s", "a", "b"], ["a", "b", "t", "t"],
    ...               out_bytes=[1000, 1000, 1000, 0], compute_time={"cpu": [1.0, 10.0, 10.0, 1.0]})
    >>> p = PlacementProblem.identical(g, 2, bandwidth=10.0, time_unit=1.0)
    >>> flow_bound(p)
    22
    """
    n = problem.n_nodes
    if n == 0:
        return max(0, int(lower))
    stop = should_stop or (lambda: False)
    head = transfer_heads(problem) if head is None else [int(h) for h in head]
    tail = transfer_tails(problem) if tail is None else [int(q) for q in tail]
    dmin, _ = _costs(problem)
    P = np.asarray(dmin, dtype=np.int64)
    entries, exits = _anchors(problem)
    entry_sets, exit_sets = _anchor_sets(problem)  # 2 to D - 1 sources (sinks): some device holds none
    entry = entries[-1] if entries[-1] is not None else entry_sets[-1]
    exit_ = exits[-1] if exits[-1] is not None else exit_sets[-1]
    cases = device_cases(problem, head, tail, entry, exit_)
    feed_in = feed_out = None
    if feeding and problem.n_devices > 1:
        feed_in = feeding_budget(problem, entry, head, forward=True) if entry is not None else None
        feed_out = feeding_budget(problem, exit_, tail, forward=False) if exit_ is not None else None
    H0 = np.asarray(head, dtype=np.int64)
    Q0 = np.asarray(tail, dtype=np.int64)
    lo = max(int(lower), int((H0 + P + Q0).max()))
    hi = int(H0.max() + P.sum() + Q0.max())  # a bisection bracket only: what is returned never relies on it
    # Least T some case allows: refuting T needs every case refuted. Galloping up from the known
    # bound first (the answer is usually within a few percent of it), then bisecting.
    def fits(T: int) -> bool:
        return any(_fits(P, classes, T, max_points, feed_in, feed_out) for classes in cases)

    step = max(1, int(lo * precision * 16))
    while lo < hi and not stop():
        probe = min(hi, lo + step)
        if fits(probe):
            hi = probe
            break
        lo, step = probe + 1, step * 2
    while hi - lo > max(0, int(lo * precision)) and not stop():
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
