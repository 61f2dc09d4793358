"""The incumbent: the best of the learned policy and the baselines, judged by the independent check.

Inc-ILP's first step. No single pre-scheduler wins everywhere (measured: the placement policy is
38% shorter than critical-path list scheduling on the public dataflow graphs where HEFT gains 1%,
while on chains the DP baselines are already optimal), so every cheap candidate runs and the
evaluator picks. The policies are loaded once per process (their modules cache the weights).
"""

from __future__ import annotations

from importlib import import_module
from typing import Callable

from ..baselines.placement import PLACEMENT_BASELINES, local_search
from ..baselines.stage import STAGE_BASELINES
from ..errors import UnknownNameError
from ..helper_thread import Abandoned, run_in_helper
from .context import Context

__all__ = ["STAGE_PRESCHEDULERS", "PLACEMENT_PRESCHEDULERS", "portfolio", "run_prescheduler", "POLICY_MIN_SECONDS"]

#: Time limits below this skip the learned policy in the portfolio: its first use in a process
#: imports torch and compiles its decoder (measured 2.2-2.8 s on this 2-core machine, cold),
#: which a short budget cannot afford. A rule on the limit, not on the clock, so it repeats.
POLICY_MIN_SECONDS = 8.0


def _policy(module: str) -> Callable:
    """The learned policy's ``preschedule`` from ``module``, imported (with torch) on first use."""

    def rl(problem, seed: int = 0):
        return import_module(module).preschedule(problem, seed)

    rl.__name__ = "rl"
    return rl


#: Pre-schedulers by name, each ``f(problem, seed) -> incumbent``: the baselines and the policy.
STAGE_PRESCHEDULERS: dict[str, Callable] = {**STAGE_BASELINES, "rl": _policy("incsched.policy.stage_policy")}
PLACEMENT_PRESCHEDULERS: dict[str, Callable] = {**PLACEMENT_BASELINES, "rl": _policy("incsched.policy.placement_policy")}

#: The stage portfolio: every baseline is a few milliseconds to a second on 1,000 nodes.
_STAGE_PORTFOLIO = ("contiguous_params", "contiguous_compute", "pipedream_dp", "dp_local_search", "asap", "alap")

#: Candidates that polish another's answer, given it when it ran already (the DP runs once, not twice).
_STARTS_FROM = {"dp_local_search": "pipedream_dp"}

#: The placement portfolio: the two list schedulers; local search then improves the best of all.
_PLACEMENT_PORTFOLIO = ("heft", "critical_path_list")

#: The placement portfolio also runs the local-search baseline (2,500 evaluations), so that
#: inc-ilp is never worse than any baseline a user could have run instead.
_SLOW_CANDIDATES = {"stage": (), "placement": ("local_search",)}

#: Seconds per node a candidate may take, measured on this 2-core machine and rounded up
#: (stage: rand_graph_1000/5000/10000, dp_local_search 0.2 / 3.6 / 7.6 s, the policy 1.4 / 0.2 /
#: 1.6 s warm; placement: local search 1-3 s on 100-300 ops, the policy 0.14 s on 1,021 ops and
#: 0.55 s on 9,997 warm, the doppler experiment's speed profile). A candidate whose estimate exceeds
#: `_PORTFOLIO_SHARE` of the time limit is skipped and the log says so: pure-Python candidates
#: cannot be stopped half-way, and the clock must hold. A rule on size and limit, so it repeats.
_COST_PER_NODE = {"stage": {"pipedream_dp": 1e-4, "dp_local_search": 1e-3, "rl": 3e-4},
                  "placement": {"local_search": 1e-2, "rl": 2e-4}}
_PORTFOLIO_SHARE = 0.25

#: Local-search assignments per nominal second of budget, and at most (about a millisecond each on
#: 200 ops: a fifth of the budget, counted in evaluations so that it repeats).
_SEARCH_PER_SECOND = 200
_SEARCH_MAX = 20_000


def run_prescheduler(ctx: Context, name_or_fn, table: dict[str, Callable]):
    """One named (or given) pre-scheduler's answer, checked and offered as the incumbent."""
    if callable(name_or_fn):
        name, fn = getattr(name_or_fn, "__name__", "custom"), name_or_fn
    elif name_or_fn in table:
        name, fn = name_or_fn, table[name_or_fn]
    else:
        raise UnknownNameError(f"unknown pre-scheduler {name_or_fn!r}; known: {sorted(table)}")
    with ctx.timed("preschedule"):
        answer = _on_the_clock(ctx, name, fn)
    if answer is None:
        ctx.record("incumbent", prescheduler=name, note=f"{name} did not finish before the run stopped ({ctx.stop.reason})")
        return None
    value = ctx.check(answer)
    ctx.improve(answer, value, f"preschedule:{name}")
    ctx.record("incumbent", prescheduler=name, objective=value)
    return answer


def portfolio(ctx: Context, kind: str, *, policy: bool = True) -> None:
    """Run the portfolio for ``kind`` ("stage" or "placement") and keep the best as the incumbent.

    The learned policy joins when ``policy`` is set and the time limit affords its first load
    (`POLICY_MIN_SECONDS`); the log says which candidate won and what each scored.
    """
    table = STAGE_PRESCHEDULERS if kind == "stage" else PLACEMENT_PRESCHEDULERS
    names = list(_STAGE_PORTFOLIO if kind == "stage" else _PLACEMENT_PORTFOLIO)
    skipped = None
    if ctx.time_limit >= POLICY_MIN_SECONDS:
        names += _SLOW_CANDIDATES[kind]
        if policy:
            names.insert(0, "rl")
    elif policy:
        skipped = f"learned policy skipped: time_limit {ctx.time_limit:g} s is below the {POLICY_MIN_SECONDS:g} s its first load may take"
    n_nodes = ctx.problem.graph.n_nodes
    affordable = [name for name in names if _COST_PER_NODE[kind].get(name, 0.0) * n_nodes <= _PORTFOLIO_SHARE * ctx.time_limit]
    too_slow = [name for name in names if name not in affordable]
    if too_slow:
        skipped = (skipped + "; " if skipped else "") + f"skipped as too slow for {n_nodes} nodes in {ctx.time_limit:g} s: {', '.join(too_slow)}"
    scores, answers = {}, {}
    with ctx.timed("preschedule"):
        for name in affordable:
            if ctx.stopped():
                break
            if name in _STARTS_FROM and _STARTS_FROM[name] in answers:
                answer = table[name](ctx.problem, ctx.seed, start=answers[_STARTS_FROM[name]])
            else:
                answer = _on_the_clock(ctx, name, table[name])
            if answer is None:
                break
            answers[name] = answer
            scores[name] = value = ctx.check(answer)
            ctx.improve(answer, value, f"preschedule:{name}")
        if kind == "placement" and ctx.best is not None and not ctx.stopped():
            _polish(ctx)
    feasible = {name: v for name, v in scores.items() if v is not None}
    winner = min(feasible, key=feasible.get) if feasible else None
    ctx.record("incumbent", winner=winner, scores=scores, **({"note": skipped} if skipped else {}))


def _on_the_clock(ctx: Context, name: str, fn: Callable):
    """``fn(problem, seed)``; for the learned policy, None when the run stops before it finishes.

    The policy's first use in a process imports torch, reads its weights and compiles its decoder:
    seconds that cannot be cut half-way (15.6 s under a load of 11 on 2 cores). It runs in a
    helper thread, so that the clock and Ctrl-C still end the run on time; an abandoned load
    finishes in the background, and the next run in the process finds the policy ready.
    """
    if name != "rl":  # the baselines are budgeted by their measured cost per node (`_COST_PER_NODE`)
        return fn(ctx.problem, ctx.seed)
    try:
        return run_in_helper(lambda: fn(ctx.problem, ctx.seed), "incsched policy", should_stop=ctx.stopped)
    except Abandoned:
        ctx.stop.stop(ctx.stopped() or "time")
        return None


def _polish(ctx: Context) -> None:
    """Local search from the best placement, sized by the nominal budget (counted, so it repeats)."""
    evaluations = search_evaluations(ctx, ctx.problem.n_nodes)
    start_value = ctx.best_value
    answer = local_search(ctx.problem, ctx.seed, evaluations=evaluations, start=ctx.best, should_stop=lambda: ctx.stopped() is not None)
    ctx.improve(answer, ctx.check(answer), "preschedule:local_search")
    ctx.record("local_search", evaluations=evaluations, start=start_value, objective=ctx.best_value)


def search_evaluations(ctx: Context, n_nodes: int) -> int:
    """Local-search budget for ``n_nodes`` of the problem's graph, by the nominal budget."""
    scale = n_nodes / max(ctx.problem.n_nodes, 1)
    return int(min(max(ctx.nominal_work * _SEARCH_PER_SECOND * scale, 200), _SEARCH_MAX))
