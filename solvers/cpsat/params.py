"""One place where CP-SAT's parameters are set from `SolverSettings`, for every model."""

from __future__ import annotations

import threading
from contextlib import nullcontext

from ortools.sat.python import cp_model

from .. import SolverSettings, StopSignal

__all__ = ["STATUS_NAMES", "StoppableSolver", "make_solver", "wall_cap", "wall_capped"]

#: CP-SAT status codes in the words of `solvers.STATUSES`.
STATUS_NAMES = {
    cp_model.OPTIMAL: "optimal",
    cp_model.FEASIBLE: "feasible",
    cp_model.INFEASIBLE: "infeasible",
    cp_model.MODEL_INVALID: "unknown",
    cp_model.UNKNOWN: "unknown",
}


def wall_cap(settings: SolverSettings) -> float:
    """The wall-clock limit a deterministic run gets besides its deterministic-time budget."""
    if settings.wall_cap_s is not None:
        return settings.wall_cap_s
    return 3.0 * (settings.max_deterministic_time or settings.time_limit) + 10.0


def wall_capped(settings: SolverSettings, solver: cp_model.CpSolver) -> bool:
    """Whether a deterministic run stopped on the wall clock (so its answer may not repeat)."""
    return bool(settings.deterministic and solver.WallTime() >= 0.98 * wall_cap(settings))


class StoppableSolver(cp_model.CpSolver):
    """A `CpSolver` whose search Ctrl-C and the caller's `StopSignal` stop, keeping its best answer.

    CP-SAT catches SIGINT itself by default and returns as if nothing happened, so a caller never
    learns of the Ctrl-C (measured: `solve()` went on for 74 s after it). Here the search runs in a
    thread while the calling thread waits, interruptibly: Ctrl-C stops the search; with a
    `StopSignal` the interruption is recorded there (reason ``"interrupted"``) and the answer so far
    returned, without one KeyboardInterrupt is raised again once the search has stopped.
    """

    def __init__(self, stop: StopSignal | None = None):
        super().__init__()
        self.stop_signal = stop

    def solve(self, model, solution_callback=None):
        self.parameters.catch_sigint_signal = False
        if self.stop_signal is not None and self.stop_signal.stopped:
            # A stop before the search starts is lost (CP-SAT resets it when a solve begins: a call
            # made after the clock ran out searched its whole 5-s limit), so it gets no time at all.
            self.parameters.max_time_in_seconds = 0.0
        outcome: dict = {}
        done = threading.Event()  # not Thread.join: an interrupted join can leave is_alive() wrong

        def search():
            try:
                outcome["status"] = super(StoppableSolver, self).solve(model, solution_callback)
            except BaseException as exc:  # re-raised in the caller's thread
                outcome["error"] = exc
            finally:
                done.set()

        worker = threading.Thread(target=search, name="cp-sat", daemon=True)
        interrupted = False
        with self.stop_signal.watch(self.stop_search) if self.stop_signal else nullcontext():
            worker.start()
            while not done.is_set():
                try:
                    done.wait(0.2)
                    if self.stop_signal is not None and self.stop_signal.stopped and not done.is_set():
                        self.stop_search()  # again: one that came while the search was starting is lost too
                except KeyboardInterrupt:
                    interrupted = True
                    self.stop_search()
                    if self.stop_signal is not None:
                        self.stop_signal.stop("interrupted")
        if "error" in outcome:
            raise outcome["error"]
        if interrupted and self.stop_signal is None:
            raise KeyboardInterrupt
        return outcome["status"]

    Solve = solve


def make_solver(settings: SolverSettings) -> cp_model.CpSolver:
    """A `CpSolver` configured for ``settings``: deterministic (one worker, deterministic time) or fast."""
    solver = StoppableSolver(settings.stop)
    p = solver.parameters
    p.random_seed = settings.seed
    p.log_search_progress = settings.log_search
    if settings.probing_level is not None:
        p.cp_model_probing_level = settings.probing_level
    if settings.linearization_level is not None:
        p.linearization_level = settings.linearization_level
    if settings.deterministic:
        # Only one worker under a deterministic-time budget is reproducible across machines.
        p.num_workers = 1
        p.max_deterministic_time = settings.max_deterministic_time or settings.time_limit
        # A wall-clock cap keeps a loaded machine from running far past the budget (deterministic
        # seconds can pass several times slower than wall seconds). A run stopped by it is not
        # reproducible: `wall_capped` tells the caller, which must then say so.
        p.max_time_in_seconds = wall_cap(settings)
    else:
        p.num_workers = settings.workers
        p.max_time_in_seconds = settings.time_limit
    return solver
