"""Exact back ends: CP-SAT models for both problems, and the stage problem as a MILP via PuLP.

Every back end takes a problem, optional per-node windows and a hint, and `SolverSettings`; it
returns a `SolverOutput`. Back ends never judge their own answer: `incsched` re-evaluates every
assignment with its independent evaluators before a result leaves the library.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

__all__ = ["SolverSettings", "SolverOutput", "STATUSES", "StopSignal"]

#: What a back end may claim about the model it was given (a window, or the full problem).
STATUSES = ("optimal", "feasible", "infeasible", "unknown")


class StopSignal:
    """Stops running back ends from another thread: Ctrl-C, the caller's clock, a progress callback.

    A back end registers how to stop its search while it runs (`watch`); `stop` calls every
    registered stop at once and makes later searches stop as soon as they start. The first reason
    given is kept (``"interrupted"``, ``"time"``, ``"callback"``): it is what the caller reports.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._active: list[Callable[[], None]] = []
        self.reason: str | None = None

    @property
    def stopped(self) -> bool:
        return self.reason is not None

    def stop(self, reason: str) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
            active = list(self._active)
        for stop_search in active:
            stop_search()

    @contextmanager
    def watch(self, stop_search: Callable[[], None]) -> Iterator[None]:
        """Register ``stop_search`` for the duration of one search."""
        with self._lock:
            self._active.append(stop_search)
            stopped = self.reason is not None
        if stopped:
            stop_search()
        try:
            yield
        finally:
            with self._lock:
                self._active.remove(stop_search)


@dataclass(frozen=True)
class SolverSettings:
    """Limits and reproducibility settings shared by every back end.

    In deterministic mode CP-SAT runs one worker under ``max_deterministic_time`` (defaulting to
    ``time_limit``), which gives the same answer on every machine with the same OR-Tools version;
    otherwise ``time_limit`` is wall-clock seconds and ``workers`` run in parallel (not reproducible).
    """

    time_limit: float = 10.0
    deterministic: bool = True
    seed: int = 0
    workers: int = 1
    max_deterministic_time: float | None = None
    log_search: bool = False
    #: CP-SAT presolve probing effort (None: its default). 0 skips probing, which on 1000-node stage
    #: models adds ~300k clauses and seconds of presolve before any search starts.
    probing_level: int | None = None
    #: CP-SAT linearization level (None: its default, 1). 0 keeps no LP relaxation: on the placement
    #: model's big-M disjunctions the LP bound is weak and costs search time (see `incsched.inc_ilp.tuning`).
    linearization_level: int | None = None
    #: Wall-clock cap of a deterministic run (None: 3x its deterministic budget + 10 s). A run the
    #: cap cuts short may not repeat; label generation, which must repeat, sets a generous one.
    wall_cap_s: float | None = None
    #: Lets the caller stop a running search (its answer so far is returned, status ``feasible``).
    #: Without one, Ctrl-C stops the search and raises KeyboardInterrupt once it has stopped.
    stop: StopSignal | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if not self.time_limit > 0:
            raise ValueError(f"time_limit must be positive, got {self.time_limit}")
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")


@dataclass(frozen=True)
class SolverOutput:
    """What a back end found, in the problem's integer solver units.

    ``assignment`` holds a stage or device index per node; ``start`` (placements only) the start
    time of each node in solver time units; ``objective`` and ``bound`` are in the same units as the
    model's objective, whose scale the back end reports in ``info``.
    """

    status: str
    assignment: np.ndarray | None
    objective: float | None
    bound: float | None
    wall_time: float
    backend: str
    start: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
