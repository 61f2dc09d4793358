"""torch.distributed.pipelining as a runtime: chain stages that forward skip values, GPipe over
forked gloo processes, outputs equal to the unsplit model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from incsched.baselines.stage import contiguous_compute
from incsched.capture import capture
from incsched.execute import (
    ExecutionError,
    Ref,
    chain_stages,
    check_execution,
    execute_pipelined,
    micro_batches,
    placement_program,
    prepare,
    stage_program,
    validate_placement,
    validate_stages,
)
from incsched.problems import Placement, StageProblem

pytestmark = pytest.mark.slow  # runs captured models over threads and processes


class Skip(torch.nn.Module):
    """a -> b -> c, and c also reads a: a skip connection over the middle stage."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Linear(8, 8) for _ in range(3))

    def forward(self, x):
        a = torch.relu(self.a(x))
        b = torch.relu(self.b(a))
        return self.c(b) + a


@pytest.fixture(scope="module")
def skip():
    torch.manual_seed(0)
    return capture(Skip().eval(), (torch.randn(3, 8),), method="fx", coarsen="none", name="skip")


def _stages_by_layer(cap):
    """Stage 0 up to linear a, stage 1 linear b, stage 2 the rest (so a's output skips stage 1)."""
    names = cap.graph.names
    cut_b = next(i for i, n in enumerate(names) if n.startswith("b"))
    cut_c = next(i for i, n in enumerate(names) if n.startswith("c"))
    order = np.argsort(cap.graph.topological_order())
    stage = np.where(order < order[cut_b], 0, np.where(order < order[cut_c], 1, 2))
    return stage


def test_a_skip_value_is_forwarded_through_the_stage_between(skip):
    stages = _stages_by_layer(skip)
    program = stage_program(skip, stages, 3)
    chain = chain_stages(program)
    crossing = set(chain[1].carry_in) & set(chain[1].carry_out)  # passes through stage 1 untouched
    assert len(crossing) == 1 and next(iter(crossing)).part == 0
    assert chain[0].carry_in == (Ref(None, 0),) and chain[2].carry_out == program.outputs
    run = execute_pipelined(program, micro_batches(skip.example_inputs, 3, seed=1), ["cpu"] * 3)
    assert check_execution(skip, program, micro_batches(skip.example_inputs, 3, seed=1), run, ["cpu"] * 3) == 0.0


@pytest.mark.parametrize("which, K", [("resnet18", 2), ("resnet18", 3), ("block", 3)])
def test_gpipe_over_processes_matches_the_unsplit_model(which, K, request):
    cap = request.getfixturevalue(which)  # conftest.py: a small resnet18 and a transformer block
    program = stage_program(cap, contiguous_compute(StageProblem(cap.graph, K)), K)
    devices, batches = ["cpu"] * K, micro_batches(cap.example_inputs, 3, seed=2)
    prepare(program, devices)
    run = execute_pipelined(program, batches, devices)
    assert check_execution(cap, program, batches, run, devices) <= 1e-5
    assert sorted((r.worker, r.micro_batch) for r in run.records) == [(k, m) for k in range(K) for m in range(3)]
    done = {(r.worker, r.micro_batch): r for r in run.records}
    for r in run.records:  # one clock across processes: stage k takes micro-batch m after stage k-1 gave it
        if r.worker > 0:
            assert r.start >= done[(r.worker - 1, r.micro_batch)].end
        if r.micro_batch > 0:  # fill and drain: each stage in micro-batch order
            assert r.start >= done[(r.worker, r.micro_batch - 1)].end
    assert run.makespan > 0 and all(b > 0 for b in run.peak_bytes)


def test_an_empty_stage_only_forwards(skip):
    stages = np.where(_stages_by_layer(skip) == 0, 0, 2)  # nothing on stage 1
    program = stage_program(skip, stages, 3)
    batches = micro_batches(skip.example_inputs, 2)
    run = execute_pipelined(program, batches, ["cpu"] * 3)
    assert check_execution(skip, program, batches, run, ["cpu"] * 3) == 0.0
    assert {r.worker for r in run.records} == {0, 2}


class Transposed(torch.nn.Module):
    """Stage 0 ends in a transpose: a non-contiguous tensor crosses to stage 1."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 6)

    def forward(self, x):
        return (self.a(x).t() * 2).sum(dim=0)


def test_a_non_contiguous_value_crosses_stages():
    torch.manual_seed(0)
    cap = capture(Transposed().eval(), (torch.randn(4, 8),), method="fx", coarsen="none", name="transposed")
    order = np.argsort(cap.graph.topological_order())
    first_mul = next(i for i, n in enumerate(cap.graph.names) if n.startswith("mul"))
    stages = (order >= order[first_mul]).astype(np.int64)  # the transpose's output goes to stage 1
    program = stage_program(cap, stages, 2)
    batches = micro_batches(cap.example_inputs, 2)
    run = execute_pipelined(program, batches, ["cpu", "cpu"])
    assert check_execution(cap, program, batches, run, ["cpu", "cpu"]) <= 1e-5


def test_validation_with_the_pipelining_runtime(skip):
    v = validate_stages(skip, _stages_by_layer(skip), ["cpu"] * 3, n_micro_batches=2, repeats=1, runtime="pipelining")
    assert v.max_abs_diff == 0.0 and v.measured["makespan_s"] > 0 and v.measured["throughput"] > 0
    placement = Placement.from_assignment(np.arange(skip.graph.n_nodes) % 2, 2)
    with pytest.raises(ExecutionError, match="stage assignments only"):
        validate_placement(skip, placement, ["cpu", "cpu"], repeats=1, runtime="pipelining")
    with pytest.raises(ExecutionError, match="unknown runtime 'fibers'"):
        validate_stages(skip, _stages_by_layer(skip), ["cpu"] * 3, repeats=1, runtime="fibers")
    program, _ = placement_program(skip, placement)
    with pytest.raises(ExecutionError, match="stage assignments only"):
        chain_stages(program)


def test_inputs_without_one_batch_shape_and_failing_ranks_are_named(skip):
    program = stage_program(skip, _stages_by_layer(skip), 3)
    with pytest.raises(ExecutionError, match="program input 0: .*batch dimension"):
        execute_pipelined(program, [(torch.randn(3, 8),), (torch.randn(4, 8),)], ["cpu"] * 3)
    with pytest.raises(ExecutionError, match="cuda:63"):
        execute_pipelined(program, micro_batches(skip.example_inputs, 1), ["cpu", "cuda:63", "cpu"])
