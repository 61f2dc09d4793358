"""Policy features and the shared encoder: shapes, finiteness, scale invariance, equivariance, and
messages that really travel both ways along the DAG."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.generators.random_dag import layered_dag
from incsched.graph import CompGraph
from incsched.policy.encoder import GraphEncoder
from incsched.policy.features import (
    N_EDGE_FEATURES,
    N_NODE_FEATURES,
    N_OP_BUCKETS,
    NODE_FEATURES,
    edge_features,
    edge_index,
    node_features,
)

torch.set_num_threads(1)


def random_graph(n: int, seed: int, scale: int = 1) -> CompGraph:
    return layered_dag(n, mean_in_degree=1.8, skip_prob=0.3, param_bytes=(0, 1000 * scale), out_bytes=(0, 500 * scale),
                       flops=(0.0, 1e6 * scale), ops=("conv2d", "relu", "add", "linear"), seed=seed)


@given(n=st.integers(1, 40), K=st.integers(1, 16), seed=st.integers(0, 1000))
@settings(max_examples=40, deadline=None)
def test_shapes_and_finite_values(n, K, seed):
    g = random_graph(n, seed)
    x, e, ei = node_features(g, n_slots=K), edge_features(g), edge_index(g)
    assert x.shape == (n, N_NODE_FEATURES) and x.dtype == torch.float32
    assert e.shape == (g.n_edges, N_EDGE_FEATURES)
    assert ei.dtype == torch.int64 and ei.shape == (2, g.n_edges)
    assert torch.isfinite(x).all() and torch.isfinite(e).all()
    assert np.array_equal(ei[0].numpy(), g.src) and np.array_equal(ei[1].numpy(), g.dst)
    # The op one-hot marks exactly one bucket per node.
    assert torch.all(x[:, len(NODE_FEATURES):].sum(dim=1) == 1)


@given(n=st.integers(2, 30), seed=st.integers(0, 1000), factor=st.sampled_from([2, 7, 1000]))
@settings(max_examples=25, deadline=None)
def test_features_do_not_depend_on_the_unit_of_costs(n, seed, factor):
    # Multiplying every byte count and flop by a constant describes the same problem in other
    # units; size-independent normalisation must give the same features.
    g = random_graph(n, seed)
    scaled = g.replace(param_bytes=g.param_bytes * factor, out_bytes=g.out_bytes * factor,
                       edge_bytes=g.edge_bytes * factor, flops=g.flops * factor,
                       compute_time={"cpu": np.asarray(g.time("cpu")) * factor})
    base = g.replace(compute_time={"cpu": np.asarray(g.time("cpu"))})
    assert torch.allclose(node_features(base, n_slots=4), node_features(scaled, n_slots=4), atol=1e-5)
    assert torch.allclose(edge_features(base), edge_features(scaled), atol=1e-6)


def test_the_number_of_slots_conditions_the_features():
    g = random_graph(20, 1)
    assert not torch.equal(node_features(g, n_slots=2), node_features(g, n_slots=8))


def test_bad_slot_count_is_rejected():
    with pytest.raises(ValueError, match="n_slots"):
        node_features(random_graph(5, 0), n_slots=0)


def test_same_op_same_bucket():
    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], op=["conv2d", "relu", "conv2d"])
    onehot = node_features(g, n_slots=2)[:, len(NODE_FEATURES):]
    assert onehot.shape[1] == N_OP_BUCKETS
    assert torch.equal(onehot[0], onehot[2])


def encode(enc, g, K=4):
    return enc(node_features(g, n_slots=K), edge_index(g), edge_features(g))


def test_encoder_is_equivariant_to_node_relabelling():
    torch.manual_seed(0)
    enc = GraphEncoder(hidden=16, n_layers=2).eval()
    g = random_graph(25, 3)
    perm = np.random.default_rng(0).permutation(g.n_nodes)  # new index i holds old node perm[i]
    inv = np.argsort(perm)
    h = CompGraph([g.names[i] for i in perm], inv[g.src], inv[g.dst], op=[g.op[i] for i in perm],
                  flops=g.flops[perm], param_bytes=g.param_bytes[perm], out_bytes=g.out_bytes[perm],
                  edge_bytes=g.edge_bytes)
    # Features that depend on the tie-breaking of the topological order (topo_pos, cum_params) may
    # differ between labellings; compare with those columns zeroed in both inputs.
    cols = [NODE_FEATURES.index("topo_pos"), NODE_FEATURES.index("cum_params")]
    xa, xb = node_features(g, n_slots=4), node_features(h, n_slots=4)
    xa[:, cols] = 0
    xb[:, cols] = 0
    with torch.no_grad():
        a = enc(xa, edge_index(g), edge_features(g))
        b = enc(xb, edge_index(h), edge_features(h))
    assert torch.allclose(a[perm], b, atol=1e-5)


def test_messages_flow_both_ways():
    torch.manual_seed(0)
    enc = GraphEncoder(hidden=16, n_layers=2).eval()
    g = CompGraph(["s", "m", "t"], ["s", "m"], ["m", "t"], param_bytes=[1, 1, 1], out_bytes=[1, 1, 1])
    x, ei, e = node_features(g, n_slots=2), edge_index(g), edge_features(g)
    with torch.no_grad():
        h0 = enc(x, ei, e)
        x_sink = x.clone()
        x_sink[2, 0] += 1.0  # change only the sink
        x_source = x.clone()
        x_source[0, 0] += 1.0  # change only the source
        h_sink, h_source = enc(x_sink, ei, e), enc(x_source, ei, e)
    assert not torch.allclose(h0[0], h_sink[0])  # successors inform predecessors
    assert not torch.allclose(h0[2], h_source[2])  # and predecessors inform successors


def test_single_node_without_edges():
    g = CompGraph(["only"], [], [], param_bytes=[5])
    enc = GraphEncoder(hidden=8, n_layers=1).eval()
    with torch.no_grad():
        assert encode(enc, g, K=2).shape == (1, 8)
