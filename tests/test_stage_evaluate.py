"""The stage evaluator: hand-computed terms, named violations, and agreement with a loop-by-loop
restatement of the definitions on random instances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_stage_problem import diamond, stage_instances

from incsched.evaluate.stage import evaluate_stages
from incsched.graph import CompGraph
from incsched.problems.stage import ObjectiveWeights, ProblemError, StageProblem


def test_diamond_terms_by_hand():
    # a(10) -> b(20), a -> c(30), b -> d(40), c -> d; out bytes a 4, b 8, c 8.
    weights = ObjectiveWeights(mem_peak=1, comm_total=10, comm_peak=100, compute_peak=1000, spill=10000)
    p = StageProblem(diamond(), 3, weights, comm="bytes", spill_capacity=35, time_unit=1e-3)
    ev = evaluate_stages(p, [0, 0, 1, 2])
    # Stage 0 {a, b}: 30 bytes, 3 ms; stage 1 {c}: 30 bytes, 3 ms; stage 2 {d}: 40 bytes, 4 ms.
    assert ev.feasible and ev.violations == ()
    assert ev.stage_mem.tolist() == [30, 30, 40]
    assert ev.stage_compute.tolist() == [3, 3, 4]
    assert ev.mem_peak == 40 and ev.compute_peak == 4
    assert ev.compute_peak_s == pytest.approx(4e-3)
    # a->c crosses boundary 0 (4 B), b->d crosses 0 and 1 (8 B each), c->d crosses 1 (8 B).
    assert ev.boundary_comm.tolist() == [12, 16]
    assert ev.comm_total == 4 + 16 + 8
    assert ev.comm_peak == 16
    assert ev.spill == 5
    assert ev.objective == 40 + 10 * 28 + 100 * 16 + 1000 * 4 + 10000 * 5


def test_peer_objective_counts_only_data_carrying_edges():
    g = CompGraph(["a", "b", "c"], ["a", "a", "b"], ["b", "c", "c"], param_bytes=[5, 6, 7], edge_bytes=[0, 50, 9])
    p = StageProblem.peer(g, n_stages=3, alpha=100)
    ev = evaluate_stages(p, [0, 1, 2])
    # a->b carries nothing; a->c crosses 2 boundaries, b->c one.
    assert ev.comm_total == 3 and ev.mem_peak == 7
    assert ev.objective == 703


def test_stage_speed_divides_compute_time():
    p = StageProblem(diamond(), 2, ObjectiveWeights(compute_peak=1), stage_speed=[1.0, 4.0], time_unit=1e-4)
    ev = evaluate_stages(p, [0, 1, 1, 1])
    # Stage 1 runs b, c, d (9 ms) four times faster: 22.5 ticks of 0.1 ms, rounded per node.
    assert ev.stage_compute.tolist() == [10, 5 + 8 + 10]
    assert ev.stage_compute_s.tolist() == pytest.approx([1e-3, 2.25e-3])


def test_backward_edge_is_named():
    ev = evaluate_stages(StageProblem.peer(diamond(), 3), [1, 0, 1, 2])
    assert not ev.feasible and ev.n_violations == 1
    assert "'a' -> 'b'" in ev.violations[0] and "1 -> 0" in ev.violations[0]
    assert ev.objective is not None  # terms still computed for a precedence violation


def test_out_of_range_stage_is_named_and_leaves_terms_empty():
    ev = evaluate_stages(StageProblem.peer(diamond(), 2), [0, 0, 1, 2])
    assert not ev.feasible and "'d'" in ev.violations[0] and "outside 0..1" in ev.violations[0]
    assert ev.objective is None and ev.mem_peak is None


def test_capacity_violation_names_the_stage():
    assert evaluate_stages(StageProblem.peer(diamond(), 2, capacity=60), [0, 0, 0, 1]).feasible  # at capacity
    ev = evaluate_stages(StageProblem.peer(diamond(), 2, capacity=59), [0, 0, 0, 1])
    assert not ev.feasible and ev.violations == ("stage 0 holds 60 parameter bytes, over its capacity 59",)


def test_many_violations_are_counted_not_all_listed():
    n = 200
    g = CompGraph([f"v{i}" for i in range(n)], list(range(n - 1)), list(range(1, n)))
    ev = evaluate_stages(StageProblem.peer(g, 2), np.tile([1, 0], n // 2))
    assert ev.n_violations == 100 and len(ev.violations) == 51 and "50 more" in ev.violations[-1]


@pytest.mark.parametrize("bad", [[0, 0, 0], [[0, 0, 0, 0]], [0.5, 0, 0, 0], ["a", "b", "c", "d"]])
def test_malformed_assignment_raises(bad):
    with pytest.raises(ProblemError):
        evaluate_stages(StageProblem.peer(diamond(), 2), bad)


def reference_terms(problem: StageProblem, stages) -> dict:
    """The stage objective restated with plain loops, straight from the problem's definition."""
    g, K = problem.graph, problem.n_stages
    speed = problem.stage_speed or [1.0] * K
    times = g.time(problem.device_kind)
    mem, ticks = [0] * K, [0] * K
    for v in range(g.n_nodes):
        mem[stages[v]] += int(g.param_bytes[v])
        ticks[stages[v]] += int(round(times[v] / speed[stages[v]] / problem.time_unit))
    crossing = [0] * max(K - 1, 0)
    total = 0
    for e in range(g.n_edges):
        units = int(g.edge_bytes[e]) if problem.comm == "bytes" else int(g.edge_bytes[e] > 0)
        u, v = stages[g.src[e]], stages[g.dst[e]]
        total += units * (v - u)
        for b in range(u, v):
            crossing[b] += units
    spill = 0
    if problem.spill_capacity is not None:
        spill = sum(max(0, mem[k] - problem.spill_capacity[k]) for k in range(K))
    return dict(mem_peak=max(mem), comm_total=total, comm_peak=max(crossing, default=0), compute_peak=max(ticks), spill=spill)


@pytest.mark.slow
@given(data=st.data(), problem=stage_instances())
@settings(max_examples=60, deadline=None)
def test_evaluator_agrees_with_loop_reference(data, problem):
    g, K = problem.graph, problem.n_stages
    # A precedence-feasible assignment: non-decreasing stages along the index order (edges go up).
    stages = np.sort(data.draw(st.lists(st.integers(0, K - 1), min_size=g.n_nodes, max_size=g.n_nodes)))
    ev = evaluate_stages(problem, stages)
    ref = reference_terms(problem, stages.tolist())
    assert ev.terms == ref
    w = problem.weights.as_dict()
    assert ev.objective == pytest.approx(sum(w[k] * ref[k] for k in ref))
    cap = problem.capacity
    assert ev.feasible == (cap is None or all(m <= c for m, c in zip(ev.stage_mem.tolist(), cap)))
