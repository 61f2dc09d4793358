"""Exact arithmetic at every scale (issue 12, "Wrong results"): objectives, bounds and capacities in
the problem's own units, checked against an independent brute force in Python ints and fractions.

The brute force enumerates every monotone stage assignment of a tiny graph and prices it with its
own code (weights as `Decimal(repr(w))`, terms as Python ints), sharing nothing with the
evaluator or the solvers.
"""

from __future__ import annotations

import itertools
import time
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incsched.bounds import stage_lower_bound, stage_term_bounds
from incsched.errors import GraphError
from incsched.evaluate.stage import evaluate_stages
from incsched.graph import CompGraph
from incsched.problems.stage import ObjectiveWeights, ProblemError, StageProblem
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.stage import check_model_range, solve_stage

FAST = SolverSettings(time_limit=10.0, deterministic=True)
DATA = Path(__file__).resolve().parent.parent / "data" / "graphs"


# ---------------------------------------------------------------------- the oracle


def brute_force(graph: CompGraph, K: int, weights: dict, comm: str = "bytes", capacity=None, spill_capacity=None):
    """(optimum, one optimal assignment) over all monotone assignments, in exact arithmetic; None if none is feasible."""
    n = graph.n_nodes
    names = graph.names
    params = [int(x) for x in graph.param_bytes.tolist()]
    edges = list(zip(graph.src.tolist(), graph.dst.tolist(), [int(b) for b in graph.edge_bytes.tolist()]))
    w = {t: Fraction(int(x)) if isinstance(x, int) else Fraction(Decimal(repr(float(x)))) for t, x in weights.items()}
    caps = None if capacity is None else ([capacity] * K if isinstance(capacity, int) else list(capacity))
    spills = None if spill_capacity is None else ([spill_capacity] * K if isinstance(spill_capacity, int) else list(spill_capacity))
    best = None
    for s in itertools.product(range(K), repeat=n):
        if any(s[u] > s[v] for u, v, _ in edges):
            continue
        load = [0] * K
        for v in range(n):
            load[s[v]] += params[v]
        if caps is not None and any(load[k] > caps[k] for k in range(K)):
            continue
        units = [(b if comm == "bytes" else int(b > 0)) for _, _, b in edges]
        cross = [sum(c for (u, v, _), c in zip(edges, units) if s[u] <= b < s[v]) for b in range(K - 1)]
        terms = {
            "mem_peak": max(load),
            "comm_total": sum(c * (s[v] - s[u]) for (u, v, _), c in zip(edges, units)),
            "comm_peak": max(cross, default=0),
            "compute_peak": 0,  # the oracle's graphs carry no compute time
            "spill": 0 if spills is None else sum(max(load[k] - spills[k], 0) for k in range(K)),
        }
        value = sum((w.get(t, Fraction(0)) * x for t, x in terms.items()), Fraction(0))
        if best is None or value < best[0]:
            best = (value, s)
    del names
    return best


def chain(params, out_bytes=None, **kw):
    names = [f"v{i}" for i in range(len(params))]
    out = out_bytes if out_bytes is not None else [1] * len(params)
    return CompGraph(names, names[:-1], names[1:], param_bytes=params, out_bytes=out, flops=[0.0] * len(params), **kw)


def solve_checked(problem: StageProblem):
    """solve_stage, with its answer re-checked exactly against the evaluator."""
    out = solve_stage(problem, FAST)
    assert out.status == "optimal", out
    ev = evaluate_stages(problem, out.assignment)
    assert ev.feasible
    assert type(out.objective) in (int, Fraction) and type(out.bound) in (int, Fraction)
    assert out.objective == ev.objective and out.bound == out.objective
    return out, ev


# ---------------------------------------------------------------------- the failing cases of issue 12


def test_chain_beyond_2_53_at_alpha_100_is_exact():
    g = chain([2**48 + 1, 2**48, 3, 2**48 + 3])
    p = StageProblem.peer(g, n_stages=2, alpha=100)
    opt, _ = brute_force(g, 2, {"mem_peak": 100, "comm_total": 1}, comm="edges")
    assert opt == 56_294_995_342_131_301
    out, ev = solve_checked(p)
    assert out.objective == opt and isinstance(out.objective, int)
    assert stage_lower_bound(p) <= opt


def test_2_56_values_at_alpha_1_are_exact():
    g = CompGraph(
        ["a", "b", "c", "d", "e"],
        ["a", "a", "b", "c"],
        ["b", "c", "d", "d"],
        param_bytes=[2**56 + 5, 2**56, 2**56 + 1, 3, 2**56 + 2],
        out_bytes=[7, 1, 1, 1, 0],
    )
    for K in (2, 3):
        p = StageProblem.peer(g, n_stages=K, alpha=1)
        opt, _ = brute_force(g, K, {"mem_peak": 1, "comm_total": 1}, comm="edges")
        out, _ = solve_checked(p)
        assert out.objective == opt
        assert stage_lower_bound(p) <= opt


@pytest.mark.parametrize("tiny", [1e-7, 1e-9, 1e-12])
def test_tiny_weights_are_exact(tiny):
    g = chain([5, 9, 2, 7, 1], out_bytes=[1000, 3, 50_000, 8, 0])
    weights = {"mem_peak": 1, "comm_total": tiny}
    p = StageProblem(g, 3, ObjectiveWeights(**weights))
    opt, _ = brute_force(g, 3, weights)
    out, ev = solve_checked(p)
    assert out.objective == opt and isinstance(out.objective, Fraction)
    assert ev.objective == ev.mem_peak + Fraction(Decimal(repr(tiny))) * ev.comm_total


def test_weights_read_as_their_decimals():
    g = chain([10, 30])
    p = StageProblem(g, 2, ObjectiveWeights(mem_peak=0.1, comm_total=0.3))
    ev = evaluate_stages(p, [0, 1])
    assert ev.objective == Fraction(3) + Fraction(3, 10)  # 0.1 * 30 + 0.3 * 1 exactly, not 3.3000000000000003
    assert evaluate_stages(p, [0, 0]).objective == 4


@pytest.mark.parametrize(
    "weights, words",
    [
        (dict(mem_peak=1e300), "largest supported weight"),
        (dict(mem_peak=1, comm_total=1e-13), "13 decimal places"),
        (dict(comm_total=1 / 3), "16 decimal places"),
    ],
)
def test_unscalable_weights_are_refused_naming_the_weight(weights, words):
    with pytest.raises(ProblemError, match=words) as exc:
        ObjectiveWeights(**weights)
    assert next(iter(weights)) in str(exc.value) or "comm_total" in str(exc.value)


def test_objective_range_beyond_cpsat_is_refused_with_the_limit():
    # Parameters of 2**60 in total solve (the limit itself); twice that is refused, not MODEL_INVALID.
    edge = chain([2**58 - 5, 2**58, 2**58 + 3, 2**58 + 2])
    assert solve_checked(StageProblem(edge, 3, {"mem_peak": 1}))[0].objective == brute_force(edge, 3, {"mem_peak": 1})[0]
    with pytest.raises(ProblemError, match=r"2\^60 limit"):
        solve_stage(StageProblem(chain([2**59, 2**59, 7]), 2, {"mem_peak": 1}), FAST)
    g = chain([2**50, 2**50, 2**50])
    p = StageProblem.peer(g, n_stages=2, alpha=10**6)
    with pytest.raises(ProblemError, match=r"2\^60 limit"):
        solve_stage(p, FAST)
    with pytest.raises(ProblemError, match="mem_peak"):
        check_model_range(p)
    # the evaluator and the bound still price it exactly
    assert evaluate_stages(p, [0, 0, 1]).objective == 10**6 * 2**51 + 1
    assert stage_lower_bound(p) == 10**6 * 3 * 2**49  # the average stage load


@pytest.mark.slow
def test_capacities_beyond_int64_are_no_constraint():
    g = chain([2**58, 3, 2**58 + 7])
    for cap in (5 * 10**18, 2**63 - 1, 2**70):
        p = StageProblem.peer(g, n_stages=2, alpha=1, capacity=cap)
        assert p.infeasibility() is None
        assert p.effective_capacity == (2**59 + 10,) * 2
        out, ev = solve_checked(p)
        assert out.objective == brute_force(g, 2, {"mem_peak": 1, "comm_total": 1}, comm="edges")[0]
    tight = StageProblem.peer(g, n_stages=2, alpha=1, capacity=[2**58 + 3, 2**70])
    opt, s = brute_force(g, 2, {"mem_peak": 1, "comm_total": 1}, comm="edges", capacity=[2**58 + 3, 2**70])
    assert solve_checked(tight)[0].objective == opt
    reason = StageProblem.peer(g, n_stages=2, capacity=2**58).infeasibility()
    assert "v2" in reason and "-" not in reason.split("capacity")[-1]


def test_total_capacity_sum_never_wraps():
    g = chain([2**61 - 20, 2**61 - 20, 30])
    p = StageProblem.peer(g, n_stages=3, capacity=[2**62, 2**62, 2**62])  # 3 * 2**62 in total: wraps int64
    assert p.infeasibility() is None
    reason = StageProblem.peer(g, n_stages=2, capacity=2**61 - 15).infeasibility()
    assert reason is not None and str(2**62 - 10) in reason and str(2**62 - 30) in reason and "-" not in reason


def test_float_capacity_beyond_2_53_is_refused():
    g = chain([1, 2])
    with pytest.raises(ProblemError, match="give it as an integer"):
        StageProblem.peer(g, 2, capacity=2.0**60)
    assert StageProblem.peer(g, 2, capacity=2**63 - 1).capacity == (2**63 - 1,) * 2
    assert StageProblem.peer(g, 2, capacity=1e6).capacity == (10**6,) * 2


def test_float_in_an_integer_list_keeps_its_neighbours_exact():
    g = chain([2**60 + 1, 1.0, 2])
    assert g.param_bytes.tolist() == [2**60 + 1, 1, 2]
    with pytest.raises(GraphError, match="v0.*2\\*\\*53"):
        chain([2.0**60, 1, 2])
    with pytest.raises(GraphError, match="2\\*\\*62"):
        chain([2**61, 2**61, 1])  # the column's total would not fit int64 sums
    with pytest.raises(GraphError, match="v1"):
        chain([1, 2**63, 1])
    with pytest.raises(GraphError, match="edge_bytes"):
        CompGraph(["a", "b", "c", "d"], ["a", "a", "a"], ["b", "c", "d"], out_bytes=[2**61, 0, 0, 0])


def test_subnormal_and_huge_compute_times_are_refused_or_ticked():
    names = ["a", "b"]
    g = CompGraph(names, ["a"], ["b"], compute_time={"cpu": [5e-324, 5e-324]})
    with pytest.raises(ProblemError, match="too small"):
        StageProblem(g, 2, {"compute_peak": 1}, device_kind="cpu")
    g = CompGraph(names, ["a"], ["b"], compute_time={"cpu": [1.0, 1e300]})
    p = StageProblem(g, 2, {"compute_peak": 1}, device_kind="cpu", time_unit=1e-9)
    with pytest.raises(ProblemError, match="time_unit"):
        evaluate_stages(p, [0, 1])


@pytest.mark.skipif(not (DATA / "resnet18.json.gz").exists(), reason="shipped graphs missing")
def test_resnet18_alpha_1e9_and_huge_capacity_are_exact():
    from incsched.formats import load_graph

    g = load_graph(DATA / "resnet18.json.gz")
    p = StageProblem.peer(g, n_stages=2, alpha=1e9)
    out, ev = solve_checked(p)
    assert out.objective == 10**9 * ev.mem_peak + ev.comm_total  # exact integers, no off-by-one
    assert stage_lower_bound(p) <= out.objective
    capped = StageProblem.peer(g, n_stages=2, capacity=5_000_000_000_000_000_000)
    assert capped.infeasibility() is None
    out, _ = solve_checked(capped)
    assert out.objective == 2_531_315_202
    assert solve_checked(StageProblem.peer(g, n_stages=2))[0].objective == 2_531_315_202


# ---------------------------------------------------------------------- properties


@st.composite
def huge_instances(draw, max_nodes=6, max_stages=3, big_max=2**59):
    n = draw(st.integers(1, max_nodes))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs))) if pairs else []
    big = st.one_of(st.integers(0, 10), st.integers(2**50, big_max // max_nodes))
    params = draw(st.lists(big, min_size=n, max_size=n))
    out = draw(st.lists(st.one_of(st.integers(0, 5), st.integers(2**40, 2**55)), min_size=n, max_size=n))
    g = CompGraph(
        [f"n{i}" for i in range(n)],
        np.array([i for i, _ in chosen], dtype=np.int64),
        np.array([j for _, j in chosen], dtype=np.int64),
        param_bytes=params,
        out_bytes=out,
        flops=[0.0] * n,
    )
    K = draw(st.integers(1, max_stages))
    weights = draw(
        st.fixed_dictionaries(
            {
                "mem_peak": st.sampled_from([0, 1, 100, 0.5, 1e-3]),
                "comm_total": st.sampled_from([0, 1, 1e-7, 2.5]),
                "comm_peak": st.sampled_from([0, 1, 0.125]),
            }
        )
    )
    comm = draw(st.sampled_from(["bytes", "edges"]))
    return g, K, weights, comm


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(huge_instances())
def test_lower_bound_never_exceeds_the_brute_force_optimum(inst):
    g, K, weights, comm = inst
    p = StageProblem(g, K, ObjectiveWeights(**weights), comm=comm)
    opt, s = brute_force(g, K, weights, comm=comm)
    lb = stage_lower_bound(p)
    assert type(lb) in (int, Fraction)
    assert lb <= opt
    assert evaluate_stages(p, list(s)).objective == opt  # the evaluator agrees with the oracle exactly
    assert all(type(b) is int for b in stage_term_bounds(p).values())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(huge_instances(max_nodes=5, big_max=2**53))
def test_cpsat_matches_the_brute_force_exactly(inst):
    g, K, weights, comm = inst
    p = StageProblem(g, K, ObjectiveWeights(**weights), comm=comm)
    opt, _ = brute_force(g, K, weights, comm=comm)
    try:
        check_model_range(p)
    except ProblemError:
        return  # refused honestly, with the limit named (tested above)
    out, _ = solve_checked(p)
    assert out.objective == opt


def test_milp_is_exact_below_2_53_and_refuses_beyond():
    from incsched.solvers.milp.stage import available_backends, solve_stage_milp

    if "cbc" not in available_backends():
        pytest.skip("CBC not available")
    g = chain([2**48 + 1, 2**48, 3, 2**48 + 3])
    with pytest.raises(ProblemError, match=r"2\^53"):
        solve_stage_milp(StageProblem.peer(g, n_stages=2, alpha=100), FAST)
    g = chain([2**45 + 1, 2**45, 3, 2**45 + 3])
    for weights in ({"mem_peak": 1, "comm_total": 1}, {"mem_peak": 0.5, "comm_total": 0.25}):
        p = StageProblem(g, 2, weights, comm="edges", capacity=5 * 10**18)
        # CBC runs as a subprocess: on a loaded machine its start-up alone has passed 10 s.
        out = solve_stage_milp(p, SolverSettings(time_limit=120.0, deterministic=True))
        opt, _ = brute_force(g, 2, weights, comm="edges")
        assert out.objective == evaluate_stages(p, out.assignment).objective
        if out.status == "optimal":
            assert out.objective == opt == out.bound
        else:
            assert out.status == "feasible" and out.bound is None and "reason" in out.info
