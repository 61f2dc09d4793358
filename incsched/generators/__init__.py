"""Synthetic computation graphs: seeded random DAGs for the stage problem and tiled dataflow
graphs (DOPPLER's shapes) for the placement problem. Every generator returns a `CompGraph`, and
the same arguments and seed always give an equal graph.
"""

from .dataflow import bandwidth_for_comm_ratio, chained_matmul, ffnn, transformer_block
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
    "bandwidth_for_comm_ratio",
]
