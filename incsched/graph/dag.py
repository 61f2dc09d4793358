"""Algorithms on a `CompGraph`'s DAG: topological orders, levels and longest weighted paths.

Plain functions over a graph (NetworkX style), reading only its public arrays (``succ_ptr``,
``pred_idx``, ``topological_order()`` ...). `CompGraph` keeps the data, validates it and caches the
results of these functions behind thin methods of the same names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import CycleError, GraphError

if TYPE_CHECKING:
    from .compgraph import CompGraph

__all__ = [
    "find_root",
    "topological_order",
    "asap_level",
    "alap_level",
    "depth",
    "top_level",
    "bottom_level",
    "longest_path",
]


def topological_order(graph: CompGraph, depth_first: bool = False) -> np.ndarray:
    """Node indices in a deterministic topological order.

    Parameters
    ----------
    graph : CompGraph
        The graph; only its adjacency arrays are read, so this also checks a graph under
        construction for cycles.
    depth_first : bool
        False (default): Kahn's algorithm, first-in first-out from index order (level by level).
        True: a stack instead (ties by index), which finishes one branch of a block before starting
        the next: contiguous runs of that order are connected pieces of the model, the order
        pipeline partitioners cut best.

    Returns
    -------
    numpy.ndarray
        int64 [n], each node once, every edge's source before its target.

    Raises
    ------
    CycleError
        If the edges form a directed cycle; the message names the nodes on it.

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["a", "b", "c", "d"], ["a", "a", "b"], ["b", "c", "d"])
    >>> topological_order(g).tolist(), topological_order(g, depth_first=True).tolist()
    ([0, 1, 2, 3], [0, 1, 3, 2])
    """
    n = graph.n_nodes
    indeg = np.bincount(graph.dst, minlength=n).tolist()
    ptr, nbr = graph.succ_ptr.tolist(), graph.succ_idx.tolist()
    if depth_first:
        stack = [v for v in range(n - 1, -1, -1) if indeg[v] == 0]
        order = []
        while stack:
            u = stack.pop()
            order.append(u)
            for k in range(ptr[u + 1] - 1, ptr[u] - 1, -1):
                v = nbr[k]
                indeg[v] -= 1
                if indeg[v] == 0:
                    stack.append(v)
    else:
        order = [i for i in range(n) if indeg[i] == 0]
        head = 0
        while head < len(order):
            u = order[head]
            head += 1
            for k in range(ptr[u], ptr[u + 1]):
                v = nbr[k]
                indeg[v] -= 1
                if indeg[v] == 0:
                    order.append(v)
    if len(order) < n:
        raise CycleError([graph.names[i] for i in _find_cycle(graph, indeg)])
    return np.asarray(order, dtype=np.int64)


def _find_cycle(graph: CompGraph, indeg_left: list[int]) -> list[int]:
    # Every node Kahn could not place has a predecessor it could not place either: walking
    # such predecessors must revisit a node, and the walk between the two visits is a cycle.
    left = [d > 0 for d in indeg_left]
    ptr, nbr = graph.pred_ptr.tolist(), graph.pred_idx.tolist()
    v = next(i for i, flag in enumerate(left) if flag)
    seen: dict[int, int] = {}
    walk: list[int] = []
    while v not in seen:
        seen[v] = len(walk)
        walk.append(v)
        v = next(nbr[k] for k in range(ptr[v], ptr[v + 1]) if left[nbr[k]])
    return list(reversed(walk[seen[v]:]))


# ---------------------------------------------------------------------- reachability


def ancestor_matrix(graph: CompGraph, reflexive: bool = False) -> np.ndarray:
    """``anc[v, u]``: u is an ancestor of v (or u == v with ``reflexive``); its transpose gives descendants.

    A dense boolean [n, n] matrix, built row by row in topological order: meant for graphs of a few
    thousand nodes at most (the callers cap their size).

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> ancestor_matrix(CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"])).astype(int).tolist()
    [[0, 0, 0], [1, 0, 0], [1, 1, 0]]
    """
    n = graph.n_nodes
    anc = np.zeros((n, n), dtype=bool)
    pred_ptr, pred_idx = graph.pred_ptr.tolist(), graph.pred_idx.tolist()
    for v in graph.topological_order().tolist():
        row = anc[v]
        for u in pred_idx[pred_ptr[v]:pred_ptr[v + 1]]:
            row |= anc[u]
            row[u] = True
    if reflexive:
        anc[np.arange(n), np.arange(n)] = True
    return anc


# ---------------------------------------------------------------------- levels (edge counts)


def asap_level(graph: CompGraph) -> np.ndarray:
    """Earliest level of each node: edges on the longest path from any source to it.

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> asap_level(CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"])).tolist()
    [0, 1, 2]
    """
    return _levels(graph, reverse=False)


def alap_level(graph: CompGraph) -> np.ndarray:
    """Latest level of each node that keeps the graph's depth: depth - 1 - edges to a sink.

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> alap_level(CompGraph(["a", "b", "c"], ["a"], ["b"])).tolist()  # c may wait a level
    [0, 1, 1]
    """
    if graph.n_nodes == 0:
        return np.zeros(0, dtype=np.int64)
    return depth(graph) - 1 - _levels(graph, reverse=True)


def depth(graph: CompGraph) -> int:
    """Number of ASAP levels (nodes on the longest path); 0 for an empty graph.

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> depth(CompGraph(["a", "b", "c"], ["a"], ["b"]))
    2
    """
    return int(graph.asap_level.max()) + 1 if graph.n_nodes else 0


def _levels(graph: CompGraph, reverse: bool) -> np.ndarray:
    order = graph.topological_order()
    if reverse:
        order, ptr, nbr = order[::-1], graph.succ_ptr, graph.succ_idx
    else:
        ptr, nbr = graph.pred_ptr, graph.pred_idx
    ptr_l, nbr_l = ptr.tolist(), nbr.tolist()
    level = [0] * graph.n_nodes
    for v in order.tolist():
        best = -1
        for k in range(ptr_l[v], ptr_l[v + 1]):
            lv = level[nbr_l[k]]
            if lv > best:
                best = lv
        level[v] = best + 1
    return np.asarray(level, dtype=np.int64)


# ---------------------------------------------------------------------- weighted paths


def top_level(graph: CompGraph, node_weight=None, edge_weight=None) -> np.ndarray:
    """Longest weighted path from any source to the start of each node (its own weight excluded).

    Parameters
    ----------
    graph : CompGraph
        The graph.
    node_weight, edge_weight : array-like of float, optional
        One finite, non-negative value per node / per edge (default zeros), e.g. compute and
        transfer times.

    Returns
    -------
    numpy.ndarray
        float64 [n].

    Raises
    ------
    GraphError
        A weight array of the wrong shape, or a negative, NaN or infinite weight (named).

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"])
    >>> top_level(g, [1.0, 2.0, 3.0], [0.5, 0.5]).tolist()
    [0.0, 1.5, 4.0]
    """
    return _path_lengths(graph, node_weight, edge_weight, reverse=False)[0]


def bottom_level(graph: CompGraph, node_weight=None, edge_weight=None) -> np.ndarray:
    """Longest weighted path from the start of each node to the end of any sink (own weight included).

    Parameters, returns and errors as in `top_level`.

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"])
    >>> bottom_level(g, [1.0, 2.0, 3.0], [0.5, 0.5]).tolist()
    [7.0, 5.5, 3.0]
    """
    return _path_lengths(graph, node_weight, edge_weight, reverse=True)[0]


def longest_path(graph: CompGraph, node_weight=None, edge_weight=None) -> tuple[float, list[str]]:
    """Length and node names of a longest path.

    With no weights the length counts edges. ``node_weight`` and ``edge_weight`` (as in
    `top_level`) are summed along a path and maximised, e.g. compute times and transfer times for
    a critical path.

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["a", "b", "c"], ["a", "a"], ["b", "c"])
    >>> longest_path(g), longest_path(g, node_weight=[1.0, 2.0, 5.0])
    ((1.0, ['a', 'b']), (6.0, ['a', 'c']))
    """
    if graph.n_nodes == 0:
        return 0.0, []
    if node_weight is None and edge_weight is None:
        edge_weight = np.ones(graph.n_edges)
    top, parent = _path_lengths(graph, node_weight, edge_weight, reverse=False)
    w = _node_weight(graph, node_weight)
    end = int(np.argmax(top + w))
    path = [end]
    while parent[path[-1]] >= 0:
        path.append(int(parent[path[-1]]))
    return float(top[end] + w[end]), [graph.names[i] for i in reversed(path)]


def _node_weight(graph: CompGraph, node_weight) -> np.ndarray:
    if node_weight is None:
        return np.zeros(graph.n_nodes)
    w = np.asarray(node_weight, dtype=np.float64)
    if w.shape != (graph.n_nodes,):
        raise GraphError(f"node_weight has shape {w.shape}, expected ({graph.n_nodes},)")
    _check_weights("node_weight", w)
    return w


def _check_weights(field: str, w: np.ndarray) -> None:
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if bad.size:
        raise GraphError(f"{field}[{int(bad[0])}] is {float(w[bad[0]])}; path weights must be finite and non-negative")


def _path_lengths(graph: CompGraph, node_weight, edge_weight, reverse: bool) -> tuple[np.ndarray, np.ndarray]:
    """Longest distances in topological order (reverse: from each node to a sink) and the
    neighbour each came through (-1 at sources, or sinks when reversed)."""
    w = _node_weight(graph, node_weight).tolist()
    if edge_weight is None:
        ew = [0.0] * graph.n_edges
    else:
        ew_arr = np.asarray(edge_weight, dtype=np.float64)
        if ew_arr.shape != (graph.n_edges,):
            raise GraphError(f"edge_weight has shape {ew_arr.shape}, expected ({graph.n_edges},)")
        _check_weights("edge_weight", ew_arr)
        ew = ew_arr.tolist()
    order = graph.topological_order()
    if reverse:
        order, ptr, nbr, eid = order[::-1], graph.succ_ptr, graph.succ_idx, graph.succ_edge
    else:
        ptr, nbr, eid = graph.pred_ptr, graph.pred_idx, graph.pred_edge
    ptr_l, nbr_l, eid_l = ptr.tolist(), nbr.tolist(), eid.tolist()
    dist = [0.0] * graph.n_nodes
    parent = [-1] * graph.n_nodes
    for v in order.tolist():
        best, arg = 0.0, -1
        for k in range(ptr_l[v], ptr_l[v + 1]):
            u = nbr_l[k]
            # forward: u is a predecessor, finished before v starts; reverse: u follows v.
            cand = dist[u] + ew[eid_l[k]] + (w[u] if not reverse else 0.0)
            if cand > best or arg < 0:
                best, arg = cand, u
        dist[v] = best + (w[v] if reverse else 0.0)
        parent[v] = arg
    return np.asarray(dist), np.asarray(parent, dtype=np.int64)


def find_root(parent: list[int], v: int) -> int:
    """The representative of ``v``'s set in a union-find forest, compressing the path to it.

    The one union-find of the package: node groups when coarsening, weakly connected parts of a
    segment, interchangeable devices. Join two sets with ``parent[find_root(parent, a)] =
    find_root(parent, b)``.

    >>> parent = [0, 0, 1, 3]
    >>> find_root(parent, 2), parent
    (0, [0, 0, 0, 3])
    """
    root = v
    while parent[root] != root:
        root = parent[root]
    while parent[v] != root:
        parent[v], v = root, parent[v]
    return root
