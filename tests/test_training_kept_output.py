"""Training mode's kept output (issue 23): the stage holding a graph output keeps it per micro-batch
in flight, because ``torch.distributed.pipelining`` runs the loss outside the last stage and caches
each micro-batch's output until its backward. The rule by hand, where its bytes come from (the
sink's output, or what the last layer hands to a loss captured with it), a real pipeline step under
GPipe and 1F1B against the prediction, and the exact models against brute force where it decides."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from oracles import MILP_PROOF, brute_force_stages as brute_force
from torch import nn

from incsched.baselines.stage import pipeline_dp
from incsched.capture import capture
from incsched.evaluate.stage import evaluate_stages
from incsched.execute.training_step import train_step
from incsched.graph import CompGraph
from incsched.problems import training
from incsched.problems.stage import StageProblem
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.stage import solve_stage

FAST = SolverSettings(time_limit=10.0, deterministic=True)


def chain(out_bytes, **kwargs) -> CompGraph:
    n = len(out_bytes)
    names = [f"n{i}" for i in range(n)]
    return CompGraph(names, names[:-1], names[1:], out_bytes=out_bytes, compute_time={"cpu": [1e-3] * n},
                     work_bytes=[0] * n, largest_weight_bytes=[0] * n, **kwargs)


@pytest.mark.parametrize("schedule, recompute, kept_times", [
    ("1f1b", False, 1), ("gpipe", False, 3), ("interleaved:2", False, 2), ("1f1b", True, 1), ("gpipe", True, 3),
])
def test_the_last_stage_keeps_its_output_per_micro_batch_in_flight(schedule, recompute, kept_times):
    # saved_bytes 0: nothing stashed, so each stage holds exactly what the pipeline keeps besides
    g = chain([4, 6, 50], saved_bytes=[0, 0, 0])
    p = StageProblem.pipeline(g, 2, micro_batches=3, mode="training", schedule=schedule, recompute=recompute)
    ev = evaluate_stages(p, [0, 0, 1])
    received = kept_times * 6 if recompute else 0  # b's 6 bytes, kept as they arrive under recompute
    assert ev.stage_memory[1] == kept_times * 50 + received
    assert training.kept_output_bytes(g).tolist() == [0, 0, 50]
    assert p.stage_memory_coef[2].tolist() == [p.in_flight()[0] * 50, kept_times * 50]
    assert training.kept_output_source(g) == "the graph outputs' out_bytes"


def test_a_loss_captured_with_the_last_layer_keeps_its_input_not_the_loss():
    # The sink is the loss (4 bytes); the pipeline keeps what the last layer handed it (the logits).
    g = chain([4, 6, 4], saved_bytes=[0, 0, 0], meta={"loss_input_bytes": {"n2": 80}})
    p = StageProblem.pipeline(g, 2, micro_batches=3, mode="training", schedule="gpipe")
    assert training.kept_output_bytes(g).tolist() == [0, 0, 80]
    assert evaluate_stages(p, [0, 0, 1]).stage_memory[1] == 3 * 80
    assert training.kept_output_source(g).startswith("measured at capture")
    # a name that is no graph output (a merged or renamed node) leaves the sink's own bytes
    other = chain([4, 6, 4], meta={"loss_input_bytes": {"n1": 80}})
    assert training.kept_output_bytes(other).tolist() == [0, 0, 4]


class _Classifier(nn.Module):
    """A small body and a wide head: the logits (micro-batch x 4096 floats) outweigh the weights."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 8), nn.ReLU())
        self.head = nn.Linear(8, 4096)

    def forward(self, x, labels=None):
        logits = self.head(self.body(x))
        return logits if labels is None else nn.functional.cross_entropy(logits, labels)


def test_capture_records_what_the_last_layer_hands_to_the_loss():
    torch.manual_seed(0)
    x, y = torch.randn(32, 16), torch.randint(0, 4096, (32,))
    with_loss = capture(_Classifier().eval(), (x, y), granularity="module:1", training=True).graph
    logits = 32 * 4096 * 4
    assert with_loss.meta["loss_input_bytes"] == {"head": logits}
    assert int(with_loss.out_bytes[-1]) == 4  # the loss
    assert training.kept_output_bytes(with_loss).tolist() == [0, logits]
    without = capture(_Classifier().eval(), (x,), granularity="module:1", training=True).graph
    assert "loss_input_bytes" not in without.meta and training.kept_output_bytes(without).tolist() == [0, logits]


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_the_last_stage_of_a_real_step_peaks_where_predicted(schedule):
    """Two gloo ranks, M = 4: the last stage's measured peak within 10 % of the prediction, which
    without the kept logits (one micro-batch's under 1F1B, four under GPipe) would be over 10 % low."""
    torch.manual_seed(0)
    mb, M = 64, 4
    x, y = torch.randn(mb * M, 16), torch.randint(0, 4096, (mb * M,))
    model = _Classifier().eval()
    g = capture(model, (x[:mb], y[:mb]), granularity="module:1", training=True).graph
    p = StageProblem.pipeline(g, 2, micro_batches=M, mode="training", schedule=schedule)
    predicted = evaluate_stages(p, [0, 1]).stage_memory[1]
    kept = p.in_flight()[1] * mb * 4096 * 4
    measured = train_step([model.body, model.head], (x,), y, nn.functional.cross_entropy, n_micro=M, schedule=schedule,
                          timed_steps=1).stages[1].peak_bytes
    assert 0.9 <= measured / predicted <= 1.1, (measured, predicted)
    assert measured / (predicted - kept) > 1.1, (measured, predicted - kept)


def test_the_kept_output_decides_the_optimum_and_every_back_end_agrees():
    # A chain whose output is large: with it kept, the last stage cannot also hold c under the cap.
    g = chain([8, 8, 8, 40], saved_bytes=[4, 4, 4, 0])
    p = StageProblem.pipeline(g, 2, memory=42, micro_batches=3, mode="training", time_unit=1e-3)
    best = brute_force(p)
    out = solve_stage(p, FAST)
    assert out.status == "optimal" and out.objective == best == 4 * 9  # M + K - 1 slots of 3 nodes' 3 ticks
    # d alone keeps its 40 bytes; c beside it would need 4 + 40 > 42; stage 0 keeps 2 x 12
    assert out.assignment.tolist() == [0, 0, 0, 1]
    free = StageProblem.pipeline(g.replace(out_bytes=[8, 8, 8, 0]), 2, memory=42, micro_batches=3, mode="training", time_unit=1e-3)
    assert brute_force(free) == 4 * 6 < best  # without the kept output the even split fits
    assert evaluate_stages(p, pipeline_dp(p)).objective == best
    pulp = pytest.importorskip("pulp")
    assert pulp
    from incsched.solvers.milp.stage import solve_stage_milp

    milp = solve_stage_milp(p, MILP_PROOF)
    assert milp.status == "optimal" and milp.objective == best
