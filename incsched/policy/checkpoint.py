"""Trained policy weights on disk, one format for every policy: a ``.pt`` of tensors plus a ``.json``.

Training writes, pre-schedulers read. The weights file holds only a state dict (loaded with
``torch.load(weights_only=True)``, so a checkpoint cannot run code); the JSON beside it carries the
format version, the policy's kind, its constructor arguments, the feature layout it was trained
on, the training config and metrics, and the SHA-256 of the weights file. Each policy module
registers its kind once (`register_policy`: how to build it, its layout, its shipped file);
loading checks every field and raises `CheckpointError`, one line naming the file and the problem.

Inference reads the same weights without torch (whose import costs seconds in a fresh process):
a ``.npz`` beside the ``.pt`` (`save_numpy_weights`, written by `save_checkpoint` and by
scripts/export_numpy_weights.py) holds the state dict as float32 arrays plus the SHA-256 of the
``.pt`` it was made from and of its own arrays; `load_weight_arrays` reads it (``allow_pickle=False``)
when both hashes hold, else falls back to ``torch.load`` of the ``.pt``.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CheckpointError
from ..data import MODELS_DIR as _SHIPPED_MODELS
from ..jsonio import atomic_write_bytes, read_json, write_json

if TYPE_CHECKING:
    import torch

__all__ = [
    "CheckpointError",
    "PolicyKind",
    "register_policy",
    "save_checkpoint",
    "load_checkpoint",
    "load_policy",
    "check_model_config",
    "load_placement_checkpoint",
    "save_numpy_weights",
    "load_numpy_weights",
    "load_weight_arrays",
    "numpy_weights_path",
    "MODELS_DIR",
    "NO_NPZ_ENV",
]

log = logging.getLogger(__name__)

#: Largest layer size or layer count a checkpoint may ask for: a file that asks for more is
#: malformed (the shipped policies use 32 and 2-3), and building it would exhaust memory first.
MAX_MODEL_SIZE = 4096

FORMAT = "incsched.policy_checkpoint"
VERSION = 1

#: Where the shipped checkpoints live (``data/models``, package data).
MODELS_DIR = _SHIPPED_MODELS


@dataclass(frozen=True)
class PolicyKind:
    """What a policy module registers: its name, how to build it, what it reads, its shipped file.

    Attributes
    ----------
    kind : str
        ``"stage"`` or ``"placement"``; recorded in every checkpoint and checked on load.
    build : callable
        ``build(model_config, conv) -> torch.nn.Module``: an untrained policy of that architecture.
    layout : dict
        The feature layout (names of every input column) the weights are trained on; a checkpoint
        trained on another layout is refused.
    default_path : pathlib.Path
        The shipped checkpoint.
    """

    kind: str
    build: Callable[[dict[str, int], str], "torch.nn.Module"]
    layout: dict[str, Any]
    default_path: Path


_KINDS: dict[str, PolicyKind] = {}


def register_policy(kind: PolicyKind) -> PolicyKind:
    """Make ``kind`` known to `save_checkpoint`, `load_checkpoint` and `load_policy`; returns it."""
    _KINDS[kind.kind] = kind
    return kind


def _registered(kind: str) -> PolicyKind:
    if kind not in _KINDS:
        raise CheckpointError(f"no policy of kind {kind!r} is registered (known: {sorted(_KINDS)})")
    return _KINDS[kind]


def _meta_path(path: Path) -> Path:
    return path.with_suffix(".json")


def _one_line(exc: BaseException) -> str:
    # torch's messages span lines (load_state_dict lists every key); an error here is one line.
    return " ".join(str(exc).split())[:300]


def save_checkpoint(path: str | os.PathLike, state_dict: dict[str, "torch.Tensor"], *, kind: str, model_config: dict[str, int],
                    train_config: Any = None, metrics: Any = None, torch_version: str | None = None) -> Path:
    """Write ``state_dict`` to ``path`` and its metadata to the ``.json`` beside it.

    Parameters
    ----------
    path : path-like
        The ``.pt`` file; the metadata goes to the same name with ``.json``, the weights as numpy
        arrays (`save_numpy_weights`) to the same name with ``.npz``.
    state_dict : dict of str to Tensor
        A policy's ``state_dict()``.
    kind : str
        A registered policy kind (`register_policy`); its feature layout is recorded.
    model_config : dict
        Keyword arguments that rebuild the policy's architecture (checked like on load).
    train_config, metrics : optional
        JSON-serialisable training config and metrics, stored for provenance.
    torch_version : str, optional
        The torch that trained the weights; default the running one.

    Returns
    -------
    pathlib.Path
        The metadata file.
    """
    import torch

    path = Path(path)
    spec = _registered(kind)
    check_model_config(model_config, path)
    buf = io.BytesIO()
    # Clones: a view would save its whole underlying storage.
    torch.save({k: v.detach().clone() for k, v in state_dict.items()}, buf)
    data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data)
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "kind": kind,
        "model_config": dict(model_config),
        "features": spec.layout,
        "weights_sha256": hashlib.sha256(data).hexdigest(),
        "weights_file": path.name,
        "train_config": train_config,
        "metrics": metrics,
        "torch": torch_version or torch.__version__,
    }
    write_json(_meta_path(path), meta)
    save_numpy_weights(path)
    return _meta_path(path)


def read_metadata(path: str | os.PathLike, *, kind: str, layout: dict[str, Any]) -> dict[str, Any]:
    """The verified metadata (``.json``) of the checkpoint ``path`` of a ``kind`` policy trained on ``layout``.

    Raises
    ------
    CheckpointError
        Missing file or metadata, wrong format / version / kind, another feature layout, or a
        model config that is not ``{name: size}`` (see `load_checkpoint`).
    """
    path = Path(path)
    meta_path = _meta_path(path)
    if not path.is_file():
        raise CheckpointError(f"policy checkpoint {path} does not exist")
    if not meta_path.is_file():
        raise CheckpointError(f"policy checkpoint {path} has no metadata file {meta_path.name} beside it")
    try:
        meta = read_json(meta_path)
    except Exception as exc:  # noqa: BLE001 - any unreadable metadata is the same error to the caller
        raise CheckpointError(f"policy checkpoint metadata {meta_path} is unreadable: {_one_line(exc)}") from None
    found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
    if found != FORMAT:
        raise CheckpointError(f"{meta_path} is not a policy checkpoint's metadata (format {found!r}, expected {FORMAT!r})")
    if type(meta.get("version")) is not int or meta["version"] != VERSION:  # noqa: E721 - True == 1 must not pass
        raise CheckpointError(f"{meta_path}: checkpoint version {meta.get('version')!r} is not supported (expected {VERSION})")
    if meta.get("kind") != kind:
        raise CheckpointError(f"{path} holds a {meta.get('kind')!r} policy, not a {kind!r} policy")
    if meta.get("features") != layout:
        raise CheckpointError(f"{path} was trained on another feature layout than this code computes; retrain it (incsched train)")
    check_model_config(meta.get("model_config"), path)
    return meta


def load_checkpoint(path: str | os.PathLike, *, kind: str) -> tuple[dict[str, "torch.Tensor"], dict[str, Any]]:
    """Read and verify a checkpoint written by `save_checkpoint`.

    Parameters
    ----------
    path : path-like
        The ``.pt`` file (its ``.json`` must sit beside it).
    kind : str
        The registered policy kind expected.

    Returns
    -------
    state_dict : dict of str to Tensor
    meta : dict
        The metadata (model config, training config, metrics ...); its model config is checked.

    Raises
    ------
    CheckpointError
        Missing file or metadata, wrong format / version / kind, a feature layout other than this
        code's, a model config that is not ``{name: size}``, a weights file whose hash differs from
        the recorded one (corrupt or swapped), or one that ``torch.load(weights_only=True)``
        rejects or that holds anything but named tensors.
    """
    return _load_state(path, kind=kind, layout=_registered(kind).layout)


def _load_state(path: str | os.PathLike, *, kind: str, layout: dict[str, Any]) -> tuple[dict[str, "torch.Tensor"], dict[str, Any]]:
    import torch

    path = Path(path)
    meta = read_metadata(path, kind=kind, layout=layout)
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != meta.get("weights_sha256"):
        raise CheckpointError(f"{path} is corrupt or was replaced: its SHA-256 {digest[:12]}... differs from the recorded "
                              f"{str(meta.get('weights_sha256'))[:12]}...")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises several types for a bad file
        raise CheckpointError(f"{path} cannot be loaded as weights: {_one_line(exc)}") from None
    if not isinstance(state, dict) or not state:
        raise CheckpointError(f"{path} does not hold a state dict of tensors (found {type(state).__name__})")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{path}: state dict entry {key!r} is not a named tensor ({type(value).__name__})")
    return state, meta


def load_policy(path: str | os.PathLike | None, *, kind: str, conv: str = "plain") -> tuple["torch.nn.Module", dict[str, Any]]:
    """Load a registered policy in eval mode, with its metadata.

    Parameters
    ----------
    path : path-like or None
        The ``.pt`` file; None loads the kind's shipped checkpoint.
    kind : str
    conv : {"plain", "torch_geometric"}
        The encoder's ``GINEConv`` implementation (`GraphEncoder`); the default runs without
        importing torch_geometric.

    Returns
    -------
    (torch.nn.Module, dict)

    Raises
    ------
    CheckpointError
        See `load_checkpoint`; also when the weights do not fit the recorded architecture.
    """
    spec = _registered(kind)
    path = Path(path) if path is not None else spec.default_path
    state, meta = load_checkpoint(path, kind=kind)
    try:
        policy = spec.build(meta["model_config"], conv)
        policy.load_state_dict(state, strict=True)
    except (TypeError, RuntimeError, KeyError, ValueError) as exc:
        raise CheckpointError(f"{path}: the weights do not fit the recorded {kind}-policy architecture: {_one_line(exc)}") from None
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


def load_placement_checkpoint(path: str | os.PathLike, *, format: str = FORMAT, version: int = VERSION) -> tuple[dict[str, int], dict[str, "torch.Tensor"]]:
    """The verified model config and weights of a placement checkpoint (`load_checkpoint`), no model built.

    Kept for ``incsched finetune``'s early check (incsched/cli.py), which passes the placement
    policy's ``CHECKPOINT_FORMAT`` / ``CHECKPOINT_VERSION``: since both policies share this format,
    `load_policy` makes the same checks, and this goes when that caller does.

    Raises
    ------
    CheckpointError
    """
    if (format, version) != (FORMAT, VERSION):
        raise CheckpointError(f"{path}: only checkpoint format {FORMAT!r} version {VERSION} is read, not {format!r} {version!r}")
    state, meta = load_checkpoint(path, kind="placement")
    return meta["model_config"], state


# ---------------------------------------------------------------------- the weights as numpy arrays (inference without torch)

#: Set to anything but "" or "0" to ignore the ``.npz`` weights: inference then reads the ``.pt``
#: with torch, as before they existed (to measure what they save, or to rule them out).
NO_NPZ_ENV = "INCSCHED_NO_NPZ_WEIGHTS"

_CHECKPOINT_SHA = "__checkpoint_sha256__"  # the .pt the arrays were read from
_ARRAYS_SHA = "__arrays_sha256__"  # the arrays themselves (`_arrays_digest`)


def numpy_weights_path(path: str | os.PathLike) -> Path:
    """The ``.npz`` beside the checkpoint ``path``."""
    return Path(path).with_suffix(".npz")


def _arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for key in sorted(arrays):
        a = np.ascontiguousarray(arrays[key])
        h.update(f"{key}|{a.dtype.str}|{a.shape}\n".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save_numpy_weights(path: str | os.PathLike) -> Path:
    """Write the ``.npz`` twin of the checkpoint ``path``: its state dict as arrays of the same dtype.

    The file also records the SHA-256 of ``path`` (a later ``.pt`` makes it stale) and of its own
    arrays (an edited or corrupt array is refused), both checked by `load_numpy_weights`.

    Returns
    -------
    pathlib.Path
        The ``.npz``.
    """
    import torch

    path = Path(path)
    data = path.read_bytes()
    state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    arrays = {key: value.detach().cpu().numpy() for key, value in state.items()}
    buf = io.BytesIO()
    np.savez(buf, **arrays, **{_CHECKPOINT_SHA: np.array(hashlib.sha256(data).hexdigest()),
                               _ARRAYS_SHA: np.array(_arrays_digest(arrays))})
    out = numpy_weights_path(path)
    atomic_write_bytes(out, buf.getvalue())
    return out


def _check_arrays(arrays: dict[str, np.ndarray], shapes_of: Callable, meta: dict[str, Any], kind: str, where: Path) -> None:
    try:
        shapes = shapes_of(meta["model_config"])
    except (KeyError, TypeError, ValueError) as exc:  # a config the architecture does not take
        raise CheckpointError(f"{where}: the weights do not fit the recorded {kind}-policy architecture: {_one_line(exc)}") from None
    if set(arrays) != set(shapes):
        missing, extra = sorted(set(shapes) - set(arrays)), sorted(set(arrays) - set(shapes))
        raise CheckpointError(f"{where}: the weights do not fit the recorded {kind}-policy architecture (missing {missing[:3]}, unexpected {extra[:3]})")
    for key, shape in shapes.items():
        a = arrays[key]
        if a.dtype != np.float32 or a.shape != tuple(shape):
            raise CheckpointError(f"{where}: weight {key} is {a.dtype}{list(a.shape)}, expected float32{list(shape)}")


def load_numpy_weights(path: str | os.PathLike, *, kind: str, layout: dict[str, Any],
                       shapes: Callable[[dict[str, int]], dict[str, tuple[int, ...]]]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The weights of the checkpoint ``path`` from its ``.npz``, verified, without torch.

    Parameters
    ----------
    path : path-like
        The ``.pt`` file (its ``.json`` and ``.npz`` beside it).
    kind : str
    layout : dict
        The feature layout this code computes (checked against the metadata, as `load_checkpoint`).
    shapes : callable
        ``shapes(model_config) -> {name: shape}``: every weight the architecture has (raising
        KeyError, TypeError or ValueError for a config it does not take).

    Returns
    -------
    arrays : dict of str to float32 numpy array
    meta : dict

    Raises
    ------
    CheckpointError
        As `read_metadata`; no ``.npz``; one ``np.load(allow_pickle=False)`` rejects; one made from
        another ``.pt`` than the one there (stale) or whose arrays differ from those it recorded
        (tampered, corrupt); keys or shapes other than the architecture's.
    """
    path = Path(path)
    meta = read_metadata(path, kind=kind, layout=layout)
    npz = numpy_weights_path(path)
    if not npz.is_file():
        raise CheckpointError(f"policy checkpoint {path} has no numpy weights {npz.name} beside it")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != meta.get("weights_sha256"):
        raise CheckpointError(f"{path} is corrupt or was replaced: its SHA-256 {digest[:12]}... differs from the recorded "
                              f"{str(meta.get('weights_sha256'))[:12]}...")
    try:
        with np.load(npz, allow_pickle=False) as z:
            arrays = {key: z[key] for key in z.files}
    except Exception as exc:  # noqa: BLE001 - zipfile, numpy and OS errors alike mean an unreadable file
        raise CheckpointError(f"{npz} cannot be read as numpy weights: {_one_line(exc)}") from None
    recorded = [str(arrays.pop(key, "")) for key in (_CHECKPOINT_SHA, _ARRAYS_SHA)]
    if recorded[0] != digest:
        raise CheckpointError(f"{npz} is stale: made from a checkpoint with SHA-256 {recorded[0][:12]}..., not {path.name}'s {digest[:12]}...")
    if recorded[1] != _arrays_digest(arrays):
        raise CheckpointError(f"{npz} is corrupt or was edited: its arrays differ from those it recorded")
    _check_arrays(arrays, shapes, meta, kind, npz)
    return arrays, meta


def load_weight_arrays(path: str | os.PathLike, *, kind: str, layout: dict[str, Any],
                       shapes: Callable[[dict[str, int]], dict[str, tuple[int, ...]]]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """A checkpoint's weights as numpy arrays: from its ``.npz`` when that is valid, else via torch.

    A missing ``.npz`` (or `NO_NPZ_ENV` set) falls back to ``torch.load`` of the ``.pt`` quietly, a
    refused one with a warning; both give bitwise the same arrays. Arguments as `load_numpy_weights`.

    Raises
    ------
    CheckpointError
        When the ``.pt`` path fails too (see `load_checkpoint`), or its weights do not fit ``shapes``.
    """
    path = Path(path)
    if os.environ.get(NO_NPZ_ENV, "") in ("", "0") and numpy_weights_path(path).is_file():
        try:
            return load_numpy_weights(path, kind=kind, layout=layout, shapes=shapes)
        except CheckpointError as exc:
            log.warning("%s; reading the weights with torch instead", exc)
    state, meta = _load_state(path, kind=kind, layout=layout)
    arrays = {key: value.detach().cpu().numpy() for key, value in state.items()}
    _check_arrays(arrays, shapes, meta, kind, path)
    return arrays, meta
