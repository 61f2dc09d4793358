"""incsched: place the operations of deep-learning computation graphs onto pipeline stages and
devices, and prove the placement optimal.

The data flow is the architecture: capture -> `CompGraph` -> problem -> pre-scheduler -> window ->
exact model -> result -> execution. Importing the package pulls in numpy only; torch, OR-Tools and
the model zoos load when the part that needs them is used.
"""

from .errors import CaptureError, CycleError, FormatError, GraphError, IncschedError
from .formats import load_graph, save_graph
from .graph import CompGraph

__version__ = "0.1.0"

__all__ = [
    "CompGraph",
    "load_graph",
    "save_graph",
    "IncschedError",
    "GraphError",
    "CycleError",
    "FormatError",
    "CaptureError",
    "__version__",
]
