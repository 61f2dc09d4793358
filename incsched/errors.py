"""Every error incsched raises on purpose, in one place.

Every error names what was wrong and where (the node, the edge, the file, the key), so a caller
scheduling thousands of graphs can report a bad one and move on. Malformed input is a
``ValueError``; a well-formed problem that no answer can satisfy says why and where.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .execute.equivalence import Divergence

__all__ = [
    "IncschedError",
    "GraphError",
    "CycleError",
    "FormatError",
    "LimitError",
    "CaptureError",
    "UnknownNameError",
    "ProblemError",
    "InfeasibleProblem",
    "PlacementError",
    "PlacementInfeasibleError",
    "ScheduleError",
    "DeadlockError",
    "SolveArgumentError",
    "SolverDisagreement",
    "CheckpointError",
    "ExecutionError",
    "OutputMismatch",
    "CalibrationError",
    "ExportError",
    "ConfigError",
]


# ----------------------------------------------------------------------- the graph and its files


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


class LimitError(FormatError):
    """An input is larger than a configured limit (`incsched.limits`); the message names the limit
    and the environment variable that raises it."""


class CaptureError(IncschedError, RuntimeError):
    """A PyTorch model could not be captured into a computation graph."""


class UnknownNameError(IncschedError, ValueError):
    """A method or pre-scheduler name that incsched does not know; the message lists the known ones."""


# -------------------------------------------------------------------------- problems and answers


class ProblemError(IncschedError, ValueError):
    """A stage problem is malformed: a bad stage count, weight, capacity or speed."""


class InfeasibleProblem(IncschedError):
    """No stage assignment can satisfy the problem's hard constraints; ``reason`` says why and where."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class PlacementError(IncschedError, ValueError):
    """A placement problem, device, links, placement or window is malformed (bad device, unknown
    node, bad order)."""


class PlacementInfeasibleError(PlacementError):
    """No placement can exist; ``node`` names the node that cannot go anywhere, when there is one."""

    def __init__(self, message: str, node: str | None = None):
        super().__init__(message)
        self.node = node


class ScheduleError(PlacementError):
    """Planned start times break a rule: an overlap on a device, or a node starting before its inputs arrive."""


class DeadlockError(PlacementError):
    """A device order contradicts precedence: some device waits for a node that can never run first."""


# --------------------------------------------------------------------------------------- solving


class SolveArgumentError(IncschedError, ValueError):
    """An argument of `solve` out of its range (a non-positive or non-finite limit, no workers)."""


class SolverDisagreement(IncschedError):
    """A back end's answer failed the independent check: a bug, reported instead of returned."""


class CheckpointError(FormatError):
    """A policy checkpoint is missing, corrupt, or does not match this version of the code."""


# ----------------------------------------------------- callers: execution, hand-off, experiments


class ExecutionError(IncschedError, RuntimeError):
    """A placement cannot be partitioned or executed (names the node, part or device)."""


class OutputMismatch(IncschedError, AssertionError):
    """A partitioned run's outputs differ from the unsplit model's; ``divergence`` says where first."""

    def __init__(self, message: str, divergence: Divergence | None = None):
        super().__init__(message)
        self.divergence = divergence


class CalibrationError(IncschedError, ValueError):
    """Measurements cannot be taken or do not fit: an unavailable device, mismatched node names."""


class ExportError(IncschedError, ValueError):
    """A result cannot be handed to the asked runtime (names the node, module or stage)."""


class ConfigError(IncschedError, ValueError):
    """An experiment config that cannot run; the message names the file and the key."""
