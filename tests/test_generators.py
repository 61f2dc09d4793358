"""Synthetic graph generators: same seed -> equal graph, sizes, acyclicity, statistics in range."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.graph.cost_model import ROOFLINES
from incsched.errors import GraphError
from incsched.generators import (
    bandwidth_for_comm_ratio,
    chained_matmul,
    draw_costs,
    ffnn,
    icml24_like,
    layered_dag,
    respect_like,
    transformer_block,
)
from incsched.graph import CompGraph


def assert_dag(g: CompGraph) -> None:
    assert nx.is_directed_acyclic_graph(g.to_networkx())  # an independent check of acyclicity
    assert g.n_edges == len(set(zip(g.src.tolist(), g.dst.tolist())))


# ---------------------------------------------------------------------- layered_dag


@pytest.mark.slow
@given(
    n=st.integers(1, 120),
    layers_frac=st.floats(0.05, 1.0),
    mean_in=st.floats(1.0, 4.0),
    skip=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
    by_prob=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_layered_dag_shape(n, layers_frac, mean_in, skip, seed, by_prob):
    n_layers = max(1, round(layers_frac * n))
    kw = {"edge_prob": min(1.0, mean_in / 4)} if by_prob else {"mean_in_degree": mean_in}
    g = layered_dag(n, n_layers=n_layers, skip_prob=skip, seed=seed, **kw)
    assert g.n_nodes == n
    assert g.depth == n_layers  # every node has a predecessor in the layer before
    assert_dag(g)
    assert g == layered_dag(n, n_layers=n_layers, skip_prob=skip, seed=seed, **kw)
    if n_layers > 1:
        assert np.all(g.in_degree[g.asap_level > 0] >= 1)
    if skip == 0.0:
        assert np.all(g.asap_level[g.dst] - g.asap_level[g.src] == 1)


def test_layered_dag_seeds_differ_and_width():
    a, b = layered_dag(200, seed=1), layered_dag(200, seed=2)
    assert a != b
    g = layered_dag(100, width=7, seed=0)
    assert g.depth == math.ceil(100 / 7) and np.bincount(g.asap_level).max() <= 8


def test_layered_dag_mean_in_degree_statistics():
    g = layered_dag(5000, n_layers=50, mean_in_degree=3.0, skip_prob=0.0, seed=4)
    mean_in = g.in_degree[g.asap_level > 0].mean()
    assert 2.7 < mean_in <= 3.0  # repeats are dropped, so a little below the target
    g = layered_dag(5000, n_layers=50, mean_in_degree=3.0, skip_prob=0.5, seed=4)
    span = g.asap_level[g.dst] - g.asap_level[g.src]
    extra = g.n_edges - (g.n_nodes - 100)  # edges beyond the first per non-first-layer node
    assert 0.35 < (span > 1).sum() / extra < 0.55  # about half the extra edges skip layers


def test_layered_dag_edge_prob_statistics():
    g = layered_dag(2000, n_layers=20, edge_prob=0.05, skip_prob=0.0, seed=5)
    # 19 pairs of adjacent layers of 100 nodes: 19 * 100 * 100 * 0.05 = 9500 edges expected
    assert 9000 < g.n_edges < 10000


def test_layered_dag_cost_specs():
    g = layered_dag(
        300,
        param_bytes=7,
        out_bytes=(10, 20),
        flops=lambda rng, size: rng.exponential(1e6, size),
        ops=("conv2d", "relu"),
        seed=0,
    )
    assert np.all(g.param_bytes == 7)
    assert g.out_bytes.min() >= 10 and g.out_bytes.max() <= 20 and len(set(g.out_bytes.tolist())) > 5
    assert np.array_equal(g.edge_bytes, g.out_bytes[g.src])
    assert set(g.op) == {"conv2d", "relu"}
    assert 5e5 < g.flops.mean() < 2e6


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"n_nodes": 0}, "n_nodes must be at least 1"),
        ({"n_nodes": 5, "n_layers": 2, "width": 2}, "not both"),
        ({"n_nodes": 5, "edge_prob": 0.1, "mean_in_degree": 2}, "not both"),
        ({"n_nodes": 5, "n_layers": 6}, "n_layers must be in 1..n_nodes"),
        ({"n_nodes": 5, "width": 0}, "width must be at least 1"),
        ({"n_nodes": 5, "edge_prob": 1.5}, r"edge_prob must be in \[0, 1\]"),
        ({"n_nodes": 5, "mean_in_degree": 0.5}, "mean_in_degree must be at least 1"),
        ({"n_nodes": 5, "skip_prob": -0.1}, "skip_prob"),
        ({"n_nodes": 5, "ops": ()}, "ops must name"),
        ({"n_nodes": 5, "flops": (3.0, 1.0)}, "flops: a range must be"),
        ({"n_nodes": 5, "param_bytes": -1}, "param_bytes: costs must be finite"),
        ({"n_nodes": 5, "flops": lambda rng, size: np.ones(size + 1)}, "returned shape"),
    ],
)
def test_layered_dag_bad_arguments(kw, message):
    with pytest.raises(ValueError, match=message):
        layered_dag(**kw)


def test_draw_costs_rounds_bytes():
    rng = np.random.default_rng(0)
    v = draw_costs(lambda r, s: r.uniform(0, 10, s), rng, 50, integral=True)
    assert v.dtype == np.int64 and v.min() >= 0 and v.max() <= 10


# ---------------------------------------------------------------------- presets


@pytest.mark.parametrize("n", [10, 40, 300])
def test_respect_like(n):
    g = respect_like(n, seed=3)
    assert g.n_nodes == n and g == respect_like(n, seed=3) and g != respect_like(n, seed=4)
    assert_dag(g)
    assert g.depth == math.ceil(n / 3)  # narrow and deep, like a DNN
    weighted = np.isin(np.array(g.op), ["conv2d", "depthwise_conv2d", "linear", "batch_norm"])
    assert np.all(g.param_bytes[~weighted] == 0)
    assert np.all((g.param_bytes[weighted] >= 1 << 10) & (g.param_bytes[weighted] <= 2 << 20))
    assert np.array_equal(g.edge_bytes, g.out_bytes[g.src])
    assert np.all(g.flops > 0)
    assert 1.0 <= g.n_edges / max(g.n_nodes - 3, 1) <= 1.6


# Statistics measured on the 18 peer files (see icml24_like's docstring); the ranges are a little
# wider than the files' own spread, since one synthetic draw varies too.
@pytest.mark.slow
@pytest.mark.parametrize("n, sparse, edges_per_node, depth_range", [(949, False, (2.85, 3.0), (12, 20)), (810, True, (1.15, 1.3), (5, 11)), (9432, False, (2.88, 2.98), (15, 24))])
def test_icml24_like_statistics(n, sparse, edges_per_node, depth_range):
    g = icml24_like(n, sparse=sparse, seed=11)
    assert g.n_nodes == n and g == icml24_like(n, sparse=sparse, seed=11)
    assert_dag(g)
    assert edges_per_node[0] <= g.n_edges / n <= edges_per_node[1]
    longest = g.depth - 1
    assert depth_range[0] <= longest <= depth_range[1]
    assert np.all(g.in_degree + g.out_degree > 0)  # no isolated node
    p = g.param_bytes
    assert 0.55 < np.mean(p == 0) < 0.65 and p[p > 0].min() >= 1000 and p.max() <= 5000
    e = g.edge_bytes
    assert 0.55 < np.mean(e == 0) < 0.65 and e[e > 0].min() >= 10000 and e.max() <= 50000
    largest = np.zeros(n, dtype=np.int64)
    np.maximum.at(largest, g.src, e)
    assert np.array_equal(g.out_bytes, largest)
    # as in the peer files, indices are not a topological order and sources are about a fifth
    # (dense) or a third (sparse) of the nodes
    assert np.any(g.src > g.dst)
    sources = np.mean(g.in_degree == 0)
    assert (0.28 < sources < 0.40) if sparse else (0.14 < sources < 0.25)


def test_icml24_like_small_and_bad():
    g = icml24_like(2, seed=0)
    assert g.n_nodes == 2 and g.n_edges == 1
    with pytest.raises(ValueError):
        icml24_like(1)


# ---------------------------------------------------------------------- dataflow graphs


def test_chained_matmul_counts_and_costs():
    t, k, size, dt = 2, 8, 4096, 4
    g = chained_matmul(k, size, t, dtype_bytes=dt)
    assert g.n_nodes == k * t * t + (k - 1) * (t**3 + t**2) == 116
    assert_dag(g)
    # the whole chain does (k - 1) full products of 2 n^3 flops, plus the reductions' adds
    mm = np.array(g.op) == "matmul"
    assert g.flops[mm].sum() == pytest.approx((k - 1) * 2 * size**3)
    assert g.flops[np.array(g.op) == "add"].sum() == pytest.approx((k - 1) * size * size * (t - 1))
    assert g.param_bytes.sum() == k * size * size * dt  # every matrix once, on its input tiles
    assert np.all(g.out_bytes[mm] == (size // t) ** 2 * dt)
    # each tile product reads one tile of each side
    assert np.all(g.in_degree[mm] == 2)
    assert 100 <= chained_matmul(tiles=3).n_nodes <= 330


def test_chained_matmul_uneven_tiles():
    g = chained_matmul(3, 10, 3)
    mm = np.array(g.op) == "matmul"
    assert g.flops[mm].sum() == pytest.approx(2 * 2 * 10**3)
    assert g.param_bytes.sum() == 3 * 100 * 4


def test_ffnn_counts_and_costs():
    layers, batch, hidden, t, dt = 8, 1024, 4096, 4, 4
    g = ffnn(layers, batch, hidden, t, dtype_bytes=dt)
    assert g.n_nodes == t + layers * (t * t + 2 * t) == 196
    assert_dag(g)
    assert g.param_bytes.sum() == layers * hidden * hidden * dt
    mm = np.array(g.op) == "matmul"
    assert g.flops[mm].sum() == pytest.approx(layers * 2 * batch * hidden * hidden)
    # each weight tile sits on exactly one matmul
    assert np.all(g.param_bytes[mm] == (hidden // t) ** 2 * dt) and np.all(g.param_bytes[~mm] == 0)
    assert g.depth == 1 + layers * 3


def test_transformer_block_counts_and_costs():
    blocks, batch, seq, hidden, heads, dt = 2, 8, 1024, 4096, 8, 2
    g = transformer_block(blocks, batch, seq, hidden, heads, dtype_bytes=dt)
    ffn = g.meta["ffn_hidden"]
    assert ffn == 11008  # Llama-7B's MLP width for hidden 4096
    assert g.n_nodes == 1 + blocks * (7 * heads + 5 * heads + 6) == 205
    assert_dag(g)
    tokens = batch * seq
    # weights: q, k, v, o (hidden^2 each), gate, up, down (hidden x ffn each), two norms
    per_block = (4 * hidden * hidden + 3 * hidden * ffn + 2 * hidden) * dt
    assert g.param_bytes.sum() == blocks * per_block
    mm = np.array(g.op) == "matmul"
    assert g.flops[mm].sum() == pytest.approx(blocks * 2 * tokens * (4 * hidden * hidden + 3 * hidden * ffn))
    bmm = np.array(g.op) == "bmm"
    assert g.flops[bmm].sum() == pytest.approx(blocks * 2 * 2 * batch * seq * seq * hidden)
    soft = np.array(g.op) == "softmax"
    assert np.all(g.out_bytes[soft] == batch * seq * seq * dt)
    assert {"rmsnorm", "softmax", "silu", "mul", "add", "matmul", "bmm", "input"} == set(g.op)


def test_transformer_sizes_reach_100_to_300_ops():
    sizes = [transformer_block(n_blocks=b, heads=h).n_nodes for b, h in [(1, 8), (2, 8), (3, 4)]]
    assert min(sizes) >= 100 and max(sizes) <= 300


@pytest.mark.parametrize("make", [chained_matmul, ffnn, transformer_block])
def test_dataflow_compute_times_are_the_roofline(make):
    g = make()
    assert set(g.compute_time) == {"cpu", "cuda"}
    bare = g.replace(compute_time={})
    for kind in ("cpu", "cuda"):
        in_bytes = np.bincount(g.dst, weights=g.edge_bytes, minlength=g.n_nodes)
        expected = ROOFLINES[kind].estimate(g.flops, in_bytes + g.param_bytes + g.out_bytes)
        assert np.allclose(g.compute_time[kind], expected)
        assert np.allclose(bare.time(kind), expected)
    noisy = make(jitter=0.2, seed=1)
    assert noisy == make(jitter=0.2, seed=1) and noisy != make(jitter=0.2, seed=2)
    ratio = noisy.compute_time["cpu"] / g.compute_time["cpu"]
    assert 0.5 < np.exp(np.log(ratio).mean()) < 1.5 and ratio.std() > 0.05
    assert make(kinds=()).compute_time == {}


@pytest.mark.parametrize("kw", [{"n_matrices": 1}, {"size": 0}, {"tiles": 9, "size": 4}, {"dtype_bytes": 0}])
def test_chained_matmul_bad_arguments(kw):
    with pytest.raises(ValueError):
        chained_matmul(**kw)


def test_other_bad_arguments():
    with pytest.raises(ValueError, match="not divisible by heads"):
        transformer_block(hidden=100, heads=8)
    with pytest.raises(ValueError, match="tiles"):
        ffnn(hidden=3, tiles=4)
    with pytest.raises(ValueError, match="jitter"):
        ffnn(jitter=-1)


# ---------------------------------------------------------------------- comm / compute ratio


@given(ratio=st.floats(0.01, 100), latency_frac=st.floats(0, 0.9), kind=st.sampled_from(["cpu", "cuda"]))
@settings(max_examples=30, deadline=None)
def test_bandwidth_for_comm_ratio(ratio, latency_frac, kind):
    g = ffnn(n_layers=2, tiles=2)
    mean_time = g.time(kind).mean()
    latency = latency_frac * ratio * mean_time
    bw = bandwidth_for_comm_ratio(g, ratio, kind, latency=latency)
    transfer = latency + g.edge_bytes / bw
    assert transfer.mean() == pytest.approx(ratio * mean_time, rel=1e-9)


def test_bandwidth_for_comm_ratio_errors():
    g = ffnn(n_layers=1, tiles=2)
    with pytest.raises(ValueError, match="ratio must be positive"):
        bandwidth_for_comm_ratio(g, 0)
    with pytest.raises(GraphError, match="latency"):
        bandwidth_for_comm_ratio(g, 1.0, latency=1e6)
    with pytest.raises(GraphError, match="no edge carrying data"):
        bandwidth_for_comm_ratio(CompGraph(["a", "b"], ["a"], ["b"]), 4.0)
    zero = CompGraph(["a", "b"], ["a"], ["b"], out_bytes=[5, 0], compute_time={"cpu": [0.0, 0.0]})
    with pytest.raises(GraphError, match="zero compute time"):
        bandwidth_for_comm_ratio(zero, 4.0)
