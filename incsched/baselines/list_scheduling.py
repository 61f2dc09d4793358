"""List scheduling for the placement problem: the greedy pass every placement heuristic builds on.

`list_schedule` takes ready nodes by a priority and puts each where it finishes earliest;
`critical_path_list` (DOPPLER's imitation teacher) and `heft` (Topcuoglu et al.'s insertion-based
HEFT) are its two priorities. Upstream of `placement_local` (which starts from their better answer)
and of `placement`, which registers every placement pre-scheduler.
"""

from __future__ import annotations

import bisect
import heapq

import numpy as np

from ..problems import DeviceMemory, Placement, PlacementInfeasibleError, PlacementProblem

__all__ = ["mean_costs", "upward_rank", "list_schedule", "critical_path_list", "heft"]


def mean_costs(problem: PlacementProblem) -> tuple[np.ndarray, np.ndarray]:
    """Mean duration of each node over devices and mean transfer of each edge over distinct device pairs.

    Returns
    -------
    node_cost : float array [n]
    edge_cost : float array [m]
        Zero with a single device (no transfer can happen).
    """
    node_cost = problem.durations().mean(axis=1).astype(np.float64)
    D = problem.n_devices
    if D == 1 or problem.graph.n_edges == 0:
        return node_cost, np.zeros(problem.graph.n_edges)
    off = ~np.eye(D, dtype=bool)
    edge_cost = problem.transfer_ticks()[:, off].mean(axis=1).astype(np.float64)
    return node_cost, edge_cost


def list_schedule(
    problem: PlacementProblem,
    priority: np.ndarray,
    *,
    insertion: bool,
    allowed: np.ndarray | None = None,
    method: str = "list",
) -> Placement:
    """Greedy list scheduling: repeatedly take the ready node of highest priority, place it at its earliest finish.

    Parameters
    ----------
    problem : PlacementProblem
    priority : float array [n]
        Higher goes first among ready nodes (a node is ready once all its predecessors are placed);
        ties go to the lower index.
    insertion : bool
        Whether a node may fill an idle gap between nodes already on a device (HEFT) or only
        follow the device's last node (classic list scheduling).
    allowed : bool array [n, D], optional
        Devices each node may use (a relaxation window); memory capacities are honoured on top.
    method : str
        Label stored in the placement.

    Returns
    -------
    Placement
        With the planned start ticks; executing it with ``simulate(..., "ordered")`` never ends later.

    Raises
    ------
    PlacementInfeasibleError
        When a node fits on no allowed device with the memory left by earlier choices.
    """
    g = problem.graph
    n, D = problem.n_nodes, problem.n_devices
    dur = problem.durations()
    ticks = problem.transfer_ticks()
    ok = problem.allowed_devices() if allowed is None else (np.asarray(allowed, dtype=bool) & problem.allowed_devices())
    memory = DeviceMemory(problem)
    pred_ptr, pred_idx, pred_edge = g.pred_ptr.tolist(), g.pred_idx.tolist(), g.pred_edge.tolist()
    succ_ptr, succ_idx = g.succ_ptr.tolist(), g.succ_idx.tolist()
    prio = np.asarray(priority, dtype=np.float64).tolist()

    device = np.full(n, -1, dtype=np.int64)
    start = np.zeros(n, dtype=np.int64)
    end = np.zeros(n, dtype=np.int64)
    # Per device: busy intervals sorted by start (for insertion) and the tick it is free at the end.
    starts: list[list[int]] = [[] for _ in range(D)]
    ends: list[list[int]] = [[] for _ in range(D)]
    tail = [0] * D
    waiting = g.in_degree.tolist()
    heap = [(-prio[v], v) for v in range(n) if waiting[v] == 0]
    heapq.heapify(heap)
    while heap:
        _, v = heapq.heappop(heap)
        best = None  # (finish, start, device)
        for d in range(D):
            if not ok[v, d] or not memory.fits(v, d):
                continue
            ready = 0
            for k in range(pred_ptr[v], pred_ptr[v + 1]):
                u = pred_idx[k]
                a = int(end[u]) + int(ticks[pred_edge[k], device[u], d])
                if a > ready:
                    ready = a
            t = _earliest_gap(starts[d], ends[d], ready, int(dur[v, d])) if insertion else max(ready, tail[d])
            cand = (t + int(dur[v, d]), t, d)
            if best is None or cand < best:
                best = cand
        if best is None:
            raise PlacementInfeasibleError(
                f"{method}: node {g.names[v]!r} ({int(g.node_weight_bytes[v])} parameter bytes) fits on no allowed device "
                f"with the memory left after earlier nodes",
                node=g.names[v],
            )
        fin, t, d = best
        device[v], start[v], end[v] = d, t, fin
        pos = bisect.bisect_left(starts[d], t)
        starts[d].insert(pos, t)
        ends[d].insert(pos, fin)
        tail[d] = max(tail[d], fin)
        memory.take(v, d)
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[k]
            waiting[w] -= 1
            if waiting[w] == 0:
                heapq.heappush(heap, (-prio[w], w))
    return Placement.from_assignment(device, D, start=start, method=method)


def _earliest_gap(starts: list[int], ends: list[int], ready: int, length: int) -> int:
    # Intervals on a device never overlap, so ends are sorted too: skip those finished by `ready`.
    i = bisect.bisect_right(ends, ready)
    t = ready
    while i < len(starts):
        if t + length <= starts[i]:
            return t
        t = max(t, ends[i])
        i += 1
    return t


def upward_rank(problem: PlacementProblem) -> np.ndarray:
    """Each node's bottom level under mean costs (`mean_costs`), its own duration included: HEFT's upward rank."""
    node_cost, edge_cost = mean_costs(problem)
    return problem.graph.bottom_level(node_cost, edge_cost)


def critical_path_list(problem: PlacementProblem, seed: int = 0) -> Placement:
    """DOPPLER's critical-path teacher: longest remaining path first, each at its earliest finish.

    Ready nodes are taken by bottom level (mean durations and mean transfers, own duration
    included); each goes after the last node of the device where it would finish earliest.

    Parameters
    ----------
    problem : PlacementProblem
    seed : int
        Accepted for the common pre-scheduler interface; the heuristic is deterministic.

    Returns
    -------
    Placement
    """
    return list_schedule(problem, upward_rank(problem), insertion=False, method="critical_path_list")


def heft(problem: PlacementProblem, seed: int = 0) -> Placement:
    """HEFT: nodes by decreasing upward rank (mean costs), each inserted where it finishes earliest.

    Parameters
    ----------
    problem : PlacementProblem
    seed : int
        Accepted for the common pre-scheduler interface; the heuristic is deterministic.

    Returns
    -------
    Placement
    """
    # Every node lasts at least one tick, so rank strictly falls along each edge and taking ready
    # nodes by rank is the same as HEFT's global rank order.
    return list_schedule(problem, upward_rank(problem), insertion=True, method="heft")
