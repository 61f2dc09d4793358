"""Tests of the level-chunk bound (`incsched.solvers.cpsat.placement_levels`): never above a proven optimum, above the families on a chain."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from incsched.baselines.placement import critical_path_list
from incsched.bounds import placement_lower_bound
from incsched.evaluate.simulate import simulate
from incsched.generators import bandwidth_for_comm_ratio, chained_matmul
from incsched.inc_ilp.placement import solve_cpsat
from incsched.problems import PlacementProblem
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.placement_levels import level_bound, level_period
from oracles import small_placement_problem
from test_placement_bounds import EXACT, problems

CHUNK = SolverSettings(time_limit=5.0)


def _chain(n_matrices: int = 8) -> PlacementProblem:
    g = chained_matmul(n_matrices, tiles=2, kinds=("cpu",), jitter=0.1, seed=1008)
    return PlacementProblem.identical(g, 4, bandwidth=bandwidth_for_comm_ratio(g, 4.0, "cpu"))


def test_levels_are_the_longest_path_in_edges():
    p = small_placement_problem(4, [(0, 1), (1, 2), (0, 2), (3, 2)], [1, 1, 1, 1], [0, 0, 0, 0])
    assert p.graph.asap_level.tolist() == [0, 1, 2, 0]


@pytest.mark.slow
@given(problems(max_nodes=8, max_devices=3, hetero=True), st.integers(1, 3))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_level_bound_below_proven_optimum(p, stride):
    out = solve_cpsat(p, EXACT)
    assume(out.status == "optimal")
    bound, info = level_bound(p, CHUNK, stride)
    assert bound <= int(out.objective), info


def test_level_bound_below_proven_optimum_on_a_chain_with_one_tick_ops():
    # Every op one tick: the tick each zero-time entry takes in its chunk must be given back.
    n = 7
    p = small_placement_problem(n, [(i, i + 1) for i in range(n - 1)], [1] * n, [0] * n, D=2)
    for stride in (1, 2, 3):
        bound, info = level_bound(p, CHUNK, stride)
        assert bound <= n, (stride, info)
        assert info["proven"]


def test_level_bound_beats_the_families_on_a_two_row_chain():
    p = _chain()
    bound, info = level_bound(p, CHUNK, 4)
    assert info["proven"], info
    assert bound > placement_lower_bound(p) * 1.02
    assert bound <= simulate(p, critical_path_list(p), "ordered").makespan
    # Levels at every fourth depth of 14: three chunks ending on a level, then the sinks'.
    assert [s["depth"] for s in info["steps"]] == [4, 8, 12, None]
    assert sum(s["ticks"] for s in info["steps"]) == bound


def test_level_bound_without_seconds_keeps_each_chunks_simple_bound():
    p = _chain(5)
    bound, info = level_bound(p, CHUNK, 4, seconds=0.0)
    assert not info["proven"] and all(s["optimal"] == 0 for s in info["steps"])
    assert 0 < bound <= level_bound(p, CHUNK, 4)[0]


def test_level_bound_rejects_a_stride_below_one():
    with pytest.raises(ValueError, match="stride"):
        level_bound(_chain(3), CHUNK, 0)


def test_level_period_follows_the_repeating_step():
    from incsched.generators import ffnn

    assert level_period(_chain(5)) == 2  # tile products, then reductions
    g = ffnn(4, tiles=2, kinds=("cpu",))
    assert level_period(PlacementProblem.identical(g, 2, bandwidth=1e9)) == 3  # products, reductions, activations
    assert level_period(small_placement_problem(3, [(0, 1), (0, 2), (1, 2)], [1, 1, 1], [0, 0, 0])) == 1
