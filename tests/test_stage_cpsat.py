"""The stage CP-SAT model: its answers pass the independent evaluator, match brute force on tiny
instances, respect windows, repeat exactly in deterministic mode, and report infeasibility."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import brute_force_stages as brute_force_optimum
from test_stage_problem import diamond, stage_instances

from incsched.evaluate.stage import evaluate_stages
from incsched.graph import CompGraph
from incsched.problems.stage import ObjectiveWeights, StageProblem
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.stage import integer_weights, solve_stage

FAST = SolverSettings(time_limit=5.0, deterministic=True)


@pytest.mark.slow
@given(stage_instances(max_nodes=7, max_stages=3))
@settings(max_examples=25, deadline=None)
def test_optimum_matches_brute_force_and_evaluator(problem):
    out = solve_stage(problem, FAST)
    expected = brute_force_optimum(problem)
    if expected is None:
        assert out.status == "infeasible" and out.info["reason"]
        return
    assert out.status == "optimal"
    ev = evaluate_stages(problem, out.assignment)
    assert ev.feasible, ev.violations
    assert out.objective == pytest.approx(ev.objective)
    assert out.objective == pytest.approx(expected)
    assert out.bound == pytest.approx(expected)


@pytest.mark.slow
@given(problem=stage_instances(min_nodes=4, max_nodes=12), data=st.data())
@settings(max_examples=20, deadline=None)
def test_window_is_respected_and_hint_accepted(problem, data):
    n, K = problem.graph.n_nodes, problem.n_stages
    lo = np.asarray(data.draw(st.lists(st.integers(0, K - 1), min_size=n, max_size=n)))
    hi = np.minimum(lo + data.draw(st.integers(0, K - 1)), K - 1)
    out = solve_stage(problem, FAST, window=(lo, hi), hint=np.sort(lo))
    if out.status == "infeasible":
        assert out.info["reason"]
        return
    assert out.status == "optimal"
    assert np.all(out.assignment >= lo) and np.all(out.assignment <= hi)
    ev = evaluate_stages(problem, out.assignment)
    assert ev.feasible and out.objective == pytest.approx(ev.objective)
    # The window's optimum can be no better than the full problem's.
    assert out.objective >= solve_stage(problem, FAST).objective - 1e-9


@pytest.mark.slow  # clock-bound solves (time_limit=0.3)
def test_deterministic_mode_repeats_exactly():
    rng = np.random.default_rng(3)
    n = 60
    src, dst = zip(*sorted({(int(a), int(b)) for a, b in rng.integers(0, n, (150, 2)) if a < b}))
    g = CompGraph([f"v{i}" for i in range(n)], src, dst, param_bytes=rng.integers(0, 500, n), out_bytes=rng.integers(0, 9, n))
    p = StageProblem.peer(g, n_stages=5)
    settings_ = SolverSettings(time_limit=0.3, deterministic=True, seed=7)
    a, b = solve_stage(p, settings_), solve_stage(p, settings_)
    assert a.status == b.status and a.objective == b.objective and a.bound == b.bound
    assert np.array_equal(a.assignment, b.assignment)


def test_node_too_large_for_every_stage_is_infeasible_before_solving():
    out = solve_stage(StageProblem.peer(diamond(), 3, capacity=39), FAST)
    assert out.status == "infeasible" and out.assignment is None and "'d'" in out.info["reason"]


def test_packing_infeasibility_is_proven_by_the_solver():
    # Three 6-byte nodes, two stages of 10 bytes: 18 <= 20 in total, but no stage holds two.
    g = CompGraph(["a", "b", "c"], [], [], param_bytes=[6, 6, 6])
    p = StageProblem.peer(g, 2, capacity=10)
    assert p.infeasibility() is None
    out = solve_stage(p, FAST)
    assert out.status == "infeasible" and out.assignment is None


def test_zero_weight_nodes_get_no_booleans():
    g = CompGraph(["a", "b", "c", "d"], ["a", "b", "c"], ["b", "c", "d"], param_bytes=[5, 0, 0, 7], out_bytes=[1, 1, 1, 0])
    out = solve_stage(StageProblem.peer(g, 3), FAST)
    assert out.info["n_stage_booleans"] == 2 * 3
    assert out.objective == 100 * 7 + 1  # a and d apart, one boundary crossed


def test_fractional_weights_are_scaled_and_reported_unscaled():
    ints, unit = integer_weights({"mem_peak": 0.25, "comm_total": 3})
    assert ints["mem_peak"] == 1 and ints["comm_total"] == 12 and unit == Fraction(1, 4)
    p = StageProblem(diamond(), 2, ObjectiveWeights(mem_peak=0.5, comm_total=0.25))
    out = solve_stage(p, FAST)
    ev = evaluate_stages(p, out.assignment)
    assert out.info["weight_unit"] == "1/4" and out.objective == ev.objective  # exact, not approx
    assert isinstance(out.objective, (int, Fraction)) and out.bound == out.objective
