"""A real pipeline training step: ``torch.distributed.pipelining`` over CPU ranks (or GPUs), an
optimizer step on every stage, with each stage's peak tensor memory and the step's time measured.

This is the check that holds training mode's predictions (parameters + gradients + optimizer state
+ the activations a schedule stashes, forward + backward time) against execution. One forked process
per stage joins a gloo (or NCCL) group, wraps its module in ``PipelineStage`` and runs the chosen
schedule with a loss on the last stage, then ``optimizer.step()``:

1. one untimed step: the schedule exchanges shapes and sets up buffers, and the optimizer creates
   its state (Adam's moments) lazily on its first step;
2. one step under `LiveBytes`, which counts every tensor storage alive on the stage's device: its
   peak is the stage's peak memory, in the units the memory model predicts;
3. ``timed_steps`` steps without it (the dispatch mode slows operators), each timed from a barrier.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .distributed import run_ranks
from .live_bytes import LiveBytes, distinct_tensor_bytes
from .partition import ExecutionError

__all__ = ["SCHEDULES", "TORCH_OPTIMIZERS", "StageStep", "TrainingStep", "train_step"]

#: The schedules of training mode (`incsched.problems.training.SCHEDULES`) that this runs.
SCHEDULES = ("1f1b", "gpipe")

#: torch optimizers for training mode's fp32 presets (`incsched.problems.training.OPTIMIZERS`, by
#: the same names); foreach=False keeps the step's temporaries to one weight tensor at a time.
TORCH_OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "adam-fp32": lambda params: torch.optim.Adam(params, lr=1e-4, foreach=False),
    "sgd-momentum-fp32": lambda params: torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=False),
    "sgd-fp32": lambda params: torch.optim.SGD(params, lr=1e-3, foreach=False),
}


@dataclass
class StageStep:
    """What one stage measured: tensor bytes (weights, their gradients at the peak, optimizer state
    after the step, the peak of everything alive) and its seconds per timed step."""

    param_bytes: int
    optimizer_bytes: int
    peak_bytes: int
    seconds: list[float] = field(default_factory=list)


@dataclass
class TrainingStep:
    """Per stage measurements, the step's wall time (the slowest rank's, per timed step) and the losses."""

    stages: list[StageStep]
    step_seconds: list[float]
    losses: list[float]
    schedule: str
    optimizer: str
    n_micro: int

    @property
    def median_step_seconds(self) -> float:
        s = sorted(self.step_seconds)
        return s[len(s) // 2]


def train_step(
    stage_modules: Sequence[nn.Module],
    inputs: Sequence[torch.Tensor],
    target: torch.Tensor,
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor],
    *,
    n_micro: int,
    schedule: str = "1f1b",
    optimizer: str = "adam-fp32",
    timed_steps: int = 3,
    devices: Sequence[str] | None = None,
    backend: str = "gloo",
    threads: int = 1,
) -> TrainingStep:
    """Train ``stage_modules`` (a chain: stage k's outputs are stage k + 1's inputs) for a few steps.

    Parameters
    ----------
    stage_modules : sequence of nn.Module
        One module per stage, e.g. ``pipe.get_stage_module(k)`` of `incsched.export.build_pipeline`.
    inputs : sequence of Tensor
        The whole batch's inputs to stage 0; the schedule splits them into ``n_micro`` along dim 0.
    target : Tensor
        What ``loss_fn(last stage's output, target)`` compares against, split the same way.
    schedule : {"1f1b", "gpipe"}
    optimizer : str
        A key of `TORCH_OPTIMIZERS`.
    devices : sequence of str, optional
        The torch device per stage (default all ``"cpu"``).

    Raises
    ------
    ExecutionError
        Fewer than 2 stages, an unknown schedule or optimizer, or a rank that failed (named).
    """
    K = len(stage_modules)
    if K < 2:
        raise ExecutionError("a pipeline training step needs at least 2 stages")
    if schedule not in SCHEDULES:
        raise ExecutionError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if optimizer not in TORCH_OPTIMIZERS:
        raise ExecutionError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(TORCH_OPTIMIZERS)}")
    devices = list(devices or ["cpu"] * K)
    args = (list(stage_modules), tuple(inputs), target, loss_fn, n_micro, schedule, optimizer, timed_steps, devices)
    reports = run_ranks(K, _train_rank, args, backend=backend, threads=threads)
    stages = [reports[k]["stage"] for k in range(K)]
    steps = [max(reports[k]["stage"].seconds[i] for k in range(K)) for i in range(timed_steps)]
    return TrainingStep(stages, steps, reports[K - 1]["losses"], schedule, optimizer, n_micro)


def _train_rank(rank, modules, inputs, target, loss_fn, n_micro, schedule, optimizer, timed_steps, devices) -> dict[str, Any]:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    K = len(modules)
    device = torch.device(devices[rank])
    module = modules[rank].to(device).train()
    stage = PipelineStage(module, rank, K, device)
    kind = Schedule1F1B if schedule == "1f1b" else ScheduleGPipe
    runner = kind(stage, n_microbatches=n_micro, loss_fn=loss_fn)
    params = [p for p in module.parameters() if p.requires_grad]
    opt = TORCH_OPTIMIZERS[optimizer](params)
    inputs = tuple(x.to(device) for x in inputs)
    target = target.to(device)
    losses: list[torch.Tensor] = []

    def step() -> None:
        losses.clear()
        if rank == 0:
            runner.step(*inputs)
        elif rank == K - 1:
            runner.step(target=target, losses=losses, return_outputs=False)
        else:
            runner.step()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # shapes, buffers and the optimizer's state: set up once, not what a step costs
    live = LiveBytes(device)
    live.hold(module.parameters())
    live.hold(module.buffers())
    live.hold(t for state in opt.state.values() for t in state.values() if isinstance(t, torch.Tensor))
    with live:
        step()
    param_bytes = distinct_tensor_bytes([*module.parameters(), *module.buffers()])
    optimizer_bytes = distinct_tensor_bytes(t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor) and t.dim() > 0)
    dist.barrier()
    seconds = []
    for _ in range(timed_steps):
        dist.barrier()
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    return {
        "stage": StageStep(param_bytes, optimizer_bytes, live.peak, seconds),
        "losses": [float(x.detach()) for x in losses],
    }

