"""Tests of incsched.baselines.placement_moves (moves of critical ops between device orders) and its place in inc-ilp."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incsched.baselines.placement import critical_path_list, round_robin
from incsched.baselines.placement_moves import CHUNK, applies, move_search
from incsched.evaluate.simulate import simulate
from incsched.front_door import solve
from incsched.generators import bandwidth_for_comm_ratio, chained_matmul, transformer_layer
from incsched.graph import CompGraph
from incsched.inc_ilp.tuning import Tuning
from incsched.problems import Device, Links, Placement, PlacementProblem


def _layer(devices: int = 4) -> PlacementProblem:
    g = transformer_layer(seq_tiles=2, kinds=("cpu",), jitter=0.1, seed=5)
    return PlacementProblem.identical(g, devices, bandwidth=bandwidth_for_comm_ratio(g, 4.0, "cpu"))


def _makespan(problem: PlacementProblem, placement: Placement) -> int:
    return int(simulate(problem, placement, "ordered").makespan)


def test_moves_shorten_a_list_schedule_and_the_simulator_agrees():
    p = _layer()
    start = critical_path_list(p)
    answer, used = move_search(p, start, evaluations=60_000)
    assert used == 60_000
    assert sorted(v for order in answer.order for v in order) == list(range(p.n_nodes))
    assert all(answer.device[v] == d for d, order in enumerate(answer.order) for v in order)
    # 206 ops on 4 devices, transfers 4x an op: the list scheduler leaves more than 10 % on the table.
    assert _makespan(p, answer) < 0.9 * _makespan(p, start)


def test_moves_repeat_for_the_same_start_budget_and_seed():
    p = _layer(8)
    start = round_robin(p)
    a, _ = move_search(p, start, evaluations=30_000, seed=3)
    b, _ = move_search(p, start, evaluations=30_000, seed=3)
    assert a.device.tolist() == b.device.tolist() and a.order == b.order


def test_should_stop_is_asked_between_chunks():
    p = _layer()
    asked = []

    def stop():
        asked.append(1)
        return len(asked) > 1

    answer, used = move_search(p, critical_path_list(p), evaluations=10 * CHUNK, should_stop=stop)
    assert used == CHUNK and len(asked) == 2
    assert _makespan(p, answer) <= _makespan(p, critical_path_list(p))


def _problem(n, edges, secs, out, D, bandwidth):
    g = CompGraph([f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges], out_bytes=out,
                  compute_time={"cpu": [float(s) for s in secs]})
    return PlacementProblem(g, [Device(f"d{i}") for i in range(D)], Links(bandwidth=bandwidth), time_unit=1.0)


@st.composite
def dags(draw):
    n = draw(st.integers(2, 12))
    edges = [(u, v) for v in range(1, n) for u in range(v) if draw(st.integers(0, 3)) == 0]
    secs = [draw(st.integers(1, 9)) for _ in range(n)]
    out = [draw(st.integers(0, 60)) for _ in range(n)]
    return _problem(n, edges, secs, out, draw(st.integers(1, 3)), draw(st.sampled_from([5.0, 20.0])))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(), st.integers(0, 3))
def test_moves_never_lengthen_their_start_and_keep_every_precedence(p, seed):
    start = round_robin(p)
    answer, _ = move_search(p, start, evaluations=400, seed=seed)
    executed = simulate(p, answer, "ordered")  # raises on a deadlock
    assert executed.makespan <= _makespan(p, start)
    ticks = p.transfer_ticks()
    for k in range(p.graph.n_edges):
        u, v = int(p.graph.src[k]), int(p.graph.dst[k])
        assert executed.start[v] >= executed.end[u] + ticks[k, answer.device[u], answer.device[v]]


def test_an_empty_graph_is_returned_as_it_came():
    p = PlacementProblem.identical(CompGraph([], [], [], name="empty"), 2, bandwidth=1e9)
    start = critical_path_list(p)
    answer, used = move_search(p, start, evaluations=100)
    assert answer is start and used == 0


def test_devices_with_a_memory_limit_are_left_to_the_other_searches():
    g = chained_matmul(n_matrices=3, tiles=2, kinds=("cpu",))
    p = PlacementProblem.identical(g, 2, bandwidth=1e9, memory=10**12)
    assert not applies(p) and applies(PlacementProblem.identical(g, 2, bandwidth=1e9))
    with pytest.raises(ValueError, match="memory"):
        move_search(p, critical_path_list(p), evaluations=10)


def test_inc_ilp_polishes_with_moves_and_keeps_local_search_without_them():
    g = chained_matmul(n_matrices=5, tiles=2, kinds=("cpu",), jitter=0.1, seed=2)
    p = PlacementProblem.identical(g, 4, bandwidth=bandwidth_for_comm_ratio(g, 4.0, "cpu"))
    # Work-bounded with a clock to spare: nothing is cut by the clock, so the run must repeat.
    moved = solve(p, time_limit=60.0, work_limit=0.1)
    steps = {s["phase"]: s for s in moved.provenance["steps"]}
    assert "moves" in steps and "local_search" not in steps and steps["moves"]["evaluations"] > 0
    assert steps["moves"]["objective"] <= steps["moves"]["start"]
    assert moved.objective <= steps["moves"]["objective"]
    again = solve(p, time_limit=60.0, work_limit=0.1)
    assert moved.reproducible and again.objective == moved.objective and again.device == moved.device
    plain = solve(p, time_limit=60.0, work_limit=0.1, tuning=Tuning(placement_moves_share=0.0))
    phases = [s["phase"] for s in plain.provenance["steps"]]
    assert "moves" not in phases and "local_search" in phases


def test_short_clocks_without_numba_imported_keep_local_search(monkeypatch):
    import sys

    from incsched.inc_ilp import incumbent
    from incsched.inc_ilp.context import Context

    p = _layer()

    def ready(time_limit, problem=p):
        ctx = Context(problem, time_limit=time_limit, work_limit=None, deterministic=True, workers=1, seed=0, check=lambda *a: None)
        return incumbent._moves_ready(ctx)

    monkeypatch.setattr(incumbent, "is_cached", lambda kernel: True)
    monkeypatch.setitem(sys.modules, "numba", sys.modules.get("numba", object()))
    assert ready(1.0) and ready(60.0)  # numba is imported in this process: loading the kernel takes 0.05 s
    monkeypatch.delitem(sys.modules, "numba")
    assert not ready(1.0) and ready(5.0)  # importing numba first would take most of a 1-s clock
    monkeypatch.setattr(incumbent, "is_cached", lambda kernel: False)
    assert not ready(5.0) and ready(60.0)  # not compiled: only a long clock affords the compile
    memory = PlacementProblem.identical(p.graph, 4, bandwidth=1e9, memory=10**12)
    assert not ready(60.0, memory)
