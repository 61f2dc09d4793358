"""Relaxation: the window of freedom around an incumbent that the exact model searches.

Inc-ILP's step between the pre-scheduler and CP-SAT: each node may move within a radius of its
incumbent stage (or to a short list of devices); the exact model is solved inside, then the window
is re-centred and widened until the answer stops moving or the window is the whole problem.
"""

from __future__ import annotations

import numpy as np

from ..problems import PlacementProblem, PlacementWindow
from ..problems.stage import StageProblem

__all__ = [
    "stage_window", "stage_band_window", "window_is_everything",
    "placement_window", "ranked_devices", "start_window", "free_in", "device_pair", "time_slice",
    "policy_margin", "uncertain_nodes",
]


def stage_window(problem: StageProblem, center, radius) -> tuple[np.ndarray, np.ndarray]:
    """Per-node inclusive stage range ``[center - radius, center + radius]`` clipped to 0..K-1.

    Parameters
    ----------
    problem : StageProblem
    center : int array [n]
        The incumbent's stages.
    radius : int or int array [n]
        How far each node may move; an array sizes it per node (e.g. from policy confidence).

    Returns
    -------
    (lo, hi) : int arrays
        Precedence and capacity deductions are left to `StageProblem.allowed_stages`, which the
        exact model applies; the incumbent always lies inside.
    """
    center = np.asarray(center, dtype=np.int64)
    r = np.broadcast_to(np.asarray(radius, dtype=np.int64), center.shape)
    K = problem.n_stages
    return np.clip(center - r, 0, K - 1), np.clip(center + r, 0, K - 1)


def stage_band_window(problem: StageProblem, center, first: int, width: int, roaming=None) -> tuple[np.ndarray, np.ndarray]:
    """A band of ``width`` adjacent stages from ``first`` opened up; everything else held in place.

    The large-model neighbourhood of inc-ilp's band search: nodes the incumbent puts on stages
    ``first .. first + width - 1`` may take any of those stages, every other node keeps its stage,
    except the ``roaming`` ones (a bool mask, typically the loadless nodes, which no peak depends
    on), which may go anywhere precedence lets them. Moving nodes between neighbouring stages is
    where the incumbent's imbalance and extra crossings are repaired, and a band keeps the exact
    model a few hundred decisions large whatever the graph's size.

    Returns
    -------
    (lo, hi) : int arrays
        Inclusive per-node stage ranges; the incumbent always lies inside.
    """
    s = np.asarray(center, dtype=np.int64)
    last = min(first + width, problem.n_stages) - 1
    inside = (s >= first) & (s <= last)
    lo = np.where(inside, first, s)
    hi = np.where(inside, last, s)
    if roaming is not None:
        roaming = np.asarray(roaming, dtype=bool)
        lo = np.where(roaming, 0, lo)
        hi = np.where(roaming, problem.n_stages - 1, hi)
    return lo, hi


def window_is_everything(problem: StageProblem, window: tuple[np.ndarray, np.ndarray]) -> bool:
    """Whether the window allows every node every stage, i.e. its optimum is the global one."""
    lo, hi = window
    return bool(np.all(lo == 0) and np.all(hi == problem.n_stages - 1))


def placement_window(problem: PlacementProblem, device, *, hops: int = 1) -> PlacementWindow:
    """Allowed devices per node: the incumbent's, plus those of nodes up to ``hops`` edges away.

    The moves the list schedulers get wrong are about co-location (keeping a chain on one device
    to save transfers, or splitting it to gain parallelism), so each node may join any device its
    graph neighbours use in the incumbent; widening by a hop lets whole chains move together.
    Start times are left free. ``hops=0`` holds every node on its incumbent device.
    """
    device = np.asarray(device, dtype=np.int64)
    g = problem.graph
    allowed = np.zeros((g.n_nodes, problem.n_devices), dtype=bool)
    allowed[np.arange(g.n_nodes), device] = True
    reach = allowed.copy()  # devices of the nodes within h hops, grown one hop at a time
    for _ in range(hops):
        if not g.n_edges:
            break
        grown = reach.copy()
        np.logical_or.at(grown, g.src, reach[g.dst])
        np.logical_or.at(grown, g.dst, reach[g.src])
        reach = grown
    return PlacementWindow(reach & problem.allowed_devices())


def ranked_devices(problem: PlacementProblem, device, preference, *, mass: float) -> np.ndarray:
    """Allowed devices per node: the incumbent's, plus the devices the policy ranks first until
    they hold ``mass`` of its probability.

    A node the policy is sure of keeps one or two devices; one it hesitates over keeps several,
    so the window is sized by the policy's confidence, node by node.

    Parameters
    ----------
    device : int array [n]
        The incumbent's devices.
    preference : float array [n, D]
        Per node, the policy's probability of each device (rows sum to 1).
    mass : float
        Probability to cover, in (0, 1].
    """
    device = np.asarray(device, dtype=np.int64)
    pref = np.asarray(preference, dtype=np.float64)
    order = np.argsort(-pref, axis=1, kind="stable")
    covered = np.take_along_axis(pref, order, axis=1).cumsum(axis=1)
    # Keep rank r while the ranks before it cover less than `mass` (the top device always).
    keep = np.concatenate([np.ones((len(pref), 1), dtype=bool), covered[:, :-1] < mass], axis=1)
    allowed = np.zeros_like(keep)
    np.put_along_axis(allowed, order, keep, axis=1)
    allowed[np.arange(len(device)), device] = True
    return allowed & problem.allowed_devices()


def start_window(start, slack: int) -> tuple[np.ndarray, np.ndarray]:
    """Start ticks within ``slack`` of the incumbent's: ``[max(s - slack, 0), s + slack]`` per node.

    Holding starts near the incumbent's keeps the model's domains small where the search is
    otherwise lost among equivalent orders; the incumbent always lies inside.
    """
    s = np.asarray(start, dtype=np.int64)
    return np.maximum(s - int(slack), 0), s + int(slack)


def free_in(problem: PlacementProblem, device, free, devices=None) -> np.ndarray:
    """Allowed devices for a large-neighbourhood round: the ``free`` nodes (bool [n]) may take any
    of ``devices`` (bool [D]; default every device) besides their own, every other node keeps its
    incumbent device. Start times are left to the caller's window."""
    device = np.asarray(device, dtype=np.int64)
    n, D = len(device), problem.n_devices
    allowed = np.zeros((n, D), dtype=bool)
    allowed[np.arange(n), device] = True
    cols = np.ones(D, dtype=bool) if devices is None else np.asarray(devices, dtype=bool)
    allowed[np.asarray(free, dtype=bool)] |= cols
    return allowed & problem.allowed_devices()


def device_pair(device, a: int, b: int) -> np.ndarray:
    """The nodes on devices ``a`` and ``b`` (bool [n]): a round that rebalances one pair of devices."""
    device = np.asarray(device, dtype=np.int64)
    return (device == a) | (device == b)


def time_slice(start, end, lo: int, hi: int) -> np.ndarray:
    """The nodes running at some time in ``[lo, hi)`` (bool [n]): a round that repacks one stretch
    of the schedule across every device."""
    start, end = np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64)
    return (start < hi) & (end > lo)


def policy_margin(preference) -> np.ndarray:
    """How sure the policy is of each node's device: its first choice's probability minus its second's.

    0 for a node torn between two devices, 1 for one it is certain of (float [n]; a single device
    gives 1).
    """
    pref = np.asarray(preference, dtype=np.float64)
    if pref.shape[1] < 2:
        return np.ones(len(pref))
    top = np.sort(pref, axis=1)
    return top[:, -1] - top[:, -2]


def uncertain_nodes(problem: PlacementProblem, preference, *, size: int, count: int) -> list[np.ndarray]:
    """Free sets (bool [n] each) for rounds where the learned policy is least sure of a device.

    Nodes are taken by `policy_margin`, least sure first, each with its graph neighbours (its
    data partners: a node moved alone pays the transfers they save), until a set holds ``size``
    nodes; a node is a seed of one set at most, so the sets march down the policy's doubts.
    A seed whose neighbours would overflow the set comes alone. At most ``count`` sets.
    """
    g = problem.graph
    n = g.n_nodes
    if size < 1 or count < 1:
        raise ValueError(f"uncertain_nodes: size and count must be >= 1, got {size} and {count}")
    order = np.argsort(policy_margin(preference), kind="stable").tolist()
    seeded = np.zeros(n, dtype=bool)
    out: list[np.ndarray] = []
    free = np.zeros(n, dtype=bool)
    for v in order:
        if seeded[v]:
            continue
        seeded[v] = True
        cluster = np.concatenate([[v], g.predecessors(v), g.successors(v)]).astype(np.int64)
        if int((~free[cluster]).sum()) + int(free.sum()) > size:
            cluster = cluster[:1]
        free[cluster] = True
        seeded[cluster[:1]] = True
        if free.sum() >= size:
            out.append(free)
            if len(out) == count:
                return out
            free = np.zeros(n, dtype=bool)
    if free.any():
        out.append(free)
    return out
