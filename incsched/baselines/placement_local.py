"""Local search over device assignments: the placement pre-scheduler that clusters before it lists.

With transfers several times an op's compute, which nodes share a device matters more than the
order of ready nodes, and one greedy pass (`critical_path_list`, `heft`) cannot undo a split it
regrets later. `local_search` starts from the better of the two list schedulers, then repeatedly
moves a node on the current critical path (alone, or with the neighbours it exchanges data with)
to another device, re-list-schedules the fixed assignment, and keeps the move when the makespan
falls; a seeded perturbation restarts it when no single move helps. Its answer is an ordinary
`Placement` for the common ``preschedule(problem, seed)`` interface.
"""

from __future__ import annotations

import bisect
import heapq
import logging
from typing import Callable

import numpy as np

from ..evaluate.simulate import simulate
from ..problems import Placement, PlacementProblem
from .list_scheduling import critical_path_list, heft

__all__ = ["local_search", "schedule_assignment"]

log = logging.getLogger(__name__)

#: Assignments tried per call by default: about 1-3 s on 100-300 ops in pure Python.
DEFAULT_EVALUATIONS = 2500

#: Assignments tried between two questions to ``should_stop`` inside a round of moves: a round
#: that improves nothing tries every critical node's moves (seconds on 300 ops under load), and
#: asking only between rounds ran a loaded 60-s run 1.8 s past its clock.
_ASK_EVERY = 16

#: Nodes with more neighbours than this (norms, sums feeding every head) do not carry a group move further.
_HUB = 4


class _Decoder:
    """Schedules a fixed device assignment: list scheduling by bottom level under that assignment."""

    def __init__(self, problem: PlacementProblem):
        g = problem.graph
        self.n, self.D = problem.n_nodes, problem.n_devices
        self.dur = problem.durations().tolist()
        self.ticks = problem.transfer_ticks()
        self.src, self.dst = g.src.tolist(), g.dst.tolist()
        self.pred_ptr, self.pred_idx, self.pred_edge = g.pred_ptr.tolist(), g.pred_idx.tolist(), g.pred_edge.tolist()
        self.succ_ptr, self.succ_idx, self.succ_edge = g.succ_ptr.tolist(), g.succ_idx.tolist(), g.succ_edge.tolist()
        self.in_degree = g.in_degree.tolist()
        self.reverse_topo = g.topological_order()[::-1].tolist()
        # ticks[k][a][b] as nested lists: indexing numpy scalars in the inner loop is ten times slower.
        self.tick = [[list(map(int, row)) for row in self.ticks[k]] for k in range(g.n_edges)]

    def run(self, device: list[int]) -> tuple[int, list[int], list[int], list[int]]:
        """Makespan, start, end and the node each start waited on (-1: time zero) for ``device``."""
        n, dur, tick = self.n, self.dur, self.tick
        d_of = device
        # Priority: bottom level with this assignment's transfers (zero within a device).
        bottom = [0] * n
        for v in self.reverse_topo:
            best = 0
            for k in range(self.succ_ptr[v], self.succ_ptr[v + 1]):
                w = self.succ_idx[k]
                c = bottom[w] + tick[self.succ_edge[k]][d_of[v]][d_of[w]]
                if c > best:
                    best = c
            bottom[v] = best + dur[v][d_of[v]]
        start, end, cause = [0] * n, [0] * n, [-1] * n
        starts: list[list[int]] = [[] for _ in range(self.D)]
        ends: list[list[int]] = [[] for _ in range(self.D)]
        owner: list[list[int]] = [[] for _ in range(self.D)]
        waiting = list(self.in_degree)
        heap = [(-bottom[v], v) for v in range(n) if waiting[v] == 0]
        heapq.heapify(heap)
        makespan = 0
        while heap:
            _, v = heapq.heappop(heap)
            d = d_of[v]
            ready, why = 0, -1
            for k in range(self.pred_ptr[v], self.pred_ptr[v + 1]):
                u = self.pred_idx[k]
                a = end[u] + tick[self.pred_edge[k]][d_of[u]][d]
                if a > ready:
                    ready, why = a, u
            length = dur[v][d]
            # Insertion into the earliest idle gap that fits (HEFT's rule), else after the last node.
            s_list, e_list = starts[d], ends[d]
            i = bisect.bisect_right(e_list, ready)
            t = ready
            while i < len(s_list):
                if t + length <= s_list[i]:
                    break
                if e_list[i] > t:
                    t, why = e_list[i], owner[d][i]
                i += 1
            pos = bisect.bisect_left(s_list, t)
            s_list.insert(pos, t)
            e_list.insert(pos, t + length)
            owner[d].insert(pos, v)
            start[v], end[v], cause[v] = t, t + length, why
            if t + length > makespan:
                makespan = t + length
            for k in range(self.succ_ptr[v], self.succ_ptr[v + 1]):
                w = self.succ_idx[k]
                waiting[w] -= 1
                if waiting[w] == 0:
                    heapq.heappush(heap, (-bottom[w], w))
        return makespan, start, end, cause


def schedule_assignment(problem: PlacementProblem, device, method: str = "assignment") -> Placement:
    """List-schedule a fixed device assignment (bottom-level priority under its own transfers).

    Parameters
    ----------
    problem : PlacementProblem
    device : int array [n]
        Device of every node.
    method : str
        Label stored in the placement.

    Returns
    -------
    Placement
        Per-device orders by planned start; ``simulate(..., "ordered")`` never ends later.
    """
    dev = [int(d) for d in device]
    _, start, _, _ = _Decoder(problem).run(dev)
    return Placement.from_assignment(dev, problem.n_devices, start=start, method=method)


def local_search(problem: PlacementProblem, seed: int = 0, *, evaluations: int = DEFAULT_EVALUATIONS, start: Placement | None = None,
                 should_stop: Callable[[], bool] | None = None) -> Placement:
    """Improve the best list schedule by moving critical nodes (and their data partners) between devices.

    Parameters
    ----------
    problem : PlacementProblem
    seed : int
        Seeds the order in which moves are tried and the perturbations; same seed, same answer.
    evaluations : int
        Assignments scheduled in all (the budget; counted, not timed, so the result is reproducible).
    start : Placement, optional
        The assignment to start from; default the better of `heft` and `critical_path_list`.
    should_stop : callable, optional
        Asked between rounds of moves and every few assignments inside one; True ends the search early with the best found (the
        caller's clock or Ctrl-C: the answer then depends on timing).

    Returns
    -------
    Placement
        Never worse than the starting placement (both are executed in ``ordered`` mode to compare).
    """
    n, D = problem.n_nodes, problem.n_devices
    if start is None:
        cands = [heft(problem, seed), critical_path_list(problem, seed)]
        start = min(cands, key=lambda pl: simulate(problem, pl, "ordered").makespan)
    start_makespan = simulate(problem, start, "ordered").makespan
    start = Placement(start.device, start.order, start=start.start, method="local_search")
    if n == 0 or D == 1:
        return start
    rng = np.random.default_rng(seed)
    dec = _Decoder(problem)
    g = problem.graph
    allowed = problem.allowed_devices()
    cap = [None if d.memory is None else int(d.memory) for d in problem.devices]
    nbrs = [sorted(set(g.predecessors(v).tolist()) | set(g.successors(v).tolist())) for v in range(n)]

    def fits(dev, moved, d):
        if not all(allowed[v, d] for v in moved):
            return False
        if cap[d] is None:
            return True
        trial = list(dev)
        for v in moved:
            trial[v] = d
        return g.part_param_bytes(trial, D)[d] <= cap[d]  # a shared weight once on d

    def score(res):
        makespan, _, end, _ = res
        return (makespan, sum(end))

    cur = [int(d) for d in start.device]
    cur_res = dec.run(cur)
    best, best_res = list(cur), cur_res
    used = 1
    stopping = _Asker(should_stop)
    while used < evaluations and not stopping():
        critical = _critical_nodes(cur_res)
        rng.shuffle(critical)
        improved = False
        for v in critical:
            groups = [[v]]
            partners = [u for u in nbrs[v] if cur[u] == cur[v]]
            if partners:
                groups.append([v] + partners)
                # Two hops, through nodes that are not hubs: a whole attention head or MLP tile.
                far = {w for u in partners if len(nbrs[u]) <= _HUB for w in nbrs[u] if cur[w] == cur[v]} - set(groups[-1])
                if far:
                    groups.append(groups[-1] + sorted(far))
            for group in groups:
                for d in rng.permutation(D).tolist():
                    if d == cur[v] or not fits(cur, group, d):
                        continue
                    trial = list(cur)
                    for u in group:
                        trial[u] = d
                    res = dec.run(trial)
                    used += 1
                    if score(res) < score(cur_res):
                        cur, cur_res, improved = trial, res, True
                        break
                    if used >= evaluations or (used % _ASK_EVERY == 0 and stopping()):
                        break
                if improved or used >= evaluations or stopping.said:
                    break
            if improved or used >= evaluations or stopping.said:
                break
        if score(cur_res) < score(best_res):
            best, best_res = list(cur), cur_res
        if not improved and used < evaluations and not stopping.said:
            # A local optimum: restart from the best with a few random nodes moved.
            cur = list(best)
            for v in rng.choice(n, size=min(n, 3), replace=False).tolist():
                d = int(rng.integers(D))
                if fits(cur, [v], d):
                    cur[v] = d
            cur_res = dec.run(cur)
            used += 1
    placement = Placement.from_assignment(best, D, start=best_res[1], method="local_search")
    if simulate(problem, placement, "ordered").makespan > start_makespan:
        return start  # the decoder's order is never worse than its plan, but the start may use a better one
    log.debug("local_search on %r: %d -> %d ticks in %d evaluations", problem.name, start_makespan, best_res[0], used)
    return placement


class _Asker:
    """``should_stop`` that remembers a yes (``said``), so that nested loops all leave on it."""

    def __init__(self, should_stop: Callable[[], bool] | None):
        self.should_stop, self.said = should_stop, False

    def __call__(self) -> bool:
        if not self.said and self.should_stop is not None and self.should_stop():
            self.said = True
        return self.said


def _critical_nodes(res) -> list[int]:
    """Nodes on a chain of waits (data or device) that ends at the makespan."""
    makespan, _, end, cause = res
    out = []
    seen = set()
    stack = [v for v, e in enumerate(end) if e == makespan]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        out.append(v)
        if cause[v] >= 0:
            stack.append(cause[v])
    return sorted(out)
