"""incsched: place the operations of deep-learning computation graphs onto pipeline stages and
devices, and prove the placement optimal.

The data flow is the architecture: capture -> `CompGraph` -> problem -> pre-scheduler -> window ->
exact model -> certified `Result` -> execution. The whole library in four names:

>>> import incsched
>>> graph = incsched.load_graph("resnet18")          # a file, or a graph the package ships
>>> result = incsched.solve(incsched.StageProblem.peer(graph, n_stages=2), time_limit=30)
>>> result.status, result.stop_reason
('optimal', 'optimal')

``incsched.capture(model, example_inputs)`` turns a `torch.nn.Module` into a `Capture` (its
``.graph`` is the `CompGraph`); `PlacementProblem` is the device problem;
`Tuning` holds the inc-ilp pipeline's tuning constants. Importing the package pulls in numpy only:
torch, OR-Tools and the model zoos load when the part that needs them is first used (the names
below that need them are looked up on first access).
"""

from __future__ import annotations

import importlib

from .errors import CaptureError, CycleError, FormatError, GraphError, IncschedError
from .formats import load_graph, save_graph
from .graph import CompGraph

__version__ = "0.1.0"

__all__ = [
    "solve",
    "StageProblem",
    "PlacementProblem",
    "Result",
    "Tuning",
    "CompGraph",
    "load_graph",
    "save_graph",
    "capture",
    "IncschedError",
    "GraphError",
    "CycleError",
    "FormatError",
    "CaptureError",
    "__version__",
]

#: Public names whose modules import OR-Tools or torch, loaded on first access (PEP 562).
_LAZY = {
    "solve": "incsched.front_door",
    "StageProblem": "incsched.problems.stage",
    "PlacementProblem": "incsched.problems.placement",
    "Result": "incsched.result",
    "Tuning": "incsched.inc_ilp.tuning",
}


def __getattr__(name: str):
    if name == "capture":  # the capture step's package, callable as its front function
        return importlib.import_module("incsched.capture")
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # once found, a plain attribute
        return value
    raise AttributeError(f"module 'incsched' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"capture"})
