"""The incumbent: the best of the learned policy and the baselines, judged by the independent check.

Inc-ILP's first step. No single pre-scheduler wins everywhere (measured: the placement policy is
38% shorter than critical-path list scheduling on the public dataflow graphs where HEFT gains 1%,
while on chains the DP baselines are already optimal), so every cheap candidate runs and the
evaluator picks. The policies are loaded once per process (their modules cache the weights).
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Callable

from ..baselines.placement import PLACEMENT_BASELINES, local_search
from ..baselines.placement_moves import KERNEL as MOVES_KERNEL
from ..baselines.placement_moves import applies as moves_apply
from ..baselines.placement_moves import move_search
from ..baselines.stage import STAGE_BASELINES
from ..errors import PlacementInfeasibleError, UnknownNameError
from ..helper_thread import Abandoned, Started, start_in_helper
from ..policy.compiled import call_compiled, is_cached
from ..policy.warm import loads_quickly
from ..problems import Placement
from .context import Context
from .policy_process import PolicyProcess

__all__ = ["STAGE_PRESCHEDULERS", "PLACEMENT_PRESCHEDULERS", "portfolio", "run_prescheduler", "search_evaluations", "policy_loaded",
           "local_search_clock", "move_evaluations"]

#: Policy modules whose ``preschedule`` has returned once in this process: weights read, decoder
#: compiled. From then on the policy costs a decode only, and always takes part.
_LOADED: set[str] = set()


def policy_loaded(kind: str) -> bool:
    """Whether the ``"stage"`` or ``"placement"`` policy is loaded in this process."""
    return f"incsched.policy.{kind}_decoder" in _LOADED


def _policy(module: str) -> Callable:
    """The learned policy's ``preschedule`` from ``module``, imported on first use (numpy: no torch
    unless the shipped weights lack their ``.npz``)."""

    def rl(problem, seed: int = 0, **options):
        answer = import_module(module).preschedule(problem, seed, **options)
        _LOADED.add(module)
        return answer

    rl.__name__ = "rl"
    return rl


#: Pre-schedulers by name, each ``f(problem, seed) -> incumbent``: the baselines and the policy.
STAGE_PRESCHEDULERS: dict[str, Callable] = {**STAGE_BASELINES, "rl": _policy("incsched.policy.stage_decoder")}
PLACEMENT_PRESCHEDULERS: dict[str, Callable] = {**PLACEMENT_BASELINES, "rl": _policy("incsched.policy.placement_decoder")}

#: Candidates that polish another's answer, given it when it ran already (the DP runs once, not twice).
_STARTS_FROM = {"dp_local_search": "pipedream_dp"}


def run_prescheduler(ctx: Context, name_or_fn, table: dict[str, Callable]):
    """One named (or given) pre-scheduler's answer, checked and offered as the incumbent."""
    if callable(name_or_fn):
        name, fn = getattr(name_or_fn, "__name__", "custom"), name_or_fn
    elif name_or_fn in table:
        name, fn = name_or_fn, table[name_or_fn]
    else:
        raise UnknownNameError(f"unknown pre-scheduler {name_or_fn!r}; known: {sorted(table)}")
    with ctx.timed("preschedule"):
        try:
            # the baselines are budgeted by their measured cost per node (`Tuning.stage_seconds_per_node`)
            answer = _collect_policy(ctx, _start_policy(ctx, fn)) if name == "rl" else fn(ctx.problem, ctx.seed)
        except PlacementInfeasibleError as exc:  # its greedy choices left a node no device with room
            ctx.fail(name, str(exc))
            return None
    if answer is None:
        ctx.record("incumbent", prescheduler=name, note=f"{name} did not finish before the run stopped ({ctx.stop.reason})")
        return None
    value = ctx.check(answer)
    ctx.improve(answer, value, f"preschedule:{name}")
    ctx.record("incumbent", prescheduler=name, objective=value)
    return answer


def portfolio(ctx: Context, kind: str, *, policy: bool = True) -> None:
    """Run the portfolio for ``kind`` ("stage" or "placement") and keep the best as the incumbent.

    The learned policy (when ``policy`` is set) takes part by one of two rules. Loaded in this
    process already, or with a time limit that affords its first load
    (`Tuning.policy_min_seconds`), it always takes part: a rule on the limit, so the run repeats
    (not loaded, it loads here, after the baselines, so that a load slower than the clock leaves
    their answers; once loaded, every later run of the process has it at a decode's cost).
    Otherwise, unless a work limit asks for a run that repeats, it loads here when that is quick
    (`policy.warm.loads_quickly`: ``.npz`` weights and the decoder in numba's cache, about a second;
    from `Tuning.policy_quick_min_seconds`), or else decodes in a child
    process (`PolicyProcess`: a load here cannot be cut short, and a process that exits while
    torch is still importing aborts) while the
    baselines and the search run (`Context.offer_later`), and joins when its
    answer arrives within the clock; whether it did depends on the machine, so such a run is not
    reproducible (and says so). Either way inc-ilp is never worse than the policy alone at the same
    limit. The log says which candidate won and what each scored.
    """
    table = STAGE_PRESCHEDULERS if kind == "stage" else PLACEMENT_PRESCHEDULERS
    t = ctx.tuning
    names = list(t.stage_portfolio if kind == "stage" else t.placement_portfolio)
    notes = []
    if ctx.time_limit >= t.policy_min_seconds:
        names += [] if kind == "stage" else list(t.placement_polish)
    n_nodes = ctx.problem.graph.n_nodes
    cost = t.stage_seconds_per_node if kind == "stage" else t.placement_seconds_per_node
    affordable_policy = cost.get("rl", 0.0) * n_nodes <= t.portfolio_share * ctx.time_limit
    if policy and (ctx.time_limit >= t.policy_min_seconds or policy_loaded(kind)):
        names.insert(0, "rl")
    elif policy and ctx.work_limit is None and affordable_policy and ctx.time_limit >= t.policy_quick_min_seconds and loads_quickly(kind):
        names.insert(0, "rl")  # loads here in about a second, on the clock, and stays for the process's later runs
        notes.append("learned policy loading in this process: its weights need no torch and its decoder is compiled")
    elif policy and ctx.work_limit is not None:
        notes.append(f"learned policy left out: its first load may take {t.policy_min_seconds:g} s, more than time_limit "
                     f"{ctx.time_limit:g} s, and a work-bounded run takes part by rule, not by the clock")
    elif policy and ctx.time_limit < t.policy_background_min_seconds:
        notes.append(f"learned policy left out: not loaded in this process, and its first load takes longer than time_limit {ctx.time_limit:g} s")
    elif policy and affordable_policy:
        ctx.offer_later("rl", PolicyProcess(kind, ctx.problem, ctx.seed))
        notes.append("learned policy loading in a child process: it joins if its answer arrives within the clock")
    affordable = [name for name in names if cost.get(name, 0.0) * n_nodes <= t.portfolio_share * ctx.time_limit]
    too_slow = [name for name in names if name not in affordable] + ([] if affordable_policy or not policy or "rl" in names else ["rl"])
    if too_slow:
        notes.append(f"skipped as too slow for {n_nodes} nodes in {ctx.time_limit:g} s: {', '.join(too_slow)}")
    answers, scores = {}, {}
    with ctx.timed("preschedule"):
        # The policy starts first, in a helper thread (a cold load is most of a 1-s clock: the
        # list schedulers' 0.05-0.1 s before it made it miss half of the runs at 1 s), and is
        # collected after the list schedulers (milliseconds), so that a policy slower than the
        # clock never leaves the run without an answer; then local search (seconds of pure
        # Python: 2,500 assignments took 14 s of a 20-s run under a load of 4 on 2 cores, and
        # the policy, after it, never ran).
        policy_run = _start_policy(ctx, _sampled(ctx, kind, table["rl"])) if "rl" in affordable and not ctx.stopped() else None
        try:
            for name in sorted(affordable, key=lambda name: (name == "local_search") * 2 + (name == "rl")):
                if ctx.stopped():
                    break
                try:
                    if name == "rl":  # loaded here once, for every later run of the process
                        answers[name] = _collect_policy(ctx, policy_run)
                    elif name == "local_search" and kind == "placement":  # seconds of pure Python: on the clock too
                        answers[name] = table[name](ctx.problem, ctx.seed, should_stop=local_search_clock(ctx, ctx.tuning.placement_polish_wall_share / 2))
                    elif name in _STARTS_FROM and answers.get(_STARTS_FROM[name]) is not None:
                        answers[name] = table[name](ctx.problem, ctx.seed, start=answers[_STARTS_FROM[name]])
                    else:
                        answers[name] = table[name](ctx.problem, ctx.seed)
                except PlacementInfeasibleError as exc:  # its greedy choices left a node no device with room
                    ctx.fail(name, str(exc))
                    answers[name] = None
        finally:  # Ctrl-C included: what was computed is judged, in the portfolio's order (ties go to the earlier)
            for name in (name for name in affordable if name in answers):
                answer = answers[name]
                scores[name] = value = None if answer is None else ctx.check(answer)
                if answer is not None:
                    ctx.improve(answer, value, f"preschedule:{name}")
        if kind == "placement" and ctx.best is not None and not ctx.stopped():
            _polish(ctx)
    feasible = {name: v for name, v in scores.items() if v is not None}
    winner = min(feasible, key=feasible.get) if feasible else None
    ctx.record("incumbent", winner=winner, scores=scores, **({"note": "; ".join(notes)} if notes else {}))


def _sampled(ctx: Context, kind: str, rl: Callable) -> Callable:
    """The placement policy with the sample pool its nominal budget affords
    (`Tuning.placement_policy_decodes_per_second`), never less than the default one.

    Its sampled rows draw from one seeded stream in order, so the pool holds the default one
    (`sampling.default_samples`): its best is never worse than ``rl`` alone with the same seed.
    """
    from ..policy.sampling import default_samples  # no torch: the policy module imports it on its call

    if kind != "placement":
        return rl
    t, n = ctx.tuning, max(ctx.problem.n_nodes, 1)
    samples = min(int(t.placement_policy_decodes_per_second * ctx.nominal_work) // n, t.placement_policy_max_samples)
    if samples <= default_samples(n):
        return rl
    return lambda problem, seed: rl(problem, seed, samples=samples)


def _start_policy(ctx: Context, rl: Callable) -> Started:
    """The learned policy on ``ctx.problem``, started in a helper thread (`_collect_policy` waits for it).

    The policy's first use in a process imports its runtime, reads its weights and compiles (or
    loads) its decoder: seconds that cannot be cut half-way (15.6 s under a load of 11 on 2
    cores). In a helper thread the clock and Ctrl-C still end the run on time; an abandoned load
    finishes in the background, and the next run in the process finds the policy ready.
    """
    return start_in_helper(lambda: rl(ctx.problem, ctx.seed), "incsched policy")


def _collect_policy(ctx: Context, run: Started | None):
    """The policy's answer, or None when the run stops before it arrives."""
    if run is None:
        return None
    try:
        return run.wait(should_stop=ctx.stopped)
    except Abandoned:
        ctx.stop.stop(ctx.stopped() or "time")
        return None


def local_search_clock(ctx: Context, share: float):
    """``should_stop`` for local search: the run's stop, and past ``share`` of the time limit from
    now in wall seconds where the clock is the budget (a run with a work limit is decided by its
    counted evaluations alone; a cut marks the run not reproducible)."""
    deadline = ctx.elapsed() + share * ctx.time_limit if ctx.clock_is_budget or not ctx.deterministic else None

    def should_stop() -> bool:
        if ctx.stopped() is not None:
            return True
        if deadline is not None and ctx.elapsed() >= deadline:
            ctx.spend(0.0, wall_capped=True)
            return True
        return False

    return should_stop


def _polish(ctx: Context) -> None:
    """Search from the best placement: the compiled moves where they apply, else local search."""
    if _moves_ready(ctx):
        _moves(ctx)
        return
    evaluations = search_evaluations(ctx, ctx.problem.n_nodes)
    start_value, started = ctx.best_value, ctx.elapsed()
    answer = local_search(ctx.problem, ctx.seed, evaluations=evaluations, start=ctx.best, should_stop=local_search_clock(ctx, ctx.tuning.placement_polish_wall_share))
    ctx.improve(answer, ctx.check(answer), "preschedule:local_search")
    ctx.record("local_search", evaluations=evaluations, start=start_value, objective=ctx.best_value,
               **({} if ctx.deterministic else {"seconds": round(ctx.elapsed() - started, 2)}))


def _moves_ready(ctx: Context) -> bool:
    """Whether the compiled moves (`baselines.placement_moves`) polish this run: no memory limits,
    a share of the budget, and the kernel in numba's cache (0.05 s to load once numba is imported,
    as the policy's decoder imports it; numba's own import takes 0.5-1 s, too long for the shortest
    clocks) or a clock long enough to compile it."""
    t = ctx.tuning
    if t.placement_moves_share <= 0 or not moves_apply(ctx.problem):
        return False
    if not is_cached(MOVES_KERNEL):
        return ctx.time_limit >= t.placement_moves_compile_min_seconds
    return "numba" in sys.modules or ctx.time_limit >= t.placement_moves_import_min_seconds


def _moves(ctx: Context) -> None:
    """Moves of critical ops from the best placement, sized by the nominal budget (counted, so it
    repeats) and cut at `Tuning.placement_moves_wall_share` of the clock where the run need not repeat."""
    t = ctx.tuning
    evaluations = move_evaluations(ctx, ctx.problem.n_nodes, t.placement_moves_share)
    start_value, started = ctx.best_value, ctx.elapsed()
    best = ctx.best if isinstance(ctx.best, Placement) else Placement(ctx.best.device, ctx.best.order)
    answer, used = move_search(ctx.problem, best, evaluations=evaluations, seed=ctx.seed,
                               should_stop=local_search_clock(ctx, t.placement_moves_wall_share), call=call_compiled)
    ctx.improve(answer, ctx.check(answer), "preschedule:moves")
    ctx.record("moves", evaluations=used, start=start_value, objective=ctx.best_value,
               **({} if ctx.deterministic else {"seconds": round(ctx.elapsed() - started, 2)}))


def move_evaluations(ctx: Context, n_nodes: int, share: float) -> int:
    """Placements the moves try on ``n_nodes`` ops with ``share`` of the nominal budget
    (`Tuning.placement_moves_per_second` op-executions a nominal second)."""
    return max(int(share * ctx.nominal_work * ctx.tuning.placement_moves_per_second / max(n_nodes, 1)), 1)


def search_evaluations(ctx: Context, n_nodes: int) -> int:
    """Local-search budget for ``n_nodes`` of the problem's graph, by the nominal budget."""
    scale = n_nodes / max(ctx.problem.n_nodes, 1)
    return int(min(max(ctx.nominal_work * ctx.tuning.search_per_second * scale, 200), ctx.tuning.search_max))
