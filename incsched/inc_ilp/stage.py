"""Inc-ILP on the stage problem: incumbent -> windows that widen (or bands) -> full model -> proof.

    run(ctx, method)
      proof first (graphs up to MAX_CLOSURE_NODES)
        DP incumbent + Reduction           the precedence bound (incsched.bounds.stage): done
                                           when it meets the DP's answer (first at its bottleneck
                                           cap only, then all its caps), else the reduced full
                                           model on a short budget
      portfolio incumbent                  best of the policy and the baselines (incumbent.py)
      windows(ctx, radius)                 stages [s - r, s + r] around the best, solved exactly;
                                           re-centred on every improvement, r doubled while the
                                           optimum moves or touches the window's edge
      or bands(ctx)                        models whose reduction leaves too many node-stage pairs
                                           open: two adjacent stages at a time, until a whole
                                           cycle brings nothing
      prove(ctx)                           the full model, hinted by the best, all that is left

Three restrictions, three names. The *relaxation window* (`incsched.windows`) is chosen: stages
around the incumbent, searched for a better answer. The *objective cap* (`objective_cap`), carried
by every model solved after the incumbent, is proven: a stage-memory cap that only answers worse
than the best can exceed, so each optimum found is also a global statement. The *precedence
ranges* of a `Reduction` are proven too: a tighter memory cap and each node's stage range, which
every answer as good as the best keeps; the exact rules of `incsched.bounds.reductions` (merged
and placed loadless nodes) keep an optimum inside them. Every answer passes
the independent evaluator before it is kept.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import numpy as np

from incsched.solvers import SolverOutput
from incsched.solvers.cpsat.stage import solve_stage

from ..errors import SolverDisagreement
from ..baselines.stage import best_split_of_order
from ..baselines.stage_local import loadless_nodes, place_loadless_nodes
from ..bounds import stage_lower_bound, stage_term_bounds
from ..evaluate.stage import evaluate_stages
from ..problems.stage import StageProblem
from ..windows.relax import stage_band_window, stage_window, window_is_everything
from ..bounds.reductions import StageReduction, stage_reduction
from ..bounds.stage import MAX_CLOSURE_NODES, ProofBound, closure, peak_lower_bound, proof_bound
from .context import Context
from .incumbent import STAGE_PRESCHEDULERS, portfolio, run_prescheduler

__all__ = ["run", "make_check", "objective_cap"]

def make_check(problem: StageProblem):
    """The independent evaluator as ``check(stages, claimed=None) -> objective | None``.

    None marks an assignment that breaks a hard constraint (a baseline over a capacity); a solver
    claim that the evaluator does not confirm exactly raises `SolverDisagreement`.
    """

    def check(stages, claimed=None):
        ev = evaluate_stages(problem, stages)
        if claimed is not None and (not ev.feasible or ev.objective != claimed):
            raise SolverDisagreement(
                f"CP-SAT claimed objective {claimed} but the evaluator finds {ev.objective} "
                f"(feasible={ev.feasible}: {list(ev.violations)[:3]})"
            )
        return ev.objective if ev.feasible else None

    return check


def run(ctx: Context, method: str, preschedule=None, radius: int = 1) -> None:
    """Solve ``ctx.problem`` by ``method``, leaving the best answer and bound in ``ctx``."""
    p: StageProblem = ctx.problem
    reason = p.infeasibility()
    if reason is not None:
        ctx.prove_infeasible(reason)
        return
    ctx.raise_bound(stage_lower_bound(p), "combinatorial", "bounds")
    if method in STAGE_PRESCHEDULERS:
        run_prescheduler(ctx, method, STAGE_PRESCHEDULERS)
        return
    if method == "ilp":
        prove(ctx, p, hint=None)
        return
    if method == "ilp-hinted":
        portfolio(ctx, "stage", policy=False)
        prove(ctx, p, hint=ctx.best)
        return
    reduction = None
    if preschedule is not None:
        run_prescheduler(ctx, preschedule, STAGE_PRESCHEDULERS)
    else:
        if p.graph.n_nodes <= MAX_CLOSURE_NODES:
            # Proof first: the DP's answer (milliseconds) against the precedence bound settles
            # chains and many CNNs outright, before the policy and the slower baselines run.
            # The DP at its bottleneck cap alone: on all 48 benchmark instances its answer was the
            # whole DP's, at a tenth of the cost (the portfolio runs the whole DP when needed).
            first_incumbent(ctx)
            if ctx.best is not None:
                reduction = Reduction.of(ctx)
                if ctx.best_value <= ctx.lower_bound or ctx.stopped():
                    return
                if reduction.pairs(p) <= ctx.tuning.stage_band_min_pairs:
                    # The reduced model is often small enough to settle at once (densenet121
                    # K=4: 28 free nodes, 0.02 s), and the portfolio then never runs; a short
                    # budget, so a hard one costs little before the usual path.
                    model, ranges = reduction.model(ctx)
                    prove(ctx, model, hint=ctx.best, ranges=ranges, work=ctx.tuning.stage_quick_proof_share * ctx.nominal_work, rules=reduction.rules(ctx))
                    if ctx.proven or ctx.stopped():
                        return
        portfolio(ctx, "stage")
    if ctx.best is None:  # no heuristic meets the capacities: the exact model may
        if not ctx.stopped():
            prove(ctx, p, hint=None)
        return
    if ctx.stopped() or ctx.best_value <= ctx.lower_bound:
        return
    if reduction is None:
        reduction = Reduction.of(ctx)
    else:
        reduction.renew(ctx)
    if ctx.stopped() or ctx.best_value <= ctx.lower_bound:
        return
    if reduction.pairs(p) > ctx.tuning.stage_band_min_pairs:
        if not bands(ctx):
            return  # unsettled bands had the budget: the full model of a graph this size is hopeless
        if not ctx.stopped() and ctx.best_value > ctx.lower_bound:
            model, ranges = reduction.model(ctx)
            prove(ctx, model, hint=ctx.best, ranges=ranges, rules=reduction.rules(ctx))
        return
    if windows(ctx, radius, reduction):
        return  # a window grew into the whole problem and settled it
    if not ctx.stopped() and ctx.best_value > ctx.lower_bound:
        model, ranges = reduction.model(ctx)
        prove(ctx, model, hint=ctx.best, ranges=ranges, rules=reduction.rules(ctx))


def first_incumbent(ctx: Context) -> None:
    """PipeDream's DP (`pipedream_dp`) at each order's bottleneck memory cap only: the incumbent
    the proof-first step tries against the precedence bound.

    Two evaluated splits instead of the DP's twenty (0.4 against 4-8 ms on the shipped graphs,
    K=2): on graphs whose proof is the bound alone, that was most of inc-ilp's fixed cost. The
    pipeline model, and graphs no such split fits, get the whole DP.
    """
    p: StageProblem = ctx.problem
    g = p.graph
    simple = p.n_stages > 1 and g.n_nodes > 0 and p.weights.stage_time_peak <= 0 and p.memory is None
    with ctx.timed("preschedule"):
        best, best_key = None, None
        for order in (g.topological_order(), g.topological_order(depth_first=True)) if simple else ():
            stages, key = best_split_of_order(p, order, mem_factors=(0,), time_factors=(0,), uncapped=False)
            if stages is not None and (best_key is None or key < best_key):
                best, best_key = stages, key
    if best is None or best_key[0]:  # over a hard capacity
        run_prescheduler(ctx, ctx.tuning.stage_first_incumbent, STAGE_PRESCHEDULERS)
        return
    value = ctx.check(best)
    ctx.improve(best, value, "preschedule:pipedream_dp(bottleneck cap)")
    ctx.record("incumbent", prescheduler=ctx.tuning.stage_first_incumbent, caps="bottleneck only", objective=value)


class Reduction:
    """The precedence bounds of one run (`incsched.bounds.stage`), renewed as the best improves.

    Holds the graph's closure and the peak bound (computed once), and for the current best the
    `ProofBound`: a global lower bound (raised in ``ctx``), a memory cap and per-node stage ranges
    that every answer at least as good as the best keeps. Models solved with them are the whole
    problem as far as the optimum is concerned (anything outside costs more than the best).
    """

    def __init__(self, cl, peak: int | None):
        self.cl, self.peak, self.bound, self.value = cl, peak, None, None
        self._rules = None

    def rules(self, ctx: Context) -> StageReduction | None:
        """`incsched.bounds.reductions`'s exact rules for the reduced full model (computed once)."""
        t = ctx.tuning
        if self._rules is None and t.stage_reductions:
            self._rules = stage_reduction(ctx.problem, place=t.stage_place_loadless, symmetry=t.stage_order_branches)
        return self._rules

    @classmethod
    def of(cls, ctx: Context) -> "Reduction":
        p: StageProblem = ctx.problem
        with ctx.timed("bounds"):
            cl = closure(p)
            peak = None
            if cl is not None and (p.weights.mem_peak > 0 or p.capacity is not None):
                peak = peak_lower_bound(p, cl, hi=max(_loads(p, ctx.best)))  # the best's peak is met
        red = cls(cl, peak)
        red.renew(ctx)
        return red

    def pairs(self, p: StageProblem) -> int:
        """Node-stage pairs the reduced model keeps open (all of them without the bound)."""
        if self.bound is None or self.bound.ranges is None:
            return p.graph.n_nodes * p.n_stages
        lo, hi = self.bound.ranges
        return int((hi - lo + 1)[hi > lo].sum())

    def renew(self, ctx: Context) -> ProofBound | None:
        """The proof bound for ``ctx.best_value`` (recomputed only when the best has changed)."""
        if self.cl is None or self.value == ctx.best_value:
            return self.bound
        p: StageProblem = ctx.problem
        w = p.weights.exact()
        terms = stage_term_bounds(p)
        # Floors of the terms proof_bound does not bound itself (the sync's is 0 unless forced).
        others = sum((w[t] * terms.get(t, 0) for t in ("compute_peak", "spill", "grad_sync_peak")), Fraction(0))
        with ctx.timed("bounds"):
            pb = proof_bound(p, ctx.best_value, self.cl, others=others, peak=self.peak)
        ranges = pb.ranges
        if ranges is not None and not _inside(ctx.best, ranges):
            ranges = None  # never: the best is an answer at least as good as itself (tested)
        self.bound, self.value = replace(pb, ranges=ranges), ctx.best_value
        ctx.record("precedence bound", peak=pb.peak, cap=pb.cap, crossings=sum(pb.crossings), lower_bound=pb.lower_bound,
                   free_nodes=None if ranges is None else int((ranges[1] > ranges[0]).sum()))
        ctx.raise_bound(pb.lower_bound, "precedence", "bounds")
        return self.bound

    def model(self, ctx: Context) -> tuple[StageProblem, tuple[np.ndarray, np.ndarray] | None]:
        """The problem under the objective cap and the precedence cap, and the precedence ranges."""
        pb = self.renew(ctx)
        model = objective_cap(ctx.problem, ctx.best_value)
        if pb is None:
            return model, None
        if pb.cap is not None and ctx.problem.weights.mem_peak > 0:
            caps = tuple(min(int(c), pb.cap) for c in model.capacity)
            model = replace(model, capacity=caps)
        return model, pb.ranges


def _inside(stages, ranges) -> bool:
    s = np.asarray(stages)
    return bool(np.all(s >= ranges[0]) and np.all(s <= ranges[1]))


def _intersect(window, ranges):
    """A relaxation window cut down to the precedence ranges (None: the window as it is)."""
    if ranges is None:
        return window
    lo, hi = np.maximum(window[0], ranges[0]), np.minimum(window[1], ranges[1])
    return lo, hi


def prove(ctx: Context, model: StageProblem, hint, ranges=None, work: float | None = None, rules=None) -> None:
    """The full model (``model``: the problem, possibly under the objective cap, and the
    precedence ``ranges`` every answer as good as the best keeps), with ``work`` (default all that
    is left) and the exact ``rules`` of `incsched.bounds.reductions` if given (valid there: cap and
    ranges hold every answer as good as the best)."""
    with ctx.timed("proof"):
        settings, lp = ctx.settings(work), {}  # solve_stage's optional keywords
        if ranges is not None:
            # Reduced models are small: the full LP pays for itself there (solve_stage's
            # measurement), and presolve's probing does not (the seven hardest shipped proofs,
            # K=6/8: deterministic time 1.56 -> 0.99 s, best-of-3 wall 9.1 -> 7.4 s at load 7).
            lp = {"linearization_level": 2}
            if ctx.probing_level is None:
                settings = replace(settings, probing_level=0)
        if rules is not None:
            lp["reduction"] = rules
        out = solve_stage(model, settings, window=ranges, hint=hint, **lp)
    ctx.charge(out)
    ctx.record("full", status=out.status, objective=out.objective, bound=out.bound,
               deterministic_time=round(float(out.info.get("deterministic_time") or 0.0), 4), **out.info.get("reduction", {}))
    _take(ctx, out, "full", whole=True)


def windows(ctx: Context, radius: int, reduction: Reduction | None = None) -> bool:
    """Windows of radius r around the best answer, widened while the optimum moves.

    Returns True when the last window was the whole problem (nothing is left to prove).
    A window that touches its edge or improves is re-centred on its optimum and doubled; a window
    whose optimum sits strictly inside is a window optimum, and the full model takes over.
    """
    p: StageProblem = ctx.problem
    r = max(int(radius), 1)
    while not ctx.stopped() and ctx.best_value > ctx.lower_bound:
        model, ranges = reduction.model(ctx) if reduction is not None else (objective_cap(p, ctx.best_value), None)
        window = stage_window(p, ctx.best, r)
        # A window covering the precedence ranges holds every answer as good as the best: the whole problem.
        whole = window_is_everything(p, window) or (ranges is not None and bool(np.all(window[0] <= ranges[0]) and np.all(window[1] >= ranges[1])))
        window = _intersect(window, ranges)
        with ctx.timed("window"):
            # The whole problem as a window is the proof itself: it gets everything that is left.
            # A smaller window is solved by one worker: CP-SAT's parallel portfolio costs more than
            # it saves on models this small (inception_v3 K=8 windows: 0.77 s on one worker,
            # 1.63 s on two, 2 cores).
            settings = ctx.settings() if whole else ctx.settings(ctx.tuning.stage_window_share * ctx.nominal_work, workers=1)
            out = solve_stage(model, settings, window=window, hint=ctx.best)
        ctx.charge(out)
        ctx.record("window", radius=r, whole=whole, status=out.status, objective=out.objective)
        improved = _take(ctx, out, f"window r={r}", whole=whole)
        if whole:
            return True
        if out.status != "optimal":
            return False  # the window alone is too hard for its share: the full model takes over
        if not improved and not _touches_edge(out.assignment, window, p.n_stages):
            return False
        r *= 2
    return False


def _take(ctx: Context, out: SolverOutput, phase: str, whole: bool) -> bool:
    """Check a back end's answer, keep it if better, and keep its bound if it holds globally."""
    improved = False
    if out.status == "infeasible" and whole and ctx.best is None:
        ctx.prove_infeasible(out.info.get("reason"))
    if out.assignment is not None:
        improved = ctx.improve(out.assignment, ctx.check(out.assignment, out.objective), phase)
    if whole and out.status == "optimal":
        ctx.prove_optimal()
        ctx.raise_bound(ctx.best_value, "cpsat-full", phase)
    elif whole and out.bound is not None:
        ctx.raise_bound(out.bound, "cpsat-full", phase)
    if not whole and out.status == "optimal" and ctx.best_value == out.objective:
        ctx.settle_window()
    return improved


def objective_cap(problem: StageProblem, incumbent_objective) -> StageProblem:
    """The problem with a stage-memory cap that no answer at least as good can exceed.

    An answer of objective <= the incumbent's has ``w_mem * mem_peak <= objective - (every other
    term's weighted lower bound)``, so capping every stage there removes only worse answers: the
    capped optimum is the global optimum and its bound a global bound. CP-SAT derives the same from
    its objective only during search; as a capacity it prunes stage domains in presolve (measured:
    inception_v3 K=8 proof 13.3 s -> 1.3 s, resnet50 K=8 2.6 s -> 0.24 s). Computed in exact
    rationals, so the cap never cuts off an answer as good as the incumbent.
    """
    w = {t: Fraction(str(v)) for t, v in problem.weights.as_dict().items()}
    if w["mem_peak"] <= 0:
        return problem
    others = sum(w[t] * b for t, b in stage_term_bounds(problem).items() if t != "mem_peak")
    cap = math.floor((Fraction(incumbent_objective) - others) / w["mem_peak"])
    caps = [cap] * problem.n_stages if problem.capacity is None else [min(cap, c) for c in problem.capacity]
    return replace(problem, capacity=tuple(caps))


def _touches_edge(stages, window, K: int) -> bool:
    lo, hi = window
    s = np.asarray(stages)
    return bool(np.any(((s == lo) & (lo > 0)) | ((s == hi) & (hi < K - 1))))


# ---------------------------------------------------------------------------- bands


def bands(ctx: Context) -> bool:
    """Large models: re-solve bands of adjacent stages exactly, the rest held, while it pays.

    Band after band (stages 0-1, 1-2, ...; `stage_band_window`), CP-SAT re-optimises the nodes on
    those stages under the objective cap, with the loadless nodes free everywhere; each
    improvement is polished by placing the loadless nodes optimally (an LP) and becomes the centre
    of the next band. Bands of a few hundred nodes solve in about a second each while the whole
    model of such a graph barely moves (rand_graph_1000_1, K=10, 10 s: whole model
    11,343,733-11,343,830, bands 11,343,245-11,343,302).

    An incumbent whose peak memory sits well above the average stage load is first re-balanced
    (`rebalance`): no single band can lower a peak shared by several stages.

    Returns whether the search settled: one full cycle of bands, each proven optimal inside its
    band, without an improvement. Settled or not, the result is no window optimum.
    """
    p: StageProblem = ctx.problem
    with ctx.timed("bands"):
        start = place_loadless_nodes(p, ctx.best)
        ctx.improve(start, ctx.check(start), "bands")
        if _imbalance(p, ctx.best) > ctx.tuning.stage_balance_slack:
            center = rebalance(ctx, ctx.best, ctx.tuning.stage_balance_slack)
            value = ctx.check(center)
            ctx.record("rebalance", objective=value, mem_excess=_imbalance(p, center))
            ctx.improve(center, value, "rebalance")
        else:
            center = ctx.best
        settled, solves, improved = _band_loop(ctx, center)
    ctx.record("bands", width=min(ctx.tuning.stage_band_width, p.n_stages), solves=solves, improved=improved, settled=settled, objective=ctx.best_value)
    return settled


def _band_work(ctx: Context) -> float:
    """One band's work: a second per thousand nodes (a band holds about 2/K of them)."""
    return ctx.tuning.stage_band_work * max(1.0, ctx.problem.graph.n_nodes / 1000)


def _band_loop(ctx: Context, center) -> tuple[bool, int, int]:
    """Bands in turn from ``center`` until the budget ends or a full cycle brings nothing.

    Returns (settled, solves, improved). A band's answer becomes the next centre even when the
    re-balanced centre is worse than the best so far: the bands win its crossings back.
    """
    p: StageProblem = ctx.problem
    K = p.n_stages
    width = min(ctx.tuning.stage_band_width, K)
    firsts = list(range(K - width + 1))
    roaming = loadless_nodes(p)
    current, current_value = center, ctx.check(center)
    calm = solves = improved = i = 0
    while not ctx.stopped() and current_value > ctx.lower_bound and calm < len(firsts):
        first = firsts[i % len(firsts)]
        i += 1
        window = stage_band_window(p, current, first, width, roaming)
        out = solve_stage(objective_cap(p, current_value), ctx.settings(_band_work(ctx)), window=window, hint=current)
        ctx.charge(out)
        solves += 1
        if out.assignment is not None and out.objective < current_value:
            ctx.check(out.assignment, out.objective)
            current = place_loadless_nodes(p, out.assignment)
            current_value = ctx.check(current)
            ctx.improve(current, current_value, f"band {first}-{first + width - 1}")
            calm, improved = 0, improved + 1
        else:
            calm = calm + 1 if out.status == "optimal" else 0
    return calm >= len(firsts), solves, improved


def _imbalance(p: StageProblem, stages) -> int:
    """Peak stage memory above the average load rounded up (0 when memory is not weighed)."""
    if p.weights.mem_peak <= 0 or p.graph.n_nodes == 0:
        return 0
    load = _loads(p, stages)
    return max(load) - (-(-sum(load) // p.n_stages))


def _loads(p: StageProblem, stages) -> list[int]:
    """Parameter bytes per stage (shared weights once on each stage that reads them), exact Python ints."""
    return p.graph.part_param_bytes(stages, p.n_stages)


def rebalance(ctx: Context, stages, slack: int):
    """One sweep of bands, first to last, that moves load towards the light end of the pipeline.

    Band (k, k+1) is solved with stage k capped at the average load plus ``slack`` and stage k+1
    capped so that stages 0..k together hold at least their share (k+1)/K of all parameters less
    ``slack``; the objective is minimised under those caps. After the sweep every stage is within
    about ``slack`` of the average, whatever the crossings cost; the band search that follows wins
    the crossings back. A band whose caps cannot be met in its time is left as it was. The answer
    may be worse than ``stages``: the caller keeps the best.
    """
    p: StageProblem = ctx.problem
    K = p.n_stages
    total = p.graph.total_param_bytes
    roaming = loadless_nodes(p)
    target = -(-total // K) + slack
    s = np.asarray(stages, dtype=np.int64)
    for k in range(K - 1):
        # Exact shares first; a band too coarse or too constrained for them gets a looser aim.
        for loose in (slack, 20 * slack + total // (100 * K)):
            if ctx.stopped():
                return place_loadless_nodes(p, s)
            load = _loads(p, s)
            need = -(-(k + 1) * total // K) - loose - sum(load[:k])  # least load on stage k
            if need <= load[k] <= target + loose - slack:
                break
            caps = [total] * K
            caps[k] = target + loose - slack
            caps[k + 1] = max(load[k] + load[k + 1] - need, 0)
            if p.capacity is not None:
                caps = [min(a, int(b)) for a, b in zip(caps, p.capacity)]
            window = stage_band_window(p, s, k, 2, roaming)
            out = solve_stage(replace(p, capacity=tuple(caps)), ctx.settings(_band_work(ctx)), window=window, hint=s)
            ctx.charge(out)
            if out.assignment is not None:
                ctx.check(out.assignment, out.objective)
                s = out.assignment
                break
    return place_loadless_nodes(p, s)
