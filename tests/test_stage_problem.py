"""StageProblem: validation, infeasibility reasons, stage domains, integer time units, JSON.

Also home of `stage_instances`, the hypothesis strategy of small random stage problems that the
other stage test files import.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.errors import FormatError
from incsched.graph import CompGraph
from incsched.problems.stage import InfeasibleProblem, ObjectiveWeights, ProblemError, StageProblem


@st.composite
def stage_graphs(draw, min_nodes: int = 1, max_nodes: int = 12):
    """Random DAGs: edges only from lower to higher index, costs small enough to reason about."""
    n = draw(st.integers(min_nodes, max_nodes))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges = [e for e in pairs if draw(st.floats(0, 1)) < 0.3]
    m = len(edges)
    params = draw(st.lists(st.sampled_from([0, 0, 1, 5, 20, 37, 100]), min_size=n, max_size=n))
    ebytes = draw(st.lists(st.sampled_from([0, 1, 8, 64]), min_size=m, max_size=m))
    times = draw(st.lists(st.sampled_from([0.0, 1e-3, 2.5e-3, 7e-3]), min_size=n, max_size=n))
    return CompGraph(
        [f"n{i}" for i in range(n)],
        [i for i, _ in edges],
        [j for _, j in edges],
        param_bytes=params,
        edge_bytes=ebytes,
        compute_time={"cpu": times},
        name="random",
    )


@st.composite
def stage_instances(draw, min_nodes: int = 1, max_nodes: int = 12, max_stages: int = 4, capacity: bool = True):
    """Random stage problems: any weight mix, both comm modes, optional capacity and speeds."""
    g = draw(stage_graphs(min_nodes, max_nodes))
    K = draw(st.integers(1, max_stages))
    w = draw(
        st.sampled_from(
            [
                dict(mem_peak=100, comm_total=1),
                dict(mem_peak=1),
                dict(comm_total=1, comm_peak=3),
                dict(compute_peak=1, comm_total=2),
                dict(mem_peak=2, spill=5, comm_peak=1),
                dict(mem_peak=1, comm_total=1, comm_peak=1, compute_peak=1, spill=1),
            ]
        )
    )
    total = int(g.param_bytes.sum())
    kwargs = {}
    if capacity and draw(st.booleans()):
        kwargs["capacity"] = max(int(g.param_bytes.max()), math.ceil(total / K) + draw(st.integers(0, 60)))
    if "spill" in w:
        kwargs["spill_capacity"] = math.ceil(total / K) // 2
    if draw(st.booleans()):
        kwargs["stage_speed"] = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=K, max_size=K))
    return StageProblem(
        g, K, ObjectiveWeights(**w), comm=draw(st.sampled_from(["bytes", "edges"])), time_unit=1e-3, **kwargs
    )


def diamond() -> CompGraph:
    return CompGraph(
        ["a", "b", "c", "d"],
        ["a", "a", "b", "c"],
        ["b", "c", "d", "d"],
        param_bytes=[10, 20, 30, 40],
        out_bytes=[4, 8, 8, 0],
        compute_time={"cpu": [1e-3, 2e-3, 3e-3, 4e-3]},
        name="diamond",
    )


def test_peer_constructor_sets_the_icml24_objective():
    p = StageProblem.peer(diamond(), n_stages=3, alpha=7)
    assert p.n_stages == 3 and p.comm == "edges"
    assert p.weights == ObjectiveWeights(mem_peak=7, comm_total=1)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(n_stages=0), "n_stages"),
        (dict(n_stages=2.5), "n_stages"),
        (dict(n_stages=2, comm="wires"), "comm"),
        (dict(n_stages=2, capacity=[10, 20, 30]), "capacity has 3 entries"),
        (dict(n_stages=2, capacity=-1), "capacity of stage 0"),
        (dict(n_stages=2, stage_speed=[1.0, 0.0]), "stage_speed of stage 1"),
        (dict(n_stages=2, weights=ObjectiveWeights(spill=1)), "spill_capacity"),
        (dict(n_stages=2, time_unit=0.0), "time_unit"),
    ],
)
def test_malformed_problems_are_rejected_with_the_field_named(kwargs, words):
    with pytest.raises(ProblemError, match=words):
        StageProblem(diamond(), **kwargs)


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf"), "1", True])
def test_bad_weights_are_rejected(bad):
    with pytest.raises(ProblemError, match="comm_peak"):
        ObjectiveWeights(comm_peak=bad)


def test_node_larger_than_every_capacity_is_named():
    p = StageProblem.peer(diamond(), n_stages=4, capacity=35)
    reason = p.infeasibility()
    assert reason is not None and "'d'" in reason and "40" in reason
    with pytest.raises(InfeasibleProblem, match="'d'"):
        p.check_feasible()


def test_total_parameters_over_total_capacity_is_infeasible():
    p = StageProblem.peer(diamond(), n_stages=2, capacity=45)  # 100 bytes, 90 of room
    assert "exceed" in p.infeasibility()
    assert StageProblem.peer(diamond(), n_stages=3, capacity=45).infeasibility() is None


def test_allowed_stages_propagate_windows_along_edges():
    p = StageProblem.peer(diamond(), n_stages=4)
    lo, hi = np.array([2, 0, 0, 0]), np.array([3, 3, 3, 2])
    allowed = p.allowed_stages((lo, hi))
    # a >= 2 pushes b, c, d up to >= 2; d <= 2 pulls b, c (and a) down to <= 2.
    expected = np.zeros((4, 4), dtype=bool)
    expected[:, 2] = True
    assert np.array_equal(allowed, expected)


def test_allowed_stages_respect_per_stage_capacity():
    p = StageProblem.peer(diamond(), n_stages=3, capacity=[100, 25, 100])
    allowed = p.allowed_stages()
    assert allowed[:, 1].tolist() == [True, True, False, False]


def test_window_that_leaves_a_node_no_stage_names_it():
    p = StageProblem.peer(diamond(), n_stages=3)
    with pytest.raises(InfeasibleProblem, match="node 'd'.*predecessor '[bc]'"):
        p.allowed_stages((np.array([2, 0, 0, 0]), np.array([2, 2, 2, 1])))


def test_edge_comm_units():
    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], edge_bytes=[0, 300])
    assert StageProblem(g, 2, comm="edges").edge_comm.tolist() == [0, 1]
    assert StageProblem(g, 2, comm="bytes").edge_comm.tolist() == [0, 300]


@given(scale=st.floats(1e-9, 1e3), n=st.integers(1, 50), speed=st.sampled_from([None, (0.5, 2.0)]))
@settings(max_examples=40, deadline=None)
def test_automatic_time_unit_gives_at_least_a_million_ticks(scale, n, speed):
    times = np.linspace(1.0, 2.0, n) * scale
    g = CompGraph([f"v{i}" for i in range(n)], [], [], compute_time={"cpu": times})
    p = StageProblem(g, 2, stage_speed=speed)
    total_on_slowest = times.sum() / (min(speed) if speed else 1.0)
    assert 1e6 <= total_on_slowest / p.time_unit < 2.5e6 * (1 + 1e-9)
    mant = p.time_unit / 10.0 ** math.floor(math.log10(p.time_unit))
    assert any(abs(mant - m) < 1e-6 for m in (1.0, 2.0, 5.0))  # a round 1/2/5 x 10^k tick
    # Every node's ticks are its time in units, rounded.
    expected = times / (p.stage_speed[0] if speed else 1.0) / p.time_unit
    assert np.abs(p.node_ticks[:, 0] - expected).max() <= 0.5 + 1e-6


@pytest.mark.slow
@given(stage_instances())
@settings(max_examples=25, deadline=None)
def test_json_round_trip(tmp_path_factory, problem):
    path = tmp_path_factory.mktemp("p") / "problem.json.gz"
    problem.save(path)
    again = StageProblem.load(path)
    assert again == problem
    assert again.to_json() == problem.to_json()


def test_from_json_rejects_other_formats_and_versions():
    data = StageProblem.peer(diamond(), 2).to_json()
    with pytest.raises(FormatError, match="not a stage problem"):
        StageProblem.from_json({**data, "format": "incsched.graph"})
    with pytest.raises(FormatError, match="version"):
        StageProblem.from_json({**data, "version": 99})
    with pytest.raises(FormatError, match="n_stages"):
        StageProblem.from_json({k: v for k, v in data.items() if k != "n_stages"})
