"""A makespan bound that adds up exact optima of chunks between depth levels (chains of tiled steps).

Where a graph has no cut node (`incsched.problems.decompose`), it still has levels: the nodes at
one hop depth (`CompGraph.asap_level`: edges on the longest path from a source), such as the accumulator tiles after each
product of a chained matmul. Every node deeper than a level descends from one of its nodes, so
once the level's first node ends at T, what follows runs after T. With T_j the first end of level
j and x any node of level j + 1,

    end(x) >= T_j + OPT(chunk(x)),  chunk(x) = the ancestors of x below level j, and x,

where the chunk's problem has the level-j ancestors of x as zero-time entries, free to take any
device at time 0, and drops every other node (a relaxation: fewer nodes, earlier inputs). So
T_{j+1} >= T_j + min_x OPT(chunk(x)), and the makespan is at least the sum of these steps, the
last one the largest over the sinks below the last level. Each chunk's OPT is CP-SAT's proven
bound on its problem (a solve cut short still bounds), less one tick per entry (an entry takes
one tick in the chunk's problem, see `subproblem`).

On two accumulator rows of a 15-matrix chain on 4 devices (`chained_matmul(15, tiles=2)`),
chunks of four products give 638,841 ticks against the combinatorial families' 595,666; on graphs
whose rows are many or wide (three rows on 8 devices) a chunk, which sees one row alone on every
device, bounds less than the families (see ``benchmarks/placement_gaps.py --offline``).
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from incsched.graph.dag import ancestor_matrix
from incsched.problems import PlacementProblem
from incsched.problems.decompose import subproblem

from .. import SolverSettings
from .placement import solve_placement

__all__ = ["level_bound", "level_period"]


def level_period(problem: PlacementProblem) -> int:
    """The shortest period of the node counts per hop depth, sources' depth left out (1 if none repeats).

    A chained matmul's depths alternate tile products and reductions (period 2), an FFNN's
    products, reductions and activations (3): strides that are multiples of it put every level on
    the same kind of node, and the others cut the steps unevenly (a 15-matrix chain: 499,621 ticks
    at stride 5 against 584,796 at 4).
    """
    counts = np.bincount(problem.graph.asap_level)[1:].tolist() if problem.n_nodes else []
    for period in range(1, len(counts) // 2 + 1):
        if all(counts[i] == counts[i + period] for i in range(len(counts) - period)):
            return period
    return 1


def level_bound(problem: PlacementProblem, settings: SolverSettings, stride: int, *, seconds: float | None = None) -> tuple[int, dict]:
    """The sum of chunk optima between the levels at depths ``stride``, ``2 * stride``, ... (see the module).

    Parameters
    ----------
    problem : PlacementProblem
        Any devices and links; memory limits are kept in each chunk (a relaxation still).
    settings : SolverSettings
        Per chunk solve; ``time_limit`` caps each.
    stride : int
        Hop depths between consecutive levels (>= 1). Longer chunks bound more per step and cost
        more to prove (37-op chunks of a 2-row chain: about 5 s each on one core).
    seconds : float, optional
        Wall seconds for all chunks; once spent, the remaining chunks keep their combinatorial
        bound (`PlacementProblem.lower_bound_ticks`), and the sum still bounds.

    Returns
    -------
    (int, dict)
        The bound in ticks and ``info``: ``steps`` (per level: its depth, the step's ticks, how
        many chunks were solved and proven optimal), ``proven`` (every chunk solved to optimality)
        and ``seconds``.
    """
    if stride < 1:
        raise ValueError(f"level_bound: stride must be at least 1, got {stride}")
    started = time.perf_counter()
    g, n = problem.graph, problem.n_nodes
    if n == 0:
        return 0, {"steps": [], "proven": True, "seconds": 0.0}
    depth = g.asap_level
    topo = g.topological_order().tolist()
    anc = ancestor_matrix(g, reflexive=True)  # anc[x]: x and its ancestors
    sinks = [v for v in range(n) if g.out_degree[v] == 0]
    deepest = int(depth.max())
    levels = [[v for v in range(n) if depth[v] == d] for d in range(stride, deepest, stride)]
    levels.append([v for v in sinks if depth[v] > (len(levels) * stride if levels else -1)])

    def chunk_bound(x: int, entries: list[int], floor: int) -> tuple[int, str]:
        # Below the level lies nothing of the chunk: a node deeper than the level descends from
        # one of its nodes, and within x's ancestors that node is one of x's entries.
        inside = anc[x]
        ins = [u for u in entries if inside[u]]
        body = [v for v in topo if inside[v] and depth[v] > floor]
        sub = subproblem(problem, ins + body, instant=tuple(ins))
        fallback = sub.lower_bound_ticks()
        left = None if seconds is None else seconds - (time.perf_counter() - started)
        if left is not None and left <= 0:
            return fallback - len(ins), "skipped"
        limit = settings.time_limit if left is None else max(1e-3, min(settings.time_limit, left))
        out = solve_placement(sub, replace(settings, time_limit=limit))
        bound = fallback if out.bound is None else max(int(out.bound), fallback)
        return bound - len(ins), out.status

    total, entries, steps = 0, [], []
    for j, xs in enumerate(levels):
        last = j == len(levels) - 1
        found = [chunk_bound(x, entries, j * stride if j else -1) for x in xs]
        values = [b for b, _ in found]
        step = max(values) if last else min(values)
        total += step
        steps.append({"depth": None if last else (j + 1) * stride, "ticks": int(step), "chunks": len(found),
                      "optimal": sum(s == "optimal" for _, s in found)})
        entries = xs
    proven = all(s["optimal"] == s["chunks"] for s in steps)
    return int(total), {"steps": steps, "proven": proven, "seconds": time.perf_counter() - started}
