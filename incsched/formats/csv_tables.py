"""Graphs as two CSV tables (nodes, edges), for users of spreadsheets and of other tools.

Node table: ``name,op,flops,param_bytes,out_bytes[,time_<kind>...]`` in any column order, only
``name`` required. Edge table: ``src,dst[,bytes]``; without ``bytes`` an edge carries its source's
``out_bytes``. Every error names the file, the line and the column.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path

import numpy as np

from ..errors import FormatError, GraphError
from ..graph import CompGraph
from ..jsonio import atomic_write_bytes, read_limited
from ..limits import InputLimits, check_count, input_limits

__all__ = ["read_csv_tables", "write_csv_tables"]

_NODE_COLUMNS = ("name", "op", "flops", "param_bytes", "out_bytes")
_EDGE_COLUMNS = ("src", "dst", "bytes")
_TIME_PREFIX = "time_"


def read_csv_tables(
    nodes_csv: str | os.PathLike, edges_csv: str | os.PathLike, name: str | None = None, *, limits: InputLimits | None = None
) -> CompGraph:
    """Read a graph from a node table and an edge table.

    Parameters
    ----------
    nodes_csv : path-like
        Header ``name[,op][,flops][,param_bytes][,out_bytes][,time_<kind>...]``, one row per node.
        ``flops`` and ``time_<kind>`` (seconds on a device of that kind) are reals; byte columns
        are whole numbers. Missing columns default to ``"op"`` / 0.
    edges_csv : path-like
        Header ``src,dst[,bytes]``, one row per edge, endpoints given by node name.
    name : str, optional
        The graph's name; default the node file's stem without a trailing ``_nodes``.
    limits : InputLimits, optional
        Largest file, node and edge counts accepted; default `incsched.limits.input_limits()`
        (the ``INCSCHED_MAX_*`` environment variables).

    Returns
    -------
    CompGraph
        Nodes and edges in row order; ``meta`` records both file names.

    Raises
    ------
    FormatError
        An empty file, a missing or duplicate header column, an unknown column, a row with the
        wrong number of cells, an empty cell, a bad or negative number, a duplicate node name or
        an edge to an unknown node; the message names the file, line and column.
    LimitError
        A file larger than ``limits.max_file_bytes``, or more nodes or edges than allowed.
    GraphError
        A self-loop, duplicate edge or cycle; the message starts with the edge file's name.

    Examples
    --------
    >>> g = read_csv_tables("resnet_nodes.csv", "resnet_edges.csv")  # doctest: +SKIP
    """
    nodes_path, edges_path = Path(nodes_csv), Path(edges_csv)
    lim = input_limits(limits)
    header, rows = _read_table(nodes_path, lim.max_file_bytes)
    check_count("nodes", len(rows), lim.max_nodes, "max_nodes", str(nodes_path))
    cols = _columns(header, nodes_path, required=("name",), allowed=_NODE_COLUMNS, time_prefix=True)
    names: list[str] = []
    seen: dict[str, int] = {}
    for line, row in rows:
        nm = row[cols["name"]]
        if nm in seen:
            raise FormatError(f"{nodes_path}, line {line}, column {cols['name'] + 1} (name): duplicate node name {nm!r} (first on line {seen[nm]})")
        seen[nm] = line
        names.append(nm)
    op = [row[cols["op"]] for _, row in rows] if "op" in cols else None
    numbers = {}
    for col in ("flops", "param_bytes", "out_bytes"):
        if col in cols:
            numbers[col] = _column_values(rows, cols[col], col, nodes_path, integral=col != "flops")
    compute_time = {
        col[len(_TIME_PREFIX):]: _column_values(rows, j, col, nodes_path, integral=False)
        for col, j in cols.items()
        if col.startswith(_TIME_PREFIX)
    }

    e_header, e_rows = _read_table(edges_path, lim.max_file_bytes)
    check_count("edges", len(e_rows), lim.max_edges, "max_edges", str(edges_path))
    e_cols = _columns(e_header, edges_path, required=("src", "dst"), allowed=_EDGE_COLUMNS, time_prefix=False)
    index = {nm: i for i, nm in enumerate(names)}
    ends = {}
    for role in ("src", "dst"):
        j = e_cols[role]
        idx = []
        for line, row in e_rows:
            i = index.get(row[j], -1)
            if i < 0:
                raise FormatError(f"{edges_path}, line {line}, column {j + 1} ({role}): unknown node {row[j]!r}")
            idx.append(i)
        ends[role] = np.asarray(idx, dtype=np.int64)
    edge_bytes = _column_values(e_rows, e_cols["bytes"], "bytes", edges_path, integral=True) if "bytes" in e_cols else None

    if name is None:
        name = nodes_path.stem
        for tail in ("_nodes", ".nodes", "-nodes"):
            name = name.removesuffix(tail)
    try:
        return CompGraph(
            names,
            ends["src"],
            ends["dst"],
            op=op,
            edge_bytes=edge_bytes,
            compute_time=compute_time,
            name=name or "graph",
            meta={"source_file": nodes_path.name, "edges_file": edges_path.name, "source_format": "csv"},
            **numbers,
        )
    except GraphError as exc:
        # Names and numbers were checked above, so what is left is about the edges.
        exc.args = (f"{edges_path}: {exc}",)
        raise


def write_csv_tables(graph: CompGraph, nodes_csv: str | os.PathLike, edges_csv: str | os.PathLike) -> None:
    """Write ``graph`` as a node table and an edge table (atomically, each).

    Reals are written in Python's shortest round-tripping form, so `read_csv_tables` gives back an
    equal graph apart from ``members`` and ``meta``, which these tables do not carry, and from
    names or op kinds with surrounding spaces or empty op kinds (the reader strips cells and
    refuses empty ones).

    Parameters
    ----------
    graph : CompGraph
    nodes_csv, edges_csv : path-like
        Destination files; folders are created as needed.

    Raises
    ------
    OSError
        If a file cannot be written.
    """
    if graph.shared_weights:  # dropping them would understate every stage that reads one
        raise FormatError(f"{graph.name}: {len(graph.shared_weights)} shared weight(s) (e.g. {graph.shared_weights[0].name!r}) have no place in CSV tables; save the graph as .json")
    kinds = sorted(graph.compute_time)
    # RFC 4180 line ends: with "\n" alone the csv module would leave a "\r" inside a name unquoted.
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    w.writerow(list(_NODE_COLUMNS) + [_TIME_PREFIX + k for k in kinds])
    times = [graph.compute_time[k].tolist() for k in kinds]
    for i, (nm, op, fl, pb, ob) in enumerate(
        zip(graph.names, graph.op, graph.flops.tolist(), graph.param_bytes.tolist(), graph.out_bytes.tolist())
    ):
        w.writerow([nm, op, repr(fl), pb, ob] + [repr(t[i]) for t in times])
    atomic_write_bytes(nodes_csv, buf.getvalue().encode("utf-8"))

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    w.writerow(_EDGE_COLUMNS)
    names = graph.names
    for u, v, b in zip(graph.src.tolist(), graph.dst.tolist(), graph.edge_bytes.tolist()):
        w.writerow([names[u], names[v], b])
    atomic_write_bytes(edges_csv, buf.getvalue().encode("utf-8"))


# ---------------------------------------------------------------------- reading helpers


def _read_table(path: Path, max_bytes: int) -> tuple[list[str], list[tuple[int, list[str]]]]:
    try:
        # utf-8-sig: spreadsheets often start CSV files with a byte-order mark.
        text = read_limited(path, max_bytes).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not a UTF-8 text file ({exc.reason} at byte {exc.start})") from None
    if "\0" in text:  # names and op kinds are text: NUL breaks other formats and tools
        raise FormatError(f"{path}, line {text.count(chr(10), 0, text.index(chr(0))) + 1}: contains a NUL character")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    rows: list[tuple[int, list[str]]] = []
    try:
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # blank lines carry nothing
            cells = [c.strip() for c in row]
            if header is None:
                header = cells
                continue
            if len(cells) != len(header):
                raise FormatError(
                    f"{path}, line {reader.line_num}: {len(cells)} cells, but the header has {len(header)} columns"
                )
            for j, c in enumerate(cells):
                if not c:
                    raise FormatError(f"{path}, line {reader.line_num}, column {j + 1} ({header[j]}): empty value")
            rows.append((reader.line_num, cells))
    except csv.Error as exc:
        raise FormatError(f"{path}, line {reader.line_num}: malformed CSV ({exc})") from None
    if header is None:
        raise FormatError(f"{path}: empty file (expected a header line)")
    return header, rows


def _columns(header: list[str], path: Path, required: tuple[str, ...], allowed: tuple[str, ...], time_prefix: bool) -> dict[str, int]:
    cols: dict[str, int] = {}
    for j, col in enumerate(header):
        known = col in allowed or (time_prefix and col.startswith(_TIME_PREFIX) and len(col) > len(_TIME_PREFIX))
        if not known:
            expected = ", ".join(allowed) + (", time_<kind>" if time_prefix else "")
            raise FormatError(f"{path}, line 1, column {j + 1}: unknown column {col!r} (expected {expected})")
        if col in cols:
            raise FormatError(f"{path}, line 1, column {j + 1}: column {col!r} appears twice")
        cols[col] = j
    for col in required:
        if col not in cols:
            raise FormatError(f"{path}, line 1: missing header column {col!r} (header is {','.join(header)})")
    return cols


def _column_values(rows: list[tuple[int, list[str]]], j: int, col: str, path: Path, integral: bool) -> np.ndarray:
    values = []
    for line, row in rows:
        cell = row[j]
        try:
            x = int(cell) if integral and cell.lstrip("+-").isdigit() else float(cell)
        except ValueError:
            raise FormatError(f"{path}, line {line}, column {j + 1} ({col}): {cell!r} is not a number") from None
        if (isinstance(x, float) and not math.isfinite(x)) or x < 0:
            raise FormatError(f"{path}, line {line}, column {j + 1} ({col}): {cell!r} must be finite and non-negative")
        if integral and isinstance(x, float):
            if not x.is_integer():
                raise FormatError(f"{path}, line {line}, column {j + 1} ({col}): {cell!r} is not a whole number of bytes")
            x = int(x)
        if integral and x >= 2**62:
            raise FormatError(f"{path}, line {line}, column {j + 1} ({col}): {cell!r} is too large for a byte count")
        values.append(x)
    return np.asarray(values, dtype=np.int64 if integral else np.float64)
