"""Trained policy weights on disk: a ``.pt`` of tensors plus a ``.json`` of what made them.

Training writes, pre-schedulers read. The weights file holds only a state dict (loaded with
``torch.load(weights_only=True)``, so a checkpoint cannot run code); the JSON beside it carries the
format version, the model's constructor arguments, the feature layout it was trained on, the
training config and metrics, and the SHA-256 of the weights file. Loading checks every one of these
and raises `CheckpointError` naming the file and what is wrong.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

import torch

from ..errors import IncschedError
from ..jsonio import atomic_write_bytes, read_json, write_json
from .features import EDGE_FEATURES, N_OP_BUCKETS, NODE_FEATURES

__all__ = [
    "CheckpointError",
    "save_checkpoint",
    "load_checkpoint",
    "save_stage_policy",
    "load_stage_policy",
    "default_stage_checkpoint",
    "check_model_config",
    "load_placement_checkpoint",
]

#: Largest layer size or layer count a checkpoint may ask for: a file that asks for more is
#: malformed (the shipped policies use 32 and 3), and building it would exhaust memory first.
MAX_MODEL_SIZE = 4096

FORMAT = "incsched.policy_checkpoint"
VERSION = 1


class CheckpointError(IncschedError):
    """A policy checkpoint is missing, corrupt, or does not match this version of the code."""


def default_stage_checkpoint() -> Path:
    """Path of the shipped stage policy, ``data/models/stage_policy.pt`` in the repository."""
    return Path(__file__).resolve().parents[2] / "data" / "models" / "stage_policy.pt"


def _meta_path(path: Path) -> Path:
    return path.with_suffix(".json")


def feature_layout() -> dict[str, Any]:
    """The feature layout a checkpoint must have been trained on to be usable here."""
    from .stage_policy import STATE_FEATURES

    return {
        "node_features": list(NODE_FEATURES),
        "n_op_buckets": N_OP_BUCKETS,
        "edge_features": list(EDGE_FEATURES),
        "state_features": list(STATE_FEATURES),
    }


def save_checkpoint(path: str | os.PathLike, model: torch.nn.Module, *, kind: str, model_config: dict[str, Any],
                    train_config: dict[str, Any] | None = None, metrics: Any = None) -> Path:
    """Write ``model``'s weights to ``path`` and its metadata to the ``.json`` beside it.

    Parameters
    ----------
    path : path-like
        The ``.pt`` file; the metadata goes to the same name with ``.json``.
    model : torch.nn.Module
    kind : str
        Which policy this is (``"stage"``), checked on load.
    model_config : dict
        Keyword arguments that rebuild the model's architecture.
    train_config, metrics : optional
        JSON-serialisable training config and metrics, stored for provenance.

    Returns
    -------
    pathlib.Path
        The metadata file.
    """
    path = Path(path)
    buf = io.BytesIO()
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, buf)
    data = buf.getvalue()
    atomic_write_bytes(path, data)
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "kind": kind,
        "model_config": model_config,
        "features": feature_layout(),
        "weights_sha256": hashlib.sha256(data).hexdigest(),
        "weights_file": path.name,
        "train_config": train_config,
        "metrics": metrics,
        "torch": torch.__version__,
    }
    write_json(_meta_path(path), meta)
    return _meta_path(path)


def load_checkpoint(path: str | os.PathLike, *, kind: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read and verify a checkpoint written by `save_checkpoint`.

    Parameters
    ----------
    path : path-like
        The ``.pt`` file (its ``.json`` must sit beside it).
    kind : str
        The policy kind expected.

    Returns
    -------
    state_dict : dict of str to Tensor
    meta : dict
        The metadata (model config, training config, metrics ...).

    Raises
    ------
    CheckpointError
        Missing file or metadata, wrong format / version / kind, a feature layout other than this
        code's, a weights file whose hash differs from the recorded one (corrupt or swapped), or
        one that ``torch.load(weights_only=True)`` rejects.
    """
    path = Path(path)
    meta_path = _meta_path(path)
    if not path.exists():
        raise CheckpointError(f"policy checkpoint {path} does not exist")
    if not meta_path.exists():
        raise CheckpointError(f"policy checkpoint {path} has no metadata file {meta_path.name} beside it")
    try:
        meta = read_json(meta_path)
    except Exception as exc:  # noqa: BLE001 - any unreadable metadata is the same error to the caller
        raise CheckpointError(f"policy checkpoint metadata {meta_path} is unreadable: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{meta_path} is not a policy checkpoint's metadata (format {meta.get('format') if isinstance(meta, dict) else None!r})")
    if meta.get("version") != VERSION:
        raise CheckpointError(f"{meta_path}: checkpoint version {meta.get('version')!r} is not supported (expected {VERSION})")
    if meta.get("kind") != kind:
        raise CheckpointError(f"{path} holds a {meta.get('kind')!r} policy, not a {kind!r} policy")
    if meta.get("features") != feature_layout():
        raise CheckpointError(
            f"{path} was trained on another feature layout than this code computes; retrain it (incsched train)"
        )
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != meta.get("weights_sha256"):
        raise CheckpointError(f"{path} is corrupt or was replaced: its SHA-256 {digest[:12]}... differs from the recorded "
                              f"{str(meta.get('weights_sha256'))[:12]}...")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises several types for a bad file
        raise CheckpointError(f"{path} cannot be loaded as weights: {exc}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} does not hold a state dict of tensors")
    return state, meta


def save_stage_policy(path: str | os.PathLike, policy, *, train_config: dict | None = None, metrics: Any = None) -> Path:
    """Save a `StagePolicy` (see `save_checkpoint`); returns the metadata path."""
    return save_checkpoint(path, policy, kind="stage", model_config=policy.config, train_config=train_config, metrics=metrics)


def load_stage_policy(path: str | os.PathLike | None = None, *, conv: str = "plain"):
    """Load a `StagePolicy` in eval mode, with its metadata.

    Parameters
    ----------
    path : path-like, optional
        Default `default_stage_checkpoint`.
    conv : {"plain", "torch_geometric"}
        The encoder's ``GINEConv`` implementation (`GraphEncoder`); the default runs without
        importing torch_geometric.

    Returns
    -------
    (StagePolicy, dict)

    Raises
    ------
    CheckpointError
        See `load_checkpoint`; also when the weights do not fit the recorded architecture.
    """
    from .stage_policy import StagePolicy

    path = Path(path) if path is not None else default_stage_checkpoint()
    state, meta = load_checkpoint(path, kind="stage")
    check_model_config(meta.get("model_config"), path)
    try:
        policy = StagePolicy(**meta["model_config"], conv=conv)
        policy.load_state_dict(state, strict=True)
    except (TypeError, RuntimeError, KeyError) as exc:
        raise CheckpointError(f"{path}: the weights do not fit the recorded stage-policy architecture: {exc}") from None
    policy.eval()
    return policy, meta


def check_model_config(config: Any, path: str | os.PathLike) -> dict[str, int]:
    """Refuse a model config that is not ``{name: size}`` with whole sizes in 1..`MAX_MODEL_SIZE`.

    A checkpoint is loaded without running code, but its config still sizes the model built from
    it: a string, a negative or a 10**9 layer width must be an error naming the file, not a
    TypeError or an allocation that exhausts memory.

    Raises
    ------
    CheckpointError
    """
    if not isinstance(config, dict) or not config:
        raise CheckpointError(f"{path}: the model config must be an object of layer sizes, got {type(config).__name__}")
    for key, value in config.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise CheckpointError(f"{path}: model config key {key!r} is not a parameter name")
        if type(value) is not int or not 1 <= value <= MAX_MODEL_SIZE:  # noqa: E721 - bool must not pass
            raise CheckpointError(f"{path}: model config {key} = {value!r}; sizes are whole numbers in 1..{MAX_MODEL_SIZE}")
    return config


def load_placement_checkpoint(path: str | os.PathLike, *, format: str, version: int) -> tuple[dict[str, int], dict[str, torch.Tensor]]:
    """Read a placement-policy weights file (one ``torch.save``'d dict) and check its structure.

    The file is loaded with ``torch.load(weights_only=True)``, so it cannot run code; then every
    field it must hold is checked, so that a safe but malformed file (a missing or misspelt
    field, a config of strings, a state dict holding lists) is a `CheckpointError` naming the file
    and the field, never a KeyError or TypeError from deeper in.

    Parameters
    ----------
    path : path-like
    format, version
        The ``format`` string and ``version`` the file must carry.

    Returns
    -------
    policy_config : dict of str to int
    state_dict : dict of str to Tensor

    Raises
    ------
    CheckpointError
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no placement policy checkpoint there")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises several unrelated types for a bad file
        raise CheckpointError(f"{path}: cannot read the placement policy checkpoint ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(blob, dict) or blob.get("format") != format:
        raise CheckpointError(f"{path}: not a placement policy checkpoint (expected format {format!r})")
    if type(blob.get("version")) is not int or blob["version"] != version:  # noqa: E721 - True == 1 must not pass
        raise CheckpointError(f"{path}: placement policy checkpoint version {blob.get('version')!r} is not supported (expected {version})")
    for key in ("policy_config", "state_dict"):
        if key not in blob:
            raise CheckpointError(f"{path}: the checkpoint has no {key!r}")
    config = check_model_config(blob["policy_config"], path)
    state = blob["state_dict"]
    if not isinstance(state, dict) or not state:
        raise CheckpointError(f"{path}: 'state_dict' must be a non-empty dict of tensors")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{path}: 'state_dict' entry {key!r} is not a named tensor ({type(value).__name__})")
    return config, state
