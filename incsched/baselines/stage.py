"""Heuristic pre-schedulers for the stage problem: the incumbents the exact solver starts from.

Each has the pre-scheduler interface ``preschedule(problem, seed=0) -> stages`` (one stage per node,
always precedence-feasible) shared with the RL policy, so `solve()` and the benchmarks can swap
them freely. They are the published baselines: level-based splits, DeepSpeed's contiguous
``parameters`` and ``uniform`` partitioners, torchgpipe's ``balance_by_time``, a PipeDream-style
dynamic program over contiguous runs, and for the throughput objective (`StageProblem.pipeline`)
a PipeDream/Alpa-style search for the contiguous split of least slowest-stage time. torchtitan's
default split (`even_layers`) needs a layer-level graph, so it is not in the portfolio.

A contiguous run's parameters are not a sum over its nodes when the graph has shared weights
(`CompGraph.shared_weights`: each costs its bytes once on every stage holding a reader). The
splits below price a run [j, i) of an order as prefix sums of the nodes' own bytes plus each shared
weight whose first reader at or after j comes before i (`_RunBytes`); a run's bytes still grow with
the run, so the greedy fills and the DPs stay exact. Training memory adds the largest working set
and optimizer step of the run's nodes (`_TrainingRunBytes`, range maxima), which grow with the run too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import ProblemError
from ..evaluate.stage import evaluate_stages
from ..problems.stage import StageProblem
from .stage_local import improve_by_moves, place_loadless_nodes

__all__ = [
    "asap",
    "alap",
    "contiguous_params",
    "contiguous_compute",
    "pipedream_dp",
    "dp_local_search",
    "best_split_of_order",
    "balance_by_time",
    "uniform",
    "parameters",
    "pipeline_dp",
    "even_layers",
    "STAGE_BASELINES",
    "best_baseline",
]


def asap(problem: StageProblem, seed: int = 0) -> np.ndarray:
    """Each node's ASAP level scaled onto K stages: ``stage = level * K // depth``.

    Levels rise strictly along every edge and the scaling is monotone, so precedence holds.
    ``seed`` is accepted for the common interface; the result does not depend on it.
    """
    return _nonempty(problem, _scale_levels(problem.graph.asap_level, problem.graph.depth, problem.n_stages))


def alap(problem: StageProblem, seed: int = 0) -> np.ndarray:
    """Each node's ALAP level scaled onto K stages (see `asap`)."""
    return _nonempty(problem, _scale_levels(problem.graph.alap_level, problem.graph.depth, problem.n_stages))


def contiguous_params(problem: StageProblem, seed: int = 0) -> np.ndarray:
    """DeepSpeed's ``parameters`` partitioner: one topological order cut into K contiguous runs.

    The cut minimises the largest run's parameter bytes (binary search on that bottleneck with a
    greedy fill), so on a chain, whose topological order is unique, it is optimal for ``mem_peak``.
    """
    g = problem.graph
    order = g.topological_order()
    load = np.repeat(g.param_bytes[order][:, None], problem.n_stages, axis=1)
    return _nonempty(problem, _positions_to_stages(order, _balanced_cuts(_RunBytes.of(problem, order, load))))


def contiguous_compute(problem: StageProblem, seed: int = 0) -> np.ndarray:
    """One topological order cut into K contiguous runs of balanced compute time.

    Stage speeds are honoured: the largest run time on its stage (in ticks) is minimised.
    """
    order = problem.graph.topological_order()
    return _nonempty(problem, _positions_to_stages(order, _balanced_cuts(_RunBytes(problem.node_ticks[order]))))


def pipedream_dp(problem: StageProblem, seed: int = 0) -> np.ndarray:
    """A dynamic program over contiguous runs of a topological order, minimising the objective.

    Over a fixed order, ``comm_total`` and ``spill`` add up run by run (a cut costs the units of the
    edges across it), while ``mem_peak`` and ``compute_peak`` are maxima. So for each of a few caps
    on run memory and run time (the best contiguous bottleneck and slightly looser ones), the DP
    finds the cuts of least ``comm_total`` + ``spill`` within the caps (and the hard capacity); the
    candidate with the best evaluated objective wins. Two orders are tried: Kahn's breadth-first
    order and a depth-first one, which keeps branches together and so crosses fewer edges.
    ``comm_peak`` is only evaluated, not optimised.
    """
    g = problem.graph
    if problem.n_stages == 1 or g.n_nodes == 0:
        return np.zeros(g.n_nodes, dtype=np.int64)
    best, best_key = None, None
    for order in (g.topological_order(), g.topological_order(depth_first=True)):
        stages, key = best_split_of_order(problem, order)
        if stages is not None and (best_key is None or key < best_key):
            best, best_key = stages, key
    if problem.weights.stage_time_peak > 0 or problem.memory is not None:
        # The pipeline model's term and memory are not in the DP above: its own search competes.
        stages = pipeline_dp(problem, seed)
        ev = evaluate_stages(problem, stages)
        if best_key is None or (not ev.feasible, ev.objective) < best_key:
            best, best_key = stages, (not ev.feasible, ev.objective)
    if best is None:  # no contiguous split meets the hard capacity: hand back the memory-balanced one
        return contiguous_params(problem, seed)
    return best


def best_split_of_order(
    problem: StageProblem,
    order: np.ndarray,
    *,
    mem_factors=(0, 2, 5, 10, 20, 50, 100, 200),
    time_factors=(0, 10, 50, 200),
    extra_mem_caps=(),
    uncapped: bool = True,
) -> tuple[np.ndarray | None, tuple]:
    """The best cut of one topological ``order`` into K contiguous runs, by the evaluator.

    For each cap on run memory (the order's best contiguous bottleneck loosened by each of
    ``mem_factors`` per mille, plus ``extra_mem_caps``) and on run time (likewise), the DP finds
    the cuts of least ``comm_total`` + ``spill`` within the caps and the hard capacity; with
    ``uncapped`` an unlimited cap is tried too. Returns the best stages and their (infeasible,
    objective) key, or ``(None, ())`` when no cut meets the caps.
    """
    g, K, w = problem.graph, problem.n_stages, problem.weights
    mem = _RunBytes.of(problem, order, np.repeat(g.param_bytes[order][:, None], K, axis=1))
    ticks = _RunBytes(problem.node_ticks[order])

    def caps(load, weight, factors, extra=()):
        if weight <= 0:
            return [None]
        b = _bottleneck(load)
        return sorted({b + (b * f) // 1000 for f in factors} | set(extra)) + ([None] if uncapped else [])

    splits = (_dp_cuts(problem, order, mem, ticks, mem_cap, time_cap)
              for mem_cap in caps(mem, w.mem_peak, mem_factors, extra_mem_caps)
              for time_cap in caps(ticks, w.compute_peak, time_factors))
    best, best_key = _best_split(problem, ((order, cuts) for cuts in splits))
    return best, (best_key if best is not None else ())


def _best_split(problem: StageProblem, candidates) -> tuple[np.ndarray | None, tuple | None]:
    """The best of ``(order, cuts)`` candidates by the evaluator (feasible first, then objective;
    ties keep the earlier); ``cuts`` None is skipped. Returns the stages and their key."""
    best, best_key = None, None
    for order, cuts in candidates:
        if cuts is None:
            continue
        stages = _nonempty(problem, _positions_to_stages(order, cuts))
        ev = evaluate_stages(problem, stages)
        key = (not ev.feasible, ev.objective)
        if best is None or key < best_key:
            best, best_key = stages, key
    return best, best_key


def dp_local_search(problem: StageProblem, seed: int = 0, *, rounds: int = 5, start=None) -> np.ndarray:
    """The PipeDream-style DP's split, polished by `improve_by_moves` until it stops improving,
    then its loadless nodes placed optimally (`place_loadless_nodes`).

    ``start`` is the DP's split when the caller has it already (`best_baseline` does).
    """
    stages = pipedream_dp(problem, seed) if start is None else np.asarray(start, dtype=np.int64)
    objective = evaluate_stages(problem, stages).objective
    for _ in range(rounds):
        candidate = improve_by_moves(problem, stages)
        value = evaluate_stages(problem, candidate).objective
        if value >= objective:
            break
        stages, objective = candidate, value
    return place_loadless_nodes(problem, stages)


def balance_by_time(problem: StageProblem, seed: int = 0) -> np.ndarray:
    """torchgpipe's ``balance_by_time``: the topological order cut into K contiguous runs whose
    largest compute time is least (its ``blockpartition.solve``), sends and memory not considered.

    The node times are the graph's (torchgpipe profiles each layer); on stages of one speed this is
    `contiguous_compute`'s split.
    """
    return contiguous_compute(problem, seed)


def uniform(problem: StageProblem, seed: int = 0) -> np.ndarray:
    """DeepSpeed's ``partition_method="uniform"``: equal node counts along the topological order.

    As ``deepspeed.runtime.utils.partition_uniform``: runs of n // K nodes, the first n % K runs
    one node longer (and with fewer nodes than stages, one node per stage, the rest empty).
    """
    g, K = problem.graph, problem.n_stages
    n = g.n_nodes
    sizes = [n // K + (1 if k < n % K else 0) for k in range(K)]
    cuts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return _nonempty(problem, _positions_to_stages(g.topological_order(), cuts))


def parameters(problem: StageProblem, seed: int = 0) -> np.ndarray:
    """DeepSpeed's ``partition_method="parameters"``: contiguous runs of balanced parameters (`contiguous_params`)."""
    return contiguous_params(problem, seed)


def pipeline_dp(problem: StageProblem, seed: int = 0) -> np.ndarray:
    """PipeDream's and Alpa's planner: the contiguous split of a topological order of least
    ``stage_time_peak`` (compute plus sends) within the hard ``memory`` and ``capacity``.

    Over one order, stage k ending at position i sends exactly the values made before i and read
    at or after i, so its time is its compute plus a cost of i alone, and its memory grows with
    its run: whether every stage fits under a cap C is decided exactly by taking, for each end,
    the latest feasible start (`_pipeline_cuts`), and a binary search on C finds the least. The
    better of Kahn's and the depth-first order wins by the evaluator. Falls back to
    `balance_by_time` when no contiguous split fits the memory.
    """
    g = problem.graph
    if problem.n_stages == 1 or g.n_nodes == 0:
        return np.zeros(g.n_nodes, dtype=np.int64)
    orders = (g.topological_order(), g.topological_order(depth_first=True))
    if problem.training and problem.memory is not None and bool(np.all(g.src < g.dst)):
        orders += (np.arange(g.n_nodes),)  # the node order: the one training memory's working sets are exact over
    best, _ = _best_split(problem, ((order, _least_peak_cuts(problem, order)) for order in orders))
    return balance_by_time(problem, seed) if best is None else best


def even_layers(problem: StageProblem, seed: int = 0) -> np.ndarray:
    """torchtitan's default split (``_generate_llm_fqn_per_model_part``, input and output weight 1):
    the repeated blocks spread evenly, the modules before them counted as one block on the first
    stage and those after them as one block on the last.

    With L blocks the L + 2 weighted units go n // K to a stage, the first n % K stages one more.
    A module between two blocks joins the block after it. It reads a layer-level graph (``capture(...,
    granularity="layer")``): the node order is the call order, the blocks are the elements of
    ``meta["containers"]``.

    Raises
    ------
    ProblemError
        For a graph without blocks (an op-level graph), or with fewer units than stages (torchtitan
        refuses the same).

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> names = ["emb", "h.0", "h.1", "h.2", "h.3", "head"]
    >>> g = CompGraph(names, names[:-1], names[1:], meta={"modules": {n: n for n in names}, "containers": ["h"]})
    >>> even_layers(StageProblem.peer(g, n_stages=2)).tolist()
    [0, 0, 0, 1, 1, 1]
    """
    g, K = problem.graph, problem.n_stages
    modules, containers = g.meta.get("modules") or {}, set(g.meta.get("containers") or ())

    def block_of(path: str) -> str | None:  # the element of the outermost container holding path
        parts = path.split(".")
        return next((".".join(parts[: i + 1]) for i in range(1, len(parts)) if ".".join(parts[:i]) in containers), None)

    blocks = [block_of(modules[nm]) if nm in modules else None for nm in g.names]
    index = {b: i for i, b in enumerate(dict.fromkeys(b for b in blocks if b is not None))}
    if not index:
        raise ProblemError(f"graph {g.name!r} has no repeated blocks to spread evenly; capture it with granularity 'layer'")
    units = len(index) + 2
    if K > units:
        raise ProblemError(f"graph {g.name!r}: {K} stages cannot share {len(index)} blocks and the modules around them")
    per_stage = [units // K + (1 if k < units % K else 0) for k in range(K)]
    per_stage[0] -= 1  # the modules before the blocks count as one block
    per_stage[-1] -= 1  # and those after them
    block_stage = np.repeat(np.arange(K), per_stage)
    in_block = np.asarray([v for v, b in enumerate(blocks) if b is not None])
    position = np.arange(g.n_nodes)
    following = np.searchsorted(in_block, position)  # the first block node at or after each node
    stages = np.asarray([block_stage[index[blocks[v]]] for v in in_block[np.minimum(following, len(in_block) - 1)]], dtype=np.int64)
    stages[position < in_block[0]] = 0  # the modules before the blocks: the first stage
    stages[following == len(in_block)] = K - 1  # those after them: the last
    return stages


#: Every stage pre-scheduler by name, for `solve()`, the CLI and the benchmarks.
STAGE_BASELINES: dict[str, Callable[[StageProblem, int], np.ndarray]] = {
    "asap": asap,
    "alap": alap,
    "contiguous_params": contiguous_params,
    "contiguous_compute": contiguous_compute,
    "pipedream_dp": pipedream_dp,
    "dp_local_search": dp_local_search,
    "balance_by_time": balance_by_time,
    "uniform": uniform,
    "parameters": parameters,
    "pipeline_dp": pipeline_dp,
}


def best_baseline(problem: StageProblem, seed: int = 0) -> tuple[str, np.ndarray]:
    """Run every baseline and return the name and stages of the best (feasible first, then objective)."""
    best, dp_split = None, None
    for name, fn in STAGE_BASELINES.items():
        if fn is dp_local_search and dp_split is not None:
            stages = dp_local_search(problem, seed, start=dp_split)  # the DP runs once, not twice
        else:
            stages = fn(problem, seed)
        if fn is pipedream_dp:
            dp_split = stages
        ev = evaluate_stages(problem, stages)
        key = (not ev.feasible, ev.objective)
        if best is None or key < best[0]:
            best = (key, name, stages)
    return best[1], best[2]


# ---------------------------------------------------------------------- building blocks


def _scale_levels(level: np.ndarray, depth: int, K: int) -> np.ndarray:
    if depth == 0:
        return np.zeros(0, dtype=np.int64)
    return (np.asarray(level, dtype=np.int64) * K) // depth


def _nonempty(problem: StageProblem, stages: np.ndarray) -> np.ndarray:
    """In training mode (every stage holds a node), ``stages`` with its empty stages filled: the
    nodes sorted by (stage, topological position), a topological order the stages cut into
    contiguous runs, have their K + 1 cuts pushed apart to strictly increasing ones, moving as few
    nodes as that takes to a neighbouring stage. Runs of a topological order keep precedence. The
    input unchanged outside training, when no stage is empty, or with fewer nodes than stages."""
    K, n = problem.n_stages, len(stages)
    counts = np.bincount(stages, minlength=K) if n else np.zeros(K, dtype=np.int64)
    if not problem.training or n < K or counts.all():
        return stages
    position = np.empty(n, dtype=np.int64)
    position[problem.graph.topological_order()] = np.arange(n)
    order = np.lexsort((position, stages))
    cuts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    for k in range(1, K):
        cuts[k] = max(cuts[k], cuts[k - 1] + 1)
    for k in range(K - 1, 0, -1):
        cuts[k] = min(cuts[k], cuts[k + 1] - 1)
    return _positions_to_stages(order, cuts)


def _positions_to_stages(order: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """Stages from K+1 cut positions over ``order`` (run k is order[cuts[k]:cuts[k+1]])."""
    n = len(order)
    stage_at = np.searchsorted(np.asarray(cuts[1:-1]), np.arange(n), side="right")
    stages = np.empty(n, dtype=np.int64)
    stages[order] = stage_at
    return stages


def _prefix(load: np.ndarray) -> np.ndarray:
    """Prefix sums per stage column, shape (n+1, K)."""
    out = np.zeros((load.shape[0] + 1, load.shape[1]), dtype=np.int64)
    np.cumsum(load, axis=0, out=out[1:])
    return out


class _RunBytes:
    """What a contiguous run [j, i) of an order puts on stage k: its nodes' ``load[:, k]`` summed,
    plus once each shared weight with a reader in the run (the module notes).

    ``load`` is (n, K) in the order's positions; ``shared`` lists (bytes, reader positions).
    """

    def __init__(self, load: np.ndarray, shared=()):
        self.load = load
        self.prefix = _prefix(load)
        n = load.shape[0]
        self.next_reader = []  # (bytes, nxt): nxt[j] the first reader position >= j (n if none)
        for nbytes, positions in shared:
            nxt = np.full(n + 1, n, dtype=np.int64)
            nxt[positions] = positions
            self.next_reader.append((int(nbytes), np.minimum.accumulate(nxt[::-1])[::-1]))

    @classmethod
    def of(cls, problem: StageProblem, order: np.ndarray, load: np.ndarray, factor: int = 1) -> "_RunBytes":
        """Parameter-like bytes of runs of ``order``: ``load`` plus the graph's shared weights
        (``factor`` times theirs: `StageProblem.param_factor` for training memory)."""
        weights = problem.graph.shared_weights
        if not weights:
            return cls(load)
        pos = np.empty(len(order), dtype=np.int64)
        pos[order] = np.arange(len(order))
        return cls(load, [(factor * w.nbytes, np.sort(pos[list(w.readers)])) for w in weights if w.nbytes])

    def run(self, j, i, k: int):
        """Bytes of run [j, i) on stage k (``j``, ``i`` ints or equal-shaped int arrays)."""
        out = self.prefix[i, k] - self.prefix[j, k]
        for nbytes, nxt in self.next_reader:
            out = out + nbytes * (nxt[j] < i)
        return out

    def earliest_starts(self, cap: int, k: int) -> np.ndarray:
        """For each end i in 0..n, the least j <= i with run [j, i) within ``cap`` on stage k."""
        column = self.prefix[:, k]
        if not self.next_reader:
            return np.searchsorted(column, column - cap, side="left")
        # A run's bytes fall as its start rises: binary search on every end at once.
        ends = np.arange(len(column))
        lo, hi = np.zeros_like(ends), ends.copy()
        while np.any(lo < hi):
            mid = (lo + hi) // 2
            fits = self.run(mid, ends, k) <= cap
            hi = np.where(fits, mid, hi)
            lo = np.where(fits, lo, mid + 1)
        return lo

    def latest_end(self, start: int, cap: int, k: int) -> int:
        """The largest i >= ``start`` with run [start, i) within ``cap`` on stage k."""
        column = self.prefix[:, k]
        if not self.next_reader:
            return max(int(np.searchsorted(column, column[start] + cap, side="right")) - 1, start)
        lo, hi = start, len(column) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.run(start, mid, k) <= cap:
                lo = mid
            else:
                hi = mid - 1
        return lo


class _RangeMax:
    """max(values[j:i]) (0 for an empty run) for ints or equal-shaped int arrays, by a sparse table."""

    def __init__(self, values: np.ndarray):
        n = len(values)
        levels = [np.asarray(values, dtype=np.int64)]
        while (2 << (len(levels) - 1)) <= n:
            prev, half = levels[-1], 1 << (len(levels) - 1)
            levels.append(np.concatenate([np.maximum(prev[:-half], prev[half:]), np.zeros(half, dtype=np.int64)]))
        self.table = np.stack(levels) if n else np.zeros((1, 1), dtype=np.int64)

    def __call__(self, j, i):
        j, i = np.asarray(j, dtype=np.int64), np.asarray(i, dtype=np.int64)
        length = np.maximum(i - j, 1)
        lvl = np.floor(np.log2(length)).astype(np.int64)
        lvl -= (1 << lvl) > length  # float log2 rounding at powers of two
        lvl += (2 << lvl) <= length
        last = np.maximum(i - (1 << lvl), 0)
        out = np.maximum(self.table[lvl, np.minimum(j, self.table.shape[1] - 1)], self.table[lvl, last])
        return np.where(i > j, out, 0)


class _TrainingRunBytes:
    """Training bytes of a run [j, i) on stage k: ``max(base + work, own + step)`` (the problem's
    training notes), base the stash and weights (`_RunBytes` of ``stage_memory_coef``), own the
    weights alone, step the largest of the run's nodes', and work the largest ``work_v`` less what
    the run's nodes after v release: ``max_p (work[p] + released[p + 1]) - released[i]`` over
    prefix sums of the releases, a range maximum. Exact when the order follows the node order
    (what "after" means); over another order the releases are left out, an upper bound. Each part
    grows with the run."""

    def __init__(self, problem: StageProblem, order: np.ndarray):
        f = problem.param_factor
        self.base = _RunBytes.of(problem, order, problem.stage_memory_coef[order], f)
        self.load = self.base.load
        self.own = _RunBytes.of(problem, order, np.repeat(f * problem.graph.param_bytes[order][:, None], problem.n_stages, axis=1), f)
        exact = bool(np.all(np.diff(order) > 0))
        release = problem.release_coef[order] if exact else np.zeros(len(order), dtype=np.int64)
        self.released = np.concatenate([[0], np.cumsum(release)]).astype(np.int64)
        self.work = _RangeMax(problem.work_coef[order] + self.released[1:])
        self.step = _RangeMax(problem.step_coef[order])

    def run(self, j, i, k: int):
        work = np.maximum(self.work(j, i) - self.released[np.asarray(i)], 0)
        return np.maximum(self.base.run(j, i, k) + work, self.own.run(j, i, k) + self.step(j, i))


def _greedy_cuts(runs: _RunBytes, cap: int) -> np.ndarray | None:
    """Fill stages in order, each as far as ``cap`` allows; None if K stages cannot hold everything.

    Taking the longest prefix for each stage leaves the shortest suffix, and whether a suffix fits
    in the remaining stages is monotone in its length (a shorter run never holds more, shared
    weights included), so this decides feasibility exactly.
    """
    n, K = runs.load.shape
    cuts = [0]
    for k in range(K):
        i = cuts[-1]
        cuts.append(runs.latest_end(i, cap, k) if k < K - 1 else n)
    ok = all(runs.run(cuts[k], cuts[k + 1], k) <= cap for k in range(K))
    return np.asarray(cuts, dtype=np.int64) if ok else None


def _bottleneck(runs: _RunBytes) -> int:
    """Least cap at which the order splits into K contiguous runs (binary search on integers)."""
    n, K = runs.load.shape
    if runs.next_reader:
        lo = max((int(runs.run(np.arange(n), np.arange(1, n + 1), k).max(initial=0)) for k in range(K)), default=0)
        hi = max((int(runs.run(0, n, k)) for k in range(K)), default=0)
    else:
        lo, hi = int(runs.load.max(initial=0)), int(runs.prefix[-1].max())
    while lo < hi:
        mid = (lo + hi) // 2
        if _greedy_cuts(runs, mid) is None:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _balanced_cuts(runs: _RunBytes) -> np.ndarray:
    return _greedy_cuts(runs, _bottleneck(runs))


def _dp_cuts(problem: StageProblem, order, mem, ticks, mem_cap, time_cap) -> np.ndarray | None:
    """Cuts of least ``comm_total`` + ``spill`` cost with every run within the caps; None if none fit."""
    K, n = problem.n_stages, len(order)
    g, w = problem.graph, problem.weights
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    # cross[j]: communication units over a cut before position j (edges with pos_u < j <= pos_v).
    diff = np.zeros(n + 2, dtype=np.int64)
    np.add.at(diff, pos[g.src] + 1, problem.edge_comm)
    np.add.at(diff, pos[g.dst] + 1, -problem.edge_comm)
    cross = np.cumsum(diff)[: n + 1].astype(np.float64)
    cap = problem.capacity_array()
    spill_cap = None if problem.spill_capacity is None or w.spill == 0 else np.asarray(problem.spill_capacity)
    idx = np.arange(n + 1)

    def first_start(k: int) -> np.ndarray:
        # The earliest start j of a run ending at i that stays within stage k's caps.
        j = np.zeros(n + 1, dtype=np.int64)
        limits = [c for c in (mem_cap, None if cap is None else int(cap[k])) if c is not None]
        for c in limits:
            j = np.maximum(j, mem.earliest_starts(c, 0))
        if time_cap is not None:
            j = np.maximum(j, ticks.earliest_starts(time_cap, k))
        return j

    inf = np.inf
    f = np.where(first_start(0) == 0, 0.0, inf)
    if spill_cap is not None:
        f = f + w.spill * np.maximum(mem.run(np.zeros(n + 1, dtype=np.int64), idx, 0) - spill_cap[0], 0)
    back = np.zeros((K, n + 1), dtype=np.int64)
    for k in range(1, K):
        enter = f + w.comm_total * cross  # cost so far plus the cut opening stage k at position j
        jmin = first_start(k)
        if spill_cap is None:
            f = _window_min(enter, jmin, back[k])
            continue
        nf = np.full(n + 1, inf)
        for i in range(n + 1):
            js = idx[jmin[i] : i + 1]
            cand = enter[js] + w.spill * np.maximum(mem.run(js, i, 0) - spill_cap[k], 0)
            a = int(np.argmin(cand))
            nf[i], back[k, i] = cand[a], js[a]
        f = nf
    if not np.isfinite(f[n]):
        return None
    return _backtrack(back, n)


def _sends_at_cuts(problem: StageProblem, order: np.ndarray) -> np.ndarray:
    """send[i]: ticks of the values a stage ending before position i sends (made before i, read at or after i)."""
    g, n = problem.graph, len(order)
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    data = problem.readers
    last = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last, g.src[data], pos[g.dst[data]])
    senders = np.flatnonzero(last > pos)
    diff = np.zeros(n + 2, dtype=np.int64)
    np.add.at(diff, pos[senders] + 1, problem.send_ticks[senders])
    np.add.at(diff, last[senders] + 1, -problem.send_ticks[senders])
    return np.cumsum(diff)[: n + 1]


def _least_peak_cuts(problem: StageProblem, order: np.ndarray) -> np.ndarray | None:
    """Cuts of ``order`` of least slowest-stage time within the memory; None when no split fits it."""
    K = problem.n_stages
    ticks = _prefix(problem.node_ticks[order])
    sends = _sends_at_cuts(problem, order)
    mem = None
    if problem.memory is not None:
        mem = _TrainingRunBytes(problem, order) if problem.training else _RunBytes.of(problem, order, problem.stage_memory_coef[order])
    caps = [problem.effective_memory, problem.effective_capacity]
    params = _RunBytes.of(problem, order, np.repeat(problem.graph.param_bytes[order][:, None], K, axis=1)) if caps[1] is not None else None
    lo = 0
    hi = int(ticks[-1].max()) + int(sends.max(initial=0))
    nonempty = problem.training
    if _pipeline_cuts(ticks, sends, mem, params, caps, hi, nonempty) is None:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if _pipeline_cuts(ticks, sends, mem, params, caps, mid, nonempty) is None:
            lo = mid + 1
        else:
            hi = mid
    return _pipeline_cuts(ticks, sends, mem, params, caps, lo, nonempty)


def _pipeline_cuts(ticks, sends, mem, params, caps, cap: int, nonempty: bool = False) -> np.ndarray | None:
    """Cuts with every stage's compute + sends <= ``cap`` and within its memory, or None.

    Stage k may end at i after starting at j when its load over [j, i) fits; loads fall as j rises,
    so the latest reachable start j <= i decides (a running maximum), exactly. With ``nonempty``
    (training mode) the start is the latest reachable j < i: every run holds a node, still exactly.
    """
    n, K = ticks.shape[0] - 1, ticks.shape[1]
    idx = np.arange(n + 1)
    reach = idx == 0  # where the previous stage may end
    starts = np.zeros((K, n + 1), dtype=np.int64)
    for k in range(K):
        latest = np.maximum.accumulate(np.where(reach, idx, -1))  # latest reachable start <= i
        if nonempty:  # the latest reachable start < i
            latest = np.concatenate([[-1], latest[:-1]])
        ok = latest >= 0
        j = np.maximum(latest, 0)
        time = ticks[:, k] - ticks[j, k] + (sends if k < K - 1 else 0)
        ok &= time <= cap
        if mem is not None:
            ok &= mem.run(j, idx, k) <= caps[0][k]
        if params is not None:
            ok &= params.run(j, idx, k) <= caps[1][k]
        starts[k] = j
        reach = ok
    if not reach[n]:
        return None
    return _backtrack(starts, n)


def _backtrack(start: np.ndarray, n: int) -> np.ndarray:
    """The K + 1 cut positions from ``start[k, i]``, where stage k starts when it ends before i."""
    cuts = [n]
    for k in range(start.shape[0] - 1, 0, -1):
        cuts.append(int(start[k, cuts[-1]]))
    cuts.append(0)
    return np.asarray(cuts[::-1], dtype=np.int64)


def _window_min(values: np.ndarray, lo: np.ndarray, arg_out: np.ndarray) -> np.ndarray:
    """out[i] = min(values[lo[i] : i + 1]) for non-decreasing ``lo`` (monotone deque, O(n)).

    The position of each minimum (the earliest on ties) is written to ``arg_out``.
    """
    vals, los = values.tolist(), lo.tolist()
    out = [0.0] * len(vals)
    window: list[int] = []  # positions with increasing values; the head is the minimum
    head = 0
    for i, v in enumerate(vals):
        while len(window) > head and vals[window[-1]] > v:
            window.pop()
        window.append(i)
        while window[head] < los[i]:
            head += 1
        out[i] = vals[window[head]]
        arg_out[i] = window[head]
    return np.asarray(out)
