"""Global lower bounds on the makespan of a placement problem that charge the transfers no schedule avoids.

`PlacementProblem.lower_bound_ticks` is max(critical path with free transfers, total work / D). Both
ignore that running two operations at once needs two devices, and that a tensor crossing devices
costs a transfer: with transfers several times an operation's time, the optimum of a fork-join
graph on many devices sits far above either. The families here are all combinatorial (no solver),
exact in Python / int64 integers, and valid for every problem: heterogeneous speeds, per-pair
links and memory limits are covered by using each node's fastest duration and each edge's
cheapest transfer between two distinct devices (relaxing a problem only lowers its optimum).

Families
--------
`transfer_heads` / `transfer_tails`
    Release and tail of every node where a node shares a device with some of its predecessors
    (successors), which then run one after the other, and receives the others' outputs over a link.
`path_bound`
    max over nodes of head + duration + tail.
`energy_bound`
    For every set of nodes with release >= a and tail >= b, their work fits on the devices inside
    the windows the releases and tails leave; with *anchors* (a node x and a node y), a device
    other than x's only receives a descendant of x after a transfer (and symmetrically for y),
    which shrinks every window but x's (y's) own. This is what charges "using many devices".
    With 2 to D - 1 sources (sinks), the set of them is an anchor too (``source_energy``): the
    devices that hold no source start with a transfer (transformer layers with 2-3 input tiles on
    4-8 devices: bound +6.6 to +11.1 %).
`incsched.bounds.placement_startup.startup_bound`
    Until a transfer can reach it, a device only runs nodes whose inputs it holds itself (and,
    mirrored, at the end only nodes that feed its own outputs): the work the devices can do in
    the first and last ticks is bounded by how the graph's inputs can be split among them
    (chained matmuls on 8 devices: +3 %; one 3x3-tiled product: +15 %, 6 % from its optimum).
`incsched.bounds.placement_flow.flow_bound`
    Every node keeps its own window per device class (no minima over sets), the devices other
    than the entry's can only do what the entry's device has fed them before the entry's output
    could reach them (and the mirror at the exit), and the work must fit as a preemptive
    schedule: a max flow per tried makespan.
`incsched.bounds.placement_kinds` (``kind_*``)
    On devices of several kinds (different duration columns), each node's work charged at its
    own kind's duration: a fractional assignment to kinds, heads and tails per kind, and the
    energy bound with per-kind windows (those families do not use the fastest duration).
`segment_sum_bound`
    Cut nodes (norms, sums, residual adds) split every schedule into consecutive segments; the
    makespan is at least the sum of the segments' own bounds.
`placement_lower_bound`
    The maximum of all of the above and `PlacementProblem.lower_bound_ticks`: what to call.
"""

from __future__ import annotations

import numpy as np

from ..problems.decompose import segments, subproblem
from ..problems.placement import PlacementProblem
from .placement_flow import FLOW_MAX_NODES, flow_bound
from .placement_startup import startup_bound
from .placement_kinds import (
    device_kinds,
    kind_energy_bound,
    kind_heads,
    kind_interval_bound,
    kind_load_bound,
    kind_path_bound,
    kind_tails,
)
from .placement_heads import (  # noqa: F401  (re-exported: the families' shared ingredients)
    INF,
    _anchor_sets,
    _anchors,
    _colocation_rule,
    _costs,
    anchored_heads,
    anchored_tails,
    path_bound,
    release_thresholds,
    transfer_heads,
    transfer_tails,
)

__all__ = [
    "INF",
    "placement_lower_bound",
    "placement_bound_details",
    "transfer_heads",
    "transfer_tails",
    "path_bound",
    "anchored_heads",
    "anchored_tails",
    "energy_bound",
    "energetic_heads",
    "segment_sum_bound",
    "startup_bound",
]

#: `placement_bound_details` raises heads by energy over ancestors (`energetic_heads`) on problems
#: (and segments) of at most this many nodes by default: it costs about n^2.
ENERGETIC_MAX_NODES = 200

#: `placement_bound_details` raises per-kind heads by the ancestors' weighted load (`kind_heads`'
#: ``energetic``) on problems of at most this many nodes: cheap (0.1-0.3 s at 200-300 nodes), n^2.
KIND_ENERGETIC_MAX_NODES = 1000

#: Past `KIND_ENERGETIC_MAX_NODES` nodes, `kind_energy_bound` tries at most this many release
#: thresholds (any subset is valid) and `kind_interval_bound` stops at 1 %: on a 4,081-op
#: transformer on 2 GPUs + 2 CPUs the whole details took 7.8 s, then 6.5 s (1.8 s without the
#: per-kind families), the bound unchanged (its segments carry it).
KIND_MAX_THRESHOLDS = 32

#: `incsched.inc_ilp.exact_bounds.placement_bound_cpsat` raises the heads of its CP-SAT windows the same way on problems of at
#: most this many nodes (about 2 s at 500; a 10,000-op graph would take a quarter of an hour).
ENERGETIC_WINDOW_MAX_NODES = 500


# ---------------------------------------------------------------------- energetic reasoning


def energy_bound(
    problem: PlacementProblem,
    head: list[int] | None = None,
    tail: list[int] | None = None,
    *,
    entry: int | None = None,
    exit_: int | None = None,
    max_thresholds: int | None = None,
    should_stop=None,
) -> int:
    """Parallel-machine energy bound over sets of late-released, early-due nodes, with optional anchors.

    Parameters
    ----------
    problem : PlacementProblem
        Any devices and links.
    head, tail : list of int, optional
        `transfer_heads` / `transfer_tails` (computed when omitted).
    entry : int or tuple of int, optional
        Anchor node x: nodes off x's device use `anchored_heads` (at least one transfer after x).
        A tuple (e.g. every source): nodes on a device holding none of them do.
    exit_ : int or tuple of int, optional
        Anchor node y (or a tuple): nodes off y's device use `anchored_tails`.
    max_thresholds : int, optional
        Most release thresholds tried (evenly spread over the distinct values); any subset of
        thresholds gives a valid bound, fewer are faster.
    should_stop : callable, optional
        Asked before each threshold (the user's clock); once true, the thresholds tried so far give
        the bound (any subset does: 10,000 ops take about 2 s of them).

    Returns
    -------
    int
        A lower bound on the makespan in ticks.

    Notes
    -----
    Why it holds: fix a schedule of makespan T and let x sit on device δ (and y on δ'). Every
    node v on device e runs inside [h_e(v), T - q_e(v)], where h_e is the plain head on δ and the
    anchored head elsewhere (q_e likewise with y). For a set J = {v : h_off(v) >= a, q_off(v) >= b}
    the J-nodes device e holds run one at a time inside [min_J h_e, T - min_J q_e], so their work
    is at most max(0, T - min_J h_e - min_J q_e). Summing over devices, the work of J (fastest
    durations) is at most sum_e max(0, T - alpha_e) with alpha_e = min_J h_e + min_J q_e. That sum
    is the largest over k of its k smallest-alpha terms without the max(0, .), so the least T
    allowed is min over k of ceil((P(J) + alpha_(1) + ... + alpha_(k)) / k). With y anchored the
    two cases (y on δ or not) are both bounded and the smaller taken. Anchor sets (s entries, t
    exits) generalise this: at most s devices hold an entry, the rest use anchored heads, and
    every split of the devices into holding both, an entry, an exit or neither is a case
    (`_anchor_cases`). Without anchors every device uses the plain heads and tails (the classical
    P|r_j,q_j|Cmax energy bound).
    """
    n, D = problem.n_nodes, problem.n_devices
    if n == 0:
        return 0
    head = transfer_heads(problem) if head is None else head
    tail = transfer_tails(problem) if tail is None else tail
    dmin, _ = _costs(problem)
    hx = anchored_heads(problem, entry, head) if entry is not None else head
    qy = anchored_tails(problem, exit_, tail) if exit_ is not None else tail
    H = np.asarray(head, dtype=np.int64)
    Q = np.asarray(tail, dtype=np.int64)
    HX = np.asarray(hx, dtype=np.int64)
    QY = np.asarray(qy, dtype=np.int64)
    P = np.asarray(dmin, dtype=np.int64)

    # Device classes (heads, tails, count) per case; a case bound is the least T it allows, and
    # the set's bound the least over cases (the schedule is in one of them).
    cases = [[(H, Q, a), (H, QY, b), (HX, Q, c), (HX, QY, d)]
             for a, b, c, d in _anchor_cases(D, _count(entry), _count(exit_), same=entry is not None and entry == exit_)]

    key_a = HX  # thresholds on the anchored (largest) heads and tails: they select the sets
    key_b = QY
    thresholds = release_thresholds(key_a, max_thresholds)
    best = 0
    for a in thresholds.tolist():
        if should_stop is not None and should_stop():
            break
        members = np.flatnonzero(key_a >= a)
        order = members[np.argsort(-key_b[members], kind="stable")]
        work = np.cumsum(P[order])  # J_i = the i+1 members with the largest anchored tails
        case_best = None
        for classes in cases:
            alphas, counts = [], []
            for h, q, c in classes:
                if c <= 0:
                    continue
                alphas.append(np.minimum.accumulate(h[order]) + np.minimum.accumulate(q[order]))
                counts.append(c)
            bound = _least_makespan(work, alphas, counts)
            case_best = bound if case_best is None else np.minimum(case_best, bound)
        best = max(best, int(case_best.max()))
    return best


def _count(anchor: int | tuple[int, ...] | None) -> int:
    return 0 if anchor is None else 1 if isinstance(anchor, (int, np.integer)) else len(anchor)


def _anchor_cases(D: int, n_entry: int, n_exit: int, same: bool = False) -> list[tuple[int, int, int, int]]:
    """Every way the devices can hold the anchors, up to dominance: (a, b, c, d) devices holding an
    entry and an exit anchor, an entry only, an exit only, neither.

    A device of a better class (plain heads or tails where the anchors' would apply) only gives a
    schedule more room, so for each (a, b) the most exit-holding devices the anchors allow stand
    for every smaller count. ``same``: one node is both anchors, so its device holds both.
    """
    if n_entry == 0 and n_exit == 0:
        return [(0, 0, 0, D)] if D else []
    s, t = min(n_entry, D), min(n_exit, D)
    out = []
    for a in range(1 if same else 0, min(s, t) + 1):
        for b in range(0, min(s - a, D - a) + 1):
            c = min(t - a, D - a - b)
            if (n_entry and a + b == 0) or (n_exit and a + c == 0):
                continue  # every anchor sits on some device
            out.append((a, b, c, D - a - b - c))
    return out


def _least_makespan(work: np.ndarray, alphas: list[np.ndarray], counts: list[int]) -> np.ndarray:
    """Per set: least integer T with work <= sum over devices of max(0, T - alpha) (classes of devices)."""
    L = len(work)
    cols = []
    for a, c in zip(alphas, counts):
        cols.extend([np.minimum(a, INF)] * c)
    A = np.sort(np.stack(cols, axis=1), axis=1)  # [L, D] ascending
    S = np.cumsum(A, axis=1)
    k = np.arange(1, A.shape[1] + 1, dtype=np.int64)
    T = -((-(work[:, None] + S)) // k[None, :])  # ceil((P + alpha_(1..k)) / k), exact integers
    out = T.min(axis=1)
    return out if L else np.zeros(0, dtype=np.int64)


# ---------------------------------------------------------------------- decomposition at cut nodes


def segment_sum_bound(problem: PlacementProblem, inner=None, should_stop=None) -> int:
    """Sum of per-segment bounds between cut nodes, minus one tick per segment entry.

    Parameters
    ----------
    problem : PlacementProblem
    inner : callable, optional
        ``inner(subproblem) -> int`` bounding each segment's own problem (default
        `_combinatorial_bound`, every family but this one).
    should_stop : callable, optional
        Asked before each segment; once true, the segments left add nothing (still a bound:
        every span is at least zero).

    Returns
    -------
    int
        A lower bound in ticks; `problem.lower_bound_ticks()`-free (0 when there is no cut node).

    Notes
    -----
    Why it holds: a cut node precedes or follows every other node, so in any schedule each
    segment's nodes run between its entry cut node's end and its exit cut node's end. Restricting
    a schedule to a segment and shifting it so its entry (made one tick long by `subproblem`)
    ends at tick 1 gives a schedule of the segment's problem (edges leaving the segment only
    constrain more), so that span is at least the segment's optimum minus one tick; the spans of
    consecutive segments add up to at most the makespan.
    """
    parts = segments(problem)
    if len(parts) <= 1:
        return 0
    inner = _combinatorial_bound if inner is None else inner
    total = 0
    memo: dict[bytes, int] = {}  # repeated blocks give identical segments: bounded once
    for i, nodes in enumerate(parts):
        if should_stop is not None and should_stop():
            break
        entry = i > 0
        sub = subproblem(problem, nodes, instant=(nodes[0],) if entry else ())
        key = sub.signature()
        if key not in memo:
            memo[key] = int(inner(sub))
        total += memo[key] - (1 if entry else 0)
    return total


# ---------------------------------------------------------------------- what to call


def placement_bound_details(
    problem: PlacementProblem,
    *,
    segments: bool = True,
    energetic: bool | None = None,
    head: list[int] | None = None,
    tail: list[int] | None = None,
    inner=None,
    flow: bool | None = None,
    should_stop=None,
) -> dict[str, int]:
    """Every family's value (ticks), keyed by name; ``"bound"`` is their maximum (`placement_lower_bound`).

    Parameters
    ----------
    problem : PlacementProblem
    segments : bool
        Include `segment_sum_bound` (cut-node decomposition).
    energetic : bool, optional
        Raise heads and tails with `energetic_heads` (about n^2 work: 0.4 s at 200 nodes, 1.5 s
        at 400). Default: only on problems of at most `ENERGETIC_MAX_NODES` nodes (segments
        between cut nodes are usually that small, so they still get it).
    head, tail : list of int, optional
        Valid heads / tails from elsewhere (e.g. ``incsched.solvers.cpsat.placement_bounds.window_bound``'s
        ``info["head"]``); combined element-wise with `transfer_heads` / `transfer_tails`.
    inner : callable, optional
        ``inner(subproblem) -> int`` for the segments (default: this function without segments).
    flow : bool, optional
        Include `incsched.bounds.placement_flow.flow_bound` (per-node windows and the entry's
        feeding, by max flow: about 0.3 s at 60 nodes, under 1 s at 400). Default: on problems (and segments) of
        at most `incsched.bounds.placement_flow.FLOW_MAX_NODES` nodes.
    should_stop : callable, optional
        Asked between families (the user's clock): once true, the families not yet computed are
        left out, and ``"bound"`` is the maximum of those that were (on 10,000 ops the whole set
        takes about 9 s of pure Python).
    """
    stop = should_stop or (lambda: False)
    out = {"trivial": problem.lower_bound_ticks()}
    if problem.n_nodes == 0:
        out["bound"] = 0
        return out
    h0, t0 = transfer_heads(problem), transfer_tails(problem)
    out["path"] = path_bound(problem, h0, t0)
    for_segments, flow_segments = energetic, flow
    if energetic is None:
        energetic = problem.n_nodes <= ENERGETIC_MAX_NODES
    head = h0 if head is None else [max(int(a), int(b)) for a, b in zip(h0, head)]
    tail = t0 if tail is None else [max(int(a), int(b)) for a, b in zip(t0, tail)]
    if energetic and not stop():
        head = energetic_heads(problem, head, should_stop=should_stop)
        tail = energetic_heads(problem, tail, forward=False, should_stop=should_stop)
    out["energetic_path"] = path_bound(problem, head, tail)  # linear: never worth skipping
    if not stop():
        out["energy"] = energy_bound(problem, head, tail, should_stop=should_stop)
    entries, exits = _anchors(problem)
    # anchored_energy: the single source and sink; source_energy: the set of 2 to D - 1 sources
    # (sinks), whose devices are the only ones that need not start (end) with a transfer.
    for family, (ins, outs) in (("anchored_energy", (entries, exits)), ("source_energy", _anchor_sets(problem))):
        out[family] = 0
        for x in ins:
            for y in outs:
                if (x is not None or y is not None) and not stop():
                    out[family] = max(out[family], energy_bound(problem, head, tail, entry=x, exit_=y, should_stop=should_stop))
    if problem.n_devices > 1 and not stop():
        out["startup"] = startup_bound(problem, head, tail, should_stop=should_stop)
    if len(device_kinds(problem)[1]) > 1 and not stop():
        _kind_families(problem, head, tail, entries, exits, out, stop, problem.n_nodes <= KIND_ENERGETIC_MAX_NODES)
    if flow is None:
        flow = problem.n_nodes <= FLOW_MAX_NODES
    if flow and not stop():
        out["flow"] = flow_bound(problem, head, tail, lower=max(out.values()), should_stop=stop)
    if segments and problem.n_devices > 1 and not stop():
        inner = inner or (lambda sub: placement_bound_details(sub, segments=False, energetic=for_segments, flow=flow_segments,
                                                             should_stop=should_stop)["bound"])
        out["segment_sum"] = segment_sum_bound(problem, inner, should_stop)
    out["bound"] = max(out.values())
    return out


def _kind_families(problem, head, tail, entries, exits, out: dict[str, int], stop, energetic: bool) -> None:
    """The per-kind families (`incsched.bounds.placement_kinds`) into ``out``; one kind gives nothing new."""
    out["kind_load"] = kind_load_bound(problem)
    if stop():
        return
    kh = kind_heads(problem, head, energetic=energetic, should_stop=stop)
    if stop():
        return
    kq = kind_tails(problem, tail, energetic=energetic, should_stop=stop)
    out["kind_path"] = kind_path_bound(problem, kh, kq)
    out["kind_energy"] = 0
    thresholds = None if energetic else KIND_MAX_THRESHOLDS  # n^2 work per anchor pair otherwise
    for x in entries:
        for y in exits:
            if not stop():
                out["kind_energy"] = max(out["kind_energy"], kind_energy_bound(problem, head, tail, kh, kq, entry=x, exit_=y,
                                                                               max_thresholds=thresholds, should_stop=stop))
    if not stop():
        out["kind_interval"] = kind_interval_bound(problem, kh, kq, lower=max(out.values()), should_stop=stop,
                                                   precision=1e-3 if energetic else 1e-2)


def _combinatorial_bound(problem: PlacementProblem, energetic: bool | None = None, flow: bool | None = None) -> int:
    return placement_bound_details(problem, segments=False, energetic=energetic, flow=flow)["bound"]


def placement_lower_bound(problem: PlacementProblem, should_stop=None) -> int:
    """The strongest combinatorial lower bound on the makespan, in ticks (never below `lower_bound_ticks`).

    Valid for every placement problem (any speeds, device kinds, per-pair links, memory limits and
    shared weights: they enter through each node's fastest duration and each edge's cheapest
    transfer between two distinct devices, which only relaxes the problem). Pure Python and numpy, no solver.

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["s", "a", "b", "t"], ["s", "s", "a", "b"], ["a", "b", "t", "t"],
    ...               out_bytes=[1000, 1000, 1000, 0], compute_time={"cpu": [1.0, 10.0, 10.0, 1.0]})
    >>> p = PlacementProblem.identical(g, 2, bandwidth=10.0, time_unit=1.0)
    >>> p.lower_bound_ticks(), placement_lower_bound(p)
    (12, 22)

    ``should_stop`` (optional, asked between families) ends it early with the families computed.
    """
    return int(placement_bound_details(problem, should_stop=should_stop)["bound"])


# ---------------------------------------------------------------------- heads sharpened by energy over ancestors


def energetic_heads(
    problem: PlacementProblem,
    head: list[int] | None = None,
    *,
    max_thresholds: int = 24,
    forward: bool = True,
    should_stop=None,
) -> list[int]:
    """Heads (``forward``) or tails raised by an energy bound over each node's ancestors (descendants).

    Parameters
    ----------
    problem : PlacementProblem
        Any devices and links.
    head : list of int, optional
        Heads to start from (`transfer_heads`, or tails from `transfer_tails` when not ``forward``).
    max_thresholds : int
        Most release thresholds per node (any subset is valid; fewer are faster).
    forward : bool
        False: the mirror, raising tails over descendants.
    should_stop : callable, optional
        Asked before each node (the caller's clock: one pass took 2-3 s past a loaded run's
        clock on 196 ops); once true, the nodes left keep the heads they had, which stay valid.

    Returns
    -------
    list of int
        ``head[v]``: still a valid earliest start of v, at least the input's.

    Notes
    -----
    Why it holds: every ancestor u of v runs before v starts, and at least ``t_v(u)`` before it:
    the `_colocation_rule` distance from u's end to v's start inside the ancestors' graph (or
    ``t_v^off(u)`` when u sits off v's device, where the last hop into v is a transfer). So the
    ancestors form a parallel-machine problem with releases ``head`` and tails ``t_v`` whose
    makespan is at most v's start, v's device using the plain tails and the others the off-device
    ones: `energy_bound`'s argument with v as the exit anchor, applied to the ancestors. Nodes are
    visited in topological order, so raised heads of ancestors are used at once.
    """
    g = problem.graph
    n, D = g.n_nodes, problem.n_devices
    dmin, cross = _costs(problem)
    if forward:
        head = transfer_heads(problem) if head is None else list(head)
        order = g.topological_order().tolist()
        bptr, bnbr = g.pred_ptr.tolist(), g.pred_idx.tolist()  # towards the ancestors
        fptr, fnbr, feid = g.succ_ptr.tolist(), g.succ_idx.tolist(), g.succ_edge.tolist()
    else:
        head = transfer_tails(problem) if head is None else list(head)
        order = g.topological_order().tolist()[::-1]
        bptr, bnbr = g.succ_ptr.tolist(), g.succ_idx.tolist()
        fptr, fnbr, feid = g.pred_ptr.tolist(), g.pred_idx.tolist(), g.pred_edge.tolist()
    pos = [0] * n
    for i, v in enumerate(order):
        pos[v] = i
    anc: list[int] = [0] * n  # bitsets of ancestors (descendants when mirrored)
    for v in order:
        a = 0
        for k in range(bptr[v], bptr[v + 1]):
            u = bnbr[k]
            a |= anc[u] | (1 << u)
        anc[v] = a
    P_all = np.asarray(dmin, dtype=np.int64)
    for v in order:
        if anc[v] == 0 or bptr[v + 1] - bptr[v] == 0:
            continue
        if should_stop is not None and should_stop():
            break
        members = [u for u in range(n) if (anc[v] >> u) & 1]
        if len(members) < 2:
            continue
        inside = anc[v] | (1 << v)
        # Distances to v inside the ancestors' graph, in reverse topological order from v.
        tv: dict[int, int] = {v: 0}
        toff: dict[int, int] = {v: INF}
        for u in sorted(members, key=lambda w: -pos[w]):
            items, items_off = [], []
            per: dict[int, list[int]] = {}
            for k in range(fptr[u], fptr[u + 1]):
                w = fnbr[k]
                if not (inside >> w) & 1:
                    continue
                arrive = tv[w] + dmin[w] + cross[feid[k]]
                if w in per:
                    per[w][0] = max(per[w][0], arrive)
                else:
                    per[w] = [arrive, w]
            for w, (arrive, _) in per.items():
                items.append((arrive, tv[w], dmin[w]))
                items_off.append((arrive, toff[w], dmin[w]))
            # A successor w == v has zero duration-to-v here: v's own duration is not part of its head.
            items = [(ar - (dmin[w] if w == v else 0), (lo if w != v else 0), (dm if w != v else 0))
                     for (ar, lo, dm), w in zip(items, per)]
            items_off = [(ar - (dmin[w] if w == v else 0), (lo if w != v else INF), (dm if w != v else 0))
                         for (ar, lo, dm), w in zip(items_off, per)]
            tv[u] = _colocation_rule(items)
            toff[u] = max(tv[u], _colocation_rule(items_off))
        idx = np.asarray(members, dtype=np.int64)
        H = np.asarray([head[u] for u in members], dtype=np.int64)
        Q = np.asarray([tv[u] for u in members], dtype=np.int64)
        QO = np.asarray([toff[u] for u in members], dtype=np.int64)
        P = P_all[idx]
        classes = [(H, Q, 1), (H, QO, D - 1)] if D > 1 else [(H, Q, 1)]
        thresholds = np.unique(H)
        if len(thresholds) > max_thresholds:
            thresholds = np.unique(thresholds[np.linspace(0, len(thresholds) - 1, max_thresholds).round().astype(int)])
        best = head[v]
        for a in thresholds.tolist():
            sel = np.flatnonzero(H >= a)
            o = sel[np.argsort(-QO[sel], kind="stable")]
            work = np.cumsum(P[o])
            alphas = [np.minimum.accumulate(h[o]) + np.minimum.accumulate(q[o]) for h, q, c in classes if c > 0]
            counts = [c for _, _, c in classes if c > 0]
            best = max(best, int(_least_makespan(work, alphas, counts).max()))
        head[v] = best
    return head
