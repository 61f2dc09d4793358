"""Tests of incsched.graph.coarsen: quotients of random DAGs and the three coarsening strategies."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.graph.coarsen import TRIVIAL_OPS, coarsen, fuse_chains, fuse_trivial, group_by_module, quotient
from incsched.errors import CycleError, GraphError
from incsched.graph import CompGraph

OPS = ["conv2d", "linear", "relu", "add", "view", "getitem", "flatten", "input"]


@st.composite
def random_dags(draw, max_nodes: int = 14):
    """Random DAGs: edges only from lower to higher index, then nodes shuffled so index order is not topological."""
    n = draw(st.integers(1, max_nodes))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=3 * n)) if pairs else []
    perm = draw(st.permutations(range(n)))
    names = [f"n{perm[i]}" for i in range(n)]
    g = CompGraph(
        names,
        [i for i, _ in chosen],
        [j for _, j in chosen],
        op=draw(st.lists(st.sampled_from(OPS), min_size=n, max_size=n)),
        flops=draw(st.lists(st.integers(0, 1000).map(float), min_size=n, max_size=n)),
        param_bytes=draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n)),
        out_bytes=draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n)),
        compute_time={"cpu": draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))},
        name="random",
    )
    return g


def assert_valid_coarsening(fine: CompGraph, coarse: CompGraph) -> None:
    """Totals kept, members a partition of the fine nodes, every fine edge inside a node or mapped onto an edge."""
    assert coarse.n_nodes <= fine.n_nodes
    assert np.isclose(coarse.flops.sum(), fine.flops.sum())
    assert coarse.param_bytes.sum() == fine.param_bytes.sum()
    assert np.isclose(coarse.compute_time["cpu"].sum(), fine.compute_time["cpu"].sum())
    flat = [m for group in coarse.members for m in group]
    assert sorted(flat) == sorted(fine.names)
    node_of = {m: coarse.names[v] for v, group in enumerate(coarse.members) for m in group}
    coarse_edges = set(zip((coarse.names[i] for i in coarse.src), (coarse.names[i] for i in coarse.dst)))
    for u, v in zip(fine.src.tolist(), fine.dst.tolist()):
        a, b = node_of[fine.names[u]], node_of[fine.names[v]]
        assert a == b or (a, b) in coarse_edges
    assert nx.is_directed_acyclic_graph(coarse.to_networkx())


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(random_dags(), st.data())
def test_quotient_along_a_topological_order_keeps_totals_and_acyclicity(g, data):
    # Cutting a topological order into contiguous runs can never create a cycle.
    order = g.topological_order().tolist()
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, g.n_nodes - 1)), max_size=g.n_nodes)))
    run = np.searchsorted(np.asarray(cuts), np.arange(g.n_nodes), side="right")
    group_of = np.empty(g.n_nodes, dtype=np.int64)
    group_of[order] = run
    q = quotient(g, group_of)
    assert q.n_nodes == len(set(run.tolist()))
    assert_valid_coarsening(g, q)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(random_dags(), st.data())
def test_quotient_of_any_grouping_is_acyclic_or_raises(g, data):
    labels = data.draw(st.lists(st.integers(0, 3), min_size=g.n_nodes, max_size=g.n_nodes))
    nxg = nx.quotient_graph(g.to_networkx(), _partition(g.names, labels))
    cyclic = not nx.is_directed_acyclic_graph(nxg)
    if cyclic:
        with pytest.raises(CycleError):
            quotient(g, labels)
    else:
        assert_valid_coarsening(g, quotient(g, labels))


def _partition(names, labels):
    blocks: dict[int, set[str]] = {}
    for nm, lab in zip(names, labels):
        blocks.setdefault(lab, set()).add(nm)
    return list(blocks.values())


def test_cyclic_grouping_raises_naming_the_cycle():
    # a -> b -> c with a and c merged: the merged node both feeds and depends on b.
    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"])
    with pytest.raises(CycleError, match="cycle"):
        quotient(g, [0, 1, 0])


def test_quotient_moves_a_tensor_once_per_destination_group():
    # x feeds y and z; y and z merged: one transfer of x's output, not two.
    g = CompGraph(["x", "y", "z", "w"], ["x", "x", "y", "z"], ["y", "z", "w", "w"], out_bytes=[100, 7, 5, 1])
    q = quotient(g, {"x": "X", "y": "YZ", "z": "YZ", "w": "W"})
    edges = {(q.names[u], q.names[v]): int(b) for u, v, b in zip(q.src, q.dst, q.edge_bytes)}
    assert edges[("x", "y")] == 100
    # Both y and z are read outside their group, so both count in its out_bytes; y and z each send once to w.
    assert edges[("y", "w")] == 12
    assert int(q.out_bytes[q.index("y")]) == 12


def test_quotient_out_bytes_counts_only_outputs_leaving_the_group():
    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], out_bytes=[10, 20, 30], meta={"outputs": ["a", "c"]})
    q = quotient(g, [0, 0, 1])
    # a is a declared graph output, b is read by c outside the group.
    assert int(q.out_bytes[0]) == 30
    assert q.meta["outputs"] == ["a", "c"]
    assert "coarsening" not in q.meta  # only labelled strategies record themselves


def test_quotient_rejects_wrong_length_and_unknown_names():
    g = CompGraph(["a", "b"], ["a"], ["b"])
    with pytest.raises(GraphError, match="2 nodes"):
        quotient(g, [0])
    with pytest.raises(GraphError, match="'b'"):
        quotient(g, {"a": 0})


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(random_dags())
def test_fuse_trivial_is_valid_and_folds_single_input_views(g):
    q = fuse_trivial(g)
    assert_valid_coarsening(g, q)
    node_of = {m: v for v, group in enumerate(q.members) for m in group}
    for v in range(g.n_nodes):
        if g.op[v] in TRIVIAL_OPS and g.in_degree[v] == 1:
            u = int(g.predecessors(v)[0])
            assert node_of[g.names[v]] == node_of[g.names[u]]
    # what is left of trivial ops could not be folded safely: inputs from several nodes and consumers in several
    for v, group in enumerate(q.members):
        if all(g.op[g.index(m)] in TRIVIAL_OPS for m in group):
            assert q.in_degree[v] != 1 and q.out_degree[v] != 1


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(random_dags())
def test_fuse_chains_leaves_no_chain_edge(g):
    q = fuse_chains(g)
    assert_valid_coarsening(g, q)
    chain = (q.out_degree[q.src] == 1) & (q.in_degree[q.dst] == 1)
    assert not chain.any()


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(random_dags(), st.data())
def test_group_by_module_is_valid_and_groups_contiguous_runs(g, data):
    paths = st.sampled_from(["", "a", "a.x", "a.y", "b", "b.x"])
    scopes = data.draw(st.lists(paths, min_size=g.n_nodes, max_size=g.n_nodes))
    for depth in (1, 2):
        q = group_by_module(g, scopes, depth)
        assert_valid_coarsening(g, q)
        for group in q.members:
            keys = {tuple(scopes[g.index(m)].split(".")[:depth]) for m in group}
            assert len(keys) == 1
            assert len(group) == 1 or keys != {("",)}


def test_group_by_module_merges_a_block_into_one_node():
    names = ["x", "c1", "r1", "c2", "add", "fc"]
    src, dst = ["x", "c1", "r1", "x", "c2", "add"], ["c1", "r1", "c2", "add", "add", "fc"]
    g = CompGraph(names, src, dst, flops=[0, 5, 0, 5, 1, 3])
    scopes = ["", "layer1.0.conv1", "layer1.0.relu", "layer1.0.conv2", "layer1.0", "fc"]
    q = group_by_module(g, scopes, depth=2)
    assert q.n_nodes == 3
    assert q.members[q.index("c1")] == ("c1", "r1", "c2", "add")
    assert q.flops.tolist() == [0.0, 11.0, 3.0]


def test_coarsen_by_name():
    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], op=["input", "view", "relu"])
    assert coarsen(g, "none") is g
    assert coarsen(g, "trivial").n_nodes == 2
    assert coarsen(g, "chains").n_nodes == 1
    assert coarsen(g, "module:1", scopes=["", "m", "m"]).n_nodes == 2
    with pytest.raises(GraphError, match="unknown coarsening"):
        coarsen(g, "bogus")
    with pytest.raises(GraphError, match="module path"):
        coarsen(g, "module:1")
    with pytest.raises(GraphError, match="positive integer"):
        coarsen(g, "module:x", scopes=["", "", ""])
