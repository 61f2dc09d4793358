"""Heads and tails with transfers: the shared ingredients of every placement bound family.

`transfer_heads` / `transfer_tails` charge the transfers no schedule avoids, `anchored_heads` /
`anchored_tails` those after (before) a node placed on another device, `path_bound` combines them.
Every family of `incsched.bounds.placement` and `incsched.bounds.placement_flow` starts from
these. Valid for every problem: each node's fastest duration and each edge's cheapest transfer
between two distinct devices (relaxing a problem only lowers its optimum).
"""

from __future__ import annotations

import numpy as np

from ..problems.placement import PlacementProblem

__all__ = [
    "INF",
    "release_thresholds",
    "transfer_heads",
    "transfer_tails",
    "path_bound",
    "anchored_heads",
    "anchored_tails",
]

#: Stands for "never" (a node that cannot sit where asked). Far above any makespan in ticks, far
#: below int64's limit even after summing a few thousand of them.
INF = 1 << 40

#: A predecessor list longer than this is scanned in blocks (see `_colocation_rule`).
_BLOCK_FROM = 64



# ---------------------------------------------------------------------- shared ingredients


def _costs(problem: PlacementProblem) -> tuple[list[int], list[int]]:
    """Fastest duration per node and cheapest transfer per edge between two distinct devices (ticks).

    With one device no edge can cross: every transfer is `INF` (no node can be remote).
    """
    dmin = problem.durations().min(axis=1).astype(np.int64).tolist() if problem.n_nodes else []
    m, D = problem.graph.n_edges, problem.n_devices
    if D == 1:
        return dmin, [INF] * m
    if m == 0:
        return dmin, []
    off = ~np.eye(D, dtype=bool)
    cross = problem.transfer_ticks()[:, off].min(axis=1).astype(np.int64).tolist()
    return dmin, cross


def _single_machine(jobs: list[tuple[int, int]]) -> int:
    """Least completion time of ``jobs`` (release, duration) on one machine: release order is optimal."""
    t = 0
    for r, d in sorted(jobs):
        t = max(t, r) + d
    return t


def _colocation_rule(items: list[tuple[int, int, int]]) -> int:
    """Earliest start of a node given its inputs, over every choice of which inputs share its device.

    ``items``: for each input (predecessor), ``(arrive, release, dur)``: when its output reaches the
    node from another device, its own release when it shares the node's device, its duration.
    For a set S sharing the device, those inputs run one at a time on it before the node (their
    single-machine completion time) and the others arrive over links, so the node starts no
    earlier than ``max(max_{u not in S} arrive_u, single_machine(S))``; the minimum over all S is
    a valid bound. Only prefixes of the inputs sorted by ``arrive`` (descending) need be tried:
    for any S, the prefix of inputs arriving strictly later than the latest one outside S is a
    subset of S (so finishes no later on one machine) with the same latest remote arrival.
    """
    if not items:
        return 0
    items = sorted(items, key=lambda it: -it[0])
    k = len(items)
    best = items[0][0]  # S empty
    if k <= _BLOCK_FROM:
        for i in range(1, k + 1):
            rest = items[i][0] if i < k else 0
            if rest >= best:
                continue
            best = min(best, max(rest, _single_machine([(r, d) for _, r, d in items[:i]])))
        return best
    # Many inputs: evaluate prefixes in blocks. For a prefix i inside (j, j2], the value is at least
    # max(arrive of item j2 (or 0), single_machine(first j)): later prefixes only shrink the remote
    # arrival, earlier ones only shrink the serial part. Taking that per block keeps the minimum valid.
    step = max(1, k // _BLOCK_FROM)
    j = 0
    while j < k:
        j2 = min(k, j + step)
        serial = _single_machine([(r, d) for _, r, d in items[:j + 1]]) if j + 1 <= k else 0
        rest = items[j2][0] if j2 < k else 0
        best = min(best, max(rest, serial))
        j = j2
    return best


# ---------------------------------------------------------------------- heads and tails with transfers


def transfer_heads(problem: PlacementProblem) -> list[int]:
    """Earliest start of every node in ticks, charging the transfers its inputs cannot avoid.

    Parameters
    ----------
    problem : PlacementProblem
        Any devices and links (fastest durations, cheapest transfers).

    Returns
    -------
    list of int
        ``head[v]``: no schedule starts v earlier.

    Notes
    -----
    Why it holds: in any schedule, let S be v's predecessors on v's device. They run one at a
    time there, none before its own head, and v starts after the last ends; every other
    predecessor u ends no earlier than ``head[u] + d_u`` and its output needs at least the
    cheapest transfer of the edge. `_colocation_rule` takes the least of these over all S, so by
    induction in topological order every head is at most the real start.
    """
    g = problem.graph
    dmin, cross = _costs(problem)
    head = [0] * g.n_nodes
    ptr, nbr, eid = g.pred_ptr.tolist(), g.pred_idx.tolist(), g.pred_edge.tolist()
    for v in g.topological_order().tolist():
        items = _inputs(ptr, nbr, eid, v, head, head, dmin, cross)
        head[v] = _colocation_rule(items)
    return head


def transfer_tails(problem: PlacementProblem) -> list[int]:
    """Least time from every node's end to the makespan in ticks (mirror of `transfer_heads`).

    Returns
    -------
    list of int
        ``tail[v]``: in every schedule the makespan is at least v's end plus ``tail[v]``.

    Notes
    -----
    Reversing time maps a schedule to a schedule of the reversed graph with the same makespan
    (a transfer u -> w becomes one w -> u of the same length), so heads of the reversed graph are
    tails of this one.
    """
    g = problem.graph
    dmin, cross = _costs(problem)
    tail = [0] * g.n_nodes
    ptr, nbr, eid = g.succ_ptr.tolist(), g.succ_idx.tolist(), g.succ_edge.tolist()
    for v in reversed(g.topological_order().tolist()):
        tail[v] = _colocation_rule(_inputs(ptr, nbr, eid, v, tail, tail, dmin, cross))
    return tail


def _inputs(ptr, nbr, eid, v, base, local, dmin, cross) -> list[tuple[int, int, int]]:
    """Per distinct neighbour u of v: (arrive when remote, release when local, duration)."""
    per: dict[int, list[int]] = {}
    for k in range(ptr[v], ptr[v + 1]):
        u = nbr[k]
        arrive = base[u] + dmin[u] + cross[eid[k]]
        if u in per:
            per[u][0] = max(per[u][0], arrive)  # parallel edges: the slowest transfer counts
        else:
            per[u] = [arrive, local[u], dmin[u]]
    return [tuple(x) for x in per.values()]


def path_bound(problem: PlacementProblem, head: list[int] | None = None, tail: list[int] | None = None) -> int:
    """max over nodes of ``head + fastest duration + tail``: every node runs inside the makespan."""
    if not problem.n_nodes:
        return 0
    head = transfer_heads(problem) if head is None else head
    tail = transfer_tails(problem) if tail is None else tail
    dmin, _ = _costs(problem)
    return max(h + d + q for h, d, q in zip(head, dmin, tail))


def anchored_heads(problem: PlacementProblem, anchor: int | tuple[int, ...], head: list[int] | None = None) -> list[int]:
    """Earliest start of every node placed on a device that holds no ``anchor`` (ticks; `INF` for the anchors).

    ``anchor``: one node, or a tuple of nodes (e.g. every source: a device holding none of them).

    Notes
    -----
    Same rule as `transfer_heads`, with one more fact: a node off every anchor's device shares its
    device only with predecessors that are off every anchor's device too, so a co-located
    predecessor contributes its own anchored head, and an anchor itself can only be remote.
    A node that does not descend from an anchor gets its plain head back.
    """
    g = problem.graph
    dmin, cross = _costs(problem)
    head = transfer_heads(problem) if head is None else head
    ptr, nbr, eid = g.pred_ptr.tolist(), g.pred_idx.tolist(), g.pred_edge.tolist()
    off = list(head)
    anchors = _as_set(anchor)
    for x in anchors:
        off[x] = INF
    for v in g.topological_order().tolist():
        if v in anchors:
            continue
        items = _inputs(ptr, nbr, eid, v, head, off, dmin, cross)
        off[v] = max(head[v], _colocation_rule(items))
    return off


def anchored_tails(problem: PlacementProblem, anchor: int | tuple[int, ...], tail: list[int] | None = None) -> list[int]:
    """Least tail of every node placed on a device that holds no ``anchor`` (mirror of `anchored_heads`)."""
    g = problem.graph
    dmin, cross = _costs(problem)
    tail = transfer_tails(problem) if tail is None else tail
    ptr, nbr, eid = g.succ_ptr.tolist(), g.succ_idx.tolist(), g.succ_edge.tolist()
    off = list(tail)
    anchors = _as_set(anchor)
    for x in anchors:
        off[x] = INF
    for v in reversed(g.topological_order().tolist()):
        if v in anchors:
            continue
        off[v] = max(tail[v], _colocation_rule(_inputs(ptr, nbr, eid, v, tail, off, dmin, cross)))
    return off


def _as_set(anchor: int | tuple[int, ...]) -> set[int]:
    return {int(anchor)} if isinstance(anchor, (int, np.integer)) else {int(x) for x in anchor}



# ---------------------------------------------------------------------- anchors


def _anchors(problem: PlacementProblem) -> tuple[list[int | None], list[int | None]]:
    """Entry and exit anchors worth trying: none, and the single source / single sink when there is one."""
    g = problem.graph
    sources = np.flatnonzero(g.in_degree == 0)
    sinks = np.flatnonzero(g.out_degree == 0)
    entries: list[int | None] = [None]
    exits: list[int | None] = [None]
    if len(sources) == 1:
        entries.append(int(sources[0]))
    if len(sinks) == 1:
        exits.append(int(sinks[0]))
    return entries, exits


def _anchor_sets(problem: PlacementProblem) -> tuple[list[tuple[int, ...] | None], list[tuple[int, ...] | None]]:
    """Entry and exit anchor *sets* for `energy_bound`: every source (sink) as one set, when there
    are 2 to D - 1 of them, so that some device holds none (one source is `_anchors`' single anchor)."""
    g, D = problem.graph, problem.n_devices
    sources = tuple(int(v) for v in np.flatnonzero(g.in_degree == 0))
    sinks = tuple(int(v) for v in np.flatnonzero(g.out_degree == 0))
    entries: list[tuple[int, ...] | None] = [None] + ([sources] if 1 < len(sources) < D else [])
    exits: list[tuple[int, ...] | None] = [None] + ([sinks] if 1 < len(sinks) < D else [])
    return entries, exits


def release_thresholds(release: np.ndarray, max_thresholds: int | None = None) -> np.ndarray:
    """The distinct finite releases an energy bound tries as set thresholds (ascending); at most
    ``max_thresholds`` of them, spread evenly, when given: fewer sets only lower the bound."""
    thresholds = np.unique(release[release < INF])
    if max_thresholds is not None and len(thresholds) > max_thresholds:
        thresholds = np.unique(thresholds[np.linspace(0, len(thresholds) - 1, max_thresholds).round().astype(int)])
    return thresholds
