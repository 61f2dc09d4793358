"""The two problems incsched solves: pipeline stages (`StageProblem`) and device placement with
start times (`PlacementProblem`), immutable and JSON round-trippable.

Modules: `stage` (the stage problem), `placement` (the placement problem), `devices` (its devices
and links), `answers` (a placement and the window a solver may be held to), `units` (the tick both
problems choose), `errors` (what their constructors raise).
"""

from .answers import Placement, PlacementWindow
from .devices import Device, Links
from ..errors import InfeasibleProblem, PlacementError, PlacementInfeasibleError, ProblemError
from .placement import DeviceMemory, PlacementProblem
from .stage import ObjectiveWeights, StageProblem

__all__ = [
    "StageProblem",
    "ObjectiveWeights",
    "ProblemError",
    "InfeasibleProblem",
    "PlacementProblem",
    "DeviceMemory",
    "Device",
    "Links",
    "Placement",
    "PlacementWindow",
    "PlacementError",
    "PlacementInfeasibleError",
]
