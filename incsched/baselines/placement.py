"""Placement pre-schedulers, one interface for all: ``preschedule(problem, seed=0) -> Placement``.

Each returns a `Placement` (device and order per device, with the start ticks it planned), so that
they, the RL policy and CP-SAT are interchangeable as incumbents. The list schedulers
(`critical_path_list`, `heft`) live in `list_scheduling`, the local search that improves their
better answer in `placement_local`; this module adds the two naive references and registers all
of them in `PLACEMENT_BASELINES`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..problems import DeviceMemory, Placement, PlacementInfeasibleError, PlacementProblem
from .list_scheduling import critical_path_list, heft, list_schedule, mean_costs
from .placement_local import local_search

__all__ = [
    "critical_path_list",
    "heft",
    "local_search",
    "round_robin",
    "single_device",
    "PLACEMENT_BASELINES",
    "mean_costs",
    "list_schedule",
]


def round_robin(problem: PlacementProblem, seed: int = 0) -> Placement:
    """Deal nodes in topological order to devices in turn (skipping devices without memory left).

    Raises
    ------
    PlacementInfeasibleError
        When a node fits on no device with the memory left.
    """
    g = problem.graph
    D = problem.n_devices
    memory = DeviceMemory(problem)
    device = np.zeros(problem.n_nodes, dtype=np.int64)
    nxt = 0
    for v in g.topological_order().tolist():
        for k in range(D):
            d = (nxt + k) % D
            if memory.fits(v, d):
                break
        else:
            raise PlacementInfeasibleError(
                f"round_robin: node {g.names[v]!r} fits on no device with the memory left", node=g.names[v]
            )
        device[v] = d
        memory.take(v, d)
        nxt = (d + 1) % D
    return _topological_placement(problem, device, "round_robin")


def single_device(problem: PlacementProblem, seed: int = 0) -> Placement:
    """Everything on the device with the least total work, in topological order (may exceed its memory)."""
    d = int(np.argmin(problem.durations().sum(axis=0))) if problem.n_nodes else 0
    device = np.full(problem.n_nodes, d, dtype=np.int64)
    return _topological_placement(problem, device, "single_device")


def _topological_placement(problem: PlacementProblem, device: np.ndarray, method: str) -> Placement:
    pos = np.empty(problem.n_nodes, dtype=np.int64)
    pos[problem.graph.topological_order()] = np.arange(problem.n_nodes)
    return Placement.from_assignment(device, problem.n_devices, priority=pos, method=method)


#: Name -> pre-scheduler, all with the signature ``(problem, seed=0) -> Placement``.
PLACEMENT_BASELINES: dict[str, Callable[..., Placement]] = {
    "critical_path_list": critical_path_list,
    "heft": heft,
    "local_search": local_search,
    "round_robin": round_robin,
    "single_device": single_device,
}
