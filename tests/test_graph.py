"""CompGraph: every validation error, orders and levels, longest paths against networkx, copies."""

from __future__ import annotations

import logging
import math
import time

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.graph import dag
from incsched.errors import CycleError, GraphError
from incsched.graph import CompGraph

log = logging.getLogger(__name__)


def chain(n=3, **kw):
    names = [f"v{i}" for i in range(n)]
    return CompGraph(names, names[:-1], names[1:], **kw)


@st.composite
def random_dags(draw, max_nodes=12):
    """A DAG whose node indices are a shuffle of a hidden topological order (so index order is not one)."""
    n = draw(st.integers(1, max_nodes))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs))) if pairs else []
    perm = draw(st.permutations(range(n)))
    src = [perm[i] for i, _ in chosen]
    dst = [perm[j] for _, j in chosen]
    weights = st.floats(0, 100, allow_nan=False, allow_infinity=False)
    node_w = draw(st.lists(weights, min_size=n, max_size=n))
    edge_w = draw(st.lists(weights, min_size=len(src), max_size=len(src)))
    g = CompGraph([f"n{i}" for i in range(n)], np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64))
    return g, np.array(node_w), np.array(edge_w)


# ---------------------------------------------------------------------- validation errors


def test_cycle_error_names_the_nodes_on_the_cycle():
    # a -> b -> c -> d -> b, plus a tail that is not on the cycle
    with pytest.raises(CycleError) as err:
        CompGraph(["a", "b", "c", "d", "e"], ["a", "b", "c", "d", "d"], ["b", "c", "d", "b", "e"])
    assert set(err.value.cycle) == {"b", "c", "d"}
    cyc = err.value.cycle
    # consecutive names (and last -> first) are edges of the graph, in the forward direction
    edges = {("a", "b"), ("b", "c"), ("c", "d"), ("d", "b"), ("d", "e")}
    assert all((cyc[k], cyc[(k + 1) % len(cyc)]) in edges for k in range(len(cyc)))
    assert "cycle" in str(err.value) and "b" in str(err.value)
    assert isinstance(err.value, GraphError)


def test_two_node_cycle():
    with pytest.raises(CycleError) as err:
        CompGraph(["x", "y"], ["x", "y"], ["y", "x"])
    assert sorted(err.value.cycle) == ["x", "y"]


@given(st.integers(2, 30), st.data())
@settings(max_examples=40, deadline=None)
def test_any_added_back_edge_is_reported_as_a_cycle(n, data):
    # a chain plus one edge pointing backwards always closes a cycle
    j = data.draw(st.integers(1, n - 1))
    i = data.draw(st.integers(0, j - 1))
    names = [f"v{k}" for k in range(n)]
    with pytest.raises(CycleError) as err:
        CompGraph(names, names[:-1] + [names[j]], names[1:] + [names[i]])
    assert err.value.cycle and set(err.value.cycle) == {f"v{k}" for k in range(i, j + 1)}


def test_duplicate_names():
    with pytest.raises(GraphError, match=r"duplicate node name 'a' \(nodes 0 and 2\)"):
        CompGraph(["a", "b", "a"], [], [])


def test_non_string_and_empty_names():
    with pytest.raises(GraphError, match="node 1 has a name of type int"):
        CompGraph(["a", 7], [], [])
    with pytest.raises(GraphError, match="node 0 has an empty name"):
        CompGraph([""], [], [])


def test_unknown_node_by_name():
    with pytest.raises(GraphError, match=r"edge 1 \('b' -> 'zz'\) has unknown target node 'zz'"):
        CompGraph(["a", "b"], ["a", "b"], ["b", "zz"])
    with pytest.raises(GraphError, match="unknown source node 'q'"):
        CompGraph(["a", "b"], ["q"], ["b"])


def test_unknown_node_by_index():
    with pytest.raises(GraphError, match=r"edge 0 has target index 5, not a node \(0..1\)"):
        CompGraph(["a", "b"], [0], [5])
    with pytest.raises(GraphError, match="source index -1"):
        CompGraph(["a", "b"], [-1], [1])


def test_mixed_or_non_integer_endpoints():
    with pytest.raises(GraphError, match="all node names or all integer indices"):
        CompGraph(["a", "b"], ["a"], [1.0])
    with pytest.raises(GraphError, match="all node names or all integer indices"):
        CompGraph(["a", "b", "c"], ["a", 1], ["b", 2])


def test_self_loop():
    with pytest.raises(GraphError, match=r"self-loop on node 'b' \(edge 1\)"):
        CompGraph(["a", "b"], ["a", "b"], ["b", "b"])


def test_duplicate_edge():
    with pytest.raises(GraphError, match=r"duplicate edge 'a' -> 'c' \(edges 0 and 2\)"):
        CompGraph(["a", "b", "c"], ["a", "b", "a"], ["c", "c", "c"])


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("field", ["flops", "param_bytes", "out_bytes"])
def test_negative_nan_inf_node_costs(field, bad):
    with pytest.raises(GraphError, match=rf"{field} of node 'v1' is .*finite and non-negative"):
        chain(3, **{field: [0, bad, 0]})


@pytest.mark.parametrize("bad", [-3, math.nan, math.inf])
def test_bad_edge_bytes_name_the_edge(bad):
    with pytest.raises(GraphError, match=r"edge_bytes of edge 1 \(v1 -> v2\)"):
        chain(3, edge_bytes=[1, bad])


def test_bad_compute_time():
    with pytest.raises(GraphError, match=r"compute_time\['cpu'\] of node 'v0'"):
        chain(2, compute_time={"cpu": [-1.0, 0.0]})
    with pytest.raises(GraphError, match="device-kind strings"):
        chain(2, compute_time={"": [0.0, 0.0]})
    with pytest.raises(GraphError, match="device-kind strings"):
        chain(2, compute_time={3: [0.0, 0.0]})


@pytest.mark.parametrize("bad", ["12", None, True, [1], object()])
def test_non_numeric_costs(bad):
    with pytest.raises(GraphError, match="flops of node 'v2' must be a number"):
        chain(3, flops=[1, 2, bad])


def test_non_string_op():
    with pytest.raises(GraphError, match="op of node 'v1' must be a string"):
        chain(2, op=["a", 3])


def test_wrong_lengths():
    with pytest.raises(GraphError, match="flops has 2 entries, expected 3"):
        chain(3, flops=[1, 2])
    with pytest.raises(GraphError, match="param_bytes has 4 entries, expected 3"):
        chain(3, param_bytes=np.zeros(4, dtype=np.int64))
    with pytest.raises(GraphError, match="edge_bytes has 1 entries, expected 2"):
        chain(3, edge_bytes=[1])
    with pytest.raises(GraphError, match="op has 2 entries for 3 nodes"):
        chain(3, op=["a", "b"])
    with pytest.raises(GraphError, match="members has 1 entries for 3 nodes"):
        chain(3, members=[["x"]])
    with pytest.raises(GraphError, match="src has 2 endpoints but dst has 1"):
        CompGraph(["a", "b", "c"], ["a", "b"], ["c"])


def test_non_integral_bytes():
    with pytest.raises(GraphError, match="param_bytes of node 'v1' is 2.5; byte counts must be whole numbers"):
        chain(2, param_bytes=[1, 2.5])
    with pytest.raises(GraphError, match="out_bytes of node 'v0' is 0.25"):
        chain(2, out_bytes=np.array([0.25, 1.0]))
    # whole floats are fine and stored as integers
    g = chain(2, param_bytes=[1.0, 2.0])
    assert g.param_bytes.dtype == np.int64 and g.param_bytes.tolist() == [1, 2]


def test_arrays_are_read_only():
    g = chain(3, flops=[1, 2, 3])
    for arr in (g.src, g.dst, g.flops, g.param_bytes, g.out_bytes, g.edge_bytes, g.topological_order()):
        with pytest.raises(ValueError):
            arr[0] = 1


def test_edge_bytes_default_to_source_out_bytes():
    g = CompGraph(["a", "b", "c"], ["a", "a", "b"], ["b", "c", "c"], out_bytes=[10, 20, 30])
    assert g.edge_bytes.tolist() == [10, 10, 20]


def test_index_of_unknown_name():
    with pytest.raises(GraphError, match="no node named 'nope'"):
        chain(2).index("nope")


def test_empty_graph():
    g = CompGraph([], [], [])
    assert g.n_nodes == 0 and g.n_edges == 0 and g.depth == 0
    assert g.longest_path() == (0.0, [])
    assert g.summary()["nodes"] == 0


# ---------------------------------------------------------------------- orders and levels


@pytest.mark.slow
@given(random_dags())
@settings(max_examples=80, deadline=None)
def test_topological_order_puts_every_edge_forward(case):
    g, _, _ = case
    order = g.topological_order()
    assert sorted(order.tolist()) == list(range(g.n_nodes))
    pos = np.empty(g.n_nodes, dtype=np.int64)
    pos[order] = np.arange(g.n_nodes)
    assert np.all(pos[g.src] < pos[g.dst])


@pytest.mark.slow
@given(random_dags())
@settings(max_examples=80, deadline=None)
def test_asap_alap_levels(case):
    g, _, _ = case
    asap, alap = g.asap_level, g.alap_level
    assert np.all(asap <= alap)
    assert np.all(asap[g.src] < asap[g.dst]) and np.all(alap[g.src] < alap[g.dst])
    assert asap.min() == 0 and alap.max() == g.depth - 1
    # depth counts the nodes on a longest path; networkx counts its edges
    assert g.depth == nx.dag_longest_path_length(g.to_networkx()) + 1
    # on a critical (longest) path the levels are pinned: asap == alap == position on the path
    _, path = g.longest_path()
    idx = [g.index(v) for v in path]
    assert len(path) == g.depth
    assert asap[idx].tolist() == list(range(g.depth)) == alap[idx].tolist()


@given(random_dags())
@settings(max_examples=40, deadline=None)
def test_methods_are_the_dag_functions_cached(case):
    g, _, _ = case
    node_w = np.arange(g.n_nodes, dtype=np.float64)
    assert np.array_equal(g.topological_order(), dag.topological_order(g))
    dfs = g.topological_order(depth_first=True)
    assert np.array_equal(dfs, dag.topological_order(g, depth_first=True)) and dfs is g.topological_order(True)
    assert np.array_equal(g.asap_level, dag.asap_level(g)) and np.array_equal(g.alap_level, dag.alap_level(g))
    assert g.depth == dag.depth(g)
    assert np.array_equal(g.top_level(node_w), dag.top_level(g, node_w))
    assert np.array_equal(g.bottom_level(node_w), dag.bottom_level(g, node_w))
    assert g.longest_path(node_w) == dag.longest_path(g, node_w)
    for cached in (g.topological_order(), dfs, g.asap_level, g.alap_level):
        assert not cached.flags.writeable


def test_depth_first_order_finishes_a_branch_first():
    # a -> b -> d and a -> c: Kahn goes level by level (b, c, d), depth-first finishes b's branch.
    g = CompGraph(["a", "b", "c", "d"], ["a", "a", "b"], ["b", "c", "d"])
    assert g.topological_order().tolist() == [0, 1, 2, 3]
    assert g.topological_order(depth_first=True).tolist() == [0, 1, 3, 2]


@pytest.mark.slow
@given(random_dags())
@settings(max_examples=60, deadline=None)
def test_csr_matches_edges(case):
    g, _, _ = case
    for v in range(g.n_nodes):
        assert sorted(g.successors(v).tolist()) == sorted(g.dst[g.src == v].tolist())
        assert sorted(g.predecessors(v).tolist()) == sorted(g.src[g.dst == v].tolist())
    assert np.array_equal(g.src[g.succ_edge], np.repeat(np.arange(g.n_nodes), g.out_degree))
    assert np.array_equal(g.dst[g.succ_edge], g.succ_idx)
    assert np.array_equal(g.src[g.pred_edge], g.pred_idx)
    assert g.in_degree.sum() == g.out_degree.sum() == g.n_edges


# ---------------------------------------------------------------------- longest paths


def _path_weight(g: CompGraph, path: list[str], node_w, edge_w) -> float:
    idx = [g.index(v) for v in path]
    eid = {(int(u), int(v)): k for k, (u, v) in enumerate(zip(g.src, g.dst))}
    total = float(sum(node_w[i] for i in idx)) if node_w is not None else 0.0
    for u, v in zip(idx, idx[1:]):
        k = eid[(u, v)]  # KeyError if the path is not a path
        total += float(edge_w[k]) if edge_w is not None else 1.0
    return total


@pytest.mark.slow
@given(random_dags())
@settings(max_examples=80, deadline=None)
def test_longest_path_unweighted_vs_networkx(case):
    g, _, _ = case
    length, path = g.longest_path()
    assert length == nx.dag_longest_path_length(g.to_networkx())
    assert _path_weight(g, path, None, None) == length


@pytest.mark.slow
@given(random_dags())
@settings(max_examples=80, deadline=None)
def test_longest_path_edge_weights_vs_networkx(case):
    g, _, edge_w = case
    length, path = g.longest_path(edge_weight=edge_w)
    h = nx.DiGraph()
    h.add_nodes_from(range(g.n_nodes))
    h.add_weighted_edges_from((int(u), int(v), float(w)) for u, v, w in zip(g.src, g.dst, edge_w))
    assert length == pytest.approx(nx.dag_longest_path_length(h, weight="weight"))
    assert _path_weight(g, path, None, edge_w) == pytest.approx(length)


@pytest.mark.slow
@given(random_dags())
@settings(max_examples=80, deadline=None)
def test_longest_path_node_and_edge_weights_vs_networkx(case):
    g, node_w, edge_w = case
    length, path = g.longest_path(node_w, edge_w)
    # Node weights moved onto edges: u -> v costs w[u] + e(u, v); every node reaches a sink T at w[v].
    h = nx.DiGraph()
    h.add_weighted_edges_from((int(u), int(v), float(node_w[u] + w)) for u, v, w in zip(g.src, g.dst, edge_w))
    h.add_weighted_edges_from((v, "T", float(node_w[v])) for v in range(g.n_nodes))
    assert length == pytest.approx(nx.dag_longest_path_length(h, weight="weight"))
    assert _path_weight(g, path, node_w, edge_w) == pytest.approx(length)
    # top level + bottom level bounds every node by the critical path, with equality on it
    top, bottom = g.top_level(node_w, edge_w), g.bottom_level(node_w, edge_w)
    assert np.all(top + bottom <= length + 1e-9)
    for v in path:
        assert top[g.index(v)] + bottom[g.index(v)] == pytest.approx(length)


def test_longest_path_known_example():
    # a -> b -> d weighs 5 + 1 + 2 + 1 + 4 = 13, a -> c -> d only 5 + 0 + 1 + 0 + 4 = 10; a lone e of 20 beats both
    g = CompGraph(["a", "b", "c", "d", "e"], ["a", "a", "b", "c"], ["b", "c", "d", "d"])
    assert g.longest_path([5, 2, 1, 4, 0], [1, 0, 1, 0]) == (13.0, ["a", "b", "d"])
    assert g.longest_path([5, 2, 1, 4, 20], [1, 0, 1, 0]) == (20.0, ["e"])
    with pytest.raises(GraphError, match="node_weight has shape"):
        g.longest_path([1, 2])
    with pytest.raises(GraphError, match="edge_weight has shape"):
        g.longest_path(edge_weight=[1])


# ---------------------------------------------------------------------- copies, equality, networkx


def test_replace_and_equality():
    g = chain(3, flops=[1, 2, 3], out_bytes=[4, 5, 6], name="c")
    assert g == chain(3, flops=[1, 2, 3], out_bytes=[4, 5, 6], name="c")
    h = g.replace(flops=[1, 2, 4])
    assert h != g and h.flops.tolist() == [1, 2, 4] and h.out_bytes.tolist() == [4, 5, 6]
    assert g.replace() == g
    assert g.replace(meta={"x": 1}) != g
    assert g.replace(compute_time={"cpu": [1.0, 1.0, 1.0]}) != g
    with pytest.raises(TypeError, match="no field"):
        g.replace(colour="red")
    with pytest.raises(GraphError):
        g.replace(param_bytes=[1, -1, 0])


def test_time_measured_and_estimated():
    g = chain(2, flops=[5e10, 0], compute_time={"cpu": [0.5, 0.25]})
    assert g.time("cpu").tolist() == [0.5, 0.25]
    est = g.time("cuda")
    assert est.shape == (2,) and np.all(est > 0)
    with pytest.raises(GraphError, match="no times for device kind 'tpu' .*known kinds: a100, cpu, cuda, h100"):
        g.time("tpu")


def _canonical(g: CompGraph):
    order = np.lexsort((g.dst, g.src))
    return g.replace(src=g.src[order], dst=g.dst[order], edge_bytes=g.edge_bytes[order])


@pytest.mark.slow
@given(random_dags(), st.booleans(), st.booleans())
@settings(max_examples=40, deadline=None)
def test_networkx_round_trip(case, with_times, with_members):
    g, node_w, edge_w = case
    g = g.replace(
        op=[f"op{i % 3}" for i in range(g.n_nodes)],
        flops=node_w,
        param_bytes=np.arange(g.n_nodes) * 7,
        out_bytes=np.arange(g.n_nodes) + 1,
        edge_bytes=np.rint(edge_w).astype(np.int64),
        compute_time={"cpu": node_w / 10} if with_times else None,
        members=[[f"fx{i}", f"fx{i}b"] for i in range(g.n_nodes)] if with_members else None,
        meta={"seed": 3},
        name="rt",
    )
    back = CompGraph.from_networkx(g.to_networkx())
    # networkx lists edges grouped by source node, so compare with edges in a canonical order
    assert _canonical(back) == _canonical(g)


def test_from_networkx_defaults_and_errors():
    h = nx.DiGraph()
    h.add_node(1, out_bytes=8)
    h.add_node(2)
    h.add_edge(1, 2)
    g = CompGraph.from_networkx(h, name="h")
    assert g.names == ("1", "2") and g.edge_bytes.tolist() == [8] and g.op == ("op", "op") and g.name == "h"
    with pytest.raises(GraphError, match="directed"):
        CompGraph.from_networkx(nx.Graph([(1, 2)]))
    h.nodes[1]["compute_time"] = {"cpu": 1.0}
    with pytest.raises(GraphError, match=r"compute_time\['cpu'\] is missing on node '2'"):
        CompGraph.from_networkx(h)


def test_summary_counts():
    g = CompGraph(["a", "b", "c", "d"], ["a", "a", "b", "c"], ["b", "c", "d", "d"], param_bytes=[1, 2, 3, 4])
    s = g.summary()
    assert (s["nodes"], s["edges"], s["sources"], s["sinks"], s["depth"], s["widest_level"]) == (4, 4, 1, 1, 3, 2)
    assert s["total_param_bytes"] == 10


# ---------------------------------------------------------------------- scale


@pytest.mark.slow
def test_100k_node_graph_builds_and_validates():
    rng = np.random.default_rng(0)
    n = 100_000
    # about 3 edges per node, each from an earlier node of a shuffled order
    dst_pos = np.repeat(np.arange(1, n), 3)
    src_pos = (dst_pos - 1 - rng.integers(0, 50, size=dst_pos.size)).clip(0)
    key = np.unique(src_pos * n + dst_pos)
    src_pos, dst_pos = key // n, key % n
    perm = rng.permutation(n)
    t0 = time.perf_counter()
    g = CompGraph(
        [f"op{i}" for i in range(n)],
        perm[src_pos],
        perm[dst_pos],
        flops=rng.uniform(0, 1e9, n),
        param_bytes=rng.integers(0, 1 << 20, n),
        out_bytes=rng.integers(0, 1 << 20, n),
    )
    order = g.topological_order()
    depth = g.depth
    length, _ = g.longest_path(g.time("cpu"))
    elapsed = time.perf_counter() - t0
    log.info("100,000-node graph (%d edges): built, ordered, levelled and longest path in %.2f s", g.n_edges, elapsed)
    print(f"\n100k-node graph, {g.n_edges} edges: {elapsed:.2f} s")
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    assert np.all(pos[g.src] < pos[g.dst])
    assert depth >= 2 and length > 0
    _, path = g.longest_path()
    src, dst = np.append(g.src, g.index(path[-1])), np.append(g.dst, g.index(path[0]))
    with pytest.raises(CycleError) as err:  # closing the longest path into a ring
        CompGraph(g.names, src, dst)
    # the reported cycle is one (any path from first to last closes a ring, not only this one)
    cyc = [g.index(v) for v in err.value.cycle]
    edges = set(zip(src.tolist(), dst.tolist()))
    assert all((cyc[k], cyc[(k + 1) % len(cyc)]) in edges for k in range(len(cyc)))


@pytest.mark.parametrize("name", ["a\x00b", "x\ud800"])
def test_names_no_file_can_hold_are_refused_at_construction(name):
    with pytest.raises(GraphError, match="NUL or a lone surrogate"):
        CompGraph([name], [], [])


@pytest.mark.parametrize("kwargs,message", [
    (dict(names=None, src=[], dst=[]), "names must be a sequence of node names, got NoneType"),
    (dict(names="abc", src=[], dst=[]), "names must be a sequence of node names, got str"),
    (dict(names=["a"], src=None, dst=[]), "src must be a sequence of node names or indices, got NoneType"),
    (dict(names=["a"], src=0, dst=0), "src must be a sequence of node names or indices, got int"),
    (dict(names=["a", "b"], src=[], dst=[], compute_time=[1.0, 2.0]), "compute_time must map device kinds"),
])
def test_library_arguments_are_checked_at_the_boundary(kwargs, message):
    """Issue 24: these raised TypeError or AttributeError, and a string was taken as three nodes."""
    with pytest.raises(GraphError, match=message):
        CompGraph(**kwargs)
