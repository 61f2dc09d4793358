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

__all__ = ["solve_placement", "segment_bound"]

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
