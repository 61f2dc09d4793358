"""Shared weights on the stage problem (issue 23, item 1): a weight read by several nodes costs its
bytes once on every stage holding a reader, in the evaluator, both back ends, the bounds, the
reductions, the baselines and the front door.

The oracle enumerates every monotone assignment of a tiny graph and prices it with its own code
(stage parameters from the readers' stages, Python ints), sharing nothing with the evaluator.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import MILP_PROOF

from incsched import solve
from incsched.baselines.stage import STAGE_BASELINES
from incsched.baselines.stage_local import improve_by_moves
from incsched.bounds import stage_lower_bound
from incsched.bounds.reductions import stage_reduction
from incsched.bounds.stage import closure, peak_lower_bound, proof_bound
from incsched.cli import format_result
from incsched.evaluate.stage import evaluate_stages
from incsched.graph import CompGraph
from incsched.problems.stage import ObjectiveWeights, StageProblem
from incsched.result import Result
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.stage import solve_stage
from incsched.solvers.milp.stage import solve_stage_milp

FAST = SolverSettings(time_limit=20.0, deterministic=True)


# ---------------------------------------------------------------------- graphs and the oracle


def random_shared_graph(seed: int, n: int = 6) -> CompGraph:
    """A random DAG of ``n`` nodes with one or two shared weights of 2-3 readers each."""
    rng = np.random.default_rng(seed)
    names = [f"v{i}" for i in range(n)]
    edges = [(u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < 0.4]
    shared = []
    for i in range(int(rng.integers(1, 3))):
        readers = sorted(rng.choice(n, size=int(rng.integers(2, 4)), replace=False).tolist())
        shared.append({"name": f"w{i}", "bytes": int(rng.integers(5, 40)), "read_by": readers})
    return CompGraph(names, [names[u] for u, _ in edges], [names[v] for _, v in edges],
                     param_bytes=rng.integers(0, 30, n).tolist(), out_bytes=rng.integers(0, 6, n).tolist(),
                     flops=[0.0] * n, shared_weights=shared, name=f"shared{seed}")


def oracle(problem: StageProblem):
    """(optimum, stage parameters of one optimal assignment) by enumeration; None when nothing is feasible."""
    g, K = problem.graph, problem.n_stages
    n = g.n_nodes
    own = [int(b) for b in g.param_bytes.tolist()]
    outs = [int(b) for b in g.out_bytes.tolist()]
    edges = list(zip(g.src.tolist(), g.dst.tolist(), [int(b) for b in g.edge_bytes.tolist()]))
    units = [b if problem.comm == "bytes" else int(b > 0) for _, _, b in edges]
    weights = problem.weights.exact()
    m = problem.micro_batches or 1
    best = None
    for s in itertools.product(range(K), repeat=n):
        if any(s[u] > s[v] for u, v, _ in edges):
            continue
        params = [sum(own[v] for v in range(n) if s[v] == k) for k in range(K)]
        for w in g.shared_weights:
            for k in {s[v] for v in w.readers}:
                params[k] += w.nbytes
        if problem.capacity is not None and any(params[k] > problem.capacity[k] for k in range(K)):
            continue
        if problem.memory is not None:
            acts = [sum(outs[v] for v in range(n) if s[v] == k) for k in range(K)]
            if any(params[k] + min(K - k, m) * acts[k] > problem.memory[k] for k in range(K)):
                continue
        cross = [sum(c for (u, v, _), c in zip(edges, units) if s[u] <= b < s[v]) for b in range(K - 1)]
        terms = {
            "mem_peak": max(params),
            "comm_total": sum(c * (s[v] - s[u]) for (u, v, _), c in zip(edges, units)),
            "comm_peak": max(cross, default=0),
            "spill": 0 if problem.spill_capacity is None else sum(max(params[k] - problem.spill_capacity[k], 0) for k in range(K)),
        }
        value = sum(weights[t] * x for t, x in terms.items())
        if best is None or value < best[0]:
            best = (value, params)
    return best


def problems(g: CompGraph, K: int = 3) -> dict[str, StageProblem]:
    """One problem per memory rule: mem_peak, spill, a hard capacity, the pipeline memory."""
    total = g.total_param_bytes
    return {
        "mem_peak": StageProblem(g, K, ObjectiveWeights(mem_peak=3, comm_total=1), comm="edges"),
        "spill": StageProblem(g, K, ObjectiveWeights(spill=2, comm_total=1), spill_capacity=total // K),
        "capacity": StageProblem(g, K, ObjectiveWeights(comm_total=1, comm_peak=1), capacity=-(-total * 2 // K)),
        "memory": StageProblem(g, K, ObjectiveWeights(mem_peak=1, comm_total=2), memory=-(-total * 3 // (2 * K)) + 20, micro_batches=2),
    }


CASES = [(seed, kind) for seed in range(6) for kind in ("mem_peak", "spill", "capacity", "memory")]


# ---------------------------------------------------------------------- solvers against the oracle


@pytest.mark.parametrize("seed,kind", CASES)
def test_cpsat_and_milp_optima_equal_the_oracle(seed, kind):
    problem = problems(random_shared_graph(seed))[kind]
    truth = oracle(problem)
    cp = solve_stage(problem, FAST)
    milp = solve_stage_milp(problem, MILP_PROOF)
    if truth is None:
        assert cp.status == "infeasible" and milp.status == "infeasible"
        return
    assert cp.status == "optimal" and cp.objective == truth[0], (cp.status, cp.objective, truth[0])
    assert milp.status == "optimal" and milp.objective == truth[0], (milp.status, milp.objective, truth[0])
    for out in (cp, milp):
        ev = evaluate_stages(problem, out.assignment)
        assert ev.feasible and ev.objective == truth[0]


@pytest.mark.parametrize("seed,kind", CASES)
def test_solve_certifies_the_oracle_optimum(seed, kind):
    """The whole pipeline (bounds, reductions, baselines, windows, proof) lands on the true optimum."""
    problem = problems(random_shared_graph(seed))[kind]
    truth = oracle(problem)
    result = solve(problem, time_limit=30.0, work_limit=20.0)
    if truth is None:
        assert result.status == "infeasible"
        return
    assert result.status == "optimal" and result.objective == truth[0]
    assert result.lower_bound <= truth[0]
    assert result.replicated_weights == problem.graph.replicated_weights(result.stages)


@pytest.mark.parametrize("seed", range(6))
def test_bounds_stay_below_the_oracle(seed):
    g = random_shared_graph(seed)
    for problem in problems(g).values():
        truth = oracle(problem)
        if truth is None:
            continue
        assert stage_lower_bound(problem) <= truth[0]
        if problem.memory is None:
            assert proof_bound(problem, truth[0]).lower_bound <= truth[0]
    peer = problems(g)["mem_peak"]
    best_peak = min(max(g.part_param_bytes(s, 3)) for s in itertools.product(range(3), repeat=g.n_nodes)
                    if all(s[u] <= s[v] for u, v in zip(g.src.tolist(), g.dst.tolist())))
    assert peak_lower_bound(peer, closure(peer)) <= best_peak


@pytest.mark.parametrize("seed", range(6))
def test_reductions_never_cost_more(seed):
    """`StageReduction.apply` keeps or lowers the true cost of every monotone assignment."""
    g = random_shared_graph(seed, n=7)
    for problem in (problems(g)["mem_peak"], problems(g)["spill"]):
        red = stage_reduction(problem)
        for s in itertools.product(range(3), repeat=g.n_nodes):
            if any(s[u] > s[v] for u, v in zip(g.src.tolist(), g.dst.tolist())):
                continue
            moved = red.apply(np.asarray(s))
            assert red.holds(moved)
            assert evaluate_stages(problem, moved).objective <= evaluate_stages(problem, s).objective


def test_readers_are_never_loadless():
    """Two readers of a tied weight with no parameters of their own: merging them would hide the weight."""
    g = CompGraph(["emb", "mid", "head"], ["emb", "mid"], ["mid", "head"], param_bytes=[0, 50, 0], out_bytes=[1, 1, 0],
                  shared_weights=[{"name": "wte", "bytes": 40, "read_by": ["emb", "head"]}])
    red = stage_reduction(StageProblem.peer(g, 2, alpha=1))
    assert red.merges == () and red.earliest == () and red.latest == ()


# ---------------------------------------------------------------------- the evaluator and the baselines


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), data=st.data())
def test_evaluator_stage_memory_is_part_param_bytes(seed, data):
    g = random_shared_graph(seed % 50, n=6)
    stages = data.draw(st.lists(st.integers(0, 3), min_size=g.n_nodes, max_size=g.n_nodes))
    ev = evaluate_stages(StageProblem(g, 4, ObjectiveWeights(mem_peak=1)), stages)
    assert ev.stage_mem.tolist() == g.part_param_bytes(stages, 4)
    assert ev.replicated == g.replicated_weights(stages)


@pytest.mark.parametrize("seed", range(4))
def test_baselines_and_local_moves_count_shared_weights(seed):
    """Every pre-scheduler's answer meets precedence; a hard capacity set at the optimum's peak is
    met by the DP whenever it reports feasible, and local moves never raise the true objective."""
    g = random_shared_graph(seed)
    for problem in problems(g).values():
        for name, fn in STAGE_BASELINES.items():
            stages = fn(problem, 0)
            ev = evaluate_stages(problem, stages)
            assert not [v for v in ev.violations if "backwards" in v], name
        start = STAGE_BASELINES["contiguous_params"](problem, 0)
        before = evaluate_stages(problem, start)
        after = evaluate_stages(problem, improve_by_moves(problem, start))
        if before.feasible:
            assert after.feasible and after.objective <= before.objective


def test_contiguous_dp_segments_charge_shared_weights_once():
    """On a chain the contiguous DP is exact for mem_peak: it must see the tied weight on both ends."""
    names = [f"v{i}" for i in range(6)]
    g = CompGraph(names, names[:-1], names[1:], param_bytes=[0, 30, 30, 30, 30, 0], out_bytes=[1] * 6,
                  shared_weights=[{"name": "wte", "bytes": 50, "read_by": ["v0", "v5"]}])
    p = StageProblem(g, 2, ObjectiveWeights(mem_peak=1))
    truth = oracle(p)
    for name in ("contiguous_params", "pipedream_dp"):
        assert evaluate_stages(p, STAGE_BASELINES[name](p, 0)).objective == truth[0], name


# ---------------------------------------------------------------------- GPT-2 with tied embeddings


@pytest.fixture(scope="module")
def gpt2_graph():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from incsched.capture import capture
    from incsched.capture.zoo import ensure_torchvision_importable

    ensure_torchvision_importable()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=6, n_embd=256, vocab_size=8000, n_head=4, use_cache=False, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 8000, (1, 16))
    graph = capture(model, (ids,), granularity="layer").graph
    return graph, model


def test_gpt2_tied_weight_is_charged_on_both_stages(gpt2_graph):
    graph, model = gpt2_graph
    (tied,) = graph.shared_weights
    assert tied.nbytes == model.transformer.wte.weight.numel() * 4
    assert graph.total_param_bytes == sum(p.numel() * 4 for p in model.parameters())  # tied weight once
    problem = StageProblem.peer(graph, n_stages=4, alpha=1)
    result = solve(problem, time_limit=60.0, work_limit=30.0)
    assert result.status == "optimal"
    stages = result.stages
    assert result.terms["stage_mem"] == graph.part_param_bytes(stages, 4)
    readers = sorted({stages[v] for v in tied.readers})
    assert len(readers) > 1, "the embedding and the head share a stage: the case is not exercised"
    assert result.replicated_weights == {tied.name: readers}
    own = [int(graph.param_bytes[np.asarray(stages) == k].sum()) for k in range(4)]
    for k in readers:  # both the embedding's and the head's stage hold the tied weight
        assert result.terms["stage_mem"][k] == own[k] + tied.nbytes
    assert sum(result.terms["stage_mem"]) == graph.total_param_bytes + (len(readers) - 1) * tied.nbytes
    # Shown by the JSON (round trip) and by the CLI's printout.
    assert Result.from_json(json.loads(json.dumps(result.to_json()))).replicated_weights == {tied.name: readers}
    assert f"replicated   {tied.name} on stages {', '.join(map(str, readers))}" in format_result(result)


def test_results_without_shared_weights_have_no_replicated_field():
    g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[10, 30], out_bytes=[5, 0])
    result = solve(StageProblem.peer(g, 2), time_limit=10.0)
    assert result.replicated_weights is None and "replicated_weights" not in result.to_json()
    assert "replicated" not in format_result(result)
