"""torch_geometric's ``GINEConv`` in plain torch, to run trained policies without importing torch_geometric.

Importing torch_geometric costs seconds in a fresh process; a pre-schedule takes milliseconds.
Training learns with the real ``GINEConv``; loading a checkpoint builds this twin: the same state-dict
names, the same tensor operations in the same order (bitwise-equal outputs), the same initial random
draws. Only the configuration `encoder` uses is mirrored: ``aggr="mean"``, ``edge_dim`` given,
``train_eps=False``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["PlainGINEConv"]


class PlainGINEConv(nn.Module):
    """``out_i = nn(mean_{j->i} relu(x_j + lin(e_ji)) + (1 + eps) * x_i)``; a node without in-edges averages to 0.

    Parameters
    ----------
    mlp : nn.Sequential
        The network applied after aggregation (``nn``); its first layer's ``in_features`` is the
        node width.
    edge_dim : int
        Number of edge features, projected by ``lin`` to the node width.
    """

    def __init__(self, mlp: nn.Sequential, edge_dim: int):
        super().__init__()
        self.nn = mlp
        self.register_buffer("eps", torch.empty(1))  # fixed at 0 (train_eps=False), saved in the state dict
        self.lin = nn.Linear(edge_dim, mlp[0].in_features)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the weights as ``GINEConv.reset_parameters`` does: ``nn``'s layers, then ``lin``."""
        for layer in self.nn.children():
            if hasattr(layer, "reset_parameters"):
                layer.reset_parameters()
        self.eps.data.fill_(0.0)
        # torch_geometric's Linear default: kaiming-uniform with a = sqrt(5) written as its bound,
        # then the bias uniform in +-1/sqrt(fan_in).
        fan_in = self.lin.in_features
        bound = math.sqrt(6 / ((1 + math.sqrt(5) ** 2) * fan_in))
        self.lin.weight.data.uniform_(-bound, bound)
        bound = 1.0 / math.sqrt(fan_in)
        self.lin.bias.data.uniform_(-bound, bound)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        """New features ``[n, out]`` of ``x [n, in]`` along ``edge_index [2, m]`` (source row, target row)."""
        src, dst = edge_index[0], edge_index[1]
        messages = (x.index_select(0, src) + self.lin(edge_attr)).relu()
        # The mean as torch_geometric's scatter takes it: in-degree counts clamped to 1, sums, divide.
        n = x.size(0)
        count = messages.new_zeros(n).scatter_add_(0, dst, messages.new_ones(messages.size(0))).clamp(min=1)
        total = messages.new_zeros((n, messages.size(1))).scatter_add_(0, dst.view(-1, 1).expand_as(messages), messages)
        mean = total / count.view(-1, 1).expand_as(total)
        return self.nn(mean + (1 + self.eps) * x)
