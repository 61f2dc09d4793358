"""Placement bounds that charge every operation its own device kind's duration (heterogeneous devices).

The families of `incsched.bounds.placement` give every node its fastest duration over all devices:
on 2 GPUs + 2 CPUs that lets the CPUs run matmuls at GPU speed, and the bound falls to half the
optimum. Here devices fall into *kinds* (devices with the same duration column, `device_kinds`),
and a set of operations must fit on the kinds with each operation's own duration there.

The one inequality behind every family (*weighted load*): fix a schedule of makespan T, nonnegative
weights y_k per kind, and a set J of nodes. If device e (of kind k(e)) runs J's nodes only inside a
window of length W_e, its J-work is at most W_e, so

    sum_{o in J} min_k y_k d_{o,k}  <=  sum_{o in J} y_{k(dev o)} d_{o,k(dev o)}  <=  sum_e y_{k(e)} W_e.

Any integer weights give a valid bound, so the weights may come from anywhere (an exact search over
breakpoints for two kinds, a floating LP for more): the bound itself is re-evaluated in integers.
Over the best weights this is the LP dual of "fractionally assign every op to kinds, kind k holding
at most n_k * W of work", so it is exactly the fractional-assignment bound.

Families
--------
`kind_load_bound`
    J = every node, W_e = T: the least T a fractional assignment to kinds allows.
`kind_heads` / `kind_tails`
    `transfer_heads` per kind: the earliest start of v *on a device of kind k*, its co-located
    inputs at kind-k durations and the others over the cheapest link into kind k; optionally
    raised by the weighted load of v's ancestors (descendants), which must all end before v.
`kind_path_bound`
    max over nodes of the least over kinds of head + duration + tail there.
`kind_energy_bound`
    `incsched.bounds.placement.energy_bound` with the weighted load in place of fastest work: the
    windows per kind come from `kind_heads` / `kind_tails` (and the anchors' cases, per kind of
    the anchor's device).
`kind_interval_bound`
    Energetic reasoning: for a tried makespan, each node's least overlap with a time interval on
    each kind its window there still holds (a kind whose window is shorter than the node's
    duration there is out); the weighted load of those overlaps must fit the interval.

All exact in int64: weights are scaled so that no sum can wrap (`_weight_limit`). On identical
devices (one kind) every family here equals its fastest-duration counterpart, so
`placement_bound_details` only runs them when there are several kinds.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..problems.placement import PlacementProblem
from .placement_heads import INF, _colocation_rule, anchored_heads, anchored_tails, release_thresholds

__all__ = [
    "device_kinds",
    "kind_weights",
    "kind_load_bound",
    "kind_heads",
    "kind_tails",
    "kind_path_bound",
    "kind_energy_bound",
    "kind_interval_bound",
    "KIND_MAX_WEIGHTS",
    "KIND_MAX_POINTS",
]

#: Most weight vectors `kind_energy_bound` and `kind_interval_bound` try per set (any subset is
#: valid), and most interval starts (and ends) per tried makespan. On the benchmark's four hetero
#: instances 10 / 16 gave the bounds of 24 / 24 within 0.05 % in about half the time.
KIND_MAX_WEIGHTS = 10
KIND_MAX_POINTS = 16


# ---------------------------------------------------------------------- kinds and weights


def device_kinds(problem: PlacementProblem) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """Devices grouped by their duration column.

    Returns
    -------
    durations : ndarray of int64, [n_nodes, K]
        Ticks of each node on a device of each kind.
    counts : ndarray of int64, [K]
        Devices of each kind.
    members : list of list of int
        The devices of each kind, kinds ordered by their first device.
    """
    d = problem.durations()
    members: list[list[int]] = []
    keys: dict[bytes, int] = {}
    for e in range(problem.n_devices):
        key = np.ascontiguousarray(d[:, e]).tobytes()
        if key not in keys:
            keys[key] = len(members)
            members.append([])
        members[keys[key]].append(e)
    cols = np.stack([d[:, m[0]] for m in members], axis=1).astype(np.int64) if problem.n_nodes else np.zeros((0, len(members)), np.int64)
    return cols, np.asarray([len(m) for m in members], dtype=np.int64), members


def _weight_limit(dk: np.ndarray, counts: np.ndarray, groups: int = 1, extra: int = 0) -> int:
    """Largest weight such that no weighted work or weighted window sum can pass 2**62."""
    scale = int(dk.max(axis=1).sum()) + int(extra) + 1 if dk.size else 1
    return max(1, (1 << 62) // (scale * (int(counts.sum()) + 1) * (groups + 1)))


def _scaled(weights: list[tuple[int, ...]], limit: int) -> np.ndarray:
    """Integer weights at most ``limit`` (rounded down proportionally: any nonnegative weights are valid)."""
    out = []
    for y in weights:
        top = max(y)
        if top <= 0:
            continue
        if top > limit:
            y = tuple(int(Fraction(int(c) * limit, top)) for c in y)
        out.append(tuple(int(c) for c in y))
    out = list(dict.fromkeys(out))  # deterministic de-duplication
    return np.asarray(out, dtype=np.int64).reshape(len(out), -1)


def _pair_breakpoints(dk: np.ndarray, counts: np.ndarray) -> list[tuple[Fraction, tuple[int, int]]]:
    """Two kinds: per distinct duration ratio, (the whole set's load at that weight, weight)."""
    d0 = [int(x) for x in dk[:, 0]]
    d1 = [int(x) for x in dk[:, 1]]
    order = sorted(range(len(d0)), key=lambda o: Fraction(d1[o], d0[o]))
    # At weight y = (d1_j, d0_j) every op with d1/d0 <= d1_j/d0_j costs y1 d1, the others y0 d0.
    pre1 = [0]
    for o in order:
        pre1.append(pre1[-1] + d1[o])
    suf0 = [0] * (len(order) + 1)
    for i in range(len(order) - 1, -1, -1):
        suf0[i] = suf0[i + 1] + d0[order[i]]
    out = []
    i = 0
    n0, n1 = int(counts[0]), int(counts[1])
    while i < len(order):
        j = i
        r = Fraction(d1[order[i]], d0[order[i]])
        while j + 1 < len(order) and Fraction(d1[order[j + 1]], d0[order[j + 1]]) == r:
            j += 1
        y0, y1 = r.numerator, r.denominator  # y0 / y1 = d1 / d0 in lowest terms
        # ops up to j (ratio <= r) take y1 * d1, the rest y0 * d0.
        num = y1 * pre1[j + 1] + y0 * suf0[j + 1]
        out.append((Fraction(num, n0 * y0 + n1 * y1), (y0, y1)))
        i = j + 1
    return out


def kind_weights(dk: np.ndarray, counts: np.ndarray, max_weights: int | None = None) -> list[tuple[int, ...]]:
    """Weight vectors worth trying, the whole set's best first (integers; any nonnegative ones are valid).

    Two kinds: every breakpoint of the piecewise-linear load (the best is the LP optimum), spread
    to ``max_weights``. More kinds: the dual of the fractional-assignment LP (floating, rounded to
    integers: only a guide, `kind_load_bound` re-evaluates exactly). Equal weights always (the
    fastest-duration load).
    """
    K = dk.shape[1]
    ones = (1,) * K
    if K == 1 or dk.shape[0] == 0:
        return [ones]
    # One kind alone: what it must hold when the others cannot take a node (`kind_interval_bound`).
    units = [tuple(int(i == k) for i in range(K)) for k in range(K)]
    if K == 2:
        pts = _pair_breakpoints(dk, counts)
        best = max(range(len(pts)), key=lambda i: pts[i][0])
        picks = range(len(pts))
        if max_weights is not None and len(pts) > max_weights:
            picks = sorted(set(np.linspace(0, len(pts) - 1, max_weights).round().astype(int).tolist()))
        return list(dict.fromkeys([pts[best][1], ones] + [pts[i][1] for i in picks] + units))
    from scipy.optimize import linprog  # only for three or more kinds

    n = dk.shape[0]
    # Variables: x[o, k] then T; minimise T s.t. sum_o x_ok d_ok - n_k T <= 0, sum_k x_ok = 1.
    c = np.zeros(n * K + 1)
    c[-1] = 1.0
    a_ub = np.zeros((K, n * K + 1))
    for k in range(K):
        a_ub[k, np.arange(n) * K + k] = dk[:, k]
        a_ub[k, -1] = -counts[k]
    a_eq = np.zeros((n, n * K + 1))
    a_eq[np.repeat(np.arange(n), K), np.arange(n * K)] = 1.0
    res = linprog(c, A_ub=a_ub, b_ub=np.zeros(K), A_eq=a_eq, b_eq=np.ones(n), bounds=(0, None), method="highs")
    out = [ones] + units
    if res.status == 0:
        y = np.maximum(-np.asarray(res.ineqlin.marginals, dtype=np.float64), 0.0)
        if y.max() > 0:
            out.insert(0, tuple(int(round(v)) for v in y / y.max() * (1 << 20)))
    return out


def _weighted_work(dk: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """[Y, n]: each node's least weighted duration min_k y_k d_{o,k} per weight vector."""
    return (Y[:, None, :] * dk[None, :, :]).min(axis=2)


def kind_load_bound(problem: PlacementProblem) -> int:
    """Least makespan a fractional assignment of the nodes to device kinds allows (ticks).

    Returns
    -------
    int
        max over the weights y of ceil(sum_o min_k y_k d_{o,k} / sum_k n_k y_k); with two kinds
        every breakpoint is tried, which is the LP optimum (rounded up to a tick).

    Notes
    -----
    Why it holds: the weighted-load inequality of the module docstring with J = every node and
    every window the whole [0, T]: sum_o min_k y_k d_{o,k} <= T sum_k n_k y_k. With one kind and
    y = 1 it is ceil(total work / devices), the trivial bound.

    Examples
    --------
    Two ops of 10 ticks on a GPU and 40 on a CPU, one device of each kind: the GPU takes 1.6 ops
    (16 ticks), the CPU 0.4 (16 ticks), where the fastest durations claim 10.

    >>> from incsched.graph import CompGraph
    >>> from incsched.problems import Device
    >>> g = CompGraph(["a", "b"], [], [], compute_time={"gpu": [10.0, 10.0], "cpu": [40.0, 40.0]})
    >>> p = PlacementProblem(g, [Device("g", kind="gpu"), Device("c", kind="cpu")], time_unit=1.0)
    >>> p.lower_bound_ticks(), kind_load_bound(p)
    (10, 16)
    """
    dk, counts, _ = device_kinds(problem)
    if problem.n_nodes == 0:
        return 0
    if dk.shape[1] == 2:  # every breakpoint, in exact rationals: the LP optimum
        best = max(v for v, _ in _pair_breakpoints(dk, counts))
        return -(-best.numerator // best.denominator)
    Y = _scaled(kind_weights(dk, counts), _weight_limit(dk, counts))
    work = _weighted_work(dk, Y).sum(axis=1)
    cap = Y @ counts
    return int((-(-work // cap)).max())


# ---------------------------------------------------------------------- heads and tails per kind


def _kind_cross(problem: PlacementProblem, members: list[list[int]]) -> np.ndarray:
    """[m, K, K]: cheapest transfer of each edge from a device of kind a to a distinct device of kind b (`INF`: none)."""
    m, K = problem.graph.n_edges, len(members)
    out = np.full((m, K, K), INF, dtype=np.int64)
    if m == 0 or problem.n_devices == 1:
        return out
    t = problem.transfer_ticks().astype(np.int64).copy()
    idx = np.arange(problem.n_devices)
    t[:, idx, idx] = INF  # a device never sends to itself over a link
    for a, ma in enumerate(members):
        for b, mb in enumerate(members):
            out[:, a, b] = np.minimum(t[:, ma][:, :, mb].reshape(m, -1).min(axis=1), INF)
    return out


def _per_kind(problem: PlacementProblem, base: list[int] | None, forward: bool, energetic: bool = False, should_stop=None) -> np.ndarray:
    g = problem.graph
    n = g.n_nodes
    dk, counts, members = device_kinds(problem)
    K = dk.shape[1]
    cross = _kind_cross(problem, members)
    if not forward:
        cross = cross.transpose(0, 2, 1)  # reversed time: a transfer into v is one out of it
    out = np.zeros((n, K), dtype=np.int64)
    if base is not None:
        out[:] = np.asarray(base, dtype=np.int64)[:, None]
    if forward:
        ptr, nbr, eid, order = g.pred_ptr.tolist(), g.pred_idx.tolist(), g.pred_edge.tolist(), g.topological_order().tolist()
    else:
        ptr, nbr, eid, order = g.succ_ptr.tolist(), g.succ_idx.tolist(), g.succ_edge.tolist(), g.topological_order().tolist()[::-1]
    H = out.tolist()
    D = dk.tolist()
    if energetic:
        horizon = int(dk.max(axis=1).sum()) + int(out.max(initial=0))
        Y = _scaled(kind_weights(dk, counts, 8), _weight_limit(dk, counts, K, 2 * horizon))
        WW = _weighted_work(dk, Y)  # [Y, n]
        w = Y * counts[None, :]
        anc = [0] * n  # bitsets of ancestors (descendants when mirrored)
        Hn = out.copy()
    for v in order:
        if ptr[v] == ptr[v + 1]:
            continue
        for k in range(K):
            per: dict[int, list[int]] = {}
            for i in range(ptr[v], ptr[v + 1]):
                u, e = nbr[i], eid[i]
                ce = cross[e]
                arrive = min(H[u][a] + D[u][a] + int(ce[a, k]) for a in range(K))
                if u in per:
                    per[u][0] = max(per[u][0], arrive)  # parallel edges: the slowest transfer counts
                else:
                    per[u] = [arrive, H[u][k], D[u][k]]
            H[v][k] = max(H[v][k], min(_colocation_rule([tuple(x) for x in per.values()]), INF))
        if energetic and should_stop is not None and should_stop():
            energetic = False  # the heads raised so far stay valid; the rest keep the plain rule
        if energetic:
            a = 0
            for u in nbr[ptr[v]:ptr[v + 1]]:
                a |= anc[u] | (1 << u)
            anc[v] = a
            idx = np.asarray([u for u in range(n) if (a >> u) & 1], dtype=np.int64)
            rows = Hn[idx]
            o = np.argsort(-rows.min(axis=1), kind="stable")  # sets: the ancestors with the latest heads
            alpha = np.minimum(np.minimum.accumulate(rows[o], axis=0), horizon)  # [L, K]
            raised = int(_least_makespan_weighted(np.cumsum(WW[:, idx[o]], axis=1), alpha, w).max())
            H[v] = [max(h, raised) for h in H[v]]
            Hn[v] = H[v]
    return np.asarray(H, dtype=np.int64).reshape(n, K)


def kind_heads(problem: PlacementProblem, head: list[int] | None = None, *, energetic: bool = False, should_stop=None) -> np.ndarray:
    """Earliest start of every node on a device of every kind, [n_nodes, K] ticks (kinds as `device_kinds`).

    Parameters
    ----------
    problem : PlacementProblem
    head : list of int, optional
        Valid heads on any device (`transfer_heads`, energetic ones): every entry is at least these.
    energetic : bool
        Also raise each head by the weighted load of the node's ancestors (about n^2 work).
    should_stop : callable, optional
        Asked before each node's raise; once true the nodes left get the plain rule only.

    Notes
    -----
    Why it holds: `transfer_heads`' argument for v on a device of kind k. Its inputs S on the same
    device run there one at a time at kind-k durations, none before its own kind-k head; every
    other input u ends no earlier than min over kinds a of head_a(u) + d_{u,a} and then crosses a
    link into a kind-k device, at least the cheapest such link from kind a (`INF` when kind a has
    no device apart from v's). `_colocation_rule` takes the least over S; induction in
    topological order.

    ``energetic``: every ancestor u of v ends by v's start s, and on a device of kind k it starts
    no earlier than head_k(u); so for a set J of ancestors each kind-k device runs J's nodes
    inside [min_J head_k, s], and the weighted load (module docstring) bounds s from below like a
    makespan (`_least_makespan_weighted`, J = the ancestors with the latest heads). That holds
    whatever v's own kind, so it raises every kind's head.
    """
    return _per_kind(problem, head, forward=True, energetic=energetic, should_stop=should_stop)


def kind_tails(problem: PlacementProblem, tail: list[int] | None = None, *, energetic: bool = False, should_stop=None) -> np.ndarray:
    """Least time from every node's end to the makespan on a device of every kind (mirror of `kind_heads`)."""
    return _per_kind(problem, tail, forward=False, energetic=energetic, should_stop=should_stop)


def kind_path_bound(problem: PlacementProblem, head: np.ndarray | None = None, tail: np.ndarray | None = None) -> int:
    """max over nodes of min over kinds of head + duration + tail there: every node runs on some kind."""
    if not problem.n_nodes:
        return 0
    dk, _, _ = device_kinds(problem)
    head = kind_heads(problem) if head is None else head
    tail = kind_tails(problem) if tail is None else tail
    return int(np.minimum(head + dk + tail, INF).min(axis=1).max())


# ---------------------------------------------------------------------- energy per kind


def _kind_cases(kh, kq, hx, qy, counts, entry, exit_):
    """Device groups ``(heads, tails, kind, count)`` of each case: which kind the anchors' devices are."""
    K = len(counts)
    D = int(counts.sum())
    kh = [np.ascontiguousarray(kh[:, k]) for k in range(K)]  # one array per kind: callers key on identity
    kq = [np.ascontiguousarray(kq[:, k]) for k in range(K)]
    off_h = [np.maximum(hx, kh[k]) if hx is not None else kh[k] for k in range(K)]
    off_q = [np.maximum(qy, kq[k]) if qy is not None else kq[k] for k in range(K)]
    if D == 1 or (entry is None and exit_ is None):
        return [[(kh[k], kq[k], k, int(counts[k])) for k in range(K)]]
    cases = []
    for k0 in range(K):
        # The entry's device δ (or the exit's, when only it is anchored) is of kind k0.
        left = [int(counts[k]) - (k == k0) for k in range(K)]
        if exit_ is None:
            cases.append([(kh[k0], kq[k0], k0, 1)] + [(off_h[k], kq[k], k, left[k]) for k in range(K)])
            continue
        if entry is None:
            cases.append([(kh[k0], kq[k0], k0, 1)] + [(kh[k], off_q[k], k, left[k]) for k in range(K)])
            continue
        cases.append([(kh[k0], kq[k0], k0, 1)] + [(off_h[k], off_q[k], k, left[k]) for k in range(K)])
        if entry == exit_:
            continue
        for k1 in range(K):  # the exit's device ε != δ, of kind k1
            rest = [left[k] - (k == k1) for k in range(K)]
            if rest[k1] < 0:
                continue
            cases.append([(kh[k0], off_q[k0], k0, 1), (off_h[k1], kq[k1], k1, 1)]
                         + [(off_h[k], off_q[k], k, rest[k]) for k in range(K)])
    return cases


def _least_makespan_weighted(work: np.ndarray, alpha: np.ndarray, w: np.ndarray) -> np.ndarray:
    """[Y, L]: least integer T with work <= sum_g w_g max(0, T - alpha_g) per weight vector and set.

    ``work`` [Y, L], ``alpha`` [L, G], ``w`` [Y, G] (weight times device count). Only groups with
    alpha below T contribute, which are a prefix of the groups sorted by alpha, so T is at least
    the least over prefixes of ceil((work + sum w alpha) / sum w) (the empty prefix, or one of
    weight 0, only when there is no work).
    """
    order = np.argsort(alpha, axis=1, kind="stable")  # [L, G]
    a = np.take_along_axis(alpha, order, axis=1)  # [L, G]
    ws = w[:, order]  # [Y, L, G]
    cw = np.cumsum(ws, axis=2)
    cwa = np.cumsum(ws * a[None, :, :], axis=2)
    T = np.where(cw > 0, -(-(work[:, :, None] + cwa) // np.maximum(cw, 1)), INF).min(axis=2)
    return np.where(work > 0, T, 0)  # no weighted work: every group may stay idle, nothing is bounded


def kind_energy_bound(
    problem: PlacementProblem,
    head: list[int],
    tail: list[int],
    kh: np.ndarray | None = None,
    kq: np.ndarray | None = None,
    *,
    entry: int | None = None,
    exit_: int | None = None,
    max_thresholds: int | None = None,
    max_weights: int = KIND_MAX_WEIGHTS,
    should_stop=None,
) -> int:
    """`incsched.bounds.placement.energy_bound` with each node's work charged per kind (weighted load).

    Parameters
    ----------
    problem : PlacementProblem
    head, tail : list of int
        Valid heads and tails on any device (select the sets; anchored ones derive from them).
    kh, kq : ndarray, optional
        `kind_heads` / `kind_tails` (computed from ``head`` / ``tail`` when omitted).
    entry, exit_ : int, optional
        Anchors, as in `energy_bound`: devices off the entry's use `anchored_heads` too.
    max_thresholds : int, optional
        Most release thresholds tried (any subset is valid).
    max_weights : int
        Most weight vectors per set (any subset is valid).
    should_stop : callable, optional
        Asked before each threshold; once true the sets tried so far give the bound.

    Returns
    -------
    int
        A lower bound on the makespan in ticks.

    Notes
    -----
    Why it holds: fix a schedule of makespan T; it is in one of the cases `_kind_cases` lists
    (each anchor's device is of some kind; with both anchors, the same device or two). In it,
    every node v on a device of group g runs inside [H_g(v), T - Q_g(v)] (`kind_heads`, and the
    anchored heads off the entry's device: both valid there, so their maximum is). For a set J the
    devices of group g run J's nodes inside a window of length max(0, T - alpha_g), alpha_g =
    min_J H_g + min_J Q_g, so the weighted load gives, for every y,
    sum_J min_k y_k d_{o,k} <= sum_g y_{k(g)} n_g max(0, T - alpha_g), and
    `_least_makespan_weighted` the least T for it. The case's bound is the largest over y, the
    set's the least over cases. With one kind and y = 1 this is `energy_bound` exactly.
    """
    n = problem.n_nodes
    if n == 0:
        return 0
    dk, counts, _ = device_kinds(problem)
    kh = kind_heads(problem, head) if kh is None else kh
    kq = kind_tails(problem, tail) if kq is None else kq
    hx = np.asarray(anchored_heads(problem, entry, list(head)), dtype=np.int64) if entry is not None else None
    qy = np.asarray(anchored_tails(problem, exit_, list(tail)), dtype=np.int64) if exit_ is not None else None
    cases = [[gr for gr in c if gr[3] > 0] for c in _kind_cases(kh, kq, hx, qy, counts, entry, exit_)]
    G = max(len(c) for c in cases)
    # Windows beyond this horizon never decide a T worth having; lowering alpha only relaxes.
    horizon = int(dk.max(axis=1).sum()) + int(np.max(head)) + int(np.max(tail))
    Y = _scaled(kind_weights(dk, counts, max_weights), _weight_limit(dk, counts, G, 2 * horizon))
    WW = _weighted_work(dk, Y)  # [Y, n]
    # Sets: releases and tails large on every kind (the anchored ones when anchored), as energy_bound.
    key_a = hx if hx is not None else kh.min(axis=1)
    key_b = qy if qy is not None else kq.min(axis=1)
    thresholds = release_thresholds(key_a, max_thresholds)
    best = 0
    for a in thresholds.tolist():
        if should_stop is not None and should_stop():
            break
        members = np.flatnonzero(key_a >= a)
        order = members[np.argsort(-key_b[members], kind="stable")]
        work = np.cumsum(WW[:, order], axis=1)  # [Y, L]
        case_best = None
        lows: dict[int, np.ndarray] = {}  # running minima per heads / tails array (the cases share them)

        def low(x):
            if id(x) not in lows:
                lows[id(x)] = np.minimum.accumulate(x[order])
            return lows[id(x)]

        for groups in cases:
            alpha = np.minimum(np.stack([low(h) + low(q) for h, q, _, _ in groups], axis=1), horizon)  # [L, G]
            w = np.stack([Y[:, k] * c for _, _, k, c in groups], axis=1)  # [Y, G]
            bound = _least_makespan_weighted(work, alpha, w).max(axis=0)  # best weights per set
            case_best = bound if case_best is None else np.minimum(case_best, bound)
        best = max(best, int(case_best.max()))
    return best


# ---------------------------------------------------------------------- energetic reasoning over intervals, per kind


def _refutes(dk, counts, kh, kq, T: int, Y: np.ndarray, max_points: int) -> bool:
    """Whether the mandatory work per kind inside some interval proves that no schedule ends by ``T``."""
    dl = T - kq
    allowed = kh + dk <= dl  # [n, K]: kinds whose window still holds the node
    if not allowed.any(axis=1).all():
        return True
    starts = np.unique(np.concatenate([[0], kh[allowed], (kh + dk)[allowed]]))
    ends = np.unique(np.concatenate([[T], dl[allowed], (dl - dk)[allowed]]))
    starts, ends = starts[starts < T], ends[ends > 0]
    if len(starts) > max_points:
        starts = np.unique(starts[np.linspace(0, len(starts) - 1, max_points).round().astype(np.int64)])
    if len(ends) > max_points:
        ends = np.unique(ends[np.linspace(0, len(ends) - 1, max_points).round().astype(np.int64)])
    t1, t2 = np.meshgrid(starts, ends, indexing="ij")
    keep = t2 > t1
    t1, t2 = t1[keep], t2[keep]
    cap_per_tick = Y @ counts  # [Y]
    n, K = dk.shape
    chunk = max(1, (1 << 21) // max(1, n * K))
    for i in range(0, len(t1), chunk):
        a, b = t1[i:i + chunk, None, None], t2[i:i + chunk, None, None]  # [I, 1, 1]
        # Least overlap of a run of length d inside [r, dl] with [a, b]: shifted fully left or right.
        m = np.minimum(np.minimum(dk[None], b - a), np.minimum(kh[None] + dk[None] - a, b - dl[None] + dk[None]))
        m = np.maximum(m, 0)  # [I, n, K]
        for y, c in zip(Y, cap_per_tick):
            need = np.where(allowed[None], m * y[None, None, :], np.iinfo(np.int64).max).min(axis=2).sum(axis=1)
            if (need > (b[:, 0, 0] - a[:, 0, 0]) * c).any():
                return True
    return False


def kind_interval_bound(
    problem: PlacementProblem,
    kh: np.ndarray,
    kq: np.ndarray,
    *,
    lower: int = 0,
    max_points: int = KIND_MAX_POINTS,
    max_weights: int = KIND_MAX_WEIGHTS,
    precision: float = 1e-3,
    should_stop=None,
) -> int:
    """Least makespan that energetic reasoning over time intervals, per kind, cannot refute (ticks).

    Parameters
    ----------
    problem : PlacementProblem
    kh, kq : ndarray
        `kind_heads` / `kind_tails`.
    lower : int
        A bound already known: the search starts there, and nothing below it is returned.
    max_points, max_weights : int
        Most interval starts and ends, and weight vectors, per tried makespan (any subsets are valid).
    precision : float
        The search stops once the answer is bracketed this tightly (relative); the refuted side
        is returned.
    should_stop : callable, optional
        Asked between tried makespans; once true the bound refuted so far is returned.

    Notes
    -----
    Why it holds: suppose a schedule ends by T. A node v on a device of kind k runs
    d_{v,k} ticks without a break inside [h_k(v), T - q_k(v)] (`kind_heads`, `kind_tails`), so a
    kind whose window is shorter than d_{v,k} does not hold v, and inside an interval [a, b] v
    runs at least m_k(v) = max(0, min(d, b - a, h + d - a, b - (T - q) + d)) (its overlap when
    shifted fully left or right). Devices of kind k do at most n_k (b - a) work inside [a, b], so
    for any weights y >= 0, sum_v min over kinds allowed for v of y_k m_k(v) <= (b - a) sum_k
    y_k n_k. A T violating that for some interval and weights is refuted: the optimum exceeds it.
    The search only raises its low end past a refuted T, so what it returns is valid even when
    cut short. [0, T] alone, all kinds allowed, is `kind_load_bound`; integers throughout.
    """
    if problem.n_nodes == 0:
        return max(0, int(lower))
    stop = should_stop or (lambda: False)
    dk, counts, _ = device_kinds(problem)
    kh = np.minimum(kh, INF)
    kq = np.minimum(kq, INF)
    lo = max(int(lower), int(np.minimum(kh + dk + kq, INF).min(axis=1).max()))
    hi = int(dk.max(axis=1).sum()) + int(kh.min(axis=1).max()) + int(kq.min(axis=1).max())  # a bracket only
    Y = _scaled(kind_weights(dk, counts, max_weights), _weight_limit(dk, counts, 1, 2 * max(hi, lo)))

    def refutes(T: int) -> bool:
        return _refutes(dk, counts, kh, kq, T, Y, max_points)

    step = max(1, int(lo * precision * 16))
    while lo < hi and not stop():
        probe = min(hi, lo + step)
        if not refutes(probe):
            hi = probe
            break
        lo, step = probe + 1, step * 2
    while hi - lo > max(0, int(lo * precision)) and not stop():
        mid = (lo + hi) // 2
        if refutes(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo
