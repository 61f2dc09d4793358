"""A preemptive flow bound on placement makespans: per-node windows per device class, fed by the entry's device.

`incsched.bounds.placement.energy_bound` charges each set of nodes the *smallest* head and the
*smallest* tail among its members, per device class. On fork-joins with transfers several times
the compute those minima come from different kinds of node, and from nodes that cannot all be
early at once: a score op off the entry's device may start soon after the entry, but only once
the entry's device has run its head's projections, and that device runs one op at a time. Here
every node keeps its own window on every device class, the work that devices other than the
entry's can do before the entry's output could reach them is capped by what the entry's device
can feed them in that time (and the mirror at the exit), and the question "does the work fit by
T?" is a max flow; the least T that fits (bisection) bounds the makespan.

Why it holds (`flow_bound`)
---------------------------
Fix a schedule of makespan at most T. Devices fall into classes as in `energy_bound`: with an
entry anchor x (the single source) on device δ, and an exit anchor y (the single sink) on device
ε, either ε = δ (class δ: plain heads and tails; the D - 1 others: heads off x's device and
tails off y's) or not (δ: plain heads, tails off y; ε: heads off x, plain tails; the D - 2
others: both off). Every node v on a device of class c runs inside [H_c(v), T - Q_c(v)] (any
valid heads and tails: `transfer_heads`, `anchored_heads`, their energetic or CP-SAT raised
versions). Cut time at the window edges into intervals; in interval k of length L_k a node runs
at most L_k (it sits on one device, which runs one op at a time) and class c does at most
count_c * L_k of work.

*Feeding.* Let C be x's successors and t_x = head(x) + p(x) + (cheapest transfer out of x). A
member of C off δ starts no earlier than t_x. So a node v off δ that starts at s < t_x has every
member of C among its ancestors, C(v), on δ; the way from each of them to v leaves δ over some
edge not at x, so they are done by s - λ (λ: the cheapest crossing of an edge not at x): δ runs
x and then C(v) inside [head(x), s - λ]. For t <= t_x, all work off δ inside [0, t] belongs to
nodes v off δ started before t, and the union S of their C(v) ran on δ within t - head(x) -
p(x) - λ. Charging each v's duration in equal shares to the members of C(v) (g(u) = sum over v
with u in C(v) of p(v) / |C(v)|), the work off δ in [0, t] is at most sum_{u in S} g(u) <= the
fractional knapsack of items (p(u), g(u)) of that capacity: B_x(t). Mirrored at the exit: work
off ε inside [T - t, T] is at most B_y(t) for t <= t_y (x's successors replaced by y's
predecessors).

So the schedule is a flow source -> v (p_v) -> (v, k) (L_k) -> (c, k) for the classes whose
window of v holds k -> sink (count_c * L_k), where the flow of the off-δ classes in intervals
inside [0, t] passes one arc of capacity B_x(t) (a chain over the time points t <= t_x), and the
same at the end; it saturates every node's arc. When the maximum flow is short of the total work,
no schedule ends by T. Dropping a constraint (an interval in both the head and the tail chains,
window edges rounded outwards onto a coarser grid of time points) only relaxes the network, so a
coarse grid still refutes validly. T is claimed refuted only when every case is, and the
bisection only raises its low end past a refuted T, so what it returns is always a valid bound,
also when cut short. Integer ticks, an exact floor of the rational knapsack, and an integer max
flow (OR-Tools `SimpleMaxFlow`): exact.

Without feeding constraints the network's cuts include `energy_bound`'s sets (their windows
widened to the sets' minima), so with the same heads and tails, no coarsening and an exact search
(``precision=0``) this bound is never weaker than the energy bound; `placement_bound_details`
starts the search at the other families' maximum anyway.
"""

from __future__ import annotations

from bisect import bisect_right
from fractions import Fraction

import numpy as np
from ortools.graph.python import max_flow

from ..problems.placement import PlacementProblem
from .placement_heads import INF, _anchors, _costs, anchored_heads, anchored_tails, transfer_heads, transfer_tails

__all__ = ["flow_bound", "feeding_budget", "FLOW_MAX_POINTS", "FLOW_MAX_NODES", "FLOW_PRECISION"]

#: Most window edges kept per feasibility check; more are rounded outwards onto this many points.
FLOW_MAX_POINTS = 160

#: Relative width at which `flow_bound` stops its search (returning the refuted side).
FLOW_PRECISION = 1e-3

#: `incsched.bounds.placement.placement_bound_details` adds the flow bound on problems (and
#: segments) of at most this many nodes by default: 0.3 s at 60 nodes, 0.7 s on the 226-node
#: attention segment of a 32-head block, 0.4 s on a 397-node block (a 2-core VM). A wide
#: fork-join segment is where the feeding budget counts most (32 heads: 82,689 -> 110,152 ticks).
FLOW_MAX_NODES = 400


class feeding_budget:
    """B(t): most work the devices other than the anchor's can do within t of the anchor's side.

    ``forward``: the anchor is the single source x and B(t) bounds the work off x's device
    inside [0, t] for t <= ``reach`` (x's head, duration and cheapest outgoing transfer); else
    the mirror at the single sink. See the module docstring for the proof.

    Parameters
    ----------
    problem : PlacementProblem
    anchor : int
        The single source (``forward``) or sink.
    head : list of int
        Valid heads (``forward``) or tails of every node: the anchor's bounds when its side starts.
    forward : bool
    """

    def __init__(self, problem: PlacementProblem, anchor: int, head, *, forward: bool = True):
        g = problem.graph
        dmin, cross = _costs(problem)
        order = g.topological_order().tolist()
        if forward:
            ptr, nbr, feid = g.pred_ptr.tolist(), g.pred_idx.tolist(), g.succ_edge.tolist()
            out_ptr = g.succ_ptr.tolist()
            kids = set(g.succ_idx[g.succ_ptr[anchor]:g.succ_ptr[anchor + 1]].tolist())
        else:
            order = order[::-1]
            ptr, nbr, feid = g.succ_ptr.tolist(), g.succ_idx.tolist(), g.pred_edge.tolist()
            out_ptr = g.pred_ptr.tolist()
            kids = set(g.pred_idx[g.pred_ptr[anchor]:g.pred_ptr[anchor + 1]].tolist())
        edges = feid[out_ptr[anchor]:out_ptr[anchor + 1]]
        cheapest = min((cross[k] for k in edges), default=INF)
        self.start = int(head[anchor]) + int(dmin[anchor])  # when the anchor's device is free to feed
        self.reach = min(self.start + int(cheapest), INF)
        # Some edge on the way from the anchor's device to a node off it crosses: the fed set is
        # done that much before the node starts (the cheapest crossing of an edge not at the anchor).
        at_anchor = set(edges)
        self.lag = int(min((c for k, c in enumerate(cross) if k not in at_anchor), default=0)) if problem.n_devices > 1 else 0
        kid_list = sorted(kids)
        bit = {u: 1 << i for i, u in enumerate(kid_list)}
        mask = [0] * g.n_nodes  # the anchor's successors among each node's ancestors (bitset)
        share = [Fraction(0)] * len(kid_list)
        for v in order:
            if v == anchor:
                continue
            m = 0
            for u in nbr[ptr[v]:ptr[v + 1]]:
                m |= mask[u] | bit.get(u, 0)
            mask[v] = m
            if v in kids or m == 0:
                continue  # off the anchor's device a successor waits for its transfer: never early
            members = [i for i in range(len(kid_list)) if (m >> i) & 1]
            part = Fraction(int(dmin[v]), len(members))
            for i in members:
                share[i] += part
        # Fractional knapsack of items (duration, share), best share per tick first.
        items = [(int(dmin[u]), share[i]) for i, u in enumerate(kid_list) if share[i] > 0]
        free = sum((s for p, s in items if p == 0), Fraction(0))
        items = sorted(((p, s) for p, s in items if p > 0), key=lambda it: it[1] / it[0], reverse=True)
        self._free = free
        self._items = items
        self._cum_p = np.cumsum([p for p, _ in items]).tolist() if items else []
        self._memo: dict[int, int] = {}
        cum_s, acc = [], Fraction(0)
        for _, s in items:
            acc += s
            cum_s.append(acc)
        self._cum_s = cum_s
        self.total = int(free + (cum_s[-1] if cum_s else 0))

    def __call__(self, t: int) -> int:
        """The budget within ``t`` of the anchor's side (``t`` <= `reach`), in ticks (floor of the knapsack)."""
        cap = int(t) - self.start - self.lag
        if cap < 0:
            return 0
        if cap not in self._memo:
            i = bisect_right(self._cum_p, cap)  # items taken whole
            value = self._free + (self._cum_s[i - 1] if i > 0 else 0)
            if i < len(self._items):
                used = self._cum_p[i - 1] if i > 0 else 0
                p, s = self._items[i]
                value += s * Fraction(cap - used, p)
            self._memo[cap] = int(value)  # floor: the real enabled work is an integer at most the knapsack
        return self._memo[cap]


def device_cases(problem: PlacementProblem, head, tail, entry: int | None, exit_: int | None):
    """The device classes ``[(heads, tails, count, off_entry, off_exit), ...]`` of each case (int64 arrays)."""
    D = problem.n_devices
    H = np.asarray(head, dtype=np.int64)
    Q = np.asarray(tail, dtype=np.int64)
    HX = np.asarray(anchored_heads(problem, entry, list(head)), dtype=np.int64) if entry is not None else H
    QY = np.asarray(anchored_tails(problem, exit_, list(tail)), dtype=np.int64) if exit_ is not None else Q
    if D == 1 or (entry is None and exit_ is None):
        return [[(H, Q, D, False, False)]]
    if exit_ is None:
        return [[(H, Q, 1, False, False), (HX, Q, D - 1, True, False)]]
    if entry is None:
        return [[(H, Q, 1, False, False), (H, QY, D - 1, False, True)]]
    same = [(H, Q, 1, False, False), (HX, QY, D - 1, True, True)]
    if entry == exit_:
        return [same]
    apart = [(H, QY, 1, False, True), (HX, Q, 1, True, False), (HX, QY, D - 2, True, True)]
    return [same, apart]


def _fits(P: np.ndarray, classes, T: int, max_points: int, feed_in=None, feed_out=None) -> bool:
    """Whether one case's network carries all the work by T (module docstring)."""
    n = len(P)
    classes = [c for c in classes if c[2] > 0]
    if not classes:
        return False
    lo = np.stack([np.minimum(H, INF) for H, *_ in classes])  # [C, n]
    hi = np.stack([T - np.minimum(Q, INF) for _, Q, *_ in classes])
    allowed = np.stack([(H < INF) & (Q < INF) for H, Q, *_ in classes]) & (lo + P[None, :] <= hi)
    if not allowed.any(axis=0).all():
        return False  # some node fits on no device class
    lo = np.where(allowed, lo, 0)
    hi = np.where(allowed, hi, 0)
    points = np.unique(np.concatenate([lo[allowed], hi[allowed]]))
    if len(points) > max_points:
        points = np.unique(points[np.linspace(0, len(points) - 1, max_points).round().astype(np.int64)])
    reach_in = feed_in.reach if feed_in is not None and any(c[3] for c in classes) else None
    reach_out = T - feed_out.reach if feed_out is not None and any(c[4] for c in classes) else None
    extra = [x for x in (reach_in, reach_out) if x is not None and points[0] < x < points[-1]]
    if extra:
        points = np.unique(np.concatenate([points, np.asarray(extra, dtype=np.int64)]))
    # Round window edges outwards onto the points (releases down, deadlines up): only relaxes.
    klo = np.clip(np.searchsorted(points, lo, side="right") - 1, 0, len(points) - 1)
    khi = np.clip(np.searchsorted(points, hi, side="left"), 0, len(points) - 1)
    L = np.diff(points).astype(np.int64)  # interval k = [points[k], points[k + 1])
    K, C = len(L), len(classes)
    if K == 0:
        return False
    counts = np.asarray([c[2] for c in classes], dtype=np.int64)
    # Ids: 0 source, 1 sink, nodes, (class, interval), feeding chains, then (node, interval).
    node0 = 2
    ck0 = node0 + n
    chain0 = ck0 + C * K
    tails, heads, caps = [np.zeros(n, np.int64)], [node0 + np.arange(n)], [P.astype(np.int64)]
    # (c, k) -> sink, or into a feeding chain: prefix chain node i gathers intervals ending at points[i + 1] <= reach_in
    # and passes on at most B_x(points[i + 1]); suffix chain node j gathers intervals starting at points[j] >= reach_out.
    target = np.full((C, K), 1, dtype=np.int64)
    nxt = chain0
    if reach_in is not None:
        ends = points[1:]
        pre = np.flatnonzero(ends <= reach_in)
        if len(pre):
            ids = nxt + np.arange(len(pre))
            nxt += len(pre)
            for ci, c in enumerate(classes):
                if c[3]:
                    target[ci, pre] = ids
            budget = np.asarray([feed_in(int(ends[i])) for i in pre], dtype=np.int64)
            tails.append(ids)
            heads.append(np.append(ids[1:], 1))
            caps.append(budget)
    if reach_out is not None:
        starts = points[:-1]
        suf = np.flatnonzero(starts >= reach_out)
        if len(suf):
            ids = nxt + np.arange(len(suf))
            nxt += len(suf)
            for ci, c in enumerate(classes):
                if c[4]:
                    free = target[ci, suf] == 1  # an interval already in the prefix chain keeps that one
                    target[ci, suf[free]] = ids[free]
            budget = np.asarray([feed_out(int(T - starts[j])) for j in suf], dtype=np.int64)
            tails.append(ids)
            heads.append(np.concatenate([[1], ids[:-1]]))
            caps.append(budget)
    for ci in range(C):
        tails.append(ck0 + ci * K + np.arange(K))
        heads.append(target[ci])
        caps.append(counts[ci] * L)
    ks = np.arange(K)
    member = allowed[:, :, None] & (ks[None, None, :] >= klo[:, :, None]) & (ks[None, None, :] < khi[:, :, None])  # [C, n, K]
    span = member.any(axis=0)
    vs, kk = np.nonzero(span)
    vk_id = np.full((n, K), -1, dtype=np.int64)
    vk_id[vs, kk] = nxt + np.arange(len(vs))
    tails.append(node0 + vs)
    heads.append(vk_id[vs, kk])
    caps.append(L[kk])
    for ci in range(C):
        v2, k2 = np.nonzero(member[ci])
        tails.append(vk_id[v2, k2])
        heads.append(ck0 + ci * K + k2)
        caps.append(L[k2])
    mf = max_flow.SimpleMaxFlow()
    mf.add_arcs_with_capacity(np.concatenate(tails).astype(np.int32), np.concatenate(heads).astype(np.int32),
                              np.concatenate(caps).astype(np.int64))
    status = mf.solve(0, 1)
    if status != mf.OPTIMAL:
        raise RuntimeError(f"max flow failed with status {status}")
    return int(mf.optimal_flow()) >= int(P.sum())


def flow_bound(
    problem: PlacementProblem,
    head: list[int] | None = None,
    tail: list[int] | None = None,
    *,
    lower: int = 0,
    feeding: bool = True,
    max_points: int = FLOW_MAX_POINTS,
    precision: float = FLOW_PRECISION,
    should_stop=None,
) -> int:
    """Least makespan the preemptive flow relaxation allows, in ticks (module docstring).

    Parameters
    ----------
    problem : PlacementProblem
        Any devices and links (fastest durations, cheapest transfers, as every family here).
    head, tail : list of int, optional
        Valid heads and tails (default `transfer_heads` / `transfer_tails`); the single source
        and sink, when there are such, anchor the device classes and the feeding budgets.
    lower : int
        A bound already known: the search starts there, and nothing below it is returned.
    feeding : bool
        Cap the work off the entry's (exit's) device near the ends (`feeding_budget`).
    max_points : int
        Most window edges per check (more are rounded outwards: weaker, never invalid).
    precision : float
        The search stops once the least makespan is bracketed this tightly (relative): the
        low end is returned, so a coarser search is faster and a little weaker, never invalid.
    should_stop : callable, optional
        Asked between checks; once true the bound refuted so far is returned (still valid).

    Returns
    -------
    int
        A lower bound on the makespan, at least ``lower``.

    Examples
    --------
    A fork of two 10-tick branches with transfers of 10 on two devices: the second device can
    only start at 11, and a branch there must send its output back (optimum 22).

    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["s", "a", "b", "t"], ["s", "s", "a", "b"], ["a", "b", "t", "t"],
    ...               out_bytes=[1000, 1000, 1000, 0], compute_time={"cpu": [1.0, 10.0, 10.0, 1.0]})
    >>> p = PlacementProblem.identical(g, 2, bandwidth=10.0, time_unit=1.0)
    >>> flow_bound(p)
    22
    """
    n = problem.n_nodes
    if n == 0:
        return max(0, int(lower))
    stop = should_stop or (lambda: False)
    head = transfer_heads(problem) if head is None else [int(h) for h in head]
    tail = transfer_tails(problem) if tail is None else [int(q) for q in tail]
    dmin, _ = _costs(problem)
    P = np.asarray(dmin, dtype=np.int64)
    entries, exits = _anchors(problem)
    entry, exit_ = entries[-1], exits[-1]
    cases = device_cases(problem, head, tail, entry, exit_)
    feed_in = feed_out = None
    if feeding and problem.n_devices > 1:
        feed_in = feeding_budget(problem, entry, head, forward=True) if entry is not None else None
        feed_out = feeding_budget(problem, exit_, tail, forward=False) if exit_ is not None else None
    H0 = np.asarray(head, dtype=np.int64)
    Q0 = np.asarray(tail, dtype=np.int64)
    lo = max(int(lower), int((H0 + P + Q0).max()))
    hi = int(H0.max() + P.sum() + Q0.max())  # a bisection bracket only: what is returned never relies on it
    # Least T some case allows: refuting T needs every case refuted. Galloping up from the known
    # bound first (the answer is usually within a few percent of it), then bisecting.
    def fits(T: int) -> bool:
        return any(_fits(P, classes, T, max_points, feed_in, feed_out) for classes in cases)

    step = max(1, int(lo * precision * 16))
    while lo < hi and not stop():
        probe = min(hi, lo + step)
        if fits(probe):
            hi = probe
            break
        lo, step = probe + 1, step * 2
    while hi - lo > max(0, int(lo * precision)) and not stop():
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
