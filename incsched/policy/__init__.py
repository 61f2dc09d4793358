"""Learned pre-schedulers: graph features, the shared graph encoder, and the policies built on it.

`features` turns a `CompGraph` into arrays, `encoder.GraphEncoder` embeds its nodes, the stage
policy (`stage_policy`) decodes stages from the embeddings, and `checkpoint` stores trained weights
with their config and metrics. Importing this package does not import torch: inference
(`stage_decoder`, `placement_decoder`) runs the shipped weights in numpy (`numpy_encoder`); the torch
models (`stage_policy`, `placement_policy`, `GraphEncoder`) load torch when first named, and
torch_geometric only for an encoder built with ``conv="torch_geometric"`` (what `incsched.train` learns with).
"""

from .features import EDGE_FEATURES, N_EDGE_FEATURES, N_NODE_FEATURES, NODE_FEATURES, edge_features, edge_index, node_features

__all__ = [
    "GraphEncoder",
    "node_features",
    "edge_features",
    "edge_index",
    "NODE_FEATURES",
    "EDGE_FEATURES",
    "N_NODE_FEATURES",
    "N_EDGE_FEATURES",
]


def __getattr__(name: str):
    # torch takes seconds to import: only a caller that names the torch encoder pays for it.
    if name == "GraphEncoder":
        from .encoder import GraphEncoder

        return GraphEncoder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
