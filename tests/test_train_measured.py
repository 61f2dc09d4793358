"""Training stage 3: the placement policy fine-tuned on makespans measured by `incsched.execute`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from incsched.evaluate.simulate import simulate
from incsched.execute import device_problem
from incsched.policy.placement_policy import PlacementPolicy, PolicyConfig
from incsched.train.measured import FinetuneConfig, MeasuredMakespan, finetune_on_measured
from incsched.train.placement import PlacementTrainConfig, reinforce_step

pytestmark = pytest.mark.slow  # fine-tunes on measured executions

torch.set_num_threads(1)
DEVICES = ["cpu", "cpu"]


def _policy(seed: int = 0) -> PlacementPolicy:
    torch.manual_seed(seed)
    return PlacementPolicy(PolicyConfig()).eval()


def test_each_distinct_placement_is_executed_once(block):
    problem = device_problem(block.graph, DEVICES)
    placement = _policy().preschedule(problem)
    cost = MeasuredMakespan(block, DEVICES, repeats=1)
    first = cost(problem, placement)
    assert first > 0 and cost(problem, placement) == first
    assert len(cost.measured) == 1


def test_reinforce_step_moves_the_weights_towards_cheaper_samples(block):
    # Any cost works in the step; here the simulator's, so the test is fast and deterministic.
    problem = device_problem(block.graph, DEVICES)
    policy = _policy(1)
    before = [p.detach().clone() for p in policy.parameters()]
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    step = reinforce_step(policy, opt, problem, lambda p, pl: float(simulate(p, pl, "ordered").makespan),
                          np.random.default_rng(0), PlacementTrainConfig(rl_samples=3))
    assert step["greedy_cost"] > 0 and np.isfinite(step["loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))


def test_finetune_keeps_the_weights_that_measured_fastest(block):
    policy = _policy(2)
    policy, metrics = finetune_on_measured(policy, block, DEVICES, FinetuneConfig(epochs=2, rl_samples=2, repeats=1, rl_lr=1e-2))
    assert [m["epoch"] for m in metrics] == [-1, 0, 1]
    assert all(m["greedy_measured_s"] > 0 and m["greedy_predicted_s"] > 0 for m in metrics)
    assert metrics[-1]["placements_measured"] >= 1
    # The returned policy's greedy placement is the fastest measured greedy placement of the run.
    problem = device_problem(block.graph, DEVICES)
    cost = MeasuredMakespan(block, DEVICES, repeats=1)
    kept = policy.preschedule(problem)
    best = min(metrics, key=lambda m: m["greedy_measured_s"])
    assert simulate(problem, kept, "ordered").makespan_seconds == pytest.approx(best["greedy_predicted_s"])
    assert cost(problem, kept) > 0


def test_a_finetune_that_cannot_learn_is_refused_before_anything_runs(capsys, tmp_path):
    with pytest.raises(ValueError, match="samples=0"):
        FinetuneConfig(rl_samples=0)
    from incsched.cli import main

    out = tmp_path / "never.pt"
    assert main(["finetune", "--model", "resnet18", "--samples", "0", "--out", str(out)]) == 1
    assert "samples" in capsys.readouterr().err and not out.exists()  # argparse or FinetuneConfig, either names it
