"""Exact window bounds: global lower bounds raised by CP-SAT optima of small windows.

The combinatorial families of `incsched.bounds` need no solver; this is where the pipeline spends
CP-SAT time on the bound instead of the answer. Each node's head and tail rise to the exact
optimum of a window of its nearest ancestors (descendants) (`incsched.solvers.cpsat.placement_bounds`),
and the families run again on those heads. It lives in `inc_ilp` because it drives a back end and
shares the run's budget and clock, as every other solver call does.
"""

from __future__ import annotations

import time
from dataclasses import replace

from ..bounds.placement import (
    ENERGETIC_WINDOW_MAX_NODES,
    energetic_heads,
    placement_bound_details,
    segment_sum_bound,
    transfer_heads,
    transfer_tails,
)
from ..problems.decompose import segments
from ..problems.placement import PlacementProblem
from ..solvers.cpsat.params import wall_cap
from ..solvers.cpsat.placement_bounds import window_bound
from ..solvers.cpsat.placement_queues import queue_bound

__all__ = ["placement_bound_cpsat"]

#: On a problem with cut nodes, the whole problem's windows get this share of the budget and the
#: segments the rest. With half each (before), the whole problem's windows never gave the bound on
#: the seven transformer-block instances of benchmarks/placement_gaps.py (tblock2_d8: 350,394
#: against the segments' 457,651), and the segments, starved, were cut by the wall clock on 8
#: devices: at 6 deterministic s (a 60-s run's), a tenth gave tblock3_d8 342,217 in 9.8 s where
#: half gave 326,816 in 15 s, cut; tblock2_d8 461,114 in 8.9 s against 457,651 in 12.9 s.
WHOLE_SHARE_WITH_SEGMENTS = 0.1


def placement_bound_cpsat(problem: PlacementProblem, settings, combinatorial: int | None = None, *,
                          energetic_max_nodes: int = ENERGETIC_WINDOW_MAX_NODES, flow: bool | None = None) -> tuple[int, dict]:
    """`placement_lower_bound` strengthened by exact CP-SAT windows (``incsched.solvers.cpsat.placement_bounds.window_bound``).

    Each node's head and tail are first raised by the exact optimum of a small window of its
    nearest ancestors (descendants), then every combinatorial family runs on those heads, on the
    whole problem and on each segment between cut nodes (identical segments solved once; the
    segments' half of the budget by size), and on a problem with one entry and one exit the
    order at its two ends (`incsched.solvers.cpsat.placement_queues.queue_bound`) raises it again.

    Parameters
    ----------
    problem : PlacementProblem
    settings : incsched.solvers.SolverSettings
        ``time_limit`` caps the whole computation (split between the whole problem and the
        segments): deterministic seconds in deterministic mode, so the bound never depends on the
        load, wall seconds otherwise; seed and determinism apply to every CP-SAT run.
    combinatorial : int, optional
        `placement_lower_bound` of ``problem``, when the caller has computed it already (seconds of
        pure Python on 10,000 ops): not computed again.
    energetic_max_nodes : int
        Heads are first raised by energy over ancestors (`energetic_heads`, about n^2) on
        problems and segments of at most this many nodes.
    flow : bool, optional
        Run `incsched.bounds.placement_flow.flow_bound` on the raised heads (default: on problems
        and segments of at most ``FLOW_MAX_NODES`` nodes, as `placement_bound_details`); False
        leaves it out (a benchmark's "before" column).

    Returns
    -------
    (int, dict)
        The bound in ticks (at least `placement_lower_bound`'s) and ``info``: ``families`` (each value),
        ``reproducible`` (deterministic settings and no window cut or skipped by the clock: the
        same bound on every rerun, whatever the load), ``work`` (CP-SAT deterministic seconds),
        ``seconds``, ``parts`` (the bound of the whole problem and of each segment bounded, by
        `PlacementProblem.signature` of its `subproblem`: inc-ilp's segment phase starts from them)
        and ``queued`` (the signatures whose `queue_bound` ran).
    """
    started = time.perf_counter()
    clock = started + (wall_cap(settings) if settings.deterministic else settings.time_limit)  # the user's clock
    capped = [False]
    spent = [0.0]  # of settings.time_limit: deterministic seconds in deterministic mode, else wall
    work = [0.0]  # CP-SAT deterministic seconds
    memo: dict[bytes, int] = {}
    queued: set[bytes] = set()  # problems whose two queues ran to the end (the segment phase need not run them again)

    def past_clock() -> bool:
        if time.perf_counter() < clock and not (settings.stop is not None and settings.stop.stopped):
            return False
        capped[0] = True  # the clock, not the budget, left a part with a weaker bound
        return True

    def strong(p: PlacementProblem, share: float) -> int:
        key = p.signature()
        if key in memo:
            return memo[key]
        if past_clock():
            return p.lower_bound_ticks()
        left = settings.time_limit - (spent[0] if settings.deterministic else time.perf_counter() - started)
        limit = max(1e-3, min(share, left))
        h, t = transfer_heads(p), transfer_tails(p)
        if p.n_nodes <= energetic_max_nodes:
            h, t = energetic_heads(p, h, should_stop=past_clock), energetic_heads(p, t, forward=False, should_stop=past_clock)
        # deterministic: the windows' wall cap is what is left of this call's clock, not a new one
        wall = {"wall_cap_s": max(clock - time.perf_counter(), 1e-3)} if settings.deterministic else {}
        wb, info = window_bound(p, replace(settings, time_limit=limit, **wall), head=h, tail=t)
        spent[0] += info["spent"]
        work[0] += info["work"]
        capped[0] = capped[0] or not info["reproducible"]
        det = placement_bound_details(p, segments=False, head=info["head"], tail=info["tail"], flow=flow, should_stop=past_clock)
        memo[key] = max(int(wb), det["bound"])
        if not past_clock():  # a fork-join segment: the order at its two ends (a no-op on other shapes)
            left = settings.time_limit - (spent[0] if settings.deterministic else time.perf_counter() - started)
            wall = {"wall_cap_s": max(clock - time.perf_counter(), 1e-3)} if settings.deterministic else {}
            qb, cut = queue_bound(p, replace(settings, time_limit=max(1e-3, min(share, left)), **wall), lower=memo[key])
            capped[0] = capped[0] or cut
            memo[key] = max(memo[key], qb)
            if not cut:
                queued.add(key)
        return memo[key]

    parts = segments(problem) if problem.n_nodes else [[]]
    n_parts = len(parts)
    # With cut nodes the segments' sum is the bound that counts: the whole problem's windows get a tenth.
    share = settings.time_limit * (WHOLE_SHARE_WITH_SEGMENTS if n_parts > 1 else 1)
    seg_share = settings.time_limit - share
    # the segments' part by size: a segment of one or two nodes needs next to nothing
    big = sum(len(nodes) for nodes in parts if len(nodes) > 2) or 1
    if combinatorial is None:
        combinatorial = placement_bound_details(problem, flow=flow, should_stop=past_clock)["bound"]
    families = {"combinatorial": int(combinatorial)}
    if problem.n_nodes and problem.n_devices > 1:
        families["windows"] = strong(problem, share)
        if n_parts > 1:
            families["window_segment_sum"] = segment_sum_bound(
                problem, lambda sub: strong(sub, seg_share * (sub.n_nodes / big if sub.n_nodes > 2 else 0.01)), past_clock)
    bound = max(families.values())
    return int(bound), {"families": families, "reproducible": bool(settings.deterministic and not capped[0]), "work": work[0],
                        "seconds": time.perf_counter() - started, "parts": dict(memo), "queued": queued}
