"""CP-SAT models of the stage and placement problems (OR-Tools ``cp_model``)."""

from .placement import solve_placement
from .stage import solve_stage

__all__ = ["solve_stage", "solve_placement"]
