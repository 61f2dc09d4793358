"""Tests of incsched.train.placement: generated problems, teacher labels, and seeded, reproducible training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.baselines.placement import critical_path_list, heft
from incsched.evaluate.simulate import simulate
from incsched.policy.placement_policy import PolicyConfig
from incsched.train.placement import (
    PlacementTrainConfig,
    generate_graph,
    make_problem,
    teacher_schedule,
    train_placement_policy,
    training_problems,
)

pytestmark = pytest.mark.slow  # trains the placement policy

torch.set_num_threads(1)

TINY = PlacementTrainConfig(
    seed=3,
    policy=PolicyConfig(hidden=8, n_layers=1, head_hidden=8),
    imitation_graphs=2,
    imitation_ops=(15, 40),
    label_time_limit=0.0,  # best heuristic labels: no CP-SAT in the default test run
    imitation_epochs=3,
    rl_epochs=2,
    rl_graphs_per_epoch=2,
    rl_ops=(15, 40),
    rl_samples=2,
    validation_graphs=2,
    time_budget_s=None,
)


@given(st.integers(0, 2**31 - 1), st.sampled_from([(20, 60), (40, 99), (100, 300)]))
@settings(max_examples=15, deadline=None)
def test_generated_graphs_fit_the_requested_size(seed, ops):
    g = generate_graph(np.random.default_rng(seed), ops)
    assert ops[0] <= g.n_nodes <= ops[1]


def test_make_problem_sets_the_comm_ratio():
    g = generate_graph(np.random.default_rng(0), (20, 60))
    p = make_problem(g, 4, 4.0)
    assert p.n_devices == 4 and len(p.identical_devices) == 1
    mean_transfer = float(np.mean(p.transfer_seconds()[:, 0, 1]))
    assert mean_transfer == pytest.approx(4.0 * float(np.mean(g.time("cpu"))), rel=1e-9)


def test_config_round_trips_through_a_dict():
    assert PlacementTrainConfig.from_dict(TINY.to_dict()) == TINY


def test_teacher_is_no_worse_than_either_list_scheduler():
    p = training_problems(np.random.default_rng(1), 1, (20, 40), TINY)[0]
    best = min(simulate(p, f(p), "ordered").makespan for f in (critical_path_list, heft))
    sched, who = teacher_schedule(p, time_limit=0.05)
    assert sched.makespan <= best and who in ("critical_path_list", "heft", "cpsat")


def test_training_is_reproducible_and_logs_every_epoch():
    m1, metrics1 = train_placement_policy(TINY)
    m2, metrics2 = train_placement_policy(TINY)
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), k

    def strip(rows):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]

    rows1 = metrics1["epochs"]
    assert strip(rows1) == strip(metrics2["epochs"])
    phases = [r["phase"] for r in rows1]
    assert phases.count("imitation") == TINY.imitation_epochs
    assert phases.count("reinforce") == TINY.rl_epochs
    assert all(np.isfinite(r["loss"]) for r in rows1 if "loss" in r)
    assert metrics1["labels"]["n"] == TINY.imitation_graphs and metrics1["selected_epoch"] and metrics1["seconds"] > 0


def test_imitation_lowers_its_loss():
    cfg = PlacementTrainConfig(**{**TINY.__dict__, "imitation_epochs": 12, "rl_epochs": 0})
    _, metrics = train_placement_policy(cfg)
    losses = [r["loss"] for r in metrics["epochs"] if r["phase"] == "imitation"]
    assert losses[-1] < losses[0]


def test_reward_hook_replaces_the_simulator():
    calls = []

    def measured(problem, placement):
        calls.append(problem.n_nodes)
        return float(simulate(problem, placement, "fcfs").makespan)

    cfg = PlacementTrainConfig(**{**TINY.__dict__, "imitation_epochs": 0, "rl_epochs": 1})
    train_placement_policy(cfg, reward_fn=measured)
    # Per graph: the greedy baseline plus every sample.
    assert len(calls) == cfg.rl_graphs_per_epoch * (1 + cfg.rl_samples)


def test_updates_clip_gradients_from_the_config():
    # A clip of zero zeroes every gradient (Adam then moves nothing): as if no epoch had run.
    base = {**TINY.__dict__, "imitation_epochs": 0}
    untrained, _ = train_placement_policy(PlacementTrainConfig(**{**base, "rl_epochs": 0}))
    clipped, metrics = train_placement_policy(PlacementTrainConfig(**{**base, "rl_epochs": 1, "grad_clip": 0.0}))
    for x, y in zip(untrained.state_dict().values(), clipped.state_dict().values()):
        assert torch.equal(x, y)
    assert [r["phase"] for r in metrics["epochs"]] == ["start", "reinforce"]
