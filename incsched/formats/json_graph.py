"""The versioned JSON form of a `CompGraph` as `incsched.formats` reads and writes it.

The form itself (fields, checks, the schema's version) lives in `incsched.graph.json_form`, below the
graph, so that `CompGraph.to_json`/`from_json` need no import of this package; these names stay for
the readers, problems and results that embed a graph.
"""

from __future__ import annotations

from typing import Any

from ..graph import CompGraph
from ..graph.json_form import FORMAT, VERSION, check_text, graph_to_dict
from ..limits import InputLimits

__all__ = ["graph_to_dict", "graph_from_dict", "check_text", "FORMAT", "VERSION"]


def graph_from_dict(data: Any, *, source: str = "graph", limits: InputLimits | None = None) -> CompGraph:
    """Rebuild a `CompGraph` from `graph_to_dict`'s form: `CompGraph.from_json` (see it for the errors)."""
    return CompGraph.from_json(data, source=source, limits=limits)
