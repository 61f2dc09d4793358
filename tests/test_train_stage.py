"""Stage-policy training: a smoke run on a tiny set whose imitation loss falls, per-epoch metrics
logged by name, a seeded run that repeats exactly, and a config that round-trips through JSON."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from incsched.baselines.stage import pipedream_dp
from incsched.evaluate.stage import evaluate_stages
from incsched.train.stage import StageTrainConfig, train_stage_policy, training_problems

pytestmark = pytest.mark.slow  # trains the stage policy

torch.set_num_threads(1)

TINY = StageTrainConfig(
    seed=5, n_graphs=6, n_validation=1, min_nodes=12, max_nodes=24, ks=(2, 3), label_cache=None,
    hidden=8, n_layers=1, decoder_hidden=8, imitation_epochs=10, lr=1e-2, rl_epochs=1, rl_samples=2,
)


def heuristic_labels(problems):
    # Fast stand-in for the CP-SAT labels: the contiguous DP's assignment (a fixed, learnable target).
    out = []
    for p in problems:
        s = pipedream_dp(p)
        out.append({"stages": s.tolist(), "objective": evaluate_stages(p, s).objective, "status": "feasible"})
    return out


@pytest.fixture(scope="module")
def tiny_run():
    problems = training_problems(TINY)
    return problems, train_stage_policy(TINY, problems=problems, labels=heuristic_labels(problems))


def test_imitation_loss_falls_and_metrics_are_logged(tiny_run):
    _, (policy, metrics) = tiny_run
    rows = metrics["epochs"]
    imitation = [r for r in rows if r["phase"] == "imitation"]
    assert len(imitation) == TINY.imitation_epochs and len(rows) == TINY.imitation_epochs + TINY.rl_epochs
    assert imitation[-1]["loss"] < 0.8 * imitation[0]["loss"]
    for r in rows:
        assert {"loss", "val_ratio_to_label", "val_ratio_to_contiguous", "val_sampled_ratio_to_label", "seconds"} <= set(r)
        assert np.isfinite(r["loss"])
    assert metrics["selected_epoch"] and metrics["seconds"] > 0


def test_trained_policy_decodes_feasibly(tiny_run):
    problems, (policy, _) = tiny_run
    for p in problems:
        assert evaluate_stages(p, policy.decode(p).stages).feasible


def test_same_seed_same_run(tiny_run):
    problems, (policy, metrics) = tiny_run
    config = StageTrainConfig.from_json({**TINY.to_json(), "imitation_epochs": 3, "rl_epochs": 0})
    a = train_stage_policy(config, problems=problems, labels=heuristic_labels(problems))
    b = train_stage_policy(config, problems=problems, labels=heuristic_labels(problems))
    assert [r["loss"] for r in a[1]["epochs"]] == [r["loss"] for r in b[1]["epochs"]]
    for x, y in zip(a[0].state_dict().values(), b[0].state_dict().values()):
        assert torch.equal(x, y)


def test_config_round_trip_and_generated_problems_are_seeded():
    assert StageTrainConfig.from_json(TINY.to_json()) == TINY
    a, b = training_problems(TINY), training_problems(TINY)
    assert [p.graph for p in a] == [p.graph for p in b] and [p.n_stages for p in a] == [p.n_stages for p in b]
    # The shipped real-model graphs are the held-out test set and never among the training graphs.
    assert not any(p.graph.meta.get("model") for p in a)
    with pytest.raises(TypeError):
        StageTrainConfig.from_json({"no_such_field": 1})


def test_reinforce_clips_gradients_from_the_config(tiny_run):
    # A clip of zero zeroes every gradient, so a REINFORCE epoch leaves the imitation weights as they were.
    problems, _ = tiny_run
    base = {**TINY.to_json(), "imitation_epochs": 1}
    runs = [train_stage_policy(StageTrainConfig.from_json({**base, **change}), problems=problems, labels=heuristic_labels(problems))
            for change in ({"rl_epochs": 0}, {"rl_epochs": 1, "grad_clip": 0.0})]
    for x, y in zip(runs[0][0].state_dict().values(), runs[1][0].state_dict().values()):
        assert torch.equal(x, y)
    assert {r["phase"] for r in runs[1][1]["epochs"]} == {"imitation", "reinforce"}
