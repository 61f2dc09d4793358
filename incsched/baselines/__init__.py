"""Heuristic pre-schedulers, one interface for all: ``preschedule(problem, seed) -> incumbent``
(a stage array for stage problems, a `Placement` for placement problems)."""

from .placement import PLACEMENT_BASELINES, critical_path_list, heft, local_search, round_robin, single_device
from .stage import (
    STAGE_BASELINES,
    alap,
    asap,
    best_baseline,
    contiguous_compute,
    contiguous_params,
    dp_local_search,
    pipedream_dp,
)

__all__ = [
    "STAGE_BASELINES",
    "asap",
    "alap",
    "contiguous_params",
    "contiguous_compute",
    "pipedream_dp",
    "dp_local_search",
    "best_baseline",
    "PLACEMENT_BASELINES",
    "critical_path_list",
    "heft",
    "round_robin",
    "single_device",
    "local_search",
]
