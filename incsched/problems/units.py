"""The tick: seconds per integer time step, chosen by one rule for both problems.

`StageProblem` and `PlacementProblem` convert every time to integer ticks once, at construction;
when no ``time_unit`` is given both call `auto_time_unit` with their own work (the stage problem:
the graph on its slowest stage; the placement problem: every node on its fastest device) and their
own range limit, so equal times give equal ticks wherever those limits allow.
"""

from __future__ import annotations

import math

__all__ = ["MIN_WORK_TICKS", "FINEST_TIME_UNIT", "auto_time_unit", "finest_time_unit"]

#: The automatic tick makes the problem's work span at least this many ticks (and under 2.5 times
#: as many): rounding one node's time to a tick moves the total by at most 5e-7 of it.
MIN_WORK_TICKS = 1e6

#: The finest automatic tick, in seconds; work below ``MIN_WORK_TICKS`` of these (subnormal times
#: such as 5e-324 s) gets it anyway, and the problem decides whether so few ticks will do.
FINEST_TIME_UNIT = 1e-300

#: Used when the work is zero (every node free): any tick gives the same, all-zero, times.
_ZERO_WORK_UNIT = 1e-6


def _round_units(raw: float) -> list[float]:
    """The 1/2/5 x 10^k values from a decade below ``raw`` to a decade above, ascending."""
    exp = math.floor(math.log10(raw))
    # Parsed from text, so 2e-5 is the double nearest 2 x 10^-5, not 2.0 * 10.0**-5.
    return [float(f"{mant}e{e}") for e in (exp - 1, exp, exp + 1) for mant in (1, 2, 5)]


def finest_time_unit(span_seconds: float, max_ticks: float) -> float:
    """The finest 1/2/5 x 10^k tick (at least `FINEST_TIME_UNIT`) at which ``span_seconds`` is at
    most ``max_ticks`` ticks: a problem whose tick sums must stay within ``max_ticks`` can use no
    finer one, and its error messages suggest this one.

    Examples
    --------
    >>> finest_time_unit(3e3, 1e3)
    5.0
    """
    if not span_seconds / max_ticks > FINEST_TIME_UNIT:
        return FINEST_TIME_UNIT
    return next(u for u in _round_units(span_seconds / max_ticks) if span_seconds / u <= max_ticks)


def auto_time_unit(work_seconds: float, span_seconds: float = 0.0, max_ticks: float = math.inf) -> float:
    """The tick a problem uses when none is given: one rule for the stage and placement problems.

    The coarsest 1/2/5 x 10^k seconds at which ``work_seconds`` spans at least `MIN_WORK_TICKS`
    ticks (never finer than `FINEST_TIME_UNIT`), coarsened, if need be, to the finest such value
    at which ``span_seconds`` (an upper bound on any tick sum the problem forms) is at most
    ``max_ticks`` ticks.

    Parameters
    ----------
    work_seconds : float
        The problem's total work in seconds (finite, non-negative).
    span_seconds : float
        The largest time the problem adds up, e.g. a schedule's horizon; default 0 (no limit).
    max_ticks : float
        The most ticks ``span_seconds`` may come to; default unlimited.

    Returns
    -------
    float
        Seconds per tick.

    Raises
    ------
    ValueError
        If a time is negative, NaN or infinite.

    Examples
    --------
    >>> auto_time_unit(3.0)  # 1.5e6 ticks of 2 microseconds
    2e-06
    >>> auto_time_unit(3.0, span_seconds=1e6, max_ticks=2**30)  # the span needs a coarser tick
    0.001
    """
    for label, value in (("work", work_seconds), ("span", span_seconds)):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"cannot choose a time unit for a {label} of {value!r} seconds")
    if work_seconds == 0:
        unit = _ZERO_WORK_UNIT
    elif work_seconds / MIN_WORK_TICKS < FINEST_TIME_UNIT:
        unit = FINEST_TIME_UNIT
    else:
        unit = max(u for u in _round_units(work_seconds / MIN_WORK_TICKS) if work_seconds / u >= MIN_WORK_TICKS)
    if span_seconds / unit > max_ticks:
        unit = finest_time_unit(span_seconds, max_ticks)
    return unit
