"""A real pipeline training step over gloo CPU ranks, with each stage's peak tensor bytes counted."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from incsched.execute.live_bytes import LiveBytes
from incsched.execute.partition import ExecutionError
from incsched.execute.training_step import train_step


def test_live_bytes_counts_backward_and_optimizer_state_and_frees():
    torch.manual_seed(0)
    lin = nn.Linear(64, 64)
    opt = torch.optim.Adam(lin.parameters(), foreach=False)
    x = torch.randn(8, 64)
    params = sum(p.numel() * 4 for p in lin.parameters())
    live = LiveBytes("cpu")
    live.hold(lin.parameters())
    with live:
        lin(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    # weights, their gradients and Adam's two moments were all alive before the gradients went
    assert live.peak >= 4 * params
    # after the step: weights and moments stay (plus Adam's step counters), gradients are freed
    assert 3 * params <= live.current < 3 * params + 64


def _mlp_stages(width: int = 256):
    torch.manual_seed(0)
    first = nn.Sequential(nn.Linear(32, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
    last = nn.Sequential(nn.Linear(width, 32), nn.ReLU(), nn.Linear(32, 4))
    return [first, last]


def test_a_1f1b_training_step_trains_and_measures_every_stage():
    stages = _mlp_stages()
    x, y = torch.randn(64, 32), torch.randint(0, 4, (64,))
    result = train_step(stages, (x,), y, nn.functional.cross_entropy, n_micro=4, timed_steps=2)
    assert len(result.stages) == 2 and len(result.step_seconds) == 2
    assert len(result.losses) == 4 and all(torch.isfinite(torch.tensor(result.losses)))
    for module, stage in zip(stages, result.stages):
        params = sum(p.numel() * p.element_size() for p in module.parameters())
        assert stage.param_bytes == params
        assert stage.optimizer_bytes == 2 * params  # Adam's two moments per weight
        assert stage.peak_bytes >= 4 * params  # weights, gradients, moments, and activations besides


def test_gpipe_stashes_every_micro_batch_where_1f1b_stashes_fewer():
    # Wide activations, small weights: stage 0 keeps 4 micro-batches' ReLU outputs (1 MiB each)
    # under GPipe, fewer under 1F1B.
    x, y = torch.randn(1024, 32), torch.randint(0, 4, (1024,))
    peaks = {}
    for schedule in ("gpipe", "1f1b"):
        torch.manual_seed(0)
        stages = [nn.Sequential(nn.Linear(32, 1024), nn.ReLU()), nn.Linear(1024, 4)]
        result = train_step(stages, (x,), y, nn.functional.cross_entropy, n_micro=4, schedule=schedule, timed_steps=1)
        peaks[schedule] = result.stages[0].peak_bytes
    assert peaks["gpipe"] - peaks["1f1b"] >= 256 * 1024 * 4  # at least one micro-batch's fewer


@pytest.mark.parametrize("kwargs, message", [
    ({"schedule": "zigzag"}, "unknown schedule 'zigzag'"),
    ({"optimizer": "lion"}, "unknown optimizer 'lion'"),
])
def test_bad_choices_are_one_line_errors(kwargs, message):
    with pytest.raises(ExecutionError, match=message):
        train_step(_mlp_stages(), (torch.randn(8, 32),), torch.zeros(8, dtype=torch.long), nn.functional.cross_entropy, n_micro=2, **kwargs)


def test_one_stage_is_refused():
    with pytest.raises(ExecutionError, match="at least 2 stages"):
        train_step(_mlp_stages()[:1], (torch.randn(8, 32),), torch.zeros(8, dtype=torch.long), nn.functional.cross_entropy, n_micro=2)
