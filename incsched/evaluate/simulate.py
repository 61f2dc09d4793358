"""Discrete-event execution of a placement: the independent evaluator of the placement problem.

Written without reference to the CP-SAT model: it replays (device, order) the way a runtime would,
in integer ticks, and recomputes start times, makespan, busy time and memory from scratch. Every
placement answer (list schedulers, CP-SAT, the RL policy) is judged here, and the RL reward is read
from here. Three modes: ``ordered`` (each device runs its given order), ``fcfs`` (DOPPLER's
work-conserving first-come-first-served execution of an assignment) and ``timed`` (check planned
start times as given).
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ScheduleError, DeadlockError
from ..problems import Placement, PlacementError, PlacementProblem

__all__ = ["Schedule", "simulate", "DeadlockError", "ScheduleError", "MODES"]

log = logging.getLogger(__name__)

MODES = ("ordered", "fcfs", "timed")


@dataclass(frozen=True, eq=False)
class Schedule:
    """The executed schedule of a placement, in ticks (seconds via ``time_unit``).

    Attributes
    ----------
    device : int array [n]
        Device of each node.
    start, end : int arrays [n]
        Start and end tick of each node.
    makespan : int
        Last end tick (0 for an empty graph).
    order : tuple of tuples
        Node indices per device in the order they actually ran.
    busy : int array [D]
        Ticks each device spent computing.
    memory : int array [D]
        Parameter bytes resident on each device (a shared weight once on each device holding a reader).
    memory_violations : tuple of (device name, bytes used, capacity)
        Devices whose parameters exceed their memory.
    time_unit : float
        Seconds per tick.
    mode : str
        How it was executed (``ordered``, ``fcfs``, ``timed``).
    """

    device: np.ndarray
    start: np.ndarray
    end: np.ndarray
    makespan: int
    order: tuple[tuple[int, ...], ...]
    busy: np.ndarray
    memory: np.ndarray
    memory_violations: tuple[tuple[str, int, int], ...]
    time_unit: float
    mode: str

    @property
    def makespan_seconds(self) -> float:
        return self.makespan * self.time_unit

    @property
    def start_seconds(self) -> np.ndarray:
        return self.start * self.time_unit

    @property
    def end_seconds(self) -> np.ndarray:
        return self.end * self.time_unit

    @property
    def memory_ok(self) -> bool:
        return not self.memory_violations

    @property
    def utilisation(self) -> np.ndarray:
        """Busy fraction of each device over the makespan."""
        return self.busy / self.makespan if self.makespan else np.zeros_like(self.busy, dtype=np.float64)

    def to_placement(self, method: str = "") -> Placement:
        """This schedule as a `Placement` with its executed order and start times."""
        return Placement(self.device, self.order, start=self.start, method=method)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "makespan": int(self.makespan),
            "makespan_seconds": self.makespan_seconds,
            "time_unit": self.time_unit,
            "device": self.device.tolist(),
            "start": self.start.tolist(),
            "end": self.end.tolist(),
            "order": [list(o) for o in self.order],
            "busy": self.busy.tolist(),
            "memory": self.memory.tolist(),
            "memory_violations": [list(v) for v in self.memory_violations],
        }


def simulate(problem: PlacementProblem, placement: Placement, mode: str = "ordered") -> Schedule:
    """Execute ``placement`` on ``problem``'s devices and report what happens.

    Parameters
    ----------
    problem : PlacementProblem
        Devices, links and integer tick costs.
    placement : Placement
        Device per node and order per device (``ordered``), start ticks (``timed``), or just the
        device per node (``fcfs``, which ignores the orders).
    mode : {"ordered", "fcfs", "timed"}
        ``ordered``: each device runs its nodes exactly in the given order, one at a time, each
        as soon as its device is free and every input has arrived (producer end, plus the
        transfer when the producer ran elsewhere). ``fcfs``: when a device is free it starts,
        among its nodes whose inputs have all arrived, the one that became ready first (ties by
        node index), and otherwise idles until one does. ``timed``: the placement's own start
        ticks are checked, not recomputed.

    Returns
    -------
    Schedule

    Raises
    ------
    DeadlockError
        ``ordered``: a device order puts a node before one it depends on (directly or through
        other devices); the message names the blocked devices and what they wait for.
    ScheduleError
        ``timed``: no start ticks, two nodes overlap on a device, or a node starts before an input arrives.
    PlacementError
        The placement does not fit the problem (node count, device count).

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> from incsched.problems.placement import PlacementProblem
    >>> g = CompGraph(["a", "b", "c"], ["a", "a"], ["b", "c"], out_bytes=[100, 0, 0],
    ...               compute_time={"cpu": [1.0, 1.0, 1.0]})
    >>> p = PlacementProblem.identical(g, 2, bandwidth=100.0, time_unit=1.0)
    >>> simulate(p, Placement([0, 0, 1], [(0, 1), (2,)])).end.tolist()
    [1, 2, 3]
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    n, D = problem.n_nodes, problem.n_devices
    if len(placement.device) != n:
        raise PlacementError(f"placement has {len(placement.device)} nodes, problem {problem.name!r} has {n}")
    if placement.n_devices != D:
        raise PlacementError(f"placement uses {placement.n_devices} devices, problem {problem.name!r} has {D}")
    device = placement.device
    dur = problem.durations()[np.arange(n), device] if n else np.zeros(0, dtype=np.int64)
    # Per-edge delay given this assignment: zero on one device, the link's ticks across two.
    g = problem.graph
    delay = problem.transfer_ticks()[np.arange(g.n_edges), device[g.src], device[g.dst]] if g.n_edges else np.zeros(0, np.int64)

    if mode == "ordered":
        start = _run_ordered(problem, placement, dur, delay)
    elif mode == "fcfs":
        start = _run_fcfs(problem, device, dur, delay)
    else:
        start = _check_timed(problem, placement, dur, delay)
    end = start + dur
    return _schedule(problem, device, start, end, mode)


def _run_ordered(problem, placement, dur, delay) -> np.ndarray:
    g = problem.graph
    n = problem.n_nodes
    pred_ptr, pred_idx, pred_edge = g.pred_ptr.tolist(), g.pred_idx.tolist(), g.pred_edge.tolist()
    dur_l, delay_l = dur.tolist(), delay.tolist()
    start = [-1] * n
    end = [-1] * n
    head = [0] * len(placement.order)
    free = [0] * len(placement.order)
    # Kahn on the graph plus each device's chain: a node runs once it heads its device's queue
    # and every producer has finished. A device is re-examined only when something it may be
    # waiting for finishes (its own previous node, or a producer of its head), so this is O(n + m).
    succ_ptr, succ_idx = g.succ_ptr.tolist(), g.succ_idx.tolist()
    dev = placement.device.tolist()
    to_check = list(range(len(placement.order)))
    remaining = n
    while to_check:
        d = to_check.pop()
        seq = placement.order[d]
        while head[d] < len(seq):
            v = seq[head[d]]
            t = free[d]
            ready = True
            for k in range(pred_ptr[v], pred_ptr[v + 1]):
                u = pred_idx[k]
                if end[u] < 0:
                    ready = False
                    break
                arrive = end[u] + delay_l[pred_edge[k]]
                if arrive > t:
                    t = arrive
            if not ready:
                break
            start[v], end[v] = t, t + dur_l[v]
            free[d] = end[v]
            head[d] += 1
            remaining -= 1
            for k in range(succ_ptr[v], succ_ptr[v + 1]):
                e = dev[succ_idx[k]]
                if e != d:
                    to_check.append(e)
    if remaining:
        raise DeadlockError(_deadlock_message(problem, placement, head, end))
    return np.asarray(start, dtype=np.int64)


def _deadlock_message(problem, placement, head, end) -> str:
    g = problem.graph
    waits = []
    for d, seq in enumerate(placement.order):
        if head[d] < len(seq):
            v = seq[head[d]]
            missing = [int(u) for u in g.predecessors(v) if end[u] < 0]
            where = ", ".join(
                f"{g.names[u]!r} (device {problem.devices[int(placement.device[u])].name!r})" for u in missing[:3]
            )
            waits.append(f"device {problem.devices[d].name!r} is to run {g.names[v]!r} next but it needs {where}")
    return (
        f"placement deadlocks on problem {problem.name!r}: the device orders contradict precedence; "
        + "; ".join(waits[:4])
    )


def _run_fcfs(problem, device, dur, delay) -> np.ndarray:
    g = problem.graph
    n, D = problem.n_nodes, problem.n_devices
    succ_ptr, succ_idx, succ_edge = g.succ_ptr.tolist(), g.succ_idx.tolist(), g.succ_edge.tolist()
    dev, dur_l, delay_l = device.tolist(), dur.tolist(), delay.tolist()
    waiting = g.in_degree.tolist()
    arrive = [0] * n
    start = [-1] * n
    busy_until = [0] * D
    ready: list[list[tuple[int, int]]] = [[] for _ in range(D)]  # per device: (ready tick, node)
    # Events (tick, kind, item): kind 0 = a node finishes, kind 1 = a device looks for work.
    # Finishes sort first at equal ticks, so a device deciding at t sees everything ready by t.
    events: list[tuple[int, int, int]] = []
    for v in range(n):
        if waiting[v] == 0:
            heapq.heappush(ready[dev[v]], (0, v))
    for d in range(D):
        heapq.heappush(events, (0, 1, d))
    while events:
        t, kind, item = heapq.heappop(events)
        if kind == 0:
            u = item
            for k in range(succ_ptr[u], succ_ptr[u + 1]):
                w = succ_idx[k]
                a = t + delay_l[succ_edge[k]]
                if a > arrive[w]:
                    arrive[w] = a
                waiting[w] -= 1
                if waiting[w] == 0:
                    heapq.heappush(ready[dev[w]], (arrive[w], w))
                    heapq.heappush(events, (arrive[w], 1, dev[w]))
            heapq.heappush(events, (t, 1, dev[u]))
            continue
        d = item
        if busy_until[d] > t or not ready[d] or ready[d][0][0] > t:
            continue  # busy (its finish will wake it) or nothing has arrived yet (its arrival will)
        _, v = heapq.heappop(ready[d])
        start[v] = t
        busy_until[d] = t + dur_l[v]
        heapq.heappush(events, (busy_until[d], 0, v))
    if any(s < 0 for s in start):  # pragma: no cover - a DAG always drains
        raise PlacementError("fcfs simulation left nodes unexecuted; the graph is not acyclic")
    return np.asarray(start, dtype=np.int64)


def _check_timed(problem, placement, dur, delay) -> np.ndarray:
    if placement.start is None:
        raise ScheduleError("timed simulation needs a placement with start ticks")
    g = problem.graph
    start = np.asarray(placement.start, dtype=np.int64)
    end = start + dur
    if np.any(start < 0):
        v = int(np.flatnonzero(start < 0)[0])
        raise ScheduleError(f"node {g.names[v]!r} starts at tick {int(start[v])}, before time zero")
    if g.n_edges:
        arrive = end[g.src] + delay
        late = np.flatnonzero(start[g.dst] < arrive)
        if late.size:
            k = int(late[0])
            u, v = int(g.src[k]), int(g.dst[k])
            raise ScheduleError(
                f"node {g.names[v]!r} starts at tick {int(start[v])} but its input from {g.names[u]!r} "
                f"arrives at tick {int(arrive[k])}"
            )
    for d in range(problem.n_devices):
        nodes = np.flatnonzero(placement.device == d)
        seq = nodes[np.lexsort((nodes, start[nodes]))]
        clash = np.flatnonzero(start[seq[1:]] < end[seq[:-1]])
        if clash.size:
            a, b = int(seq[clash[0]]), int(seq[clash[0] + 1])
            raise ScheduleError(
                f"nodes {g.names[a]!r} [{int(start[a])}, {int(end[a])}) and {g.names[b]!r} "
                f"[{int(start[b])}, {int(end[b])}) overlap on device {problem.devices[d].name!r}"
            )
    return start


def _schedule(problem: PlacementProblem, device, start, end, mode) -> Schedule:
    n, D = problem.n_nodes, problem.n_devices
    order = []
    for d in range(D):
        nodes = np.flatnonzero(device == d)
        order.append(tuple(int(v) for v in nodes[np.lexsort((nodes, start[nodes]))]))
    dur = end - start
    # Exact integer sums: np.bincount's weights go through float64, which loses the last byte
    # above 2**53 (a placement 1 byte over its device's memory passed as fitting). A shared weight
    # costs its bytes once on every device holding one of its readers (`part_param_bytes`).
    busy = np.zeros(D, np.int64)
    np.add.at(busy, device, dur.astype(np.int64))
    memory = np.asarray(problem.graph.part_param_bytes(device, D), dtype=np.int64)
    violations = tuple(
        (dv.name, int(memory[d]), int(dv.memory))
        for d, dv in enumerate(problem.devices)
        if dv.memory is not None and int(memory[d]) > dv.memory
    )
    if violations:
        log.debug("placement on %r exceeds device memory: %s", problem.name, violations)
    for a in (device, start, end, busy, memory):
        a.setflags(write=False)
    return Schedule(
        device=device,
        start=start,
        end=end,
        makespan=int(end.max()) if n else 0,
        order=tuple(order),
        busy=busy,
        memory=memory,
        memory_violations=violations,
        time_unit=problem.time_unit,
        mode=mode,
    )
