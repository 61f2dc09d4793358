"""Policy checkpoints: a round trip gives the same policy; corrupt, swapped, mismatched or
incomplete files fail with a CheckpointError that names the file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from incsched.generators.random_dag import respect_like
from incsched.policy.checkpoint import (
    CheckpointError,
    default_stage_checkpoint,
    load_checkpoint,
    load_stage_policy,
    save_stage_policy,
)
from incsched.policy.stage_policy import StagePolicy
from incsched.problems.stage import StageProblem

torch.set_num_threads(1)


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(3)
    policy = StagePolicy(hidden=8, n_layers=1, decoder_hidden=8).eval()
    path = tmp_path / "policy.pt"
    save_stage_policy(path, policy, train_config={"seed": 3}, metrics={"epochs": [{"loss": 1.5}]})
    return policy, path


def test_round_trip_gives_the_same_policy(saved):
    policy, path = saved
    loaded, meta = load_stage_policy(path)
    for (k, a), (k2, b) in zip(policy.state_dict().items(), loaded.state_dict().items()):
        assert k == k2 and torch.equal(a, b)
    assert meta["train_config"] == {"seed": 3} and meta["metrics"]["epochs"][0]["loss"] == 1.5
    assert meta["model_config"] == {"hidden": 8, "n_layers": 1, "decoder_hidden": 8}
    problem = StageProblem.peer(respect_like(40, seed=1), n_stages=4)
    a, b = policy.decode(problem), loaded.decode(problem)
    assert np.array_equal(a.stages, b.stages) and np.allclose(a.confidence, b.confidence)


def test_corrupt_weights_are_detected(saved):
    _, path = saved
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt") as err:
        load_stage_policy(path)
    assert str(path) in str(err.value)


def test_garbage_with_a_matching_hash_is_still_rejected(saved, tmp_path):
    import hashlib

    _, path = saved
    path.write_bytes(b"not a torch file")
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["weights_sha256"] = hashlib.sha256(b"not a torch file").hexdigest()
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="cannot be loaded"):
        load_stage_policy(path)


def test_missing_files(saved, tmp_path):
    _, path = saved
    with pytest.raises(CheckpointError, match="does not exist"):
        load_stage_policy(tmp_path / "absent.pt")
    path.with_suffix(".json").unlink()
    with pytest.raises(CheckpointError, match="no metadata"):
        load_stage_policy(path)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("kind", "placement", "not a 'stage' policy"),
        ("version", 99, "version"),
        ("format", "something.else", "not a policy checkpoint"),
        ("features", {"node_features": ["other"]}, "feature layout"),
    ],
)
def test_mismatched_metadata(saved, field, value, message):
    _, path = saved
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta[field] = value
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path, kind="stage")


def test_weights_that_do_not_fit_the_architecture(saved):
    _, path = saved
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["model_config"]["hidden"] = 16
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="do not fit"):
        load_stage_policy(path)


@pytest.mark.skipif(not default_stage_checkpoint().exists(), reason="no shipped stage policy")
def test_shipped_checkpoint_loads_with_weights_only_and_records_its_training():
    policy, meta = load_stage_policy()
    assert isinstance(policy, StagePolicy) and not policy.training
    assert meta["train_config"] is not None and meta["metrics"]["epochs"]
    assert default_stage_checkpoint().stat().st_size < 5_000_000
