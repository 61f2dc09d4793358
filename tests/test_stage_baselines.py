"""Stage pre-schedulers: always precedence-feasible, DeepSpeed's split optimal on chains, and the
contiguous DP never worse than the split it generalises."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_stage_problem import stage_instances

from incsched.baselines.stage import STAGE_BASELINES, best_baseline, contiguous_params, pipedream_dp
from incsched.evaluate.stage import evaluate_stages
from incsched.graph import CompGraph
from incsched.problems.stage import ObjectiveWeights, StageProblem


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(STAGE_BASELINES))
@given(problem=stage_instances(max_nodes=14, max_stages=5), seed=st.integers(0, 3))
@settings(max_examples=30, deadline=None)
def test_every_baseline_is_precedence_feasible(name, problem, seed):
    stages = STAGE_BASELINES[name](problem, seed)
    g = problem.graph
    assert stages.shape == (g.n_nodes,) and stages.dtype.kind == "i"
    assert np.all((stages >= 0) & (stages < problem.n_stages))
    assert np.all(stages[g.src] <= stages[g.dst])


@pytest.mark.slow
@given(params=st.lists(st.integers(0, 50), min_size=1, max_size=9), K=st.integers(1, 4))
@settings(max_examples=60, deadline=None)
def test_contiguous_params_is_optimal_for_mem_peak_on_chains(params, K):
    n = len(params)
    g = CompGraph([f"v{i}" for i in range(n)], list(range(n - 1)), list(range(1, n)), param_bytes=params)
    p = StageProblem(g, K, ObjectiveWeights(mem_peak=1))
    # On a chain the feasible assignments are exactly the non-decreasing ones: enumerate them all.
    best = min(
        evaluate_stages(p, np.asarray(s)).mem_peak
        for s in itertools.combinations_with_replacement(range(K), n)
    )
    assert evaluate_stages(p, contiguous_params(p)).mem_peak == best


@pytest.mark.slow
@given(stage_instances(max_nodes=14, max_stages=5, capacity=False))
@settings(max_examples=40, deadline=None)
def test_pipedream_dp_never_worse_than_contiguous_params_on_the_peer_objective(problem):
    p = StageProblem.peer(problem.graph, problem.n_stages, alpha=100)
    dp = evaluate_stages(p, pipedream_dp(p)).objective
    assert dp <= evaluate_stages(p, contiguous_params(p)).objective


def test_pipedream_dp_finds_the_cheap_cut_on_two_branches():
    # Two independent chains a0..a3 and b0..b3 of equal weight: the best 2-stage split puts one
    # branch on each stage and crosses no edge; Kahn's order interleaves them, the DFS order does not.
    names = [f"a{i}" for i in range(4)] + [f"b{i}" for i in range(4)]
    src = ["a0", "a1", "a2", "b0", "b1", "b2"]
    dst = ["a1", "a2", "a3", "b1", "b2", "b3"]
    g = CompGraph(names, src, dst, param_bytes=[10] * 8, out_bytes=[1] * 8)
    p = StageProblem.peer(g, 2)
    ev = evaluate_stages(p, pipedream_dp(p))
    assert ev.mem_peak == 40 and ev.comm_total == 0


def test_best_baseline_returns_the_best_by_the_evaluator():
    g = CompGraph(["a", "b", "c", "d"], ["a", "b", "c"], ["b", "c", "d"], param_bytes=[30, 10, 10, 30], out_bytes=[1, 1, 1, 0])
    p = StageProblem.peer(g, 2)
    name, stages = best_baseline(p)
    scores = {k: evaluate_stages(p, f(p, 0)).objective for k, f in STAGE_BASELINES.items()}
    assert evaluate_stages(p, stages).objective == min(scores.values()) == scores[name]
