"""Execution on a GPU: the CUDA paths the CPU tests cannot reach (skipped without CUDA).

CI has no GPU; `scripts/gpu_check.sh run` runs this file on the device machine before the GPU
benchmark, so a session that is lent a GPU learns in seconds whether timing, calibration, copies
and the split runs work there.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from incsched.baselines.stage import contiguous_compute
from incsched.execute import (
    calibrated_devices,
    measure_links,
    profile_devices,
    profile_node_times,
    validate_placement,
    validate_stages,
)
from incsched.problems import PlacementProblem, StageProblem
from incsched.problems import Placement
from incsched.front_door import solve

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

GPU = "cuda:0"


@pytest.fixture(scope="module")
def timed_block(block):
    """The transformer block with node times measured on the GPU and the CPU."""
    graph, _ = profile_devices(block, [GPU, "cpu"], repeats=3, warmup=2)
    return dataclasses.replace(block, graph=graph)


def test_gpu_node_times_are_kernel_times_plus_launches(block):
    t = profile_node_times(block, GPU, repeats=3, warmup=2)
    assert t.kind == "cuda" and t.kernel_seconds > 0 and t.launch_per_op > 0
    assert t.regime in ("kernel-bound", "mixed", "launch-bound")
    assert t.conditions["device_name"] == torch.cuda.get_device_name(0)
    assert np.all(t.total() >= 0) and t.ops.sum() > 0


def test_host_gpu_copies_fit_a_positive_bandwidth():
    m = measure_links(["cpu", GPU], sizes=[1 << 16, 1 << 22], repeats=3, warmup=1)
    for i, j in m.pairs():
        assert m.bandwidth[i, j] > 1e8 and m.latency[i, j] >= 0, (i, j)


@pytest.mark.parametrize("cuda_timing", ["sync", "events"])
def test_stage_pipeline_on_one_gpu_matches_the_unsplit_model(timed_block, cuda_timing):
    stages = contiguous_compute(StageProblem(timed_block.graph, 2, device_kind="cuda"))
    v = validate_stages(timed_block, stages, [GPU, GPU], n_micro_batches=2, repeats=1, cuda_timing=cuda_timing)
    assert v.measured["makespan_s"] > 0 and v.predicted["makespan_s"] > 0
    assert all(b > 0 for b in v.measured["peak_bytes"])


@pytest.mark.parametrize("cuda_timing", ["sync", "events"])
def test_gpu_plus_cpu_placement_runs_in_its_solved_order(timed_block, cuda_timing):
    devices = [GPU, "cpu"]
    problem = PlacementProblem(timed_block.graph, calibrated_devices(devices), measure_links(devices, sizes=[1 << 12, 1 << 20]).to_links())
    n = timed_block.graph.n_nodes
    for placement in (Placement(*_solved(problem)), Placement.from_assignment(np.arange(n) % 2, 2)):  # solved, and one that crosses often
        v = validate_placement(timed_block, placement, devices, repeats=1, cuda_timing=cuda_timing)
        assert v.measured["makespan_s"] > 0 and len(v.measured["busy_s"]) == 2


def _solved(problem):
    r = solve(problem, "heft")
    return r.device, r.order


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs a GPU per process")
@pytest.mark.parametrize("runtime", ["processes", "pipelining"])
def test_process_runtimes_over_nccl(timed_block, runtime):
    stages = contiguous_compute(StageProblem(timed_block.graph, 2, device_kind="cuda"))
    v = validate_stages(timed_block, stages, ["cuda:0", "cuda:1"], n_micro_batches=2, repeats=1, runtime=runtime)
    assert v.measured["makespan_s"] > 0
