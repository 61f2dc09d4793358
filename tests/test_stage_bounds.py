"""incsched.bounds.stage against brute force (issue 18): a wrong bound would certify a wrong optimum.

Every monotone assignment of small random graphs is priced by the independent evaluator; the
stage ranges must contain every assignment that meets the cap, the peak bound no assignment's
peak may undercut, each boundary's crossing bound holds for every assignment inside the ranges,
and `proof_bound` is at most the optimum, with every answer as good as the incumbent inside its
cap and window. Weight mixes: every mix of `stage_instances` (the defaults' terms, capacities,
spill, speeds) and the peer objective with alpha 1 and 100.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_stage_problem import stage_instances

from incsched.bounds import stage_term_bounds
from incsched.data import shipped_graph_path
from incsched.evaluate.stage import evaluate_stages
from incsched.formats import load_graph
from incsched.graph import CompGraph
from incsched.problems.stage import StageProblem
from incsched.front_door import solve
from incsched.bounds.stage import closure, crossing_bounds, peak_lower_bound, proof_bound, stage_ranges


@st.composite
def peer_instances(draw, max_nodes=7):
    """Peer objective on CNN-like small graphs: heavy and weightless nodes, chains and branches."""
    n = draw(st.integers(1, max_nodes))
    edges = [(u, v) for v in range(n) for u in range(v) if draw(st.integers(0, 2)) == 0]
    params = draw(st.lists(st.sampled_from([0, 0, 3, 4, 8, 9, 20, 2**40 + 1]), min_size=n, max_size=n))
    out = draw(st.lists(st.sampled_from([0, 1, 5]), min_size=n, max_size=n))
    g = CompGraph([f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges],
                  param_bytes=params, out_bytes=out, flops=[0.0] * n)
    K = draw(st.integers(1, 4))
    kwargs = {}
    if draw(st.booleans()):
        kwargs["capacity"] = max(params) + draw(st.integers(0, 30))
    return StageProblem.peer(g, K, alpha=draw(st.sampled_from([1, 100, 0.5])), **kwargs)


problems = st.one_of(stage_instances(max_nodes=6, max_stages=3), peer_instances())


def assignments(problem: StageProblem):
    """Every assignment meeting precedence and the hard capacity: (stages, loads, crossings, objective)."""
    g, K = problem.graph, problem.n_stages
    edges = list(zip(g.src.tolist(), g.dst.tolist(), problem.edge_comm.tolist()))
    p = g.param_bytes.tolist()
    rows = []
    for s in itertools.product(range(K), repeat=g.n_nodes):
        if any(s[u] > s[v] for u, v, _ in edges):
            continue
        ev = evaluate_stages(problem, np.asarray(s))
        if not ev.feasible:
            continue
        loads = [sum(p[v] for v in range(g.n_nodes) if s[v] == k) for k in range(K)]
        cross = [sum(c for u, v, c in edges if s[u] < b <= s[v]) for b in range(1, K)]
        rows.append((s, loads, cross, ev.objective))
    return rows


def others(problem: StageProblem):
    w, terms = problem.weights.exact(), stage_term_bounds(problem)
    return sum((w[t] * terms[t] for t in ("compute_peak", "spill")), Fraction(0))


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems, data=st.data())
def test_ranges_peak_and_crossings_hold_for_every_assignment(problem, data):
    rows = assignments(problem)
    cl = closure(problem)
    total = int(problem.graph.param_bytes.sum())
    cap = data.draw(st.integers(0, total + 1))
    ranges = stage_ranges(problem, cap, cl)
    fits = [r for r in rows if max(r[1]) <= cap]
    if ranges is None:
        assert not fits
    else:
        lo, hi = ranges
        inside = [r for r in rows if all(lo[v] <= x <= hi[v] for v, x in enumerate(r[0]))]
        assert all(r in inside for r in fits)
        bounds = crossing_bounds(problem, lo, hi)
        for _, _, cross, _ in inside:
            assert all(c >= b for c, b in zip(cross, bounds)), (cross, bounds)
    if rows:
        assert peak_lower_bound(problem, cl) <= min(max(r[1]) for r in rows)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems, data=st.data())
def test_proof_bound_never_exceeds_the_optimum_and_keeps_every_answer_as_good(problem, data):
    rows = assignments(problem)
    if not rows:
        return
    optimum = min(r[3] for r in rows)
    incumbent = data.draw(st.sampled_from(sorted({r[3] for r in rows})))
    pb = proof_bound(problem, incumbent, closure(problem), others=others(problem))
    assert pb.lower_bound <= optimum
    for s, loads, _, value in rows:
        if value <= incumbent:
            if problem.weights.mem_peak > 0:
                assert max(loads) <= pb.cap
            if pb.ranges is not None:
                assert all(pb.ranges[0][v] <= x <= pb.ranges[1][v] for v, x in enumerate(s))


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems)
def test_inc_ilp_with_the_reductions_proves_the_brute_force_optimum(problem):
    rows = assignments(problem)
    r = solve(problem, "inc-ilp", time_limit=20)
    if not rows:
        assert r.status == "infeasible"
        return
    assert r.status == "optimal" and r.objective == min(row[3] for row in rows)


def test_chain_peak_bound_is_the_linear_partition_optimum():
    # A chain's only down-sets are prefixes, so the bound is exact: [6, 5, 6] on 2 stages needs 11.
    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], param_bytes=[6, 5, 6], out_bytes=[1, 1, 0])
    p = StageProblem.peer(g, 2, alpha=1)
    assert peak_lower_bound(p, closure(p)) == 11
    pb = proof_bound(p, 12, closure(p))
    assert pb.lower_bound == 12  # peak 11 plus the one crossing every 2-stage split of the chain pays


@pytest.mark.slow
@pytest.mark.parametrize("name, K", [("resnet18", 4), ("vgg16", 8), ("resnet50", 2)])
def test_inc_ilp_proves_the_plain_models_optimum_on_shipped_graphs(name, K):
    p = StageProblem.peer(load_graph(shipped_graph_path(name)), K, alpha=1)
    fast, cold = solve(p, "inc-ilp", time_limit=60), solve(p, "ilp", time_limit=60)
    assert fast.status == cold.status == "optimal" and fast.objective == cold.objective
