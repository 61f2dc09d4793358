"""Start-up and wind-down energy: until a transfer can reach it, a device only runs what its own inputs feed.

`energy_bound` lets every device work from the first tick (or the first tick an anchor's output
can reach it). On graphs whose inputs are many small tiles (a chained matmul: each tile product
needs two input tiles) that is far too kind: a device busy from tick 0 must hold both inputs of
what it runs, and with transfers several times an operation few devices can. This family charges it.

Why it holds (fix a schedule of makespan T and a window length t)
-------------------------------------------------------------------
* A node v that starts before t on device d has every predecessor u with
  ``head[u] + d_u + transfer(u, v) >= t`` on d too (from another device its output would arrive
  at t or later): call such an edge *forced* at t. Such a u starts before t as well, so the rule
  applies again: the whole forced closure of v sits on d. The closures' *roots* (members with no
  forced predecessor) of the nodes d runs before t are d's alone: different devices hold disjoint
  root sets.
* So the work d does in [0, t) is at most ``min(t, f(S_d))``: f(S) sums, over the nodes all of
  whose roots lie in S, each node's share of [0, t) (``min(d_v, t - head[v])``, fastest
  duration, so a slower device is only charged less).
* Over all devices that is at most the best split of the roots into D disjoint groups
  (`_early_capacity` bounds it from above: roots that share no node are lumps of work taken
  whole; the others by how many of them a device holds, exact for up to three, by an even
  split of each node over its roots beyond).
* Mirrored (time reversed: tails for heads, successors for predecessors) the same bounds the
  work of the last t' ticks. With W the total fastest work, E and L the two capacities, and
  W > E + L (so the windows cannot overlap): ``W <= E + L + D (T - t - t')``, hence
  ``T >= t + t' + ceil((W - E - L) / D)``.

Heterogeneous speeds, per-pair links and memory limits enter through the fastest duration and
the cheapest transfer between two distinct devices (a relaxation), like every other family.
All arithmetic is in integer ticks (the even split in fractions).
"""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations

import numpy as np

from ..problems.placement import PlacementProblem
from .placement_heads import INF, _costs, transfer_heads, transfer_tails

__all__ = ["startup_bound", "window_capacity"]

#: Window lengths tried per side: the smallest breakpoints (where the forced edges are most) and
#: an even spread of the rest. Any subset gives a valid bound.
STARTUP_MAX_WINDOWS = 24

#: Past this much work (devices x linked roots x roots that fill a device, or shared keys x
#: their neighbours) a window's split is bounded more loosely (by its total work, or the even
#: split for three roots): pure Python, tried for up to 2 x `STARTUP_MAX_WINDOWS` windows.
SPLIT_BUDGET = 200_000

#: A node whose forced closure has more roots than this counts in a shared pool (it lies inside
#: one device's roots at most, so its work is added once), not per root.
WIDE_ROOTS = 64


def startup_bound(
    problem: PlacementProblem,
    head: list[int] | None = None,
    tail: list[int] | None = None,
    *,
    max_windows: int = STARTUP_MAX_WINDOWS,
    should_stop=None,
) -> int:
    """Lower bound on the makespan in ticks from the work devices can do before (after) a transfer.

    Parameters
    ----------
    problem : PlacementProblem
        Any devices and links.
    head, tail : list of int, optional
        Valid heads and tails (`transfer_heads` / `transfer_tails` when omitted; sharper ones
        only sharpen the bound).
    max_windows : int
        Most window lengths tried on each side.
    should_stop : callable, optional
        Asked before each window; once true, the windows computed so far give the bound.

    Returns
    -------
    int
        Never below the work bound ceil(W / D) (the windows of length 0); 0 with one device or no edge.
    """
    D = problem.n_devices
    if problem.n_nodes == 0 or D < 2 or problem.graph.n_edges == 0:
        return 0
    head = transfer_heads(problem) if head is None else list(head)
    tail = transfer_tails(problem) if tail is None else list(tail)
    dmin, cross = _costs(problem)
    g = problem.graph
    work = int(sum(dmin))
    sides = []
    for base, forward in ((head, True), (tail, False)):
        inputs = _forced_candidates(g, dmin, cross, base, forward)
        caps = [(0, 0)]
        for t in _windows(inputs, max_windows):
            if should_stop is not None and should_stop():
                break
            caps.append((t, _capacity(inputs, base, dmin, t, D)))
        sides.append(caps)
    best = 0
    for t, early in sides[0]:
        for t2, late in sides[1]:
            rest = work - early - late
            if rest > 0:
                best = max(best, t + t2 + -(-rest // D))
    return best


def window_capacity(problem: PlacementProblem, base: list[int], t: int, *, forward: bool = True) -> int:
    """Most fastest-duration work the devices can do in the first ``t`` ticks (last, with
    ``forward=False`` and tails as ``base``) of any schedule: at most ``D * t``."""
    dmin, cross = _costs(problem)
    return _capacity(_forced_candidates(problem.graph, dmin, cross, base, forward), base, dmin, t, problem.n_devices)


def _capacity(candidates, base: list[int], dmin: list[int], t: int, D: int) -> int:
    """`window_capacity` from `_forced_candidates` computed once per side."""
    order, inputs = candidates
    keys: dict[frozenset, int] = {}
    wide = 0
    total = 0
    roots: dict[int, frozenset | None] = {}
    for v in order:
        if base[v] >= t or any(u not in roots for u, _ in inputs[v]):
            continue  # starts at t or later (an input does)
        rs: set[int] | None = set()
        for u, arrive in inputs[v]:
            if arrive >= t:  # forced: u shares v's device
                if roots[u] is None:
                    rs = None
                    break
                rs |= roots[u]
        if rs is not None and not rs:
            rs = {v}
        if rs is not None and len(rs) > WIDE_ROOTS:
            rs = None
        roots[v] = None if rs is None else frozenset(rs)
        w = min(dmin[v], t - base[v])
        if w <= 0:
            continue
        total += w
        if rs is None:
            wide += w
        else:
            keys[roots[v]] = keys.get(roots[v], 0) + w
    if total == 0:
        return 0
    return min(D * t, total, _early_capacity(keys, t, D) + wide)


def _forced_candidates(g, dmin, cross, base, forward: bool):
    """Topological order (reversed for tails) and, per node, (input, earliest arrival from another device)."""
    order = g.topological_order().tolist()
    if forward:
        ptr, nbr, eid = g.pred_ptr.tolist(), g.pred_idx.tolist(), g.pred_edge.tolist()
    else:
        ptr, nbr, eid = g.succ_ptr.tolist(), g.succ_idx.tolist(), g.succ_edge.tolist()
        order.reverse()
    inputs = []
    for v in range(g.n_nodes):
        inputs.append([(nbr[k], min(INF, base[nbr[k]] + dmin[nbr[k]] + cross[eid[k]])) for k in range(ptr[v], ptr[v + 1])])
    return order, inputs


def _windows(inputs, most: int) -> list[int]:
    """Window lengths worth trying: each edge's arrival (the longest window it is forced in), the
    smallest half of ``most`` of them and an even spread of the others."""
    _, per = inputs
    values = sorted({a for items in per for _, a in items if 0 < a < INF})
    if len(values) <= most:
        return values
    half = most // 2
    rest = values[half:]
    picks = np.linspace(0, len(rest) - 1, most - half).round().astype(int)
    return values[:half] + sorted({rest[i] for i in picks.tolist()})


def _early_capacity(keys: dict[frozenset, int], t: int, D: int) -> int:
    """At least the best split of the roots over D devices of sum_d min(t, f(S_d)).

    ``keys``: for each root set, the work of the nodes with exactly those roots. Roots that appear
    only alone ("lone") are lumps: a device holding one of at least t is full, the smaller ones are
    added whole. The others ("linked") are split by count with `_root_values`, a device with s of
    them worth at most ``value[s]``: a knapsack over the devices by dynamic programming.
    """
    linked = {r for K in keys if len(K) > 1 for r in K}
    lone = [w for K, w in keys.items() if len(K) == 1 and next(iter(K)) not in linked]
    full = sum(1 for w in lone if w >= t)
    small = sum(w for w in lone if w < t)
    value = _root_values({K: w for K, w in keys.items() if K <= linked}, t, len(linked))
    R = len(linked)
    fill = next((s for s in range(1, R + 1) if value[s] >= t), R)  # roots that fill a device
    if R >= D * fill and value[fill] >= t:
        return D * t
    if D * R * fill > SPLIT_BUDGET:
        return D * t  # too many ways to split: claim nothing beyond the window itself
    # most[m][j]: the most m devices can hold with at most j linked roots between them
    most = [[0] * (R + 1)]
    for _ in range(D):
        prev = most[-1]
        row = list(prev)
        for j in range(1, R + 1):
            for s in range(1, min(j, fill) + 1):
                if prev[j - s] + value[s] > row[j]:
                    row[j] = prev[j - s] + value[s]
        most.append(row)
    return max(k * t + most[D - k][R] for k in range(min(full, D) + 1)) + small


def _root_values(keys: dict[frozenset, int], t: int, n: int) -> list[int]:
    """``value[s]`` (s = 0..n): at least min(t, f(S)) for every set S of s roots.

    Exact for s <= 3 (every set holding a shared key, or the heaviest lone keys; s <= 2 past
    `SPLIT_BUDGET`); beyond, each node's work split evenly over its roots and the s heaviest
    roots summed.
    """
    single = {next(iter(K)): w for K, w in keys.items() if len(K) == 1}
    pairs = {K: w for K, w in keys.items() if len(K) == 2}
    triples = {K: w for K, w in keys.items() if len(K) == 3}
    near: dict[int, set[int]] = {}
    for K in list(pairs) + list(triples):
        for r in K:
            near.setdefault(r, set()).update(K)

    def f(S: frozenset) -> int:
        total = sum(single.get(r, 0) for r in S)
        total += sum(pairs.get(frozenset(p), 0) for p in combinations(S, 2))
        return total + (triples.get(S, 0) if len(S) == 3 else 0)

    heaviest = sorted(single, key=lambda r: -single[r])
    lone = [single[r] for r in heaviest]
    exact = [0, sum(lone[:1]), max([sum(lone[:2])] + [f(K) for K in pairs]) if n >= 2 else 0]
    if n >= 3 and sum(len(near[min(K)]) + len(near[max(K)]) for K in pairs) <= SPLIT_BUDGET:
        best = max([sum(lone[:3])] + [f(K) for K in triples])
        for K in pairs:
            for r in (near[min(K)] | near[max(K)] | set(heaviest[:3])) - K:
                best = max(best, f(K | {r}))
        exact.append(best)
    share: dict[int, Fraction] = {}
    for K, w in keys.items():
        for r in K:
            share[r] = share.get(r, Fraction(0)) + Fraction(w, len(K))
    even = np.cumsum(sorted(share.values(), reverse=True)).tolist() if share else []
    value = [0]
    for s in range(1, n + 1):
        v = exact[s] if s < len(exact) else int(even[s - 1])  # floor: f is an integer
        value.append(min(t, max(value[-1], v)))
    return value
