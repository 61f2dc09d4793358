"""Graph files in and out: incsched's own JSON, the ICML'24 peer's GML, CSV tables.

`load_graph` picks the reader from the file name; `save_graph` writes incsched JSON atomically.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import FormatError
from ..graph import CompGraph
from ..jsonio import read_json, write_json
from .json_graph import graph_from_dict, graph_to_dict

__all__ = ["load_graph", "save_graph", "graph_to_dict", "graph_from_dict"]


def load_graph(path: str | os.PathLike) -> CompGraph:
    """Read a graph file: ``.json`` / ``.json.gz`` (incsched), ``.gml`` (ICML'24 peer form).

    Raises
    ------
    FormatError
        Unknown extension, malformed file, or unsupported version; the message names the file.
    GraphError
        The file is well-formed but describes an invalid graph.
    """
    path = Path(path)
    suffix = "".join(path.suffixes[-2:]) if path.name.endswith(".gz") else path.suffix
    if suffix in (".json", ".json.gz"):
        return graph_from_dict(read_json(path), source=str(path))
    if suffix in (".gml", ".gml.gz"):
        from .gml import read_gml

        return read_gml(path)
    raise FormatError(f"{path}: unknown graph file type {suffix!r} (expected .json, .json.gz or .gml)")


def save_graph(graph: CompGraph, path: str | os.PathLike) -> None:
    """Write ``graph`` as incsched JSON (gzipped if the name ends in ``.gz``), atomically."""
    name = str(path)
    if not (name.endswith(".json") or name.endswith(".json.gz")):
        raise FormatError(f"{path}: graphs are saved as .json or .json.gz")
    write_json(path, graph_to_dict(graph))
