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


# ---------------------------------------------------------------------- safe but malformed files


@pytest.mark.parametrize(
    "config, message",
    [
        ([8, 1, 8], "the model config must be an object of layer sizes, got list"),
        ({"hidden": "8", "n_layers": 1, "decoder_hidden": 8}, "model config hidden = '8'"),
        ({"hidden": 10**9, "n_layers": 1, "decoder_hidden": 8}, "hidden = 1000000000; sizes are whole numbers in 1..4096"),
        ({"hidden": True, "n_layers": 1, "decoder_hidden": 8}, "hidden = True"),
        ({"hidden": 8, "n_layers": -1, "decoder_hidden": 8}, "n_layers = -1"),
    ],
)
def test_stage_model_config_is_checked_before_building(saved, config, message):
    _, path = saved
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["model_config"] = config
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=message):
        load_stage_policy(path)


def _placement_blob(**changes):
    from incsched.policy.placement_policy import CHECKPOINT_FORMAT, CHECKPOINT_VERSION

    blob = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "policy_config": {"hidden": 8, "n_layers": 1, "head_hidden": 8},
            "state_dict": {"w": torch.zeros(2)}}
    blob.update(changes)
    return {k: v for k, v in blob.items() if v is not None}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"policy_config": None}, "the checkpoint has no 'policy_config'"),
        ({"state_dict": None}, "the checkpoint has no 'state_dict'"),
        ({"policy_config": {"hidden": "big"}}, "model config hidden = 'big'"),
        ({"policy_config": {"hidden": 1 << 40}}, "sizes are whole numbers in 1..4096"),
        ({"policy_config": ["hidden"]}, "must be an object of layer sizes"),
        ({"state_dict": {"w": [1.0, 2.0]}}, "'state_dict' entry 'w' is not a named tensor"),
        ({"state_dict": []}, "'state_dict' must be a non-empty dict of tensors"),
        ({"version": True}, "version True is not supported"),
        ({"format": "something"}, "not a placement policy checkpoint"),
    ],
)
def test_malformed_placement_checkpoint_is_a_checkpoint_error(tmp_path, changes, message):
    from incsched.policy.checkpoint import load_placement_checkpoint
    from incsched.policy.placement_policy import CHECKPOINT_FORMAT, CHECKPOINT_VERSION

    path = tmp_path / "p.pt"
    torch.save(_placement_blob(**changes), path)
    with pytest.raises(CheckpointError, match=message) as err:
        load_placement_checkpoint(path, format=CHECKPOINT_FORMAT, version=CHECKPOINT_VERSION)
    assert str(path) in str(err.value)


def test_shipped_placement_checkpoint_passes_the_checks():
    from incsched.policy.checkpoint import load_placement_checkpoint
    from incsched.policy.placement_policy import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, DEFAULT_CHECKPOINT

    if not DEFAULT_CHECKPOINT.exists():
        pytest.skip("no shipped placement policy")
    config, state = load_placement_checkpoint(DEFAULT_CHECKPOINT, format=CHECKPOINT_FORMAT, version=CHECKPOINT_VERSION)
    assert set(config) == {"hidden", "n_layers", "head_hidden"} and all(isinstance(v, torch.Tensor) for v in state.values())


def test_finetune_refuses_a_malformed_checkpoint_in_one_line(tmp_path, capsys):
    from incsched.cli import main

    path = tmp_path / "p.pt"
    torch.save(_placement_blob(policy_config={"hidden": "big"}), path)
    assert main(["finetune", "--model", "resnet18", "--checkpoint", str(path), "--out", str(tmp_path / "o.pt")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"incsched: error: {path}: model config hidden = 'big'; sizes are whole numbers in 1..4096"]
