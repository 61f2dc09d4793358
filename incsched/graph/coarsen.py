"""Coarsening: graph-to-graph transformations that merge nodes of a `CompGraph` into fewer, larger ones.

Sits between capture and the problems: a captured graph has one node per traced operation, most of
them free (views, reshapes, getitems); schedulers want one node per meaningful operation or block.
Every strategy here builds a grouping of nodes and hands it to `quotient`, which works on any graph.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from .dag import find_root
from ..errors import GraphError
from .compgraph import CompGraph, SharedWeight

__all__ = [
    "TRIVIAL_OPS",
    "quotient",
    "fuse_trivial",
    "fuse_chains",
    "group_by_module",
    "coarsen",
    "parse_coarsening",
]

#: Op kinds that move no data of their own and cost (next to) nothing: views and shape changes,
#: tuple access, inference-time dropout, dtype/device casts, cheap index/constant factories and
#: the guard checks torch.export inserts. `fuse_trivial` folds them into a neighbour.
TRIVIAL_OPS: frozenset[str] = frozenset(
    {
        "view", "reshape", "flatten", "unflatten", "permute", "transpose", "t", "expand", "expand_as",
        "squeeze", "unsqueeze", "contiguous", "alias", "detach", "clone", "slice", "select", "narrow",
        "split", "split_with_sizes", "chunk", "unbind", "getitem", "size", "sym_size", "dim", "numel",
        "dropout", "feature_dropout", "alpha_dropout", "identity", "to", "to_copy", "type_as", "type",
        "float", "half", "arange", "zeros", "ones", "full", "empty", "zeros_like", "ones_like",
        "full_like", "guard", "assert_tensor_metadata", "lift_fresh_copy", "view_as", "getattr",
    }
)


def quotient(
    graph: CompGraph,
    group_of: Sequence[Hashable] | np.ndarray | Mapping[str, Hashable],
    *,
    label: str | None = None,
) -> CompGraph:
    """Merge groups of nodes into single nodes.

    A merged node sums its members' ``flops``, ``param_bytes`` and every ``compute_time`` and ``backward_time`` column
    (a shared weight whose readers all merge into one node joins that node's ``param_bytes``);
    its ``members`` are the members' own ``members`` (or names) concatenated in topological order.
    It is named after, and takes the op kind of, its representative member: the one with the most
    flops (ties: the first in topological order whose op is not trivial, else the first).

    Bytes follow the rule that a tensor moves once per destination: an edge between two groups
    carries, summed over the distinct producer nodes in the source group, the largest ``edge_bytes``
    that producer sends into the destination group. A merged node's ``out_bytes`` counts the outputs
    of members that are read outside the group or are graph outputs (sinks, and the names listed in
    ``meta["outputs"]`` if present).

    Parameters
    ----------
    graph : CompGraph
        Any computation graph.
    group_of : sequence of hashable, or mapping of node name to hashable
        A group label per node (by index, or by name). Nodes with equal labels are merged.
    label : str, optional
        Recorded in ``meta["coarsening"]`` (a list, one entry per coarsening applied).

    Returns
    -------
    CompGraph
        The quotient graph; node order follows the first member of each group in topological order.

    Raises
    ------
    GraphError
        If ``group_of`` does not give exactly one label per node, or if the merged graph would
        have a directed cycle (a `CycleError`, naming the merged nodes on the cycle).

    Examples
    --------
    >>> g = CompGraph(["x", "conv", "relu"], ["x", "conv"], ["conv", "relu"], flops=[0, 8, 1], out_bytes=[4, 4, 4])
    >>> q = quotient(g, [0, 1, 1])
    >>> q.names, q.flops.tolist(), q.members
    (('x', 'conv'), [0.0, 9.0], (('x',), ('conv', 'relu')))
    """
    n = graph.n_nodes
    labels = _labels_per_node(graph, group_of)
    topo = graph.topological_order().tolist()
    group_ids: dict[Hashable, int] = {}
    group = np.empty(n, dtype=np.int64)
    for v in topo:
        group[v] = group_ids.setdefault(labels[v], len(group_ids))
    n_groups = len(group_ids)
    members_of: list[list[int]] = [[] for _ in range(n_groups)]
    for v in topo:
        members_of[group[v]].append(v)

    rep = [_representative(graph, mem) for mem in members_of]
    names = [graph.names[r] for r in rep]

    src, dst = graph.src, graph.dst
    gs, gd = group[src], group[dst]
    outside = gs != gd
    # Bytes per (producer node, destination group): the largest edge, since one transfer serves
    # every consumer of that producer inside the destination group.
    moved: dict[tuple[int, int], int] = {}
    for u, h, b in zip(src[outside].tolist(), gd[outside].tolist(), graph.edge_bytes[outside].tolist()):
        key = (u, h)
        if b > moved.get(key, -1):
            moved[key] = b
    edge_bytes: dict[tuple[int, int], int] = {}
    for (u, h), b in moved.items():
        key = (int(group[u]), h)
        edge_bytes[key] = edge_bytes.get(key, 0) + b
    keys = sorted(edge_bytes, key=lambda k: (k[0], k[1]))

    exported = np.zeros(n, dtype=bool)
    exported[src[outside]] = True
    exported[graph.out_degree == 0] = True
    known = set(graph.names)
    for nm in graph.meta.get("outputs") or []:
        if nm in known:
            exported[graph.index(nm)] = True

    def summed(values: np.ndarray) -> np.ndarray:
        acc = np.zeros(n_groups, dtype=values.dtype)
        np.add.at(acc, group, values)
        return acc

    def largest(values: np.ndarray) -> np.ndarray:
        acc = np.zeros(n_groups, dtype=values.dtype)
        np.maximum.at(acc, group, values)
        return acc

    out_bytes = summed(np.where(exported, graph.out_bytes, 0).astype(np.int64))

    if graph.members is not None:
        members = [[m for v in mem for m in graph.members[v]] for mem in members_of]
    else:
        members = [[graph.names[v] for v in mem] for mem in members_of]

    meta: dict[str, Any] = dict(graph.meta)
    if meta.get("outputs") is not None:
        meta["outputs"] = sorted({names[group[graph.index(nm)]] for nm in meta["outputs"] if nm in known})
    if label is not None:
        previous = meta.get("coarsening") or []
        meta["coarsening"] = [*([previous] if isinstance(previous, str) else previous), label]

    # A shared weight whose readers all fall into one group is that group's own weight now.
    param_bytes = summed(graph.param_bytes)
    shared = []
    for w in graph.shared_weights:
        readers = sorted(set(group[list(w.readers)].tolist()))
        if len(readers) == 1:
            param_bytes[readers[0]] += w.nbytes
        else:
            shared.append(SharedWeight(w.name, w.nbytes, tuple(readers)))

    return CompGraph(
        names,
        np.asarray([k[0] for k in keys], dtype=np.int64),
        np.asarray([k[1] for k in keys], dtype=np.int64),
        op=[graph.op[r] for r in rep],
        flops=summed(graph.flops),
        param_bytes=param_bytes,
        out_bytes=out_bytes,
        edge_bytes=np.asarray([edge_bytes[k] for k in keys], dtype=np.int64),
        compute_time={kind: summed(t) for kind, t in graph.compute_time.items()},
        backward_time={kind: summed(t) for kind, t in graph.backward_time.items()},
        saved_bytes=None if graph.saved_bytes is None else summed(graph.saved_bytes),
        # A merged node's members run one after another, and each one's working set was measured
        # with every other pending value live, so the group needs the largest, not the sum (met by
        # the whole group's stash: an upper bound when an earlier member works most, see
        # incsched.problems.training); and its largest weight tensor is its members' largest.
        work_bytes=None if graph.work_bytes is None else largest(graph.work_bytes),
        largest_weight_bytes=None if graph.largest_weight_bytes is None else largest(graph.largest_weight_bytes),
        members=members,
        shared_weights=shared,
        name=graph.name,
        meta=meta,
    )


def fuse_trivial(graph: CompGraph, trivial_ops: frozenset[str] | set[str] = TRIVIAL_OPS) -> CompGraph:
    """Fold zero-cost ops (views, getitems, casts, eval-mode dropout ...) into a neighbour.

    A trivial node with a single predecessor joins its predecessor's group (in topological order).
    Then, until nothing changes, every group made only of trivial ops whose inputs all come from
    one other group joins that group, and every such group whose outputs all go to one other group
    joins that one. These merges are always safe, even all at once: when a group's only way in (or
    out) is the group it joins, no path can leave the merged group and come back into it, so the
    quotient stays acyclic. Trivial ops with inputs from several groups and consumers in several
    groups (a slice of a buffer read by two layers, say) stay as they are.

    Parameters
    ----------
    graph : CompGraph
        Any computation graph.
    trivial_ops : set of str
        Op kinds to fold; default `TRIVIAL_OPS`.

    Returns
    -------
    CompGraph
        A graph with at most as many nodes, the same total flops, parameter bytes and times.
    """
    n = graph.n_nodes
    trivial = [op in trivial_ops for op in graph.op]
    parent = list(range(n))
    indeg = graph.in_degree
    for v in graph.topological_order().tolist():
        if trivial[v] and indeg[v] == 1:
            parent[v] = find_root(parent, int(graph.predecessors(v)[0]))
    src, dst = graph.src.tolist(), graph.dst.tolist()
    changed = True
    while changed:
        changed = False
        for ends_from, ends_to in ((dst, src), (src, dst)):  # first by inputs, then by outputs
            root = [find_root(parent, v) for v in range(n)]
            only_trivial = dict.fromkeys(root, True)
            for v in range(n):
                only_trivial[root[v]] = only_trivial[root[v]] and trivial[v]
            neighbours: dict[int, set[int]] = {}
            for a, b in zip(ends_from, ends_to):
                if root[a] != root[b]:
                    neighbours.setdefault(root[a], set()).add(root[b])
            for r, nbrs in neighbours.items():
                if only_trivial[r] and len(nbrs) == 1:
                    parent[r] = next(iter(nbrs))
                    changed = True
    return quotient(graph, [find_root(parent, v) for v in range(n)], label="trivial")


def fuse_chains(graph: CompGraph) -> CompGraph:
    """Merge every single-output -> single-input edge, so chains become single nodes.

    An edge u -> v with out-degree(u) = 1 and in-degree(v) = 1 is the only path from u to v, so
    contracting it cannot close a cycle; and the contracted node keeps those degrees, so all such
    edges can be contracted together.

    Parameters
    ----------
    graph : CompGraph
        Any computation graph.

    Returns
    -------
    CompGraph
        A graph in which no edge joins a single-output node to a single-input node.
    """
    n = graph.n_nodes
    parent = list(range(n))
    chain = (graph.out_degree[graph.src] == 1) & (graph.in_degree[graph.dst] == 1)
    for u, v in zip(graph.src[chain].tolist(), graph.dst[chain].tolist()):
        ru, rv = find_root(parent, u), find_root(parent, v)
        if ru != rv:
            parent[rv] = ru
    return quotient(graph, [find_root(parent, v) for v in range(n)], label="chains")


def group_by_module(
    graph: CompGraph,
    scopes: Sequence[str] | Mapping[str, str],
    depth: int,
    *,
    order: Sequence[int] | np.ndarray | None = None,
) -> CompGraph:
    """Merge contiguous runs of a topological order whose module paths share a prefix.

    ``scopes`` gives each node's module path (``"layer1.0.conv1"``); its first ``depth`` dotted
    components are the group key. Only contiguous runs of one topological order are merged, which
    always yields an acyclic quotient (every edge between runs goes forward in the order), even
    where a module's operations interleave with others'.

    Parameters
    ----------
    graph : CompGraph
        Any computation graph.
    scopes : sequence of str (per node) or mapping of node name to str
        Module path per node; ``""`` for the top level (graph inputs, free functions).
    depth : int
        Number of leading path components that must agree (>= 1).
    order : sequence of int, optional
        The topological order to cut into runs. Default: node index order when it is topological
        (capture emits program order, which keeps a module's operations together), else
        `CompGraph.topological_order`.

    Returns
    -------
    CompGraph
        The merged graph.

    Raises
    ------
    GraphError
        If ``depth`` < 1, ``scopes`` does not cover every node, or ``order`` is not topological.
    """
    if depth < 1:
        raise GraphError(f"group_by_module needs depth >= 1, got {depth}")
    n = graph.n_nodes
    if isinstance(scopes, Mapping):
        missing = [nm for nm in graph.names if nm not in scopes]
        if missing:
            raise GraphError(f"no module path given for node {missing[0]!r}")
        per_node = [str(scopes[nm]) for nm in graph.names]
    else:
        per_node = [str(s) for s in scopes]
        if len(per_node) != n:
            raise GraphError(f"scopes has {len(per_node)} entries for {n} nodes")
    if order is None:
        order_arr = np.arange(n) if bool(np.all(graph.src < graph.dst)) else graph.topological_order()
    else:
        order_arr = np.asarray(order, dtype=np.int64)
        pos = np.full(n, -1, dtype=np.int64)
        if order_arr.shape != (n,) or np.any((order_arr < 0) | (order_arr >= n)):
            raise GraphError(f"order must be a permutation of the {n} node indices")
        pos[order_arr] = np.arange(n)
        if np.any(pos < 0) or np.any(pos[graph.src] >= pos[graph.dst]):
            raise GraphError("order is not a topological order of the graph")
    run = np.empty(n, dtype=np.int64)
    prev_key, k = None, -1
    for v in order_arr.tolist():
        key = tuple(per_node[v].split(".")[:depth]) if per_node[v] else ()
        if key != prev_key or not key:
            k += 1  # top-level nodes (empty path) never merge: they are inputs or glue between blocks
            prev_key = key
        run[v] = k
    return quotient(graph, run, label=f"module:{depth}")


def parse_coarsening(how: str) -> tuple[str, int | None]:
    """Split a coarsening name into its strategy and module depth: ``"module:2"`` -> ``("module", 2)``.

    Raises
    ------
    GraphError
        For an unknown name or a depth that is not a positive integer.
    """
    if how in ("none", "trivial", "chains"):
        return how, None
    if isinstance(how, str) and how.startswith("module:"):
        try:
            depth = int(how.split(":", 1)[1])
        except ValueError:
            depth = 0
        if depth < 1:
            raise GraphError(f"coarsening {how!r}: the depth after 'module:' must be a positive integer")
        return "module", depth
    raise GraphError(f"unknown coarsening {how!r} (expected 'none', 'trivial', 'chains' or 'module:<depth>')")


def coarsen(graph: CompGraph, how: str, *, scopes: Sequence[str] | Mapping[str, str] | None = None) -> CompGraph:
    """Apply a coarsening named by a string: ``"none"``, ``"trivial"``, ``"chains"`` or ``"module:<depth>"``.

    ``"chains"`` fuses trivial ops first, then chains; ``"module:<depth>"`` needs ``scopes`` (see
    `group_by_module`).

    Raises
    ------
    GraphError
        For an unknown name, a bad depth, or ``"module:<depth>"`` without scopes.
    """
    kind, depth = parse_coarsening(how)
    if kind == "none":
        return graph
    if kind == "trivial":
        return fuse_trivial(graph)
    if kind == "chains":
        return fuse_chains(fuse_trivial(graph))
    if scopes is None:
        raise GraphError(f"coarsening {how!r} needs the module path of every node")
    return group_by_module(graph, scopes, depth)


# ---------------------------------------------------------------------- internals


def _labels_per_node(graph: CompGraph, group_of) -> list[Hashable]:
    if isinstance(group_of, Mapping):
        missing = [nm for nm in graph.names if nm not in group_of]
        if missing:
            raise GraphError(f"no group given for node {missing[0]!r}")
        labels = [group_of[nm] for nm in graph.names]
    else:
        labels = group_of.tolist() if isinstance(group_of, np.ndarray) else list(group_of)
        if len(labels) != graph.n_nodes:
            raise GraphError(f"group_of has {len(labels)} entries for {graph.n_nodes} nodes")
    for i, lab in enumerate(labels):
        try:
            hash(lab)
        except TypeError:
            raise GraphError(f"group label of node {graph.names[i]!r} is not hashable: {lab!r}") from None
    return labels


def _representative(graph: CompGraph, members: list[int]) -> int:
    """The member that names a merged node: most flops, then first non-trivial op, then first."""
    if len(members) == 1:
        return members[0]
    flops = graph.flops[members]
    best = float(flops.max())
    if best > 0:
        return members[int(np.argmax(flops))]
    for v in members:
        if graph.op[v] not in TRIVIAL_OPS:
            return v
    return members[0]
