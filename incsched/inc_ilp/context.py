"""What one solve carries through its phases: the user's clock, the work budget, the stop signal,
progress reports, the log of steps, and the best answer and bound found so far.

The phases (`incumbent`, `stage`, `placement`) only ask the context how much they may spend and
tell it what they found, through its methods (`settings`, `charge`, `spend`, `improve`,
`raise_bound`, `settle_window`, `prove_optimal`, `prove_infeasible`, `offer_later`, `collect`, `fail`, `record`); they never write
its fields. The context decides nothing about the algorithm. Keeping the best answer
here is what makes every phase interruptible: whatever stops the run, the front door certifies
`Context.best` and returns it.
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Iterator

from incsched.solvers import SolverOutput, SolverSettings, StopSignal

from ..errors import PlacementInfeasibleError
from ..helper_thread import Abandoned

from .tuning import Tuning

__all__ = ["Context", "Progress", "STOP_REASONS", "gap"]

#: What ended a run: a finished proof (of optimality or infeasibility), the user's clock, the work
#: budget, Ctrl-C, the progress callback, or nothing at all (a heuristic method has no search).
STOP_REASONS = ("optimal", "time", "work", "interrupted", "callback", "done")


#: Seconds of the clock's tolerance (5% + 1 s past the time limit) that `Context.collect_late`
#: leaves unused: the closing re-check and the result (under 50 ms), and a loaded machine's delays.
LATE_MARGIN_SECONDS = 0.75


@dataclass(frozen=True)
class Progress:
    """One report to ``on_progress``: a new best answer or a higher lower bound.

    ``objective`` and ``lower_bound`` are in the problem's integer units (exact ints, or Fractions
    for fractional stage weights); ``elapsed`` in wall seconds since `solve()` was called.
    """

    phase: str
    objective: int | Fraction | None
    lower_bound: int | Fraction | None
    elapsed: float

    @property
    def gap(self) -> float | None:
        return gap(self.objective, self.lower_bound)


def gap(objective, lower_bound) -> float | None:
    """``(objective - lower_bound) / objective``, computed exactly and rounded once at the end."""
    if objective is None or lower_bound is None:
        return None
    if objective <= lower_bound:
        return 0.0
    return float(Fraction(objective - lower_bound) / Fraction(max(abs(objective), 1)))


@dataclass
class Context:
    """The state of one run.

    Parameters
    ----------
    problem
        The stage or placement problem.
    time_limit : float
        The user's wall clock in seconds, counted from ``started``.
    work_limit : float or None
        Deterministic work budget (CP-SAT deterministic seconds, summed over every call), or None.
    deterministic : bool
        Reproducible search: one CP-SAT worker whose calls are bounded by deterministic time only.
    workers, seed
        CP-SAT workers (not deterministic mode) and the seed of every randomised step.
    check : callable
        ``check(answer, claimed=None) -> value``: the independent evaluator, raising on a wrong claim.
    on_progress : callable, optional
        Called with a `Progress` on every improvement; returning False stops the run.
    tuning : Tuning
        The pipeline's tuning constants (`incsched.inc_ilp.tuning`).
    """

    problem: Any
    time_limit: float
    work_limit: float | None
    deterministic: bool
    workers: int
    seed: int
    check: Callable[..., Any]
    on_progress: Callable[[Progress], Any] | None = None
    tuning: Tuning = field(default_factory=Tuning)
    probing_level: int | None = None
    started: float = field(default_factory=time.perf_counter)
    stop: StopSignal = field(default_factory=StopSignal)
    work_spent: float = 0.0
    wall_capped: bool = False  # a deterministic call was cut by the clock: its answer may not repeat
    steps: list[dict] = field(default_factory=list)
    timing: dict[str, float] = field(default_factory=dict)
    best: Any = None
    best_value: int | Fraction | None = None
    best_phase: str | None = None
    lower_bound: int | Fraction | None = None
    bound_source: str = ""
    part_bounds: dict[bytes, int] = field(default_factory=dict)  # the bound phase's, of the whole problem and each segment, by signature
    queued_parts: set[bytes] = field(default_factory=set)  # ... and those whose two queues (`queue_bound`) it ran
    window_optimal: bool = False  # the best answer is the proven optimum of the last window solved
    proven: bool = False  # the full model proved the best answer optimal (or the problem infeasible)
    infeasible_reason: str | None = None
    failures: dict[str, str] = field(default_factory=dict)  # pre-scheduler -> why it gave no answer
    _later: dict[str, Any] = field(default_factory=dict)  # pre-scheduler -> its answer still coming (PolicyProcess)
    _timer: threading.Timer | None = None
    _clock_started: bool = False

    # ------------------------------------------------------------------ the clock and the budget

    @property
    def nominal_work(self) -> float:
        """What the phases are sized by: the work budget, else the time limit read as work.

        Sizing by a number the caller gave (never by the clock) keeps every decision of a run
        that ends before the clock independent of the machine's load.
        """
        return self.work_limit if self.work_limit is not None else self.time_limit

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def wall_left(self) -> float:
        return max(self.time_limit - min(self.tuning.closing_seconds, self.time_limit / 4) - self.elapsed(), 0.0)

    def work_left(self) -> float:
        if self.work_limit is None:
            return math.inf
        return max(self.work_limit - self.work_spent, 0.0)

    def stopped(self) -> str | None:
        """Why the run must end now (a `STOP_REASONS` word), or None to go on."""
        if self.stop.reason is not None:
            return self.stop.reason
        if self.wall_left() <= 0:
            return "time"
        if self.work_left() <= 0:
            return "work"
        return None

    def start_clock(self) -> None:
        """From now on, stop any running search when the clock runs out, wherever the run is.

        The timer thread starts with the first search (`settings`): until then every step asks
        `stopped`, and a run that a bound or a heuristic settles in milliseconds does not pay for
        a thread (about 2 ms under load, most of a 3 ms proof).
        """
        self._clock_started = True

    def _arm_clock(self) -> None:
        if self._clock_started and self._timer is None:
            self._timer = threading.Timer(self.wall_left(), self.stop.stop, args=("time",))
            self._timer.daemon = True
            self._timer.start()

    def stop_clock(self) -> None:
        """No more searches: cancel the timer and note the run's total wall time."""
        self._clock_started = False
        if self._timer is not None:
            self._timer.cancel()
        self.timing["total"] = self.elapsed()

    @property
    def clock_is_budget(self) -> bool:
        """No work limit: the time limit is the budget, and a phase may also be cut at its nominal
        share in wall seconds (`settings`' ``wall_share``). Deterministic seconds of the placement
        rounds passed 20-80 times slower than wall seconds on a loaded 2-core machine, so a round
        sized at 1.2 of them took most of a 60-s run. A cut marks the run not reproducible; a run
        with a work limit is never cut so, and repeats."""
        return self.work_limit is None

    def settings(self, work: float | None = None, *, workers: int | None = None, wall_share: float | None = None,
                 linearization: int | None = None, deterministic: bool | None = None) -> SolverSettings:
        """Settings of one CP-SAT call allowed ``work`` (None: all that is left of the budget).

        Deterministic mode: one worker bounded by deterministic time, the clock as its wall cap
        (a call the clock cuts is marked, and the run is then not reproducible). Otherwise
        ``workers`` (default the run's) in parallel and ``work`` read as wall seconds.
        ``wall_share``: where `clock_is_budget`, the call's wall seconds are also capped at this
        share of the time limit. ``linearization``: CP-SAT's linearization level (None: its default).
        ``deterministic``: True runs this call the deterministic way in either mode (None: the run's mode).
        """
        self._arm_clock()
        self.collect()  # an answer that arrived from a child process becomes the hint of this search
        cap = self.work_left() if work is None else min(work, self.work_left())
        wall = max(self.wall_left(), 1e-3)
        if wall_share is not None and self.clock_is_budget:
            wall = max(min(wall, wall_share * self.time_limit), 1e-3)
        if self.deterministic if deterministic is None else deterministic:
            return SolverSettings(
                time_limit=max(cap, 1e-3), deterministic=True, seed=self.seed, workers=1,
                wall_cap_s=wall, probing_level=self.probing_level, linearization_level=linearization, stop=self.stop,
            )
        return SolverSettings(
            time_limit=max(min(cap, wall), 1e-3), deterministic=False, seed=self.seed,
            workers=self.workers if workers is None else min(workers, self.workers), probing_level=self.probing_level,
            linearization_level=linearization, stop=self.stop,
        )

    def charge(self, out: SolverOutput) -> None:
        """Count a back end's work against the budget."""
        self.spend(float(out.info.get("deterministic_time") or 0.0), bool(out.info.get("wall_capped")))

    def spend(self, work: float, wall_capped: bool = False) -> None:
        """Count ``work`` deterministic seconds against the budget; ``wall_capped``: the clock cut
        (or skipped) a deterministic step, so a rerun may not repeat it."""
        self.work_spent += work
        if wall_capped:
            self.wall_capped = True

    # ------------------------------------------------------------------ what was found

    def improve(self, answer, value, phase: str) -> bool:
        """Keep ``answer`` if it beats the best so far (``value`` from the independent check;
        None for an answer that breaks a hard constraint, which is never kept)."""
        if value is None or (self.best is not None and value >= self.best_value):
            return False
        self.best, self.best_value, self.best_phase = answer, value, phase
        self.window_optimal = False
        self._report(phase)
        return True

    def settle_window(self) -> None:
        """The best answer is the proven optimum of the window just solved."""
        self.window_optimal = True

    def prove_optimal(self) -> None:
        """The full model proved the best answer optimal."""
        self.proven = True

    def prove_infeasible(self, reason: str | None) -> None:
        """The full model (or a bound) proved that no answer exists; ``reason`` says why and where."""
        self.infeasible_reason, self.proven = reason, True

    def raise_bound(self, value, source: str, phase: str) -> bool:
        """Keep a proven global lower bound if it is higher than the best so far."""
        if value is None or (self.lower_bound is not None and value <= self.lower_bound):
            return False
        self.lower_bound, self.bound_source = value, source
        self._report(phase)
        return True

    def offer_later(self, name: str, step) -> None:
        """Pre-scheduler ``name`` runs elsewhere (``step``: ``done``, ``wait(should_stop)``,
        ``cancel()``, e.g. `incsched.inc_ilp.policy_process.PolicyProcess`); its answer is taken
        when it arrives within the clock (`collect`). Whether it arrives in time depends on the
        machine, so the run is marked as one a rerun may not repeat."""
        self._later[name] = step
        self.wall_capped = True

    def cancel_later(self) -> None:
        """The run is over: stop whatever is still computing an answer for it."""
        for step in self._later.values():
            step.cancel()
        self._later.clear()

    def collect(self, wait: bool = False) -> None:
        """Take every answer offered later that has arrived; ``wait``: wait for them on the clock."""
        for name, step in list(self._later.items()):
            if not step.done and (not wait or self.stopped()):
                continue  # an answer that arrived in time is taken even after the clock stopped the search
            self._take_later(name, step, self.stopped)

    def collect_late(self) -> None:
        """Wait for an answer still coming from a child process into the clock's tolerance.

        A run may end up to 5% + 1 s past its time limit (the clock's contract), and the policy
        alone takes that much of it cold: loading it in its own process (``rl`` at 5 s) ended at
        4.4-5.9 s on 2 quiet cores, while its child process here needs about 5 s from its start
        (torch's import, 3 s of it, then the decoder's compile), so a 5-s inc-ilp that stopped at its
        limit was worse than ``rl`` on all three never_worse graphs (with this wait it equalled ``rl``
        on two; on the chained matmul the child missed even this deadline in one run of two). It waits
        until ``1.05 * time_limit + 1`` less `LATE_MARGIN_SECONDS`, never after Ctrl-C or a
        callback's stop.
        """
        if not self._later or self.stop.reason not in (None, "time"):
            return
        until = 1.05 * self.time_limit + 1.0 - LATE_MARGIN_SECONDS
        for name, step in list(self._later.items()):
            self._take_later(name, step, lambda: self.stop.reason not in (None, "time") or self.elapsed() >= until)

    def _take_later(self, name: str, step, should_stop) -> None:
        del self._later[name]
        try:
            answer = step.wait(should_stop=should_stop)
        except Abandoned:
            self.record("incumbent", prescheduler=name, note=f"{name} still loading when the run stopped ({self.stopped()})")
            return
        except (PlacementInfeasibleError, RuntimeError) as exc:  # no room for a node, or the child failed
            self.fail(name, str(exc))
            return
        value = self.check(answer)
        self.improve(answer, value, f"preschedule:{name} (child process)")
        self.record("incumbent", prescheduler=name, scores={name: value}, note="arrived from its child process within the clock")

    def fail(self, name: str, reason: str) -> None:
        """Pre-scheduler ``name`` gave no answer (its greedy choices broke a hard constraint)."""
        self.failures[name] = reason
        self.record("incumbent", prescheduler=name, note=reason)

    def record(self, phase: str, **info) -> None:
        """One line of the run's log (kept in the result's provenance as ``steps``)."""
        self.steps.append({"phase": phase, **{k: _plain(v) for k, v in info.items()}})

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.timing[phase] = self.timing.get(phase, 0.0) + time.perf_counter() - started

    def _report(self, phase: str) -> None:
        if self.on_progress is None:
            return
        keep_going = self.on_progress(Progress(phase, self.best_value, self.lower_bound, self.elapsed()))
        if keep_going is False:
            self.stop.stop("callback")


def _plain(v):
    """Log values as JSON-ready plain numbers (exact ints stay ints)."""
    if isinstance(v, Fraction):
        return int(v) if v.denominator == 1 else float(v)
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)  # CP-SAT reports whole objectives as floats
    return v
