"""`solve()`: the front door. Pre-schedule, relax, solve exactly inside the window, widen, certify.

    problem ──preschedule──> incumbent ──window──> CP-SAT (hinted) ──re-centre / widen──> window optimum
    window optimum ──full model, hinted, for the proof──> optimal | window_optimal | feasible (+ bound, gap)

Two variants of the middle step, chosen by the problem's shape:
- large stage models (more than 5,000 node-stage pairs): a band search re-solves two adjacent
  stages at a time (loadless nodes placed by an exact LP) until no band improves; only then the
  full model is tried for the proof;
- placements whose graph has cut nodes (norms, residual adds that every node precedes or follows):
  each segment between them is solved and bounded on its own (local search, hinted CP-SAT,
  decision-model proofs); the sum of segment bounds is a global lower bound (``segments``).

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
from .errors import IncschedError, UnknownNameError
from .evaluate.simulate import simulate
from .evaluate.stage import evaluate_stages
from .problems.placement import Placement, PlacementProblem
from .problems.stage import StageProblem
from .relax import placement_window, stage_band_window, stage_window, window_is_everything
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
            raise UnknownNameError(f"unknown pre-scheduler {preschedule!r}; known: {sorted(self.preschedulers)}")
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
                "graph_digest": self.problem.graph.structure_digest(),
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


#: Stage models with more node-stage pairs than this are improved by band search (`_StageSolve._bands`).
_BAND_MIN_PAIRS = 5_000

#: Adjacent stages opened up together in one band.
_BAND_WIDTH = 2

#: Peak memory above the average stage load (bytes) that `_StageSolve._rebalance` is tried for.
_BALANCE_SLACK = 5

#: Time limit of one band's solve per thousand nodes (seconds; deterministic seconds in deterministic mode).
_BAND_SECONDS = 1.0


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
            raise UnknownNameError(f"unknown method {method!r}; known: {list(METHODS) + sorted(self.preschedulers)}")

        hint = None
        if method in ("inc-ilp", "ilp-hinted"):
            started = time.perf_counter()
            name, pre = self._pick_prescheduler(preschedule if method == "inc-ilp" else None)
            hint = np.asarray(pre(p, self.seed), dtype=np.int64)
            self._phase("preschedule", started)
            self.windows.append({"phase": "incumbent", "prescheduler": name, "objective": _num(self.check(hint).objective)})

        best, window_optimal = hint, False
        if method == "inc-ilp" and p.graph.n_nodes * p.n_stages > _BAND_MIN_PAIRS:
            best, settled = self._bands(solve_stage, hint, lb)
            if not settled or self.budget.left() <= 0 or self.check(best).objective <= lb:
                return self._finish(method, best, lb, "combinatorial", window_optimal=False)
        elif method == "inc-ilp":
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

    def _objective_window(self, incumbent_objective: float, record: bool = True) -> StageProblem:
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
        if record:
            self.windows.append({"phase": "objective-window", "mem_cap": min(caps)})
        return replace(p, capacity=tuple(caps))

    def _bands(self, solve_stage, incumbent, lb: float):
        """Large models: re-solve bands of adjacent stages exactly, the rest held, while it pays.

        Band after band (stages 0-1, 1-2, ...; `stage_band_window`), CP-SAT re-optimises the nodes
        on those stages under the objective window, with the loadless nodes free everywhere; each
        improvement is polished by placing the loadless nodes optimally (an LP) and becomes the
        centre of the next band. The whole model of a graph this size neither proves nor improves
        much in the budget, while bands of a few hundred nodes solve in about a second each
        (rand_graph_1000_1, K=10, 2 workers, 10 s: whole model 11,343,733-11,343,830, bands
        11,343,245-11,343,302 on a loaded 2-core machine).

        An incumbent whose peak memory sits well above the average stage load is first re-balanced
        (`_rebalance`): no single band can lower a peak shared by several stages, since the load
        must travel across all of them.

        Returns the best assignment and whether the search settled: one full cycle of bands,
        each proven optimal inside its band, without an improvement. Settled or not, the result
        is no window optimum: the bands together are not one window.
        """
        from .baselines.stage_local import place_loadless_nodes

        p = self.problem
        started = time.perf_counter()
        best = place_loadless_nodes(p, incumbent)
        best_obj = self.check(best).objective
        center, center_obj = best, best_obj
        if self._imbalance(best) > _BALANCE_SLACK:
            center = self._rebalance(solve_stage, best, _BALANCE_SLACK)
            center_obj = self.check(center).objective
            self.windows.append({"phase": "rebalance", "objective": _num(center_obj), "mem_excess": self._imbalance(center)})
        center, settled, solves, improved = self._band_loop(solve_stage, center, lb)
        if self.check(center).objective < best_obj:
            best, best_obj = center, self.check(center).objective
        self._phase("bands", started)
        width = min(_BAND_WIDTH, p.n_stages)
        self.windows.append({"phase": "bands", "width": width, "solves": solves, "improved": improved, "settled": settled, "objective": _num(best_obj)})
        return best, settled

    def _band_limit(self) -> float:
        """One band's time: a second per thousand nodes (a band holds about 2/K of them)."""
        return max(min(_BAND_SECONDS * max(1.0, self.problem.graph.n_nodes / 1000), self.budget.left()), 1e-3)

    def _band_loop(self, solve_stage, center, lb: float):
        """Bands in turn from ``center`` until the budget ends or a full cycle brings nothing.

        Returns (best, settled, solves, improved). Outside deterministic mode each band's
        time leaves room for the model building and checks the previous bands needed, so the
        loop ends within the wall-clock budget.
        """
        from .baselines.stage_local import loadless_nodes, place_loadless_nodes

        p = self.problem
        K = p.n_stages
        width = min(_BAND_WIDTH, K)
        firsts = list(range(K - width + 1))
        roaming = loadless_nodes(p)
        best, best_obj = center, self.check(center).objective
        calm, solves, improved, i = 0, 0, 0, 0
        overhead = 0.0  # wall seconds a band costs besides CP-SAT's search (model, LP, checks)
        while self.budget.left() > overhead and best_obj > lb and calm < len(firsts):
            first = firsts[i % len(firsts)]
            i += 1
            started = time.perf_counter()
            window = stage_band_window(p, best, first, width, roaming)
            exact = self._objective_window(best_obj, record=False)
            limit = self._band_limit() if self.settings.deterministic else max(self._band_limit() - overhead, 1e-3)
            out = solve_stage(exact, replace(self.settings, time_limit=limit), window=window, hint=best)
            self.budget.charge(out)
            solves += 1
            if out.assignment is not None and out.objective < best_obj:
                self.check(out.assignment, out.objective)
                best = place_loadless_nodes(p, out.assignment)
                best_obj = self.check(best).objective
                calm, improved = 0, improved + 1
            else:
                calm = calm + 1 if out.status == "optimal" else 0
            if not self.settings.deterministic:  # the clock decides nothing in deterministic mode
                search = out.wall_time - float(out.info.get("build_seconds") or 0.0)
                overhead = max(overhead, time.perf_counter() - started - search)
        return best, calm >= len(firsts), solves, improved

    def _imbalance(self, stages) -> int:
        """Peak stage memory above the average load rounded up (0 when memory is not weighed)."""
        p = self.problem
        if p.weights.mem_peak <= 0 or p.graph.n_nodes == 0:
            return 0
        params = p.graph.param_bytes
        load = np.bincount(np.asarray(stages), weights=params, minlength=p.n_stages)
        return int(round(load.max())) - (-(-int(params.sum()) // p.n_stages))

    def _rebalance(self, solve_stage, stages, slack: int):
        """One sweep of bands, first to last, that moves load towards the light end of the pipeline.

        Band (k, k+1) is solved with stage k capped at the average load plus ``slack`` and stage
        k+1 capped so that stages 0..k together hold at least their share (k+1)/K of all
        parameters less ``slack``; the objective is minimised under those caps. After the sweep
        every stage is within about ``slack`` of the average, whatever the crossings cost; the
        band search that follows wins the crossings back. A band whose caps cannot be met in its
        time is left as it was. The answer may be worse than ``stages``: the caller keeps the best.
        """
        from .baselines.stage_local import loadless_nodes, place_loadless_nodes

        p = self.problem
        K = p.n_stages
        params = p.graph.param_bytes
        total = int(params.sum())
        roaming = loadless_nodes(p)
        target = -(-total // K) + slack
        s = np.asarray(stages, dtype=np.int64)
        for k in range(K - 1):
            # Exact shares first; a band too coarse or too constrained for them gets a looser aim.
            for loose in (slack, 20 * slack + total // (100 * K)):
                if self.budget.left() <= 0:
                    return place_loadless_nodes(p, s)
                load = np.rint(np.bincount(s, weights=params, minlength=K)).astype(np.int64)
                need = -(-(k + 1) * total // K) - loose - int(load[:k].sum())  # least load on stage k
                if need <= load[k] <= target + loose - slack:
                    break
                caps = [total] * K
                caps[k] = target + loose - slack
                caps[k + 1] = max(int(load[k] + load[k + 1]) - need, 0)
                if p.capacity is not None:
                    caps = [min(a, int(b)) for a, b in zip(caps, p.capacity)]
                window = stage_band_window(p, s, k, 2, roaming)
                out = solve_stage(replace(p, capacity=tuple(caps)), replace(self.settings, time_limit=self._band_limit()), window=window, hint=s)
                self.budget.charge(out)
                if out.assignment is not None:
                    self.check(out.assignment, out.objective)
                    s = out.assignment
                    break
        return place_loadless_nodes(p, s)

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


#: Local-search assignments tried per second of time limit, and at most, for the placement incumbent
#: (about a millisecond each on 200 ops: a fifth of the budget's wall time, on top of CP-SAT's).
_SEARCH_PER_SECOND = 200
_SEARCH_MAX = 20_000


#: Share of the placement budget the per-segment solves get (the rest goes to the hinted full model).
_SEGMENT_SHARE = 0.75

#: CP-SAT seconds for each segment's transfer-aware relaxation bound (it proves in well under one).
_RELAXATION_SECONDS = 2.0

#: Refuting short makespans of a segment (`segment_proof_bound`) gets this share of the segment's
#: solve time on top of it, spread over at most `_PROOF_PROBES` bisection probes of two runs each.
_PROOF_SHARE = 0.2
_PROOF_PROBES = 4


class _PlacementSolve(_Run):
    kind = "placement"
    bound_source = "combinatorial"
    preschedulers = {**PLACEMENT_BASELINES, "rl": _rl_prescheduler("incsched.policy.placement_policy")}

    def _best_baseline(self, problem, seed) -> Placement:
        """The better list schedule, improved by local search sized by the time limit (not timed: reproducible)."""
        from .baselines.placement_local import local_search

        best = None
        for name in ("heft", "critical_path_list"):
            placement = self.preschedulers[name](problem, seed)
            makespan = simulate(problem, placement, "ordered").makespan
            if best is None or makespan < best[0]:
                best = (makespan, placement)
        return local_search(problem, seed, evaluations=self._evaluations(problem.n_nodes), start=best[1])

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

        from .baselines.placement_local import decomposable

        p = self.problem
        lb = float(placement_lower_bound(p))
        if method in self.preschedulers:
            started = time.perf_counter()
            placement = self.preschedulers[method](p, self.seed)
            self._phase("preschedule", started)
            return self._finish(method, placement, lb, "combinatorial", False)
        if method not in METHODS:
            raise UnknownNameError(f"unknown method {method!r}; known: {list(METHODS) + sorted(self.preschedulers)}")

        best = None
        if method in ("inc-ilp", "ilp-hinted"):
            started = time.perf_counter()
            name, pre = self._pick_prescheduler(preschedule if method == "inc-ilp" else None)
            best = pre(p, self.seed)
            self._phase("preschedule", started)
            self.windows.append({"phase": "incumbent", "prescheduler": name, "objective": int(self.check(best).makespan)})
        window_optimal = False
        if method == "inc-ilp" and decomposable(p):
            best, lb = self._segments(solve_placement, best, lb)
            if self.check(best).makespan <= lb:
                return self._finish(method, best, lb, self.bound_source, False)
        elif method == "inc-ilp":
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

    def _prove(self, method, full_solve, best, lb, window_optimal) -> Result:
        result = super()._prove(method, full_solve, best, lb, window_optimal)
        if result.bound_source == "combinatorial" and self.bound_source != "combinatorial":
            result = replace(result, bound_source=self.bound_source)  # the bound the segments proved
        return result

    def _segments(self, solve_placement, incumbent: Placement, lb: float) -> tuple[Placement, float]:
        """Solve each stretch between cut nodes on its own, glue the answers, and add up their bounds.

        A cut node (a norm or residual add that everything precedes or follows) runs alone, so
        a segment between two of them is a placement problem of its own: a 40-60-op model that
        CP-SAT searches far better than the whole graph. Timed from the end of the entry cut node
        (made instant in the segment's problem), segment optima add up to a bound on the whole
        makespan: ``sum(segment bounds) - (segments with an entry cut node)`` ticks.
        """
        from solvers.cpsat.placement import segment_bound, segment_proof_bound

        from .baselines.placement_local import compose, local_search, segments, subproblem

        p = self.problem
        started = time.perf_counter()
        parts, total_bound = [], 0
        seg_nodes = segments(p)
        subs = [subproblem(p, nodes, instant=(nodes[0],) if i > 0 else ()) for i, nodes in enumerate(seg_nodes)]
        # Repeated blocks give identical segments: each is solved once, with the time of all its copies.
        solved: dict[bytes, tuple[Placement, int]] = {}
        keys = [sub.signature() for sub in subs]
        big = sum(len(nodes) for nodes in seg_nodes if len(nodes) > 2)
        phase = self.budget.left() * _SEGMENT_SHARE
        for i, (nodes, sub, key) in enumerate(zip(seg_nodes, subs, keys)):
            entry = (nodes[0],) if i > 0 else ()  # every segment after the first starts at its cut node
            if key in solved:
                pl, bound = solved[key]
            elif len(nodes) <= 2:
                pl = local_search(sub, self.seed, evaluations=1)
                bound = simulate(sub, pl, "ordered").makespan  # one or two nodes in a chain: exact
            else:
                hint = local_search(sub, self.seed, evaluations=self._evaluations(len(nodes)))
                limit = max(phase * len(nodes) * keys.count(key) / big, 1e-3)
                out = solve_placement(sub, replace(self.settings, time_limit=limit, max_deterministic_time=None), hint=hint)
                self.budget.charge(out)
                pl = hint
                if out.assignment is not None and out.objective <= simulate(sub, hint, "ordered").makespan:
                    pl = Placement(out.assignment, tuple(tuple(o) for o in out.info["order"]), start=out.start)
                bound = int(out.bound) if out.bound is not None else sub.lower_bound_ticks()
                # The transfer-aware relaxation usually bounds a segment far above CP-SAT's search.
                relaxed, capped = segment_bound(sub, replace(self.settings, time_limit=_RELAXATION_SECONDS, max_deterministic_time=None))
                self.budget.wall_capped = self.budget.wall_capped or capped
                bound = max(bound, relaxed)
                # The decision model refutes makespans the relaxation cannot (one run per exit case).
                per_run = max(limit * _PROOF_SHARE / (2 * _PROOF_PROBES), 1e-3)
                proof = replace(self.settings, time_limit=per_run, max_deterministic_time=None)
                proven, probes = segment_proof_bound(sub, simulate(sub, pl, "ordered").makespan, proof, lower=bound, probes=_PROOF_PROBES)
                if self.settings.deterministic:
                    self.budget.spent += 2 * per_run * len(probes)  # at most what the probes may have used
                self.budget.wall_capped = self.budget.wall_capped or any(p["wall_capped"] for p in probes)
                bound = max(bound, proven)
                self.windows.append({"phase": "segment", "nodes": len(nodes), "copies": keys.count(key), "status": out.status, "objective": out.objective, "bound": bound, "relaxation": relaxed, "probes": len(probes)})
            solved[key] = (pl, bound)
            parts.append((nodes, pl))
            total_bound += bound - len(entry)
        glued = compose(p, parts)
        self._phase("segments", started)
        best = incumbent
        if self.value(glued) < self.value(best):
            best = glued
        if total_bound > lb:
            lb, self.bound_source = float(total_bound), "segments"
        return best, lb

    def _evaluations(self, n_nodes: int) -> int:
        """Local-search budget: by time limit, scaled to the share of the graph being searched."""
        scale = n_nodes / max(self.problem.n_nodes, 1)
        return int(min(max(self.settings.time_limit * _SEARCH_PER_SECOND * scale, 200), _SEARCH_MAX))

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
