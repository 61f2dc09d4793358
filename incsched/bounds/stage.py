"""Stage lower bounds: each objective term's floor over any assignment (`stage_term_bounds`,
`stage_lower_bound`), and what precedence under a memory cap forces before any solver runs.

Stages are ordered and every edge points forward, so stages 0..k always hold a *down-set* of the
graph: with each stage under a memory cap M, a node's ancestors (itself included) must fit on the
stages up to its own, its descendants on the stages from its own. That gives every node an
earliest and a latest stage (`stage_ranges`), the least cap any assignment can meet
(`peak_lower_bound`: prefix and suffix sums along every topological cut, where ceil(P/K) sees
only the total), and, per boundary, the fewest data edges that must cross it: the minimum cut
between the nodes forced before it and those forced after it (`crossing_bounds`). `proof_bound`
turns these into a global lower bound on the objective, a memory cap, and the *precedence ranges*
(per-node stage ranges) that every answer at least as good as an incumbent lies in, which the exact model then
searches instead of the whole space.

Shared weights (a stage holds each one its nodes read, once: `incsched.problems.stage`'s notes)
enter every rule as lower bounds: a node alone needs its own and its shared weights
(`CompGraph.node_weight_bytes`), all stages together hold every weight at least once
(`CompGraph.total_param_bytes`), and the stages holding a node's ancestors (descendants) hold every
shared weight one of them reads. Sums over further forced nodes add only their own bytes, which
can only under-count, so every bound stays valid.

Exact: Python ints and `fractions.Fraction` throughout; numpy only for sums of non-negative int64
parameters (each at most the graph's total, <= 2**62 by `CompGraph`'s column limit). Every rule
is checked against brute force on small random graphs in ``tests/test_stage_bounds.py``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..errors import InfeasibleProblem
from ..graph.dag import ancestor_matrix
from ..problems.stage import StageProblem, exact_number

__all__ = ["stage_term_bounds", "stage_lower_bound", "Closure", "closure", "stage_ranges", "peak_lower_bound", "crossing_bounds", "ProofBound", "proof_bound",
           "MAX_CLOSURE_NODES"]

#: Largest graph whose ancestor matrix is built (n x n, as Booleans and twice float64: 1,500
#: nodes is 38 MB); the ICML'24 graphs of 5,000-10,000 nodes go without these bounds. (Their
#: 1,000-node ones get them in about 0.4 s, and no reduction: every node keeps every stage.)
MAX_CLOSURE_NODES = 1500



def stage_term_bounds(problem: StageProblem) -> dict[str, int]:
    """A lower bound on each objective term, in the problem's integer units.

    ``mem_peak``: the heaviest node (with the shared weights it reads), and the average stage
    load rounded up (every weight once, shared ones included). ``compute_peak``: the
    same two arguments on each node's fastest ticks. ``stage_time_peak`` (listed only when
    weighed, as the pipeline term): the same as ``compute_peak``, since sends only add to a stage's
    time. ``spill``: parameters (every weight once) beyond the stages' total spill capacity. Communication terms are
    bounded by 0 (every node may share one stage), and so is ``grad_sync_peak`` (listed only when
    weighed: readers sharing a stage sync nothing).
    """
    K = problem.n_stages
    need, total = problem.graph.node_weight_bytes, problem.graph.total_param_bytes
    ticks = problem.node_ticks.min(axis=1) if problem.graph.n_nodes else np.zeros(0, dtype=np.int64)
    out = {"mem_peak": 0, "comm_total": 0, "comm_peak": 0, "compute_peak": 0, "spill": 0}
    if problem.graph.n_nodes:
        out["mem_peak"] = max(int(need.max()), -(-total // K))
        out["compute_peak"] = max(int(ticks.max()), -(-int(ticks.sum()) // K))
    if problem.weights.stage_time_peak > 0:
        out["stage_time_peak"] = out["compute_peak"]
    if problem.weights.grad_sync_peak > 0:
        out["grad_sync_peak"] = 0
    if problem.spill_capacity is not None:
        out["spill"] = max(0, total - int(sum(problem.spill_capacity)))
    return out


def stage_lower_bound(problem: StageProblem) -> int | Fraction:
    """The weighted sum of `stage_term_bounds`: no stage assignment has a smaller objective.

    Exact: a Python int when whole, else a `fractions.Fraction`.

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[10, 30], out_bytes=[5, 0])
    >>> stage_lower_bound(StageProblem(g, 2, {"mem_peak": 0.1}))
    3
    """
    w = problem.weights.exact()
    return exact_number(sum((w[t] * b for t, b in stage_term_bounds(problem).items()), Fraction(0)))

@dataclass(frozen=True)
class Closure:
    """Ancestor sets of a graph and the parameters they carry (each node counts as its own ancestor).

    ``params`` are the nodes' own bytes; ``ancestor_params`` and ``descendant_params`` add, once,
    every shared weight some node of the set reads; ``need`` is a node alone with its shared weights.
    """

    ancestors: np.ndarray  # (n, n) bool: ancestors[v, u] = u is v or an ancestor of v
    params: np.ndarray  # int64 own parameter bytes per node
    ancestor_params: np.ndarray  # int64: parameters of v and all its ancestors (shared weights once)
    descendant_params: np.ndarray  # int64: parameters of v and all its descendants (shared weights once)
    counting: np.ndarray  # ancestors as the numbers sums of parameters over them are taken in
    counting_t: np.ndarray  # its transpose, C-contiguous
    allowed: np.ndarray | None  # `StageProblem.allowed_stages` (None: the capacities leave a node no stage)
    need: np.ndarray | None = None  # int64 `CompGraph.node_weight_bytes` (None: ``params``, no shared weights)
    total: int | None = None  # `CompGraph.total_param_bytes` (None: the sum of ``params``)

    @property
    def node_need(self) -> np.ndarray:
        """What each node alone puts on its stage: own bytes and the shared weights it reads."""
        return self.params if self.need is None else self.need

    @property
    def total_params(self) -> int:
        """Every weight once, shared ones included: the least the K stages hold together."""
        return int(self.params.sum()) if self.total is None else self.total

    def weight_in(self, members: np.ndarray, descendants: bool = False) -> np.ndarray:
        """Parameters of the nodes ``members`` (indices) among each node's ancestors (or descendants).

        Exact: float64 only when the graph's parameters total under 2**53, so that every partial
        sum is an exact integer; int64 otherwise.
        """
        # Rows, not columns, are gathered (contiguous): ancestors through the transposed copy.
        # einsum's own loop, not BLAS: a multi-threaded BLAS on a loaded 2-core machine spun 20x
        # slower than one thread (deep_resnet_800 K=4: 1.4 s against 0.06 s for the same products).
        m = (self.counting if descendants else self.counting_t)[members]
        out = np.einsum("i,ij->j", self.params[members].astype(m.dtype), m)
        return out if out.dtype == np.int64 else out.astype(np.int64)


def closure(problem: StageProblem) -> Closure | None:
    """The graph's `Closure`, or None above `MAX_CLOSURE_NODES` nodes."""
    g = problem.graph
    n = g.n_nodes
    if n > MAX_CLOSURE_NODES:
        return None
    anc = ancestor_matrix(g, reflexive=True)
    p = np.asarray(g.param_bytes, dtype=np.int64)
    counting = anc.astype(np.float64 if int(p.sum()) < 2**53 else np.int64)
    if problem.capacity is None and problem.memory is None:
        allowed = np.ones((n, problem.n_stages), dtype=bool)  # what allowed_stages() finds, without its precedence pass
    else:
        try:
            allowed = problem.allowed_stages()
        except InfeasibleProblem:
            allowed = None
    ancestor_params, descendant_params = anc @ p, anc.T @ p
    for w in g.shared_weights:
        readers = list(w.readers)
        ancestor_params += w.nbytes * anc[:, readers].any(axis=1)  # some ancestor of v reads w
        descendant_params += w.nbytes * anc[readers, :].any(axis=0)  # some descendant of v reads w
    shared = bool(g.shared_weights)
    return Closure(anc, p, ancestor_params, descendant_params, counting, np.ascontiguousarray(counting.T), allowed,
                   need=g.node_weight_bytes if shared else None, total=g.total_param_bytes if shared else None)


def _prefix_caps(problem: StageProblem, cap: int) -> tuple[list[int], list[int]]:
    """What stages 0..k (and k..K-1) hold together under ``cap`` and the hard capacities."""
    K = problem.n_stages
    per_stage = [cap] * K if problem.capacity is None else [min(cap, int(c)) for c in problem.capacity]
    before = list(np.cumsum([0] + per_stage, dtype=object)[1:])  # Python ints: capacities may pass int64
    after = list(np.cumsum([0] + per_stage[::-1], dtype=object)[1:])[::-1]
    return before, after


def stage_ranges(problem: StageProblem, cap: int, cl: Closure, rounds: int = 8) -> tuple[np.ndarray, np.ndarray] | None:
    """Earliest and latest stage of every node in any assignment whose stages each hold <= ``cap``.

    Rules, applied until nothing moves (at most ``rounds`` passes; stopping early leaves valid,
    looser ranges): v on stage k needs v's ancestors, plus every node whose latest stage is at
    most k, to fit on stages 0..k; and v's descendants, plus every node whose earliest stage is
    at least k, to fit on stages k..K-1. (Both sets are forced onto those stages, so their
    parameters bound what the stages hold.) The hard capacities count too.

    Returns
    -------
    (earliest, latest) int arrays, or None when some node is left no stage: no assignment meets
    ``cap``.
    """
    K = problem.n_stages
    before, after = _prefix_caps(problem, cap)
    p = cl.params
    if cl.allowed is None:
        return None
    allowed = cl.allowed & (cl.node_need[:, None] <= cap)
    if not allowed.any(axis=1).all():
        return None
    earliest = allowed.argmax(axis=1).astype(np.int64)
    latest = (K - 1 - allowed[:, ::-1].argmax(axis=1)).astype(np.int64)
    for _ in range(rounds):
        old = (earliest, latest)
        # On stage k or earlier, v's ancestors share stages 0..k with every node forced there
        # (latest <= k); the forced set only grows with k, so its weight in each node's
        # ancestors is kept up to date by the newly forced nodes alone.
        forced = np.zeros(len(p), dtype=bool)
        outside = cl.ancestor_params.copy()  # v's ancestors plus the forced nodes, in parameters
        for k in range(K):
            new = np.flatnonzero((latest <= k) & ~forced)
            if new.size:
                outside += int(p[new].sum()) - cl.weight_in(new)
                forced[new] = True
            earliest = np.where((earliest == k) & (outside > before[k]), k + 1, earliest)
        # On stage k or later, v's descendants share stages k..K-1 with every node forced there.
        forced[:] = False
        outside = cl.descendant_params.copy()
        for k in range(K - 1, -1, -1):
            new = np.flatnonzero((earliest >= k) & ~forced)
            if new.size:
                outside += int(p[new].sum()) - cl.weight_in(new, descendants=True)
                forced[new] = True
            latest = np.where((latest == k) & (outside > after[k]), k - 1, latest)
        earliest, latest = _propagate(problem, earliest, latest)
        if np.any(earliest > latest):
            return None
        if np.array_equal(old[0], earliest) and np.array_equal(old[1], latest):
            break
    return earliest, latest


def _propagate(problem: StageProblem, earliest: np.ndarray, latest: np.ndarray):
    g = problem.graph
    e, l = earliest.tolist(), latest.tolist()
    pred_ptr, pred_idx = g.pred_ptr.tolist(), g.pred_idx.tolist()
    succ_ptr, succ_idx = g.succ_ptr.tolist(), g.succ_idx.tolist()
    order = g.topological_order().tolist()
    for v in order:
        for k in range(pred_ptr[v], pred_ptr[v + 1]):
            u = pred_idx[k]
            if e[u] > e[v]:
                e[v] = e[u]
    for v in reversed(order):
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            x = succ_idx[k]
            if l[x] < l[v]:
                l[v] = l[x]
    return np.asarray(e, dtype=np.int64), np.asarray(l, dtype=np.int64)


def peak_lower_bound(problem: StageProblem, cl: Closure, hi: int | None = None) -> int:
    """The least cap M under which `stage_ranges` leaves every node a stage: ``mem_peak >= M``.

    Binary search over integers from max(heaviest node, ceil(total / K), the node-by-node rule)
    up to ``hi`` (default all parameters, shared weights once): the ranges only widen as the cap grows, so feasibility
    is monotone. Returns ``hi`` + 1 when even ``hi`` is refused (no answer has a peak at most ``hi``).
    """
    total = cl.total_params
    lo = max(int(cl.node_need.max(initial=0)), -(-total // problem.n_stages))
    hi = total if hi is None else hi
    if lo > hi:
        return lo
    # First the node-by-node rule alone (no matrix products): no answer has a peak under which
    # some node's ancestors need more stages than its descendants leave.
    K = problem.n_stages
    simple_hi = hi
    while lo < simple_hi:
        mid = (lo + simple_hi) // 2
        if np.any(-(-cl.ancestor_params // mid) + -(-cl.descendant_params // mid) > K + 1):
            lo = mid + 1
        else:
            simple_hi = mid
    # Usually that is already the answer (40 of the 48 benchmark instances); else search on.
    if stage_ranges(problem, lo, cl) is not None:
        return lo
    if stage_ranges(problem, hi, cl) is None:
        return hi + 1
    # The caller's ``hi`` is usually an incumbent's peak, and often the bound itself (resnet50
    # K=2: 22 probes of a plain binary search, 2 this way).
    if hi - 1 > lo:
        if stage_ranges(problem, hi - 1, cl) is None:
            return hi
        hi -= 1
    lo += 1
    while lo < hi:
        mid = (lo + hi) // 2
        if stage_ranges(problem, mid, cl) is None:
            lo = mid + 1
        else:
            hi = mid
    return lo


def crossing_bounds(problem: StageProblem, earliest: np.ndarray, latest: np.ndarray) -> list[int]:
    """Least communication over each boundary b = 1..K-1 of any assignment inside the ranges.

    Stages 0..b-1 hold a down-set containing every node whose latest stage is below b and none
    whose earliest is b or later; the edges leaving it are a cut between those two sets with
    precedence arcs of infinite capacity, so at least a minimum s-t cut crosses (in the problem's
    units: bytes, or edges in the peer form). Summed they bound ``comm_total``, their maximum
    ``comm_peak``. (Relaxing the down-set's parameter limits under a cap into the cut, Lagrange
    style, raised no bound on any benchmark instance, so it is not done.)
    """
    g = problem.graph
    comm = problem.edge_comm.tolist()
    src, dst = g.src.tolist(), g.dst.tolist()
    e, l = earliest.tolist(), latest.tolist()
    out = []
    for b in range(1, problem.n_stages):
        side = [0 if l[v] < b else (2 if e[v] >= b else 1) for v in range(g.n_nodes)]  # 0 before, 2 after, 1 free
        forced = 0
        arcs = []
        for u, v, c in zip(src, dst, comm):
            if side[u] == 0 and side[v] == 2:
                forced += c
            elif side[u] != side[v] or side[u] == 1:
                arcs.append((u, v, c))
        out.append(forced + _min_cut(arcs, side))
    return out


def _min_cut(arcs: list[tuple[int, int, int]], side: list[int]) -> int:
    """Min cut from the before-set to the after-set: arc u->v of capacity c, v->u unbounded.

    Edmonds-Karp on Python ints (exact at any size); the before and after sets are contracted
    into the source and the sink.
    """
    if not arcs:
        return 0
    S, T = -1, -2
    name = lambda v: S if side[v] == 0 else (T if side[v] == 2 else v)  # noqa: E731
    inf = sum(c for _, _, c in arcs) + 1
    cap: dict[tuple[int, int], int] = {}
    adj: dict[int, set[int]] = {}
    for u, v, c in arcs:
        a, b = name(u), name(v)
        if a == b:
            continue
        for x, y, w in ((a, b, c), (b, a, inf)):
            cap[(x, y)] = cap.get((x, y), 0) + w
            cap.setdefault((y, x), 0)
            adj.setdefault(x, set()).add(y)
            adj.setdefault(y, set()).add(x)
    if S not in adj or T not in adj:
        return 0
    flow = 0
    while True:
        parent = {S: None}
        queue = deque([S])
        while queue and T not in parent:
            x = queue.popleft()
            for y in adj[x]:
                if y not in parent and cap[(x, y)] > 0:
                    parent[y] = x
                    queue.append(y)
        if T not in parent:
            return flow
        push, y = inf, T
        while parent[y] is not None:
            push = min(push, cap[(parent[y], y)])
            y = parent[y]
        if push >= inf:
            return flow + inf  # never: the before set reaches the after set only through edges
        y = T
        while parent[y] is not None:
            x = parent[y]
            cap[(x, y)] -= push
            cap[(y, x)] += push
            y = x
        flow += push


@dataclass(frozen=True)
class ProofBound:
    """What `proof_bound` proves about the answers at least as good as an incumbent.

    ``lower_bound``: no assignment has a smaller objective (exact). ``cap``: every answer of
    objective <= the incumbent's has each stage's parameters <= cap. ``ranges``: the precedence
    ranges, (earliest, latest) stage of every node in every such answer, or None (the graph is too large, or memory
    is not weighed).
    """

    lower_bound: int | Fraction
    cap: int | None
    ranges: tuple[np.ndarray, np.ndarray] | None
    peak: int
    crossings: list[int]


def proof_bound(problem: StageProblem, incumbent_objective, cl: Closure | None = None, others: int | Fraction = 0,
                peak: int | None = None) -> ProofBound | None:
    """A global lower bound, and the cap and precedence ranges of every answer at least as good as the incumbent.

    Every answer of objective <= V (the incumbent's) has peak M with ``w_mem M + w_comm C(M) +
    others <= V``, C(M) the crossing bound under cap M (non-increasing in M); starting from the
    peak bound alone, the cap and C are tightened in turn until they settle (or the bound meets V). Then every such
    answer costs at least ``w_mem * peak_lower_bound + w_comm * C(cap) + others``, and every other
    answer at least V, so the smaller of the two is a global lower bound.

    Parameters
    ----------
    others : int or Fraction
        A lower bound on the weighted terms other than mem_peak, comm_total and comm_peak
        (compute_peak, spill, grad_sync_peak ...), which this function does not bound.
    peak : int, optional
        `peak_lower_bound` when already known (it does not depend on the incumbent).

    Returns None when the graph is larger than `MAX_CLOSURE_NODES` and no closure is given.
    """
    cl = closure(problem) if cl is None else cl
    if cl is None:
        return None
    w = problem.weights.exact()
    V = Fraction(incumbent_objective)
    total = cl.total_params  # no stage holds more: the cap starts there
    if peak is None:
        peak = peak_lower_bound(problem, cl) if w["mem_peak"] > 0 or problem.capacity is not None else 0
    cap = total
    crossings = [0] * (problem.n_stages - 1)
    kept = None  # the precedence ranges of the last cap
    for _ in range(6):
        if w["mem_peak"] > 0:
            comm = w["comm_total"] * sum(crossings) + w["comm_peak"] * max(crossings, default=0)
            new_cap = min(cap, math.floor((V - others - comm) / w["mem_peak"]))
        else:
            new_cap = cap
        if new_cap < peak:
            # No assignment at least as good as V: V is optimal (it is an answer's objective).
            return ProofBound(exact_number(V), new_cap, kept, peak, crossings)
        if new_cap == cap and kept is not None:
            break
        cap = new_cap
        ranges = stage_ranges(problem, cap, cl)
        if ranges is None:
            return ProofBound(exact_number(V), cap, kept, peak, crossings)
        kept = ranges
        crossings = crossing_bounds(problem, *ranges)
        comm = w["comm_total"] * sum(crossings) + w["comm_peak"] * max(crossings, default=0)
        if w["mem_peak"] * peak + comm + others >= V:
            # Already no answer undercuts V (these crossings hold under every tighter cap too):
            # the tightening rounds would only narrow ranges no one needs.
            return ProofBound(exact_number(V), cap, kept, peak, crossings)
    bound = w["mem_peak"] * peak + w["comm_total"] * sum(crossings) + w["comm_peak"] * max(crossings, default=0) + others
    return ProofBound(exact_number(min(bound, V)), cap, kept, peak, crossings)
