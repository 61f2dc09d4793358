"""Policy checkpoints, one format for both policies: a round trip gives the same policy; corrupt,
swapped, mismatched, incomplete or malformed files fail with a one-line CheckpointError that
names the file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from incsched.generators.random_dag import respect_like
from incsched.policy.checkpoint import CheckpointError, load_checkpoint
from incsched.policy.stage_policy import StagePolicy, default_stage_checkpoint, load_stage_policy, save_stage_policy
from incsched.problems.stage import StageProblem

torch.set_num_threads(1)


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(3)
    policy = StagePolicy(hidden=8, n_layers=1, decoder_hidden=8).eval()
    path = tmp_path / "policy.pt"
    save_stage_policy(path, policy, train_config={"seed": 3}, metrics={"epochs": [{"loss": 1.5}]})
    return policy, path


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.fixture
def placement_saved(tmp_path):
    from incsched.policy.placement_policy import PlacementPolicy, PolicyConfig, save_placement_policy

    torch.manual_seed(3)
    path = tmp_path / "p.pt"
    save_placement_policy(PlacementPolicy(PolicyConfig(hidden=8, n_layers=1, head_hidden=8)), path)
    return path


def _edit_meta(path, **changes):
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta.update(changes)
    meta_path.write_text(json.dumps(meta))


def _rewrite_weights(path, state):
    """Replace the weights and record their hash, as a careless but honest tool would."""
    import hashlib

    torch.save(state, path)
    _edit_meta(path, weights_sha256=hashlib.sha256(path.read_bytes()).hexdigest())


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"model_config": {"hidden": "big"}}, "model config hidden = 'big'"),
        ({"model_config": {"hidden": 1 << 40}}, "sizes are whole numbers in 1..4096"),
        ({"model_config": ["hidden"]}, "must be an object of layer sizes"),
        ({"model_config": {"hidden": 8, "n_layers": 1, "head_hidden": 8, "width": 3}}, "do not fit the recorded placement-policy architecture"),
        ({"version": True}, "version True is not supported"),
        ({"format": "incsched.placement_policy"}, "not a policy checkpoint's metadata"),
        ({"features": {"sel_features": ["other"]}}, "another feature layout"),
    ],
)
def test_malformed_placement_metadata_is_a_one_line_checkpoint_error(placement_saved, changes, message):
    from incsched.generators import ffnn
    from incsched.policy.placement_policy import load_placement_policy, preschedule
    from incsched.problems import PlacementProblem

    _edit_meta(placement_saved, **changes)
    problem = PlacementProblem.identical(ffnn(n_layers=2, tiles=2), 2)
    for load in (load_placement_policy, lambda path: preschedule(problem, checkpoint=path)):  # the "rl" pre-scheduler too
        with pytest.raises(CheckpointError, match=message) as err:
            load(placement_saved)
        assert str(placement_saved.with_suffix("")) in str(err.value) and "\n" not in str(err.value)  # the .pt or its .json


@pytest.mark.parametrize(
    "state, message",
    [
        ({"w": [1.0, 2.0]}, "state dict entry 'w' is not a named tensor"),
        ({}, "does not hold a state dict of tensors"),
        ([torch.zeros(2)], "does not hold a state dict of tensors"),
        ({"w": torch.zeros(2)}, "do not fit the recorded placement-policy architecture"),
    ],
)
def test_malformed_placement_weights_are_a_one_line_checkpoint_error(placement_saved, state, message):
    from incsched.policy.placement_policy import load_placement_policy

    _rewrite_weights(placement_saved, state)
    with pytest.raises(CheckpointError, match=message) as err:
        load_placement_policy(placement_saved)
    assert str(placement_saved) in str(err.value) and "\n" not in str(err.value)


def test_shipped_placement_checkpoint_passes_the_checks():
    from incsched.policy.placement_policy import DEFAULT_CHECKPOINT

    if not DEFAULT_CHECKPOINT.exists():
        pytest.skip("no shipped placement policy")
    state, meta = load_checkpoint(DEFAULT_CHECKPOINT, kind="placement")
    assert set(meta["model_config"]) == {"hidden", "n_layers", "head_hidden"} and all(isinstance(v, torch.Tensor) for v in state.values())


def test_finetune_refuses_a_malformed_checkpoint_in_one_line(placement_saved, tmp_path, capsys):
    from incsched.cli import main

    path = placement_saved
    _edit_meta(path, model_config={"hidden": "big"})
    assert main(["finetune", "--model", "resnet18", "--checkpoint", str(path), "--out", str(tmp_path / "o.pt")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"incsched: error: {path}: model config hidden = 'big'; sizes are whole numbers in 1..4096"]
