"""Training mode puts a node on every stage (issue 23): the pipeline that is built has K stages
(split points refuse an empty one), so the K - 1 bubble slots and the stash counts are those of K
stages. The refusal of K above the node count, the evaluator's flag, the exact models, the DP and
every heuristic against it, and an optimum that would otherwise leave stages empty."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import MILP_PROOF, brute_force_stages as brute_force

from incsched.baselines.stage import STAGE_BASELINES, pipeline_dp
from incsched.baselines.stage_local import improve_by_moves
from incsched.bounds.reductions import stage_reduction
from incsched.evaluate.stage import evaluate_stages
from incsched.export.split_points import stage_runs
from incsched.graph import CompGraph
from incsched.problems.stage import ObjectiveWeights, ProblemError, StageProblem
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.stage import solve_stage

FAST = SolverSettings(time_limit=10.0, deterministic=True)


def tied_lm(n_layers: int = 2) -> CompGraph:
    """emb -> h.0 ... -> head, a layer graph whose embedding and head share a 4,000-byte weight."""
    names = ["emb", *[f"h.{i}" for i in range(n_layers)], "head"]
    n = len(names)
    return CompGraph(names, names[:-1], names[1:], param_bytes=[0] * n, out_bytes=[8] * n,
                     compute_time={"cpu": [1e-3] * n}, work_bytes=[0] * n, largest_weight_bytes=[0] * n,
                     shared_weights=[{"name": "tied", "bytes": 4_000, "read_by": ["emb", "head"]}],
                     meta={"granularity": "layer", "modules": {nm: nm for nm in names}, "containers": ["h"]}, name="tied_lm")


def test_more_stages_than_nodes_is_a_one_line_error():
    g = tied_lm(1)  # 3 nodes
    with pytest.raises(ProblemError, match=r"graph 'tied_lm' has 3 nodes for 4 stages: solve with n_stages <= 3$"):
        StageProblem.pipeline(g, 4, micro_batches=4, mode="training")
    StageProblem.pipeline(g, 4, micro_batches=4)  # inference: the extra stages stay empty, as before


def test_the_evaluator_flags_an_empty_stage_in_training_only():
    g = tied_lm()
    train = evaluate_stages(StageProblem.pipeline(g, 3, micro_batches=4, mode="training"), [0, 0, 2, 2])
    assert not train.feasible and train.violations == ("stage 1 is empty: training mode puts a node on every stage",)
    assert evaluate_stages(StageProblem.pipeline(g, 3, micro_batches=4), [0, 0, 2, 2]).feasible


def test_a_slow_sync_no_longer_empties_the_pipeline():
    """At 1e4 B/s the tied weight's 4,000 bytes take 400 ms to sync, more than pipelining saves:
    the optimum over all assignments puts every layer on one stage (no sync), which no split-point
    export can build as K stages. Training mode's optimum uses both stages, brute force agrees, and
    the answer maps onto split points."""
    g = tied_lm()
    p = StageProblem.pipeline(g, 2, micro_batches=4, bandwidth=1e4, time_unit=1e-3, mode="training")
    one_stage = evaluate_stages(p, [0, 0, 0, 0])
    assert not one_stage.feasible
    inference_like = min(evaluate_stages(p, s).objective for s in ([0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 1], [0, 1, 1, 1]))
    assert inference_like == one_stage.objective  # what the objective alone would pick
    best = brute_force(p)
    out = solve_stage(p, FAST)
    assert out.status == "optimal" and out.objective == best > one_stage.objective
    assert sorted(set(out.assignment.tolist())) == [0, 1]
    assert len(stage_runs(g, out.assignment.tolist()).nodes) == 2
    from incsched.front_door import solve

    r = solve(p, time_limit=5)
    assert r.status == "optimal" and r.objective == best
    pulp = pytest.importorskip("pulp")
    assert pulp
    from incsched.solvers.milp.stage import solve_stage_milp

    assert solve_stage_milp(p, MILP_PROOF).objective == best


def test_training_gets_no_reduction_rules():
    # A loadless tail would merge onto its head's stage, emptying the stage it alone holds.
    g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[5, 0], out_bytes=[0, 0])
    inference = StageProblem(g, 2, ObjectiveWeights(mem_peak=1, comm_total=1))
    assert stage_reduction(inference).merges
    train = StageProblem(g, 2, ObjectiveWeights(mem_peak=1, comm_total=1), micro_batches=1, mode="training")
    assert not stage_reduction(train).merges
    out = solve_stage(train, FAST, reduction=stage_reduction(train))
    assert out.status == "optimal" and out.assignment.tolist() == [0, 1] and out.objective == brute_force(train)


@st.composite
def training_problems(draw):
    n = draw(st.integers(1, 7))
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if draw(st.floats(0, 1)) < 0.4]
    g = CompGraph(
        [f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges],
        param_bytes=draw(st.lists(st.sampled_from([0, 1, 5, 20]), min_size=n, max_size=n)),
        out_bytes=draw(st.lists(st.sampled_from([0, 2, 8]), min_size=n, max_size=n)),
        compute_time={"cpu": draw(st.lists(st.sampled_from([0.0, 1e-3, 3e-3]), min_size=n, max_size=n))},
    )
    K = draw(st.integers(1, min(4, n)))
    weights = draw(st.sampled_from([None, ObjectiveWeights(mem_peak=1, comm_total=1), ObjectiveWeights(compute_peak=1)]))
    if weights is None:
        return StageProblem.pipeline(g, K, micro_batches=draw(st.integers(1, 4)), time_unit=1e-3, mode="training")
    return StageProblem(g, K, weights, micro_batches=draw(st.integers(1, 4)), time_unit=1e-3, mode="training")


@given(training_problems())
@settings(max_examples=40, deadline=None)
def test_every_heuristic_and_the_local_search_fill_every_stage(problem):
    g, K = problem.graph, problem.n_stages
    for name, fn in STAGE_BASELINES.items():
        stages = np.asarray(fn(problem, 0))
        assert np.all(stages[g.src] <= stages[g.dst]), name
        assert np.bincount(stages, minlength=K).all(), name
        moved = improve_by_moves(problem, stages)
        assert np.bincount(moved, minlength=K).all() and np.all(moved[g.src] <= moved[g.dst]), name


@given(training_problems())
@settings(max_examples=25, deadline=None)
def test_the_exact_models_and_the_dp_fill_every_stage_at_the_brute_force_optimum(problem):
    best = brute_force(problem)
    out = solve_stage(problem, FAST)
    assert out.status == "optimal" and out.objective == best
    assert np.bincount(out.assignment, minlength=problem.n_stages).all()
    if problem.weights.stage_time_peak > 0:  # the DP's term: no worse than any contiguous split
        assert evaluate_stages(problem, pipeline_dp(problem)).feasible
