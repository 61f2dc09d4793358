"""CP-SAT model of the placement problem: device, start and per-device order of every node, minimising makespan.

One optional interval per (node, allowed device) with an exactly-one choice, a NoOverlap per device,
parameter memory per device (a shared weight counted once where any of its readers sits), and
precedence that pays the link's transfer only when producer and consumer sit apart. Static lower
bounds, a heuristic horizon and symmetry breaking over identical devices keep the domains small
and let proofs close. The caller hands in what needs the rest of the library (the hint and
a heuristic schedule, both as executed by `incsched.evaluate.simulate`); the answer is CP-SAT's own
solution, judged elsewhere (`incsched.inc_ilp.placement.solve_cpsat` runs both ends).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from ortools.sat.python import cp_model

from incsched.graph import SharedWeight
from incsched.problems import Placement, PlacementProblem, PlacementWindow

from .. import SolverOutput, SolverSettings
from .params import STATUS_NAMES, make_solver, wall_capped

__all__ = ["solve_placement", "ExecutedSchedule", "interchangeable_devices"]

log = logging.getLogger(__name__)

BACKEND = "cpsat-placement"


class ExecutedSchedule(Protocol):
    """A placement as executed in its own order, in ticks (what `incsched.evaluate.simulate` returns)."""

    device: np.ndarray  # [n] device of each node
    start: np.ndarray  # [n]
    end: np.ndarray  # [n]
    makespan: int

    @property
    def memory_ok(self) -> bool: ...


@dataclass(frozen=True)
class _Hint:
    """The hint as the model takes it: device labels agree with the symmetry breaking."""

    device: np.ndarray
    start: np.ndarray
    end: np.ndarray
    makespan: int


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
    hint: ExecutedSchedule | None = None,
    *,
    heuristic: ExecutedSchedule | None = None,
    window_symmetry: bool = False,
) -> SolverOutput:
    """Minimise the makespan of ``problem`` exactly (within ``window``, when given) with CP-SAT.

    Parameters
    ----------
    problem : PlacementProblem
        Graph, devices, links; all costs in the problem's integer ticks.
    settings : SolverSettings
        Time limit, determinism, seed, workers (applied by `incsched.solvers.cpsat.params.make_solver`).
    window : PlacementWindow, optional
        Allowed devices per node and optional start-tick ranges; the model is restricted to it.
        Symmetry breaking over identical devices is used only without a window.
    hint : ExecutedSchedule, optional
        An incumbent as executed in its own order (``AddHint`` on every variable); it also lowers
        the horizon when it fits the window. Its device labels are permuted to agree with the
        symmetry breaking (identical devices: the times stay).
    heuristic : ExecutedSchedule, optional
        A heuristic schedule (HEFT over the window's devices) that only lowers the horizon, when
        it fits the window.
    window_symmetry : bool
        Break symmetry inside a window too, over each set of identical devices that every node
        may take all or none of (`interchangeable_devices`): a round that frees two or three
        whole devices searches each split of their ops once, not once per relabelling.

    Returns
    -------
    SolverOutput
        ``assignment`` (device per node), ``start`` (ticks), ``objective`` and ``bound`` in ticks:
        CP-SAT's solution as it stands (also in ``info["cpsat_start"]`` and
        ``info["cpsat_objective"]``, which stay when a caller runs the order as early as possible).
        ``info`` holds ``order`` (per-device node order by start), ``time_unit``, ``horizon`` and
        ``horizon_source``, ``lower_bound`` and its parts, ``hinted``, ``hint_makespan``,
        ``symmetry_breaking``, ``reproducible`` and CP-SAT statistics. ``infeasible`` outputs carry
        ``info["reason"]``.

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
    horizon, horizon_source = _horizon(problem, allowed, window, heuristic, hint)
    groups = problem.identical_devices if window is None else interchangeable_devices(problem, allowed) if window_symmetry else ()
    groups = tuple(group for group in groups if len(group) > 1)
    symmetric = bool(groups)
    hint_sched = None if hint is None else _canonical(problem, hint, groups) if symmetric else _Hint(hint.device, hint.start, hint.end, hint.makespan)
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
        m.add_symmetry_breaking(groups)
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
        "hint_note": "" if hint is None else "ok",
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
        assignment, start = m.solution(solver)
        placement = Placement.from_assignment(assignment, D, start=start, method="cpsat")
        info["order"] = [list(seq) for seq in placement.order]
        objective = info["cpsat_objective"] = float(solver.ObjectiveValue())
        info["cpsat_start"] = start.tolist()
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


def _horizon(problem, allowed, window, heuristic, hint) -> tuple[int, str]:
    """An upper bound on the (windowed) optimum: the best in-window heuristic or hint schedule."""
    g = problem.graph
    dur, ticks = problem.durations(), problem.transfer_ticks()
    # Running nodes one after another, each on its slowest allowed device and paying the dearest
    # transfer, is always possible: a safe horizon when no schedule handed in fits the window.
    slow = np.where(allowed, dur, 0).max(axis=1)
    best, source = int(slow.sum() + (ticks.max(axis=(1, 2)).sum() if g.n_edges else 0)), "serial"
    if window is not None and window.start_hi is not None:
        best = min(best, int((window.start_hi + slow).max())) if problem.n_nodes else best
        source = "window"
    for name, s in (("heuristic", heuristic), ("hint", hint)):
        if s is None:
            continue
        fits = window is None or window.contains(problem, s.device, s.start)
        fits = fits and bool(np.all(allowed[np.arange(problem.n_nodes), s.device])) and s.memory_ok
        if fits and s.makespan < best:
            best, source = int(s.makespan), name
    return best, source


def interchangeable_devices(problem: PlacementProblem, allowed: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """Groups of identical devices that ``allowed`` (bool [n, D]) also cannot tell apart.

    Devices of one identical group whose columns of ``allowed`` are equal may be swapped in any
    answer without leaving the window (start ranges are per node, never per device), so their
    labels can be fixed by first use as in the unwindowed model.

    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["a", "b"], ["a"], ["b"], out_bytes=[1, 0], compute_time={"cpu": [1.0, 1.0]})
    >>> p = PlacementProblem.identical(g, 4, bandwidth=1.0, time_unit=1.0)
    >>> interchangeable_devices(p, np.array([[1, 1, 0, 1], [1, 1, 0, 0]], dtype=bool))
    ((0, 1), (2,), (3,))
    """
    allowed = np.asarray(allowed, dtype=bool)
    out = []
    for group in problem.identical_devices:
        by_column: dict[bytes, list[int]] = {}
        for d in group:
            by_column.setdefault(allowed[:, d].tobytes(), []).append(d)
        out += [tuple(devices) for devices in by_column.values()]
    return tuple(sorted(out))


def _canonical(problem: PlacementProblem, sched: ExecutedSchedule, groups) -> _Hint:
    """Relabel each group of interchangeable devices by first use in topological order, as the
    symmetry breaking demands.

    Swapping identical devices leaves every duration and transfer as it was, so the relabelled
    schedule keeps its start and end ticks.
    """
    topo = problem.graph.topological_order().tolist()
    mapping = np.arange(problem.n_devices)
    for group in groups:
        first = {d: len(topo) for d in group}
        for pos, v in enumerate(topo):
            d = int(sched.device[v])
            if d in first and first[d] == len(topo):
                first[d] = pos
        by_use = sorted(group, key=lambda d: (first[d], d))
        for new, old in zip(group, by_use):
            mapping[old] = new
    return _Hint(mapping[np.asarray(sched.device)], sched.start, sched.end, sched.makespan)


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
        self.holds: list[tuple[SharedWeight, int, cp_model.IntVar]] = []

    def add_devices(self) -> None:
        """One node at a time per device, and parameter memory within capacity."""
        for d, ivs in enumerate(self.intervals):
            if len(ivs) > 1:
                self.model.AddNoOverlap(ivs)
            cap = self.problem.devices[d].memory
            if cap is not None:
                params = self.problem.graph.param_bytes
                terms = [(int(params[v]), xs[d]) for v, xs in enumerate(self.x) if d in xs and params[v] > 0]
                shared = []  # (weight, its readers' "on d"), for each shared weight a reader may bring to d
                for w in self.problem.graph.shared_weights:
                    readers = [self.x[v][d] for v in w.readers if d in self.x[v]]
                    if readers and w.nbytes:
                        shared.append((w, readers))
                if sum(c for c, _ in terms) + sum(w.nbytes for w, _ in shared) > cap:
                    terms += [(w.nbytes, self._holds(w, d, readers)) for w, readers in shared]
                    self.model.Add(sum(c * lit for c, lit in terms) <= cap)

    def _holds(self, w, d: int, readers) -> cp_model.IntVar:
        """The literal "device d holds shared weight w": at least each reader's "on d".

        The weight then counts once on d as soon as one reader is there; nothing forces the literal
        up otherwise, and the memory constraint only pushes it down.
        """
        held = self.model.NewBoolVar(f"holds[{w.name},{self.problem.devices[d].name}]")
        for lit in readers:
            self.model.AddImplication(lit, held)
        self.holds.append((w, d, held))
        return held

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

    def add_symmetry_breaking(self, groups) -> None:
        """Within each group of interchangeable devices, device j+1 is first used after device j (topological order)."""
        names, devices = self.problem.graph.names, self.problem.devices
        topo = self.problem.graph.topological_order().tolist()
        self.used: list[tuple[int, int, cp_model.IntVar]] = []  # (node, device, "device used by now")
        for group in groups:
            if len(group) > 1:
                self.used += first_use_chain(self.model, self.x, topo, group, lambda v, d: f"used[{devices[d].name},{names[v]}]")

    def add_hint(self, sched: _Hint) -> None:
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
        for w, d, lit in self.holds:
            model.AddHint(lit, any(int(sched.device[v]) == d for v in w.readers))
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


def first_use_chain(model: cp_model.CpModel, x, topo: list[int], group, label) -> list[tuple[int, int, cp_model.IntVar]]:
    """Devices of ``group`` are first used in their order along ``topo``: symmetry breaking over identical devices.

    A node may go on ``group[j + 1]`` only when an earlier node (in ``topo``) is on ``group[j]``.
    ``x[v]`` maps a device to the literal "node v on it"; nodes that lack a device of the group are
    skipped. ``label(v, d)`` names the literal "device d holds v or an earlier node". Returns those
    literals as (node, device, literal), the last device's left out (nothing waits on it).
    """
    used_prev: list = [None] * len(group)  # None: not used by any earlier node
    out = []
    for v in topo:
        xs = x[v]
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
            lit = model.NewBoolVar(label(v, d))
            model.AddImplication(xs[d], lit)
            if used_prev[j] is None:
                model.AddImplication(lit, xs[d])
            else:
                model.AddImplication(used_prev[j], lit)
                model.AddBoolOr([lit.Not(), used_prev[j], xs[d]])
            used_now.append(lit)
            out.append((v, d, lit))
        used_prev = used_now
    return out
