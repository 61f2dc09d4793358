"""Moves of critical ops between device orders: a compiled local search that keeps its schedule.

`placement_local` searches device assignments and re-derives every device's order by list
scheduling, which loses the orders the exact model found: re-listing the best known schedules of
the placement benchmark (`benchmarks/placement_gaps.py`) makes them 5-34 % longer. Here a placement
is what `simulate` executes, a device and a position in that device's order per op. A move takes an
op on the critical path out of its order and puts it into any allowed device's order, at the
position its current start time falls in or a few positions either side; the ordered execution
re-times every op in O(n + m) (a move that closes a cycle through the orders is rejected). The first
move that shortens the makespan is kept, or one that keeps it and lowers the sum of end times (that
walks the plateaus a makespan alone cannot tell apart). When no move of a critical op helps, a few
random ops are moved (a kick); after a number of kicks without a better placement the search goes
back to the best one. Compiled with numba: 100,000-270,000 placements a second on 200-400 ops here,
against about 2,000 for the list-scheduling decoder in pure Python.

Devices with memory limits are left to the other searches: a move does not count parameters.
The kernel lives in `placement_moves_kernel`, so that importing this module does not import numba.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..problems import Placement, PlacementProblem

__all__ = ["KERNEL", "move_search", "applies"]

#: The compiled search, as `incsched.policy.compiled.call_compiled` names it.
KERNEL = "incsched.baselines.placement_moves_kernel:search_chunk"

#: Placements tried per compiled call: the caller's ``should_stop`` is asked between calls
#: (20,000 take 0.1-0.2 s on 200-400 ops).
CHUNK = 20_000

#: Positions tried either side of the one a moved op's start time falls in.
WIDTH = 2


def applies(problem: PlacementProblem) -> bool:
    """Whether moves may reorder ``problem`` freely: no device has a memory limit."""
    return all(d.memory is None for d in problem.devices)


def move_search(problem: PlacementProblem, start: Placement, *, evaluations: int, seed: int = 0,
                should_stop: Callable[[], bool] | None = None, call=None) -> tuple[Placement, int]:
    """The best placement within ``evaluations`` moves from ``start``, and the moves tried.

    Deterministic for a given ``start``, ``evaluations`` and ``seed``, unless ``should_stop`` cuts it
    (asked every `CHUNK` placements). ``call``: how to call the compiled kernel, ``call(KERNEL,
    *args)`` (`incsched.policy.compiled.call_compiled` runs its first call in a helper thread, safe
    under Ctrl-C); default, directly. The answer is never longer than ``start`` as `simulate` runs it.
    """
    if not applies(problem):
        raise ValueError("moves do not count memory: every device must be without a memory limit")
    g = problem.graph
    n, D = problem.n_nodes, problem.n_devices
    if n == 0:
        return start, 0  # nothing to move (a kick draws an op)
    state = _State.of(start, n, D)
    data = (
        np.ascontiguousarray(problem.durations(), dtype=np.int64),
        np.ascontiguousarray(problem.allowed_devices(), dtype=np.bool_),
        g.pred_ptr.astype(np.int64), g.pred_idx.astype(np.int64), g.pred_edge.astype(np.int64),
        g.succ_ptr.astype(np.int64), g.succ_idx.astype(np.int64),
        np.ascontiguousarray(problem.transfer_ticks(), dtype=np.int64),
    )
    if call is None:
        from .placement_moves_kernel import search_chunk  # numba: imported on the first search only

        def call(kernel, *args):
            return search_chunk(*args)

    used = chunk = 0
    while used < evaluations and not (should_stop is not None and should_stop()):
        budget = min(CHUNK, evaluations - used)
        _, spent = call(KERNEL, state.device, state.prev, state.next, state.first, state.last, *data, budget,
                       seed * 1_000_003 + chunk, WIDTH)
        used += int(spent)
        chunk += 1
    return state.placement(), used


class _State:
    """A placement as linked lists: each op's device, its neighbours in that device's order, and each order's ends."""

    def __init__(self, device, prev, next_, first, last):
        self.device, self.prev, self.next, self.first, self.last = device, prev, next_, first, last

    @classmethod
    def of(cls, placement: Placement, n: int, D: int) -> _State:
        prev, next_ = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        first, last = np.full(D, -1, np.int64), np.full(D, -1, np.int64)
        for d, order in enumerate(placement.order):
            order = [int(v) for v in order]
            if order:
                first[d], last[d] = order[0], order[-1]
            for a, b in zip(order, order[1:]):
                next_[a], prev[b] = b, a
        return cls(np.asarray(placement.device, dtype=np.int64).copy(), prev, next_, first, last)

    def placement(self) -> Placement:
        orders = []
        for d in range(len(self.first)):
            order, v = [], int(self.first[d])
            while v >= 0:
                order.append(v)
                v = int(self.next[v])
            orders.append(order)
        return Placement(self.device.copy(), orders, method="moves")
