"""The throughput objective (issue 17, item 3): `StageProblem.pipeline`, the ``stage_time_peak``
term and the 1F1B ``memory`` capacity, judged against loop references and brute force; the
pipeline baselines; ``incsched solve --objective``."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import MILP_PROOF, brute_force_stages as brute_force

from incsched.bounds import stage_lower_bound, stage_term_bounds
from incsched.evaluate.stage import evaluate_stages
from incsched.graph import CompGraph
from incsched.problems.stage import ObjectiveWeights, ProblemError, StageProblem
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.stage import solve_stage

FAST = SolverSettings(time_limit=5.0, deterministic=True)


@st.composite
def pipeline_problems(draw, max_nodes: int = 7, max_stages: int = 3, memory: bool = True):
    """Small DAGs with compute times, outputs and parameters; one tick a millisecond; sends of 0-4 ticks."""
    n = draw(st.integers(1, max_nodes))
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if draw(st.floats(0, 1)) < 0.35]
    out = draw(st.lists(st.sampled_from([0, 2, 3, 8]), min_size=n, max_size=n))
    # An edge carries its producer's output, or nothing (a control edge that sends nothing).
    ebytes = [out[u] * draw(st.sampled_from([0, 1, 1])) for u, _ in edges]
    g = CompGraph(
        [f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges],
        param_bytes=draw(st.lists(st.sampled_from([0, 1, 5, 20]), min_size=n, max_size=n)),
        out_bytes=out, edge_bytes=ebytes,
        compute_time={"cpu": draw(st.lists(st.sampled_from([0.0, 1e-3, 3e-3, 7e-3]), min_size=n, max_size=n))},
        name="random",
    )
    K = draw(st.integers(1, max_stages))
    M = draw(st.integers(1, 4))
    kwargs = {}
    if memory and draw(st.booleans()):
        kwargs["memory"] = draw(st.integers(10, 120))
    if memory and draw(st.booleans()):
        kwargs["capacity"] = draw(st.integers(5, 40))  # parameters alone, beside the memory
    if draw(st.booleans()):
        kwargs["stage_speed"] = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=K, max_size=K))
    return StageProblem.pipeline(g, K, bandwidth=draw(st.sampled_from([None, 1000.0, 2000.0])), micro_batches=M,
                                 time_unit=1e-3, **kwargs)


def reference(problem: StageProblem, stages: list[int]) -> tuple[list[int], list[int]]:
    """Stage times (ticks) and memory (bytes) by plain loops over the model's written rule."""
    g, K = problem.graph, problem.n_stages
    M = problem.micro_batches
    time = [0] * K
    memory = [0] * K
    speed = problem.stage_speed or [1.0] * K
    for v in range(g.n_nodes):
        k = stages[v]
        time[k] += round(float(g.time("cpu")[v]) / speed[k] / problem.time_unit)
        memory[k] += int(g.param_bytes[v]) + min(K - k, M) * int(g.out_bytes[v])
    for u in range(g.n_nodes):
        readers = [stages[g.dst[e]] for e in range(g.n_edges) if g.src[e] == u and g.edge_bytes[e] > 0]
        for k in range(K):
            if stages[u] <= k < max(readers, default=-1):
                if problem.bandwidth is not None:  # the decimals the floats print as, half to even
                    time[k] += round(Fraction(int(g.out_bytes[u])) / Fraction(repr(problem.bandwidth)) / Fraction(repr(problem.time_unit)))
    return time, memory


@pytest.mark.slow
@given(problem=pipeline_problems(), data=st.data())
@settings(max_examples=60, deadline=None)
def test_evaluator_matches_the_written_model(problem, data):
    g, K = problem.graph, problem.n_stages
    stages = sorted(data.draw(st.lists(st.integers(0, K - 1), min_size=g.n_nodes, max_size=g.n_nodes)))
    ev = evaluate_stages(problem, stages)
    time, memory = reference(problem, stages)
    assert ev.stage_time.tolist() == time and ev.stage_time_peak == max(time)
    assert list(ev.stage_memory) == memory
    params = [sum(int(g.param_bytes[v]) for v in range(g.n_nodes) if stages[v] == k) for k in range(K)]
    assert ev.feasible == ((problem.memory is None or all(m <= c for m, c in zip(memory, problem.memory)))
                           and (problem.capacity is None or all(m <= c for m, c in zip(params, problem.capacity))))
    assert ev.objective == max(time) and ev.terms["stage_time_peak"] == max(time)
    assert ev.throughput == (pytest.approx(1.0 / ev.stage_time_peak_s) if ev.stage_time_peak_s > 0 else math.inf)


@pytest.mark.slow
@given(pipeline_problems(max_nodes=6))
@settings(max_examples=30, deadline=None)
def test_cpsat_optimum_and_bound_match_brute_force(problem):
    out = solve_stage(problem, FAST)
    best = brute_force(problem)
    if best is None:
        assert out.status == "infeasible"
        return
    assert out.status == "optimal" and out.objective == best
    ev = evaluate_stages(problem, out.assignment)
    assert ev.feasible and ev.objective == out.objective
    assert stage_lower_bound(problem) <= best
    assert stage_term_bounds(problem)["stage_time_peak"] <= best


@pytest.mark.slow
@given(pipeline_problems(max_nodes=6))
@settings(max_examples=15, deadline=None)
def test_solve_certifies_the_brute_force_optimum(problem):
    from incsched.front_door import solve

    r = solve(problem, time_limit=5)
    best = brute_force(problem)
    if best is None:
        assert r.status == "infeasible"
        return
    assert r.status == "optimal" and r.objective == best == r.lower_bound


def test_the_send_model_on_a_diamond():
    # a -> b, a -> c, b -> d, c -> d; a's 100 bytes read on stages 1 and 2 are sent by stages 0 and 1, once each.
    g = CompGraph(["a", "b", "c", "d"], ["a", "a", "b", "c"], ["b", "c", "d", "d"], param_bytes=[1, 2, 3, 4],
                  out_bytes=[100, 10, 10, 1], compute_time={"cpu": [1e-3, 2e-3, 3e-3, 4e-3]})
    p = StageProblem.pipeline(g, 3, bandwidth=1e5, micro_batches=2, time_unit=1e-3)
    ev = evaluate_stages(p, [0, 1, 2, 2])
    assert ev.stage_send.tolist() == [1, 1, 0]  # a to b (and on to c): one tick of 100 bytes each hop; b's 10 bytes round to 0
    assert ev.stage_time.tolist() == [2, 3, 7]
    assert ev.stage_memory == (1 + 2 * 100, 2 + 2 * 10, 7 + 1 * 11)  # min(K - k, M) micro-batches in flight
    assert ev.throughput == pytest.approx(1 / (7e-3 + 2e-4 * 0 + 0.0))


def test_default_objective_terms_are_unchanged():
    g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[10, 30], out_bytes=[5, 0])
    ev = evaluate_stages(StageProblem.peer(g, 2), [0, 1])
    assert list(ev.terms) == ["mem_peak", "comm_total", "comm_peak", "compute_peak", "spill"]
    assert ev.objective == 3001


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(bandwidth=-1.0), "bandwidth must be a positive"),
        (dict(bandwidth=float("nan")), "bandwidth must be a positive"),
        (dict(bandwidth=0), "bandwidth must be a positive"),
        (dict(micro_batches=0), "micro_batches must be a whole number >= 1"),
        (dict(micro_batches=2.5), "micro_batches must be a whole number >= 1"),
        (dict(memory=-5), "memory of stage 0 is -5"),
        (dict(memory=float("nan")), "memory of stage 0 is nan"),
        (dict(memory=[10, 20, 30]), "memory has 3 entries for 2 stages"),
    ],
)
def test_bad_pipeline_input_is_refused_naming_it(kwargs, message):
    g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[10, 30], out_bytes=[5, 0])
    with pytest.raises(ProblemError, match=message):
        StageProblem.pipeline(g, 2, **kwargs)


def test_memory_needs_micro_batches():
    g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[10, 30], out_bytes=[5, 0])
    with pytest.raises(ProblemError, match="needs micro_batches"):
        StageProblem(g, 2, ObjectiveWeights(stage_time_peak=1), memory=100)


def test_a_memory_no_assignment_meets_is_infeasible_naming_the_node():
    from incsched.front_door import solve

    g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[10, 30], out_bytes=[50, 0])
    # a needs 10 + 50 bytes even on the last stage (one micro-batch in flight there).
    p = StageProblem.pipeline(g, 2, memory=59, micro_batches=4)
    assert "node 'a' needs 60 bytes" in p.infeasibility()
    r = solve(p, time_limit=5)
    assert r.status == "infeasible" and "node 'a'" in r.reason
    # Each node fits a stage of 44 bytes alone, but 60 parameter and 40 activation bytes do not fit two.
    g3 = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], param_bytes=[20, 40, 0], out_bytes=[20, 0, 20])
    assert "exceed the 2 stages' total memory of 88 bytes" in StageProblem.pipeline(g3, 2, memory=44, micro_batches=1).infeasibility()


def test_cpsat_keeps_the_memory_capacity_that_moves_the_split():
    # A chain; stage 0 keeps 2 micro-batches of activations, stage 1 one: memory pushes heavy outputs late.
    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], param_bytes=[0, 0, 0], out_bytes=[10, 10, 10],
                  compute_time={"cpu": [1e-3, 1e-3, 1e-3]})
    free = StageProblem.pipeline(g, 2, micro_batches=2, time_unit=1e-3)
    tight = StageProblem.pipeline(g, 2, memory=20, micro_batches=2, time_unit=1e-3)
    assert solve_stage(free, FAST).objective == 2
    out = solve_stage(tight, FAST)
    assert out.status == "optimal" and out.objective == 2 and out.assignment.tolist() == [0, 1, 1]
    assert evaluate_stages(tight, out.assignment).stage_memory == (20, 20)


@given(pipeline_problems(max_nodes=5))
@settings(max_examples=15, deadline=None)
def test_milp_models_the_pipeline_and_finds_the_brute_force_optimum(problem):
    # The sends and the slowest stage as epigraph rows (its cross-check of CP-SAT on the training step).
    from incsched.solvers.milp.stage import solve_stage_milp

    out, best = solve_stage_milp(problem, MILP_PROOF), brute_force(problem)
    if best is None:
        assert out.status == "infeasible"
        return
    assert out.status == "optimal" and out.objective == best == evaluate_stages(problem, out.assignment).objective


def test_milp_refuses_recompute_inputs_in_one_line():
    from incsched.solvers.milp.stage import solve_stage_milp

    g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[10, 30], out_bytes=[5, 0])
    p = StageProblem.pipeline(g, 2, memory=10**6, mode="training", recompute=True)
    with pytest.raises(ProblemError, match="does not model the inputs a stage keeps under recompute") as err:
        solve_stage_milp(p, FAST)
    assert "\n" not in str(err.value)


def test_json_round_trip_keeps_the_pipeline_fields():
    g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[10, 30], out_bytes=[5, 0])
    p = StageProblem.pipeline(g, 2, memory=[100, 200], bandwidth=1e9, micro_batches=3)
    q = StageProblem.from_json(p.to_json())
    assert (q.memory, q.bandwidth, q.micro_batches, q.weights) == ((100, 200), 1e9, 3, p.weights)
    assert math.isclose(q.time_unit, p.time_unit)


# ---------------------------------------------------------------------- baselines


def contiguous_optimum(problem: StageProblem, order) -> int | None:
    """Least evaluated objective over every cut of ``order`` into K contiguous runs (None: none fits)."""
    n, K = len(order), problem.n_stages
    best = None
    for inner in itertools.combinations_with_replacement(range(n + 1), K - 1):
        cuts = [0, *inner, n]
        stages = np.empty(n, dtype=np.int64)
        for k in range(K):
            stages[order[cuts[k]:cuts[k + 1]]] = k
        ev = evaluate_stages(problem, stages)
        if ev.feasible and (best is None or ev.objective < best):
            best = ev.objective
    return best


@pytest.mark.slow
@given(pipeline_problems(max_nodes=8, max_stages=4))
@settings(max_examples=60, deadline=None)
def test_pipeline_dp_is_the_best_contiguous_split(problem):
    from incsched.baselines.stage import pipeline_dp

    g = problem.graph
    stages = pipeline_dp(problem)
    ev = evaluate_stages(problem, stages)
    assert np.all(stages[g.src] <= stages[g.dst])
    options = [contiguous_optimum(problem, g.topological_order(depth_first=d)) for d in (False, True)]
    options = [o for o in options if o is not None]
    if options:
        assert ev.feasible and ev.objective == min(options)


@pytest.mark.slow
@given(pipeline_problems(max_nodes=9, max_stages=4, memory=False))
@settings(max_examples=30, deadline=None)
def test_the_published_splits_are_contiguous_and_as_documented(problem):
    from incsched.baselines.stage import STAGE_BASELINES, contiguous_compute, contiguous_params

    g, K = problem.graph, problem.n_stages
    order = g.topological_order()
    counts = np.bincount(STAGE_BASELINES["uniform"](problem)[order], minlength=K)
    assert counts.tolist() == [g.n_nodes // K + (k < g.n_nodes % K) for k in range(K)]
    assert np.array_equal(STAGE_BASELINES["balance_by_time"](problem), contiguous_compute(problem))
    assert np.array_equal(STAGE_BASELINES["parameters"](problem), contiguous_params(problem))
    for name in ("uniform", "balance_by_time", "parameters"):
        s = STAGE_BASELINES[name](problem)
        assert np.all(np.diff(s[order]) >= 0), name  # one contiguous run per stage, in order
    s = STAGE_BASELINES["pipeline_dp"](problem)  # contiguous in Kahn's order or the depth-first one
    assert any(np.all(np.diff(s[g.topological_order(depth_first=d)]) >= 0) for d in (False, True))


def test_solve_runs_each_pipeline_baseline_by_name():
    from incsched.front_door import solve

    g = CompGraph.load("data/graphs/resnet18.json.gz")
    p = StageProblem.pipeline(g, 2, bandwidth=1e9)
    values = {m: solve(p, m, time_limit=5).objective for m in ("balance_by_time", "uniform", "parameters", "pipeline_dp")}
    assert values["pipeline_dp"] == min(values.values())


# ---------------------------------------------------------------------- CLI


def test_cli_solves_the_throughput_objective_and_prints_its_figures(tmp_path, capsys):
    from incsched.cli import main
    from incsched.result import Result

    out = tmp_path / "r.json"
    assert main(["solve", "resnet18", "--stages", "2", "--objective", "throughput", "--bandwidth", "1e9", "--memory", "400000000",
                 "--time-limit", "10", "-q", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    r = Result.load(out)
    assert r.terms["stage_time_peak"] == r.objective and r.terms["throughput"] == pytest.approx(1 / r.terms["stage_time_peak_s"])
    assert max(r.terms["stage_memory"]) <= 400_000_000
    assert "throughput   " in text and "micro-batches/s" in text


def test_cli_memory_objective_is_peak_parameters_alone(tmp_path):
    from incsched.cli import main
    from incsched.result import Result

    out = tmp_path / "r.json"
    assert main(["solve", "resnet18", "--stages", "2", "--objective", "memory", "--time-limit", "10", "-q", "--json", str(out)]) == 0
    r = Result.load(out)
    assert r.status == "optimal" and r.objective == r.terms["mem_peak"] and "stage_time_peak" not in r.terms


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--objective", "throughput", "--weights", "mem_peak=1"], "--weights and --objective throughput each name an objective"),
        (["--memory", "1000"], "--memory (parameters plus activations in flight) belongs to --objective throughput"),
    ],
)
def test_cli_refuses_mixed_objectives_in_one_line(extra, message, capsys):
    from incsched.cli import main

    assert main(["solve", "resnet18", "--stages", "2", "--time-limit", "5", "-q", *extra]) != 0
    assert message in capsys.readouterr().err


def test_loadless_nodes_move_nothing_of_the_pipeline_model():
    from incsched.baselines.stage_local import loadless_nodes

    # a (compute) -> b (a view: no time, no parameters) -> c; b's output costs sends, a's does not.
    g = CompGraph(["a", "b", "c", "d"], ["a", "b", "a"], ["b", "c", "d"], param_bytes=[0, 0, 0, 0], out_bytes=[0, 1000, 0, 0],
                  edge_bytes=[0, 1000, 0], compute_time={"cpu": [1e-3, 0.0, 0.0, 0.0]})
    free = StageProblem(g, 2, ObjectiveWeights(comm_total=1), time_unit=1e-3)
    assert loadless_nodes(free).tolist() == [True, True, True, True]
    timed = StageProblem.pipeline(g, 2, bandwidth=1e6, time_unit=1e-3)
    assert loadless_nodes(timed).tolist() == [False, False, False, True]  # a computes, b sends, c reads b
    assert loadless_nodes(StageProblem.pipeline(g, 2, memory=10**6, time_unit=1e-3)).tolist() == [False, False, True, True]


@pytest.mark.slow
def test_a_hint_of_the_optimum_is_complete_and_kept():
    # Every variable hinted (sends included) from an optimal split: CP-SAT starts from it.
    from incsched.solvers.cpsat.stage import _StageModel

    g = CompGraph.load("data/graphs/resnet18.json.gz")
    p = StageProblem.pipeline(g, 3, bandwidth=1e9, memory=10**8)
    out = solve_stage(p, FAST)
    model = _StageModel(p, p.allowed_stages(), p.weights.scaled()[0])
    model.add_hint(out.assignment)
    hinted = {h for h in model.model.Proto().solution_hint.vars}
    assert model.sends and all(v.Index() in hinted for v in model.sends.values())
    again = solve_stage(p, FAST, hint=out.assignment)
    assert again.status == "optimal" and again.objective == out.objective


def test_a_vanishing_bandwidth_is_refused_in_one_line():
    """Issue 24: 1e-300 bytes/s overflowed while formatting its own refusal."""
    from incsched.errors import ProblemError
    from incsched.formats import load_graph

    p = StageProblem.pipeline(load_graph("resnet18"), n_stages=2, bandwidth=1e-300, micro_batches=4)
    with pytest.raises(ProblemError, match=r"come to about 2\*\*\d+ ticks .* beyond the supported 2\*\*61"):
        p.send_ticks
