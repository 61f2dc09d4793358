"""Tests of incsched.problems.units: one automatic tick for the stage and placement problems."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.graph import CompGraph
from incsched.problems import PlacementProblem, StageProblem
from incsched.problems.placement import MAX_HORIZON_TICKS
from incsched.problems.units import FINEST_TIME_UNIT, MIN_WORK_TICKS, auto_time_unit, finest_time_unit


def _is_round(unit: float) -> bool:
    mant = unit / 10.0 ** math.floor(math.log10(unit))
    return any(abs(mant - m) < 1e-6 for m in (1.0, 2.0, 5.0))


@given(st.floats(1e-280, 1e300))
@settings(max_examples=200, deadline=None)
def test_the_tick_is_the_coarsest_round_one_with_a_million_ticks_of_work(work):
    unit = auto_time_unit(work)
    assert _is_round(unit)
    assert MIN_WORK_TICKS <= work / unit < 2.5 * MIN_WORK_TICKS * (1 + 1e-9)


@given(st.floats(1e-9, 1e3), st.floats(1.0, 1e15))
@settings(max_examples=100, deadline=None)
def test_a_long_span_coarsens_the_tick_just_enough(work, span_factor):
    span = work * span_factor
    unit = auto_time_unit(work, span_seconds=span, max_ticks=2**30)
    assert span / unit <= 2**30 and _is_round(unit)
    if unit > auto_time_unit(work):
        assert unit == finest_time_unit(span, 2**30)
        finer = unit * (0.4 if round(unit / 10.0 ** math.floor(math.log10(unit))) == 5 else 0.5)
        assert span / finer > 2**30  # the next finer round tick would not fit


def test_zero_subnormal_and_bad_work():
    assert auto_time_unit(0.0) == 1e-6
    assert auto_time_unit(5e-324) == FINEST_TIME_UNIT
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError, match="time unit"):
            auto_time_unit(bad)


@given(st.lists(st.floats(1e-7, 10.0), min_size=1, max_size=30), st.integers(1, 4), st.integers(1, 4))
@settings(max_examples=60, deadline=None)
def test_both_problems_pick_the_same_tick_for_the_same_times(times, n_stages, n_devices):
    # Free links and unit speeds: the stage problem's work (the graph on its slowest stage) and the
    # placement problem's (every node on its fastest device) are the same seconds, and the horizon
    # stays far inside 2**50 ticks, so neither limit moves the tick.
    names = [f"n{i}" for i in range(len(times))]
    g = CompGraph(names, names[:-1], names[1:], compute_time={"cpu": times})
    stage = StageProblem(g, n_stages, device_kind="cpu")
    placement = PlacementProblem.identical(g, n_devices)
    assert stage.time_unit == placement.time_unit == auto_time_unit(float(g.time("cpu").sum()))


def test_the_problems_keep_their_own_limits():
    # Placement: a slow link would pass 2**50 ticks at the work's tick, so the tick coarsens.
    g = CompGraph(["a", "b"], ["a"], ["b"], out_bytes=[10**6, 0], compute_time={"cpu": [1e-9, 1e-9]})
    p = PlacementProblem.identical(g, 2, bandwidth=1e-6)
    assert p.time_unit > StageProblem(g, 2).time_unit
    assert int(p.transfer_ticks().max()) <= MAX_HORIZON_TICKS
