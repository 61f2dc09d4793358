"""Training cells: a learned policy (placement or stage) trained from a seed and a config under a
named kernel setting (`incsched.train.kernels`: ``native``, ``avx2``, ``portable``), its checkpoint
kept and hashed, so that runs on one machine, on two machines, or against the shipped checkpoint
can be compared byte for byte.

Each cell trains in a child process started with its setting's environment (the variables must be
in place before torch loads), one torch thread. Kernels decide the bytes, so a training row is
keyed on the CPU, torch's version and the setting too.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .cells import Cell, cell_key
from .config import Experiment
from .provenance import cpu_model

__all__ = ["training_cells", "run_training", "VALIDATION_METRIC"]

#: The validation measure each policy's training keeps its best epoch by (lower is better): mean
#: greedy makespan over critical-path list's; mean greedy objective over the CP-SAT label's.
VALIDATION_METRIC = {"placement": "val_ratio_to_cpl", "stage": "val_ratio_to_label"}


def training_cells(exp: Experiment) -> list[Cell]:
    """One cell per training x kernel setting x seed x repeat."""
    if not exp.trainings:
        return []
    import torch

    from .. import __version__
    from ..train.kernels import KERNEL_SETTINGS

    cells = []
    for i, spec in enumerate(exp.trainings):
        for kernels in spec.kernels:
            for seed in exp.seeds:
                for repeat in range(exp.repeats):
                    labels = {"graph": f"{spec.policy} policy", "problem": "training", "instance": spec.label, "method": spec.label,
                              "policy": spec.policy, "kernels": kernels, "seed": seed, "repeat": repeat}
                    parts = {"policy": spec.policy, "config": spec.config, "seed": seed, "repeat": repeat, "incsched": __version__,
                             "torch": torch.__version__, "cpu": cpu_model(), "kernels": kernels, "env": KERNEL_SETTINGS[kernels]}
                    cells.append(Cell(cell_key("train", parts), labels, run=(i, kernels)))
    return cells


def full_config(policy: str, config: dict[str, Any], seed: int) -> dict[str, Any]:
    """The whole training config (JSON form) of a spec's ``config`` overrides and ``seed``."""
    if policy == "stage":
        from ..train.stage import StageTrainConfig

        return StageTrainConfig.from_json({**StageTrainConfig().to_json(), **config, "seed": seed}).to_json()
    from ..train.placement import PlacementTrainConfig

    return json.loads(json.dumps(PlacementTrainConfig.from_dict({**PlacementTrainConfig().to_dict(), **config, "seed": seed}).to_dict()))


def run_training(cell: Cell, exp: Experiment, out_dir: Path) -> dict[str, Any]:
    """Train one cell's policy in a child process under its kernel setting and keep the checkpoint
    (and the child's log) under ``out_dir/checkpoints``; the row (never raises: ``error``)."""
    import time

    from ..data import MODELS_DIR
    from ..jsonio import read_json, write_json
    from ..train.kernels import run_in_child

    index, kernels = cell.run
    spec = exp.trainings[index]
    row: dict[str, Any] = {"key": cell.key, "kind": "train", "cell": cell.labels, "error": None, "result": None}
    start = time.perf_counter()
    folder = out_dir / "checkpoints"
    path = folder / f"{cell.key[:16]}.pt"
    try:
        config = full_config(spec.policy, spec.config, cell.labels["seed"])
        folder.mkdir(parents=True, exist_ok=True)
        config_path = folder / f"{cell.key[:16]}.config.json"
        write_json(config_path, config)
        child = run_in_child(f"incsched.train.{spec.policy}", ["--config", str(config_path), "--out", str(path), "--kernels", kernels],
                             kernels, capture=True)
        (folder / f"{cell.key[:16]}.log").write_text(child.stdout + child.stderr, encoding="utf-8")
        if child.returncode != 0:
            last = [line for line in (child.stderr or child.stdout).splitlines() if line.strip()][-1:] or ["no output"]
            raise RuntimeError(f"training exited with status {child.returncode}: {last[0]}")
        meta = read_json(path.with_suffix(".json"))
        metrics = meta["metrics"]
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        metric = VALIDATION_METRIC[spec.policy]
        validation = [e[metric] for e in metrics["epochs"] if e.get(metric) is not None]
        shipped = read_json(MODELS_DIR / f"{spec.policy}_policy.json")
        row["result"] = {
            "weights_sha256": digest,
            "checkpoint": str(path.relative_to(out_dir)),
            "kernels": metrics.get("kernels"),  # what the child really ran with (ATen's capability among them)
            "selected_epoch": metrics.get("selected_epoch"),
            "validation_metric": metric,
            "validation": min(validation) if validation else None,  # the kept weights are the best on validation
            # the teacher's labels first: when they differ, the solver changed, not the kernels
            "labels": {k: v for k, v in (metrics.get("labels") or {}).items() if k != "seconds"},
            "epochs": [{k: v for k, v in e.items() if k != "seconds"} for e in metrics["epochs"]],
            "shipped_config": config == shipped.get("train_config"),
            "shipped_weights": digest == shipped.get("weights_sha256"),
        }
    except Exception as exc:  # noqa: BLE001 - a failed training is a row, not the end of the run
        row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    row["seconds"] = round(time.perf_counter() - start, 6)
    return row
