"""Tests of incsched.bounds.placement: every family is at most the true optimum (brute force or a proven CP-SAT optimum)."""

from __future__ import annotations

import itertools


import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from incsched.evaluate.simulate import simulate
from incsched.graph import CompGraph
from incsched.inc_ilp.placement import solve_cpsat
from incsched.bounds.placement import (
    INF,
    anchored_heads,
    anchored_tails,
    energetic_heads,
    energy_bound,
    path_bound,
    placement_lower_bound,
    placement_bound_details,
    segment_sum_bound,
    startup_bound,
    transfer_heads,
    transfer_tails,
)
from incsched.problems import Placement, PlacementProblem
from incsched.solvers import SolverSettings
from oracles import brute_force_makespan, small_placement_problem

EXACT = SolverSettings(time_limit=20.0, max_deterministic_time=10.0)


make_problem = small_placement_problem


@st.composite
def problems(draw, max_nodes=5, max_devices=3, hetero=True):
    n = draw(st.integers(1, max_nodes))
    edges = [(u, v) for v in range(n) for u in range(v) if draw(st.integers(0, 2)) == 0]
    secs = draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
    out = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    D = draw(st.integers(1, max_devices))
    speeds = None
    latency: float | np.ndarray = draw(st.sampled_from([0.0, 1.0]))
    bandwidth: float | np.ndarray = 10.0
    if hetero and D > 1 and draw(st.booleans()):
        speeds = draw(st.lists(st.sampled_from([1.0, 1.0, 2.0]), min_size=D, max_size=D))
    if hetero and D > 1 and draw(st.booleans()):
        # Per-pair links: a latency matrix and a bandwidth matrix, not symmetric.
        latency = np.array(draw(st.lists(st.sampled_from([0.0, 1.0, 3.0]), min_size=D * D, max_size=D * D)), float).reshape(D, D)
        bandwidth = np.array(draw(st.lists(st.sampled_from([5.0, 10.0, 40.0]), min_size=D * D, max_size=D * D)), float).reshape(D, D)
    return make_problem(n, edges, secs, out, D=D, speeds=speeds, latency=latency, bandwidth=bandwidth)


def every_bound(p: PlacementProblem) -> dict[str, int]:
    """Each family separately, with every node tried as entry and exit anchor (any node is a valid anchor)."""
    out = dict(placement_bound_details(p))
    head, tail = transfer_heads(p), transfer_tails(p)
    out["path_only"] = path_bound(p, head, tail)
    out["energy_only"] = energy_bound(p, head, tail)
    anchors = [None] + list(range(p.n_nodes))
    for x in anchors:
        for y in anchors:
            if x is None and y is None:
                continue
            out[f"energy[{x},{y}]"] = energy_bound(p, head, tail, entry=x, exit_=y)
    # Anchor sets: any set of nodes is valid (a device holding none of them uses anchored heads).
    sets = [None] + [tuple(c) for k in (2, 3) for c in itertools.combinations(range(p.n_nodes), k)][:12]
    for xs in sets:
        for ys in sets:
            if xs is not None or ys is not None:
                out[f"energy[{xs},{ys}]"] = energy_bound(p, head, tail, entry=xs, exit_=ys)
    eh, et = energetic_heads(p, head), energetic_heads(p, tail, forward=False)
    assert all(a >= b for a, b in zip(eh, head)) and all(a >= b for a, b in zip(et, tail))
    out["energetic_path_only"] = path_bound(p, eh, et)
    out["energetic_heads_plain_tails"] = path_bound(p, eh, tail)
    out["energy_energetic"] = energy_bound(p, eh, et)
    out["startup_every_window"] = startup_bound(p, head, tail, max_windows=10**6)
    out["startup_energetic"] = startup_bound(p, eh, et, max_windows=10**6)
    out["segment_sum_only"] = segment_sum_bound(p)
    out["placement_lower_bound"] = placement_lower_bound(p)
    return out


def assert_below(p: PlacementProblem, optimum: int) -> None:
    for name, value in every_bound(p).items():
        assert value <= optimum, f"{name} = {value} exceeds the optimum {optimum}"
    assert placement_lower_bound(p) >= p.lower_bound_ticks()


# ---------------------------------------------------------------------- hand-computed


def test_fork_join_hand_computed():
    # s (1) -> a (10), s -> b (10), a -> t, b -> t (1); every edge moves 1000 bytes at 10 B/s: 100 ticks.
    # Apart, a transfer costs more than serialising a and b, so the optimum is 1 + 10 + 10 + 1 = 22
    # on one device. The old bound is max(1 + 10 + 1, 22 / 2) = 12.
    g = CompGraph(["s", "a", "b", "t"], ["s", "s", "a", "b"], ["a", "b", "t", "t"],
                  out_bytes=[1000, 1000, 1000, 0], compute_time={"cpu": [1.0, 10.0, 10.0, 1.0]})
    p = PlacementProblem.identical(g, 2, bandwidth=10.0, time_unit=1.0)
    assert p.lower_bound_ticks() == 12
    assert transfer_heads(p) == [0, 1, 1, 21]
    assert transfer_tails(p) == [21, 1, 1, 0]
    assert path_bound(p) == 22
    assert placement_lower_bound(p) == 22 == brute_force_makespan(p)


def test_colocation_rule_picks_the_cheaper_side():
    # Two inputs of 5 ticks into t; a transfer costs 2 ticks: running one input remotely is better
    # (t at 7) than both locally (t at 10).
    p = make_problem(3, [(0, 2), (1, 2)], [5, 5, 1], [20, 20, 0], D=2)
    assert transfer_heads(p)[2] == 7
    assert path_bound(p) == 8 == brute_force_makespan(p)


def test_anchored_heads_charge_a_transfer_after_the_anchor():
    # s (1) -> a (4): a off s's device starts at 1 + 3 (transfer), on it at 1.
    p = make_problem(2, [(0, 1)], [1, 4], [30, 0], D=2)
    assert anchored_heads(p, 0) == [INF, 4]
    assert anchored_tails(p, 1) == [7, INF]  # s off a's device: transfer (3) then a (4)


def test_energy_anchor_beats_plain_energy_on_a_wide_fork():
    # s -> 6 independent nodes of 4 ticks -> t, transfers 6 ticks, 3 devices: the plain energy bound
    # sees 26 ticks of work on 3 devices; anchored, two devices lose 12 ticks of window each.
    n = 8
    edges = [(0, v) for v in range(1, 7)] + [(v, 7) for v in range(1, 7)]
    p = make_problem(n, edges, [1] + [4] * 6 + [1], [60] * 7 + [0], D=3)
    head, tail = transfer_heads(p), transfer_tails(p)
    plain = energy_bound(p, head, tail)
    anchored = energy_bound(p, head, tail, entry=0, exit_=7)
    assert anchored > plain
    out = solve_cpsat(p, EXACT)
    assert out.status == "optimal"
    assert anchored <= out.objective
    assert_below(p, int(out.objective))


def test_source_sets_charge_the_devices_that_start_with_a_transfer():
    # Two inputs (1 tick) -> 12 independent nodes of 4 ticks -> two outputs; transfers 6 ticks; 4
    # devices. Plain energy: 52 ticks of work on 4 devices. Two devices at most hold an input (and
    # two an output): the other two start after a transfer and end before one.
    n = 16
    edges = [(v % 2, v) for v in range(2, 14)] + [(v, 14 + v % 2) for v in range(2, 14)]
    p = make_problem(n, edges, [1, 1] + [4] * 12 + [1, 1], [60] * 14 + [0, 0], D=4)
    head, tail = transfer_heads(p), transfer_tails(p)
    plain = energy_bound(p, head, tail)
    details = placement_bound_details(p)
    assert details["source_energy"] == energy_bound(p, head, tail, entry=(0, 1), exit_=(14, 15)) > plain
    out = solve_cpsat(p, EXACT)
    assert out.status == "optimal"
    assert details["bound"] <= out.objective
    assert_below(p, int(out.objective))


def test_anchor_cases_cover_every_way_to_hold_the_anchors():
    from incsched.bounds.placement import _anchor_cases

    assert _anchor_cases(4, 0, 0) == [(0, 0, 0, 4)]
    assert _anchor_cases(5, 1, 1) == [(0, 1, 1, 3), (1, 0, 0, 4)]  # apart, or together (the single anchors' two cases)
    assert _anchor_cases(5, 1, 1, same=True) == [(1, 0, 0, 4)]
    assert _anchor_cases(4, 2, 0) == [(0, 1, 0, 3), (0, 2, 0, 2)]
    for D, s, t in [(3, 2, 2), (4, 3, 2), (8, 3, 3), (2, 5, 1)]:
        cases = _anchor_cases(D, s, t)
        assert all(sum(c) == D and c[0] + c[1] <= s and c[0] + c[2] <= t and c[0] + c[1] >= 1 and c[0] + c[2] >= 1 for c in cases)
        # every placement's split is dominated: same a and b, at most as many exit-only devices
        for a in range(min(s, t, D) + 1):
            for b in range(min(s, D) - a + 1):
                for c in range(min(t, D) - a + 1):
                    if a + b + c <= D and a + b >= 1 and a + c >= 1:
                        assert any(x[0] == a and x[1] == b and x[2] >= c for x in cases), (D, s, t, a, b, c)


def test_segment_sum_adds_segments():
    # Two identical fork-joins in sequence; their cut node joins them.
    edges = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (3, 5), (4, 6), (5, 6)]
    p = make_problem(7, edges, [1, 10, 10, 1, 10, 10, 1], [1000] * 6 + [0], D=2)
    assert segment_sum_bound(p) == 43  # (1 + 20 + 1) + (1 + 20 + 1) - 1 (the shared cut node, counted once)
    out = solve_cpsat(p, EXACT)
    assert out.status == "optimal" and out.objective == 43
    assert placement_lower_bound(p) == 43


def test_no_edges_and_one_device():
    p = make_problem(3, [], [3, 4, 5], [0, 0, 0], D=1)
    assert placement_lower_bound(p) == 12
    q = make_problem(3, [], [3, 4, 5], [0, 0, 0], D=3)
    assert placement_lower_bound(q) == 5
    empty = make_problem(0, [], [], [], D=2)
    assert placement_lower_bound(empty) == 0


# ---------------------------------------------------------------------- against brute force and proven optima


@pytest.mark.slow
@given(problems(max_nodes=5, max_devices=3))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_family_below_brute_force(p):
    assert_below(p, brute_force_makespan(p))


@pytest.mark.slow
@given(problems(max_nodes=8, max_devices=4, hetero=False))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_family_below_proven_optimum_identical(p):
    out = solve_cpsat(p, EXACT)
    assume(out.status == "optimal")  # CP-SAT proved it in time (nearly always at this size)
    assert_below(p, int(out.objective))


@pytest.mark.slow
@given(problems(max_nodes=8, max_devices=3, hetero=True))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_family_below_proven_optimum_heterogeneous(p):
    out = solve_cpsat(p, EXACT)
    assume(out.status == "optimal")  # CP-SAT proved it in time (nearly always at this size)
    assert_below(p, int(out.objective))


@pytest.mark.slow  # asserts a time: the bound within 5 s
def test_generated_graph_bound_below_a_schedule_and_fast():
    import time

    from incsched.baselines.placement import critical_path_list
    from incsched.generators import bandwidth_for_comm_ratio, transformer_block

    g = transformer_block(n_blocks=2)
    p = PlacementProblem.identical(g, 8, bandwidth=bandwidth_for_comm_ratio(g, 4.0))
    t0 = time.perf_counter()
    lb = placement_lower_bound(p)
    assert time.perf_counter() - t0 < 5.0
    ub = simulate(p, critical_path_list(p), "ordered").makespan
    assert p.lower_bound_ticks() < lb <= ub


# ---------------------------------------------------------------------- per-node heads and tails hold in every schedule


@st.composite
def scheduled(draw, max_nodes=9, max_devices=4):
    """A problem and one arbitrary schedule of it (random assignment, random topological priority)."""
    p = draw(problems(max_nodes=max_nodes, max_devices=max_devices))
    n, D = p.n_nodes, p.n_devices
    dev = draw(st.lists(st.integers(0, D - 1), min_size=n, max_size=n))
    prio = draw(st.permutations(list(range(n))))
    topo = p.graph.topological_order().tolist()
    # Priority consistent with the edges: rank nodes by position in a topological order, ties by prio.
    pos = {v: i for i, v in enumerate(topo)}
    key = [pos[v] * n + prio[v] for v in range(n)]
    return p, simulate(p, Placement.from_assignment(dev, D, priority=key))


def assert_heads_hold(p, sched, head, tail):
    for v in range(p.n_nodes):
        assert int(sched.start[v]) >= head[v], f"node {v}: head {head[v]} > start {int(sched.start[v])}"
        assert int(sched.makespan) - int(sched.end[v]) >= tail[v], f"node {v}: tail {tail[v]} too long"


@pytest.mark.slow
@given(scheduled())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_heads_and_tails_hold_in_any_schedule(case):
    p, sched = case
    head, tail = transfer_heads(p), transfer_tails(p)
    assert_heads_hold(p, sched, head, tail)
    eh, et = energetic_heads(p, head), energetic_heads(p, tail, forward=False)
    assert_heads_hold(p, sched, eh, et)
    # Anchored heads hold for every node off the anchor's device.
    for x in range(p.n_nodes):
        hx, qx = anchored_heads(p, x, eh), anchored_tails(p, x, et)
        for v in range(p.n_nodes):
            if sched.device[v] != sched.device[x]:
                assert int(sched.start[v]) >= hx[v]
                assert int(sched.makespan) - int(sched.end[v]) >= qx[v]
    # ... and for every node on a device that holds none of a set of anchors.
    for xs in [tuple(c) for c in itertools.combinations(range(p.n_nodes), 2)][:10]:
        hx, qx = anchored_heads(p, xs, eh), anchored_tails(p, xs, et)
        held = {int(sched.device[x]) for x in xs}
        for v in range(p.n_nodes):
            if int(sched.device[v]) not in held:
                assert int(sched.start[v]) >= hx[v]
                assert int(sched.makespan) - int(sched.end[v]) >= qx[v]
    assert placement_lower_bound(p) <= sched.makespan


@pytest.mark.slow
@given(scheduled(max_nodes=9, max_devices=3))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_window_heads_hold_in_any_schedule(case):
    from incsched.solvers.cpsat.placement_bounds import window_bound, window_heads

    p, sched = case
    s = SolverSettings(time_limit=10.0)
    head, info = window_heads(p, s, transfer_heads(p), max_nodes=5)
    tail, _ = window_heads(p, s, transfer_tails(p), forward=False, max_nodes=5)
    assert_heads_hold(p, sched, head, tail)
    bound, info = window_bound(p, s, max_nodes=6)
    assert p.lower_bound_ticks() <= bound <= sched.makespan
    assert_heads_hold(p, sched, info["head"], info["tail"])


@pytest.mark.slow
@given(problems(max_nodes=5, max_devices=3))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_cpsat_strengthened_bound_below_brute_force(p):
    from incsched.inc_ilp.exact_bounds import placement_bound_cpsat

    bound, info = placement_bound_cpsat(p, SolverSettings(time_limit=10.0))
    assert placement_lower_bound(p) <= bound <= brute_force_makespan(p), info


@pytest.mark.slow
def test_windows_see_that_sharing_is_transitive():
    # A 2x2-tiled two-layer FFNN on 4 devices, transfers about twice a matmul: the per-node rule
    # lets every sum keep both its matmuls local; a window of the layer sees that this puts both
    # inputs on one device.
    from incsched.generators import bandwidth_for_comm_ratio, ffnn
    from incsched.inc_ilp.exact_bounds import placement_bound_cpsat

    g = ffnn(n_layers=2, tiles=2)
    p = PlacementProblem.identical(g, 4, bandwidth=bandwidth_for_comm_ratio(g, 4.0))
    comb = placement_lower_bound(p)
    strong, info = placement_bound_cpsat(p, SolverSettings(time_limit=20.0))
    out = solve_cpsat(p, SolverSettings(time_limit=60.0, max_deterministic_time=30.0))
    assert comb < strong <= out.objective
    if out.status == "optimal":
        assert strong <= out.objective


@pytest.mark.slow
def test_cpsat_bound_reproducible():
    from incsched.generators import bandwidth_for_comm_ratio, transformer_block
    from incsched.inc_ilp.exact_bounds import placement_bound_cpsat

    g = transformer_block(heads=2, ffn_tiles=2)
    p = PlacementProblem.identical(g, 4, bandwidth=bandwidth_for_comm_ratio(g, 4.0))
    a, ia = placement_bound_cpsat(p, SolverSettings(time_limit=30.0))
    b, ib = placement_bound_cpsat(p, SolverSettings(time_limit=30.0))
    assert ia["reproducible"] and ib["reproducible"]
    assert a == b and ia["families"] == ib["families"]
    assert a > placement_lower_bound(p) >= p.lower_bound_ticks()


@given(scheduled(max_nodes=8, max_devices=3), st.sampled_from([0.0, 0.02, 0.05]))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_window_heads_cut_by_their_budget_hold_in_any_schedule(case, budget):
    # A pass whose budget runs out still raises the nodes it skips (along their inputs): still valid.
    from incsched.solvers.cpsat.placement_bounds import window_heads

    p, sched = case
    s = SolverSettings(time_limit=1.0)
    head, _ = window_heads(p, s, transfer_heads(p), max_nodes=4, budget=budget)
    tail, _ = window_heads(p, s, transfer_tails(p), forward=False, max_nodes=4, budget=budget)
    assert_heads_hold(p, sched, head, tail)


def test_window_raises_reach_the_nodes_a_cut_budget_skips():
    # Chained matmul 4x2 on 4 devices: a budget of 14 of 36 windows raised the first nodes and
    # left 6 later heads at their transfer heads, below their raised inputs' ends (issue 25: the
    # 60-s bound of chain15x2_d4 stayed at the combinatorial families').
    from incsched.generators import bandwidth_for_comm_ratio, chained_matmul
    from incsched.solvers.cpsat.placement_bounds import window_heads

    g = chained_matmul(n_matrices=4, tiles=2, jitter=0.1, seed=1008)
    p = PlacementProblem.identical(g, 4, bandwidth=bandwidth_for_comm_ratio(g, 4.0))
    dmin = p.durations().min(axis=1).astype(int).tolist()
    for forward, start in ((True, transfer_heads(p)), (False, transfer_tails(p))):
        head, info = window_heads(p, SolverSettings(time_limit=0.2), start, forward=forward)
        assert info["skipped"] > 0 and info["windows"] > 0, info
        src, dst = (p.graph.src, p.graph.dst) if forward else (p.graph.dst, p.graph.src)
        for u, v in zip(src.tolist(), dst.tolist()):
            assert head[v] >= head[u] + dmin[u], (forward, u, v)
