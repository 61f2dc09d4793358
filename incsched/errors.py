"""Errors raised at incsched's boundaries.

Every error names what was wrong and where (the node, the edge, the file), so a caller scheduling
thousands of graphs can report a bad one and move on.
"""

__all__ = ["IncschedError", "GraphError", "CycleError", "FormatError", "CaptureError", "UnknownNameError", "LimitError"]


class IncschedError(Exception):
    """Base class of every error incsched raises on purpose."""


class GraphError(IncschedError, ValueError):
    """A computation graph is malformed: a cycle, an unknown node, a bad cost."""


class CycleError(GraphError):
    """The graph has a directed cycle; ``cycle`` lists the node names along it."""

    def __init__(self, cycle: list[str]):
        self.cycle = list(cycle)
        shown = " -> ".join(self.cycle[:20] + ([self.cycle[0]] if len(self.cycle) <= 20 else ["..."]))
        super().__init__(f"graph has a cycle through {len(self.cycle)} nodes: {shown}")


class FormatError(IncschedError, ValueError):
    """A graph, problem or result file cannot be read: bad JSON, wrong version, missing field."""


class CaptureError(IncschedError, RuntimeError):
    """A PyTorch model could not be captured into a computation graph."""


class UnknownNameError(IncschedError, ValueError):
    """A method or pre-scheduler name that incsched does not know; the message lists the known ones."""


class LimitError(FormatError):
    """An input is larger than a configured limit (`incsched.limits`); the message names the limit
    and the environment variable that raises it."""
