"""The one check of a training config's fields: each hyper-parameter's type and range, applied in
the configs' ``__post_init__``, so a run never starts with ``imitation_epochs = -1``, a learning
rate of 0 or ``rl_samples = 0`` (a division by zero an hour in). Errors are `ValueError`s that
start with the field's name, which the experiment config turns into its key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any

__all__ = ["MAX_COUNT", "whole", "real", "whole_range", "reals"]

#: Largest count (epochs, graphs, samples, nodes) a config may ask for: beyond it a run would not
#: end in any useful time.
MAX_COUNT = 10**6


def whole(name: str, value: Any, low: int, high: int = MAX_COUNT) -> None:
    """``value`` is a whole number in ``low .. high`` (numpy integers too, booleans not)."""
    if isinstance(value, bool) or not isinstance(value, Integral) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number in {low} .. {high:,}, got {value!r:.80}")


def real(name: str, value: Any, low: float, *, above: bool = False, optional: bool = False) -> None:
    """``value`` is a finite number >= ``low`` (> with ``above``); None too when ``optional``."""
    if optional and value is None:
        return
    if (isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value < low
            or (above and value == low)):
        raise ValueError(f"{name} must be a finite number {'>' if above else '>='} {low:g}, got {value!r:.80}")


def whole_range(name: str, value: Any, low: int, high: int = MAX_COUNT) -> None:
    """``value`` is a pair ``(lo, hi)`` of whole numbers with ``low <= lo <= hi <= high``."""
    ok = isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value) == 2
    if ok:
        try:
            whole(name, value[0], low, high)
            whole(name, value[1], low, high)
        except ValueError:
            ok = False
    if not ok or value[0] > value[1]:
        raise ValueError(f"{name} must be a range [low, high] of whole numbers, {low} <= low <= high <= {high:,}, got {value!r:.80}")


def reals(name: str, value: Any, low: float, *, above: bool = False) -> None:
    """``value`` is a non-empty sequence of finite numbers, each >= ``low`` (> with ``above``)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise ValueError(f"{name} must be a non-empty list of numbers, got {value!r:.80}")
    for v in value:
        try:
            real(name, v, low, above=above)
        except ValueError:
            raise ValueError(f"{name} must be a non-empty list of finite numbers {'>' if above else '>='} {low:g}, got {value!r:.80}") from None
