"""Inc-ILP on the placement problem: incumbent -> segments, or rounds and widening windows -> proof.

    run(ctx, method)
      portfolio incumbent       the policy, HEFT and critical-path list, then local search (incumbent.py)
      combinatorial_bound(ctx)  every combinatorial family, after the incumbent and on the clock
      strengthen_bound(ctx)     exact CP-SAT windows around every node raise the global bound
      segments(ctx)             graphs with cut nodes: each stretch between two searched on its own
                                from the incumbent's schedule of it, glued (never worse than the
                                incumbent), then bounded with what is left; the bounds add up; then rounds
      or rounds(ctx)            large neighbourhoods, one at a time: the ops the policy is least
                                sure of (with their data partners), one pair of devices (their
                                twins under relabelling searched once), one time slice across all
                                devices; every other op held near its start tick, so that most
                                rounds close in a fraction of a deterministic second; re-centred on
                                every improvement, until a whole cycle improves nothing. Before the
                                windows, since they improve more per second: one window solve took
                                all of a 60-s run's search on a loaded 2-core machine
                                (benchmarks/placement_search.py)
         windows(ctx)           each op may move to the devices its neighbours use (hops=1), solved
                                hinted; re-centred while it improves, widened by a hop once it
                                settles, until the window holds every device
         ranked(ctx)            each op may take the devices the policy ranks first (as many as its
                                confidence needs) with starts near the incumbent's; the start
                                slack doubles while the optimum touches its edge or improves
      prove(ctx)                the full model, hinted by the best, all that is left

Every answer is executed by the independent simulator in its solved order and must reproduce the
makespan CP-SAT claims before it is kept.

Each phase is sized in deterministic work (the work limit, else the time limit read as work).
Where no work limit is given, the clock is the budget, and each search is also cut at its share of
the time limit in wall seconds (rounds at the tuning's ``placement_round_wall_factor`` times theirs): a deterministic second
of these models passed 25-80 wall seconds under load, and one phase took the rest of a run.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import numpy as np

from incsched.solvers import SolverOutput, SolverSettings
from incsched.solvers.cpsat.placement import solve_placement
from incsched.solvers.cpsat.placement_segments import segment_bound, segment_proof_bound

from ..baselines.placement_local import local_search
from ..bounds import placement_lower_bound
from .exact_bounds import placement_bound_cpsat
from ..baselines.list_scheduling import list_schedule, mean_costs
from ..evaluate.simulate import Schedule, simulate
from ..problems.decompose import compose, cut_nodes, decomposable, gluable, segments as cut_segments, subproblem
from ..problems import Placement, PlacementError, PlacementProblem, PlacementWindow
from ..windows.relax import device_pair, free_in, placement_window, ranked_devices, start_window, time_slice, uncertain_nodes
from .context import Context
from .incumbent import PLACEMENT_PRESCHEDULERS, local_search_clock, portfolio, run_prescheduler, search_evaluations
from ..errors import SolverDisagreement

__all__ = ["run", "make_check", "solve_cpsat", "round_window"]

log = logging.getLogger(__name__)

def make_check(problem: PlacementProblem):
    """The independent simulator as ``check(placement, claimed=None) -> makespan``.

    The placement runs in its solved order; a makespan other than the solver's claim, or a solver's
    placement over a device's memory, raises `SolverDisagreement`; a heuristic's placement over a
    device's memory gives None (never kept).
    """

    def check(placement: Placement, claimed=None) -> int:
        sched = simulate(problem, placement, "ordered")
        if claimed is not None and sched.makespan != claimed:
            raise SolverDisagreement(f"CP-SAT claimed makespan {claimed} but the simulator finds {sched.makespan}")
        if not sched.memory_ok:
            if claimed is not None:
                raise SolverDisagreement(f"placement exceeds device memory: {sched.memory_violations}")
            return None  # a heuristic over a device's memory: never kept
        return int(sched.makespan)

    return check


def solve_cpsat(problem: PlacementProblem, settings: SolverSettings, window: PlacementWindow | None = None,
                hint: Placement | Schedule | None = None, *, window_symmetry: bool = False) -> SolverOutput:
    """The CP-SAT placement model (`incsched.solvers.cpsat.placement.solve_placement`) with what it is handed.

    The hint is executed in its own order (one that deadlocks is ignored, ``info["hint_note"]``
    says why), HEFT over the window's devices bounds the horizon, and the answer is run in its
    solved order as early as possible: a solution short of optimal may keep idle slack, and
    running its order as soon as possible (what a runtime does) can only end earlier.

    Parameters
    ----------
    problem, settings, window
        As for `solve_placement`.
    hint : Placement or Schedule, optional
        An incumbent to start from.
    window_symmetry : bool
        Break the symmetry of identical devices the window cannot tell apart (`solve_placement`).

    Returns
    -------
    SolverOutput
        As `solve_placement`'s, with ``start`` the executed start ticks and ``objective`` their
        makespan: never above CP-SAT's objective (``info["cpsat_objective"]``, raw starts in
        ``info["cpsat_start"]``) and equal to it when proven optimal.
    """
    t0 = time.perf_counter()
    allowed = problem.allowed_devices()
    if window is not None:
        window.check(problem)
        if window.allowed is not None:
            allowed = allowed & window.allowed
    heuristic = None
    node_cost, edge_cost = mean_costs(problem)
    try:
        heft = list_schedule(problem, problem.graph.bottom_level(node_cost, edge_cost), insertion=True, allowed=allowed)
        heuristic = simulate(problem, heft, "ordered")
    except PlacementError as exc:
        log.debug("no heuristic horizon: %s", exc)
    executed_hint, note = None, None
    if hint is not None:
        try:
            executed_hint = simulate(problem, hint.to_placement() if isinstance(hint, Schedule) else hint, "ordered")
        except PlacementError as exc:
            log.warning("placement hint ignored: %s", exc)
            note = f"ignored: {exc}"
    out = solve_placement(problem, settings, window, executed_hint, heuristic=heuristic, window_symmetry=window_symmetry)
    if note is not None:
        out.info["hint_note"] = note
    if out.assignment is None:
        return replace(out, wall_time=time.perf_counter() - t0)
    executed = simulate(problem, Placement(out.assignment, out.info["order"]), "ordered")
    objective = float(min(executed.makespan, out.objective))
    return replace(out, start=executed.start, objective=objective, wall_time=time.perf_counter() - t0)


def run(ctx: Context, method: str, preschedule=None) -> None:
    """Solve ``ctx.problem`` by ``method``, leaving the best answer and bound in ``ctx``."""
    p: PlacementProblem = ctx.problem
    # max(critical path, work / devices) at once; the other families after the incumbent, since
    # on 10,000 ops they take seconds of pure Python that a short clock needs for an answer first.
    ctx.raise_bound(int(p.lower_bound_ticks()), "combinatorial", "bounds")
    if method in PLACEMENT_PRESCHEDULERS:
        run_prescheduler(ctx, method, PLACEMENT_PRESCHEDULERS)
        combinatorial_bound(ctx)
        return
    if method == "ilp":
        combinatorial_bound(ctx)
        prove(ctx)
        return
    if method == "ilp-hinted":
        portfolio(ctx, "placement", policy=False)
        combinatorial_bound(ctx)
        prove(ctx)
        return
    if preschedule is not None:
        run_prescheduler(ctx, preschedule, PLACEMENT_PRESCHEDULERS)
    else:
        portfolio(ctx, "placement")
    combinatorial = combinatorial_bound(ctx)
    if ctx.best is None:  # no heuristic fits the memories: the exact model may
        if not ctx.stopped():
            prove(ctx)
        return
    if ctx.stopped() or ctx.best_value <= ctx.lower_bound:
        return
    strengthen_bound(ctx, combinatorial)
    if ctx.stopped() or ctx.best_value <= ctx.lower_bound:
        return
    if decomposable(p):
        # Segments first: their bound counts only when every segment was solved, and rounds
        # before them left it out (2-block transformer, 12 MLP tiles, D=4, work 3: bound 461669
        # against 500477 with the rounds after them; benchmarks/placement_search.py).
        segments(ctx)
        rounds(ctx)
    else:
        if gluable(p):  # devices of several kinds: segments searched with their cut nodes kept
            segments(ctx)
        rounds(ctx)
        windows(ctx)
        ranked(ctx)
    if not ctx.stopped() and ctx.best_value > ctx.lower_bound:
        prove(ctx)


def _model_settings(ctx: Context, work: float | None = None, *, wall_share: float | None = None) -> SolverSettings:
    """Settings of a solve of the placement model (`Context.settings`), without CP-SAT's LP
    (`Tuning.placement_search_linearization`): over the model's big-M disjunctions its bound is
    weak and its time is the search's. Every such solve here is hinted; the unhinted chained
    matmul 4x2 on 2 devices found no placement in 30 deterministic s without the LP."""
    return ctx.settings(work, wall_share=wall_share, linearization=ctx.tuning.placement_search_linearization)


def prove(ctx: Context) -> None:
    """The full model, hinted by the best placement so far, given all that is left."""
    with ctx.timed("proof"):
        out = solve_cpsat(ctx.problem, _model_settings(ctx), hint=ctx.best)
    ctx.charge(out)
    ctx.record("full", status=out.status, objective=out.objective, bound=out.bound)
    if out.status == "infeasible":
        ctx.prove_infeasible(out.info.get("reason"))
        return
    _take(ctx, out, "full")
    if out.status == "optimal":
        ctx.prove_optimal()
        ctx.raise_bound(ctx.best_value, "cpsat-full", "full")
    elif out.bound is not None:
        ctx.raise_bound(int(out.bound), "cpsat-full", "full")


def combinatorial_bound(ctx: Context) -> int | None:
    """Raise the global bound with every combinatorial family (`placement_lower_bound`), on the clock.

    Returns the bound when every family ran, else None: families the clock leaves out only
    weaken the bound, and the run then ends on ``time``.
    """
    if ctx.stopped():
        return None
    with ctx.timed("bound"):
        bound = int(placement_lower_bound(ctx.problem, should_stop=lambda: ctx.stopped() is not None))
    ctx.raise_bound(bound, "combinatorial", "bounds")
    if ctx.stopped():  # the clock may have cut a family: the bound need not repeat
        ctx.stop.stop(ctx.stopped())
        return None
    return bound


def strengthen_bound(ctx: Context, combinatorial: int | None = None) -> None:
    """Raise the global bound with exact CP-SAT windows around every node (`placement_bound_cpsat`).

    Each node's earliest start and tail become the optimum of a small window of its nearest
    ancestors or descendants, and every combinatorial family reruns on them (measured on the
    dataflow graphs with transfers 4x compute, 8 devices: certified gaps 51-67% -> 16-25%).
    ``combinatorial``: `combinatorial_bound`'s value, not computed twice.
    """
    with ctx.timed("bound"):
        share = ctx.tuning.placement_bound_share  # of the time limit in wall seconds too (times the factor), where the clock is the budget (38 s of a 60-s run under load)
        wall_share = share * ctx.tuning.placement_bound_wall_factor
        # One deterministic worker in either mode: a window is too small for a second worker to
        # help, and a wall budget counts the pure-Python families against the windows (2 workers,
        # chained matmul 15x2 on 4 devices: 6 wall s gave 516,833-540,594, 6 deterministic s 595,666).
        settings = ctx.settings(share * ctx.nominal_work, wall_share=wall_share, deterministic=True)
        bound, info = placement_bound_cpsat(ctx.problem, settings, combinatorial, energetic_max_nodes=ctx.tuning.placement_energetic_max_nodes)
    # a window the clock cut or skipped: the bound may differ on rerun
    ctx.spend(info["work"], wall_capped=ctx.deterministic and not info["reproducible"])
    ctx.record("bound", bound=bound, families=info["families"])
    ctx.raise_bound(bound, "cpsat-windows", "bound")
    ctx.part_bounds, ctx.queued_parts = info["parts"], info["queued"]  # the segment phase starts from these


def windows(ctx: Context) -> None:
    """Windows of devices around the best placement, re-centred on improvement, widened when settled."""
    p: PlacementProblem = ctx.problem
    hops, solves = 1, 0
    while solves < ctx.tuning.placement_max_windows and not ctx.stopped() and ctx.best_value > ctx.lower_bound:
        window = placement_window(p, ctx.best.device, hops=hops)
        if window.allowed.sum(1).min() == p.n_devices:
            return  # the window holds every device: the full model is next anyway
        with ctx.timed("window"):
            out = solve_cpsat(p, _model_settings(ctx, ctx.tuning.placement_window_share * ctx.nominal_work, wall_share=ctx.tuning.placement_window_share),
                              window=window, hint=ctx.best)
        ctx.charge(out)
        solves += 1
        ctx.record("window", hops=hops, status=out.status, objective=out.objective,
                   devices_per_node=float(window.allowed.sum(1).mean()))
        improved = _take(ctx, out, f"window hops={hops}")
        if out.status == "optimal" and ctx.best_value == out.objective:
            ctx.settle_window()
        if improved:
            continue  # re-centred on the better placement, same width
        if out.status != "optimal":
            return  # the window is too hard for its share: the full model takes over
        hops += 1


def _open(ctx: Context) -> bool:
    """Whether there is still something to search for: time, work and a gap left."""
    return not ctx.stopped() and ctx.best_value > ctx.lower_bound


def _executed(ctx: Context) -> Schedule:
    """The best placement as the simulator runs it (start and end ticks)."""
    return simulate(ctx.problem, ctx.best, "ordered")


def ranked(ctx: Context) -> None:
    """Windows of the devices the learned policy ranks first, with starts near the incumbent's.

    The policy reads the incumbent's own schedule (`device_preferences`: teacher-forced decoding)
    and each op keeps its device plus those the policy ranks first until they cover `Tuning.placement_ranked_mass`
    of its probability. Starts may move `Tuning.placement_ranked_slack` of the makespan either way; where the optimum
    improves or touches a start's edge the window is re-centred and its slack doubled. Runs only
    where the portfolio ran the policy (its load is paid for), so short budgets skip it by rule.
    """
    p: PlacementProblem = ctx.problem
    if not _open(ctx) or not _policy_loaded(ctx):
        return
    from ..policy.placement_decoder import device_preferences  # loaded already by the portfolio

    slack = max(int(ctx.tuning.placement_ranked_slack * ctx.best_value), 1)
    for _ in range(ctx.tuning.placement_max_ranked):
        if not _open(ctx):
            return
        sched = _executed(ctx)
        with ctx.timed("ranked"):
            best = Placement(ctx.best.device, ctx.best.order, start=sched.start)
            allowed = ranked_devices(p, best.device, device_preferences(p, best), mass=ctx.tuning.placement_ranked_mass)
            lo, hi = start_window(sched.start, slack)
            window = PlacementWindow(allowed, lo, hi)
            out = solve_cpsat(p, _model_settings(ctx, ctx.tuning.placement_ranked_share * ctx.nominal_work, wall_share=ctx.tuning.placement_ranked_share),
                              window=window, hint=best)
        ctx.charge(out)
        touched = _touches(out, lo, hi)
        ctx.record("ranked", slack=slack, status=out.status, objective=out.objective, touched=touched,
                   devices_per_node=float(allowed.sum(1).mean()))
        improved = _take(ctx, out, "ranked")
        if not (improved or touched):
            return  # settled inside: a wider start range is left to the rounds and the full model
        slack *= 2


def _policy_loaded(ctx: Context) -> bool:
    """The portfolio ran the policy (a log line says so): its weights are in memory and its decoder compiled."""
    return any(step["phase"] == "incumbent" and "rl" in (step.get("scores") or {}) for step in ctx.steps)


def _touches(out: SolverOutput, lo, hi) -> bool:
    """Whether CP-SAT's answer puts some op at an edge of its start range that could have moved."""
    raw = out.info.get("cpsat_start")
    if raw is None:
        return False
    raw = np.asarray(raw, dtype=np.int64)
    return bool(np.any((raw == lo) & (lo > 0)) or np.any(raw == hi))


def rounds(ctx: Context) -> None:
    """Large-neighbourhood rounds: free the policy's doubts, one pair of devices, or one time slice, at a time.

    Where the portfolio ran the policy, a cycle opens with its doubts: the ops whose two likeliest
    devices (`device_preferences` along the incumbent the rounds start from) are closest in
    probability, each with its data partners, may take any device (`uncertain_nodes`). A pair
    round lets the ops of two devices trade places (every other op keeps its device; the two
    devices are then interchangeable, and each split of their ops is searched once, not once per
    labelling); a slice round lets the ops running in one stretch of the schedule take any device.

    The freed ops may start within `Tuning.placement_round_slack` of the makespan of their
    incumbent start; every other op within `Tuning.placement_round_fixed_slack`, which keeps
    its place in its device's order. Left at the wide slack, the held ops' orders were open too,
    and no 24-op round on a 200-op graph closed in 0.3 deterministic seconds; held, most close in
    0.00-0.06 and improved as much or more (24-op sets on a 196-op FFNN and a 205-op transformer).
    Each round is solved hinted by the best and charged the work it used; an improvement
    re-centres the neighbourhoods on the new best and the cycle goes on from the next one; a whole
    cycle without one, or `Tuning.placement_max_misses` rounds in a row that neither improve nor
    prove their neighbourhood, end the rounds.
    """
    p: PlacementProblem = ctx.problem
    if p.n_devices < 2 or not _open(ctx):
        return
    t = ctx.tuning
    spent, per_round, share = 0.0, t.placement_round_share * ctx.nominal_work, t.placement_rounds_share * ctx.nominal_work
    preference = _round_preferences(ctx)
    done = misses = cursor = 0
    while _open(ctx):
        # The neighbourhoods and start ranges around the best placement, until it improves.
        sched = _executed(ctx)
        hoods = list(_neighbourhoods(ctx, sched, preference))
        improved = False
        for _ in range(len(hoods)):
            name, free, devices = hoods[cursor % len(hoods)]
            cursor += 1
            if not _open(ctx):
                return
            if spent + per_round > share:
                ctx.record("rounds", rounds=done, note="their share of the budget is spent")
                return
            window = round_window(ctx, sched, free, devices)
            with ctx.timed("rounds"):
                out = solve_cpsat(p, _model_settings(ctx, per_round, wall_share=t.placement_round_wall_factor * t.placement_round_share), window=window,
                                  hint=ctx.best, window_symmetry=True)
            ctx.charge(out)
            spent += min(float(out.info.get("deterministic_time") or per_round), per_round)
            done += 1
            log.debug("round %s: %d free, %s %s (best %s), %.3f det s, %.2f s build + %.2f s search", name, int(free.sum()),
                      out.status, out.objective, ctx.best_value, out.info.get("deterministic_time") or 0.0,
                      out.info.get("build_seconds") or 0.0, out.info.get("solve_seconds") or 0.0)
            if _take(ctx, out, f"round {name}"):
                ctx.record("round", neighbourhood=name, free=int(free.sum()), objective=ctx.best_value)
                improved, misses = True, 0
                break  # re-centre: the neighbourhoods follow the new best
            misses = 0 if out.status == "optimal" else misses + 1
            if misses >= t.placement_max_misses:
                ctx.record("rounds", rounds=done, note=f"{misses} rounds in a row neither improved nor proved their neighbourhood")
                return
        if not improved:
            ctx.record("rounds", rounds=done, note="a whole cycle improved nothing")
            return


def round_window(ctx: Context, sched: Schedule, free, devices=None) -> PlacementWindow:
    """One round's window around the best placement (executed as ``sched``): the ``free`` ops
    (bool [n]) may take ``devices`` (default any) and start within `Tuning.placement_round_slack`
    of the makespan of their start; every other op keeps its device and starts within
    `Tuning.placement_round_fixed_slack` of its own."""
    t = ctx.tuning
    free = np.asarray(free, dtype=bool)
    lo, hi = start_window(sched.start, max(int(t.placement_round_slack * ctx.best_value), 1))
    held_lo, held_hi = start_window(sched.start, int(t.placement_round_fixed_slack * ctx.best_value))
    return PlacementWindow(free_in(ctx.problem, ctx.best.device, free, devices), np.where(free, lo, held_lo), np.where(free, hi, held_hi))


def _round_preferences(ctx: Context) -> np.ndarray | None:
    """The policy's device probabilities along the best placement, for the doubt rounds (None: no
    doubt rounds, or the portfolio did not run the policy, whose load the rounds do not pay)."""
    if not ctx.tuning.placement_doubt_rounds or not _policy_loaded(ctx):
        return None
    from ..policy.placement_decoder import device_preferences  # loaded already by the portfolio

    with ctx.timed("rounds"):
        return device_preferences(ctx.problem, Placement(ctx.best.device, ctx.best.order, start=_executed(ctx).start))


def _neighbourhoods(ctx: Context, sched: Schedule, preference: np.ndarray | None = None):
    """The rounds of one cycle: the policy's doubts, device pairs (most unequal busy time first), time slices."""
    p: PlacementProblem = ctx.problem
    device = np.asarray(ctx.best.device)
    if preference is not None:
        for i, free in enumerate(uncertain_nodes(p, preference, size=ctx.tuning.placement_doubt_nodes,
                                                 count=ctx.tuning.placement_doubt_rounds)):
            yield f"doubts {i}", free, None
    busy = np.bincount(device, weights=(sched.end - sched.start), minlength=p.n_devices)
    pairs = sorted(((a, b) for a in range(p.n_devices) for b in range(a + 1, p.n_devices)),
                   key=lambda ab: (-abs(busy[ab[0]] - busy[ab[1]]), ab))
    for a, b in pairs:
        devices = np.zeros(p.n_devices, dtype=bool)
        devices[[a, b]] = True
        yield f"devices {a},{b}", device_pair(device, a, b), devices
    # Slices of about ctx.tuning.placement_slice_nodes ops by start order, each overlapping the next by half.
    order = np.argsort(sched.start, kind="stable")
    step = max(ctx.tuning.placement_slice_nodes // 2, 1)
    for first in range(0, max(len(order) - step, 1), step):
        chosen = order[first:first + ctx.tuning.placement_slice_nodes]
        lo, hi = int(sched.start[chosen].min()), int(sched.end[chosen].max())
        yield f"slice {lo}-{hi}", time_slice(sched.start, sched.end, lo, hi), None


def _take(ctx: Context, out: SolverOutput, phase: str) -> bool:
    if out.assignment is None:
        return False
    order = tuple(tuple(seq) for seq in out.info["order"])
    candidate = Placement(out.assignment, order, start=out.start, method="cpsat")
    return ctx.improve(candidate, ctx.check(candidate, out.objective), phase)


def segments(ctx: Context) -> None:
    """Solve each stretch between cut nodes on its own, glue the answers, and add up their bounds.

    A cut node (a norm or residual add that everything precedes or follows) runs alone, so a
    segment between two of them is a placement problem of its own: a 40-60-op model that CP-SAT
    searches far better than the whole graph. Timed from the end of the entry cut node (made
    instant in the segment's problem), segment optima add up to a bound on the whole makespan:
    ``sum(segment bounds) - (segments with an entry cut node)`` ticks.

    Two passes. *Search*: each segment starts from the incumbent's own schedule of it (local search
    from there hints CP-SAT), and one the clock leaves unsolved keeps that schedule, so the glued
    answer improves on the incumbent wherever a segment did. *Bounds*: the relaxation and the
    proof probes of each segment, with what is left; one left out keeps its simple bound, and the
    sum still bounds. Where the clock is the budget, the phase gets its share of the time left and
    each segment, in each pass, its part by size of what the pass has left when it starts: a slow
    early segment (58 ops on 8 devices: 20 s of a 60-s run under load) used to leave the later ones
    unsolved, and the sum of bounds, which counts only on every segment, then went unused.
    """
    p: PlacementProblem = ctx.problem
    seg_nodes = cut_segments(p)
    subs = [subproblem(p, nodes, instant=(nodes[0],) if i > 0 else ()) for i, nodes in enumerate(seg_nodes)]
    # Devices of several kinds: a segment's optimum depends on where its cut nodes sit, so each
    # segment keeps them on the incumbent's devices (`_pinned`) and no bound is read from it.
    identical = len(p.identical_devices) == 1  # the caller checked the rest (`decomposable` / `gluable`)
    cuts = set() if identical else set(cut_nodes(p))  # only pinned where devices differ
    # Repeated blocks give identical segments: each is solved once, with the work of all its copies.
    keys = [sub.signature() if identical else bytes([i % 256, i // 256]) for i, sub in enumerate(subs)]
    unique = {key: (nodes, sub) for nodes, sub, key in zip(seg_nodes, subs, keys)}
    weight = {key: len(nodes) * keys.count(key) for key, (nodes, _) in unique.items()}
    big = sum(w for key, w in weight.items() if len(unique[key][0]) > 2)
    work = {key: max(ctx.nominal_work * ctx.tuning.placement_segment_share * w / big, 1e-3) for key, w in weight.items()}
    t = ctx.tuning
    phase_end = ctx.elapsed() + t.placement_segment_share * ctx.wall_left() if ctx.clock_is_budget else None
    # The bounds pass has only the probes when the bound phase ran every segment's queues (see below).
    relaxations_due = any(key not in ctx.queued_parts for key, (nodes, _) in unique.items() if len(nodes) > 2)
    search_share = t.placement_segment_search_share if relaxations_due else t.placement_segment_search_share_queued
    search_end = None if phase_end is None else ctx.elapsed() + search_share * (phase_end - ctx.elapsed())

    def wall_share(key, todo: list, end) -> float:
        """Where the clock is the budget, the segment's part by size of the pass's time left, as a share of the limit."""
        if end is None:
            return t.placement_segment_share * weight[key] / big
        seconds = (end - ctx.elapsed()) * weight[key] / max(sum(weight[k] for k in todo), 1)
        return max(seconds, t.placement_segment_min_seconds) / ctx.time_limit

    with ctx.timed("segments"):
        found: dict[bytes, tuple[Placement, int, dict]] = {}
        twins: dict[bytes, Placement] = {}  # by a segment's shape: the last one searched, a hint for the next of that shape
        for key, (nodes, sub) in unique.items():
            own = _restrict(ctx.best, nodes)  # the incumbent's schedule of this segment
            if ctx.stopped():
                found[key] = own, sub.lower_bound_ticks(), {}
            else:
                todo = [k for k in unique if k not in found]
                pinned = None if identical else _pinned(own, [i for i, v in enumerate(nodes) if v in cuts])
                shape = _shape(sub) if identical else None  # devices of several kinds: no twin (cut nodes pinned)
                found[key] = _segment_search(ctx, sub, len(nodes), work[key], wall_share(key, todo, search_end), own, pinned,
                                             twin=twins.get(shape))
                if shape is not None:
                    twins[shape] = found[key][0]
        glued = compose(p, [(nodes, found[key][0]) for nodes, key in zip(seg_nodes, keys)])
        ctx.improve(glued, ctx.check(glued), "segments")
        if not identical:
            for key, (nodes, _) in unique.items():
                if found[key][2]:
                    ctx.record("segment", nodes=len(nodes), pinned_cut_nodes=True, **found[key][2])
            return  # a segment's bound with its cut nodes pinned is not the segment's; the bound families sum segments already
        # Bounds in two rounds: every segment's relaxation (quick, usually most of the gain), then
        # the proof probes with what is left; in one round the first segments' probes took the
        # pass and the later segments kept their search bounds (a 60-s tblock2_d8: 1.6 s to the
        # first relaxation, 0.1 s to the third and fourth).
        # Each segment's bound starts from the bound phase's for it (windows, every family and the
        # queues, on the same subproblem): the relaxation and the probes raise it from there. The
        # segment phase used to start again from the combinatorial families, and on 8 devices its
        # sum (442,309 ticks on a 60-s tblock2_d8) stayed below the bound phase's (457,651).
        for key in unique:
            pl, bound, info = found[key]
            if key in ctx.part_bounds and info:
                info["bound_phase"] = int(ctx.part_bounds[key])
                bound = max(bound, info["bound_phase"])
            found[key] = pl, bound, info
        open_ = [key for key in unique if found[key][2] and found[key][1] < found[key][2]["objective"]]  # optimal: bounded
        # The relaxation only where the bound phase ran no queue model of the segment: after one it
        # raised none of the eight transformer segments measured (tblock2_d4, tblock2_d8 at 60 s) and took
        # 7 s of a 60-s tblock2_d8's pass, whose probes then got 1.7 s each and decided nothing.
        relaxed = [key for key in open_ if key not in ctx.queued_parts]
        relax_end = None if phase_end is None or not relaxed else (
            ctx.elapsed() + t.placement_relaxation_pass_share * (phase_end - ctx.elapsed()))
        # The probes go smallest segment first: a small segment's decision model is settled
        # sooner (a 42-op MLP on 4 devices refuted a third of its gap in 1.5 s, offsets included; a
        # 58-op attention nothing in 3 s), and among equal sizes the widest gap first (a refuted
        # third of it raises the bound most). Where the clock is the budget each gets at least
        # `placement_probe_seconds_per_node` a node while the pass has them, and none is probed with less.
        # Segments above `placement_probe_max_nodes` are left to their bound-phase bounds. The order
        # and the pass's end are taken once the relaxations have raised (or closed) the segments.
        for round_ in ("relaxation", "probes"):
            if round_ == "relaxation":
                keys_, end = relaxed, relax_end
            else:
                keys_ = sorted((key for key in open_ if len(unique[key][0]) <= t.placement_probe_max_nodes
                                and found[key][1] < found[key][2]["objective"]),
                               key=lambda key: (len(unique[key][0]), found[key][1] - found[key][2]["objective"]))
                end = _probes_end(ctx, phase_end, [len(unique[key][0]) for key in keys_])
            for i, key in enumerate(keys_):
                pl, bound, info = found[key]
                if ctx.stopped() or bound >= info["objective"]:
                    continue
                share = wall_share(key, keys_[i:], end)
                if round_ == "relaxation":
                    bound, more = _segment_relaxation_bound(ctx, unique[key][1], bound, share)
                else:
                    if end is not None:  # at least the minimum, while the pass has it
                        least, left = t.placement_probe_seconds_per_node * len(unique[key][0]), end - ctx.elapsed()
                        if left < least:
                            log.debug("segment of %d ops not probed: %.1f s left of the pass, %.1f s needed", len(unique[key][0]), left, least)
                            continue
                        share = min(left, max(share * ctx.time_limit, least)) / ctx.time_limit
                    bound, more = _segment_probes(ctx, unique[key][1], info["objective"], bound, work[key], share)
                info.update(more)
                found[key] = pl, bound, info
        for key, (nodes, _) in unique.items():
            pl, bound, info = found[key]
            if info:
                ctx.record("segment", nodes=len(nodes), copies=keys.count(key), bound=bound, **info)
            found[key] = pl, bound, {}
    total = sum(found[key][1] - (i > 0) for i, key in enumerate(keys))  # minus one tick per entry cut node
    ctx.raise_bound(total, "segments", "segments")


def _probes_end(ctx: Context, phase_end: float | None, sizes: list[int]) -> float | None:
    """Where the clock is the budget, when the probes pass ends: at the segment phase's end, or
    later where the segments to probe need more for their least times, up to
    `Tuning.placement_probe_wall_share` of the run's wall seconds left (the rounds after the
    segments get the rest: on the transformer blocks at 60 s they shortened the makespan by
    0-0.4 %, where a refuted probe raised the bound by 0.6-1 %). Each segment's need is its least
    time and `Tuning.placement_probe_setup_seconds`, the offsets' solves and models the probes'
    wall cap includes."""
    if phase_end is None:
        return None
    need = ctx.tuning.placement_probe_seconds_per_node * sum(sizes) + ctx.tuning.placement_probe_setup_seconds * len(sizes)
    return max(phase_end, ctx.elapsed() + min(need, ctx.tuning.placement_probe_wall_share * ctx.wall_left()))


def _shape(sub: PlacementProblem) -> bytes:
    """A segment's graph up to its costs: the blocks of a model repeat it with other (measured) durations."""
    g = sub.graph
    return b"|".join((np.ascontiguousarray(g.src, dtype="<i8").tobytes(), np.ascontiguousarray(g.dst, dtype="<i8").tobytes(),
                      bytes(str((g.n_nodes, sub.n_devices)), "ascii")))


def _shorter_twin(sub: PlacementProblem, own: Placement, twin: Placement | None) -> tuple[Placement, bool]:
    """``own``, or the placement found for an earlier segment of the same shape where that runs
    shorter on ``sub``'s durations (and fits its memories), and whether it was the twin."""
    if twin is None:
        return own, False
    moved = Placement(twin.device, twin.order)  # its start ticks were for the other durations
    mine, theirs = simulate(sub, own, "ordered"), simulate(sub, moved, "ordered")
    if theirs.memory_ok and theirs.makespan < mine.makespan:
        return moved, True
    return own, False


def _pinned(own: Placement, keep: list[int]) -> PlacementWindow:
    """Every device allowed, but the ``keep`` nodes only on the one ``own`` gives them."""
    allowed = np.ones((len(own.device), own.n_devices), dtype=bool)
    for i in keep:
        allowed[i] = False
        allowed[i, int(own.device[i])] = True
    return PlacementWindow(allowed)


def _restrict(best: Placement, nodes: list[int]) -> Placement:
    """``best``'s devices and per-device orders on ``nodes`` alone, as a placement of their `subproblem`."""
    index = {int(v): i for i, v in enumerate(nodes)}
    device = np.asarray(best.device, dtype=np.int64)[np.asarray(nodes, dtype=np.int64)]
    order = tuple(tuple(index[int(v)] for v in seq if int(v) in index) for seq in best.order)
    return Placement(device, order)


def _segment_search(ctx: Context, sub: PlacementProblem, n_nodes: int, work: float, share: float,
                    start: Placement, pinned: PlacementWindow | None = None, twin: Placement | None = None) -> tuple[Placement, int, dict]:
    """One segment's best placement from ``start`` (the incumbent's schedule of it), a bound, and
    what the search found (empty for a segment of one or two nodes: its answer is exact).

    ``share``: of the time limit, the wall cap of its local search, CP-SAT and rounds together where
    the clock is the budget (`Tuning.placement_segment_wall_split`, then
    `Tuning.placement_segment_model_share` between the model and the rounds). ``pinned``: the window that keeps
    its cut nodes in place (devices of several kinds); local search, which knows no window, is
    then left out. ``twin``: the placement found for an earlier segment of the same shape (a
    transformer's next block), CP-SAT's hint where it runs shorter here than local search's answer.
    As the start it ran shorter too, but the search from there got stuck sooner (a 58-op attention
    on 4 devices: 106,107 ticks after one improving round, against 104,157 after ten from the
    incumbent's schedule, 60-s tblock2_ffn12_d4).
    """
    if pinned is not None and n_nodes <= 2:
        return start, simulate(sub, start, "ordered").makespan, {}
    if n_nodes <= 2:
        pl = local_search(sub, ctx.seed, evaluations=1, start=start)
        return pl, simulate(sub, pl, "ordered").makespan, {}  # one or two nodes in a chain: exact
    polish, search = (share * f for f in ctx.tuning.placement_segment_wall_split)
    if pinned is None:
        hint = local_search(sub, ctx.seed, evaluations=search_evaluations(ctx, n_nodes), start=start,
                            should_stop=local_search_clock(ctx, min(polish, ctx.tuning.placement_polish_wall_share * n_nodes / max(ctx.problem.n_nodes, 1))))
    else:
        hint, search = start, search + polish
    hint, from_twin = _shorter_twin(sub, hint, twin if pinned is None else None)
    # The whole segment's model first (it proves the small ones), then rounds on the segment alone
    # with what is left, where the model stalls: a 58-op attention segment on 8 devices stayed at
    # 107,841 ticks after 40 deterministic s of the model, where its rounds reached 106,207 in 20 s.
    model_share = ctx.tuning.placement_segment_model_share if pinned is None else 1.0
    out = solve_cpsat(sub, _model_settings(ctx, work * model_share, wall_share=search * model_share), window=pinned, hint=hint)
    ctx.charge(out)
    pl = hint
    if out.assignment is not None and out.objective <= simulate(sub, hint, "ordered").makespan:
        pl = Placement(out.assignment, tuple(tuple(o) for o in out.info["order"]), start=out.start)
    bound = int(out.bound) if out.bound is not None else sub.lower_bound_ticks()
    info = {"status": out.status, **({"hint": "twin"} if from_twin else {})}
    if out.status != "optimal" and model_share < 1.0 and not ctx.stopped():
        pl, info["improving_rounds"] = _segment_rounds(ctx, sub, pl, bound, work * (1 - model_share), search * (1 - model_share))
    info["objective"] = simulate(sub, pl, "ordered").makespan
    return pl, bound, info


def _segment_rounds(ctx: Context, sub: PlacementProblem, start: Placement, bound: int, work: float, share: float) -> tuple[Placement, int]:
    """`rounds` on one segment's own problem from ``start``: its best placement and how many rounds improved it.

    The segment gets a context of its own, sized as a solve of ``sub`` with ``work`` (and, where
    the clock is the budget, ``share`` of the time limit in wall seconds), that shares the run's
    stop signal (Ctrl-C and the run's clock stop it too) and charges its work to the run.
    """
    seconds = max(min(share * ctx.time_limit, ctx.wall_left()), 1e-3) if ctx.clock_is_budget else ctx.wall_left()
    child = Context(sub, time_limit=seconds, work_limit=None if ctx.clock_is_budget else max(work, 1e-3),
                    deterministic=ctx.deterministic, workers=ctx.workers, seed=ctx.seed, check=make_check(sub),
                    tuning=replace(ctx.tuning, placement_rounds_share=1.0, closing_seconds=0.0), probing_level=ctx.probing_level,
                    stop=ctx.stop)
    if not child.improve(start, child.check(start), "segment"):
        return start, 0  # a start the check does not keep (over a memory) gives the rounds nothing to centre on
    child.raise_bound(bound, "segment", "segment")
    rounds(child)
    ctx.spend(child.work_spent, child.wall_capped)
    return child.best, sum(1 for step in child.steps if step["phase"] == "round")


def _segment_relaxation_bound(ctx: Context, sub: PlacementProblem, bound: int, share: float) -> tuple[int, dict]:
    """A segment's bound raised by its relaxation (`segment_bound`, queues included: the bound phase
    ran none for it); ``share``: of the time limit, its wall cap where the clock is the budget
    (a third per CP-SAT run: most need three, the queues' two cases and one of the relaxation's)."""
    # It starts from the combinatorial families on the segment alone; the queues rise from there.
    bound = max(bound, placement_lower_bound(sub))
    relaxed, capped = segment_bound(sub, ctx.settings(ctx.tuning.placement_relaxation_work, wall_share=share / 3, deterministic=True), lower=bound)
    ctx.spend(0.0, wall_capped=capped)
    return max(bound, relaxed), {"relaxation": relaxed}


def _segment_probes(ctx: Context, sub: PlacementProblem, makespan: int, bound: int, work: float, share: float) -> tuple[int, dict]:
    """A segment's bound raised by the decision model's refutations below ``makespan`` (one run per
    exit case per probe); ``share``: of the time limit, their wall cap together where the clock is the budget.

    Where the clock is the budget a run is capped by that share alone: any one may use what the
    earlier ones left (`segment_proof_bound`). Capped at an even part of ``work`` each (0.24
    deterministic s in a 60-s tblock2_d8), no probe of its 42-op MLP segments was decided, where
    the first takes 2.2-2.9 wall s to refute a third of the gap. With a work budget, each run
    gets its even part, which keeps the run reproducible. One deterministic worker a run in either
    mode, as the bound phase: with two, the same refutations took 1.8-2.6 times as long. With two
    workers and no promise to repeat, a probe's two runs go at once instead.
    """
    t = ctx.tuning
    count = t.placement_proof_probes_clock if ctx.clock_is_budget else t.placement_proof_probes
    per_run = None if ctx.clock_is_budget else work * t.placement_proof_share / (2 * count)
    proven, probes = segment_proof_bound(sub, makespan, ctx.settings(per_run, wall_share=share, deterministic=True), lower=bound,
                                         probes=count,
                                         seconds=share * ctx.time_limit if ctx.clock_is_budget else None,
                                         parallel=not ctx.deterministic and ctx.workers > 1)
    log.debug("segment probes (%.1f s): %s", share * ctx.time_limit, [(pr["makespan"], pr["verdict"], round(pr["seconds"], 1)) for pr in probes])
    ctx.spend(sum(pr["work"] for pr in probes), wall_capped=any(pr["wall_capped"] for pr in probes))
    return max(bound, proven), {"probes": len(probes)}
