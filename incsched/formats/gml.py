"""GML graph files: the form of the ICML'24 peer's benchmark DAGs (``rand_graph_*.gml``).

A small, strict reader for the GML subset those files use (nested ``key value`` lists, integers,
reals, quoted strings, ``#`` comments) that turns a file into a `CompGraph` several times faster
than ``networkx.read_gml``, and a writer for exporting any `CompGraph` back to that form.

Mapping: node ``parameter`` -> ``param_bytes``; edge ``parameter`` -> edge bytes; node name =
``label`` (else the ``id``); ``out_bytes`` = the node's largest outgoing edge bytes. Files written
here add ``op``, ``flops`` and ``out_bytes`` keys, which the peer's scripts ignore (networkx
reads them as plain attributes).
"""

from __future__ import annotations

import gzip
import os
import re
from html.entities import name2codepoint
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FormatError, GraphError
from ..graph import CompGraph
from ..jsonio import atomic_write_bytes, read_limited
from ..limits import InputLimits, check_count, input_limits
from .json_graph import check_text

__all__ = ["read_gml", "write_gml", "parse_gml"]

# Every non-blank character belongs to exactly one token; a lone '"' is an unterminated string.
_TOKEN = re.compile(r'#[^\n]*|"[^"]*"|[\[\]]|[^\s\[\]"#]+|"')
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT = re.compile(r"[+-]?[0-9]+")
_ENTITY = re.compile(r"&(#[0-9]+|#[xX][0-9A-Fa-f]+|[A-Za-z][A-Za-z0-9]*);")
_STRING_OR_COMMENT = re.compile(r'"[^"]*"|#[^\n]*')
_NODE_KEY = re.compile(r"(?<![A-Za-z0-9_])node\s*\[")
_EDGE_KEY = re.compile(r"(?<![A-Za-z0-9_])edge\s*\[")
#: Digits beyond which int() refuses a number (sys.get_int_max_str_digits()'s default).
_MAX_DIGITS = 4300
_REAL = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?")

#: One parsed list: ``(key, value, token_index)`` triples; a value is int, float, str or a list.
GmlList = list


def read_gml(path: str | os.PathLike, *, limits: InputLimits | None = None) -> CompGraph:
    """Read a GML file (optionally gzipped) into a `CompGraph`.

    Parameters
    ----------
    path : path-like
        A ``.gml`` or ``.gml.gz`` file holding one ``graph [ directed 1 ... ]``.
    limits : InputLimits, optional
        Largest file (decompressed), node and edge counts accepted; default
        `incsched.limits.input_limits()` (the ``INCSCHED_MAX_*`` environment variables).

    Returns
    -------
    CompGraph
        Nodes in file order. ``name`` is the file stem; ``meta`` records the source file name.

    Raises
    ------
    FormatError
        Malformed GML, an undirected graph, a node without ``id``, an edge to an unknown ``id``,
        a ``parameter`` that is not a non-negative integer below 2**63, a label or ``op`` that is
        a list, a name with a NUL character or a lone surrogate; the message names the file and line.
    LimitError
        The file, or its node or edge count, is larger than ``limits`` allow (checked before the
        file is parsed).
    GraphError
        The file is well-formed but describes an invalid graph (a cycle, a duplicate edge or
        label); the message starts with the file name.

    Examples
    --------
    >>> g = read_gml("rand_graph_1000_1.gml")  # doctest: +SKIP
    >>> g.n_nodes, g.n_edges  # doctest: +SKIP
    (949, 2730)
    """
    path = Path(path)
    lim = input_limits(limits)
    text = _read_text(path, lim.max_file_bytes)
    # Counted before parsing, which takes about ten times the file's size in memory.
    skeleton = _STRING_OR_COMMENT.sub("", text)
    check_count("nodes", len(_NODE_KEY.findall(skeleton)), lim.max_nodes, "max_nodes", str(path))
    check_count("edges", len(_EDGE_KEY.findall(skeleton)), lim.max_edges, "max_edges", str(path))
    del skeleton
    top = parse_gml(text, source=str(path))
    return _graph_from_gml(top, text, path)


def write_gml(graph: CompGraph, path: str | os.PathLike, *, peer: bool = False) -> None:
    """Write ``graph`` as GML, atomically (gzipped when the name ends in ``.gz``).

    Parameters
    ----------
    graph : CompGraph
    path : path-like
    peer : bool
        Write exactly the peer's form: labels are the node indices ``"0"`` .. ``"n-1"`` (their
        scripts convert labels with ``int()``) and only ``parameter`` keys; node names, op kinds,
        flops and ``out_bytes`` are dropped. By default labels are the node names and ``op``,
        ``flops`` and ``out_bytes`` are written too, so `read_gml` gives the graph back except for
        compute times, members and meta (use incsched JSON for a lossless copy).

    Raises
    ------
    OSError
        If the file cannot be written (no partial file is left behind).
    """
    if graph.shared_weights:  # dropping them would understate every stage that reads one
        raise FormatError(f"{graph.name}: {len(graph.shared_weights)} shared weight(s) (e.g. {graph.shared_weights[0].name!r}) have no place in GML; save the graph as .json")
    lines = ["graph [", "  directed 1"]
    if not peer:
        lines.append(f"  name {_quote(graph.name)}")
    for i in range(graph.n_nodes):
        label = str(i) if peer else graph.names[i]
        lines += ["  node [", f"    id {i}", f"    label {_quote(label)}", f"    parameter {int(graph.param_bytes[i])}"]
        if not peer:
            lines += [
                f"    op {_quote(graph.op[i])}",
                f"    flops {_real(float(graph.flops[i]))}",
                f"    out_bytes {int(graph.out_bytes[i])}",
            ]
        lines.append("  ]")
    for k, (u, v, b) in enumerate(zip(graph.src.tolist(), graph.dst.tolist(), graph.edge_bytes.tolist())):
        lines += ["  edge [", f"    source {u}", f"    target {v}", f'    name "{k}"', f"    parameter {b}", "  ]"]
    lines.append("]")
    data = ("\n".join(lines) + "\n").encode("ascii")
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    atomic_write_bytes(path, data)


# ---------------------------------------------------------------------- parsing


def parse_gml(text: str, *, source: str = "<gml>") -> GmlList:
    """Parse GML text into nested lists of ``(key, value, token_index)``.

    Parameters
    ----------
    text : str
        The whole file.
    source : str
        Named in error messages.

    Returns
    -------
    list
        The top-level key/value pairs; list values are nested lists of the same shape.

    Raises
    ------
    FormatError
        On a malformed key, a key without a value, an unterminated string, an unbalanced bracket
        or a bad number; the message names ``source`` and the line.
    """
    # findall (strings only) is the fast path; positions are recovered only to report an error.
    toks = [t for t in _TOKEN.findall(text) if t[0] != "#"]
    n = len(toks)
    root: GmlList = []
    cur = root
    stack: list[tuple[GmlList, int]] = []
    good_keys: set[str] = set()
    i = 0
    while i < n:
        t = toks[i]
        if t == "]":
            if not stack:
                raise _error(text, source, i, "unmatched ']'")
            cur = stack.pop()[0]
            i += 1
            continue
        if t not in good_keys:
            if not _KEY.fullmatch(t):
                raise _error(text, source, i, f"expected a key, found {_shown(t)}")
            good_keys.add(t)
        if i + 1 >= n:
            raise _error(text, source, i, f"key {t!r} has no value")
        v = toks[i + 1]
        if v == "[":
            new: GmlList = []
            cur.append((t, new, i))
            stack.append((cur, i))
            cur = new
        elif v[0] == '"':
            if len(v) == 1:
                raise _error(text, source, i + 1, "unterminated string")
            s = v[1:-1]
            cur.append((t, _unescape(s) if "&" in s else s, i))
        elif v.isdecimal() and len(v) <= _MAX_DIGITS:  # the common case, worth its own branch on 10,000-node files
            cur.append((t, int(v), i))
        elif v == "]":
            raise _error(text, source, i, f"key {t!r} has no value")
        else:
            cur.append((t, _number(v, text, source, i + 1), i))
        i += 2
    if stack:
        raise _error(text, source, stack[-1][1], "'[' is never closed")
    return root


def _unescape(s: str) -> str:
    # Not html.unescape: HTML drops or remaps some code points (&#31;, &#128;), GML must not.
    return _ENTITY.sub(_entity_char, s)


def _entity_char(m: re.Match) -> str:
    body = m.group(1)
    try:
        if body[0] == "#":
            return chr(int(body[2:], 16) if body[1] in "xX" else int(body[1:]))
        return chr(name2codepoint[body])
    except (KeyError, ValueError, OverflowError):
        return m.group(0)  # not a reference after all: keep the text as written


def _number(tok: str, text: str, source: str, i: int) -> int | float:
    if len(tok) > _MAX_DIGITS:
        raise _error(text, source, i, f"a number of {len(tok):,} characters, more than the {_MAX_DIGITS} digits supported")
    if _INT.fullmatch(tok):
        return int(tok)
    if _REAL.fullmatch(tok):
        return float(tok)
    raise _error(text, source, i, f"expected a number or a quoted string, found {_shown(tok)}")


def _shown(tok: str) -> str:
    return repr(tok if len(tok) <= 40 else tok[:40] + "...")


def _line_of(text: str, tok_index: int) -> int:
    k = -1
    for m in _TOKEN.finditer(text):
        if m.group()[0] == "#":
            continue
        k += 1
        if k == tok_index:
            return text.count("\n", 0, m.start()) + 1
    return text.count("\n") + 1


def _error(text: str, source: str, tok_index: int, what: str) -> FormatError:
    return FormatError(f"{source}, line {_line_of(text, tok_index)}: {what}")


# ---------------------------------------------------------------------- GML -> CompGraph


def _read_text(path: Path, max_bytes: int) -> str:
    raw = read_limited(path, max_bytes)
    try:
        # GML is ASCII with &#N; escapes; Latin-1 is what the GML spec names for raw bytes.
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _graph_from_gml(top: GmlList, text: str, path: Path) -> CompGraph:
    source = str(path)
    graphs = [item for item in top if item[0] == "graph"]
    if len(graphs) != 1 or not isinstance(graphs[0][1], list):
        raise FormatError(f"{source}: expected exactly one 'graph [ ... ]' list, found {len(graphs)}")
    body = graphs[0][1]

    directed = [v for k, v, _ in body if k == "directed"]
    if directed != [1]:
        raise FormatError(f"{source}: the graph is not marked 'directed 1'; a computation graph must be directed")

    ids: dict[int, int] = {}
    names: list[str] = []
    params: list[int] = []
    ops: list[str] = []
    flops: list[float] = []
    out_given: dict[int, int] = {}
    src: list[int] = []
    dst: list[int] = []
    edge_bytes: list[int] = []
    for key, value, tok in body:
        if key == "node":
            fields = _fields(value, tok, text, source, "node", ("id", "label", "parameter", "op", "flops", "out_bytes"))
            node_id = fields.get("id")
            if not isinstance(node_id, int):
                raise _error(text, source, tok, "node has no integer 'id'")
            if node_id in ids:
                raise _error(text, source, tok, f"duplicate node id {node_id}")
            label = _text_field(fields, "label", str(node_id), tok, text, source, f"node {node_id}")
            ids[node_id] = len(names)
            names.append(label)
            params.append(_bytes_field(fields, "parameter", tok, text, source, f"node {label!r}"))
            ops.append(_text_field(fields, "op", "op", tok, text, source, f"node {label!r}"))
            fl = fields.get("flops", 0)
            if not isinstance(fl, (int, float)):
                raise _error(text, source, tok, f"node {label!r}: 'flops' must be a number, got {_kind(fl)}")
            try:
                flops.append(float(fl))
            except OverflowError:
                raise _error(text, source, tok, f"node {label!r}: 'flops' is an integer of {len(str(fl))} digits, too large for a float64") from None
            if "out_bytes" in fields:
                out_given[len(names) - 1] = _bytes_field(fields, "out_bytes", tok, text, source, f"node {label!r}")
    for key, value, tok in body:
        # A second pass, because GML lets an edge come before the nodes it joins.
        if key == "edge":
            fields = _fields(value, tok, text, source, "edge", ("source", "target", "parameter"))
            ends = []
            for role in ("source", "target"):
                end = fields.get(role)
                if not isinstance(end, int):
                    raise _error(text, source, tok, f"edge has no integer '{role}'")
                if end not in ids:
                    raise _error(text, source, tok, f"edge {role} {end} is not the id of any node")
                ends.append(ids[end])
            src.append(ends[0])
            dst.append(ends[1])
            if "parameter" in fields:
                edge_bytes.append(_bytes_field(fields, "parameter", tok, text, source, "edge"))
            else:
                # An edge with no size carries its producer's stated output, if there is one.
                edge_bytes.append(out_given.get(ends[0], 0))

    src_a = np.asarray(src, dtype=np.int64)
    bytes_a = np.asarray(edge_bytes, dtype=np.int64)
    out_bytes = np.zeros(len(names), dtype=np.int64)
    np.maximum.at(out_bytes, src_a, bytes_a)
    for i, b in out_given.items():
        out_bytes[i] = b
    name = path.name
    for suffix in (".gz", ".gml"):
        name = name.removesuffix(suffix)
    try:
        return CompGraph(
            names,
            src_a,
            np.asarray(dst, dtype=np.int64),
            op=ops,
            flops=np.asarray(flops, dtype=np.float64),
            param_bytes=np.asarray(params, dtype=np.int64),
            out_bytes=out_bytes,
            edge_bytes=bytes_a,
            name=name,
            meta={"source_file": path.name, "source_format": "gml"},
        )
    except GraphError as exc:
        exc.args = (f"{source}: {exc}",)  # keep the type (CycleError keeps .cycle), name the file
        raise


def _fields(items: Any, tok: int, text: str, source: str, what: str, known: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(items, list):
        raise _error(text, source, tok, f"'{what}' must be a list '[ ... ]'")
    fields: dict[str, Any] = {}
    for key, value, ktok in items:
        if key in known:
            if key in fields:
                raise _error(text, source, ktok, f"{what} has '{key}' twice")
            fields[key] = value
    return fields


def _bytes_field(fields: dict, key: str, tok: int, text: str, source: str, where: str) -> int:
    value = fields.get(key, 0)
    if not isinstance(value, int) or value < 0:
        shown = repr(value) if not isinstance(value, list) else "a list"
        raise _error(text, source, tok, f"{where}: '{key}' must be a non-negative integer, got {shown}")
    if value >= 2**63:
        raise _error(text, source, tok, f"{where}: '{key}' is {value}, beyond a 64-bit byte count (2**63 - 1)")
    return value


def _text_field(fields: dict, key: str, default: str, tok: int, text: str, source: str, where: str) -> str:
    # Numbers are written as text (the peer's labels are ints), lists are refused: they are no name.
    value = fields.get(key, default)
    if isinstance(value, list):
        raise _error(text, source, tok, f"{where}: '{key}' must be a string or a number, got a list")
    value = value if isinstance(value, str) else str(value)
    try:
        check_text(value, f"'{key}'", "")
    except FormatError as exc:
        raise _error(text, source, tok, f"{where}: {str(exc).removeprefix(': ')}") from None
    return value


def _kind(value: Any) -> str:
    return "a list" if isinstance(value, list) else f"{type(value).__name__} {value!r}"


# ---------------------------------------------------------------------- writing helpers


def _quote(s: str) -> str:
    # GML strings cannot hold '"'; networkx and html.unescape both read &#N; character references.
    return '"' + "".join(c if (" " <= c <= "~" and c not in '"&') else f"&#{ord(c)};" for c in s) + '"'


def _real(x: float) -> str:
    # networkx only reads reals that contain a '.', so 1e+20 must be written 1.0e+20.
    text = repr(x)
    if "." not in text and "inf" not in text and "nan" not in text:
        mant, _, exp = text.partition("e")
        text = mant + ".0" + ("e" + exp if exp else "")
    return text
