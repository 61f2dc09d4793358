"""Errors of the two problems and their answers, raised at construction with the offending name.

Malformed input is a ``ValueError`` (`ProblemError`, `PlacementError`); a well-formed problem that
no answer can satisfy says why and where (`InfeasibleProblem`, `PlacementInfeasibleError`).
"""

from __future__ import annotations

from ..errors import IncschedError

__all__ = ["ProblemError", "InfeasibleProblem", "PlacementError", "PlacementInfeasibleError"]


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
