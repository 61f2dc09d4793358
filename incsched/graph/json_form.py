"""The versioned JSON form of a `CompGraph` (schema: ``incsched/schemas/graph-v1.schema.json``).

Columnar, so that a 100,000-node graph reads and writes in well under a second: one list per node
attribute, edges as parallel ``src``/``dst``/``bytes`` lists of node names. Problems and results embed
this same dictionary. It sits below `incsched.graph.compgraph` (it reads a graph's attributes and checks a
document's fields, but builds no graph) so that `CompGraph.to_json`/`from_json`/`save`/`load` use it
without importing `incsched.formats`, which imports the graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import FormatError
from ..limits import InputLimits, check_count, input_limits

if TYPE_CHECKING:
    from .compgraph import CompGraph

FORMAT = "incsched.graph"
VERSION = 1

__all__ = ["graph_to_dict", "graph_fields", "check_text", "FORMAT", "VERSION"]


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
    for column in ("saved_bytes", "work_bytes", "largest_weight_bytes"):  # training's measured bytes, when measured
        if getattr(graph, column) is not None:
            nodes[column] = getattr(graph, column).tolist()
    if graph.backward_time:
        nodes["backward_time"] = {k: v.tolist() for k, v in sorted(graph.backward_time.items())}
    if graph.members is not None:
        nodes["members"] = [list(m) for m in graph.members]
    out = {
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
    if graph.shared_weights:
        out["shared_weights"] = [
            {"name": w.name, "bytes": w.nbytes, "read_by": [names[v] for v in w.readers]} for w in graph.shared_weights
        ]
    return out


def graph_fields(data: Any, *, source: str = "graph", limits: InputLimits | None = None) -> tuple[list, list, list, dict[str, Any]]:
    """The arguments of `CompGraph` (``names, src, dst, keywords``) that `graph_to_dict`'s form describes.

    Every field's JSON type is checked here, before `CompGraph` sees it, so that a wrong type
    (a scalar where a list belongs, ``meta`` as a list, ``version: true``) is named, not crashed on.

    Parameters
    ----------
    data : dict
        The parsed JSON.
    source : str
        Named in every error message (the file).
    limits : InputLimits, optional
        Largest node and edge counts accepted (default `incsched.limits.input_limits()`).

    Raises
    ------
    FormatError
        If ``data`` is not an incsched graph of a supported version, misses a required field, has
        a field of the wrong JSON type, a name with a NUL character or a lone surrogate, or a
        byte count that is not a whole number.
    LimitError
        If it has more nodes or edges than ``limits`` allow.
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise FormatError(f"{source}: not an incsched graph (format is {found!r}, expected {FORMAT!r})")
    version = data.get("version")
    if type(version) is not int or version != VERSION:  # noqa: E721 - True == 1 must not pass
        raise FormatError(f"{source}: graph format version {version!r} is not supported (expected {VERSION})")
    lim = input_limits(limits)
    nodes, edges = _field(data, "nodes", dict, source), _field(data, "edges", dict, source)
    names = _field(nodes, "name", list, source, "nodes.")
    check_count("nodes", len(names), lim.max_nodes, "max_nodes", source)
    src, dst = _field(edges, "src", list, source, "edges."), _field(edges, "dst", list, source, "edges.")
    check_count("edges", max(len(src), len(dst)), lim.max_edges, "max_edges", source)
    name = _optional(data, "name", str, source, "graph")
    meta = _optional(data, "meta", dict, source, {})
    op = _optional(nodes, "op", list, source, None, "nodes.")
    members = _optional(nodes, "members", list, source, None, "nodes.")
    compute_time = _optional(nodes, "compute_time", dict, source, None, "nodes.")
    backward_time = _optional(nodes, "backward_time", dict, source, None, "nodes.")
    for field, columns in (("compute_time", compute_time), ("backward_time", backward_time)):
        for kind, times in (columns or {}).items():
            if not isinstance(times, list):
                raise FormatError(f"{source}: field nodes.{field}[{kind!r}] must be a list, got {type(times).__name__}")
    for i, group in enumerate(members or ()):
        if not isinstance(group, list):
            where = f"node {names[i]!r}" if i < len(names) and isinstance(names[i], str) else f"entry {i}"
            raise FormatError(f"{source}: field nodes.members of {where} must be a list of names, got {type(group).__name__}")
    shared = _optional(data, "shared_weights", list, source, None)
    for i, w in enumerate(shared or ()):
        if not isinstance(w, dict):
            raise FormatError(f"{source}: entry {i} of field 'shared_weights' must be an object, got {_json_type(w)}")
        b = w.get("bytes")
        if isinstance(b, float) and b.is_integer() and abs(b) <= 2**53:  # JSON's 1.0; other floats CompGraph refuses
            shared[i] = dict(w, bytes=int(b))
    _check_texts(source, "node name", names)
    _check_texts(source, "graph name", [name])
    if op is not None:
        _check_texts(source, "op kind", op)
    if compute_time is not None:
        _check_texts(source, "compute_time device kind", list(compute_time))
    if backward_time is not None:
        _check_texts(source, "backward_time device kind", list(backward_time))
    return names, src, dst, dict(
        op=op,
        flops=_optional(nodes, "flops", list, source, None, "nodes."),
        param_bytes=_whole(_optional(nodes, "param_bytes", list, source, None, "nodes."), "nodes.param_bytes", names, source),
        out_bytes=_whole(_optional(nodes, "out_bytes", list, source, None, "nodes."), "nodes.out_bytes", names, source),
        edge_bytes=_whole(_optional(edges, "bytes", list, source, None, "edges."), "edges.bytes", None, source),
        compute_time=compute_time,
        backward_time=backward_time,
        saved_bytes=_whole(_optional(nodes, "saved_bytes", list, source, None, "nodes."), "nodes.saved_bytes", names, source),
        work_bytes=_whole(_optional(nodes, "work_bytes", list, source, None, "nodes."), "nodes.work_bytes", names, source),
        largest_weight_bytes=_whole(_optional(nodes, "largest_weight_bytes", list, source, None, "nodes."), "nodes.largest_weight_bytes", names, source),
        members=members,
        shared_weights=shared,
        name=name,
        meta=meta,
    )


def _field(obj: dict, key: str, kind: type, source: str, prefix: str = "") -> Any:
    if key not in obj:
        raise FormatError(f"{source}: missing field '{prefix}{key}'")
    if not isinstance(obj[key], kind):
        raise FormatError(f"{source}: field '{prefix}{key}' must be {_JSON_TYPE[kind]}, got {_json_type(obj[key])}")
    return obj[key]


def _optional(obj: dict, key: str, kind: type, source: str, default: Any, prefix: str = "") -> Any:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise FormatError(f"{source}: field '{prefix}{key}' must be {_JSON_TYPE[kind]}, got {_json_type(value)}")
    return value


_JSON_TYPE = {list: "a list", dict: "an object", str: "a string"}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({value!r})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value[:20]!r})"
    return {list: "a list", dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def check_text(value: str, what: str, source: str) -> None:
    """Refuse a name with a NUL character or a lone surrogate: neither survives every file format
    (CSV refuses NUL, UTF-8 cannot encode a lone surrogate), so neither is accepted anywhere."""
    if "\0" in value:
        raise FormatError(f"{source}: {what} {value[:40]!r} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise FormatError(f"{source}: {what} {value[:40]!r} contains a lone surrogate {value[exc.start]!r}, which is not text") from None


def _check_texts(source: str, what: str, values: list) -> None:
    strings = [v for v in values if isinstance(v, str)]  # other types are CompGraph's to name
    joined = "".join(strings)
    if "\0" in joined or not joined.isascii():
        for v in strings:
            check_text(v, what, source)


def _whole(values: list | None, field: str, names: list | None, source: str) -> list | None:
    """Byte counts as Python ints: a whole float (1.0) becomes an int, any other float is refused.

    Left as floats, one float in the list would send all of it through float64 in `CompGraph`,
    silently rounding counts above 2**53.
    """
    if values is None or all(type(v) is int for v in values):  # noqa: E721 - the common case, fast
        return values
    out = list(values)
    for i, v in enumerate(out):
        if isinstance(v, float):
            where = f"node {names[i]!r}" if names is not None and i < len(names) else f"entry {i}"
            if not (v.is_integer() and abs(v) <= 2**53):
                raise FormatError(f"{source}: {field} of {where} is {v!r}; byte counts must be whole numbers written as integers")
            out[i] = int(v)
    return out


def _numbers(a: np.ndarray) -> list:
    # Whole floats written as ints keep files short and round-trip exactly (json reads them back
    # as int, CompGraph stores float64 again).
    return [int(x) if x.is_integer() and abs(x) < 2**53 else x for x in a.tolist()]
