"""Graph files in and out: incsched's own JSON, the ICML'24 peer's GML, CSV tables, ONNX models (in).

`load_graph` picks the reader from the file name; `save_graph` writes incsched JSON atomically.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import FormatError
from ..graph import CompGraph
from ..jsonio import read_json
from ..limits import InputLimits, input_limits
from .json_graph import graph_from_dict, graph_to_dict

__all__ = ["GRAPH_SUFFIXES", "load_graph", "save_graph", "is_shipped_name", "graph_to_dict", "graph_from_dict"]

#: The file name endings `load_graph` reads.
GRAPH_SUFFIXES = (".json", ".json.gz", ".gml", ".gml.gz", ".onnx", ".onnx.gz")


def load_graph(path: str | os.PathLike, *, limits: InputLimits | None = None) -> CompGraph:
    """Read a graph file: ``.json`` / ``.json.gz`` (incsched), ``.gml`` (ICML'24 peer form), ``.onnx``
    (an ONNX model, read by `incsched.formats.onnx.read_onnx`; needs the ``onnx`` extra), or a graph
    the package ships, by its name (``"resnet50"``: `incsched.data.shipped_graphs` lists them).

    Parameters
    ----------
    path : path-like
        A file, or a bare name (no folder, no extension) that is not a file here: a shipped graph.
    limits : InputLimits, optional
        Largest file (decompressed), node and edge counts and JSON nesting accepted; default
        `incsched.limits.input_limits()` (the ``INCSCHED_MAX_*`` environment variables).

    Raises
    ------
    IncschedError
        A bare name that no shipped graph has; the message lists the shipped ones.
    FormatError
        Unknown extension, malformed file, or unsupported version; the message names the file.
    LimitError
        The file or the graph is larger than ``limits`` allow.
    GraphError
        The file is well-formed but describes an invalid graph.
    OSError
        The file cannot be read (missing, a folder, no permission).
    """
    if is_shipped_name(path):
        from ..data import shipped_graph_path

        path = shipped_graph_path(str(path))
    path = Path(path)
    suffix = "".join(path.suffixes[-2:]) if path.name.endswith(".gz") else path.suffix
    lim = input_limits(limits)
    if suffix in (".json", ".json.gz"):
        return graph_from_dict(read_json(path, limits=lim), source=str(path), limits=lim)
    if suffix in (".gml", ".gml.gz"):
        from .gml import read_gml

        return read_gml(path, limits=lim)
    if suffix in (".onnx", ".onnx.gz"):
        from .onnx import read_onnx

        return read_onnx(path, limits=lim)
    raise FormatError(f"{path}: unknown graph file type {suffix!r} (expected {', '.join(GRAPH_SUFFIXES)})")


def is_shipped_name(path: str | os.PathLike) -> bool:
    """A bare name (no folder, no extension) that is not a file here names a shipped graph."""
    text = os.fspath(path)
    return bool(text) and not os.path.exists(text) and os.sep not in text and "." not in text


def save_graph(graph: CompGraph, path: str | os.PathLike) -> None:
    """Write ``graph`` as incsched JSON (gzipped if the name ends in ``.gz``), atomically: `CompGraph.save`."""
    graph.save(path)
