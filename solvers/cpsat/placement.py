"""CP-SAT model of the placement problem: device, start and per-device order of every node, minimising makespan.

One optional interval per (node, allowed device) with an exactly-one choice, a NoOverlap per device,
and precedence that pays the link's transfer only when producer and consumer sit apart. Static
lower bounds, a heuristic horizon and symmetry breaking over identical devices keep the domains
small and let proofs close. The answer is judged elsewhere (`incsched.evaluate.simulate`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from incsched.baselines.placement import list_schedule, mean_costs
from incsched.evaluate.simulate import Schedule, simulate
from incsched.problems.placement import Placement, PlacementError, PlacementProblem, PlacementWindow

from .. import SolverOutput, SolverSettings
from .params import STATUS_NAMES, make_solver, wall_capped

__all__ = ["solve_placement", "segment_bound", "segment_decision", "segment_proof_bound"]

log = logging.getLogger(__name__)

BACKEND = "cpsat-placement"


@dataclass
class _Bounds:
    """Window-aware static bounds in ticks: fastest allowed duration, head and tail of each node."""

    dmin: np.ndarray  # [n] fastest allowed duration
    head: np.ndarray  # [n] longest path of fastest durations ending at the node's start
    tail: np.ndarray  # [n] longest path of fastest durations after the node's end
    critical_path: int
    work: int  # ceil(sum dmin / D)

    @property
    def lower_bound(self) -> int:
        return max(self.critical_path, self.work)


def solve_placement(
    problem: PlacementProblem,
    settings: SolverSettings,
    window: PlacementWindow | None = None,
    hint: Placement | Schedule | None = None,
) -> SolverOutput:
    """Minimise the makespan of ``problem`` exactly (within ``window``, when given) with CP-SAT.

    Parameters
    ----------
    problem : PlacementProblem
        Graph, devices, links; all costs in the problem's integer ticks.
    settings : SolverSettings
        Time limit, determinism, seed, workers (applied by `solvers.cpsat.params.make_solver`).
    window : PlacementWindow, optional
        Allowed devices per node and optional start-tick ranges; the model is restricted to it.
        Symmetry breaking over identical devices is used only without a window.
    hint : Placement or Schedule, optional
        An incumbent to start from (``AddHint`` on every variable). Its device labels are
        permuted to agree with the symmetry breaking; a hint that deadlocks is ignored.

    Returns
    -------
    SolverOutput
        ``assignment`` (device per node), ``start`` (ticks), ``objective`` and ``bound`` in ticks.
        ``start`` is CP-SAT's solution run in its own per-device order as early as possible, and
        ``objective`` its makespan: never above CP-SAT's objective (``info["cpsat_objective"]``,
        raw starts in ``info["cpsat_start"]``) and equal to it when proven optimal.
        ``info`` holds ``order`` (per-device node order by start), ``time_unit``, ``horizon``,
        ``lower_bound`` and its parts, ``hinted``, ``hint_makespan``, ``symmetry_breaking``,
        ``reproducible`` and CP-SAT statistics. ``infeasible`` outputs carry ``info["reason"]``.

    Raises
    ------
    PlacementError
        If the window does not fit the problem's shape.

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["a", "b", "c"], ["a", "a"], ["b", "c"], out_bytes=[100, 0, 0],
    ...               compute_time={"cpu": [1.0, 1.0, 1.0]})
    >>> p = PlacementProblem.identical(g, 2, bandwidth=100.0, time_unit=1.0)
    >>> out = solve_placement(p, SolverSettings(time_limit=5))
    >>> out.status, out.objective
    ('optimal', 3.0)
    """
    t0 = time.perf_counter()
    n, D = problem.n_nodes, problem.n_devices
    allowed = problem.allowed_devices().copy()
    if window is not None:
        window.check(problem)
        if window.allowed is not None:
            allowed &= window.allowed
    empty = np.flatnonzero(~allowed.any(axis=1)) if n else np.zeros(0, np.int64)
    if empty.size:
        v = int(empty[0])
        return _infeasible(t0, f"node {problem.graph.names[v]!r} has no allowed device that can hold its parameters")

    bounds = _static_bounds(problem, allowed)
    horizon, horizon_source = _horizon(problem, allowed, window, hint)
    hint_sched, hint_note = _hint_schedule(problem, hint)
    symmetric = window is None and any(len(g) > 1 for g in problem.identical_devices)
    if hint_sched is not None and symmetric:
        hint_sched = _canonical(problem, hint_sched)
    if horizon < bounds.lower_bound:
        return _infeasible(t0, f"window horizon {horizon} is below the lower bound {bounds.lower_bound}")

    model = cp_model.CpModel()
    m = _PlacementModel(problem, model, allowed, bounds, horizon, window)
    if m.empty_domain is not None:
        return _infeasible(t0, m.empty_domain)
    m.add_devices()
    m.add_precedence()
    m.add_makespan()
    if symmetric:
        m.add_symmetry_breaking()
    if hint_sched is not None:
        m.add_hint(hint_sched)
    m.add_search_strategy()
    model.Minimize(m.makespan)
    build_s = time.perf_counter() - t0

    solver = make_solver(settings)
    code = solver.Solve(model)
    status = STATUS_NAMES.get(code, "unknown")
    info = {
        "units": "ticks",
        "time_unit": problem.time_unit,
        "horizon": int(horizon),
        "horizon_source": horizon_source,
        "lower_bound": bounds.lower_bound,
        "lower_bound_parts": {"critical_path": bounds.critical_path, "work_per_device": bounds.work},
        "hinted": hint_sched is not None,
        "hint_makespan": None if hint_sched is None else int(hint_sched.makespan),
        "hint_note": hint_note,
        "symmetry_breaking": symmetric,
        "window": window is not None,
        "reproducible": bool(settings.deterministic),
        "cpsat_status": solver.StatusName(code),
        "build_seconds": build_s,
        "solve_seconds": solver.WallTime(),
        "deterministic_time": solver.deterministic_time,
        "wall_capped": wall_capped(settings, solver),
        "branches": solver.NumBranches(),
        "conflicts": solver.NumConflicts(),
        "n_variables": len(model.Proto().variables),
        "n_constraints": len(model.Proto().constraints),
    }
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        assignment, raw_start = m.solution(solver)
        placement = Placement.from_assignment(assignment, D, start=raw_start, method="cpsat")
        info["order"] = [list(seq) for seq in placement.order]
        info["cpsat_objective"] = float(solver.ObjectiveValue())
        info["cpsat_start"] = raw_start.tolist()
        # A solution short of optimal may keep idle slack; running its order as soon as possible
        # (what a runtime does) can only end earlier, so that is the schedule returned.
        executed = simulate(problem, placement, "ordered")
        start = np.asarray(executed.start, dtype=np.int64)
        objective = float(min(executed.makespan, info["cpsat_objective"]))
        bound = float(max(solver.BestObjectiveBound(), bounds.lower_bound))
        log.info(
            "placement %r: %s makespan %d ticks, bound %d (hint %s) in %.2fs",
            problem.name, status, objective, bound, info["hint_makespan"], solver.WallTime(),
        )
        return SolverOutput(status, assignment, objective, bound, time.perf_counter() - t0, BACKEND, start=start, info=info)
    if code == cp_model.INFEASIBLE:
        info["reason"] = "CP-SAT proved the (windowed) placement model infeasible"
    bound = float(max(solver.BestObjectiveBound(), bounds.lower_bound)) if status == "unknown" else None
    return SolverOutput(status, None, None, bound, time.perf_counter() - t0, BACKEND, info=info)


# ---------------------------------------------------------------------- bounds, horizon, hint


def _static_bounds(problem: PlacementProblem, allowed: np.ndarray) -> _Bounds:
    g = problem.graph
    n, D = problem.n_nodes, problem.n_devices
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return _Bounds(z, z, z, 0, 0)
    dur = problem.durations()
    dmin = np.where(allowed, dur, np.iinfo(np.int64).max).min(axis=1)
    w = dmin.astype(np.float64)
    # Transfers are free here (any edge may be kept on one device), so these bound every placement.
    head = np.rint(g.top_level(w, None)).astype(np.int64)
    tail = np.rint(g.bottom_level(w, None)).astype(np.int64) - dmin
    cp = int((head + dmin + tail).max())
    work = -(-int(dmin.sum()) // D)
    return _Bounds(dmin, head, tail, cp, work)


def _horizon(problem, allowed, window, hint) -> tuple[int, str]:
    """An upper bound on the (windowed) optimum: the best in-window heuristic or hint schedule."""
    g = problem.graph
    dur, ticks = problem.durations(), problem.transfer_ticks()
    # Running nodes one after another, each on its slowest allowed device and paying the dearest
    # transfer, is always possible: a safe horizon when no heuristic fits the window.
    slow = np.where(allowed, dur, 0).max(axis=1)
    best, source = int(slow.sum() + (ticks.max(axis=(1, 2)).sum() if g.n_edges else 0)), "serial"
    if window is not None and window.start_hi is not None:
        best = min(best, int((window.start_hi + slow).max())) if problem.n_nodes else best
        source = "window"
    candidates = []
    node_cost, edge_cost = mean_costs(problem)
    try:
        candidates.append(("heft", list_schedule(problem, g.bottom_level(node_cost, edge_cost), insertion=True, allowed=allowed)))
    except PlacementError as exc:
        log.debug("no heuristic horizon: %s", exc)
    if hint is not None:
        candidates.append(("hint", hint.to_placement() if isinstance(hint, Schedule) else hint))
    for name, pl in candidates:
        try:
            s = simulate(problem, pl, "ordered")
        except PlacementError:
            continue
        fits = window is None or window.contains(problem, s.device, s.start)
        fits = fits and bool(np.all(allowed[np.arange(problem.n_nodes), s.device])) and s.memory_ok
        if fits and s.makespan < best:
            best, source = s.makespan, name
    return best, source


def _hint_schedule(problem, hint) -> tuple[Schedule | None, str]:
    if hint is None:
        return None, ""
    pl = hint.to_placement() if isinstance(hint, Schedule) else hint
    try:
        return simulate(problem, pl, "ordered"), "ok"
    except PlacementError as exc:
        log.warning("placement hint ignored: %s", exc)
        return None, f"ignored: {exc}"


def _canonical(problem: PlacementProblem, sched: Schedule) -> Schedule:
    """Relabel identical devices by first use in topological order, as the symmetry breaking demands."""
    topo = problem.graph.topological_order().tolist()
    mapping = np.arange(problem.n_devices)
    for group in problem.identical_devices:
        first = {d: len(topo) for d in group}
        for pos, v in enumerate(topo):
            d = int(sched.device[v])
            if d in first and first[d] == len(topo):
                first[d] = pos
        by_use = sorted(group, key=lambda d: (first[d], d))
        for new, old in zip(group, by_use):
            mapping[old] = new
    relabelled = sched.to_placement().relabel(mapping)
    return simulate(problem, relabelled, "ordered")


def _infeasible(t0: float, reason: str) -> SolverOutput:
    log.info("placement infeasible: %s", reason)
    return SolverOutput("infeasible", None, None, None, time.perf_counter() - t0, BACKEND, info={"reason": reason})


# ---------------------------------------------------------------------- the model


class _PlacementModel:
    """Variables and constraint families of the placement model, one method per family."""

    def __init__(self, problem, model, allowed, bounds: _Bounds, horizon: int, window):
        self.problem, self.model, self.allowed, self.bounds, self.horizon = problem, model, allowed, bounds, horizon
        g = problem.graph
        n, D = problem.n_nodes, problem.n_devices
        dur = problem.durations()
        self.empty_domain: str | None = None
        lo = bounds.head.copy()
        hi = horizon - bounds.tail - bounds.dmin
        if window is not None and window.start_lo is not None:
            lo = np.maximum(lo, window.start_lo)
        if window is not None and window.start_hi is not None:
            hi = np.minimum(hi, window.start_hi)
        bad = np.flatnonzero(lo > hi)
        if bad.size:
            v = int(bad[0])
            self.empty_domain = f"node {g.names[v]!r} has no feasible start in [{int(lo[v])}, {int(hi[v])}] within horizon {horizon}"
            return
        self.start, self.end = [], []
        self.x: list[dict[int, cp_model.IntVar]] = []
        self.intervals: list[list[cp_model.IntervalVar]] = [[] for _ in range(D)]
        for v in range(n):
            nm = g.names[v]
            devs = np.flatnonzero(allowed[v]).tolist()
            dmax = int(dur[v, devs].max())
            s = model.NewIntVar(int(lo[v]), int(hi[v]), f"start[{nm}]")
            e = model.NewIntVar(int(lo[v]) + int(bounds.dmin[v]), min(int(hi[v]) + dmax, horizon - int(bounds.tail[v])), f"end[{nm}]")
            xs = {}
            for d in devs:
                lit = model.NewBoolVar(f"on[{nm},{problem.devices[d].name}]")
                xs[d] = lit
                self.intervals[d].append(model.NewOptionalIntervalVar(s, int(dur[v, d]), e, lit, f"run[{nm},{problem.devices[d].name}]"))
            model.AddExactlyOne(xs.values())
            if len(devs) > 1:
                # Redundant with the intervals, but it gives the LP relaxation the end time.
                model.Add(e == s + sum(int(dur[v, d]) * lit for d, lit in xs.items()))
            self.start.append(s)
            self.end.append(e)
            self.x.append(xs)
        self.same: dict[int, cp_model.IntVar] = {}

    def add_devices(self) -> None:
        """One node at a time per device, and parameter memory within capacity."""
        for d, ivs in enumerate(self.intervals):
            if len(ivs) > 1:
                self.model.AddNoOverlap(ivs)
            cap = self.problem.devices[d].memory
            if cap is not None:
                params = self.problem.graph.param_bytes
                terms = [(int(params[v]), xs[d]) for v, xs in enumerate(self.x) if d in xs and params[v] > 0]
                if sum(c for c, _ in terms) > cap:
                    self.model.Add(sum(c * lit for c, lit in terms) <= cap)

    def add_precedence(self) -> None:
        """Consumer starts after producer ends, plus the transfer when they sit on different devices."""
        g, model = self.problem.graph, self.model
        ticks = self.problem.transfer_ticks()
        for k in range(g.n_edges):
            u, v = int(g.src[k]), int(g.dst[k])
            su, sv = self.x[u], self.x[v]
            apart = {(a, b): int(ticks[k, a, b]) for a in su for b in sv if a != b}
            model.Add(self.start[v] >= self.end[u])
            if not apart or max(apart.values()) == 0:
                continue
            common = [d for d in su if d in sv]
            delays = set(apart.values())
            if not common:
                model.Add(self.start[v] >= self.end[u] + min(delays))
                if len(delays) == 1:
                    continue
            if len(delays) == 1:
                self._uniform_delay(k, u, v, common, delays.pop())
            else:
                for (a, b), t in apart.items():
                    if t > 0:
                        model.Add(self.start[v] >= self.end[u] + t).OnlyEnforceIf([su[a], sv[b]])

    def _uniform_delay(self, k: int, u: int, v: int, common: list[int], t: int) -> None:
        # same <=> (u and v on one device): clauses both ways, so that fixing both placements
        # fixes `same` and the delay propagates at once.
        model, su, sv = self.model, self.x[u], self.x[v]
        g = self.problem.graph
        same = model.NewBoolVar(f"same[{g.names[u]}->{g.names[v]}]")
        self.same[k] = same
        model.Add(self.start[v] >= self.end[u] + t).OnlyEnforceIf(same.Not())
        for d in common:
            model.AddBoolOr([su[d].Not(), sv[d].Not(), same])
            model.AddBoolOr([same.Not(), sv[d].Not(), su[d]])
            model.AddBoolOr([same.Not(), su[d].Not(), sv[d]])
        for d in set(su) - set(common):
            model.AddImplication(same, su[d].Not())
        for d in set(sv) - set(common):
            model.AddImplication(same, sv[d].Not())

    def add_makespan(self) -> None:
        """Makespan covers every end plus the work that must follow it, and the static lower bounds."""
        model, b = self.model, self.bounds
        self.makespan = model.NewIntVar(b.lower_bound, self.horizon, "makespan")
        for v, e in enumerate(self.end):
            model.Add(self.makespan >= e + int(b.tail[v]))
        D = self.problem.n_devices
        dur = self.problem.durations()
        if D > 1 and self.end and np.all(dur == dur[:, :1]):
            # Identical durations: the nodes form one cumulative resource of D machines, whose
            # energy reasoning NoOverlap per device cannot see while devices are still open.
            whole = [model.NewIntervalVar(s, int(dur[v, 0]), e, f"busy[{v}]") for v, (s, e) in enumerate(zip(self.start, self.end))]
            model.AddCumulative(whole, [1] * len(whole), D)
        if D > 1 and self.end:
            # All devices together are busy no longer than D x makespan.
            model.Add(D * self.makespan >= sum(int(dur[v, d]) * lit for v, xs in enumerate(self.x) for d, lit in xs.items()))

    def add_symmetry_breaking(self) -> None:
        """Within each group of identical devices, device j+1 is first used after device j (topological order)."""
        model, names = self.model, self.problem.graph.names
        topo = self.problem.graph.topological_order().tolist()
        self.used: list[tuple[int, int, cp_model.IntVar]] = []  # (node, device, "device used by now")
        for group in self.problem.identical_devices:
            if len(group) < 2:
                continue
            used_prev: list = [None] * len(group)  # None: not used by any earlier node
            for v in topo:
                xs = self.x[v]
                if not all(d in xs for d in group):
                    continue  # memory differs per node only across non-identical devices; defensive
                used_now = []
                for j, d in enumerate(group):
                    if j > 0:
                        if used_prev[j - 1] is None:
                            model.Add(xs[d] == 0)
                        else:
                            model.AddImplication(xs[d], used_prev[j - 1])
                    if j == len(group) - 1:
                        used_now.append(None)  # nobody waits on the last device's first use
                        continue
                    lit = model.NewBoolVar(f"used[{self.problem.devices[d].name},{names[v]}]")
                    model.AddImplication(xs[d], lit)
                    if used_prev[j] is None:
                        model.AddImplication(lit, xs[d])
                    else:
                        model.AddImplication(used_prev[j], lit)
                        model.AddBoolOr([lit.Not(), used_prev[j], xs[d]])
                    used_now.append(lit)
                    self.used.append((v, d, lit))
                used_prev = used_now

    def add_hint(self, sched: Schedule) -> None:
        """Hint every decision variable from a feasible schedule (the symmetry literals follow from x)."""
        model = self.model
        for v in range(self.problem.n_nodes):
            model.AddHint(self.start[v], int(sched.start[v]))
            model.AddHint(self.end[v], int(sched.end[v]))
            for d, lit in self.x[v].items():
                model.AddHint(lit, int(sched.device[v]) == d)
        g = self.problem.graph
        for k, lit in self.same.items():
            model.AddHint(lit, int(sched.device[g.src[k]]) == int(sched.device[g.dst[k]]))
        if getattr(self, "used", None):
            pos = np.empty(self.problem.n_nodes, dtype=np.int64)
            pos[g.topological_order()] = np.arange(self.problem.n_nodes)
            first = {}
            for v in g.topological_order().tolist():
                first.setdefault(int(sched.device[v]), int(pos[v]))
            for v, d, lit in self.used:
                model.AddHint(lit, first.get(d, self.problem.n_nodes) <= pos[v])
        tail = self.bounds.tail
        model.AddHint(self.makespan, int(max(sched.makespan, self.bounds.lower_bound, int((sched.end + tail).max()) if len(tail) else 0)))

    def add_search_strategy(self) -> None:
        """List-scheduling order for the fixed-search worker: earliest possible start first."""
        if self.start:
            self.model.AddDecisionStrategy(self.start, cp_model.CHOOSE_LOWEST_MIN, cp_model.SELECT_MIN_VALUE)

    def solution(self, solver: cp_model.CpSolver) -> tuple[np.ndarray, np.ndarray]:
        n = self.problem.n_nodes
        assignment = np.zeros(n, dtype=np.int64)
        start = np.zeros(n, dtype=np.int64)
        for v in range(n):
            start[v] = solver.Value(self.start[v])
            assignment[v] = next(d for d, lit in self.x[v].items() if solver.BooleanValue(lit))
        return assignment, start


# ---------------------------------------------------------------------- a relaxation that bounds a segment


def segment_bound(problem: PlacementProblem, settings: SolverSettings) -> tuple[int, bool]:
    """A lower bound on the makespan of a single-entry, single-exit placement problem of identical devices.

    Relaxation of the exact model that keeps what makes transfers expensive and drops the order:
    with the entry node on device 0 (devices are interchangeable) and the exit node on device 0 or
    1, a node off the entry's device cannot start before the cheapest crossing from the entry
    reaches it, and a node off the exit's device must leave time for the cheapest crossing to the
    exit. On every device, the nodes that start at least ``alpha`` late and end at least ``beta``
    early fit in ``makespan - alpha - beta`` whenever the device holds any of them: a knapsack per
    device and threshold pair, over device choices only, which CP-SAT bounds quickly. Every
    schedule satisfies every constraint, so CP-SAT's best bound on it bounds the real makespan.

    Parameters
    ----------
    problem : PlacementProblem
        Devices all interchangeable (``len(problem.identical_devices) == 1``).
    settings : SolverSettings
        Budget for each of (at most) two CP-SAT runs.

    Returns
    -------
    (int, bool)
        The bound in ticks (at least ``problem.lower_bound_ticks()``), and whether a deterministic
        run was cut by the wall clock (then the bound, though valid, may differ between runs).

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
    n, D = problem.n_nodes, problem.n_devices
    trivial = problem.lower_bound_ticks()
    if n < 3 or D < 2 or len(problem.identical_devices) != 1 or np.any(~problem.allowed_devices()):
        return trivial, False
    dur = problem.durations()[:, 0].astype(np.int64)
    off = ~np.eye(D, dtype=bool)
    cross = problem.transfer_ticks()[:, off].min(axis=1) if g.n_edges else np.zeros(0, np.int64)
    sources = np.flatnonzero(g.in_degree == 0)
    sinks = np.flatnonzero(g.out_degree == 0)
    entry = int(sources[0]) if len(sources) == 1 else None
    exit_ = int(sinks[0]) if len(sinks) == 1 else None
    head0 = np.rint(g.top_level(dur.astype(np.float64), None)).astype(np.int64)
    tail0 = np.rint(g.bottom_level(dur.astype(np.float64), None)).astype(np.int64) - dur
    head_off = _crossing_offsets(g, dur, cross, head0, entry, forward=True)
    tail_off = _crossing_offsets(g, dur, cross, tail0, exit_, forward=False)
    best, capped = None, False
    for exit_device in ([0, 1] if exit_ is not None else [None]):
        value, cut = _segment_relaxation(problem, settings, dur, head0, tail0, head_off, tail_off, entry, exit_, exit_device)
        best = value if best is None else min(best, value)
        capped = capped or cut
    return max(trivial, int(best)), capped


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


def _segment_relaxation(problem, settings, dur, head0, tail0, head_off, tail_off, entry, exit_, exit_device) -> tuple[int, bool]:
    n, D = problem.n_nodes, problem.n_devices
    model = cp_model.CpModel()
    horizon = int(dur.sum() + head_off.max() + tail_off.max() + 1)
    makespan = model.NewIntVar(0, horizon, "makespan")
    x = [[model.NewBoolVar(f"on[{v},{d}]") for d in range(D)] for v in range(n)]
    release = np.empty((n, D), dtype=np.int64)
    tail = np.empty((n, D), dtype=np.int64)
    for d in range(D):
        release[:, d] = head0 if (entry is None or d == 0) else head_off
        tail[:, d] = tail0 if (exit_ is None or d == exit_device) else tail_off
    for v in range(n):
        model.AddExactlyOne(x[v])
        for d in range(D):
            model.Add(makespan >= int(release[v, d] + dur[v] + tail[v, d])).OnlyEnforceIf(x[v][d])
    if entry is not None:
        model.Add(x[entry][0] == 1)
    if exit_ is not None:
        model.Add(x[exit_][exit_device] == 1)
    model.Add(D * makespan >= int(dur.sum()))
    for d in range(D):
        alphas = _thresholds(release[:, d])
        betas = _thresholds(tail[:, d])
        for a in alphas:
            for b in betas:
                members = [v for v in range(n) if release[v, d] >= a and tail[v, d] >= b]
                if not members:
                    continue
                # The window shrinks by a + b only when some member is really on d.
                some = model.NewBoolVar(f"holds[{d},{a},{b}]")
                for v in members:
                    model.AddImplication(x[v][d], some)
                model.Add(sum(int(dur[v]) * x[v][d] for v in members) + (int(a) + int(b)) * some <= makespan)
    model.Minimize(makespan)
    solver = make_solver(settings)
    solver.Solve(model)
    return int(solver.BestObjectiveBound()), wall_capped(settings, solver)


def _thresholds(values: np.ndarray, most: int = 12) -> list[int]:
    # Any threshold gives a valid constraint; a dozen well-spread ones keep the model small.
    distinct = np.unique(values)
    if len(distinct) > most:
        distinct = np.unique(distinct[np.linspace(0, len(distinct) - 1, most).round().astype(int)])
    return distinct.tolist()


# ---------------------------------------------------------------------- proofs for a segment: the decision model


def segment_decision(problem: PlacementProblem, makespan: int, settings: SolverSettings, *, offsets=None,
                     capped: list[bool] | None = None) -> str:
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
    offsets : (array, array), optional
        `_off_device_offsets` of the problem, when already computed (bisection reuses them).

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
    head, tail = offsets if offsets is not None else _off_device_offsets(problem, entry, exit_, settings, capped)
    for exit_device in (0, 1):
        model = _DecisionModel(problem, int(makespan), entry, exit_, exit_device, head, tail)
        if model.infeasible:
            continue
        solver, code = _solve_decision(model.model, settings, capped)
        verdict = {cp_model.INFEASIBLE: "infeasible", cp_model.OPTIMAL: "feasible", cp_model.FEASIBLE: "feasible"}.get(code, "unknown")
        if verdict != "infeasible":
            return verdict  # an open case settles nothing: the other one need not be run
    return "infeasible"


def segment_proof_bound(problem: PlacementProblem, upper: int, settings: SolverSettings, *, lower: int | None = None, probes: int = 12) -> tuple[int, list[dict]]:
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

    Returns
    -------
    (int, list of dict)
        A lower bound on the optimum in ticks (``upper`` itself when ``upper - 1`` is refuted: then
        ``upper`` is optimal), and each probe's ``makespan``, ``verdict``, ``seconds`` and
        ``wall_capped`` (a deterministic run cut by the wall clock: the bound may not repeat).
    """
    lo = max(int(lower if lower is not None else 0), problem.lower_bound_ticks())  # proven: optimum >= lo
    hi = int(upper) - 1  # the largest makespan still worth refuting
    log_: list[dict] = []
    shape = _segment_shape(problem)
    if shape is None or problem.n_devices == 1 or shape[0] == shape[1] or lo > hi:
        return lo, log_
    capped: list[bool] = []  # per CP-SAT run: cut by the wall clock (the first probe also owns the offsets' runs)
    offsets = _off_device_offsets(problem, shape[0], shape[1], settings, capped)
    while lo <= hi and len(log_) < probes:
        # Refuting upper - 1 first closes the gap at once when the incumbent is optimal.
        t = hi if not log_ else (lo + hi) // 2
        started, runs = time.perf_counter(), len(capped) if log_ else 0
        verdict = segment_decision(problem, t, settings, offsets=offsets, capped=capped)
        log_.append({"makespan": t, "verdict": verdict, "seconds": time.perf_counter() - started, "wall_capped": any(capped[runs:])})
        if verdict == "infeasible":
            lo = t + 1
        else:
            hi = t - 1
    return lo, log_


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


def _relatives(g, forward: bool) -> list[set[int]]:
    """Ancestors (forward) or descendants of every node."""
    order = g.topological_order().tolist()
    out: list[set[int]] = [set() for _ in range(g.n_nodes)]
    for v in (order if forward else order[::-1]):
        for u in (g.predecessors(v) if forward else g.successors(v)).tolist():
            out[v] |= out[u] | {u}
    return out


def _off_device_offsets(problem, entry: int, exit_: int, settings: SolverSettings,
                        capped: list[bool] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Earliest start of each node off the entry's device, least tail of each node off the exit's device.

    Start from the cheapest-crossing offsets of `segment_bound`; for a node with few ancestors,
    the optimum of "the node's ancestors and the node, entry on device 0, the node elsewhere" is
    a valid earliest start (dropping every other node only relaxes the problem), and likewise for
    tails with the descendants. Identical small problems (repeated branches) are solved once.
    """
    from incsched.baselines.placement_local import subproblem

    g = problem.graph
    dur = problem.durations()[:, 0].astype(np.int64)
    off = ~np.eye(problem.n_devices, dtype=bool)
    cross = problem.transfer_ticks()[:, off].min(axis=1) if g.n_edges else np.zeros(0, np.int64)
    head0 = np.rint(g.top_level(dur.astype(np.float64), None)).astype(np.int64)
    tail0 = np.rint(g.bottom_level(dur.astype(np.float64), None)).astype(np.int64) - dur
    head = _crossing_offsets(g, dur, cross, head0, entry, forward=True)
    tail = _crossing_offsets(g, dur, cross, tail0, exit_, forward=False)
    small = _capped(settings, _OFFSET_SECONDS)
    cache: dict[bytes, int] = {}
    topo_pos = np.empty(g.n_nodes, dtype=np.int64)
    topo_pos[g.topological_order()] = np.arange(g.n_nodes)
    for rel, out, forward in ((_relatives(g, True), head, True), (_relatives(g, False), tail, False)):
        for v in range(g.n_nodes):
            if not 0 < len(rel[v]) <= _OFFSET_NODES:
                continue
            nodes = sorted(rel[v] | {v}, key=lambda u: topo_pos[u])
            sub = subproblem(problem, nodes)
            key = sub.signature()
            if key not in cache:
                s_entry, s_exit = _segment_shape(sub)
                # The node is the sink (heads) or the source (tails) of `sub`; either way it sits off
                # the device of the other end, which is device 0 for the source.
                model = _DecisionModel(sub, None, s_entry, s_exit, 1, None, None)
                solver, _ = _solve_decision(model.model, small, capped)
                cache[key] = int(solver.BestObjectiveBound())
            out[v] = max(int(out[v]), cache[key] - int(dur[v]))
    return head, tail


def _solve_decision(model: cp_model.CpModel, settings: SolverSettings, capped: list[bool] | None = None):
    """Solve; OR-Tools 9.15's presolve can fail with an internal IndexError on these models
    (seen on a 7-node fork with the energy rows and the cumulative): then solve without presolve.
    Appends to ``capped`` whether a deterministic run was cut by the wall clock (not reproducible)."""
    solver = make_solver(settings)
    try:
        code = solver.Solve(model)
    except IndexError:
        log.debug("CP-SAT presolve failed on a segment decision model; solving without presolve")
        solver = make_solver(settings)
        solver.parameters.cp_model_presolve = False
        code = solver.Solve(model)
    if capped is not None:
        capped.append(wall_capped(settings, solver))
    return solver, code


def _capped(settings: SolverSettings, seconds: float) -> SolverSettings:
    from dataclasses import replace

    return replace(settings, time_limit=min(settings.time_limit, seconds), max_deterministic_time=None)


class _DecisionModel:
    """The strengthened segment model: decide ``makespan`` (or, with None, minimise it without offsets)."""

    def __init__(self, problem, makespan, entry, exit_, exit_device, head, tail):
        g = self.graph = problem.graph
        n, D = problem.n_nodes, problem.n_devices
        dur = problem.durations()[:, 0].astype(np.int64)
        off = ~np.eye(D, dtype=bool)
        cross = problem.transfer_ticks()[:, off].min(axis=1) if g.n_edges else np.zeros(0, np.int64)
        ticks = problem.transfer_ticks()
        head0 = np.rint(g.top_level(dur.astype(np.float64), None)).astype(np.int64)
        tail0 = np.rint(g.bottom_level(dur.astype(np.float64), None)).astype(np.int64) - dur
        if head is None:
            head = _crossing_offsets(g, dur, cross, head0, entry, forward=True)
            tail = _crossing_offsets(g, dur, cross, tail0, exit_, forward=False)
        T = int(makespan) if makespan is not None else int(dur.sum() + head.max() + tail.max() + 1)
        self.infeasible = False
        m = self.model = cp_model.CpModel()
        mk = m.NewIntVar(0, T, "makespan")
        self.start, self.x = [], []
        per_device: list[list] = [[] for _ in range(D)]
        release = np.zeros((n, D), dtype=np.int64)
        tails = np.zeros((n, D), dtype=np.int64)
        for v in range(n):
            lo_v, hi_v = int(head0[v]), T - int(tail0[v]) - int(dur[v])
            if lo_v > hi_v:
                self.infeasible = True
                return
            s = m.NewIntVar(lo_v, hi_v, f"start[{v}]")
            xs = []
            for d in range(D):
                lit = m.NewBoolVar(f"on[{v},{d}]")
                xs.append(lit)
                release[v, d] = head0[v] if d == 0 else head[v]
                tails[v, d] = tail0[v] if d == exit_device else tail[v]
                lo, hi = int(release[v, d]), T - int(tails[v, d]) - int(dur[v])
                if lo > hi or (v == entry and d != 0) or (v == exit_ and d != exit_device):
                    m.Add(lit == 0)
                    continue
                # An own start per device carries that device's window into its NoOverlap.
                sd = m.NewIntVar(lo, hi, f"start[{v},{d}]")
                m.Add(sd == s).OnlyEnforceIf(lit)
                per_device[d].append(m.NewOptionalFixedSizeIntervalVar(sd, int(dur[v]), lit, f"run[{v},{d}]"))
                m.Add(mk >= s + int(dur[v] + tails[v, d])).OnlyEnforceIf(lit)
            m.AddExactlyOne(xs)
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
            t = int(ticks[k][off].min())
            if t > 0:
                same = m.NewBoolVar(f"same[{k}]")
                m.Add(self.start[v] >= self.start[u] + int(dur[u]) + t).OnlyEnforceIf(same.Not())
                for d in range(D):
                    m.AddBoolOr([self.x[u][d].Not(), self.x[v][d].Not(), same])
                    m.AddBoolOr([same.Not(), self.x[u][d].Not(), self.x[v][d]])
        if makespan is not None:
            self._energy(T, dur, release, tails)
        self._symmetry(entry, exit_, exit_device, dur, ticks)
        if makespan is None:
            m.Minimize(mk)

    def _energy(self, T, dur, release, tails) -> None:
        n, D = release.shape
        for d in range(D):
            for a in _thresholds(release[:, d], most=24):
                for b in _thresholds(tails[:, d], most=24):
                    members = [v for v in range(n) if release[v, d] >= a and tails[v, d] >= b]
                    cap = T - int(a) - int(b)
                    if members and sum(int(dur[v]) for v in members) > cap:
                        self.model.Add(sum(int(dur[v]) * self.x[v][d] for v in members) <= max(cap, 0))

    def _symmetry(self, entry, exit_, exit_device, dur, ticks) -> None:
        m, g = self.model, self.graph
        D = len(self.x[0])
        topo = g.topological_order().tolist()
        free = [d for d in range(D) if d not in (0, exit_device)]
        used: dict[int, object] = {d: None for d in free}
        for v in topo:
            for a, b in zip(free, free[1:]):
                if used[a] is None:
                    m.Add(self.x[v][b] == 0)
                else:
                    m.AddImplication(self.x[v][b], used[a])
            for d in free[:-1]:
                lit = m.NewBoolVar("")
                m.AddImplication(self.x[v][d], lit)
                if used[d] is None:
                    m.AddImplication(lit, self.x[v][d])
                else:
                    m.AddImplication(used[d], lit)
                    m.AddBoolOr([lit.Not(), used[d], self.x[v][d]])
                used[d] = lit
        t = ticks.reshape(len(ticks), -1).tolist() if g.n_edges else []
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

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for k in range(g.n_edges):
        u, v = int(g.src[k]), int(g.dst[k])
        if entry not in (u, v) and exit_ not in (u, v):
            parent[find(u)] = find(v)
    parts: dict[int, list[int]] = {}
    for v in g.topological_order().tolist():
        if v not in (entry, exit_):
            parts.setdefault(find(v), []).append(v)
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
