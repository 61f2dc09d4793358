"""A cell of an experiment: one solve (or one execution) with the labels it is shown under, and
the key its row is stored under.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ..batch import SolveTask
from ..jsonio import json_bytes

__all__ = ["Cell", "cell_key"]


@dataclass
class Cell:
    """One solve of the experiment: what it is (``labels``, shown in tables) and the task to run."""

    key: str
    labels: dict[str, Any]
    task: SolveTask | None = None
    graph: Any = None  # solve cells: the CompGraph (for the Gantt schedule)
    run: Any = None  # execution cells: (index of the execution, MethodSpec or the one device)


def cell_key(kind: str, parts: dict[str, Any]) -> str:
    """SHA-256 of what a row's numbers depend on (see the module doc)."""
    return hashlib.sha256(json_bytes({"kind": kind, **parts})).hexdigest()
