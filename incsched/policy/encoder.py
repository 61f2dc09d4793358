"""The shared graph encoder of the learned pre-schedulers: node features -> node embeddings.

Both the stage policy and the placement policy run one `GraphEncoder` over the tensors of
`incsched.policy.features` and decode its embeddings. Messages flow in both directions of the DAG
(producers inform consumers and back), each direction a ``GINEConv`` that reads the edge features;
mean aggregation keeps magnitudes independent of degree and graph size.

Which ``GINEConv`` is built is the constructor's ``conv`` argument: ``"torch_geometric"`` (its
``torch_geometric.nn.GINEConv``, the layer training learns with; pure-Python torch_geometric, no
torch_scatter / torch_sparse / pyg-lib) or ``"plain"`` (`gine.PlainGINEConv`, the same state dict
and bitwise the same outputs without importing torch_geometric, which takes seconds: what loading a
checkpoint for inference builds).
"""

from __future__ import annotations

import torch
from torch import nn

from .features import N_EDGE_FEATURES, N_NODE_FEATURES
from .gine import PlainGINEConv

__all__ = ["CONV_LAYERS", "BidirectionalConv", "GraphEncoder"]

#: The values of ``conv``: who implements each direction's ``GINEConv``.
CONV_LAYERS = ("plain", "torch_geometric")


def gine_conv(hidden: int, edge_dim: int, conv: str) -> nn.Module:
    """One direction's ``GINEConv(mlp, train_eps=False, edge_dim=edge_dim, aggr="mean")``, built by ``conv``."""
    if conv not in CONV_LAYERS:
        raise ValueError(f"conv must be one of {CONV_LAYERS}, not {conv!r}")
    mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
    if conv == "plain":
        return PlainGINEConv(mlp, edge_dim=edge_dim)
    # Seconds to import, so only here: only training asks for this layer.
    from torch_geometric.nn import GINEConv

    return GINEConv(mlp, train_eps=False, edge_dim=edge_dim, aggr="mean")


class BidirectionalConv(nn.Module):
    """One round of message passing along and against the edges, with a residual connection.

    ``out = x + relu(norm(root(x) + conv_fwd(x, E) + conv_bwd(x, reversed E)))``: predecessors'
    and successors' messages get separate weights, so the layer tells "what feeds me" from "what
    I feed" (DirGNN's idea; its wrapper in torch_geometric drops edge features, hence this one).

    Parameters
    ----------
    hidden : int
        Width of the node embeddings.
    edge_dim : int
        Number of edge features.
    conv : {"plain", "torch_geometric"}
        Who implements the two ``GINEConv`` (see the module docstring).
    """

    def __init__(self, hidden: int, edge_dim: int, conv: str = "plain"):
        super().__init__()
        self.conv_fwd = gine_conv(hidden, edge_dim, conv)
        self.conv_bwd = gine_conv(hidden, edge_dim, conv)
        self.root = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        h = self.root(x) + self.conv_fwd(x, edge_index, edge_attr) + self.conv_bwd(x, edge_index.flip(0), edge_attr)
        return x + torch.relu(self.norm(h))


class GraphEncoder(nn.Module):
    """Node embeddings of a DAG from its node and edge features.

    Parameters
    ----------
    in_dim : int
        Node feature count (default `features.N_NODE_FEATURES`).
    edge_dim : int
        Edge feature count (default `features.N_EDGE_FEATURES`).
    hidden : int
        Embedding width H.
    n_layers : int
        Rounds of bidirectional message passing (the receptive field in hops); global context
        comes from the level / path features rather than from depth of the network.
    conv : {"plain", "torch_geometric"}
        Who implements the ``GINEConv`` layers: ``"torch_geometric"`` to train, ``"plain"`` (the
        default) to run a trained state dict without importing torch_geometric. Both take the same
        state dict and give bitwise the same embeddings.

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> from incsched.policy.features import node_features, edge_features, edge_index
    >>> g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], param_bytes=[1, 2, 3], out_bytes=[4, 4, 0])
    >>> enc = GraphEncoder(hidden=16, n_layers=2)
    >>> tuple(enc(node_features(g, n_slots=2), edge_index(g), edge_features(g)).shape)
    (3, 16)
    """

    def __init__(self, in_dim: int = N_NODE_FEATURES, edge_dim: int = N_EDGE_FEATURES, hidden: int = 32, n_layers: int = 3,
                 *, conv: str = "plain"):
        super().__init__()
        self.in_dim, self.edge_dim, self.hidden, self.n_layers, self.conv = in_dim, edge_dim, hidden, n_layers, conv
        self.embed = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.layers = nn.ModuleList(BidirectionalConv(hidden, edge_dim, conv) for _ in range(n_layers))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        """Embeddings ``[n, hidden]`` for features ``x [n, in_dim]``, ``edge_index [2, m]``, ``edge_attr [m, edge_dim]``."""
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h, edge_index, edge_attr)
        return h
