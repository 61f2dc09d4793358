"""Seeded random DAGs for the stage problem: training data for the pre-scheduler and benchmarks.

`layered_dag` is the general generator (layers, in-degree, skip edges, cost distributions);
`respect_like` and `icml24_like` are presets shaped like the RESPECT / Inc-ILP training graphs and
the ICML'24 peer's ``rand_graph_*.gml`` files. The same arguments and seed give an equal graph.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Union

import numpy as np

from ..graph import CompGraph
from .arguments import check_size, real, whole

__all__ = ["layered_dag", "respect_like", "icml24_like", "draw_costs", "CostSpec"]

#: ``meta["costs"]`` of every graph drawn here (`incsched.graph.cost_model`): bytes drawn, no times
#: (a problem's node times are then estimated by the roofline of its device kind).
SYNTHETIC_COSTS = {"bytes": "synthetic (drawn at random)"}

#: How a cost column is drawn: a constant, a ``(low, high)`` range drawn uniformly (inclusive for
#: byte counts), or a function ``(rng, size) -> array``.
CostSpec = Union[float, tuple[float, float], Callable[[np.random.Generator, int], np.ndarray]]


def layered_dag(
    n_nodes: int,
    *,
    n_layers: int | None = None,
    width: int | None = None,
    edge_prob: float | None = None,
    mean_in_degree: float | None = None,
    skip_prob: float = 0.1,
    param_bytes: CostSpec = (0, 1 << 20),
    out_bytes: CostSpec = (1 << 10, 1 << 20),
    flops: CostSpec = (1e6, 1e9),
    ops: Sequence[str] = ("op",),
    seed: int = 0,
    name: str | None = None,
) -> CompGraph:
    """A random DAG whose nodes sit in layers, every edge pointing to a later layer.

    Every node after the first layer has at least one predecessor in the layer just before it, so
    the graph's depth is exactly the number of layers. Further predecessors come from the previous
    layer, or (with probability ``skip_prob``) from a uniformly chosen earlier one: the residual
    and skip connections of DNNs.

    Parameters
    ----------
    n_nodes : int
        Number of nodes (>= 1).
    n_layers, width : int, optional
        At most one: the number of layers, or the nodes per layer (layers = ceil(n / width)).
        Default: about ``sqrt(n_nodes)`` layers.
    edge_prob, mean_in_degree : float, optional
        At most one. ``edge_prob``: each node of the previous layer is a predecessor with this
        probability (each node of an earlier layer with ``edge_prob * skip_prob``).
        ``mean_in_degree`` (default 2.0, >= 1): predecessors per node are 1 + Poisson(mean - 1),
        capped by the nodes available.
    skip_prob : float
        Chance that an extra predecessor comes from a layer before the previous one.
    param_bytes, out_bytes, flops : CostSpec
        Distributions of the node costs (see `CostSpec`). Edges carry their source's ``out_bytes``.
    ops : sequence of str
        Op kinds, drawn uniformly per node.
    seed : int
        Seed of ``numpy.random.default_rng``.
    name : str, optional
        Default ``"layered_<n>_s<seed>"``.

    Returns
    -------
    CompGraph
        Nodes named ``n0`` .. ``n<N-1>`` in layer order; ``meta`` records the generator arguments.

    Raises
    ------
    ValueError
        On an inconsistent or out-of-range argument, or one of the wrong type.
    LimitError
        More nodes than ``INCSCHED_MAX_NODES``, or more edges (with ``edge_prob``: candidate pairs,
        one random number each) than ``INCSCHED_MAX_EDGES`` allows.

    Examples
    --------
    >>> g = layered_dag(50, n_layers=10, mean_in_degree=1.5, seed=1)
    >>> g.n_nodes, g.depth
    (50, 10)
    """
    n_layers, mean_in_degree = _layered_dag_plan(n_nodes, n_layers, width, edge_prob, mean_in_degree, skip_prob, ops, seed, name)
    check_size(f"layered_dag(n_nodes={n_nodes}{'' if edge_prob is None else f', edge_prob={edge_prob}'})", n_nodes,
               _layered_dag_edges(n_nodes, n_layers, edge_prob, mean_in_degree),
               edges_word="edges" if edge_prob is None else "candidate edges")

    rng = np.random.default_rng(seed)
    # Layer sizes as equal as possible; larger layers first, like the wide early layers of a DNN.
    sizes = np.full(n_layers, n_nodes // n_layers, dtype=np.int64)
    sizes[: n_nodes % n_layers] += 1
    start = np.concatenate([[0], np.cumsum(sizes)])
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    for layer in range(1, n_layers):
        lo, hi = int(start[layer]), int(start[layer + 1])
        prev_lo = int(start[layer - 1])
        if edge_prob is not None:
            s, d = _edges_by_prob(rng, prev_lo, lo, hi, edge_prob, skip_prob)
        else:
            s, d = _edges_by_degree(rng, start, layer, mean_in_degree, skip_prob)
        src.append(s)
        dst.append(d)
    src_a = np.concatenate(src) if src else np.zeros(0, dtype=np.int64)
    dst_a = np.concatenate(dst) if dst else np.zeros(0, dtype=np.int64)

    op_idx = rng.integers(0, len(ops), size=n_nodes)
    pb = draw_costs(param_bytes, rng, n_nodes, integral=True, field="param_bytes")
    ob = draw_costs(out_bytes, rng, n_nodes, integral=True, field="out_bytes")
    fl = draw_costs(flops, rng, n_nodes, integral=False, field="flops")
    return CompGraph(
        [f"n{i}" for i in range(n_nodes)],
        src_a,
        dst_a,
        op=[ops[i] for i in op_idx.tolist()],
        flops=fl,
        param_bytes=pb,
        out_bytes=ob,
        name=name or f"layered_{n_nodes}_s{seed}",
        meta={
            "generator": "layered_dag",
            "costs": SYNTHETIC_COSTS,
            "n_layers": n_layers,
            "edge_prob": edge_prob,
            "mean_in_degree": mean_in_degree,
            "skip_prob": skip_prob,
            "seed": seed,
        },
    )


def _layered_dag_plan(n_nodes, n_layers, width, edge_prob, mean_in_degree, skip_prob, ops, seed, name) -> tuple[int, float | None]:
    """`layered_dag`'s arguments checked; its layer count and mean in-degree as it will use them."""
    whole("n_nodes", n_nodes, low=1)
    if n_layers is not None and width is not None:
        raise ValueError("give n_layers or width, not both")
    if edge_prob is not None and mean_in_degree is not None:
        raise ValueError("give edge_prob or mean_in_degree, not both")
    if width is not None:
        whole("width", width, low=1)
        n_layers = math.ceil(n_nodes / width)
    elif n_layers is None:
        n_layers = max(1, round(math.sqrt(n_nodes)))
    else:
        whole("n_layers", n_layers)
    if not 1 <= n_layers <= n_nodes:
        raise ValueError(f"n_layers must be in 1..n_nodes ({n_nodes}), got {n_layers}")
    if edge_prob is not None:
        real("edge_prob", edge_prob, -math.inf)
        if not 0.0 <= edge_prob <= 1.0:
            raise ValueError(f"edge_prob must be in [0, 1], got {edge_prob}")
    if edge_prob is None and mean_in_degree is None:
        mean_in_degree = 2.0
    if mean_in_degree is not None:
        real("mean_in_degree", mean_in_degree, -math.inf)
        if mean_in_degree < 1.0:
            raise ValueError(f"mean_in_degree must be at least 1, got {mean_in_degree}")
    real("skip_prob", skip_prob, -math.inf)
    if not 0.0 <= skip_prob <= 1.0:
        raise ValueError(f"skip_prob must be in [0, 1], got {skip_prob}")
    if isinstance(ops, (str, bytes)) or not isinstance(ops, Sequence) or not all(isinstance(o, str) for o in ops):
        raise ValueError(f"ops must be a list of op kinds, got {ops!r:.80}")
    if not ops:
        raise ValueError("ops must name at least one op kind")
    whole("seed", seed, low=0, high=2**128)
    if name is not None and not isinstance(name, str):
        raise ValueError(f"name must be a string, got {name!r:.80}")
    return n_layers, mean_in_degree


def _layered_dag_edges(n_nodes: int, n_layers: int, edge_prob: float | None, mean_in_degree: float | None) -> int:
    """Edges `layered_dag` draws, about; with ``edge_prob``, the random numbers it draws: one per
    pair of a node and a node of an earlier layer (its layers sized as it sizes them)."""
    if edge_prob is None:
        return min(math.ceil(n_nodes * mean_in_degree), n_nodes * (n_nodes - 1) // 2)
    q, r = divmod(n_nodes, n_layers)  # r layers of q + 1 nodes first, then layers of q
    pairs, before = 0, 0
    for size, count in ((q + 1, r), (q, n_layers - r)):
        # layers i = 0 .. count-1 of this size start at before + i * size
        pairs += size * (count * before + size * count * (count - 1) // 2)
        before += size * count
    return pairs  # the first layer starts at 0: it adds nothing


def _respect_like_size(n_nodes, seed) -> tuple[int, int]:
    whole("n_nodes", n_nodes, low=1)
    whole("seed", seed, low=0, high=2**128)
    return n_nodes, math.ceil(1.3 * n_nodes)  # its layered_dag's mean in-degree, as it checks itself


def _icml24_like_size(n_nodes, sparse, seed) -> tuple[int, int]:
    whole("n_nodes", n_nodes, low=2)
    if not isinstance(sparse, (bool, np.bool_)):
        raise ValueError(f"sparse must be true or false, got {sparse!r:.80}")
    whole("seed", seed, low=0, high=2**128)
    return n_nodes, math.ceil(_ICML24_EDGES_PER_NODE[bool(sparse)] * n_nodes) + n_nodes


def _layered_dag_size(n_nodes, n_layers, width, edge_prob, mean_in_degree, skip_prob, param_bytes, out_bytes, flops, ops,
                      seed, name) -> tuple[int, int]:
    n_layers, mean_in_degree = _layered_dag_plan(n_nodes, n_layers, width, edge_prob, mean_in_degree, skip_prob, ops, seed, name)
    for field_name, spec in (("param_bytes", param_bytes), ("out_bytes", out_bytes), ("flops", flops)):
        _check_cost_spec(spec, field_name, integral=field_name != "flops")
    return n_nodes, _layered_dag_edges(n_nodes, n_layers, edge_prob, mean_in_degree)


def _check_cost_spec(spec, field: str, integral: bool) -> None:
    """A `CostSpec` that is a constant or a (low, high) range (a list of two, from a config, too)."""
    if callable(spec):
        return
    values = list(spec) if isinstance(spec, (tuple, list)) else [spec]
    if isinstance(spec, (tuple, list)) and len(values) != 2:
        raise ValueError(f"{field}: a range must be (low, high) with low <= high, got {spec!r:.80}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise ValueError(f"{field}: a cost must be a number or a range of two, got {spec!r:.80}")
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"{field}: costs must be finite and non-negative, got {spec!r:.80}")
        if integral and v > 2**62:
            raise ValueError(f"{field}: byte counts are at most 2**62, got {spec!r:.80}")


def _edges_by_prob(rng, prev_lo, lo, hi, edge_prob, skip_prob) -> tuple[np.ndarray, np.ndarray]:
    n_cur = hi - lo
    # Candidates: every node of an earlier layer; the previous layer at edge_prob, older ones
    # at edge_prob * skip_prob.
    prob = np.full(lo, edge_prob * skip_prob)
    prob[prev_lo:lo] = edge_prob
    hit = rng.random((n_cur, lo)) < prob
    # A node the draw left without a predecessor in the previous layer gets one, so that the
    # depth is exactly the number of layers.
    lonely = ~hit[:, prev_lo:lo].any(axis=1)
    if lonely.any():
        pick = rng.integers(prev_lo, lo, size=int(lonely.sum()))
        hit[np.flatnonzero(lonely), pick] = True
    v, u = np.nonzero(hit)
    return u.astype(np.int64), (v + lo).astype(np.int64)


def _edges_by_degree(rng, start, layer, mean_in_degree, skip_prob) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = int(start[layer]), int(start[layer + 1])
    prev_lo = int(start[layer - 1])
    n_cur = hi - lo
    extra = rng.poisson(mean_in_degree - 1.0, size=n_cur)
    srcs, dsts = [], []
    for k in range(n_cur):
        preds = {int(rng.integers(prev_lo, lo))}
        for _ in range(min(int(extra[k]), lo - 1)):
            if layer >= 2 and rng.random() < skip_prob:
                old = int(rng.integers(0, layer - 1))
                cand = int(rng.integers(start[old], start[old + 1]))
            else:
                cand = int(rng.integers(prev_lo, lo))
            preds.add(cand)  # a repeat is dropped: the node simply gets one predecessor fewer
        for u in sorted(preds):
            srcs.append(u)
            dsts.append(lo + k)
    return np.asarray(srcs, dtype=np.int64), np.asarray(dsts, dtype=np.int64)


def draw_costs(spec: CostSpec, rng: np.random.Generator, size: int, *, integral: bool, field: str = "cost") -> np.ndarray:
    """Draw ``size`` non-negative costs from a `CostSpec`.

    Parameters
    ----------
    spec : CostSpec
        A constant, a ``(low, high)`` range (uniform; integers inclusive when ``integral``), or a
        function ``(rng, size) -> array``.
    rng : numpy.random.Generator
    size : int
    integral : bool
        Round to whole numbers (byte counts).
    field : str
        Named in error messages.

    Returns
    -------
    numpy.ndarray
        int64 when ``integral``, else float64.

    Raises
    ------
    ValueError
        If the spec is malformed or yields negative or non-finite values.
    """
    _check_cost_spec(spec, field, integral)
    if isinstance(spec, list):  # a range as a config writes it
        spec = tuple(spec)
    if callable(spec):
        values = np.asarray(spec(rng, size), dtype=np.float64)
        if values.shape != (size,):
            raise ValueError(f"{field}: the cost function returned shape {values.shape}, expected ({size},)")
    elif isinstance(spec, tuple):
        if len(spec) != 2 or spec[0] > spec[1]:
            raise ValueError(f"{field}: a range must be (low, high) with low <= high, got {spec!r}")
        lo, hi = spec
        if integral:
            values = rng.integers(int(lo), int(hi) + 1, size=size).astype(np.float64)
        else:
            values = rng.uniform(lo, hi, size=size)
    else:
        values = np.full(size, float(spec))
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError(f"{field}: costs must be finite and non-negative")
    return np.rint(values).astype(np.int64) if integral else values


# ---------------------------------------------------------------------- presets


_RESPECT_OPS = ("conv2d", "depthwise_conv2d", "linear", "batch_norm", "relu", "add", "pool", "concat")
_WEIGHTED_OPS = {"conv2d", "depthwise_conv2d", "linear", "batch_norm"}


def respect_like(n_nodes: int = 60, seed: int = 0) -> CompGraph:
    """A small DNN-like DAG, as RESPECT and Inc-ILP schedule onto pipelined Edge TPUs.

    Deep and narrow (about three nodes per layer), mostly chains with residual skips; weighted
    ops (convolutions, linear, batch norm) hold int8 parameters of 1 KiB to 2 MiB (log-uniform,
    so a few of them dominate an 8 MB on-chip cache); activations of 4 KiB to 1 MiB; flops of a
    weighted op are its parameters times a spatial extent of 1 .. 56x56, times 2.

    Parameters
    ----------
    n_nodes : int
        Tens to a few hundred.
    seed : int

    Returns
    -------
    CompGraph

    Raises
    ------
    ValueError
        If ``n_nodes`` is not a whole number >= 1.
    LimitError
        More nodes than ``INCSCHED_MAX_NODES`` allows.
    """
    check_size(f"respect_like(n_nodes={n_nodes})", *_respect_like_size(n_nodes, seed))
    rng = np.random.default_rng(seed)
    base = layered_dag(
        n_nodes,
        n_layers=max(1, math.ceil(n_nodes / 3)),
        mean_in_degree=1.3,
        skip_prob=0.15,
        ops=_RESPECT_OPS,
        seed=int(rng.integers(2**31)),
        name=f"respect_like_{n_nodes}_s{seed}",
    )
    weighted = np.array([op in _WEIGHTED_OPS for op in base.op])
    log_params = rng.uniform(math.log(1 << 10), math.log(2 << 20), size=n_nodes)
    params = np.where(weighted, np.rint(np.exp(log_params)), 0).astype(np.int64)
    out = np.rint(np.exp(rng.uniform(math.log(4 << 10), math.log(1 << 20), size=n_nodes))).astype(np.int64)
    spatial = np.exp(rng.uniform(0.0, math.log(56 * 56), size=n_nodes))
    flops = np.where(weighted, 2.0 * params * spatial, out.astype(np.float64))
    return base.replace(
        param_bytes=params,
        out_bytes=out,
        edge_bytes=out[base.src],
        flops=flops,
        meta={"generator": "respect_like", "n_nodes": n_nodes, "seed": seed, "costs": SYNTHETIC_COSTS},
    )


#: Edges per node in the peer files (measured on all 18: 2.88-2.98 dense, 1.17-1.29 sparse).
_ICML24_EDGES_PER_NODE = {False: 2.93, True: 1.22}


def icml24_like(n_nodes: int = 1000, sparse: bool = False, seed: int = 0) -> CompGraph:
    """A DAG with the statistics of the ICML'24 peer's ``rand_graph_*.gml`` benchmark files.

    Measured on those 18 files: a uniformly random DAG over a random node order (its asap levels
    shrink steadily from about 20 % of the nodes down to one, edges span 1 .. depth levels);
    2.93 edges per node (sparse: 1.22); no isolated node; 60 % of nodes with ``parameter`` 0, the
    rest uniform in 1000 .. 5000; 60 % of edges with ``parameter`` 0, the rest uniform in
    10000 .. 50000, independent of the nodes. Longest paths there: 14-15 (dense, ~1000 nodes),
    17-21 (dense, 5000-10000), 7-10 (sparse). Here as there, node names are ``"0"`` .. and node
    indices are not in topological order; ``out_bytes`` is the largest outgoing edge's bytes.

    Parameters
    ----------
    n_nodes : int
        Number of nodes (>= 2); the peer files have 810-9447.
    sparse : bool
        The ``rand_graph_sparse_*`` statistics.
    seed : int

    Returns
    -------
    CompGraph

    Raises
    ------
    ValueError
        If ``n_nodes`` is not a whole number >= 2.
    LimitError
        More nodes or edges than ``INCSCHED_MAX_NODES`` / ``INCSCHED_MAX_EDGES`` allow.
    """
    check_size(f"icml24_like(n_nodes={n_nodes})", *_icml24_like_size(n_nodes, sparse, seed))
    rng = np.random.default_rng(seed)
    target = _ICML24_EDGES_PER_NODE[bool(sparse)]
    # Every isolated node is given one edge afterwards, about n * exp(-2c) of them for c sampled
    # edges per node, so sample c with c + exp(-2c) = target.
    c = target
    for _ in range(50):
        c = target - math.exp(-2.0 * c)
    n_sample = min(round(c * n_nodes), n_nodes * (n_nodes - 1) // 2)
    pos_u, pos_v = _distinct_pairs(rng, n_nodes, n_sample)

    deg = np.bincount(pos_u, minlength=n_nodes) + np.bincount(pos_v, minlength=n_nodes)
    lonely = np.flatnonzero(deg == 0)
    if lonely.size:
        other = rng.integers(0, n_nodes - 1, size=lonely.size)
        other += other >= lonely  # uniform over the other nodes
        pos_u = np.concatenate([pos_u, np.minimum(lonely, other)])
        pos_v = np.concatenate([pos_v, np.maximum(lonely, other)])
        # Two lonely nodes may have drawn each other: keep each pair once, in draw order.
        _, first = np.unique(pos_u * n_nodes + pos_v, return_index=True)
        keep = np.sort(first)
        pos_u, pos_v = pos_u[keep], pos_v[keep]

    # Positions are the hidden topological order; node indices (and names) are a shuffle of it.
    index_of_pos = rng.permutation(n_nodes)
    src, dst = index_of_pos[pos_u], index_of_pos[pos_v]
    m = len(src)
    params = np.where(rng.random(n_nodes) < 0.6, 0, rng.integers(1000, 5001, size=n_nodes))
    edge_bytes = np.where(rng.random(m) < 0.6, 0, rng.integers(10000, 50001, size=m))
    out_bytes = np.zeros(n_nodes, dtype=np.int64)
    np.maximum.at(out_bytes, src, edge_bytes)
    kind = "sparse" if sparse else "dense"
    return CompGraph(
        [str(i) for i in range(n_nodes)],
        src.astype(np.int64),
        dst.astype(np.int64),
        param_bytes=params.astype(np.int64),
        out_bytes=out_bytes,
        edge_bytes=edge_bytes.astype(np.int64),
        name=f"icml24_like_{kind}_{n_nodes}_s{seed}",
        meta={"generator": "icml24_like", "n_nodes": n_nodes, "sparse": bool(sparse), "seed": seed, "costs": SYNTHETIC_COSTS},
    )


def _distinct_pairs(rng: np.random.Generator, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """``m`` distinct pairs ``u < v`` drawn uniformly from ``0..n-1``, in draw order."""
    keys = np.zeros(0, dtype=np.int64)
    while len(keys) < m:
        a = rng.integers(0, n, size=2 * (m - len(keys)) + 16)
        b = rng.integers(0, n, size=len(a))
        ok = a != b
        new = np.minimum(a, b)[ok] * n + np.maximum(a, b)[ok]
        keys = np.concatenate([keys, new])
        _, first = np.unique(keys, return_index=True)
        keys = keys[np.sort(first)]
    keys = keys[:m]
    return keys // n, keys % n
