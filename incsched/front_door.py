"""`solve()`: the front door. Checks the call, runs the pipeline under the user's clock, certifies.

    problem ──inc_ilp.stage.run / inc_ilp.placement.run──> best answer + global lower bound
    best answer ──certify (independent re-check)──> Result (optimal | window_optimal | feasible | ...)

The clock and reproducibility are separate knobs (see `solve`): ``time_limit`` is wall seconds,
everything counted; ``work_limit`` a deterministic budget. Whatever ends the run -- a proof, the
clock, the work budget, Ctrl-C or the progress callback -- the best answer so far is re-checked and
returned, and the result says what stopped it and whether a rerun repeats it byte for byte.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from .certify import METHODS, certify
from .errors import SolveArgumentError, UnknownNameError
from .inc_ilp import placement as placement_pipeline
from .inc_ilp import stage as stage_pipeline
from .inc_ilp.context import Context, Progress
from .inc_ilp.incumbent import PLACEMENT_PRESCHEDULERS, STAGE_PRESCHEDULERS
from .inc_ilp.tuning import Tuning
from .problems.placement import PlacementProblem
from .problems.stage import StageProblem
from .result import Result

__all__ = ["solve", "METHODS", "Progress"]


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
    tuning: Tuning | None = None,
    clock_started: float | None = None,
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
    tuning : Tuning, optional
        The inc-ilp pipeline's tuning constants (shares of the budget, portfolio, window and band
        sizes); default `Tuning()`. Recorded in the result's provenance.
    clock_started : float, optional
        The ``time.perf_counter()`` reading ``time_limit`` counts from, when the user's clock
        started before this call (a command's start-up); default: this call.

    Returns
    -------
    Result
        ``stop_reason`` says what ended the run, ``reproducible`` whether a rerun repeats it.

    Raises
    ------
    UnknownNameError
        Unknown method or pre-scheduler.
    SolveArgumentError
        A limit that is not a positive finite number, a seed outside 0 .. 2**31-1, fewer than
        one worker, or a `Tuning` with a negative or non-finite value.
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
    if tuning is None:
        tuning = Tuning()
    elif not isinstance(tuning, Tuning):
        raise SolveArgumentError(f"tuning must be an incsched.Tuning, got {type(tuning).__name__}")
    started = time.perf_counter()
    if clock_started is not None:
        if isinstance(clock_started, bool) or not isinstance(clock_started, (int, float)) or not clock_started <= started:
            raise SolveArgumentError(f"clock_started must be a time.perf_counter() reading from the past, got {clock_started!r}")
        started = float(clock_started)

    ctx = Context(
        problem, time_limit=float(time_limit), work_limit=None if work_limit is None else float(work_limit),
        deterministic=deterministic, workers=1 if deterministic else workers, seed=seed, check=check,
        on_progress=on_progress, tuning=tuning, started=started,
        probing_level=0 if kind == "stage" and problem.graph.n_nodes > tuning.probing_max_nodes else None,
    )
    ctx.start_clock()
    try:
        _run(ctx, kind, pipeline, method, preschedule, radius)
    finally:
        ctx.cancel_later()
        ctx.stop_clock()
    return certify(ctx, kind, method)


def _run(ctx: Context, kind: str, pipeline, method: str, preschedule, radius: int) -> None:
    """The pipeline, then any answer still coming from the policy's child process; Ctrl-C ends
    either with the best answer so far (certified by the caller)."""
    try:
        if kind == "stage":
            pipeline.run(ctx, method, preschedule, radius)
        else:
            pipeline.run(ctx, method, preschedule)
        settled = ctx.proven or (ctx.best is not None and ctx.lower_bound is not None and ctx.best_value <= ctx.lower_bound)
        ctx.collect(wait=not settled)  # the policy still loading in its child: its answer, if it comes within the clock
        if not settled:
            ctx.collect_late()  # ... or within the clock's tolerance, as the policy alone would
    except KeyboardInterrupt:
        ctx.stop.stop("interrupted")
    try:
        ctx.collect()  # one that arrived before the clock ran out, while a phase could not look
    except KeyboardInterrupt:
        ctx.stop.stop("interrupted")


def _check_limit(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SolveArgumentError(f"{name} must be a positive finite number of seconds, got {value!r}")
