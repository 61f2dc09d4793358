"""The two problems incsched solves: pipeline stages (`StageProblem`) and device placement with
start times (`PlacementProblem`), immutable and JSON round-trippable."""

from .placement import (
    Device,
    Links,
    Placement,
    PlacementError,
    PlacementInfeasibleError,
    PlacementProblem,
    PlacementWindow,
)
from .stage import InfeasibleProblem, ObjectiveWeights, ProblemError, StageProblem

__all__ = [
    "StageProblem",
    "ObjectiveWeights",
    "ProblemError",
    "InfeasibleProblem",
    "PlacementProblem",
    "Device",
    "Links",
    "Placement",
    "PlacementWindow",
    "PlacementError",
    "PlacementInfeasibleError",
]
