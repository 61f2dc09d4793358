"""One place where CP-SAT's parameters are set from `SolverSettings`, for every model."""

from __future__ import annotations

from ortools.sat.python import cp_model

from .. import SolverSettings

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


def make_solver(settings: SolverSettings) -> cp_model.CpSolver:
    """A `CpSolver` configured for ``settings``: deterministic (one worker, deterministic time) or fast."""
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.random_seed = settings.seed
    p.log_search_progress = settings.log_search
    if settings.probing_level is not None:
        p.cp_model_probing_level = settings.probing_level
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
