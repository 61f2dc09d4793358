"""Arithmetic the compiled decoders share, written so its result never depends on the machine."""

from __future__ import annotations

from numba import njit

__all__ = ["fixed_order_sum"]


@njit(cache=True, nogil=True)
def fixed_order_sum(a):  # pragma: no cover - compiled
    """Sum in four interleaved partial sums, combined in a fixed order.

    Faster than one running sum (four independent additions per step) and, unlike a sum the
    compiler may vectorise or reassociate (fastmath), the same bits on every machine.
    """
    s0 = s1 = s2 = s3 = 0.0
    m = a.shape[0] - a.shape[0] % 4
    for k in range(0, m, 4):
        s0 += a[k]
        s1 += a[k + 1]
        s2 += a[k + 2]
        s3 += a[k + 3]
    for k in range(m, a.shape[0]):
        s0 += a[k]
    return (s0 + s1) + (s2 + s3)
