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
        # A generous wall-clock cap guards against a slow machine running far past the budget.
        p.max_time_in_seconds = max(10.0 * settings.time_limit, 60.0)
    else:
        p.num_workers = settings.workers
        p.max_time_in_seconds = settings.time_limit
    return solver
