"""`solve()`: the front door. Checks the call, runs the pipeline under the user's clock, certifies.

    problem ──inc_ilp.stage.run / inc_ilp.placement.run──> best answer + global lower bound
    best answer ──independent re-check──> Result (optimal | window_optimal | feasible | ...)

The clock and reproducibility are separate knobs (see `solve`): ``time_limit`` is wall seconds,
everything counted; ``work_limit`` a deterministic budget. Whatever ends the run -- a proof, the
clock, the work budget, Ctrl-C or the progress callback -- the best answer so far is re-checked and
returned, and the result says what stopped it and whether a rerun repeats it byte for byte.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .errors import SolveArgumentError, SolverDisagreement, UnknownNameError
from .inc_ilp import placement as placement_pipeline, stage as stage_pipeline
from .inc_ilp.context import Context, Progress, gap
from .inc_ilp.incumbent import PLACEMENT_PRESCHEDULERS, STAGE_PRESCHEDULERS
from .evaluate.simulate import simulate
from .evaluate.stage import evaluate_stages
from .problems.placement import PlacementProblem
from .problems.stage import StageProblem
from .result import Result, library_versions

__all__ = ["solve", "METHODS", "SolverDisagreement", "Progress"]

#: Methods every problem accepts besides its pre-schedulers' names.
METHODS = ("inc-ilp", "ilp", "ilp-hinted")

#: Stage models with more nodes than this skip CP-SAT's presolve probing: on many hundred nodes it
#: adds ~10^5 clauses and seconds before search starts.
_PROBING_MAX_NODES = 500


def solve(
    problem: StageProblem | PlacementProblem,
    method: str = "inc-ilp",
    *,
    time_limit: float = 60.0,
    work_limit: float | None = None,
    seed: int = 0,
    deterministic: bool = True,
    workers: int = 1,
    preschedule: str | Callable | None = None,
    radius: int = 1,
    on_progress: Callable[[Progress], bool | None] | None = None,
) -> Result:
    """Solve a stage or placement problem and return a certified `Result`.

    Parameters
    ----------
    problem : StageProblem or PlacementProblem
    method : str
        ``"inc-ilp"`` (portfolio incumbent, widening windows, full model, proof), ``"ilp"`` (the
        full model, cold), ``"ilp-hinted"`` (the full model hinted by the best baseline), or a
        pre-scheduler's name (``rl``, ``contiguous_params``, ``heft`` ...) for its answer alone,
        evaluated and bounded.
    time_limit : float
        Wall-clock seconds from this call to its return, everything counted (policy loading, model
        building, checks). The run ends within 5% + 1 s of it and returns the best answer so far.
    work_limit : float, optional
        Deterministic work budget: CP-SAT deterministic seconds over all calls. A run that ends on
        its work budget (or on a proof) before the clock is reproducible. Default: no budget; the
        phases are then sized by ``time_limit`` read as work, and the clock ends the run.
    seed : int
        Seed for pre-schedulers and CP-SAT.
    deterministic : bool
        Reproducible search: one CP-SAT worker, every decision taken on solver answers and work
        counts, never on the clock. False: ``workers`` in parallel, faster, never reproducible.
    workers : int
        CP-SAT workers when not deterministic.
    preschedule : str or callable, optional
        inc-ilp's incumbent: a pre-scheduler's name or ``f(problem, seed)``; default the portfolio
        (the learned policy and the baselines, the best by the independent check).
    radius : int
        Stage problems: the first window's radius in stages, doubled while its optimum moves.
    on_progress : callable, optional
        Called with a `Progress` (phase, objective, lower_bound, elapsed, gap) on every new best
        answer and every higher bound; returning False stops the run (``stop_reason="callback"``).

    Returns
    -------
    Result
        ``stop_reason`` says what ended the run, ``reproducible`` whether a rerun repeats it.

    Raises
    ------
    UnknownNameError
        Unknown method or pre-scheduler.
    SolveArgumentError
        A limit that is not a positive finite number, a seed outside 0 .. 2**31-1, or fewer than
        one worker.
    SolverDisagreement
        If a back end's answer fails the independent check (a bug; never returned silently).

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], param_bytes=[10, 30, 20], out_bytes=[5, 5, 0])
    >>> r = solve(StageProblem.peer(g, n_stages=2), time_limit=5)
    >>> r.status, r.objective, r.stop_reason, r.reproducible
    ('optimal', 4001, 'optimal', True)
    """
    if isinstance(problem, StageProblem):
        kind, pipeline, table = "stage", stage_pipeline, STAGE_PRESCHEDULERS
        check = stage_pipeline.make_check(problem)
    elif isinstance(problem, PlacementProblem):
        kind, pipeline, table = "placement", placement_pipeline, PLACEMENT_PRESCHEDULERS
        check = placement_pipeline.make_check(problem)
    else:
        raise TypeError(f"solve() takes a StageProblem or PlacementProblem, got {type(problem).__name__}")
    if method not in METHODS and method not in table:
        raise UnknownNameError(f"unknown method {method!r}; known: {list(METHODS) + sorted(table)}")
    _check_limit("time_limit", time_limit)
    if work_limit is not None:
        _check_limit("work_limit", work_limit)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**31:
        raise SolveArgumentError(f"seed must be a whole number in 0 .. 2**31-1 (CP-SAT's range), got {seed!r}")
    seed = int(seed)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SolveArgumentError(f"workers must be a whole number of at least 1, got {workers!r}")

    ctx = Context(
        problem, time_limit=float(time_limit), work_limit=None if work_limit is None else float(work_limit),
        deterministic=deterministic, workers=1 if deterministic else workers, seed=seed, check=check,
        on_progress=on_progress,
        probing_level=0 if kind == "stage" and problem.graph.n_nodes > _PROBING_MAX_NODES else None,
    )
    ctx.start_clock()
    try:
        if kind == "stage":
            pipeline.run(ctx, method, preschedule, radius)
        else:
            pipeline.run(ctx, method, preschedule)
    except KeyboardInterrupt:
        ctx.stop.stop("interrupted")  # the best answer so far is certified and returned below
    finally:
        ctx.stop_clock()
    return _certify(ctx, kind, method)


def _check_limit(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SolveArgumentError(f"{name} must be a positive finite number of seconds, got {value!r}")


def _stop_reason(ctx: Context, method: str, proven: bool) -> str:
    if proven:
        return "optimal"
    if ctx.stop.reason is not None:
        return ctx.stop.reason
    if method not in METHODS:
        return "done"
    # CP-SAT stops on its deterministic limit at its next check: a hair under it still counts.
    if ctx.work_limit is not None and ctx.work_left() <= 0.01 * ctx.work_limit and not ctx.wall_capped:
        return "work"
    return "time"  # the search ran until the clock (its last phase is given all that is left)


def _certify(ctx: Context, kind: str, method: str) -> Result:
    """Re-check the best answer from scratch and state only what is proven."""
    p = ctx.problem
    answer: dict = {}
    terms: dict = {}
    objective, status, reason = None, "unknown", None
    if ctx.infeasible_reason is not None and ctx.best is None:
        status, reason = "infeasible", ctx.infeasible_reason
    elif ctx.best is None and method not in METHODS and ctx.stop.reason is not None:
        reason = f"{method} did not finish before the run stopped ({ctx.stop.reason})"
    elif ctx.best is None and method not in METHODS:
        reason = f"{method}'s answer breaks a hard constraint (a capacity or a device's memory)"
    elif ctx.best is None:
        reason = f"no feasible answer found before the run stopped ({_stop_reason(ctx, method, False)})"
    elif kind == "stage":
        ev = evaluate_stages(p, ctx.best)
        if not ev.feasible:
            raise SolverDisagreement(f"{method} returned an infeasible assignment: {list(ev.violations)[:3]}")
        objective = ev.objective
        terms = dict(ev.terms, compute_peak_s=ev.compute_peak_s, stage_mem=[int(m) for m in ev.stage_mem],
                     stage_compute_s=[float(t) for t in ev.stage_compute_s])
        if p.pipelined:  # the pipeline's predicted figures (StageProblem.pipeline)
            # No throughput (None) when every stage takes no time: JSON has no infinity.
            terms.update(stage_time_peak_s=ev.stage_time_peak_s, throughput=ev.throughput if math.isfinite(ev.throughput) else None,
                         stage_time_s=[float(t) for t in ev.stage_time_s], stage_memory=list(ev.stage_memory))
        answer = {"stages": [int(s) for s in ctx.best]}
    else:
        sched = simulate(p, ctx.best, "ordered")
        objective = int(sched.makespan)
        terms = {"makespan": objective, "makespan_s": float(sched.makespan_seconds),
                 "busy_s": [float(b) * p.time_unit for b in sched.busy], "memory": [int(m) for m in sched.memory]}
        answer = {"device": [int(d) for d in sched.device], "order": [list(map(int, seq)) for seq in sched.order],
                  "start": [int(s) for s in sched.start]}
    lower_bound = ctx.lower_bound
    if objective is not None:
        if objective != ctx.best_value:
            raise SolverDisagreement(f"the best answer re-checks at {objective}, not the {ctx.best_value} it was kept for")
        if lower_bound is not None and objective <= lower_bound:
            status, lower_bound = "optimal", objective
        else:
            status = "window_optimal" if ctx.window_optimal else "feasible"
    proven = status == "optimal" or (status == "infeasible" and ctx.proven)
    stop_reason = _stop_reason(ctx, method, proven)
    ctx.timing["total"] = ctx.elapsed()
    return Result(
        problem=kind,
        graph=p.graph.name,
        status=status,
        objective=objective,
        lower_bound=lower_bound if status != "infeasible" else None,
        gap=gap(objective, lower_bound),
        terms=terms,
        method=method,
        seed=ctx.seed,
        reproducible=ctx.deterministic and stop_reason in ("optimal", "work", "done") and not ctx.wall_capped,
        stop_reason=stop_reason,
        bound_source=ctx.bound_source if status != "infeasible" else "",
        reason=reason,
        provenance={
            "time_unit": p.time_unit,
            "graph_digest": p.graph.structure_digest(),
            "steps": ctx.steps,
            "best_from": ctx.best_phase,
            "versions": library_versions(),
            "workers": ctx.workers,
            "time_limit": ctx.time_limit,
            "work_limit": ctx.work_limit,
        },
        timing={k: round(v, 6) for k, v in ctx.timing.items()},
        **answer,
    )
