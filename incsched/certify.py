"""The certify step: the best answer of a run, re-checked from scratch by the independent
evaluators (`evaluate_stages`, `simulate`), becomes a `Result` that states only what is proven.

    best answer ──independent re-check──> Result (optimal | window_optimal | feasible | infeasible | unknown)

``optimal`` only when the re-checked objective meets the run's proven global lower bound, in the
problem's exact units; a back end whose answer re-checks at another value is a bug, raised as
`SolverDisagreement`, never returned.
"""

from __future__ import annotations

import math

from .errors import SolverDisagreement
from .evaluate.simulate import simulate
from .evaluate.stage import evaluate_stages
from .inc_ilp.context import Context, gap
from .problems import training
from .result import Result, library_versions

__all__ = ["certify", "cost_sources", "stop_reason_of", "METHODS"]

#: Methods every problem accepts besides its pre-schedulers' names.
METHODS = ("inc-ilp", "ilp", "ilp-hinted")


def stop_reason_of(ctx: Context, method: str, proven: bool) -> str:
    """What ended the run: a `STOP_REASONS` word."""
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


def cost_sources(p, kind: str) -> dict:
    """Where the problem's node times (per device kind it reads) and byte counts come from, for
    people, and whether the objective counts times: ``{"times": {"cpu": "estimated by the cpu
    roofline (...)"}, "bytes": "from tensor shapes ...", "objective_counts_times": False}``."""
    if kind == "stage":
        kinds, timed = [p.device_kind], p.weights.compute_peak > 0 or p.weights.stage_time_peak > 0
    else:
        kinds, timed = sorted({d.kind for d in p.devices}), True
    return {"times": {k: p.graph.time_source(k) for k in kinds}, "bytes": p.graph.byte_source(), "objective_counts_times": timed}


def certify(ctx: Context, kind: str, method: str) -> Result:
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
        reason = ctx.failures.get(method) or f"{method}'s answer breaks a hard constraint (a capacity or a device's memory)"
    elif ctx.best is None:
        reason = f"no feasible answer found before the run stopped ({stop_reason_of(ctx, method, False)})"
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
        if p.training:  # a training step's time, and where its backward times come from
            terms.update(step_time_s=ev.step_time_s, backward_time_source=training.backward_source(p.graph, p.device_kind),
                         activation_source=training.activation_source(p.graph), working_set_source=training.work_source(p.graph))
            if ev.grad_sync_s:
                terms["grad_sync_s"] = ev.grad_sync_s
        answer = {"stages": [int(s) for s in ctx.best]}
        if p.graph.shared_weights:  # which weights the split holds on several stages (from the evaluator)
            answer["replicated_weights"] = dict(ev.replicated)
    else:
        sched = simulate(p, ctx.best, "ordered")
        objective = int(sched.makespan)
        terms = {"makespan": objective, "makespan_s": float(sched.makespan_seconds),
                 "busy_s": [float(b) * p.time_unit for b in sched.busy], "memory": [int(m) for m in sched.memory]}
        if p.graph.shared_weights:  # which devices hold their own copy of a tied weight
            terms["replicated_weights"] = p.graph.replicated_weights(sched.device)
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
    stop_reason = stop_reason_of(ctx, method, proven)
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
            "tuning": ctx.tuning.to_json(),
            "costs": cost_sources(p, kind),
        },
        timing={k: round(v, 6) for k, v in ctx.timing.items()},
        **answer,
    )
