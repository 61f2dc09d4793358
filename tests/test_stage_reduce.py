"""incsched.bounds.reductions against brute force (issue 18): a rule that cut off every optimum would
let the exact model certify a worse answer as optimal.

On small random graphs (any weight mix of `stage_instances`, the peer objective, and graphs built
to have weightless chains, joins and duplicated branches) every feasible assignment is priced by
the independent evaluator: some optimum keeps every rule, `StageReduction.apply` turns each
assignment into one that keeps them at no higher cost, and CP-SAT under the rules finds the
brute-force optimum.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_stage_bounds import assignments, peer_instances
from test_stage_problem import stage_instances

from incsched.data import shipped_graph_path
from incsched.evaluate.stage import evaluate_stages
from incsched.formats import load_graph
from incsched.graph import CompGraph
from incsched.problems.stage import StageProblem
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.stage import solve_stage
from incsched.bounds.reductions import stage_reduction


@st.composite
def branchy_instances(draw):
    """A layer, two or three copies of one branch (maybe with weightless nodes), a join, maybe a
    skip edge past the branches and a weightless or heavy tail: what the rules are for."""
    names, src, dst, params, out = [], [], [], [], []

    def node(p, o, inputs):
        names.append(f"n{len(names)}")
        params.append(p)
        out.append(o)
        for u in inputs:
            src.append(u)
            dst.append(len(names) - 1)
        return len(names) - 1

    first = node(draw(st.sampled_from([0, 4, 9])), draw(st.sampled_from([1, 5])), [])
    copies = draw(st.integers(2, 3))
    template = draw(st.lists(st.tuples(st.sampled_from([0, 0, 3, 8]), st.sampled_from([0, 1, 5])), min_size=1,
                             max_size=2 if copies == 2 else 1))
    ends = []
    for _ in range(copies):
        x = first
        for p, o in template:
            x = node(p, o, [x])
        ends.append(x)
    if draw(st.booleans()):
        ends.append(first)  # a skip edge: the join reads the layer too
    join = node(draw(st.sampled_from([0, 0, 6])), draw(st.sampled_from([1, 5])), ends)
    if draw(st.booleans()):
        node(draw(st.sampled_from([0, 7])), 0, [join])
    g = CompGraph(names, [names[u] for u in src], [names[v] for v in dst], param_bytes=params, out_bytes=out,
                  flops=[0.0] * len(names))
    K = draw(st.integers(2, 3))
    kwargs = {}
    if draw(st.booleans()):
        kwargs["capacity"] = max(params) + draw(st.integers(0, 12))
    w = draw(st.sampled_from([dict(alpha=1), dict(alpha=100), dict(alpha=0.5)]))
    if draw(st.booleans()):
        return StageProblem.peer(g, K, **w, **kwargs)
    from incsched.problems.stage import ObjectiveWeights

    weights = draw(st.sampled_from([dict(mem_peak=1, comm_total=1), dict(comm_peak=2, mem_peak=1), dict(mem_peak=1)]))
    return StageProblem(g, K, ObjectiveWeights(**weights), comm="bytes", **kwargs)


problems = st.one_of(stage_instances(max_nodes=6, max_stages=3), peer_instances(), branchy_instances())


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems)
def test_some_optimum_keeps_every_rule_and_apply_never_costs_more(problem):
    rows = assignments(problem)
    red = stage_reduction(problem)
    if not rows:
        return
    optimum = min(r[3] for r in rows)
    kept = [r[3] for r in rows if red.holds(r[0])]
    assert kept and min(kept) == optimum
    for s, _, _, value in rows:
        t = red.apply(s)
        ev = evaluate_stages(problem, t)
        assert ev.feasible and ev.objective <= value and red.holds(t), (s, t.tolist(), red)


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems)
def test_cpsat_under_the_rules_finds_the_brute_force_optimum(problem):
    rows = assignments(problem)
    red = stage_reduction(problem)
    out = solve_stage(problem, SolverSettings(time_limit=5.0, deterministic=True), reduction=red,
                      hint=red.apply(rows[0][0]) if rows else None)
    if not rows:
        assert out.status == "infeasible"
        return
    assert out.status == "optimal" and out.objective == min(r[3] for r in rows)
    assert red.holds(out.assignment) and evaluate_stages(problem, out.assignment).objective == out.objective


def test_rules_on_a_residual_block():
    # conv a -> relu b -> conv c -> add e <- relu d <- a (the skip), then conv h and two copies of
    # a branch f between h and z. The relus fold into a; the add reads two edges and sends one,
    # so it sits on its later input's stage; the two copies are put in order.
    g = CompGraph(["a", "b", "c", "d", "e", "h", "f1", "f2", "z"],
                  ["a", "b", "a", "c", "d", "e", "h", "h", "f1", "f2"],
                  ["b", "c", "d", "e", "e", "h", "f1", "f2", "z", "z"],
                  param_bytes=[5, 0, 7, 0, 0, 4, 3, 3, 2], out_bytes=[1] * 9)
    p = StageProblem.peer(g, 3, alpha=1)
    red = stage_reduction(p)
    names = g.names
    group = {names[v]: names[t] for v, t in enumerate(red.group.tolist())}
    assert group["b"] == group["d"] == "a" and group["e"] == "e"
    assert [(names[x], [names[u] for u in us]) for x, us in red.earliest] == [("e", ["a", "c"])]
    assert [[names[x] for x in b] for b in red.classes[0]] == [["f1"], ["f2"]]
    rows = assignments(p)
    assert min(r[3] for r in rows if red.holds(r[0])) == min(r[3] for r in rows)


def test_pipeline_problems_get_no_rules():
    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], param_bytes=[4, 0, 4], out_bytes=[1, 1, 0])
    p = StageProblem.pipeline(g, 2, memory=10**6)
    red = stage_reduction(p)
    assert not red.merges and not red.earliest and not red.latest and not red.classes


@pytest.mark.parametrize("name", ["resnet50", "inception_v3", "bert_base"])
def test_rules_fold_most_weightless_nodes_of_shipped_graphs(name):
    p = StageProblem.peer(load_graph(shipped_graph_path(name)), 4, alpha=1)
    red = stage_reduction(p)
    loadless = int((p.graph.param_bytes == 0).sum())
    assert len(red.merges) + len(red.earliest) + len(red.latest) >= loadless // 2
    s = red.apply(np.zeros(p.graph.n_nodes, dtype=np.int64))
    assert red.holds(s)
