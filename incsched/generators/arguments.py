"""The generators' arguments, checked before anything is drawn: types and ranges, and the graph's
size against the same input limits a graph file meets (`incsched.limits`), so that
``respect_like(n_nodes=5_000_000)`` or ``layered_dag(10**12)`` is one line, not minutes of drawing
or a 42 TiB allocation. ``incsched.generators.check_arguments`` runs the same check for a generator
named in a config, without generating.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any

from ..limits import ENV_VARS, InputLimits, input_limits

__all__ = ["MAX_DIMENSION", "whole", "real", "names", "check_size"]

#: Largest whole-number argument (a count, a width, a seed): past it any tensor's bytes would pass
#: a graph's 2**62-byte limit anyway.
MAX_DIMENSION = 2**62


def whole(name: str, value: Any, low: int | None = None, high: int = MAX_DIMENSION) -> int:
    """``value`` as a whole number (numpy integers too, booleans and floats not) up to ``high``,
    and at least ``low`` when given."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be a whole number, got {value!r:.80}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be at least {low}, got {value}")
    if value > high:
        shown = f"an integer of {int(value).bit_length()} bits" if value > 2**64 else f"{value:,}"
        raise ValueError(f"{name} must be at most {'2**62' if high == MAX_DIMENSION else high}, got {shown}")
    return int(value)


def real(name: str, value: Any, low: float, high: float = math.inf) -> float:
    """``value`` as a finite real number in ``[low, high]`` (booleans not)."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or not low <= value <= high:
        span = f"[{low:g}, {high:g}]" if math.isfinite(high) else f">= {low:g}"
        raise ValueError(f"{name} must be a finite number {span if span.startswith('>') else 'in ' + span}, got {value!r:.80}")
    return float(value)


def names(name: str, value: Any, allow_empty: bool = True) -> list[str]:
    """``value`` as a sequence of strings (not one string)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a list of names, got {value!r:.80}")
    if not value and not allow_empty:
        raise ValueError(f"{name} must name at least one")
    return list(value)


def check_size(label: str, nodes: int, edges: int, limits: InputLimits | None = None, *, edges_word: str = "edges") -> None:
    """Refuse a graph of more ``nodes`` or ``edges`` than the input limits allow (`LimitError`)."""
    from ..errors import LimitError

    lim = input_limits(limits)
    for what, count, field in (("nodes", nodes, "max_nodes"), (edges_word, edges, "max_edges")):
        limit = getattr(lim, field)
        if count > limit:
            raise LimitError(
                f"{label} makes {count:,} {what}, more than the limit of {limit:,} (set {ENV_VARS[field]} to raise it)"
            )
