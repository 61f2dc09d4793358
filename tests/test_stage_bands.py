"""Band search for large stage models: the loadless-node LP, band windows, re-balancing, and solve()'s band path."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.baselines.stage import best_baseline, contiguous_params
from incsched.baselines.stage_local import loadless_nodes, place_loadless_nodes
from incsched.evaluate import evaluate_stages
from incsched.generators import layered_dag
from incsched.problems import ObjectiveWeights, StageProblem
from incsched.windows.relax import stage_band_window
from incsched import Tuning, solve
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.stage import solve_stage


def _sparse_params(share: float):
    """Parameter bytes with a share of zeros, as in the ICML'24 peer graphs (more than half zero)."""

    def draw(rng, size):
        return rng.integers(1, 5000, size) * (rng.random(size) < share)

    return draw


def _peer(n: int, K: int, seed: int, share: float = 0.4) -> StageProblem:
    g = layered_dag(n, n_layers=max(2, n // 6), mean_in_degree=2.0, param_bytes=_sparse_params(share), out_bytes=(0, 3), seed=seed)
    return StageProblem.peer(g, n_stages=K, alpha=100)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(6, 40), K=st.integers(2, 5), seed=st.integers(0, 10_000))
def test_loadless_placement_is_the_exact_optimum_over_those_nodes(n, K, seed):
    p = _peer(n, K, seed)
    start = contiguous_params(p)
    placed = place_loadless_nodes(p, start)
    ev = evaluate_stages(p, placed)
    assert ev.feasible, ev.violations
    free = loadless_nodes(p)
    assert np.array_equal(placed[~free], start[~free])  # only loadless nodes move
    # CP-SAT over the same freedom (loaded nodes pinned, loadless ones anywhere) finds nothing better.
    window = (np.where(free, 0, start), np.where(free, K - 1, start))
    out = solve_stage(p, SolverSettings(time_limit=10), window=window)
    assert out.status == "optimal"
    assert ev.objective == out.objective
    assert ev.objective <= evaluate_stages(p, start).objective


def test_loadless_nodes_follow_the_objective():
    p = _peer(30, 3, seed=1)
    zero = p.graph.param_bytes == 0
    assert np.array_equal(loadless_nodes(p), zero)
    compute = StageProblem(p.graph, 3, ObjectiveWeights(mem_peak=1, comm_total=1, compute_peak=1))
    assert not loadless_nodes(compute)[p.graph.time() > 0].any()
    assert np.array_equal(place_loadless_nodes(StageProblem(p.graph, 3, ObjectiveWeights(mem_peak=1)), np.zeros(30, int)), np.zeros(30))


def test_band_window_opens_only_the_band_and_the_roaming_nodes():
    p = _peer(40, 5, seed=2)
    s = contiguous_params(p)
    roaming = loadless_nodes(p)
    lo, hi = stage_band_window(p, s, 1, 2, roaming)
    inside = (s >= 1) & (s <= 2) & ~roaming
    assert np.all((lo <= s) & (s <= hi))
    assert np.all(lo[inside] == 1) and np.all(hi[inside] == 2)
    held = ~inside & ~roaming
    assert np.array_equal(lo[held], s[held]) and np.array_equal(hi[held], s[held])
    assert np.all(lo[roaming] == 0) and np.all(hi[roaming] == 4)


@pytest.fixture
def band_path():
    """Tuning that routes every inc-ilp stage solve through the band search, as graphs of thousands of nodes are."""
    return Tuning(stage_band_min_pairs=0, stage_band_work=0.2)


@pytest.mark.slow
def test_band_search_improves_the_incumbent_and_claims_nothing_unproven(band_path):
    p = _peer(80, 4, seed=5)
    incumbent = evaluate_stages(p, best_baseline(p)[1]).objective
    r = solve(p, "inc-ilp", time_limit=1.5, tuning=band_path)
    ev = evaluate_stages(p, r.stages)
    assert ev.feasible and ev.objective == r.objective <= incumbent
    assert r.lower_bound <= r.objective
    phases = [w["phase"] for w in r.provenance["steps"]]
    assert "bands" in phases
    if r.status == "optimal":
        assert r.objective == r.lower_bound or "full" in phases
    else:
        assert r.status == "feasible"  # bands never make a window optimum


@pytest.mark.slow
def test_rebalance_brings_the_peak_near_the_average(band_path):
    p = _peer(150, 4, seed=9, share=0.6)
    average = -(-int(p.graph.param_bytes.sum()) // 4)
    # A level split is badly balanced: its peak is half as much again as the average.
    assert evaluate_stages(p, solve(p, "alap").stages).mem_peak > 1.5 * average
    r = solve(p, "inc-ilp", time_limit=1, preschedule="alap", tuning=band_path)
    record = next(w for w in r.provenance["steps"] if w["phase"] == "rebalance")
    assert record["mem_excess"] <= 0.02 * average
    assert r.terms["mem_peak"] <= average + record["mem_excess"]


@pytest.mark.slow
def test_band_search_is_byte_identical_in_deterministic_mode(band_path):
    p = _peer(80, 4, seed=3)
    a = solve(p, "inc-ilp", time_limit=60, work_limit=1, seed=3, tuning=band_path)
    b = solve(p, "inc-ilp", time_limit=60, work_limit=1, seed=3, tuning=band_path)
    assert a.reproducible and a.stop_reason in ("work", "optimal")
    dump = lambda r: json.dumps(r.to_json(timing=False), sort_keys=True)  # noqa: E731
    assert dump(a) == dump(b)
