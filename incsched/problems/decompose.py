"""Decomposition of a placement problem at its cut nodes: segments solved one by one and glued back.

A cut node (a transformer's norm, sum or residual add) is preceded or followed by every other node,
so nothing runs beside it and the problem falls apart into segments between consecutive cut nodes.
`segments` finds them, `subproblem` makes each a problem of its own, `compose` glues their
placements; inc-ilp solves and bounds segment by segment, and the bounds add up (`placement_bounds`).
"""

from __future__ import annotations

import bisect

import numpy as np

from ..graph import CompGraph, SharedWeight
from . import Placement, PlacementProblem  # the package: the problem types keep their names there

__all__ = ["cut_nodes", "segments", "subproblem", "gluable", "decomposable", "compose"]


def cut_nodes(problem: PlacementProblem) -> list[int]:
    """Nodes that every other node precedes or follows (norms, sums, residual adds), in topological order.

    Nothing can run beside such a node: all its ancestors end before it starts and all its
    descendants start after it ends, so the schedule falls apart into independent segments.
    """
    g = problem.graph
    n = g.n_nodes
    topo = g.topological_order().tolist()
    anc, desc = [0] * n, [0] * n
    for v in topo:
        for u in g.predecessors(v).tolist():
            anc[v] |= anc[u] | (1 << u)
    for v in reversed(topo):
        for w in g.successors(v).tolist():
            desc[v] |= desc[w] | (1 << w)
    return [v for v in topo if anc[v].bit_count() + desc[v].bit_count() + 1 == n]


def segments(problem: PlacementProblem) -> list[list[int]]:
    """The node sets between consecutive cut nodes, each with its bounding cut nodes, in time order.

    The first set ends at the first cut node (with all its ancestors), the last starts at the
    last cut node; consecutive sets share their cut node. One set (every node) without cut nodes.
    """
    g = problem.graph
    cuts = cut_nodes(problem)
    if not cuts:
        return [list(range(g.n_nodes))]
    pos = np.empty(g.n_nodes, dtype=np.int64)
    pos[g.topological_order()] = np.arange(g.n_nodes)
    # Every node lies strictly between two consecutive cut nodes in any topological order.
    cut_pos = [int(pos[c]) for c in cuts]
    out: list[list[int]] = [[] for _ in range(len(cuts) + 1)]
    for v in range(g.n_nodes):
        i = bisect.bisect_left(cut_pos, int(pos[v]))
        out[i].append(v)
    parts = []
    for i, nodes in enumerate(out):
        nodes = list(nodes)
        if i > 0:
            nodes.append(cuts[i - 1])
        if nodes and not (i == len(cuts) and nodes == [cuts[-1]]):
            parts.append(sorted(set(nodes), key=lambda v: pos[v]))
    return parts


def subproblem(problem: PlacementProblem, nodes, *, instant: tuple[int, ...] = ()) -> PlacementProblem:
    """The placement problem on ``nodes`` alone (same devices, links and ticks; edges leaving it dropped).

    Shared weights keep their readers among ``nodes``, so each node needs on its device what it
    needed in the whole problem.

    ``instant`` nodes get zero compute time (one tick): a segment's entry cut node, when only what
    follows its end is to be bounded. Shared weights are not carried over: a weight whose readers
    fall into two segments would be charged by each alone. That is exact only because nothing
    reads a segment's memory (`decomposable` needs devices without memory limits, and the
    placement bounds count no memory); a memory-aware use would have to keep the readers together.
    """
    g = problem.graph
    nodes = [int(v) for v in nodes]
    idx = {v: i for i, v in enumerate(nodes)}
    ks = [k for k in range(g.n_edges) if int(g.src[k]) in idx and int(g.dst[k]) in idx]
    kinds = sorted({d.kind for d in problem.devices})
    times = {}
    for kind in kinds:
        t = np.asarray(g.time(kind), dtype=np.float64)[nodes].copy()
        t[[idx[v] for v in instant]] = 0.0
        times[kind] = t
    # A shared weight keeps the readers inside; read by one of them only, it is that node's own.
    param_bytes = g.param_bytes[nodes].copy()
    shared = []
    for w in g.shared_weights:
        readers = [idx[v] for v in w.readers if v in idx]
        if len(readers) == 1:
            param_bytes[readers[0]] += w.nbytes
        elif readers:
            shared.append(SharedWeight(w.name, w.nbytes, tuple(sorted(readers))))
    sg = CompGraph(
        [g.names[v] for v in nodes],
        [idx[int(g.src[k])] for k in ks],
        [idx[int(g.dst[k])] for k in ks],
        param_bytes=param_bytes,
        shared_weights=shared,
        out_bytes=g.out_bytes[nodes],
        edge_bytes=g.edge_bytes[ks],
        compute_time=times,
        name=f"{g.name}[{g.names[nodes[0]]}..{g.names[nodes[-1]]}]",
    )
    return PlacementProblem(sg, problem.devices, problem.links, time_unit=problem.time_unit, name=sg.name)


def gluable(problem: PlacementProblem) -> bool:
    """Whether segment schedules can be glued at all: no memory limits and a cut node (any devices;
    on devices that are not interchangeable, each segment keeps its cut nodes where they are)."""
    return problem.n_devices > 1 and all(d.memory is None for d in problem.devices) and len(segments(problem)) > 1


def decomposable(problem: PlacementProblem) -> bool:
    """Whether segments can be solved and bounded on their own: `gluable` on interchangeable devices."""
    return len(problem.identical_devices) == 1 and gluable(problem)


def compose(problem: PlacementProblem, parts) -> Placement:
    """Glue per-segment placements in time order, relabelling devices so shared cut nodes agree.

    Parameters
    ----------
    problem : PlacementProblem
        Whose devices are all interchangeable (see `decomposable`), or segments whose placements
        agree on every cut node they share (then nothing is relabelled).
    parts : sequence of (nodes, Placement)
        Each segment's node list (as from `segments`) and a placement of its `subproblem`.

    Returns
    -------
    Placement
        Device orders: segment after segment. Edges that skip a cut node (a residual input) may
        add a transfer the segments did not see; the simulator prices it.
    """
    D = problem.n_devices
    device = np.full(problem.n_nodes, -1, dtype=np.int64)
    order: list[list[int]] = [[] for _ in range(D)]
    for nodes, pl in parts:
        local = np.asarray(pl.device)
        mapping = np.arange(D)
        entry = nodes[0]
        if device[entry] >= 0:  # the cut node the previous segment placed: keep it where it is
            a, b = int(local[0]), int(device[entry])
            mapping[a], mapping[b] = b, a
        for d, seq in enumerate(pl.order):
            for i in seq:
                v = nodes[i]
                if device[v] < 0:
                    device[v] = mapping[d]
                    order[int(mapping[d])].append(v)
    return Placement(device, tuple(tuple(o) for o in order), method="segments")
