"""The versioned JSON form of a `CompGraph` (schema: ``incsched/schemas/graph-v1.schema.json``).

Columnar, so that a 100,000-node graph reads and writes in well under a second: one list per node
attribute, edges as parallel ``src``/``dst``/``bytes`` lists of node names. Problems and results embed
this same dictionary.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import FormatError, GraphError
from ..graph import CompGraph

FORMAT = "incsched.graph"
VERSION = 1

__all__ = ["graph_to_dict", "graph_from_dict", "FORMAT", "VERSION"]


def graph_to_dict(graph: CompGraph) -> dict[str, Any]:
    """The JSON-ready dictionary of ``graph`` (see the schema for every field)."""
    names = list(graph.names)
    nodes: dict[str, Any] = {
        "name": names,
        "op": list(graph.op),
        "flops": _numbers(graph.flops),
        "param_bytes": graph.param_bytes.tolist(),
        "out_bytes": graph.out_bytes.tolist(),
    }
    if graph.compute_time:
        nodes["compute_time"] = {k: v.tolist() for k, v in sorted(graph.compute_time.items())}
    if graph.members is not None:
        nodes["members"] = [list(m) for m in graph.members]
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": graph.name,
        "meta": dict(graph.meta),
        "nodes": nodes,
        "edges": {
            "src": [names[i] for i in graph.src.tolist()],
            "dst": [names[i] for i in graph.dst.tolist()],
            "bytes": graph.edge_bytes.tolist(),
        },
    }


def graph_from_dict(data: Any, *, source: str = "graph") -> CompGraph:
    """Rebuild a `CompGraph` from `graph_to_dict`'s form.

    Raises
    ------
    FormatError
        If ``data`` is not an incsched graph of a supported version or misses a required field.
    GraphError
        If the graph it describes is invalid (cycle, unknown node, bad cost ...).
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise FormatError(f"{source}: not an incsched graph (format is {found!r}, expected {FORMAT!r})")
    if data.get("version") != VERSION:
        raise FormatError(f"{source}: graph format version {data.get('version')!r} is not supported (expected {VERSION})")
    nodes, edges = _field(data, "nodes", dict, source), _field(data, "edges", dict, source)
    names = _field(nodes, "name", list, source, "nodes.")
    try:
        return CompGraph(
            names,
            _field(edges, "src", list, source, "edges."),
            _field(edges, "dst", list, source, "edges."),
            op=nodes.get("op"),
            flops=nodes.get("flops"),
            param_bytes=nodes.get("param_bytes"),
            out_bytes=nodes.get("out_bytes"),
            edge_bytes=edges.get("bytes"),
            compute_time=nodes.get("compute_time"),
            members=nodes.get("members"),
            name=data.get("name", "graph"),
            meta=data.get("meta"),
        )
    except GraphError as exc:
        exc.args = (f"{source}: {exc}",)  # keep the type (CycleError keeps .cycle), name the file
        raise


def _field(obj: dict, key: str, kind: type, source: str, prefix: str = "") -> Any:
    if key not in obj:
        raise FormatError(f"{source}: missing field {prefix}{key!r}")
    if not isinstance(obj[key], kind):
        raise FormatError(f"{source}: field {prefix}{key!r} must be a {kind.__name__}, got {type(obj[key]).__name__}")
    return obj[key]


def _numbers(a: np.ndarray) -> list:
    # Whole floats written as ints keep files short and round-trip exactly (json reads them back
    # as int, CompGraph stores float64 again).
    return [int(x) if x.is_integer() and abs(x) < 2**53 else x for x in a.tolist()]
