"""Structure features of a `CompGraph` for the learned pre-schedulers (stage and placement policies).

The first arrow of the RL pre-scheduler: graph -> tensors that a `GraphEncoder` reads. Every
feature is normalised by a quantity of the same graph (a mean, a total, the depth) or squashed with
log1p, so one model serves graphs of 20 to 10,000 nodes and K = 2..16 slots (stages or devices).
The layout is fixed (`NODE_FEATURES`, `EDGE_FEATURES`); changing it breaks shipped checkpoints.
Each feature set exists as numpy arrays (``*_array``, what torch-free inference reads) and as the
torch tensors training reads (the same values, ``torch.from_numpy``); torch is imported only there.
"""

from __future__ import annotations

import math
import zlib

from typing import TYPE_CHECKING

import numpy as np

from ..graph.cost_model import DEFAULT_KIND
from ..graph import CompGraph

if TYPE_CHECKING:
    import torch

__all__ = [
    "node_features",
    "edge_features",
    "edge_index",
    "node_feature_array",
    "edge_feature_array",
    "edge_index_array",
    "NODE_FEATURES",
    "EDGE_FEATURES",
    "N_OP_BUCKETS",
    "N_NODE_FEATURES",
    "N_EDGE_FEATURES",
    "op_bucket",
]

#: Op kinds are hashed (crc32, stable across runs and machines) into this many one-hot buckets.
N_OP_BUCKETS = 16

#: Names of the numeric node features, in column order; the op-kind one-hot follows them.
NODE_FEATURES = (
    "param_rel",  # log1p(param_bytes / mean param_bytes)
    "param_share",  # param_bytes / (total / K): the node's share of one slot's memory target
    "has_params",
    "out_rel",  # log1p(out_bytes / mean out_bytes)
    "time_rel",  # log1p(time / mean time)
    "time_share",  # time / (total time / K)
    "flops_rel",  # log1p(flops / mean flops)
    "asap",  # asap level / (depth - 1)
    "alap",  # alap level / (depth - 1)
    "slack",  # (alap - asap) / depth
    "top_params",  # heaviest path of parameters ending before the node / total parameters
    "bottom_params",  # heaviest path of parameters from the node on / total parameters
    "top_time",  # critical path before the node / total time
    "bottom_time",  # critical path from the node on / total time
    "topo_pos",  # position in the deterministic topological order / n
    "cum_params",  # parameters of the nodes before it in that order / total parameters
    "in_deg",  # log1p(in-degree)
    "out_deg",  # log1p(out-degree)
    "in_bytes_rel",  # log1p(summed incoming edge bytes / mean edge bytes)
    "out_bytes_rel",  # log1p(summed outgoing edge bytes / mean edge bytes)
    "inv_slots",  # 1 / K
    "log_slots",  # log2(K) / 4
    "log_size",  # log10(n) / 4
    "is_source",
    "is_sink",
)

#: Names of the edge features, in column order.
EDGE_FEATURES = (
    "bytes_rel",  # log1p(edge bytes / mean edge bytes)
    "carries_data",  # bytes > 0
    "bytes_max",  # edge bytes / the largest edge's bytes
    "level_span",  # (asap[v] - asap[u]) / depth
)

N_NODE_FEATURES = len(NODE_FEATURES) + N_OP_BUCKETS
N_EDGE_FEATURES = len(EDGE_FEATURES)


def op_bucket(op: str) -> int:
    """Bucket of an op kind: crc32 of its name modulo `N_OP_BUCKETS` (stable everywhere)."""
    return zlib.crc32(op.encode("utf-8")) % N_OP_BUCKETS


def _rel(values: np.ndarray) -> np.ndarray:
    """log1p of values over their mean (0 everywhere when all are 0)."""
    values = np.asarray(values, dtype=np.float64)
    mean = values.mean() if values.size else 0.0
    if mean <= 0:
        return np.zeros_like(values)
    return np.log1p(values / mean)


def _share(values: np.ndarray, total: float) -> np.ndarray:
    return np.zeros_like(values, dtype=np.float64) if total <= 0 else np.asarray(values, dtype=np.float64) / total


def node_features(graph: CompGraph, *, n_slots: int, kind: str = DEFAULT_KIND) -> "torch.Tensor":
    """`node_feature_array` as a torch tensor (what training reads)."""
    import torch

    return torch.from_numpy(node_feature_array(graph, n_slots=n_slots, kind=kind))


def node_feature_array(graph: CompGraph, *, n_slots: int, kind: str = DEFAULT_KIND) -> np.ndarray:
    """Per-node structure features, shape ``[n_nodes, N_NODE_FEATURES]`` (float32).

    Columns are `NODE_FEATURES` followed by a one-hot of `op_bucket` over `N_OP_BUCKETS`.

    Parameters
    ----------
    graph : CompGraph
        The graph.
    n_slots : int
        K, the number of stages (stage problem) or devices (placement problem): the features
        express loads as shares of one slot's even part, so the policy is conditioned on K.
    kind : str
        Device kind whose times (measured, else roofline estimate) enter the time features.

    Returns
    -------
    float32 numpy array
        Finite values, mostly in [0, ~10].

    Raises
    ------
    ValueError
        If ``n_slots`` < 1.

    Examples
    --------
    >>> g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[10, 30], out_bytes=[5, 0])
    >>> node_feature_array(g, n_slots=2).shape == (2, N_NODE_FEATURES)
    True
    """
    if isinstance(n_slots, bool) or int(n_slots) != n_slots or n_slots < 1:
        raise ValueError(f"n_slots must be an integer >= 1, got {n_slots!r}")
    n, K = graph.n_nodes, int(n_slots)
    cols: list[np.ndarray] = []
    if n == 0:
        return np.zeros((0, N_NODE_FEATURES), dtype=np.float32)
    # A node's weights as it brings them to a stage alone: its own and every shared weight it reads
    # (`CompGraph.node_weight_bytes`). A proxy where two readers share a stage (the weight is held
    # once there); without shared weights it is ``param_bytes``, the features the policy was trained on.
    params = graph.node_weight_bytes.astype(np.float64)
    total_params = float(graph.total_param_bytes)
    seconds = np.asarray(graph.time(kind), dtype=np.float64)
    total_time = float(seconds.sum())
    depth_span = max(graph.depth - 1, 1)
    asap, alap = graph.asap_level.astype(np.float64), graph.alap_level.astype(np.float64)
    order = graph.topological_order()
    pos = np.empty(n, dtype=np.float64)
    pos[order] = np.arange(n)
    cum = np.zeros(n, dtype=np.float64)
    cum[order] = np.concatenate([[0.0], np.cumsum(params[order])[:-1]])
    in_bytes = np.bincount(graph.dst, weights=graph.edge_bytes, minlength=n)
    out_bytes_e = np.bincount(graph.src, weights=graph.edge_bytes, minlength=n)
    mean_edge = float(graph.edge_bytes.mean()) if graph.n_edges else 0.0
    top_p = graph.top_level(params)
    bottom_p = graph.bottom_level(params)
    top_t = graph.top_level(seconds)
    bottom_t = graph.bottom_level(seconds)

    cols += [
        _rel(params),
        _share(params, total_params / K),
        (params > 0).astype(np.float64),
        _rel(graph.out_bytes),
        _rel(seconds),
        _share(seconds, total_time / K),
        _rel(graph.flops),
        asap / depth_span,
        alap / depth_span,
        (alap - asap) / max(graph.depth, 1),
        _share(top_p, total_params),
        _share(bottom_p, total_params),
        _share(top_t, total_time),
        _share(bottom_t, total_time),
        pos / n,
        _share(cum, total_params),
        np.log1p(graph.in_degree.astype(np.float64)),
        np.log1p(graph.out_degree.astype(np.float64)),
        np.log1p(in_bytes / mean_edge) if mean_edge > 0 else np.zeros(n),
        np.log1p(out_bytes_e / mean_edge) if mean_edge > 0 else np.zeros(n),
        np.full(n, 1.0 / K),
        np.full(n, math.log2(K) / 4.0),
        np.full(n, math.log10(n) / 4.0),
        (graph.in_degree == 0).astype(np.float64),
        (graph.out_degree == 0).astype(np.float64),
    ]
    numeric = np.stack(cols, axis=1)
    onehot = np.zeros((n, N_OP_BUCKETS), dtype=np.float64)
    buckets = {op: op_bucket(op) for op in set(graph.op)}
    onehot[np.arange(n), [buckets[op] for op in graph.op]] = 1.0
    x = np.concatenate([numeric, onehot], axis=1)
    # Costs are validated finite and non-negative, so any non-finite value here is a bug upstream.
    assert np.all(np.isfinite(x)), "node features must be finite"
    return x.astype(np.float32)


def edge_features(graph: CompGraph) -> "torch.Tensor":
    """`edge_feature_array` as a torch tensor (what training reads)."""
    import torch

    return torch.from_numpy(edge_feature_array(graph))


def edge_feature_array(graph: CompGraph) -> np.ndarray:
    """Per-edge features, shape ``[n_edges, N_EDGE_FEATURES]`` (float32), columns `EDGE_FEATURES`.

    Parameters
    ----------
    graph : CompGraph
        The graph.
    Returns
    -------
    float32 numpy array
    """
    m = graph.n_edges
    if m == 0:
        return np.zeros((0, N_EDGE_FEATURES), dtype=np.float32)
    b = graph.edge_bytes.astype(np.float64)
    top = float(b.max())
    share = b / top if top > 0 else np.zeros(m)
    asap = graph.asap_level
    span = (asap[graph.dst] - asap[graph.src]).astype(np.float64) / max(graph.depth, 1)
    e = np.stack([_rel(b), (b > 0).astype(np.float64), share, span], axis=1)
    return e.astype(np.float32)


def edge_index(graph: CompGraph) -> "torch.Tensor":
    """`edge_index_array` as a torch LongTensor (what training reads)."""
    import torch

    return torch.from_numpy(edge_index_array(graph))


def edge_index_array(graph: CompGraph) -> np.ndarray:
    """Edges as a ``[2, n_edges]`` int64 array (row 0 sources, row 1 targets), in the graph's edge order.

    Parameters
    ----------
    graph : CompGraph

    Returns
    -------
    numpy.ndarray
    """
    return np.stack([graph.src, graph.dst]).astype(np.int64)
