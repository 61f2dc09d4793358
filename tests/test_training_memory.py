"""Training memory's peak terms (issue 23): each stage's largest working set on top of its stash, or
its optimizer step's temporaries once the stash is gone. The rule by hand, the optimizer presets'
step factors against torch's optimizers, capture's measurement against a real step, the graph's
new columns through JSON, networkx and merges, and the MILP and the pipeline DP against brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import MILP_PROOF, brute_force_stages as brute_force

from incsched.baselines.stage import pipeline_dp
from incsched.capture import capture
from incsched.evaluate.stage import evaluate_stages
from incsched.execute.live_bytes import LiveBytes
from incsched.execute.training_step import TORCH_OPTIMIZERS
from incsched.graph import CompGraph
from incsched.graph.coarsen import quotient
from incsched.problems import training
from incsched.problems.stage import ObjectiveWeights, ProblemError, StageProblem
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.stage import solve_stage

FAST = SolverSettings(time_limit=30.0, deterministic=True)


def chain3(**kwargs) -> CompGraph:
    return CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], param_bytes=[10, 20, 30], out_bytes=[4, 6, 8],
                     compute_time={"cpu": [1e-3, 2e-3, 3e-3]}, **kwargs)


def test_a_stage_holds_its_largest_working_set_or_its_optimizer_step_by_hand():
    g = chain3(work_bytes=[50, 7, 3], largest_weight_bytes=[10, 20, 16])
    p = StageProblem.pipeline(g, 2, micro_batches=3, mode="training")  # adam-fp32: factor 4, step 2 x largest
    ev = evaluate_stages(p, [0, 0, 1])
    # stage 0: 4 x 30 + max(2 x (4 + 6) + max(50 - 6, 7), 2 x max(10, 20)): when a's backward runs, b's
    # already freed its 6 bytes of the micro-batch; stage 1: 4 x 30 + max(8 + 8 + 3, 2 x 16), c's output kept
    assert ev.stage_memory == (120 + max(20 + 44, 40), 120 + max(11, 32))
    # a node alone: the same rule on one node
    assert p.node_memory_coef[2, 1] == 120 + 32 and p.node_memory_coef[0, 0] == 40 + 2 * 4 + 50
    # SGD updates in place: no step temporaries, the working set alone (stage 1 with c's kept output)
    q = StageProblem.pipeline(g, 2, micro_batches=3, mode="training", optimizer="sgd-fp32")
    assert evaluate_stages(q, [0, 0, 1]).stage_memory == (60 + 20 + 44, 60 + 8 + 8 + 3)
    # the later node's working set meets the whole stash
    r = StageProblem.pipeline(chain3(work_bytes=[5, 70, 3], largest_weight_bytes=[0, 0, 0]), 2, micro_batches=3, mode="training")
    assert evaluate_stages(r, [0, 0, 1]).stage_memory[0] == 120 + 20 + 70
    # inference keeps its rule: parameters plus outputs in flight, nothing more
    i = StageProblem.pipeline(g, 2, micro_batches=3)
    assert evaluate_stages(i, [0, 0, 1]).stage_memory == (30 + 2 * 10, 30 + 8)


def test_estimates_when_capture_did_not_measure_are_labelled():
    g = chain3()
    # output + incoming edges' bytes + the weights read; the largest weight tensor: all of them
    assert training.work_bytes(g).tolist() == [4 + 0 + 10, 6 + 4 + 20, 8 + 6 + 30]
    assert training.step_bytes(g, "adam-fp32").tolist() == [20, 40, 60]
    assert training.work_source(g).startswith("estimated")
    assert training.work_source(chain3(work_bytes=[0, 0, 0])).startswith("measured")


def test_a_shared_weight_counts_in_its_readers_estimates():
    g = chain3(shared_weights=[{"name": "tied", "bytes": 40, "read_by": ["a", "c"]}])
    assert training.largest_weight_bytes(g).tolist() == [50, 20, 70]


@pytest.mark.parametrize("name", sorted(TORCH_OPTIMIZERS))
def test_each_presets_step_factor_is_what_the_torch_optimizer_allocates(name):
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(64, 48))
    small = torch.nn.Parameter(torch.randn(8))
    opt = TORCH_OPTIMIZERS[name]([w, small])
    for p in (w, small):
        p.grad = torch.randn_like(p)
    opt.step()  # the state (Adam's moments, the momentum) is made on the first step
    live = LiveBytes("cpu")
    live.hold([w, small, w.grad, small.grad])
    live.hold(t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor))
    before = live.current
    with live:
        opt.step()
    assert live.peak - before == training.OPTIMIZERS[name].step_factor * w.numel() * w.element_size()


def test_capture_measures_the_working_set_and_the_largest_weight():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).eval()
    g = capture(model, (torch.randn(32, 256),), granularity="module:1", training=True).graph
    assert g.work_bytes is not None and g.largest_weight_bytes is not None
    first = int(np.argmax(g.param_bytes))
    assert int(g.largest_weight_bytes[first]) == 512 * 256 * 4  # its weight, not weight + bias
    # its backward makes the weight's gradient before adding it up: at least that, beyond the stash
    assert int(g.work_bytes[first]) >= 512 * 256 * 4
    assert training.work_source(g).startswith("measured")


def test_captured_prediction_is_within_ten_percent_of_a_real_step():
    """One stage, one micro-batch: forward, backward and Adam's step under `LiveBytes`, against
    ``4 params + max(stash + work, step)`` from the captured graph."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 10))
    x = torch.randn(64, 256)
    g = capture(model.eval(), (x,), granularity="module:1", training=True).graph
    problem = StageProblem.pipeline(g, 1, micro_batches=1, mode="training")
    predicted = evaluate_stages(problem, np.zeros(g.n_nodes, dtype=np.int64)).stage_memory[0]
    model.train()
    opt = TORCH_OPTIMIZERS["adam-fp32"](list(model.parameters()))

    def step():
        model(x).sum().backward()  # the output's gradient, as a received one, is made by the sum's backward
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    live = LiveBytes("cpu")
    live.hold(model.parameters())
    live.hold(t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor))
    with live:
        step()
    assert 0.9 <= live.peak / predicted <= 1.1, (live.peak, predicted)


def test_the_new_columns_survive_json_networkx_and_merges(tmp_path):
    g = chain3(work_bytes=[50, 7, 3], largest_weight_bytes=[10, 20, 16], saved_bytes=[1, 2, 3])
    path = tmp_path / "g.json"
    g.save(path)
    assert CompGraph.load(path) == g
    assert CompGraph.from_networkx(g.to_networkx()) == g
    assert g != chain3(work_bytes=[50, 7, 4], largest_weight_bytes=[10, 20, 16], saved_bytes=[1, 2, 3])
    merged = quotient(g, np.asarray([0, 0, 1]))
    # members run one after another: the larger working set and the larger weight tensor, not the sum
    assert merged.work_bytes.tolist() == [50, 3] and merged.largest_weight_bytes.tolist() == [20, 16]
    assert merged.saved_bytes.tolist() == [3, 3]


def test_a_merge_is_safe_and_exact_when_the_last_member_works_most():
    """A stage holding a merged node holds at least what it held with the members: the merged
    working set is the members' largest, met by the whole merged stash (an earlier member's met
    less of it). Equal when the last member's working set is the largest. The stash measured (an
    estimated one counts only the merged node's outputs that leave it)."""
    for work, exact in (([50, 7, 3], False), ([5, 70, 3], True)):
        g = chain3(work_bytes=work, largest_weight_bytes=[10, 20, 16], saved_bytes=[4, 6, 8])
        merged = quotient(g, np.asarray([0, 0, 1]))
        for opt in training.OPTIMIZERS:
            a = evaluate_stages(StageProblem.pipeline(g, 2, micro_batches=3, mode="training", optimizer=opt), [0, 0, 1])
            b = evaluate_stages(StageProblem.pipeline(merged, 2, micro_batches=3, mode="training", optimizer=opt), [0, 1])
            assert all(x <= y for x, y in zip(a.stage_memory, b.stage_memory))
            assert (a.stage_memory == b.stage_memory) or not exact


@st.composite
def memory_problems(draw, objective: str):
    n = draw(st.integers(1, 5))
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if draw(st.floats(0, 1)) < 0.4]
    out = draw(st.lists(st.sampled_from([0, 2, 8]), min_size=n, max_size=n))
    g = CompGraph(
        [f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges],
        param_bytes=draw(st.lists(st.sampled_from([0, 1, 5, 20]), min_size=n, max_size=n)), out_bytes=out,
        compute_time={"cpu": draw(st.lists(st.sampled_from([1e-3, 3e-3]), min_size=n, max_size=n))},
        work_bytes=draw(st.one_of(st.none(), st.lists(st.sampled_from([0, 6, 40, 90]), min_size=n, max_size=n))),
        largest_weight_bytes=draw(st.one_of(st.none(), st.lists(st.sampled_from([0, 5, 20]), min_size=n, max_size=n))),
        shared_weights=[{"name": "tied", "bytes": 7, "read_by": [0, n - 1]}] if n > 1 and draw(st.booleans()) else None,
    )
    kwargs = dict(memory=draw(st.integers(60, 400)), micro_batches=draw(st.integers(1, 3)), mode="training",
                  optimizer=draw(st.sampled_from(sorted(training.OPTIMIZERS))), time_unit=1e-3)
    K = draw(st.integers(1, min(3, n)))  # training puts a node on every stage
    if objective == "throughput":
        return StageProblem.pipeline(g, K, **kwargs)
    return StageProblem(g, K, ObjectiveWeights(mem_peak=1, comm_total=1), **kwargs)


@given(memory_problems("peer"))
@settings(max_examples=25, deadline=None)
def test_milp_and_cpsat_meet_the_brute_force_optimum_under_training_memory(problem):
    pytest.importorskip("pulp")
    from incsched.solvers.milp.stage import solve_stage_milp

    best = brute_force(problem)
    milp, cpsat = solve_stage_milp(problem, MILP_PROOF), solve_stage(problem, FAST)
    if best is None:
        assert milp.status == cpsat.status == "infeasible"
        return
    assert milp.status == cpsat.status == "optimal" and milp.objective == cpsat.objective == best


def test_milp_refuses_what_it_does_not_model():
    from incsched.solvers.milp.stage import solve_stage_milp

    p = StageProblem(chain3(), 2, ObjectiveWeights(mem_peak=1), memory=500, micro_batches=2, mode="training", recompute=True)
    with pytest.raises(ProblemError, match="recompute"):
        solve_stage_milp(p, FAST)


@given(memory_problems("throughput"))
@settings(max_examples=30, deadline=None)
def test_pipeline_dp_finds_a_contiguous_split_whenever_one_fits(problem):
    """The DP decides memory exactly over contiguous runs of each order it tries: if some contiguous
    split of Kahn's order fits, its answer fits too."""
    g, K = problem.graph, problem.n_stages
    order = g.topological_order().tolist()
    n = len(order)
    fits = False
    for cuts in _compositions(n, K):
        stages = np.empty(n, dtype=np.int64)
        stages[order] = np.repeat(np.arange(K), cuts)
        fits |= evaluate_stages(problem, stages).feasible
    if fits:
        assert evaluate_stages(problem, pipeline_dp(problem)).feasible


def _compositions(n: int, k: int):
    """Every way to cut n positions into k runs (empty ones allowed: the evaluator refuses them in training)."""
    if k == 1:
        yield [n]
        return
    for first in range(n + 1):
        for rest in _compositions(n - first, k - 1):
            yield [first, *rest]
