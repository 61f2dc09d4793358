"""Tests of incsched.evaluate.simulate: hand-computed schedules, fcfs vs ordered, deadlocks, timed checks, invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.evaluate.simulate import DeadlockError, ScheduleError, simulate
from incsched.graph import CompGraph
from incsched.problems import Device, Placement, PlacementError, PlacementProblem


def problem(names, edges, secs, out_bytes=None, n_devices=2, bandwidth=None, latency=0.0, **kw):
    src = [u for u, _ in edges]
    dst = [v for _, v in edges]
    g = CompGraph(names, src, dst, out_bytes=out_bytes or [0] * len(names), compute_time={"cpu": secs}, **kw)
    return PlacementProblem.identical(g, n_devices, bandwidth=bandwidth, latency=latency, time_unit=1.0)


def fork():
    # a (2) -> b (3), a -> c (1); a's output takes 100 bytes / 20 B/s = 5 ticks to move.
    return problem(["a", "b", "c"], [("a", "b"), ("a", "c")], [2, 3, 1], out_bytes=[100, 0, 0], bandwidth=20.0)


def test_transfer_is_paid_only_across_devices():
    p = fork()
    s = simulate(p, Placement([0, 0, 1], [(0, 1), (2,)]))
    # b follows a on device 0 at once (2..5); c waits for the transfer on device 1: 2 + 5 = 7..8.
    assert s.start.tolist() == [0, 2, 7] and s.end.tolist() == [2, 5, 8] and s.makespan == 8
    s = simulate(p, Placement([0, 0, 0], [(0, 1, 2), ()]))
    assert s.start.tolist() == [0, 2, 5] and s.makespan == 6  # one device: serialised, no transfer
    assert s.busy.tolist() == [6, 0]
    assert s.makespan_seconds == 6.0 and s.end_seconds.tolist() == [2.0, 5.0, 6.0]


def test_device_runs_one_node_at_a_time_in_the_given_order():
    p = problem(["x", "y", "z"], [], [2, 3, 4])
    s = simulate(p, Placement([0, 0, 1], [(1, 0), (2,)]))
    assert s.start.tolist() == [3, 0, 0] and s.makespan == 5  # y 0..3, then x 3..5; z alone 0..4
    assert s.order == ((1, 0), (2,))


def test_fcfs_runs_what_is_ready_first_ordered_follows_the_order():
    # a (1 tick) on device 1 feeds x on device 0; y on device 0 is ready at once.
    p = problem(["a", "x", "y"], [("a", "x")], [1, 2, 2], out_bytes=[40, 0, 0], bandwidth=10.0)
    pl = Placement([1, 0, 0], [(1, 2), (0,)])  # device 0 is told to run x (ready at 1 + 4 = 5) before y
    ordered = simulate(p, pl, "ordered")
    assert ordered.start.tolist() == [0, 5, 7] and ordered.makespan == 9
    fcfs = simulate(p, pl, "fcfs")  # y is ready at 0 and the device is idle: it runs y, then x at 5
    assert fcfs.start.tolist() == [0, 5, 0] and fcfs.makespan == 7
    assert fcfs.order == ((2, 1), (0,))


def test_fcfs_breaks_ties_by_index_and_serves_first_come_first():
    # b and c are ready at 0 on device 0: the lower index (b) runs first, 0..3. The long d becomes
    # ready at 1 (after a on device 1, free link); at 3 c (ready since 0) came first, so d waits
    # until 6 although it is on the critical path: fcfs is not clairvoyant.
    p = problem(["a", "b", "c", "d"], [("a", "d")], [1, 3, 3, 10], n_devices=2)
    s = simulate(p, Placement([1, 0, 0, 0], [(3, 1, 2), (0,)]), "fcfs")
    assert s.start.tolist() == [0, 0, 3, 6] and s.makespan == 16


def test_deadlock_on_one_device_is_reported():
    p = problem(["a", "b"], [("a", "b")], [1, 1])
    with pytest.raises(DeadlockError, match="'b'.*needs 'a'"):
        simulate(p, Placement([0, 0], [(1, 0), ()]))


def test_deadlock_across_devices_is_reported():
    p = problem(["a", "b", "c", "d"], [("a", "b"), ("c", "d")], [1, 1, 1, 1])
    # device 0 runs b before c, device 1 runs d before a: each waits on the other.
    with pytest.raises(DeadlockError) as info:
        simulate(p, Placement([1, 0, 0, 1], [(1, 2), (3, 0)]))
    msg = str(info.value)
    assert "'cpu0'" in msg and "'cpu1'" in msg and "needs 'a'" in msg and "needs 'c'" in msg
    # fcfs ignores orders, so the same assignment runs.
    assert simulate(p, Placement([1, 0, 0, 1], [(1, 2), (3, 0)]), "fcfs").makespan == 2


def test_timed_mode_checks_given_starts():
    p = fork()
    good = Placement([0, 0, 1], [(0, 1), (2,)], start=[0, 2, 9])
    assert simulate(p, good, "timed").makespan == 10  # idle time allowed, never recomputed
    with pytest.raises(ScheduleError, match="'c'.*arrives at tick 7"):
        simulate(p, Placement([0, 0, 1], [(0, 1), (2,)], start=[0, 2, 6]), "timed")
    with pytest.raises(ScheduleError, match="overlap"):
        simulate(p, Placement([0, 0, 0], [(0, 1, 2), ()], start=[0, 2, 4]), "timed")
    with pytest.raises(ScheduleError, match="start ticks"):
        simulate(p, Placement([0, 0, 0], [(0, 1, 2), ()]), "timed")


def test_memory_use_and_violations():
    g = CompGraph(["a", "b", "c"], [], [], param_bytes=[60, 50, 10], compute_time={"cpu": [1, 1, 1]})
    p = PlacementProblem(g, [Device("small", memory=100), Device("big", memory=1000)], time_unit=1.0)
    s = simulate(p, Placement([0, 0, 1], [(0, 1), (2,)]))
    assert s.memory.tolist() == [110, 10]
    assert s.memory_violations == (("small", 110, 100),) and not s.memory_ok
    assert simulate(p, Placement([0, 1, 1], [(0,), (1, 2)])).memory_ok


def test_mismatched_placement_is_rejected():
    p = fork()
    with pytest.raises(PlacementError, match="3 devices"):
        simulate(p, Placement([0, 0, 0], [(0, 1, 2), (), ()]))
    with pytest.raises(PlacementError, match="2 nodes"):
        simulate(p, Placement([0, 0], [(0, 1), ()]))
    with pytest.raises(ValueError, match="mode"):
        simulate(p, Placement([0, 0, 0], [(0, 1, 2), ()]), "lazy")


# ---------------------------------------------------------------------- properties


@st.composite
def placed_problems(draw):
    n = draw(st.integers(1, 12))
    edges = [(u, v) for v in range(n) for u in range(v) if draw(st.booleans()) and draw(st.booleans())]
    secs = draw(st.lists(st.integers(1, 9), min_size=n, max_size=n))
    out = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    D = draw(st.integers(1, 3))
    g = CompGraph([f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges],
                  out_bytes=out, compute_time={"cpu": [float(s) for s in secs]})
    p = PlacementProblem.identical(g, D, latency=draw(st.sampled_from([0.0, 1.0])), bandwidth=10.0, time_unit=1.0)
    device = draw(st.lists(st.integers(0, D - 1), min_size=n, max_size=n))
    # A random topological order (by random keys on a level-respecting sort) fixes each device's order.
    keys = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    rank = np.lexsort((keys, g.asap_level)) if n else np.zeros(0, int)
    prio = np.empty(n, dtype=np.int64)
    prio[rank] = np.arange(n)
    return p, Placement.from_assignment(device, D, priority=prio)


def _check_feasible(p, s):
    g = p.graph
    dur = p.durations()[np.arange(p.n_nodes), s.device]
    assert np.array_equal(s.end - s.start, dur)
    for k in range(g.n_edges):
        u, v = int(g.src[k]), int(g.dst[k])
        assert s.start[v] >= s.end[u] + p.transfer_ticks()[k, s.device[u], s.device[v]]
    for d, seq in enumerate(s.order):
        for a, b in zip(seq, seq[1:]):
            assert s.start[b] >= s.end[a]
    assert s.makespan >= p.lower_bound_ticks()


@pytest.mark.slow
@given(placed_problems())
@settings(max_examples=60, deadline=None)
def test_ordered_is_feasible_semi_active_and_keeps_the_order(case):
    p, pl = case
    s = simulate(p, pl, "ordered")
    _check_feasible(p, s)
    assert s.order == pl.order
    g = p.graph
    # Semi-active: every node starts exactly when its device and its last input allow, never later.
    for seq in pl.order:
        prev_end = 0
        for v in seq:
            arrive = [s.end[u] + p.transfer_ticks()[k, s.device[u], s.device[v]]
                      for u, k in zip(g.predecessors(v), g.pred_edge[g.pred_ptr[v]:g.pred_ptr[v + 1]])]
            assert s.start[v] == max([prev_end, *arrive])
            prev_end = s.end[v]
    # The timed check accepts what ordered produced and reproduces its makespan.
    assert simulate(p, s.to_placement(), "timed").makespan == s.makespan


@pytest.mark.slow
@given(placed_problems())
@settings(max_examples=60, deadline=None)
def test_fcfs_is_feasible_and_work_conserving(case):
    p, pl = case
    s = simulate(p, pl, "fcfs")
    _check_feasible(p, s)
    g = p.graph
    for v in range(p.n_nodes):
        ready = max([0] + [int(s.end[u] + p.transfer_ticks()[k, s.device[u], s.device[v]])
                           for u, k in zip(g.predecessors(v), g.pred_edge[g.pred_ptr[v]:g.pred_ptr[v + 1]])])
        # Between its arrival and its start the device must be busy every tick with an earlier-ready node.
        others = [w for w in s.order[s.device[v]] if w != v]
        for t in range(ready, int(s.start[v])):
            assert any(s.start[w] <= t < s.end[w] for w in others)
    # Replaying fcfs's own executed order in ordered mode gives the same schedule.
    assert simulate(p, s.to_placement(), "ordered").start.tolist() == s.start.tolist()
