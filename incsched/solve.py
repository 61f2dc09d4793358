"""`solve()`: the front door. Pre-schedule, relax, solve exactly inside the window, widen, certify.

    problem ──preschedule──> incumbent ──window──> CP-SAT (hinted) ──re-centre / widen──> window optimum
    window optimum ──full model, hinted, for the proof──> optimal | window_optimal | feasible (+ bound, gap)

Every answer is re-checked by the independent evaluator (stage) or simulator (placement) before it
is returned. In deterministic mode every CP-SAT call runs one worker under a deterministic-time
budget and the loop decides only on solver answers, never on the clock, so the same input and seed
give the same result on any machine with the same library versions.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from solvers import SolverOutput, SolverSettings

from .baselines.placement import PLACEMENT_BASELINES
from .baselines.stage import STAGE_BASELINES
from .bounds import placement_lower_bound, stage_lower_bound, stage_term_bounds
from .errors import IncschedError
from .evaluate.simulate import simulate
from .evaluate.stage import evaluate_stages
from .problems.placement import Placement, PlacementProblem
from .problems.stage import StageProblem
from .relax import placement_window, stage_window, window_is_everything
from .result import Result, library_versions

__all__ = ["solve", "METHODS", "SolverDisagreement"]

log = logging.getLogger(__name__)

#: Methods every problem accepts besides its baselines' names.
METHODS = ("inc-ilp", "ilp", "ilp-hinted")

#: Share of the budget the window phase may spend before the proof on the full model.
_WINDOW_SHARE = 0.4

#: Stage models with at most this many node-stage pairs are solved whole from the start.
_WHOLE_MODEL_MAX = 10_000

#: Stage models with more nodes than this skip CP-SAT's presolve probing.
_PROBING_MAX_NODES = 500


class SolverDisagreement(IncschedError):
    """A back end's answer failed the independent check: a bug, reported instead of returned."""


@dataclass
class _Budget:
    """Time left, counted in CP-SAT deterministic seconds (deterministic mode) or wall seconds."""

    total: float
    deterministic: bool
    spent: float = 0.0
    started: float = 0.0
    wall_capped: bool = False  # a deterministic run was cut by the wall clock: not reproducible

    def __post_init__(self):
        self.started = time.perf_counter()

    def left(self) -> float:
        used = self.spent if self.deterministic else time.perf_counter() - self.started
        return max(self.total - used, 0.0)

    def charge(self, out: SolverOutput) -> None:
        self.spent += float(out.info.get("deterministic_time") or 0.0) if self.deterministic else 0.0
        if out.info.get("wall_capped"):
            self.wall_capped = True


def solve(
    problem: StageProblem | PlacementProblem,
    method: str = "inc-ilp",
    *,
    time_limit: float = 60.0,
    seed: int = 0,
    deterministic: bool = True,
    workers: int = 1,
    preschedule: str | Callable | None = None,
    radius: int = 1,
) -> Result:
    """Solve a stage or placement problem and return a certified `Result`.

    Parameters
    ----------
    problem : StageProblem or PlacementProblem
    method : str
        ``"inc-ilp"`` (incumbent, window, widen, prove), ``"ilp"`` (the full model, cold),
        ``"ilp-hinted"`` (the full model hinted by the best baseline), or a baseline's name
        (``contiguous_params``, ``heft`` ...) to return that heuristic's answer, evaluated and bounded.
    time_limit : float
        Budget in seconds: CP-SAT deterministic seconds in deterministic mode, wall seconds otherwise.
    seed : int
        Seed for pre-schedulers and CP-SAT.
    deterministic : bool
        One CP-SAT worker and deterministic time limits: byte-identical results (timing aside).
    workers : int
        CP-SAT workers when not deterministic.
    preschedule : str or callable, optional
        Pre-scheduler for inc-ilp: a baseline name or ``f(problem, seed)``; default the best baseline.
    radius : int
        Initial window radius (stages); doubled each time the window optimum moves.

    Returns
    -------
    Result

    Raises
    ------
    ValueError
        Unknown method or problem type.
    SolverDisagreement
        If a back end's answer fails the independent evaluator (a bug; never returned silently).
    """
    if deterministic:
        workers = 1
    settings = SolverSettings(
        time_limit=max(time_limit, 1e-3),
        deterministic=deterministic,
        seed=seed,
        workers=workers,
        # Presolve probing on stage models of many hundred nodes adds ~10^5 clauses and seconds
        # before search starts; skipped there, kept where it helps small proofs.
        probing_level=0 if isinstance(problem, StageProblem) and problem.graph.n_nodes > _PROBING_MAX_NODES else None,
    )
    if isinstance(problem, StageProblem):
        return _StageSolve(problem, settings, seed).run(method, preschedule, radius)
    if isinstance(problem, PlacementProblem):
        return _PlacementSolve(problem, settings, seed).run(method, preschedule)
    raise ValueError(f"solve() takes a StageProblem or PlacementProblem, got {type(problem).__name__}")


# ---------------------------------------------------------------------------- shared machinery


class _Run:
    """What both problems' pipelines share: timing, budget, status and the final `Result`."""

    kind = ""
    #: Pre-schedulers by name (baselines and the RL policy), each ``f(problem, seed) -> incumbent``.
    preschedulers: dict[str, Callable] = {}

    def __init__(self, problem, settings: SolverSettings, seed: int):
        self.problem, self.settings, self.seed = problem, settings, seed
        self.timing: dict[str, float] = {}
        self.budget = _Budget(settings.time_limit, settings.deterministic)
        self.windows: list[dict] = []
        self.t0 = time.perf_counter()

    def _phase(self, name: str, started: float) -> None:
        self.timing[name] = self.timing.get(name, 0.0) + time.perf_counter() - started

    def _settings(self, share: float) -> SolverSettings:
        limit = max(self.budget.left() * share, 1e-3)
        return replace(self.settings, time_limit=limit, max_deterministic_time=None)

    def _pick_prescheduler(self, preschedule) -> tuple[str, Callable]:
        if preschedule is None:
            return "best_baseline", self._best_baseline
        if callable(preschedule):
            return getattr(preschedule, "__name__", "custom"), preschedule
        if preschedule not in self.preschedulers:
            raise ValueError(f"unknown pre-scheduler {preschedule!r}; known: {sorted(self.preschedulers)}")
        return preschedule, self.preschedulers[preschedule]

    def _status(self, objective, lower_bound, window_optimal: bool, proven_here: bool) -> str:
        if objective is None:
            return "unknown"
        if proven_here or (lower_bound is not None and objective <= lower_bound):
            return "optimal"
        return "window_optimal" if window_optimal else "feasible"

    def _prove(self, method: str, full_solve, best, lb: float, window_optimal: bool) -> Result:
        """The full model, hinted by the best answer so far, given all that is left of the budget."""
        started = time.perf_counter()
        out = full_solve(self._settings(1.0))
        self.budget.charge(out)
        self._phase("proof" if method == "inc-ilp" else "solve", started)
        self.windows.append({"phase": "full", "status": out.status, "objective": out.objective, "bound": out.bound})
        if out.status == "infeasible":
            return self._result(method, "infeasible", None, None, "cpsat-full", {}, reason=out.info.get("reason"))
        if out.assignment is not None:
            candidate = self.answer_from(out)
            value = self.value(candidate, claimed=out.objective)  # the independent re-check, always
            if best is None or value <= self.value(best):
                best = candidate
        if best is None:
            return self._result(method, "unknown", None, lb, "combinatorial", {}, reason="no solution within the time limit")
        bound, source = lb, "combinatorial"
        if out.bound is not None and out.bound > lb:
            bound, source = float(out.bound), "cpsat-full"
        return self._finish(method, best, bound, source, window_optimal, proven=out.status == "optimal")

    def _result(self, method, status, objective, lower_bound, bound_source, terms, reason=None, **answer) -> Result:
        gap = None
        if objective is not None and lower_bound is not None:
            gap = 0.0 if objective <= lower_bound else float((objective - lower_bound) / max(abs(objective), 1e-12))
        self.timing["total"] = time.perf_counter() - self.t0
        return Result(
            problem=self.kind,
            graph=self.problem.graph.name,
            status=status,
            objective=None if objective is None else _num(objective),
            lower_bound=None if lower_bound is None else _num(lower_bound),
            gap=gap,
            terms=terms,
            method=method,
            seed=self.seed,
            # A deterministic-time run the wall clock cut short may not repeat: say so.
            deterministic=self.settings.deterministic and not self.budget.wall_capped,
            bound_source=bound_source,
            reason=reason,
            provenance={
                "time_unit": self.problem.time_unit,
                "windows": self.windows,
                "versions": library_versions(),
                "workers": 1 if self.settings.deterministic else self.settings.workers,
                "time_limit": self.settings.time_limit,
            },
            timing={k: round(v, 6) for k, v in self.timing.items()},
            **answer,
        )


def _rl_prescheduler(module: str) -> Callable:
    """The learned policy's ``preschedule`` from ``module``, imported (with torch) on first use."""

    def rl(problem, seed: int = 0):
        from importlib import import_module

        return import_module(module).preschedule(problem, seed)

    return rl


def _num(x) -> float | int:
    x = float(x)
    return int(x) if x.is_integer() else x


# ---------------------------------------------------------------------------- stage problem


class _StageSolve(_Run):
    kind = "stage"
    whole_bound: float | None = None  # CP-SAT's bound when a window was the whole problem
    preschedulers = {**STAGE_BASELINES, "rl": _rl_prescheduler("incsched.policy.stage_policy")}

    def _best_baseline(self, problem, seed):
        from .baselines.stage import best_baseline

        return best_baseline(problem, seed)[1]

    def check(self, stages, claimed=None):
        """The independent evaluator's verdict; a disagreement with the solver is a bug."""
        started = time.perf_counter()
        ev = evaluate_stages(self.problem, stages)
        self._phase("check", started)
        if claimed is not None and (not ev.feasible or abs(ev.objective - claimed) > 1e-9 * max(1.0, abs(claimed))):
            raise SolverDisagreement(
                f"CP-SAT claimed objective {claimed} but the evaluator finds {ev.objective} "
                f"(feasible={ev.feasible}: {list(ev.violations)[:3]})"
            )
        return ev

    def value(self, stages, claimed=None) -> float:
        return self.check(stages, claimed).objective

    def answer_from(self, out: SolverOutput) -> np.ndarray:
        return out.assignment

    def run(self, method: str, preschedule, radius: int) -> Result:
        from solvers.cpsat.stage import solve_stage

        p = self.problem
        reason = p.infeasibility()
        if reason is not None:
            return self._result(method, "infeasible", None, None, "", {}, reason=reason)
        lb = float(stage_lower_bound(p))
        if method in self.preschedulers:
            started = time.perf_counter()
            stages = self.preschedulers[method](p, self.seed)
            self._phase("preschedule", started)
            return self._finish(method, stages, lb, "combinatorial", window_optimal=False)
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; known: {list(METHODS) + sorted(self.preschedulers)}")

        hint = None
        if method in ("inc-ilp", "ilp-hinted"):
            started = time.perf_counter()
            name, pre = self._pick_prescheduler(preschedule if method == "inc-ilp" else None)
            hint = np.asarray(pre(p, self.seed), dtype=np.int64)
            self._phase("preschedule", started)
            self.windows.append({"phase": "incumbent", "prescheduler": name, "objective": _num(self.check(hint).objective)})

        best, window_optimal = hint, False
        if method == "inc-ilp":
            best, window_optimal, proven = self._windows(solve_stage, hint, radius, lb)
            if proven:
                return self._finish(method, best, lb, "cpsat-full", window_optimal=True, proven=True)
            if self.check(best).objective <= lb:
                return self._finish(method, best, lb, "combinatorial", window_optimal=True)
            if self.whole_bound is not None:  # the whole model already had the budget
                bound, source = (self.whole_bound, "cpsat-full") if self.whole_bound > lb else (lb, "combinatorial")
                return self._finish(method, best, bound, source, window_optimal=False)

        exact = p if method != "inc-ilp" else self._objective_window(self.check(best).objective)
        return self._prove(method, lambda settings: solve_stage(exact, settings, hint=best), best, lb, window_optimal)

    def _objective_window(self, incumbent_objective: float) -> StageProblem:
        """The problem with a hard stage-memory cap that no answer at least as good can exceed.

        An answer of objective <= the incumbent's has ``w_mem * mem_peak <= objective - (every other
        term's weighted lower bound)``, so capping every stage there removes only worse answers:
        the capped optimum is the global optimum and its bound a global bound. CP-SAT derives the
        same from its objective only during search; as a capacity it prunes stage domains in
        presolve (measured: inception_v3 K=8 proof 13.3 s -> 1.3 s, resnet50 K=8 2.6 s -> 0.24 s).
        """
        p = self.problem
        w = p.weights.as_dict()
        if w["mem_peak"] <= 0:
            return p
        others = sum(w[t] * b for t, b in stage_term_bounds(p).items() if t != "mem_peak")
        # The tolerance keeps float weights from rounding a reachable memory just under the cap.
        cap = math.floor((incumbent_objective - others) / w["mem_peak"] + 1e-9)
        caps = [cap] * p.n_stages if p.capacity is None else [min(cap, c) for c in p.capacity]
        self.windows.append({"phase": "objective-window", "mem_cap": min(caps)})
        return replace(p, capacity=tuple(caps))

    def _windows(self, solve_stage, incumbent, radius: int, lb: float):
        """Solve inside windows around the incumbent, re-centring and widening while it improves."""
        p = self.problem
        best, best_obj = incumbent, self.check(incumbent).objective
        r = max(int(radius), 1)
        if p.graph.n_nodes * p.n_stages <= _WHOLE_MODEL_MAX:
            # Measured on the shipped graphs: a window solve plus the hinted proof costs more than
            # the hinted full model alone, so small models get a window that is the whole problem.
            r = p.n_stages
        phase = _Budget(self.budget.left() * _WINDOW_SHARE, self.settings.deterministic)
        window_optimal = False
        while True:
            if phase.left() <= 0 or best_obj <= lb:
                return best, window_optimal, False
            window = stage_window(p, best, r)
            everything = window_is_everything(p, window)
            # The whole problem as a window is the proof itself: it gets the whole budget.
            limit = self.budget.left() if everything else phase.left()
            started = time.perf_counter()
            exact = self._objective_window(best_obj)
            out = solve_stage(exact, replace(self.settings, time_limit=max(limit, 1e-3)), window=window, hint=best)
            self.budget.charge(out)
            phase.charge(out)
            self._phase("window", started)
            self.windows.append({"phase": "window", "radius": r, "status": out.status, "objective": out.objective})
            if out.assignment is None:
                return best, window_optimal, False
            self.check(out.assignment, out.objective)
            improved = out.objective < best_obj
            if improved:
                best, best_obj = out.assignment, out.objective
            window_optimal = out.status == "optimal"  # best is now this window's optimum
            if everything:
                # The window is the whole problem: its optimum is global, its bound a global bound.
                self.whole_bound = out.bound
                return best, out.status == "optimal", out.status == "optimal"
            if out.status != "optimal":
                return best, False, False  # the window itself is too hard for the budget
            if not improved and not _touches_edge(out.assignment, window, p.n_stages):
                return best, True, False
            r *= 2

    def _finish(self, method, stages, bound, source, window_optimal, proven=False) -> Result:
        ev = self.check(stages)
        if not ev.feasible:
            raise SolverDisagreement(f"{method} returned an infeasible assignment: {list(ev.violations)[:3]}")
        status = self._status(ev.objective, bound, window_optimal, proven)
        if status == "optimal":
            bound = ev.objective if proven else bound
        terms = dict(ev.terms, compute_peak_s=ev.compute_peak_s, stage_mem=ev.stage_mem.tolist(), stage_compute_s=ev.stage_compute_s.tolist())
        return self._result(method, status, ev.objective, bound, source, terms, stages=[int(s) for s in stages])


def _touches_edge(stages, window, K: int) -> bool:
    lo, hi = window
    s = np.asarray(stages)
    return bool(np.any(((s == lo) & (lo > 0)) | ((s == hi) & (hi < K - 1))))


# ---------------------------------------------------------------------------- placement problem


class _PlacementSolve(_Run):
    kind = "placement"
    preschedulers = {**PLACEMENT_BASELINES, "rl": _rl_prescheduler("incsched.policy.placement_policy")}

    def _best_baseline(self, problem, seed) -> Placement:
        best = None
        for name in ("heft", "critical_path_list"):
            placement = self.preschedulers[name](problem, seed)
            makespan = simulate(problem, placement, "ordered").makespan
            if best is None or makespan < best[0]:
                best = (makespan, placement)
        return best[1]

    def check(self, placement: Placement, claimed=None):
        """Execute the placement in the independent simulator; it must match the solver's claim."""
        started = time.perf_counter()
        sched = simulate(self.problem, placement, "ordered")
        self._phase("check", started)
        if claimed is not None and sched.makespan != claimed:
            raise SolverDisagreement(f"CP-SAT claimed makespan {claimed} but the simulator finds {sched.makespan}")
        if not sched.memory_ok:
            raise SolverDisagreement(f"placement exceeds device memory: {sched.memory_violations}")
        return sched

    def value(self, placement: Placement, claimed=None) -> int:
        return self.check(placement, claimed).makespan

    def answer_from(self, out: SolverOutput) -> Placement:
        order = tuple(tuple(seq) for seq in out.info["order"])
        return Placement(out.assignment, order, start=out.start, method="cpsat")

    def run(self, method: str, preschedule) -> Result:
        from solvers.cpsat.placement import solve_placement

        p = self.problem
        lb = float(placement_lower_bound(p))
        if method in self.preschedulers:
            started = time.perf_counter()
            placement = self.preschedulers[method](p, self.seed)
            self._phase("preschedule", started)
            return self._finish(method, placement, lb, "combinatorial", False)
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; known: {list(METHODS) + sorted(self.preschedulers)}")

        best = None
        if method in ("inc-ilp", "ilp-hinted"):
            started = time.perf_counter()
            name, pre = self._pick_prescheduler(preschedule if method == "inc-ilp" else None)
            best = pre(p, self.seed)
            self._phase("preschedule", started)
            self.windows.append({"phase": "incumbent", "prescheduler": name, "objective": int(self.check(best).makespan)})
        window_optimal = False
        if method == "inc-ilp":
            started = time.perf_counter()
            window = placement_window(p, best.device)
            out = solve_placement(p, self._settings(_WINDOW_SHARE), window=window, hint=best)
            self.budget.charge(out)
            self._phase("window", started)
            self.windows.append({"phase": "window", "status": out.status, "objective": out.objective, "devices_per_node": float(window.allowed.sum(1).mean())})
            if out.assignment is not None:
                candidate = self.answer_from(out)
                if self.value(candidate, out.objective) <= self.value(best):
                    best = candidate
                window_optimal = out.status == "optimal"
            if self.check(best).makespan <= lb:
                return self._finish(method, best, lb, "combinatorial", window_optimal)

        return self._prove(method, lambda settings: solve_placement(p, settings, hint=best), best, lb, window_optimal)

    def _finish(self, method, placement: Placement, bound, source, window_optimal, proven=False) -> Result:
        sched = self.check(placement)
        status = self._status(sched.makespan, bound, window_optimal, proven)
        if status == "optimal":
            bound = sched.makespan if proven else bound
        terms = {
            "makespan": int(sched.makespan),
            "makespan_s": float(sched.makespan_seconds),
            "busy_s": [float(b) * self.problem.time_unit for b in sched.busy],
            "memory": [int(m) for m in sched.memory],
        }
        return self._result(
            method,
            status,
            sched.makespan,
            bound,
            source,
            terms,
            device=[int(d) for d in sched.device],
            order=[list(map(int, seq)) for seq in sched.order],
            start=[int(s) for s in sched.start],
        )
