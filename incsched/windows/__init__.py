"""The windows step: the relaxation window of freedom around an incumbent that the exact model
searches (`relax`): stage radii and bands, devices within hops or ranked first by the policy, start
ranges, device-pair and time-slice neighbourhoods.

Not to be confused with two other restrictions inc-ilp hands the exact model, both built from a
proof rather than chosen: the *objective cap* (`incsched.inc_ilp.stage.objective_cap`: no answer
worse than the incumbent) and the *precedence ranges* (`incsched.bounds.stage.stage_ranges`: the
stages every answer under a memory cap must keep).
"""

from .relax import (
    device_pair,
    free_in,
    placement_window,
    ranked_devices,
    stage_band_window,
    stage_window,
    start_window,
    time_slice,
    window_is_everything,
)

__all__ = [
    "stage_window", "stage_band_window", "window_is_everything",
    "placement_window", "ranked_devices", "start_window", "free_in", "device_pair", "time_slice",
]
