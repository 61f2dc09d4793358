"""Stage 3 of placement training: fine-tune the policy on runtimes measured on real devices.

Stages 1-2 (`incsched.train.placement`) learn from the simulator's makespan on generated graphs.
Here the cost of a decoded placement is the makespan `incsched.execute` measures when a captured
model runs in that placement on the given devices (its outputs checked against the unsplit model
each time), and the same `reinforce_step` updates the policy. The weights kept are those whose
greedy placement measured fastest, the starting weights included, so fine-tuning never hands back
a policy whose placement ran slower on these devices than the one it started from.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ..evaluate.simulate import simulate
from ..policy.placement_policy import PlacementPolicy
from ..problems import Links, Placement, PlacementProblem
from . import fields
from .metrics import epoch_row, log_row
from .placement import PlacementTrainConfig, reinforce_step

__all__ = ["FinetuneConfig", "MeasuredMakespan", "finetune_on_measured"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FinetuneConfig:
    """Every knob of a fine-tuning run (the measurements themselves are the machine's)."""

    seed: int = 0
    epochs: int = 3
    rl_samples: int = 4
    rl_lr: float = 1e-4  # small: a handful of noisy measured rewards should nudge, not retrain
    rl_temperature: float = 1.0
    entropy_weight: float = 0.0
    grad_clip: float = 1.0
    repeats: int = 3  # timed runs per distinct placement, median

    def __post_init__(self):
        for name in ("epochs", "rl_samples", "repeats", "rl_lr", "rl_temperature"):  # types first: "3" < 1 is a TypeError
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a number, got {value!r:.80}")
        if self.epochs < 0 or self.rl_samples < 1 or self.repeats < 1:
            raise ValueError(f"fine-tuning needs epochs >= 0, samples >= 1 and repeats >= 1; got epochs={self.epochs}, "
                             f"samples={self.rl_samples}, repeats={self.repeats}")
        if self.rl_lr <= 0 or self.rl_temperature <= 0:
            raise ValueError(f"fine-tuning needs a positive learning rate and temperature; got {self.rl_lr}, {self.rl_temperature}")
        fields.whole("seed", self.seed, 0, 2**63 - 1)  # the rest through the one field check
        for name in ("epochs", "rl_samples", "repeats"):
            fields.whole(name, getattr(self, name), 0)
        for name in ("rl_lr", "rl_temperature"):
            fields.real(name, getattr(self, name), 0.0, above=True)
        for name in ("entropy_weight", "grad_clip"):
            fields.real(name, getattr(self, name), 0.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class MeasuredMakespan:
    """``cost(problem, placement)``: the measured makespan (seconds) of ``placement`` on ``devices``.

    Each distinct placement (devices and per-device orders) runs once (`validate_placement`:
    a warm-up, then the median of ``repeats`` timed runs, outputs checked); asking again returns
    that measurement, so a policy that keeps decoding the same placement does not re-time it.

    Parameters
    ----------
    capture : incsched.capture.Capture
        The model, its example inputs and its graph.
    devices : sequence of str
        Torch devices, one per placement device.
    repeats : int
    links : Links, optional
        Measured links (`incsched.execute.calibrate`), for the predictions beside the measurements.
    """

    def __init__(self, capture, devices: Sequence[str], repeats: int = 3, links: Links | None = None):
        self.capture, self.devices, self.repeats, self.links = capture, list(devices), int(repeats), links
        self.measured: dict[tuple, float] = {}

    def __call__(self, problem: PlacementProblem, placement: Placement) -> float:
        from ..execute import validate_placement

        key = (np.asarray(placement.device).tobytes(), tuple(tuple(int(v) for v in o) for o in placement.order))
        if key not in self.measured:
            v = validate_placement(self.capture, placement, self.devices, repeats=self.repeats, links=self.links)
            self.measured[key] = float(v.measured["makespan_s"])
        return self.measured[key]


def finetune_on_measured(
    model: PlacementPolicy,
    capture,
    devices: Sequence[str],
    config: FinetuneConfig = FinetuneConfig(),
    *,
    links: Links | None = None,
) -> tuple[PlacementPolicy, list[dict[str, Any]]]:
    """Fine-tune ``model`` by REINFORCE on the measured makespan of ``capture`` placed on ``devices``.

    Parameters
    ----------
    model : PlacementPolicy
        Starting weights (e.g. the shipped checkpoint); updated in place. They are trained in a
        copy built with torch_geometric's ``GINEConv`` (`PlacementPolicy.with_conv`), whose best
        weights are then loaded into ``model``.
    capture : incsched.capture.Capture
        A captured model with measured node times (they set the problem the policy decodes).
    devices : sequence of str
        Torch devices, e.g. ``["cpu", "cpu"]`` or ``["cuda:0", "cpu"]``.
    config : FinetuneConfig
    links : Links, optional
        Measured links between the devices (`incsched.execute.calibrate.measure_links`).

    Returns
    -------
    (PlacementPolicy, list of dict)
        The policy with the weights whose greedy placement measured fastest, and one metrics row
        per epoch in `incsched.train.metrics`' vocabulary (phase ``"start"``, epoch -1: the starting
        weights; then ``"finetune"``): measured and predicted greedy makespan (s),
        the best sampled placement's gain over greedy, distinct placements measured so far.
    """
    from ..execute import device_problem

    problem = device_problem(capture.graph, devices, links)
    cost = MeasuredMakespan(capture, devices, config.repeats, links)
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    step_config = PlacementTrainConfig(rl_samples=config.rl_samples, rl_temperature=config.rl_temperature,
                                       entropy_weight=config.entropy_weight, grad_clip=config.grad_clip)
    # Training learns with torch_geometric's GINEConv; a policy loaded for inference has the plain twin.
    learner = model if model.encoder.conv == "torch_geometric" else model.with_conv("torch_geometric")
    opt = torch.optim.Adam(learner.parameters(), lr=config.rl_lr)

    def greedy_row(epoch: int, t0: float, **extra) -> dict[str, Any]:
        placement = learner.preschedule(problem)
        measured = cost(problem, placement)
        return epoch_row("start" if epoch < 0 else "finetune", epoch, time.perf_counter() - t0, greedy_measured_s=measured,
                         greedy_predicted_s=float(simulate(problem, placement, "ordered").makespan_seconds),
                         **extra, placements_measured=len(cost.measured))

    metrics = [greedy_row(-1, time.perf_counter())]
    best, best_state = metrics[0]["greedy_measured_s"], {k: v.detach().clone() for k, v in learner.state_dict().items()}
    for epoch in range(config.epochs):
        t0 = time.perf_counter()
        step = reinforce_step(learner, opt, problem, cost, rng, step_config)
        metrics.append(greedy_row(epoch, t0, best_sample_gain=step["best_sample_gain"], loss=step["loss"]))
        log_row(log, "fine-tune on measured runtimes", metrics[-1])
        if metrics[-1]["greedy_measured_s"] < best:
            best = metrics[-1]["greedy_measured_s"]
            best_state = {k: v.detach().clone() for k, v in learner.state_dict().items()}
    model.load_state_dict(best_state)
    return model, metrics
