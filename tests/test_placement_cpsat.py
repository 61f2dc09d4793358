"""Tests of incsched.solvers.cpsat.placement (run through incsched.inc_ilp.placement.solve_cpsat, which hands it its hint and horizon): optimality against brute force, agreement with the simulator, windows, hints, determinism."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.baselines.placement import PLACEMENT_BASELINES, heft
from incsched.evaluate.simulate import simulate
from incsched.graph import CompGraph
from incsched.inc_ilp.placement import solve_cpsat
from incsched.problems import Device, Links, Placement, PlacementProblem, PlacementWindow
from incsched.solvers import SolverSettings
from oracles import brute_force_makespan, small_placement_problem

FAST = SolverSettings(time_limit=5.0, max_deterministic_time=2.0)


small_problem = small_placement_problem


@st.composite
def problems(draw, max_nodes=7, max_devices=3):
    n = draw(st.integers(1, max_nodes))
    edges = [(u, v) for v in range(n) for u in range(v) if draw(st.integers(0, 2)) == 0]
    secs = draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
    out = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    D = draw(st.integers(1, max_devices))
    speeds = draw(st.lists(st.sampled_from([1.0, 1.0, 2.0]), min_size=D, max_size=D))
    return small_problem(n, edges, secs, out, D=D, speeds=speeds, latency=draw(st.sampled_from([0.0, 1.0])))


def test_fork_hand_computed():
    # a (2) -> b (3), a -> c (1); a's output costs 5 ticks to move. Apart: c at 7..8 (makespan 8)
    # vs. together: 2 + 3 + 1 = 6. The optimum keeps everything on one device.
    p = small_problem(3, [(0, 1), (0, 2)], [2, 3, 1], [50, 0, 0])
    out = solve_cpsat(p, FAST)
    assert out.status == "optimal" and out.objective == 6 and out.bound == 6
    # With free links c runs beside b: makespan 5.
    q = small_problem(3, [(0, 1), (0, 2)], [2, 3, 1], [0, 0, 0])
    out = solve_cpsat(q, FAST)
    assert out.status == "optimal" and out.objective == 5
    assert out.info["order"] and sorted(sum(out.info["order"], [])) == [0, 1, 2]


@pytest.mark.slow
@given(problems(max_nodes=5, max_devices=2))
@settings(max_examples=30, deadline=None)
def test_optimum_matches_brute_force(p):
    out = solve_cpsat(p, FAST)
    assert out.status == "optimal"
    assert out.objective == brute_force_makespan(p)


@pytest.mark.slow
@given(problems())
@settings(max_examples=40, deadline=None)
def test_simulator_reproduces_the_solved_makespan(p):
    out = solve_cpsat(p, FAST)
    assert out.status == "optimal"
    pl = Placement(out.assignment, out.info["order"], start=out.info["cpsat_start"])
    ordered = simulate(p, pl, "ordered")
    timed = simulate(p, pl, "timed")  # CP-SAT's own start times are feasible as they stand
    assert ordered.makespan == out.info["cpsat_objective"] == timed.makespan == out.objective
    assert ordered.start.tolist() == out.start.tolist()
    assert p.lower_bound_ticks() <= out.info["lower_bound"] <= out.bound <= out.objective
    best = min(simulate(p, f(p)).makespan for f in PLACEMENT_BASELINES.values())
    assert out.objective <= best


@pytest.mark.slow
@given(problems(max_nodes=10, max_devices=3))
@settings(max_examples=12, deadline=None)
def test_hinted_is_never_worse_than_the_hint(p):
    # A deliberately tiny budget: whatever the solver manages, it must keep the incumbent.
    tiny = SolverSettings(time_limit=1.0, max_deterministic_time=0.05)
    best = min((simulate(p, f(p)) for f in PLACEMENT_BASELINES.values()), key=lambda s: s.makespan)
    out = solve_cpsat(p, tiny, hint=best.to_placement())
    assert out.status in ("optimal", "feasible")
    assert out.objective <= best.makespan
    assert out.info["hinted"] and out.info["hint_makespan"] == best.makespan
    pl = Placement(out.assignment, out.info["order"], start=out.start)
    assert simulate(p, pl, "ordered").makespan == out.objective <= out.info["cpsat_objective"]
    raw = Placement(out.assignment, out.info["order"], start=out.info["cpsat_start"])
    assert simulate(p, raw, "timed").makespan <= out.info["cpsat_objective"]


def _random_dag(n, seed, D=4, ratio_bytes=200):
    rng = np.random.default_rng(seed)
    src, dst = [], []
    for v in range(1, n):
        for u in rng.choice(v, size=min(v, int(rng.integers(1, 3))), replace=False):
            src.append(int(u))
            dst.append(v)
    g = CompGraph([f"n{i}" for i in range(n)], src, dst, out_bytes=rng.integers(0, ratio_bytes, n),
                  compute_time={"cpu": rng.integers(1, 10, n).astype(float)})
    return PlacementProblem.identical(g, D, bandwidth=20.0, time_unit=1.0)


@pytest.mark.slow
def test_deterministic_mode_gives_identical_results():
    p = _random_dag(25, seed=1)
    settings_ = SolverSettings(time_limit=5.0, max_deterministic_time=0.5)
    a = solve_cpsat(p, settings_, hint=heft(p))
    b = solve_cpsat(p, settings_, hint=heft(p))
    assert a.status == b.status and a.objective == b.objective and a.bound == b.bound
    assert np.array_equal(a.assignment, b.assignment) and np.array_equal(a.start, b.start)
    assert a.info["order"] == b.info["order"] and a.info["reproducible"]


def test_window_devices_and_start_ranges_are_respected():
    p = _random_dag(12, seed=2, D=3)
    rng = np.random.default_rng(0)
    allowed = rng.random((12, 3)) < 0.5
    allowed[np.arange(12), rng.integers(0, 3, 12)] = True  # every node keeps a device
    free = solve_cpsat(p, FAST, window=PlacementWindow(allowed))
    assert free.status == "optimal" and not free.info["symmetry_breaking"]
    assert np.all(allowed[np.arange(12), free.assignment])
    lo = np.minimum(free.start, 3)
    hi = free.start + 2
    w = PlacementWindow(allowed, start_lo=lo, start_hi=hi)
    out = solve_cpsat(p, FAST, window=w)
    assert out.status == "optimal" and out.objective == free.objective  # the free optimum lies inside
    assert w.contains(p, out.assignment, out.start)
    # Pinning every node to device 0 serialises the graph.
    pinned = solve_cpsat(p, FAST, window=PlacementWindow.from_devices([[0]] * 12, 3))
    assert pinned.objective == p.durations()[:, 0].sum() and set(pinned.assignment.tolist()) == {0}


def test_window_without_a_device_or_start_is_infeasible_with_a_reason():
    p = small_problem(3, [(0, 1)], [1, 1, 1], [0, 0, 0])
    out = solve_cpsat(p, FAST, window=PlacementWindow.from_devices([[0], [], [1]], 2))
    assert out.status == "infeasible" and "'n1'" in out.info["reason"] and out.assignment is None
    # n1 cannot start before n0 ends (tick 1): a range [0, 0] is empty once bounds apply.
    out = solve_cpsat(p, FAST, window=PlacementWindow(start_lo=[0, 0, 0], start_hi=[5, 0, 5]))
    assert out.status == "infeasible" and "'n1'" in out.info["reason"]


def test_memory_capacity_forces_a_split():
    # A chain that would rather stay on one device, but each device holds only two nodes' weights.
    p = small_problem(4, [(0, 1), (1, 2), (2, 3)], [1, 1, 1, 1], [10, 10, 10, 0], params=[5, 5, 5, 5], memory=10)
    out = solve_cpsat(p, FAST)
    assert out.status == "optimal"
    s = simulate(p, Placement(out.assignment, out.info["order"]))
    assert s.memory_ok and np.bincount(out.assignment, minlength=2).tolist() == [2, 2]
    assert out.objective == 4 + 1  # one crossing of the 10-byte / 10 B/s link


def test_heterogeneous_pairs_and_speeds():
    # Three devices; d0-d1 is a slow link, d0-d2 fast. a -> b with a big tensor: b should go next
    # to a or to the far end of the fast link, never across the slow one.
    g = CompGraph(["a", "b", "c"], ["a", "a"], ["b", "c"], out_bytes=[100, 0, 0], compute_time={"cpu": [2.0, 4.0, 4.0]})
    lat = [[0, 0, 0], [0, 0, 0], [0, 0, 0]]
    bw = [[np.inf, 1.0, 100.0], [1.0, np.inf, 1.0], [100.0, 1.0, np.inf]]
    p = PlacementProblem(g, [Device(f"d{i}") for i in range(3)], Links(lat, bw), time_unit=1.0)
    out = solve_cpsat(p, FAST)
    assert out.status == "optimal" and out.objective == 2 + 1 + 4  # b and c split over d0/d2 (or d2/d0)
    assert set(out.assignment.tolist()) == {0, 2}  # never the slow d1
    assert simulate(p, Placement(out.assignment, out.info["order"])).makespan == out.objective


def test_deadlocking_hint_is_ignored_not_fatal():
    p = small_problem(2, [(0, 1)], [1, 1], [0, 0])
    out = solve_cpsat(p, FAST, hint=Placement([0, 0], [(1, 0), ()]))
    assert out.status == "optimal" and not out.info["hinted"] and "ignored" in out.info["hint_note"]


def test_symmetry_breaking_keeps_the_optimum_and_relabels_the_hint():
    p = _random_dag(8, seed=5, D=3)
    with_sym = solve_cpsat(p, FAST)
    assert with_sym.info["symmetry_breaking"]
    no_sym = solve_cpsat(p, FAST, window=PlacementWindow(np.ones((8, 3), bool)))
    assert with_sym.status == no_sym.status == "optimal" and with_sym.objective == no_sym.objective
    # A hint that first uses device 2 is relabelled, so it still counts as an incumbent.
    h = heft(p).relabel([2, 1, 0])
    out = solve_cpsat(p, SolverSettings(time_limit=1.0, max_deterministic_time=0.01), hint=h)
    assert out.objective is not None and out.objective <= simulate(p, h).makespan
    # Node 0 in topological order is on device 0 whatever the hint said.
    assert out.assignment[p.graph.topological_order()[0]] == 0


@pytest.mark.parametrize("n_devices", [1, 2])
def test_empty_and_single_node_graphs(n_devices):
    g = CompGraph(["a"], [], [], compute_time={"cpu": [3.0]})
    p = PlacementProblem.identical(g, n_devices, time_unit=1.0)
    out = solve_cpsat(p, FAST)
    assert out.status == "optimal" and out.objective == 3 and out.assignment.tolist() == [0]
