"""Learned pre-schedulers: graph features, the shared graph encoder, and the policies built on it.

`features` turns a `CompGraph` into tensors, `encoder.GraphEncoder` embeds its nodes, the stage
policy (`stage_policy`) decodes stages from the embeddings, and `checkpoint` stores trained weights
with their config and metrics. Importing this package imports torch but not torch_geometric: only an
encoder built with ``conv="torch_geometric"`` (what `incsched.train` learns with) imports it, while
loaded checkpoints run on the plain-torch twin `gine.PlainGINEConv`.
"""

from .encoder import GraphEncoder
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
