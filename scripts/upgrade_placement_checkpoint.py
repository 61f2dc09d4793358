"""Rewrite a placement checkpoint of the old format (``incsched.placement_policy`` v1) in the shared one.

The old file was one ``torch.save``'d dict (format, version, policy config, state dict) with an
unverified JSON beside it; the shared format (`incsched.policy.checkpoint`) keeps only the state
dict in the ``.pt`` and moves the rest, with the weights' SHA-256 and the feature layout, to the
``.json``. No training: every tensor is written back byte for byte (checked before returning), and
the metrics rows are renamed into `incsched.train.metrics`' vocabulary. Run once on the shipped
``data/models/placement_policy.pt``:

    .venv/bin/python scripts/upgrade_placement_checkpoint.py data/models/placement_policy.pt
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from incsched.policy.checkpoint import load_checkpoint, save_checkpoint
from incsched.policy.placement_policy import PLC_FEATURES, SEL_FEATURES

OLD_FORMAT = "incsched.placement_policy"

# Old row key -> new key; old "stage" values -> new "phase".
_RENAME = {"greedy_vs_cpl": "train_ratio_to_cpl", "validation_vs_cpl": "val_ratio_to_cpl"}
_PHASE = {"imitation": "imitation", "rl": "reinforce"}


def upgrade_metrics(rows: list[dict]) -> dict:
    """The old per-row list (stages labels / imitation / validation / rl / selected / total) as a run's metrics."""
    out: dict = {"epochs": []}
    selected = None
    for row in rows:
        stage = row["stage"]
        if stage == "labels":
            out["labels"] = {"n": sum(row["sources"].values()), "sources": row["sources"],
                             "mean_label_over_cpl": row["teacher_vs_cpl"], "seconds": row["seconds"]}
        elif stage == "validation":  # the weights RL starts from; the old row had no time
            out["epochs"].append({"phase": "start", "epoch": -1, "val_ratio_to_cpl": row["greedy_vs_cpl"]})
        elif stage in _PHASE:
            new = {"phase": _PHASE[stage], "epoch": row["epoch"]}
            new.update({_RENAME.get(k, k): v for k, v in row.items() if k not in ("stage", "epoch")})
            out["epochs"].append(new)
        elif stage == "selected":
            selected = row["validation_vs_cpl"]
        elif stage == "total":
            out["seconds"] = row["seconds"]
        else:
            raise ValueError(f"unknown metrics row {row}")
    if selected is not None:  # the first epoch that reached the selected validation ratio, as training picks it
        first = next(r for r in out["epochs"] if r.get("val_ratio_to_cpl") == selected)
        out["selected_epoch"] = "start" if first["phase"] == "start" else f"reinforce {first['epoch']}"
    return out


def upgrade(path: Path) -> None:
    meta_path = path.with_suffix(".json")
    old_meta = json.loads(meta_path.read_text())
    blob = torch.load(path, map_location="cpu", weights_only=True)
    if blob.get("format") != OLD_FORMAT or old_meta.get("format") != OLD_FORMAT:
        raise SystemExit(f"{path}: not an {OLD_FORMAT} checkpoint")
    if (old_meta["sel_features"], old_meta["plc_features"]) != (list(SEL_FEATURES), list(PLC_FEATURES)):
        raise SystemExit(f"{path}: trained on other decoder features than this code computes")
    state = blob["state_dict"]
    save_checkpoint(path, state, kind="placement", model_config=blob["policy_config"], train_config=old_meta["train_config"],
                    metrics=upgrade_metrics(old_meta["metrics"]), torch_version=old_meta["torch"])
    new_state, _ = load_checkpoint(path, kind="placement")
    assert list(new_state) == list(state)
    for key, value in state.items():
        assert new_state[key].dtype == value.dtype and new_state[key].shape == value.shape, key
        assert new_state[key].numpy().tobytes() == value.numpy().tobytes(), key
    print(f"{path}: {len(state)} tensors written back byte for byte; metadata in {meta_path.name}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    upgrade(ap.parse_args().path)
