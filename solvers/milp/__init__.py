"""The stage problem as a mixed-integer linear program through PuLP (CBC; HiGHS where installed),
used to cross-check CP-SAT's optima on small instances."""

from .stage import available_backends, solve_stage_milp

__all__ = ["solve_stage_milp", "available_backends"]
