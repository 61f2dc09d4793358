"""CP-SAT models that bound a single-entry, single-exit segment of identical devices.

Inc-ilp splits a graph at its cut nodes (`incsched.problems.decompose`) and bounds each segment
with a relaxation (`segment_bound`) and a decision model that refutes short makespans
(`segment_decision`, bisected by `segment_proof_bound`). Durations, transfers and the heads and
tails with free transfers are computed once per problem (`_SegmentCosts`) and shared by all three.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace

import numpy as np
from ortools.sat.python import cp_model

from incsched.graph.dag import ancestor_matrix, find_root
from incsched.problems import PlacementProblem
from incsched.problems.decompose import subproblem

from .. import SolverSettings, StopSignal
from .params import make_solver, wall_cap, wall_capped
from .placement import first_use_chain
from .placement_queues import queue_bound

__all__ = ["segment_bound", "segment_decision", "segment_proof_bound"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _SegmentCosts:
    """What the segment models read of a problem of identical devices, computed once.

    ``dur``: each node's ticks (the same on every device); ``ticks``: each edge's transfer per
    device pair; ``cross``: each edge's cheapest crossing; ``head0`` and ``tail0``: longest paths
    before and after each node with free transfers (valid on every device).
    """

    graph: object
    n_devices: int
    dur: np.ndarray  # [n]
    ticks: np.ndarray  # [m, D, D]
    cross: np.ndarray  # [m]
    head0: np.ndarray  # [n]
    tail0: np.ndarray  # [n]

    @classmethod
    def of(cls, problem: PlacementProblem) -> _SegmentCosts:
        g, D = problem.graph, problem.n_devices
        dur = problem.durations()[:, 0].astype(np.int64)
        ticks = problem.transfer_ticks()
        cross = ticks[:, ~np.eye(D, dtype=bool)].min(axis=1) if g.n_edges else np.zeros(0, np.int64)
        head0 = np.rint(g.top_level(dur.astype(np.float64), None)).astype(np.int64)
        tail0 = np.rint(g.bottom_level(dur.astype(np.float64), None)).astype(np.int64) - dur
        return cls(g, D, dur, ticks, cross, head0, tail0)

    def offsets(self, entry: int | None, exit_: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Earliest start of each node off the entry's device, least tail of each node off the exit's (cheapest crossings)."""
        return (_crossing_offsets(self.graph, self.dur, self.cross, self.head0, entry, forward=True),
                _crossing_offsets(self.graph, self.dur, self.cross, self.tail0, exit_, forward=False))

    def windows(self, head: np.ndarray, tail: np.ndarray, entry: int | None, exit_device: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Release and tail of each node on each device, [n, D] each: the entry on device 0, the exit on ``exit_device``.

        A node on the entry's device (or with no single entry) is released at ``head0``, elsewhere
        at ``head``; likewise its tail is ``tail0`` on the exit's device, ``tail`` elsewhere.
        """
        n, D = len(self.dur), self.n_devices
        release = np.empty((n, D), dtype=np.int64)
        tails = np.empty((n, D), dtype=np.int64)
        for d in range(D):
            release[:, d] = self.head0 if (entry is None or d == 0) else head
            tails[:, d] = self.tail0 if (exit_device is None or d == exit_device) else tail
        return release, tails


# ---------------------------------------------------------------------- a relaxation that bounds a segment


def segment_bound(problem: PlacementProblem, settings: SolverSettings, lower: int | None = None, *, queues: bool = True) -> tuple[int, bool]:
    """A lower bound on the makespan of a single-entry, single-exit placement problem of identical devices.

    Relaxation of the exact model that keeps what makes transfers expensive and drops the order:
    with the entry node on device 0 (devices are interchangeable) and the exit node on device 0 or
    1, a node off the entry's device cannot start before the cheapest crossing from the entry
    reaches it, and a node off the exit's device must leave time for the cheapest crossing to the
    exit. On every device, the nodes that start at least ``alpha`` late and end at least ``beta``
    early fit in ``makespan - alpha - beta`` whenever the device holds any of them: a knapsack per
    device and threshold pair, over device choices only, which CP-SAT bounds quickly. Every
    schedule satisfies every constraint, so CP-SAT's best bound on it bounds the real makespan.
    The order it drops is kept at the two ends by `queue_bound` (the entry's device computing the
    early branches' inputs one after another, the exit's queuing the late branches' outputs);
    the larger of the two is returned.

    Parameters
    ----------
    problem : PlacementProblem
        Devices all interchangeable (``len(problem.identical_devices) == 1``).
    settings : SolverSettings
        Budget for each of (at most) four CP-SAT runs.
    lower : int, optional
        A bound already proven (the combinatorial families on this problem): the queues start
        from it.
    queues : bool
        Run `queue_bound` (False: the caller has, and ``lower`` holds its value).

    Returns
    -------
    (int, bool)
        The bound in ticks (at least ``problem.lower_bound_ticks()`` and ``lower``), and whether a
        deterministic run was cut by the wall clock (then the bound, though valid, may differ
        between runs).

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["s", "a", "b", "t"], ["s", "s", "a", "b"], ["a", "b", "t", "t"],
    ...               out_bytes=[1000, 1000, 1000, 0], compute_time={"cpu": [1.0, 10.0, 10.0, 1.0]})
    >>> p = PlacementProblem.identical(g, 2, bandwidth=10.0, time_unit=1.0)
    >>> p.lower_bound_ticks(), segment_bound(p, SolverSettings(time_limit=5))
    (12, (22, False))
    """
    g = problem.graph
    trivial = max(problem.lower_bound_ticks(), int(lower or 0))
    if problem.n_nodes < 3 or problem.n_devices < 2 or len(problem.identical_devices) != 1 or np.any(~problem.allowed_devices()):
        return trivial, False
    # the order this relaxation drops, kept at the two ends; first, as it is quick where it applies
    ends, capped = queue_bound(problem, settings, lower=trivial) if queues else (trivial, False)
    costs = _SegmentCosts.of(problem)
    sources = np.flatnonzero(g.in_degree == 0)
    sinks = np.flatnonzero(g.out_degree == 0)
    entry = int(sources[0]) if len(sources) == 1 else None
    exit_ = int(sinks[0]) if len(sinks) == 1 else None
    head_off, tail_off = costs.offsets(entry, exit_)
    best = None
    for exit_device in ([0, 1] if exit_ is not None else [None]):
        value, cut = _segment_relaxation(settings, costs, head_off, tail_off, entry, exit_, exit_device)
        best = value if best is None else min(best, value)
        capped = capped or cut
        if best <= ends:
            break  # the smaller of the two cases can no longer raise the bound
    return max(ends, int(best)), capped


def _crossing_offsets(g, dur, cross, plain, anchor, forward: bool) -> np.ndarray:
    """Earliest start (forward) or least tail (backward) of each node placed off ``anchor``'s device."""
    if anchor is None:
        return plain.copy()
    out = plain.copy()
    order = g.topological_order().tolist()
    if not forward:
        order = order[::-1]
    ptr, nbr, eid = (g.pred_ptr, g.pred_idx, g.pred_edge) if forward else (g.succ_ptr, g.succ_idx, g.succ_edge)
    ptr, nbr, eid = ptr.tolist(), nbr.tolist(), eid.tolist()
    for w in order:
        if w == anchor:
            continue
        best = int(plain[w])
        for k in range(ptr[w], ptr[w + 1]):
            u = nbr[k]
            # u before w (forward): either u sits off the anchor's device too, or the edge u-w crosses.
            via_cross = int(plain[u]) + int(dur[u]) + int(cross[eid[k]])
            step = via_cross if u == anchor else min(int(out[u]) + int(dur[u]), via_cross)
            best = max(best, step)
        out[w] = best
    return out


def _segment_relaxation(settings, costs: _SegmentCosts, head_off, tail_off, entry, exit_, exit_device) -> tuple[int, bool]:
    dur, D = costs.dur, costs.n_devices
    n = len(dur)
    model = cp_model.CpModel()
    horizon = int(dur.sum() + head_off.max() + tail_off.max() + 1)
    makespan = model.NewIntVar(0, horizon, "makespan")
    x = [{d: model.NewBoolVar(f"on[{v},{d}]") for d in range(D)} for v in range(n)]
    release, tail = costs.windows(head_off, tail_off, entry, exit_device)
    for v in range(n):
        model.AddExactlyOne(x[v].values())
        for d in range(D):
            model.Add(makespan >= int(release[v, d] + dur[v] + tail[v, d])).OnlyEnforceIf(x[v][d])
    if entry is not None:
        model.Add(x[entry][0] == 1)
    if exit_ is not None:
        model.Add(x[exit_][exit_device] == 1)
    model.Add(D * makespan >= int(dur.sum()))
    add_energy(model, x, dur, release, tail, makespan, most=12)
    model.Minimize(makespan)
    solver = make_solver(settings)
    solver.Solve(model)
    return int(solver.BestObjectiveBound()), wall_capped(settings, solver)


def add_energy(model: cp_model.CpModel, x, dur, release, tails, makespan, *, most: int) -> None:
    """Energy per device: the nodes on device d released at least ``a`` late with a tail of at least ``b`` fit in ``makespan - a - b``.

    A knapsack over device choices per device and threshold pair (at most ``most`` thresholds
    each way). ``makespan`` is an int (a decision: a row only where the nodes could overflow) or a
    variable (then the window shrinks by ``a + b`` only when the device really holds a member).
    """
    n, D = release.shape
    for d in range(D):
        alphas = _thresholds(release[:, d], most)
        betas = _thresholds(tails[:, d], most)
        for a in alphas:
            for b in betas:
                members = [v for v in range(n) if release[v, d] >= a and tails[v, d] >= b]
                if not members:
                    continue
                load = sum(int(dur[v]) * x[v][d] for v in members)
                if isinstance(makespan, int):
                    cap = makespan - int(a) - int(b)
                    if sum(int(dur[v]) for v in members) > cap:
                        model.Add(load <= max(cap, 0))
                    continue
                some = model.NewBoolVar(f"holds[{d},{a},{b}]")
                for v in members:
                    model.AddImplication(x[v][d], some)
                model.Add(load + (int(a) + int(b)) * some <= makespan)


def _thresholds(values: np.ndarray, most: int) -> list[int]:
    # Any threshold gives a valid constraint; a dozen well-spread ones keep the model small.
    distinct = np.unique(values)
    if len(distinct) > most:
        distinct = np.unique(distinct[np.linspace(0, len(distinct) - 1, most).round().astype(int)])
    return distinct.tolist()


# ---------------------------------------------------------------------- proofs for a segment: the decision model


def segment_decision(problem: PlacementProblem, makespan: int, settings: SolverSettings) -> str:
    """Whether a single-entry, single-exit problem of identical devices has a schedule of at most ``makespan`` ticks.

    A proof tool: the decision form of the placement model, strengthened with constraints every
    schedule of at most ``makespan`` satisfies, so that CP-SAT refutes short makespans in seconds
    where the optimisation model's bound stalls. Devices are interchangeable, so the entry runs on
    device 0 and the exit on device 0 or 1; each case is one CP-SAT run with

    - per-device windows: a node off the entry's device starts no earlier than
      `_off_device_offsets` allows (the exact earliest start of that node off the entry's device
      in the problem restricted to its ancestors, solved by CP-SAT when it has at most
      ``_OFFSET_NODES`` of them; else the cheapest-crossing bound of `segment_bound`), and
      symmetrically ends early enough to leave the least tail off the exit's device;
    - energy per device: the nodes a device holds whose release is at least ``a`` and whose tail
      is at least ``b`` fit in ``makespan - a - b`` (a knapsack over device choices);
    - one cumulative of all nodes on the ``D`` devices;
    - symmetry breaking: the other devices are first used in topological order; branches between
      entry and exit that are identical (same durations, edges and transfer ticks, node by node in
      topological order) start in order of their first node; twin nodes (same predecessors,
      successors, duration and ticks) start in order. Relabelling devices, permuting identical
      branches and swapping twins map schedules to schedules of the same makespan, and the three
      orders can be imposed one after the other, so some optimal schedule satisfies them all.

    Parameters
    ----------
    problem : PlacementProblem
        One source, one sink, every device interchangeable and unlimited (as `segment_bound`).
    makespan : int
        The makespan to decide, in ticks.
    settings : SolverSettings
        Limit per CP-SAT run (there are two: exit on the entry's device, exit elsewhere).

    Returns
    -------
    str
        ``"infeasible"``: proven, no schedule ends by ``makespan`` (so the optimum exceeds it);
        ``"feasible"``: CP-SAT found one; ``"unknown"``: neither within the limit (or the problem is
        not of the supported shape).

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["s", "a", "b", "t"], ["s", "s", "a", "b"], ["a", "b", "t", "t"],
    ...               out_bytes=[1000, 1000, 1000, 0], compute_time={"cpu": [1.0, 10.0, 10.0, 1.0]})
    >>> p = PlacementProblem.identical(g, 2, bandwidth=10.0, time_unit=1.0)
    >>> segment_decision(p, 21, SolverSettings(time_limit=5)), segment_decision(p, 22, SolverSettings(time_limit=5))
    ('infeasible', 'feasible')
    """
    shape = _segment_shape(problem)
    if shape is None:
        return "unknown"
    entry, exit_ = shape
    if problem.n_devices == 1 or entry == exit_:
        return "feasible" if makespan >= problem.critical_path_ticks() and makespan >= problem.total_work_ticks() else "infeasible"
    costs = _SegmentCosts.of(problem)
    return _decide(costs, int(makespan), entry, exit_, _off_device_offsets(problem, costs, entry, exit_, settings), settings)


def _decide(costs: _SegmentCosts, makespan: int, entry: int, exit_: int, offsets, settings: SolverSettings,
            runs: list[tuple[bool, float]] | None = None, deadline: float | None = None, parallel: bool = False) -> str:
    """`segment_decision` once the shape is checked and the offsets known (bisection reuses both).

    ``parallel``: the two exit cases run at once, one worker each, and the first case that is not
    refuted stops the other (the verdict is the same as in turn: both must be refuted)."""
    head, tail = offsets
    waiting = []  # with ``parallel``, the cases built: both run at once below
    for exit_device in (0, 1):
        if _stopped(settings):
            return "unknown"
        model = _DecisionModel(costs, makespan, entry, exit_, exit_device, head, tail)
        if model.infeasible:
            continue
        if parallel:
            waiting.append(model.model)
            continue
        # in turn, each built only when needed: an open case settles nothing, the other need not be run
        _, code = _solve_decision(model.model, _until(settings, deadline), runs)
        verdict = _VERDICTS.get(code, "unknown")
        if verdict != "infeasible":
            return verdict
    if len(waiting) == 2:
        return _decide_both(waiting, _until(settings, deadline), runs)
    if waiting:  # one case left: nothing to run beside it
        _, code = _solve_decision(waiting[0], _until(settings, deadline), runs)
        return _VERDICTS.get(code, "unknown")
    return "infeasible"


_VERDICTS = {cp_model.INFEASIBLE: "infeasible", cp_model.OPTIMAL: "feasible", cp_model.FEASIBLE: "feasible"}


def _decide_both(models: list, settings: SolverSettings, runs: list[tuple[bool, float]] | None) -> str:
    """Both exit cases in two threads (CP-SAT leaves the interpreter while it searches); a case
    that is not refuted stops the other, and so do the caller's stop and Ctrl-C (as `StoppableSolver`:
    recorded in the caller's stop, else raised again once both have stopped)."""
    pair = StopSignal()
    verdicts = ["unknown", "unknown"]  # a case that raised refutes nothing
    own: list[list[tuple[bool, float]]] = [[], []]
    errors: list[BaseException] = []
    done = threading.Semaphore(0)  # not Thread.join: an interrupted join can leave is_alive() wrong

    def case(i: int) -> None:
        try:
            _, code = _solve_decision(models[i], replace(settings, stop=pair), own[i])
            verdicts[i] = _VERDICTS.get(code, "unknown")
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)
        finally:
            if verdicts[i] != "infeasible":
                pair.stop("decided")
            done.release()

    interrupted, finished = False, 0
    caller = settings.stop.watch(lambda: pair.stop(settings.stop.reason or "time")) if settings.stop is not None else nullcontext()
    with caller:
        for i in (0, 1):
            threading.Thread(target=case, args=(i,), name="cp-sat-case", daemon=True).start()
        while finished < 2:
            try:
                finished += done.acquire(timeout=0.2)
            except KeyboardInterrupt:
                interrupted = True
                pair.stop("interrupted")
                if settings.stop is not None:
                    settings.stop.stop("interrupted")
    if interrupted and settings.stop is None:
        raise KeyboardInterrupt
    if runs is not None:
        runs.extend(own[0] + own[1])
    if errors:
        raise errors[0]
    if verdicts == ["infeasible", "infeasible"]:
        return "infeasible"
    return "feasible" if "feasible" in verdicts else "unknown"


def segment_proof_bound(problem: PlacementProblem, upper: int, settings: SolverSettings, *, lower: int | None = None, probes: int = 12,
                        seconds: float | None = None, parallel: bool = False) -> tuple[int, list[dict]]:
    """The largest makespan bound `segment_decision` proves below ``upper``, by bisection.

    Parameters
    ----------
    problem : PlacementProblem
        As for `segment_decision`.
    upper : int
        A makespan known to be achievable (an incumbent's), in ticks.
    settings : SolverSettings
        Limit per CP-SAT run.
    lower : int, optional
        A bound already proven (default ``problem.lower_bound_ticks()``).
    probes : int
        Most decisions tried.
    seconds : float, optional
        Wall seconds for the whole bisection, the offsets' solves included: each CP-SAT run may
        take what is left of them (within ``settings``' own caps), and no probe starts after.
        A caller with a few seconds for several probes gives them this way rather than as a
        per-run cap: a refutation needs about a second of wall time on a 42-58-op segment while
        an undecided probe runs to its limit, and caps of a tenth of a second each decided
        nothing (60-s runs on tblock2_d4: every probe undecided, the bound as before).
    parallel : bool
        Run each probe's two CP-SAT runs at once, one worker each (a caller with two cores and no
        promise to repeat: which run stops the other, and so the work charged, depends on timing).

    Each probe tries the makespan a third of the way up the gap left; ``upper - 1`` comes first
    only when the gap is within `CLOSE_GAP` of ``upper`` (then the incumbent may well be optimal
    and one refutation closes the gap). A refutation comes in about a second, an undecided probe
    runs to its limit, so the cheaper side goes first: a 42-op transformer MLP on 4 devices
    (gap 166,820-175,910, 0.25 deterministic s a run) refuted 171,364 in 0.9 s but nothing from
    171,577 up in 1.3-3.7 s each, and ``upper - 1`` first had cost 2 s for nothing.

    Returns
    -------
    (int, list of dict)
        A lower bound on the optimum in ticks (``upper`` itself when ``upper - 1`` is refuted: then
        ``upper`` is optimal), and each probe's ``makespan``, ``verdict``, ``seconds`` and
        ``wall_capped`` (a deterministic run cut by the wall clock: the bound may not repeat) and
        ``work`` (CP-SAT deterministic seconds; the first probe's include the offsets' solves).
    """
    if seconds is not None and not math.isfinite(seconds):
        raise ValueError(f"segment_proof_bound: seconds must be a finite number, got {seconds!r}")
    lo = max(int(lower if lower is not None else 0), problem.lower_bound_ticks())  # proven: optimum >= lo
    hi = int(upper) - 1  # the largest makespan still worth refuting
    log_: list[dict] = []
    shape = _segment_shape(problem)
    if shape is None or problem.n_devices == 1 or shape[0] == shape[1] or lo > hi:
        return lo, log_
    deadline = None if seconds is None else time.perf_counter() + max(float(seconds), 0.0)
    runs: list[tuple[bool, float]] = []  # per CP-SAT run: cut by the wall clock, deterministic seconds (the first probe also owns the offsets' runs)
    costs = _SegmentCosts.of(problem)
    offsets = _off_device_offsets(problem, costs, shape[0], shape[1], settings, runs, deadline)
    close = hi - lo <= CLOSE_GAP * upper
    while lo <= hi and len(log_) < probes and not _stopped(settings) and (deadline is None or time.perf_counter() < deadline):
        t = hi if close and not log_ else lo + (hi - lo) // 3
        started, first = time.perf_counter(), len(runs) if log_ else 0
        verdict = _decide(costs, t, shape[0], shape[1], offsets, settings, runs, deadline, parallel)
        log_.append({"makespan": t, "verdict": verdict, "seconds": time.perf_counter() - started,
                     "wall_capped": any(cut for cut, _ in runs[first:]), "work": sum(work for _, work in runs[first:])})
        if verdict == "infeasible":
            lo = t + 1
        else:
            hi = t - 1
    return lo, log_


#: `segment_proof_bound` probes ``upper - 1`` first when the gap is at most this share of ``upper``.
CLOSE_GAP = 0.01

#: Nodes with at most this many ancestors (descendants) get their off-device offset from an exact solve.
_OFFSET_NODES = 16

#: CP-SAT seconds for each such solve (its bound is used, so a cut-off solve is still valid).
_OFFSET_SECONDS = 5.0


def _segment_shape(problem: PlacementProblem) -> tuple[int, int] | None:
    g = problem.graph
    if problem.n_nodes == 0 or len(problem.identical_devices) != 1 or np.any(~problem.allowed_devices()):
        return None
    # Relabelling devices must map schedules to schedules: no memory limits, one price per edge.
    if any(d.memory is not None for d in problem.devices) or (g.n_edges and problem.uniform_transfer_ticks() is None):
        return None
    sources, sinks = np.flatnonzero(g.in_degree == 0), np.flatnonzero(g.out_degree == 0)
    if len(sources) != 1 or len(sinks) != 1:
        return None
    return int(sources[0]), int(sinks[0])


def _off_device_offsets(problem, costs: _SegmentCosts, entry: int, exit_: int, settings: SolverSettings,
                        runs: list[tuple[bool, float]] | None = None, deadline: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Earliest start of each node off the entry's device, least tail of each node off the exit's device.

    Start from the cheapest-crossing offsets of `segment_bound`; for a node with few ancestors,
    the optimum of "the node's ancestors and the node, entry on device 0, the node elsewhere" is
    a valid earliest start (dropping every other node only relaxes the problem), and likewise for
    tails with the descendants. Identical small problems (repeated branches) are solved once.
    None is solved after ``deadline`` (a `time.perf_counter` reading), each within what is left of it.
    """
    g, dur = problem.graph, costs.dur
    head, tail = costs.offsets(entry, exit_)
    small = _capped(settings, _OFFSET_SECONDS)
    cache: dict[bytes, int] = {}
    topo_pos = np.empty(g.n_nodes, dtype=np.int64)
    topo_pos[g.topological_order()] = np.arange(g.n_nodes)
    anc = ancestor_matrix(g)
    for related, out in ((anc, head), (anc.T, tail)):  # a row of anc.T: the node's descendants
        for v in range(g.n_nodes):
            rel = np.flatnonzero(related[v]).tolist()
            if not 0 < len(rel) <= _OFFSET_NODES or _stopped(settings) or (deadline is not None and time.perf_counter() >= deadline):
                continue  # a node left keeps its cheapest-crossing offset, which stays valid
            nodes = sorted([*rel, v], key=lambda u: topo_pos[u])
            sub = subproblem(problem, nodes)
            key = sub.signature()
            if key not in cache:
                s_entry, s_exit = _segment_shape(sub)
                # The node is the sink (heads) or the source (tails) of `sub`; either way it sits off
                # the device of the other end, which is device 0 for the source.
                model = _DecisionModel(_SegmentCosts.of(sub), None, s_entry, s_exit, 1, None, None)
                solver, _ = _solve_decision(model.model, _until(small, deadline), runs)
                cache[key] = int(solver.BestObjectiveBound())
            out[v] = max(int(out[v]), cache[key] - int(dur[v]))
    return head, tail


def _solve_decision(model: cp_model.CpModel, settings: SolverSettings, runs: list[tuple[bool, float]] | None = None):
    """Solve; OR-Tools 9.15's presolve can fail with an internal IndexError on these models
    (seen on a 7-node fork with the energy rows and the cumulative): then solve without presolve.
    Appends to ``runs`` whether a deterministic run was cut by the wall clock (not reproducible)
    and its deterministic seconds.

    Without CP-SAT's LP unless ``settings`` name a level: a refutation on a 42-op transformer MLP on
    8 devices took 1.1-1.6 s a case without it against 1.6-3.7 s with the default level (2.35 and
    3.16 s with it at a third of the gap, 1.22 and 1.17 without; 11-14 s with level 2), and the
    offsets' solves came out the same on every segment of tblock2_d4/d8 and tblock1_h32_d8."""
    if settings.linearization_level is None:
        settings = replace(settings, linearization_level=0)
    solver = make_solver(settings)
    try:
        code = solver.Solve(model)
    except IndexError:
        log.debug("CP-SAT presolve failed on a segment decision model; solving without presolve")
        solver = make_solver(settings)
        solver.parameters.cp_model_presolve = False
        code = solver.Solve(model)
    if runs is not None:
        runs.append((wall_capped(settings, solver), float(solver.deterministic_time)))
    return solver, code


def _stopped(settings: SolverSettings) -> bool:
    """The caller's stop (its clock, Ctrl-C) came: build no further model (each takes a second
    on a loaded machine; a 60-s run ended 1.2 s late building the decision models after it)."""
    return settings.stop is not None and settings.stop.stopped


def _capped(settings: SolverSettings, seconds: float) -> SolverSettings:
    return replace(settings, time_limit=min(settings.time_limit, seconds), max_deterministic_time=None)


def _until(settings: SolverSettings, deadline: float | None) -> SolverSettings:
    """``settings`` with its wall clock cut to end by ``deadline`` (a `time.perf_counter` reading)."""
    if deadline is None:
        return settings
    rest = max(deadline - time.perf_counter(), 1e-3)
    if settings.deterministic:
        return replace(settings, wall_cap_s=min(wall_cap(settings), rest))
    return replace(settings, time_limit=min(settings.time_limit, rest))


class _DecisionModel:
    """The strengthened segment model: decide ``makespan`` (or, with None, minimise it without offsets)."""

    def __init__(self, costs: _SegmentCosts, makespan, entry, exit_, exit_device, head, tail):
        g = self.graph = costs.graph
        D, dur, head0, tail0 = costs.n_devices, costs.dur, costs.head0, costs.tail0
        n = len(dur)
        if head is None:
            head, tail = costs.offsets(entry, exit_)
        T = int(makespan) if makespan is not None else int(dur.sum() + head.max() + tail.max() + 1)
        self.infeasible = False
        m = self.model = cp_model.CpModel()
        mk = m.NewIntVar(0, T, "makespan")
        self.start, self.x = [], []
        per_device: list[list] = [[] for _ in range(D)]
        release, tails = costs.windows(head, tail, entry, exit_device)
        for v in range(n):
            lo_v, hi_v = int(head0[v]), T - int(tail0[v]) - int(dur[v])
            if lo_v > hi_v:
                self.infeasible = True
                return
            s = m.NewIntVar(lo_v, hi_v, f"start[{v}]")
            xs = {}
            for d in range(D):
                lit = xs[d] = m.NewBoolVar(f"on[{v},{d}]")
                lo, hi = int(release[v, d]), T - int(tails[v, d]) - int(dur[v])
                if lo > hi or (v == entry and d != 0) or (v == exit_ and d != exit_device):
                    m.Add(lit == 0)
                    continue
                # An own start per device carries that device's window into its NoOverlap.
                sd = m.NewIntVar(lo, hi, f"start[{v},{d}]")
                m.Add(sd == s).OnlyEnforceIf(lit)
                per_device[d].append(m.NewOptionalFixedSizeIntervalVar(sd, int(dur[v]), lit, f"run[{v},{d}]"))
                m.Add(mk >= s + int(dur[v] + tails[v, d])).OnlyEnforceIf(lit)
            m.AddExactlyOne(xs.values())
            m.Add(mk >= s + int(dur[v] + tail0[v]))
            self.start.append(s)
            self.x.append(xs)
        for ivs in per_device:
            if len(ivs) > 1:
                m.AddNoOverlap(ivs)
        m.AddCumulative([m.NewFixedSizeIntervalVar(s, int(dur[v]), f"busy[{v}]") for v, s in enumerate(self.start)], [1] * n, D)
        m.Add(D * mk >= int(dur.sum()))
        for k in range(g.n_edges):
            u, v = int(g.src[k]), int(g.dst[k])
            m.Add(self.start[v] >= self.start[u] + int(dur[u]))
            t = int(costs.cross[k])
            if t > 0:
                same = m.NewBoolVar(f"same[{k}]")
                m.Add(self.start[v] >= self.start[u] + int(dur[u]) + t).OnlyEnforceIf(same.Not())
                for d in range(D):
                    m.AddBoolOr([self.x[u][d].Not(), self.x[v][d].Not(), same])
                    m.AddBoolOr([same.Not(), self.x[u][d].Not(), self.x[v][d]])
        if makespan is not None:
            add_energy(m, self.x, dur, release, tails, T, most=24)
        self._symmetry(entry, exit_, exit_device, costs)
        if makespan is None:
            m.Minimize(mk)

    def _symmetry(self, entry, exit_, exit_device, costs: _SegmentCosts) -> None:
        m, g, dur = self.model, self.graph, costs.dur
        topo = g.topological_order().tolist()
        # The devices other than the entry's and the exit's are interchangeable: first used in order.
        free = [d for d in range(costs.n_devices) if d not in (0, exit_device)]
        first_use_chain(m, self.x, topo, free, lambda v, d: f"used[{d},{v}]")
        t = costs.ticks.reshape(len(costs.ticks), -1).tolist() if g.n_edges else []
        # Twins: same duration, same neighbours through edges of the same ticks.
        groups: dict = {}
        for v in range(g.n_nodes):
            ins = tuple(sorted((int(g.src[k]), tuple(t[k])) for k in g.pred_edge[g.pred_ptr[v]:g.pred_ptr[v + 1]].tolist()))
            outs = tuple(sorted((int(g.dst[k]), tuple(t[k])) for k in g.succ_edge[g.succ_ptr[v]:g.succ_ptr[v + 1]].tolist()))
            groups.setdefault((int(dur[v]), ins, outs), []).append(v)
        pos = {v: i for i, v in enumerate(topo)}
        for vs in groups.values():
            vs = sorted(vs, key=pos.get)
            for a, b in zip(vs, vs[1:]):
                m.Add(self.start[a] <= self.start[b])
        # Identical branches between entry and exit.
        for branches in _identical_branches(g, entry, exit_, dur, t).values():
            for c1, c2 in zip(branches, branches[1:]):
                m.Add(self.start[c1[0]] <= self.start[c2[0]])


def _identical_branches(g, entry: int, exit_: int, dur, t) -> dict:
    """Weakly connected parts of the graph without entry and exit, grouped when identical node by node.

    Nodes of a part are listed in topological order; two parts are identical when their durations
    and their edges (inside, from the entry, to the exit, with per-pair ticks) agree at every index,
    which makes "index i to index i" an isomorphism. Groups list their parts by first node.
    """
    parent = list(range(g.n_nodes))

    for k in range(g.n_edges):
        u, v = int(g.src[k]), int(g.dst[k])
        if entry not in (u, v) and exit_ not in (u, v):
            parent[find_root(parent, u)] = find_root(parent, v)
    parts: dict[int, list[int]] = {}
    for v in g.topological_order().tolist():
        if v not in (entry, exit_):
            parts.setdefault(find_root(parent, v), []).append(v)
    groups: dict = {}
    for nodes in parts.values():
        local = {v: i for i, v in enumerate(nodes)}
        edges = []
        for k in range(g.n_edges):
            u, v = int(g.src[k]), int(g.dst[k])
            if u in local or v in local:
                edges.append((local.get(u, -1 if u == entry else -2), local.get(v, -1 if v == entry else -2), tuple(t[k])))
        groups.setdefault((tuple(int(dur[v]) for v in nodes), tuple(sorted(edges))), []).append(nodes)
    return {key: parts_ for key, parts_ in groups.items() if len(parts_) > 1}
