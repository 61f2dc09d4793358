"""One vocabulary for the metrics every training run logs and stores in its checkpoint.

A run's metrics are ``{"epochs": [row, ...], "labels": {...}, "selected_epoch": "reinforce 3",
"seconds": total}``. Each row says its ``phase`` (`PHASES`; ``"start"`` is the weights a phase
begins from, epoch -1), its ``epoch`` and its ``seconds``; an update adds ``loss``, a sampling
update ``best_sample_gain`` (the best sample's relative gain over the greedy decode). Measures on
held-out graphs start with ``val_``, on training graphs with ``train_``; a ratio is named
``<measure>_ratio_to_<reference>`` (``val_ratio_to_label``: greedy objective over the label's).
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["PHASES", "epoch_row", "log_row"]

PHASES = ("start", "imitation", "reinforce", "finetune")


def epoch_row(phase: str, epoch: int, seconds: float, **measures: Any) -> dict[str, Any]:
    """One metrics row: ``phase``, ``epoch``, then ``measures`` by name, then ``seconds``.

    Raises
    ------
    ValueError
        For a phase outside `PHASES`.
    """
    if phase not in PHASES:
        raise ValueError(f"unknown training phase {phase!r}; known: {PHASES}")
    return {"phase": phase, "epoch": int(epoch), **measures, "seconds": float(seconds)}


def log_row(log: logging.Logger, what: str, row: dict[str, Any]) -> None:
    """Log ``row`` on one line, floats to four significant digits."""
    log.info("%s: %s", what, " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
