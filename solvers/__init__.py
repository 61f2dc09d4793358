"""Exact back ends: CP-SAT models for both problems, and the stage problem as a MILP via PuLP.

Every back end takes a problem, optional per-node windows and a hint, and `SolverSettings`; it
returns a `SolverOutput`. Back ends never judge their own answer: `incsched` re-evaluates every
assignment with its independent evaluators before a result leaves the library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["SolverSettings", "SolverOutput", "STATUSES"]

#: What a back end may claim about the model it was given (a window, or the full problem).
STATUSES = ("optimal", "feasible", "infeasible", "unknown")


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
    #: Wall-clock cap of a deterministic run (None: 3x its deterministic budget + 10 s). A run the
    #: cap cuts short may not repeat; label generation, which must repeat, sets a generous one.
    wall_cap_s: float | None = None

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
