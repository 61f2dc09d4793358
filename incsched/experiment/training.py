"""Training cells: a learned policy trained from a seed and a config, in the driver, its checkpoint
kept and hashed, so that runs on one machine, on two machines, or against the shipped checkpoint
can be compared byte for byte. Kernels decide the bytes (an AVX2 and an AVX-512 machine train to
different weights), so a training row is keyed on the CPU and the kernel-picking environment too.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from .cells import Cell, cell_key
from .config import Experiment
from .provenance import NUMERIC_ENV, cpu_model

__all__ = ["training_cells", "run_training"]


def training_cells(exp: Experiment) -> list[Cell]:
    """One cell per training x seed x repeat."""
    if not exp.trainings:
        return []
    import torch

    from .. import __version__

    cells = []
    for i, spec in enumerate(exp.trainings):
        for seed in exp.seeds:
            for repeat in range(exp.repeats):
                labels = {"graph": f"{spec.policy} policy", "problem": "training", "instance": spec.label, "method": spec.label,
                          "seed": seed, "repeat": repeat}
                parts = {"policy": spec.policy, "config": spec.config, "seed": seed, "repeat": repeat, "incsched": __version__,
                         "torch": torch.__version__, "cpu": cpu_model(), "env": {k: os.environ.get(k) for k in NUMERIC_ENV}}
                cells.append(Cell(cell_key("train", parts), labels, run=i))
    return cells


def run_training(cell: Cell, exp: Experiment, out_dir: Path) -> dict[str, Any]:
    """Train one cell's policy with one torch thread (the reference runs' setting) and keep the
    checkpoint under ``out_dir/checkpoints``; the row (never raises: ``error``)."""
    import torch

    from ..data import MODELS_DIR
    from ..jsonio import read_json
    from ..policy.placement_policy import save_placement_policy
    from ..train.placement import PlacementTrainConfig, train_placement_policy

    spec = exp.trainings[cell.run]
    row: dict[str, Any] = {"key": cell.key, "kind": "train", "cell": cell.labels, "error": None, "result": None}
    threads = torch.get_num_threads()
    start = time.perf_counter()
    try:
        torch.set_num_threads(1)
        config = PlacementTrainConfig.from_dict({**PlacementTrainConfig().to_dict(), **spec.config, "seed": cell.labels["seed"]})
        model, metrics = train_placement_policy(config)
        path = out_dir / "checkpoints" / f"{cell.key[:16]}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_placement_policy(model, path, train_config=config.to_dict(), metrics=metrics)
        shipped = read_json(MODELS_DIR / "placement_policy.json")
        validation = [e["val_ratio_to_cpl"] for e in metrics["epochs"] if e.get("val_ratio_to_cpl") is not None]
        row["result"] = {
            "weights_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "checkpoint": str(path.relative_to(out_dir)),
            "selected_epoch": metrics.get("selected_epoch"),
            "val_ratio_to_cpl": min(validation) if validation else None,  # the kept weights are the best on validation
            # the teacher's labels first: when they differ, the solver changed, not the kernels
            "labels": {k: v for k, v in (metrics.get("labels") or {}).items() if k != "seconds"},
            "epochs": [{k: v for k, v in e.items() if k != "seconds"} for e in metrics["epochs"]],
            "shipped_config": json.loads(json.dumps(config.to_dict())) == shipped.get("train_config"),
            "shipped_weights": hashlib.sha256(path.read_bytes()).hexdigest() == shipped.get("weights_sha256"),
        }
    except Exception as exc:  # noqa: BLE001 - a failed training is a row, not the end of the run
        row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    finally:
        torch.set_num_threads(threads)
    row["seconds"] = round(time.perf_counter() - start, 6)
    return row
