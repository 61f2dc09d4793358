"""Synthetic computation graphs: seeded random DAGs for the stage problem and tiled dataflow
graphs (DOPPLER's shapes) for the placement problem. Every generator returns a `CompGraph`, and
the same arguments and seed always give an equal graph. `check_arguments` checks a generator's
arguments (types, ranges, the graph's size against the input limits) without generating.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from . import dataflow, random_dag
from ..limits import InputLimits
from .arguments import check_size
from .dataflow import bandwidth_for_comm_ratio, chained_matmul, ffnn, transformer_block, transformer_layer
from .random_dag import CostSpec, draw_costs, icml24_like, layered_dag, respect_like

__all__ = [
    "layered_dag",
    "respect_like",
    "icml24_like",
    "draw_costs",
    "CostSpec",
    "chained_matmul",
    "ffnn",
    "transformer_block",
    "transformer_layer",
    "bandwidth_for_comm_ratio",
    "check_arguments",
]


def check_arguments(generator: str, args: Mapping[str, Any], *, limits: InputLimits | None = None) -> tuple[int, int]:
    """Check ``args`` for the generator named ``generator`` as it would, without generating.

    Parameters
    ----------
    generator : str
        A generator of `incsched.generators` (``layered_dag``, ``respect_like``, ``icml24_like``,
        ``chained_matmul``, ``ffnn``, ``transformer_block``, ``transformer_layer``).
    args : mapping
        Its keyword arguments; the defaults fill the rest (``seed`` defaults to 0).
    limits : InputLimits, optional
        Default `incsched.limits.input_limits()`.

    Returns
    -------
    (int, int)
        The graph's node count and (an upper estimate of) its edge count.

    Raises
    ------
    ValueError
        An unknown generator or argument, or a value of the wrong type or out of range; the message
        names the argument.
    LimitError
        The graph would have more nodes or edges than ``limits`` allow.
    """
    functions: dict[str, Callable] = {
        "layered_dag": random_dag.layered_dag, "respect_like": random_dag.respect_like, "icml24_like": random_dag.icml24_like,
        "chained_matmul": dataflow.chained_matmul, "ffnn": dataflow.ffnn, "transformer_block": dataflow.transformer_block,
        "transformer_layer": dataflow.transformer_layer,
    }
    if generator not in functions:
        raise ValueError(f"unknown generator {generator!r} (known: {', '.join(functions)})")
    try:
        bound = inspect.signature(functions[generator]).bind(**args)
    except TypeError as exc:
        raise ValueError(f"{generator}: {exc}") from None
    bound.apply_defaults()
    sizes = getattr(random_dag if generator in ("layered_dag", "respect_like", "icml24_like") else dataflow, f"_{generator}_size")
    nodes, edges = sizes(**bound.arguments)
    by_prob = generator == "layered_dag" and bound.arguments.get("edge_prob") is not None
    check_size(_call(generator, args), nodes, edges, limits, edges_word="candidate edges" if by_prob else "edges")
    return nodes, edges


def _call(generator: str, args: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{k}={v!r:.40}" for k, v in args.items())
    return f"{generator}({shown})"
