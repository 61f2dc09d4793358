"""The compiled kernel of `placement_moves` (numba): ordered execution and moves on linked device orders."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["search_chunk"]

#: Kicks without a better placement before the search returns to the best one.
_PATIENCE = 50

#: Ops a kick moves.
_KICK = 3

@njit(cache=True)
def _execute(dev, prev, nxt, dur, pred_ptr, pred_idx, pred_edge, succ_ptr, succ_idx, tick, start, end, cause, waiting, queue):
    """Ordered execution (as `simulate`): each op starts when its device's previous op has ended
    and every input has arrived. Returns (makespan, last op), or (-1, -1) when the orders deadlock.
    ``cause[v]``: the op whose end (or arrival) set v's start, -1 for none: the critical path backwards."""
    n = len(dev)
    head = tail = 0
    for v in range(n):
        waiting[v] = pred_ptr[v + 1] - pred_ptr[v] + (1 if prev[v] >= 0 else 0)
        if waiting[v] == 0:
            queue[tail] = v
            tail += 1
    makespan, last = 0, -1
    while head < tail:
        v = queue[head]
        head += 1
        d = dev[v]
        t, why = 0, -1
        if prev[v] >= 0:
            t, why = end[prev[v]], prev[v]
        for k in range(pred_ptr[v], pred_ptr[v + 1]):
            u = pred_idx[k]
            arrive = end[u] + tick[pred_edge[k], dev[u], d]
            if arrive > t:
                t, why = arrive, u
        start[v], end[v], cause[v] = t, t + dur[v, d], why
        if end[v] > makespan:
            makespan, last = end[v], v
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[k]
            waiting[w] -= 1
            if waiting[w] == 0:
                queue[tail] = w
                tail += 1
        w = nxt[v]
        if w >= 0:
            waiting[w] -= 1
            if waiting[w] == 0:
                queue[tail] = w
                tail += 1
    if tail < n:
        return -1, -1
    return makespan, last


@njit(cache=True)
def _unlink(v, dev, prev, nxt, first, last):
    p, q, d = prev[v], nxt[v], dev[v]
    if p >= 0:
        nxt[p] = q
    else:
        first[d] = q
    if q >= 0:
        prev[q] = p
    else:
        last[d] = p
    prev[v] = nxt[v] = -1


@njit(cache=True)
def _link_after(v, d, after, dev, prev, nxt, first, last):
    """Put v into device d's order right after ``after`` (-1: first)."""
    dev[v] = d
    if after < 0:
        q = first[d]
        first[d] = v
    else:
        q = nxt[after]
        nxt[after] = v
    prev[v], nxt[v] = after, q
    if q >= 0:
        prev[q] = v
    else:
        last[d] = v


@njit(cache=True)
def _restore(keep, dev, prev, nxt, first, last):
    dev[:] = keep[0]
    prev[:] = keep[1]
    nxt[:] = keep[2]
    first[:] = keep[3]
    last[:] = keep[4]


@njit(cache=True)
def _position(d, at, start, nxt, first):
    """The op of device d's order after which an op starting at ``at`` goes (-1: first)."""
    a, w = -1, first[d]
    while w >= 0 and start[w] < at:
        a, w = w, nxt[w]
    return a


@njit(cache=True)
def search_chunk(dev, prev, nxt, first, last, dur, allowed, pred_ptr, pred_idx, pred_edge, succ_ptr, succ_idx, tick,
                 budget, seed, width):
    """Up to ``budget`` moves from the placement in (dev, prev, nxt, first, last); leaves the best
    placement found there and returns (its makespan, placements tried)."""
    np.random.seed(seed)
    n, D = dur.shape
    start, end, cause = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    waiting, queue, critical = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    args = (dur, pred_ptr, pred_idx, pred_edge, succ_ptr, succ_idx, tick, start, end, cause, waiting, queue)
    current, final = _execute(dev, prev, nxt, *args)
    best = current
    keep = (dev.copy(), prev.copy(), nxt.copy(), first.copy(), last.copy())
    current_sum = end.sum()
    used = stale = 0
    while used < budget:
        count, v = 0, final
        while v >= 0:
            critical[count] = v
            count += 1
            v = cause[v]
        # Every candidate's execution overwrites `start`: the positions come from the current placement's.
        base = start.copy()
        improved = False
        for i in np.random.permutation(count):
            v = critical[i]
            home, before, at = dev[v], prev[v], base[v]
            _unlink(v, dev, prev, nxt, first, last)
            for d in range(D):
                if not allowed[v, d]:
                    continue
                pos = _position(d, at, base, nxt, first)
                for _ in range(width):
                    if pos < 0:
                        break
                    pos = prev[pos]
                for _ in range(2 * width + 1):
                    if used >= budget:
                        break
                    if not (d == home and pos == before):
                        _link_after(v, d, pos, dev, prev, nxt, first, last)
                        makespan, tip = _execute(dev, prev, nxt, *args)
                        used += 1
                        # The sum of ends only breaks ties (a wrap past int64, n ops near 2^50 ticks, only misleads a tie).
                        if makespan >= 0 and (makespan < current or (makespan == current and end.sum() < current_sum)):
                            current, final, current_sum, improved = makespan, tip, end.sum(), True
                            break
                        _unlink(v, dev, prev, nxt, first, last)
                    pos = first[d] if pos < 0 else nxt[pos]
                    if pos < 0:
                        break
                if improved:
                    break
            if improved:
                break
            _link_after(v, home, before, dev, prev, nxt, first, last)
            if used >= budget:
                break
        if improved:
            if current < best:
                best, stale = current, 0
                keep = (dev.copy(), prev.copy(), nxt.copy(), first.copy(), last.copy())
            continue
        if used >= budget:
            break
        # No move of a critical op helps: a kick, or back to the best after too many.
        stale += 1
        if stale > _PATIENCE:
            stale = 0
            _restore(keep, dev, prev, nxt, first, last)
        else:
            for _ in range(_KICK):
                v, d = np.random.randint(n), np.random.randint(D)
                if allowed[v, d]:
                    _unlink(v, dev, prev, nxt, first, last)
                    _link_after(v, d, _position(d, base[v], base, nxt, first), dev, prev, nxt, first, last)
        current, final = _execute(dev, prev, nxt, *args)
        used += 1
        if current < 0:  # the kick closed a cycle through the orders
            stale = 0
            _restore(keep, dev, prev, nxt, first, last)
            current, final = _execute(dev, prev, nxt, *args)
        current_sum = end.sum()
    _restore(keep, dev, prev, nxt, first, last)
    return best, used
