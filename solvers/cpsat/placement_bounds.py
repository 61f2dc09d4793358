"""Lower bounds on placement makespans from small exact CP-SAT relaxations around every node.

The combinatorial heads of `incsched.bounds.placement` decide, for each node separately, which of
its inputs share its device; they cannot see that sharing is transitive (two layer outputs on one
device put their producers' inputs there too), so on layered graphs (FFNN, chained matmuls)
each layer loses most of a transfer from the bound. Here each node's head is the exact optimum
(or CP-SAT's proven bound) of a *window*: the node and up to ``max_nodes`` of its nearest
ancestors, released no earlier than their current heads, on identical devices with every node's
fastest duration and every edge's cheapest transfer. Tails are the mirror over descendants.

Why a window bounds the real start: take any schedule of the real problem and keep only the
window's nodes, their devices and starts. Every kept node starts no earlier than its (valid)
head, kept edges still wait for their transfer when they cross, durations and transfers only
shrink under the fastest-duration / cheapest-transfer relaxation, and devices stay
one-at-a-time; so it is a schedule of the window problem and the node's start is at least the
window optimum. Visiting nodes in topological order lets every window use heads raised before.

This module imports nothing from ``incsched`` but its problem classes.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace

import numpy as np
from ortools.sat.python import cp_model

from incsched.problems.placement import PlacementProblem

from .. import SolverSettings
from .params import make_solver, wall_cap, wall_capped

__all__ = ["window_bound", "window_heads"]

#: Nodes per window besides the node itself: small enough that CP-SAT proves most windows in
#: well under a second on 8 devices.
MAX_WINDOW = 12

#: Seconds (deterministic in deterministic mode) of CP-SAT per window at most.
PER_WINDOW = 1.0

#: What a window costs besides its search, in deterministic seconds. CP-SAT's deterministic clock
#: counts the search only, while building and starting each small model takes far longer (measured
#: on chained matmul 3x3, 8 devices: 194 windows, 0.65 deterministic s of search, 3.6 s of wall), so
#: a budget in deterministic seconds alone let the bound take most of a short run's clock. Charged
#: per window solved, it keeps the budget near the wall time and still repeats on every machine.
WINDOW_OVERHEAD = 0.015

#: One window may take this many times an even split of the budget left over the windows left.
#: Uncapped, a few hard windows spent a 6-s budget on 22 of 168 (chained matmul 15x2, 4 devices:
#: window bound 512,079; at 4 or 8 shares 595,666, at 16 593,661); at 4 shares, a 0.3-s budget on
#: chained matmul 8x2, 8 devices starved every window (549,970 against 585,464 at 8 or uncapped).
FAIR_SHARES = 8.0


def _costs(problem: PlacementProblem) -> tuple[list[int], list[int]]:
    dmin = problem.durations().min(axis=1).astype(np.int64).tolist() if problem.n_nodes else []
    m, D = problem.graph.n_edges, problem.n_devices
    if D == 1 or m == 0:
        return dmin, [0] * m
    off = ~np.eye(D, dtype=bool)
    return dmin, problem.transfer_ticks()[:, off].min(axis=1).astype(np.int64).tolist()


def _chain_heads(problem, dmin, forward: bool) -> list[int]:
    """Longest path with free transfers (the starting heads when none are given)."""
    g = problem.graph
    order = g.topological_order().tolist()
    ptr, nbr = (g.pred_ptr, g.pred_idx) if forward else (g.succ_ptr, g.succ_idx)
    ptr, nbr = ptr.tolist(), nbr.tolist()
    out = [0] * g.n_nodes
    for v in (order if forward else order[::-1]):
        out[v] = max([out[u] + dmin[u] for u in nbr[ptr[v]:ptr[v + 1]]], default=0)
    return out


def window_heads(
    problem: PlacementProblem,
    settings: SolverSettings,
    head: list[int] | None = None,
    *,
    forward: bool = True,
    max_nodes: int = MAX_WINDOW,
    per_window: float = PER_WINDOW,
    budget: float | None = None,
) -> tuple[list[int], dict]:
    """Raise every node's head (``forward``) or tail by an exact CP-SAT window over its nearest ancestors (descendants).

    Parameters
    ----------
    problem : PlacementProblem
        Any devices and links (relaxed to identical devices with fastest durations and cheapest
        transfers between distinct devices).
    settings : SolverSettings
        Seed and determinism for each window's run; ``time_limit`` caps the whole pass, unless
        ``budget`` is given.
    head : list of int, optional
        Valid heads (tails) to start from, e.g. ``incsched.bounds.placement.transfer_heads``;
        default the longest path with free transfers.
    forward : bool
        False: tails over descendants (the time-reversed problem).
    max_nodes : int
        Window size besides the node.
    per_window : float
        CP-SAT seconds per window at most (its proven bound is used when it stops early).
    budget : float, optional
        What the pass may spend (default ``settings.time_limit``): deterministic seconds summed
        over its windows in deterministic mode, so which windows run never depends on the load;
        wall seconds otherwise. Nodes left when it is spent keep their heads.

    Returns
    -------
    (list of int, dict)
        The raised heads (each at least the input's) and ``info``: ``windows`` solved,
        ``cache_hits``, ``unproven`` (windows whose optimum was not proven: their bound was used),
        ``skipped`` (left when the budget was spent), ``spent`` (of the budget), ``work`` (CP-SAT
        deterministic seconds, plus `WINDOW_OVERHEAD` per window), ``wall_capped`` (a
        deterministic run cut, or a window skipped, by the wall clock), ``reproducible``
        (deterministic and nothing cut by the clock: the same heads on rerun).
    """
    g = problem.graph
    n, D = g.n_nodes, problem.n_devices
    dmin, cross = _costs(problem)
    head = _chain_heads(problem, dmin, forward) if head is None else [int(h) for h in head]
    info = {"windows": 0, "cache_hits": 0, "unproven": 0, "skipped": 0, "spent": 0.0, "work": 0.0, "wall_capped": False,
            "reproducible": bool(settings.deterministic), "seconds": 0.0}
    if n == 0 or D == 1:
        return head, info
    started = time.perf_counter()
    budget = settings.time_limit if budget is None else budget
    clock = started + wall_cap(settings)  # the user's clock (deterministic mode's wall cap)
    work = 0.0  # deterministic seconds of the windows solved

    def spent() -> float:
        return work if settings.deterministic else time.perf_counter() - started

    order = g.topological_order().tolist()
    if forward:
        bptr, bnbr, beid = g.pred_ptr.tolist(), g.pred_idx.tolist(), g.pred_edge.tolist()
    else:
        order = order[::-1]
        bptr, bnbr, beid = g.succ_ptr.tolist(), g.succ_idx.tolist(), g.succ_edge.tolist()
    pos = {v: i for i, v in enumerate(order)}
    cache: dict[tuple, int] = {}
    # A node whose one input has no other consumer gains nothing from a window.
    wanted = [v for v in order if bptr[v] < bptr[v + 1]
              and not (len(set(bnbr[bptr[v]:bptr[v + 1]])) == 1 and _fanout(g, bnbr[bptr[v]], forward) == 1)]
    left_to_visit = len(wanted)
    wanted = set(wanted)
    for v in order:
        preds = bnbr[bptr[v]:bptr[v + 1]]
        if not preds:
            continue
        # v starts after each input ends: the raise of an ancestor reaches v even where v's own
        # window is skipped (or not wanted), so a pass the budget cuts short still lifts the sinks.
        head[v] = max(head[v], max(head[u] + dmin[u] for u in preds))
        if v not in wanted:
            continue
        left_to_visit -= 1
        if spent() >= budget:
            info["skipped"] += 1
            continue
        if (settings.deterministic and time.perf_counter() >= clock) or (settings.stop is not None and settings.stop.stopped):
            # The clock (or Ctrl-C), not the budget, left this node: it may differ on rerun. Building
            # the windows left after the caller's stop took seconds of a 60-s run under load.
            info["skipped"] += 1
            info["wall_capped"] = True
            continue
        nodes = _nearest(v, bptr, bnbr, max_nodes)
        nodes.sort(key=lambda u: pos[u])  # a topological order of the window (v last)
        idx = {u: i for i, u in enumerate(nodes)}
        edges = []
        for w in nodes:
            for k in range(bptr[w], bptr[w + 1]):
                u = bnbr[k]
                if u in idx:
                    edges.append((idx[u], idx[w], int(cross[beid[k]])))
        base = min(head[u] for u in nodes)
        rel = [head[u] - base for u in nodes]
        dur = [dmin[u] for u in nodes]
        key = (min(D, len(nodes)), tuple(dur), tuple(rel), tuple(sorted(edges)))
        if key in cache:
            info["cache_hits"] += 1
            value = cache[key]
        else:
            # At most FAIR_SHARES even splits of what is left: the pass reaches the last nodes.
            fair = FAIR_SHARES * (budget - spent()) / (left_to_visit + 1)
            value, proven, capped, used = _window_start(
                dur, rel, edges, min(D, len(nodes)), _window_settings(settings, min(per_window, fair, budget - spent()), clock))
            work += used + WINDOW_OVERHEAD
            cache[key] = value
            info["windows"] += 1
            info["unproven"] += 0 if proven else 1
            info["wall_capped"] = info["wall_capped"] or capped
        head[v] = max(head[v], base + value)
    info["seconds"] = time.perf_counter() - started
    info["spent"], info["work"] = spent(), work
    info["reproducible"] = bool(settings.deterministic and not info["wall_capped"])
    return head, info


def _window_settings(settings: SolverSettings, per_window: float, clock: float) -> SolverSettings:
    """One window's limits: ``per_window`` (deterministic seconds in deterministic mode, so the
    answer does not depend on the machine's load), cut by the wall clock at ``clock`` (reported
    as ``wall_capped`` when it bites)."""
    per_window = max(per_window, 1e-3)
    remaining = max(1e-3, clock - time.perf_counter())
    if settings.deterministic:
        extra = {"wall_cap_s": remaining} if hasattr(settings, "wall_cap_s") else {}
        return replace(settings, time_limit=per_window, max_deterministic_time=per_window, **extra)
    return replace(settings, time_limit=min(per_window, remaining), max_deterministic_time=None)


def _fanout(g, u: int, forward: bool) -> int:
    return int(g.out_degree[u] if forward else g.in_degree[u])


def _nearest(v: int, ptr, nbr, most: int) -> list[int]:
    """v and up to ``most`` of its nearest ancestors (breadth first along ``ptr``/``nbr``)."""
    seen, out, queue = {v}, [v], deque([v])
    while queue and len(out) < most + 1:
        w = queue.popleft()
        for u in nbr[ptr[w]:ptr[w + 1]]:
            if u not in seen:
                seen.add(u)
                out.append(u)
                queue.append(u)
                if len(out) >= most + 1:
                    break
    return out


def _window_start(dur, rel, edges, D, settings) -> tuple[int, bool, bool]:
    """Least start of the last node of a window (releases ``rel``), proven bound; (value, proven, wall-capped)."""
    n = len(dur)
    target = n - 1
    model = cp_model.CpModel()
    horizon = max(rel) + sum(dur)  # everything on one device in this order after the last release
    start = [model.NewIntVar(rel[u], horizon, f"s{u}") for u in range(n)]
    x = [[model.NewBoolVar(f"x{u},{d}") if d <= u else None for d in range(D)] for u in range(n)]
    per_device = [[] for _ in range(D)]
    for u in range(n):
        lits = [lit for lit in x[u] if lit is not None]
        model.AddExactlyOne(lits)
        for d, lit in enumerate(x[u]):
            if lit is None:
                continue
            end = model.NewIntVar(rel[u] + dur[u], horizon + dur[u], f"e{u},{d}")
            per_device[d].append(model.NewOptionalIntervalVar(start[u], dur[u], end, lit, f"i{u},{d}"))
    for d in range(D):
        if len(per_device[d]) > 1:
            model.AddNoOverlap(per_device[d])
    # Symmetry: devices are interchangeable, so label them by first use in the window's order:
    # node u uses a device no higher than one above every device used before it.
    for u in range(n):
        for d in range(1, D):
            if x[u][d] is None:
                continue
            # x[u][d] -> some earlier node on d - 1
            earlier = [x[w][d - 1] for w in range(u) if x[w][d - 1] is not None]
            if earlier:
                model.AddBoolOr(earlier).OnlyEnforceIf(x[u][d])
            else:
                model.Add(x[u][d] == 0)
    for u, w, c in edges:
        if c <= 0:
            model.Add(start[w] >= start[u] + dur[u])
            continue
        same = model.NewBoolVar(f"same{u},{w}")
        for d in range(D):
            a, b = x[u][d], x[w][d]
            if a is None and b is None:
                continue
            if a is None:
                model.Add(b == 0).OnlyEnforceIf(same)
            elif b is None:
                model.Add(a == 0).OnlyEnforceIf(same)
            else:
                model.Add(a == b).OnlyEnforceIf(same)
        model.Add(start[w] >= start[u] + dur[u]).OnlyEnforceIf(same)
        model.Add(start[w] >= start[u] + dur[u] + c).OnlyEnforceIf(same.Not())
    model.Minimize(start[target])
    solver = make_solver(settings)
    code = solver.solve(model)
    if code == cp_model.INFEASIBLE:  # cannot happen (one device in order is feasible); stay valid
        return 0, False, False, solver.deterministic_time
    bound = int(np.floor(solver.BestObjectiveBound() + 1e-9)) if code in (cp_model.OPTIMAL, cp_model.FEASIBLE) else rel[target]
    if code == cp_model.OPTIMAL:
        bound = int(round(solver.ObjectiveValue()))
    return max(bound, rel[target]), code == cp_model.OPTIMAL, wall_capped(settings, solver), solver.deterministic_time


def window_bound(
    problem: PlacementProblem,
    settings: SolverSettings,
    *,
    head: list[int] | None = None,
    tail: list[int] | None = None,
    max_nodes: int = MAX_WINDOW,
    per_window: float = PER_WINDOW,
) -> tuple[int, dict]:
    """max over nodes of window head + fastest duration + window tail: a lower bound on the makespan.

    Parameters
    ----------
    problem : PlacementProblem
    settings : SolverSettings
        ``time_limit`` caps the whole computation (heads get the first half, tails the rest).
    head, tail : list of int, optional
        Valid starting heads and tails (e.g. ``incsched.bounds.placement.transfer_heads`` /
        ``transfer_tails``); default the free-transfer longest paths.
    max_nodes, per_window :
        As in `window_heads`.

    Returns
    -------
    (int, dict)
        The bound in ticks (at least ``problem.lower_bound_ticks()``) and ``info`` with the raised
        ``head`` and ``tail`` lists (valid: feed them to ``incsched.bounds.placement.placement_lower_bound``),
        the per-direction window statistics and ``wall_capped``.
    """
    started = time.perf_counter()
    trivial = problem.lower_bound_ticks()
    if problem.n_nodes == 0:
        return 0, {"head": [], "tail": [], "spent": 0.0, "work": 0.0, "wall_capped": False, "reproducible": bool(settings.deterministic)}
    dmin, _ = _costs(problem)
    h, hinfo = window_heads(problem, settings, head, forward=True, max_nodes=max_nodes, per_window=per_window,
                            budget=settings.time_limit / 2)
    if settings.deterministic and settings.wall_cap_s is not None:  # the tails get the wall the heads left, not a cap of their own
        settings = replace(settings, wall_cap_s=max(settings.wall_cap_s - (time.perf_counter() - started), 1e-3))
    t, tinfo = window_heads(problem, settings, tail, forward=False, max_nodes=max_nodes, per_window=per_window,
                            budget=settings.time_limit - hinfo["spent"])
    bound = max(trivial, max(a + d + b for a, d, b in zip(h, dmin, t)))
    info = {"head": h, "tail": t, "heads": hinfo, "tails": tinfo, "spent": hinfo["spent"] + tinfo["spent"], "work": hinfo["work"] + tinfo["work"],
            "wall_capped": hinfo["wall_capped"] or tinfo["wall_capped"],
            "reproducible": hinfo["reproducible"] and tinfo["reproducible"],
            "seconds": time.perf_counter() - started}
    return int(bound), info
