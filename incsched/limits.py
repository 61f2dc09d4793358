"""Input limits: the largest files, graphs and JSON nesting that incsched's readers accept.

Every reader (graph files, problems, results, links) checks these before it allocates, so a
hostile or mistaken input — a 1 MB gzip of 1 GB, a billion nodes, JSON nested a million deep, a
placement whose transfer table needs gigabytes — is refused quickly with bounded memory. Defaults are generous; override them per call (``limits=``)
or for a whole process with the ``INCSCHED_MAX_*`` environment variables.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from .errors import LimitError

__all__ = ["InputLimits", "input_limits", "check_count", "ENV_VARS"]


@dataclass(frozen=True)
class InputLimits:
    """Sizes a reader accepts.

    Attributes
    ----------
    max_file_bytes : int
        Bytes of a file after decompression (``INCSCHED_MAX_FILE_BYTES``, default 256 MiB).
    max_nodes : int
        Nodes of a graph (``INCSCHED_MAX_NODES``, default 2,000,000).
    max_edges : int
        Edges of a graph (``INCSCHED_MAX_EDGES``, default 20,000,000).
    max_json_depth : int
        Nesting of JSON arrays and objects (``INCSCHED_MAX_JSON_DEPTH``, default 100; incsched's
        own files need 4).
    max_transfer_table_bytes : int
        Bytes of a placement problem's transfer table, edges x devices x devices int64 ticks
        (``INCSCHED_MAX_TRANSFER_TABLE_BYTES``, default 1 GiB: 2,048 edges on 256 devices, 32,768
        on 64). Building it takes about twice that at its peak, and solvers read copies of it.
    max_experiment_cells : int
        Cells of an experiment's grid, graphs x problem instances x methods x seeds x repeats
        plus executions and trainings (``INCSCHED_MAX_EXPERIMENT_CELLS``, default 100,000: each
        cell is kept in memory, a few kilobytes, and runs for seconds or more).
    """

    max_file_bytes: int = 256 << 20
    max_nodes: int = 2_000_000
    max_edges: int = 20_000_000
    max_json_depth: int = 100
    max_transfer_table_bytes: int = 1 << 30
    max_experiment_cells: int = 100_000

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LimitError(f"input limit {f.name} must be a positive integer, got {value!r}")
        # Python's JSON parser recurses once per level; past about 900 it would overflow the stack.
        if self.max_json_depth > 900:
            raise LimitError(f"input limit max_json_depth is at most 900, got {self.max_json_depth}")


ENV_VARS = {f.name: "INCSCHED_" + f.name.upper() for f in dataclasses.fields(InputLimits)}


def input_limits(limits: InputLimits | None = None, **overrides: int) -> InputLimits:
    """The limits in force: ``limits`` if given, else the defaults overridden by the environment;
    then ``overrides`` (keyword arguments named like `InputLimits`' fields) on top.

    Raises
    ------
    LimitError
        If an ``INCSCHED_MAX_*`` variable or an override is not a positive integer.
    """
    if limits is None:
        from_env = {}
        for name, var in ENV_VARS.items():
            text = os.environ.get(var)
            if text is None or not text.strip():
                continue
            try:
                from_env[name] = int(text.strip().replace("_", ""))
            except ValueError:
                raise LimitError(f"environment variable {var}={text!r} is not a whole number") from None
        limits = InputLimits(**from_env)
    unknown = set(overrides) - set(ENV_VARS)
    if unknown:
        raise TypeError(f"unknown input limit(s) {sorted(unknown)}; known: {sorted(ENV_VARS)}")
    return dataclasses.replace(limits, **overrides) if overrides else limits


def check_count(what: str, count: int, limit: int, field: str, source: str) -> None:
    """Refuse ``count`` items of ``what`` above ``limit`` (the `InputLimits` field ``field``)."""
    if count > limit:
        raise LimitError(
            f"{source}: {count:,} {what}, more than the limit of {limit:,} (set {ENV_VARS[field]} to raise it)"
        )
