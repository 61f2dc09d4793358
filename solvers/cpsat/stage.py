"""The stage problem as a compact CP-SAT model: the exact back end of the stage pipeline.

One integer stage per node; one Boolean per node and allowed stage only for nodes whose stage
changes a load (parameters, compute, or boundary traffic under ``comm_peak``); ``comm_total`` is
linear in the stages. A shared weight (`CompGraph.shared_weights`) gets one Boolean per stage that
some reader may take, ``held[w,k] == OR(x[v,k] for readers v)`` (both directions, so no slack
reaches a solution's cost), whose bytes join stage k's parameters in every memory expression
(``mem_peak``, ``spill``, ``capacity``, the ``memory`` of the pipeline model) and, in training,
decide its gradient sync (``grad_sync_peak``: a replicated indicator per weight, a sync Boolean per
weight and holding stage, a per-stage sum under a peak; `_StageModel._grad_sync`); a graph without
shared weights gets the model it always had. Windows from the relaxation step restrict the domains; a hint (a full stage
assignment, typically a pre-scheduler's incumbent) warm-starts the search.

Exact numbers. The weights become integers by `ObjectiveWeights.scaled` (one exact decimal rule:
``weight_t == unit * c_t``), so CP-SAT minimises ``sum(c_t * term_t)`` over integers. Before the
model is built `check_model_range` proves that every coefficient, every constraint's worst case and
the worst objective stay within `CPSAT_LIMIT` (2**60: CP-SAT's own overflow checks and presolve
need a margin below int64); otherwise `solve_stage` raises `ProblemError` naming the term and the limit.
The returned ``objective`` is recomputed from the solution's stages in Python ints and multiplied
by the unit; the ``bound`` is CP-SAT's integer bound, read back from its float64 report
conservatively (rounded down by one ulp above 2**53). Both are a Python int when whole, else a
`fractions.Fraction`, in the problem's own units, so they compare with `evaluate_stages` by ``==``.
"""

from __future__ import annotations

import logging
import math
import time
from fractions import Fraction

import numpy as np
from ortools.sat.python import cp_model

from incsched.problems.stage import ProblemError, StageProblem, exact_number

from .. import SolverOutput, SolverSettings
from .params import STATUS_NAMES, make_solver, wall_capped

__all__ = ["solve_stage", "integer_weights", "check_model_range", "CPSAT_LIMIT"]

log = logging.getLogger(__name__)

BACKEND = "cpsat"

#: Largest magnitude any term, linear sum or the objective may reach in the model. CP-SAT works in
#: int64 but its overflow check rejects models whose sums come near 2**62 (a stage's load as
#: ``load == sum p_v x_v`` already doubles the parameters' total), and presolve combines
#: constraints further: a model of 2**61 total parameters comes back MODEL_INVALID from presolve
#: although it validates. A quarter of 2**62 leaves that margin.
CPSAT_LIMIT = 2**60


def solve_stage(
    problem: StageProblem,
    settings: SolverSettings,
    window: tuple[np.ndarray, np.ndarray] | None = None,
    hint: np.ndarray | None = None,
    linearization_level: int | None = None,
    reduction=None,
) -> SolverOutput:
    """Solve ``problem`` (inside ``window`` if given) with CP-SAT.

    Parameters
    ----------
    problem : StageProblem
        The problem; its integer data (`StageProblem.edge_comm`, `StageProblem.node_ticks`) are
        the model's coefficients.
    settings : SolverSettings
        Time limit, determinism, seed, workers.
    window : (lo, hi) pair of int arrays, optional
        Inclusive per-node stage ranges; the model is restricted to them.
    hint : int array, optional
        A full stage assignment given to CP-SAT as a solution hint.
    linearization_level : int, optional
        CP-SAT's ``linearization_level`` (default its own, 1). 2 puts every constraint in the LP:
        on the precedence-reduced proofs of the shipped graphs (K = 6, 8) it cut the deterministic
        time from 2.4 to 1.6 s in total; on window and band models it is left alone.
    reduction : incsched.bounds.reductions.StageReduction, optional
        Exact rules, handed in (the back end does not derive them): merged nodes share one stage variable, loadless
        joins are placed by ``max``/``min`` of their neighbours' stages, interchangeable branches
        are ordered. Only for the whole problem or a window that holds every answer as good as
        some answer (the precedence window): the rules keep an optimum there, not in any window.
        The hint is moved onto the rules first (`StageReduction.apply`, never a worse answer).

    Returns
    -------
    SolverOutput
        ``objective`` and ``bound`` are the weighted objective in the problem's integer units
        (bytes, edges, ticks of ``problem.time_unit``), the same as `evaluate_stages` computes;
        ``status`` is ``optimal`` for the model given (the window's optimum when a window is set).
        Both are exact: a Python int when whole, else a `fractions.Fraction` (see the module notes).
        An infeasibility visible before solving (a node too big for every stage, a window leaving a
        node no stage) gives ``infeasible`` with the reason in ``info["reason"]``; the solver does
        not run. ``info`` also carries ``time_unit``, ``weight_unit`` (the exact unit of the integer
        weights, as a string such as ``"1/10000000"``), ``integer_weights`` and the model's size.

    Raises
    ------
    ProblemError
        If the model's integers could pass `CPSAT_LIMIT` (`check_model_range`); nothing is solved.
    """
    start = time.perf_counter()
    info: dict = {"time_unit": problem.time_unit}
    allowed, reason = problem.allowed_or_reason(window)
    if reason is None and reduction is not None:
        allowed, reason = _group_domains(problem, allowed, reduction.group)
    if reason is not None:
        info["reason"] = reason
        return SolverOutput("infeasible", None, None, None, time.perf_counter() - start, BACKEND, info=info)

    weights, unit = integer_weights(problem.weights.as_dict())
    check_model_range(problem, weights)
    model = _StageModel(problem, allowed, weights, reduction)
    if hint is not None:
        hint = np.asarray(hint, dtype=np.int64)
        g = problem.graph
        if reduction is not None and hint.shape == (g.n_nodes,) and np.all(hint[g.src] <= hint[g.dst]):
            hint = reduction.apply(hint)
        model.add_hint(hint)
    build_time = time.perf_counter() - start

    solver = make_solver(settings)
    if linearization_level is not None:
        solver.parameters.linearization_level = linearization_level
    # CP-SAT's gap limits compare objective and bound as float64: above 2**53 two integers one apart
    # are one float, and the default absolute gap (1e-4) then stops the search calling a solution
    # one unit above the optimum "optimal". With both limits 0 the proof is CP-SAT's integer one.
    solver.parameters.absolute_gap_limit = 0.0
    solver.parameters.relative_gap_limit = 0.0
    status_code = solver.Solve(model.model)
    status = STATUS_NAMES[status_code]
    assignment = objective = bound = None
    if status in ("optimal", "feasible"):
        assignment = np.asarray([solver.Value(s) for s in model.stage], dtype=np.int64)
        cost = model.solution_cost(solver)  # exact, in Python ints
        objective = exact_number(unit * cost)
        if cost != round(solver.ObjectiveValue()):
            # Presolve may relax a peak's max-equality to >= (the objective pushes it down), so a
            # solution cut off by the time limit can carry a slack peak: report what it costs.
            # (Above 2**53 the float report also differs by rounding alone.)
            log.info("stage CP-SAT objective %s carries slack; the solution costs %s", solver.ObjectiveValue(), cost)
        if status == "optimal":
            bound = objective
        else:
            bound = exact_number(unit * min(cost, _float_bound_floor(solver.BestObjectiveBound())))
    elif status == "infeasible":
        info["reason"] = "CP-SAT proved that no assignment meets the capacities within the window"
    proto = model.model.Proto()
    info.update(
        weight_unit=str(unit),
        integer_weights=weights,
        n_variables=len(proto.variables),
        n_constraints=len(proto.constraints),
        n_stage_booleans=model.n_booleans,
        n_free_nodes=int((allowed.sum(axis=1) > 1).sum()),
        build_seconds=build_time,
        deterministic_time=solver.deterministic_time,
        wall_capped=wall_capped(settings, solver),
        workers=1 if settings.deterministic else settings.workers,
        deterministic=settings.deterministic,
        conflicts=solver.NumConflicts(),
    )
    if reduction is not None:
        info["reduction"] = reduction.summary()
    log.info("stage CP-SAT on %s (K=%d): %s objective=%s bound=%s", problem.graph.name, problem.n_stages, status, objective, bound)
    return SolverOutput(status, assignment, objective, bound, time.perf_counter() - start, BACKEND, info=info)


def _group_domains(problem: StageProblem, allowed: np.ndarray, group: np.ndarray):
    """Each merged group's stages: those every member allows (``(allowed, None)``, or the reason none is left)."""
    both = np.ones((problem.graph.n_nodes, problem.n_stages), dtype=bool)
    np.logical_and.at(both, group, allowed)
    both = both[group]
    empty = np.flatnonzero(~both.any(axis=1))
    if empty.size:
        v = int(empty[0])
        return None, f"the window leaves node {problem.graph.names[v]!r} and the nodes merged with it no common stage"
    return both, None


def integer_weights(weights: dict[str, float]) -> tuple[dict[str, int], Fraction]:
    """Objective weights as integers and the exact unit they are counted in (``w == unit * c``).

    The one scaling rule of `ObjectiveWeights.scaled` (each weight as its shortest decimal, a
    common power of ten, divided by the gcd); weights it cannot scale raise `ProblemError`.
    """
    from incsched.problems.stage import ObjectiveWeights

    return ObjectiveWeights(**weights).scaled()


def check_model_range(problem: StageProblem, weights: dict[str, int] | None = None) -> None:
    """Refuse a model whose integers could leave CP-SAT's safe range, before it is built.

    Checks, in Python ints: each used term's upper bound times its integer weight, their sum (the
    worst objective), and the longest linear sums the model writes (a stage's parameters or ticks,
    ``comm_total`` as sum_v stage_v * net_v, a boundary's traffic), all against `CPSAT_LIMIT`.

    Raises
    ------
    ProblemError
        Naming the term or sum, its size as a power of two and the limit, and what to scale down.
    """
    if weights is None:
        weights = problem.weights.scaled()[0]
    ub = problem.term_upper_bounds()
    K = problem.n_stages
    comm = int(problem.edge_comm.sum())
    # The model's longest sums, whatever the weights (the capacity constraint sums parameters too).
    sums = {"one stage's parameters": ub["mem_peak"], "one stage's ticks": ub["compute_peak"] if weights["compute_peak"] else 0}
    if weights["comm_total"]:
        sums["comm_total (edges' units times K-1, counted on both ends)"] = 2 * comm * max(K - 1, 0)
    if weights["comm_peak"]:
        sums["a boundary's traffic (counted on both ends)"] = 2 * comm
    if weights.get("stage_time_peak"):
        sums["one stage's compute and send ticks"] = ub["stage_time_peak"]
    if weights.get("grad_sync_peak"):
        sums["one stage's gradient sync ticks"] = ub["grad_sync_peak"]
    if problem.memory is not None:
        acts = int(problem.graph.out_bytes.sum())  # training with recompute: plus the values a stage receives
        sums["one stage's parameters and activations in flight"] = max(
            (int(m) + c * acts for m, c in zip(problem.stage_memory_coef.sum(axis=0).tolist(), problem.stage_input_coef)), default=0
        ) + problem.param_factor * problem.shared_bytes + int(problem.work_coef.max(initial=0)) + int(problem.step_coef.max(initial=0))
    for what, size in sums.items():
        if size > CPSAT_LIMIT:
            raise ProblemError(
                f"stage problem on graph {problem.graph.name!r}: {what} reaches {_pow2(size)}, beyond CP-SAT's "
                "2^60 limit; scale the graph's byte counts down (e.g. to KiB) or use a coarser time_unit"
            )
    worst = 0
    for term, c in weights.items():
        if c:
            part = c * ub[term]
            if part > CPSAT_LIMIT:
                raise ProblemError(
                    f"stage problem on graph {problem.graph.name!r}: the {term} term (integer weight {c} times up to "
                    f"{ub[term]}) reaches {_pow2(part)}, beyond CP-SAT's 2^60 limit; lower its weight relative to the "
                    "others or scale the graph's byte counts down"
                )
            worst += part
    if worst > CPSAT_LIMIT:
        raise ProblemError(
            f"stage problem on graph {problem.graph.name!r}: the objective's range {_pow2(worst)} exceeds CP-SAT's "
            "2^60 limit; lower the weights or scale the graph's byte counts down"
        )


def _pow2(x: int) -> str:
    return f"2^{math.log2(x):.1f}" if x > 0 else "0"


def _float_bound_floor(b: float) -> int:
    """An integer no larger than the integer bound CP-SAT reported as the float ``b``.

    CP-SAT's bound is an integer internally; its float64 report is exact below 2**53 and within an
    ulp above, so one ulp down (exactly, in fractions) is a bound that never overclaims.
    """
    if not math.isfinite(b):
        return 0  # no bound reported: every term is non-negative, so 0 is one
    if abs(b) < 2**53 and b == math.floor(b):
        return int(b)
    return math.ceil(Fraction(b) - Fraction(math.ulp(b)))


class _StageModel:
    """Builds the CP-SAT model, one method per family of variables and constraints."""

    def __init__(self, problem: StageProblem, allowed: np.ndarray, weights: dict[str, int], reduction=None):
        self.problem, self.allowed, self.weights, self.reduction = problem, allowed, weights, reduction
        self.model = cp_model.CpModel()
        g, K = problem.graph, problem.n_stages
        self.K = K
        comm = problem.edge_comm
        # comm_total = sum_e c_e (s_v - s_u) = sum_v s_v (c_in(v) - c_out(v)).
        # Integer sums (np.add.at), not a float bincount: bytes above 2**53 must not round.
        self.net_comm = np.zeros(g.n_nodes, dtype=np.int64)
        np.add.at(self.net_comm, g.dst, comm)
        np.add.at(self.net_comm, g.src, -comm)
        # Merged nodes share their group's stage variable: the group's net traffic is the sum.
        self.group = np.arange(g.n_nodes) if reduction is None else reduction.group
        self.is_root = self.group == np.arange(g.n_nodes)
        self.net_group = np.zeros(g.n_nodes, dtype=np.int64)
        np.add.at(self.net_group, self.group, self.net_comm)
        cap_needed = problem.capacity is not None
        self.use_mem = weights["mem_peak"] > 0 or weights["spill"] > 0 or cap_needed
        self.use_time = weights["compute_peak"] > 0
        self.use_cut = weights["comm_peak"] > 0 and K > 1
        # The pipeline model (see incsched.problems.stage): stage time = compute + sends, and
        # memory = parameters + activations in flight, bounded by ``memory``.
        self.use_stage_time = weights.get("stage_time_peak", 0) > 0
        self.use_memory = problem.memory is not None
        # Training's gradient sync of replicated shared weights (only weights whose sync costs ticks).
        self.use_grad_sync = weights.get("grad_sync_peak", 0) > 0 and bool(problem.grad_sync_ticks.any())
        weighed = self.use_mem or self.use_memory or self.use_grad_sync
        kept = [i for i, w in enumerate(problem.graph.shared_weights) if w.nbytes] if weighed else []
        self.shared = tuple(problem.graph.shared_weights[i] for i in kept)
        self.shared_ticks = [int(problem.grad_sync_ticks[i]) if self.use_grad_sync else 0 for i in kept]
        self.terms: dict[str, cp_model.IntVar] = {}
        # Each term as the expressions it is the max (or sum) of: what a solution really costs.
        self.term_parts: dict[str, tuple[str, list]] = {}
        self.per_stage: dict[str, dict[int, cp_model.IntVar]] = {}  # hinted with the terms
        self._stage_variables()
        self._precedence()
        self._stage_booleans()
        if problem.training:
            self._nonempty_stages()
        self._shared_weights()
        if reduction is not None:
            self._reduction_rules()
        objective = []
        if self.use_mem:
            objective += self._memory()
        if self.use_time:
            objective += self._compute()
        if weights["comm_total"] > 0:
            objective.append(weights["comm_total"] * self._comm_total())
        if self.use_cut:
            objective += self._comm_peak()
        if self.use_memory:
            self._pipeline_memory()
        if self.use_stage_time:
            objective += self._stage_time()
        if self.use_grad_sync:
            objective += self._grad_sync()
        self.model.Minimize(sum(objective))

    # ------------------------------------------------------------------ variables

    def _stage_variables(self) -> None:
        names = self.problem.graph.names
        self.stage = [
            self.model.NewIntVarFromDomain(cp_model.Domain.FromValues(np.flatnonzero(row).tolist()), f"stage[{nm}]")
            if root else None
            for nm, row, root in zip(names, self.allowed, self.is_root.tolist())
        ]
        self.stage = [self.stage[r] for r in self.group.tolist()]

    def _precedence(self) -> None:
        g = self.problem.graph
        first = self.allowed.argmax(axis=1)
        last = self.K - 1 - self.allowed[:, ::-1].argmax(axis=1)
        group = self.group
        seen = set()
        for u, v in zip(group[g.src].tolist(), group[g.dst].tolist()):
            if u != v and (u, v) not in seen and last[u] > first[v]:  # else the domains imply s_u <= s_v
                seen.add((u, v))
                self.model.Add(self.stage[u] <= self.stage[v])

    def _reduction_rules(self) -> None:
        """`incsched.bounds.reductions`'s placing rules and branch order (merges are shared variables)."""
        red = self.reduction
        for v, preds in red.earliest:
            self.model.AddMaxEquality(self.stage[v], [self.stage[u] for u in preds])
        for v, succs in red.latest:
            self.model.AddMinEquality(self.stage[v], [self.stage[w] for w in succs])
        for a, b in red.order:
            self.model.Add(self.stage[a] <= self.stage[b])

    def _stage_booleans(self) -> None:
        """x[v][k] <=> stage[v] == k, for nodes whose stage moves a load; others need none."""
        p, ticks = self.problem.graph.param_bytes, self.problem.node_ticks
        matters = np.zeros(len(p), dtype=bool)
        if self.use_mem:
            matters |= self.problem.graph.node_weight_bytes > 0
        if self.use_time:
            matters |= ticks.any(axis=1)
        if self.use_cut:
            matters |= self.net_group != 0
        if self.use_stage_time:
            matters |= ticks.any(axis=1) | self._senders()
            data = self.problem.readers
            matters[self.problem.graph.dst[data & self._senders()[self.problem.graph.src]]] = True  # readers decide a send
        if self.use_memory:
            matters |= self.problem.node_memory_coef.any(axis=1)
        if self.problem.training:  # every node may be the one that keeps a stage from being empty
            matters[:] = True
        for w, t in zip(self.shared, self.shared_ticks):  # a reader decides where a synced weight is held
            if t:
                matters[list(w.readers)] = True
        if self.use_memory and any(self.problem.stage_input_coef):  # training with recompute: what a stage receives
            data, kept = self.problem.readers, self._kept_values()
            matters |= kept
            matters[self.problem.graph.dst[data & kept[self.problem.graph.src]]] = True
        free = self.allowed.sum(axis=1) > 1
        self.on_stage: list[dict[int, cp_model.IntVar] | None] = [None] * len(p)
        self.n_booleans = 0
        names = self.problem.graph.names
        group_matters = np.zeros(len(p), dtype=bool)
        np.logical_or.at(group_matters, self.group, matters)
        for v in np.flatnonzero(group_matters & free & self.is_root).tolist():
            stages = np.flatnonzero(self.allowed[v]).tolist()
            x = {k: self.model.NewBoolVar(f"on[{names[v]},{k}]") for k in stages}
            self.model.AddExactlyOne(x.values())
            self.model.Add(self.stage[v] == sum(k * b for k, b in x.items()))
            self.on_stage[v] = x
            self.n_booleans += len(x)
        self.on_stage = [self.on_stage[r] for r in self.group.tolist()]
        self.fixed_stage = np.where(free, -1, self.allowed.argmax(axis=1))

    def _nonempty_stages(self) -> None:
        """Training: sum_v [stage_v == k] >= 1 on every stage (`incsched.problems.training`'s notes),
        one clause per stage not already held by a node its domain fixes there."""
        for k in range(self.K):
            if (self.fixed_stage == k).any():
                continue
            lits = {x[k].Index(): x[k] for x in self.on_stage if x is not None and k in x}  # merged nodes share one
            self.model.AddBoolOr(list(lits.values()))  # no literal: the window leaves stage k empty, infeasible

    def _shared_weights(self) -> None:
        """held[w][k] <=> some reader of shared weight w sits on stage k (a constant where the domains decide)."""
        self.held: list[dict[int, object]] = []
        for i, w in enumerate(self.shared):
            held = {}
            for k in range(self.K):
                lits = []
                for v in w.readers:
                    x = self.on_stage[v]
                    if x is None:
                        if self.fixed_stage[v] == k:
                            lits = None  # a reader is fixed here: the weight is held on k
                            break
                    elif k in x:
                        lits.append(x[k])
                if lits is None:
                    held[k] = 1
                elif lits:
                    lits = list({lit.Index(): lit for lit in lits}.values())  # merged readers share a literal
                    y = self.model.NewBoolVar(f"held[{w.name},{k}]")
                    for lit in lits:
                        self.model.AddImplication(lit, y)
                    self.model.AddBoolOr(lits).OnlyEnforceIf(y)
                    held[k] = y
            self.held.append(held)

    def _with_shared(self, load, k: int, factor: int = 1):
        """``load`` plus ``factor`` times the bytes of the shared weights held on stage k (``load``
        itself without any)."""
        parts = [factor * w.nbytes * held[k] for w, held in zip(self.shared, self.held) if k in held]
        return load + sum(parts) if parts else load

    def _stage_sum(self, coef: np.ndarray, k: int):
        """Linear expression sum_v coef[v, k] [stage_v == k] (fixed nodes as constants)."""
        const = int(coef[self.fixed_stage == k, k].sum())
        terms = [int(coef[v, k]) * x[k] for v, x in enumerate(self.on_stage) if x is not None and k in x and coef[v, k]]
        return sum(terms) + const

    # ------------------------------------------------------------------ objective terms

    def _max_equality(self, target, exprs: list, lower: int, upper: int, name: str) -> None:
        """target == max(exprs), through one named variable per expression.

        An equality, not target >= each: a solution cut off by the time limit must not carry a
        slack peak, or its reported objective would exceed what its stages cost. And over
        variables, not raw sums: CP-SAT 9.15's presolve stalls for minutes on a lin_max of long
        sums with byte-sized coefficients (ResNet-50, K=2), and is instant on this form.
        """
        parts = []
        for k, expr in enumerate(exprs):
            if isinstance(expr, int):
                parts.append(expr)
                continue
            var = self.model.NewIntVar(lower, upper, f"{name}[{k}]")
            self.model.Add(var == expr)
            parts.append(var)
            self.per_stage.setdefault(name, {})[k] = var
        self.model.AddMaxEquality(target, parts)

    def _memory(self) -> list:
        g = self.problem.graph
        p = g.param_bytes
        K, w = self.K, self.weights
        coef = np.repeat(p[:, None], K, axis=1)
        loads = [self._with_shared(self._stage_sum(coef, k), k) for k in range(K)]
        total = g.total_param_bytes  # every stage's load is at most this (shared weights once)
        out = []
        cap = self.problem.effective_capacity  # clamped to the total: int64-safe, same answers
        if cap is not None:
            for k in range(K):
                if cap[k] < total:  # a capacity of at least everything constrains nothing
                    self.model.Add(loads[k] <= cap[k])
        if w["mem_peak"] > 0:
            # Stages are ordered, so there is no symmetry to break; the average is a valid floor.
            # Integer ceiling: total / K in float64 can round up past the true floor above 2**53.
            floor = max(-(-total // K), int(g.node_weight_bytes.max(initial=0)))
            peak = self.model.NewIntVar(floor, max(total, floor), "mem_peak")
            # Equalities, not >=: a solution cut off by the time limit must not carry a slack
            # peak, or its reported objective would exceed what its stages actually cost.
            self._max_equality(peak, loads, 0, total, "mem")
            self.terms["mem_peak"] = peak
            self.term_parts["mem_peak"] = ("max", loads)
            out.append(w["mem_peak"] * peak)
        if w["spill"] > 0:
            # Clamped like the hard capacity: above the total no stage ever spills.
            spill_cap = [min(int(c), total) for c in self.problem.spill_capacity]
            spills = []
            for k in range(K):
                s_k = self.model.NewIntVar(0, total, f"spill[{k}]")
                self._max_equality(s_k, [loads[k] - spill_cap[k], 0], -spill_cap[k], total, f"over{k}")
                spills.append(s_k)
            self.model.Add(sum(spills) >= total - sum(spill_cap))
            spill = self.model.NewIntVar(max(0, total - sum(spill_cap)), total, "spill")
            self.model.Add(spill == sum(spills))
            self.terms["spill"] = spill
            self.term_parts["spill"] = ("sum", [loads[k] - spill_cap[k] for k in range(K)])
            self.spill_parts = spills
            out.append(w["spill"] * spill)
        self.loads = loads
        return out

    def _compute(self) -> list:
        ticks = self.problem.node_ticks
        K = self.K
        loads = [self._stage_sum(ticks, k) for k in range(K)]
        floor = 0
        if self.problem.stage_speed is None or len(set(self.problem.stage_speed)) == 1:
            floor = max(-(-int(ticks[:, 0].sum()) // K), int(ticks.max(initial=0)))
        most = max(int(ticks.max(axis=1).sum()), floor)
        peak = self.model.NewIntVar(floor, most, "compute_peak")
        self._max_equality(peak, loads, 0, most, "ticks")
        self.terms["compute_peak"] = peak
        self.term_parts["compute_peak"] = ("max", loads)
        return [self.weights["compute_peak"] * peak]

    def _senders(self) -> np.ndarray:
        """Nodes whose value costs send ticks and has a reader (only they can load a stage with sends)."""
        g = self.problem.graph
        has_reader = np.zeros(g.n_nodes, dtype=bool)
        has_reader[g.src[self.problem.readers]] = True
        return has_reader & (self.problem.send_ticks > 0)

    def _at_or_after(self, v: int, b: int):
        """[stage_v >= b] as a constant or a sum of v's stage literals."""
        x = self.on_stage[v]
        if x is None:
            return int(self.fixed_stage[v] >= b)
        return sum(lit for k, lit in x.items() if k >= b)

    def _pipeline_memory(self) -> None:
        """params_k + in_flight(k) * activations_k <= memory[k] (the 1F1B model of the problem's notes).

        Training with recompute adds ``stage_input_coef[k]`` times the bytes stage k receives: a
        value u crosses boundary b = k - 1 when s_u <= b < s_v for a reader v; ``cross[u,b] >=
        [s_v > b] - [s_u > b]`` for each reader suffices, since a capacity is only ever helped by
        a smaller ``cross``. Training's peak ``factor * params_k + max(acts_k + work_k, step_k)``
        is two sets of rows, one per side of the max: a row per node for the working set
        (`_working_sets`), and one for the step, whose max over the stage's nodes is a variable
        bounded below by ``step_v [s_v == k]`` (`_stage_max`; a capacity only gains from it being
        least, so the bound is as good as the equality).
        """
        coef, extra = self.problem.stage_memory_coef, self.problem.stage_input_coef
        factor = self.problem.param_factor  # a shared weight's gradient and optimizer state, in training
        out = self.problem.graph.out_bytes
        most = coef.sum(axis=0) + factor * self.problem.shared_bytes
        work, step = self.problem.work_coef, self.problem.step_coef  # all 0 in inference
        kept = np.flatnonzero(self._kept_values()).tolist() if any(extra) else []
        own = factor * np.repeat(self.problem.graph.param_bytes.astype(np.int64)[:, None], self.K, axis=1) if step.any() else None
        for k, cap in enumerate(self.problem.effective_memory):
            # at least everything constrains nothing
            if cap < int(most[k]) + extra[k] * int(out.sum()) + int(work.max(initial=0)):
                received = sum(int(out[u]) * self._crossing(u, k - 1) for u in kept) if extra[k] else 0
                base = self._with_shared(self._stage_sum(coef, k) + extra[k] * received, k, factor)
                if work.any():
                    self._working_sets(base, k, cap, int(most[k]) + extra[k] * int(out.sum()))
                else:
                    self.model.Add(base <= cap)
            if own is not None and cap < int(own[:, k].sum()) + factor * self.problem.shared_bytes + int(step.max()):
                self.model.Add(self._with_shared(self._stage_sum(own, k), k, factor) + self._stage_max(step, k, "step") <= cap)

    def _working_sets(self, base, k: int, cap: int, most: int) -> None:
        """base <= cap, and for every node v that may sit on k: base + work_v [s_v == k] - (what
        the nodes on k after v release) <= cap (`incsched.problems.training`'s notes: without v on
        k the row is weaker than the first). The releases after v are a chain of running sums, so
        each row has four terms."""
        work, release = self.problem.work_coef, self.problem.release_coef
        total = self.model.NewIntVar(0, most, f"mem_base[{k}]")
        self.model.Add(total == base)
        self.model.Add(total <= cap)
        after, room = 0, 0  # sum of release_u [s_u == k] over the nodes after v, and its largest value
        for v in range(len(work) - 1, -1, -1):
            x = self.on_stage[v]
            lit = x[k] if x is not None and k in x else int(self.fixed_stage[v] == k) if x is None else 0
            if isinstance(lit, int) and lit == 0:
                continue
            if work[v]:
                self.model.Add(total + int(work[v]) * lit - after <= cap)
            if release[v]:
                room += int(release[v])
                running = self.model.NewIntVar(0, room, f"released[{k},{v}]")
                self.model.Add(running == after + int(release[v]) * lit)
                after = running

    def _stage_max(self, values: np.ndarray, k: int, name: str):
        """At least max_v values[v] [stage_v == k] (0 on an empty stage): a constant where the domains
        decide it, else a variable bounded below by each node's term (one per literal: merged nodes
        share theirs)."""
        floor = int(values[self.fixed_stage == k].max(initial=0))
        lits: dict[int, tuple[object, int]] = {}
        for v, x in enumerate(self.on_stage):
            if x is not None and k in x and values[v] > floor:
                i = x[k].Index()
                if i not in lits or lits[i][1] < values[v]:
                    lits[i] = (x[k], int(values[v]))
        if not lits:
            return floor
        top = max(c for _, c in lits.values())
        m = self.model.NewIntVar(floor, top, f"{name}[{k}]")
        for lit, c in lits.values():
            self.model.Add(m >= c * lit)
        return m

    def _kept_values(self) -> np.ndarray:
        """Nodes whose value has bytes and a reader: those a stage under recompute may receive and keep."""
        g = self.problem.graph
        has_reader = np.zeros(g.n_nodes, dtype=bool)
        has_reader[g.src[self.problem.readers]] = True
        return has_reader & (g.out_bytes > 0)

    def _crossing(self, u: int, b: int):
        """At least [u's value crosses boundary b] (a constant, or a Boolean bounded below by each reader)."""
        g = self.problem.graph
        if not hasattr(self, "_reads"):
            self._reads: dict[int, list[int]] = {}
            for x, v in zip(g.src[self.problem.readers].tolist(), g.dst[self.problem.readers].tolist()):
                self._reads.setdefault(x, []).append(v)
        later = [self._at_or_after(v, b + 1) for v in self._reads[u]]
        moved = self._at_or_after(u, b + 1)
        if isinstance(moved, int) and all(isinstance(x, int) for x in later):
            return int(moved == 0 and any(later))
        cross = self.model.NewBoolVar(f"cross[{g.names[u]},{b}]")
        for x in later:
            self.model.Add(cross >= x - moved)
        return cross

    def _stage_time(self) -> list:
        """stage_time_peak == max_k (compute ticks of k + send ticks of the values k sends).

        Stage k sends u exactly when s_u <= k < s_v for some reader v: the Boolean ``send[u,k]`` is
        pinned to that by ``send <= [s_u <= k]``, ``send <= sum_v [s_v > k]`` and ``send >= [s_v > k]
        - [s_u > k]`` for each reader (an equality in all cases, so no slack reaches the cost).
        """
        g, K = self.problem.graph, self.K
        ticks, send_ticks = self.problem.node_ticks, self.problem.send_ticks
        data = self.problem.readers
        reads: dict[int, list[int]] = {}
        for u, v in zip(g.src[data].tolist(), g.dst[data].tolist()):
            reads.setdefault(u, []).append(v)
        loads = [self._stage_sum(ticks, k) for k in range(K)]
        self.sends: dict[tuple[int, int], cp_model.IntVar] = {}  # hinted with the stages
        for u in np.flatnonzero(self._senders()).tolist():
            for k in range(K - 1):
                later = [self._at_or_after(v, k + 1) for v in reads[u]]
                moved = self._at_or_after(u, k + 1)
                if isinstance(moved, int) and all(isinstance(b, int) for b in later):
                    loads[k] += int(send_ticks[u]) * int(moved == 0 and any(later))
                    continue
                send = self.model.NewBoolVar(f"send[{g.names[u]},{k}]")
                self.model.Add(send + moved <= 1)
                self.model.Add(send <= sum(later))
                for b in later:
                    self.model.Add(send >= b - moved)
                self.sends[u, k] = send
                loads[k] += int(send_ticks[u]) * send
        floor = 0
        if self.problem.stage_speed is None or len(set(self.problem.stage_speed)) == 1:
            floor = max(-(-int(ticks[:, 0].sum()) // K), int(ticks.max(initial=0)))
        most = max(self.problem.term_upper_bounds()["stage_time_peak"], floor)
        peak = self.model.NewIntVar(floor, most, "stage_time_peak")
        self._max_equality(peak, loads, 0, most, "stage_time")
        self.terms["stage_time_peak"] = peak
        self.term_parts["stage_time_peak"] = ("max", loads)
        return [self.weights["stage_time_peak"] * peak]

    def _grad_sync(self) -> list:
        """grad_sync_peak == max_k (sum of the sync ticks of the weights held on k and elsewhere).

        Per shared weight w whose sync costs ticks: ``rep[w]`` (held on >= 2 stages) is pinned by
        ``sum_k held[w,k] >= 2 rep`` and ``sum_k held[w,k] <= 1 + (n - 1) rep`` (n the stages a
        reader may take), and ``sync[w,k] == held[w,k] AND rep[w]`` by three clauses; stage k's
        sync is ``sum_w ticks_w sync[w,k]``. Every indicator is an equality of the stages (the
        ``held`` Booleans are the readers' OR both ways), so the model never under-charges and a
        time-limited solution carries no slack. A weight only one stage can hold gets nothing.
        """
        K = self.K
        loads: list = [0] * K
        self.syncs: list[tuple[object, dict[int, object], object, int]] = []  # (rep, {k: new sync var}, weight, ticks), hinted
        for w, held, t in zip(self.shared, self.held, self.shared_ticks):
            if not t or len(held) < 2:
                continue
            fixed = sum(1 for y in held.values() if isinstance(y, int))  # stages a fixed reader holds it on
            if fixed >= 2:
                rep = 1
            else:
                rep = self.model.NewBoolVar(f"replicated[{w.name}]")
                count = sum(y for y in held.values() if not isinstance(y, int)) + fixed
                self.model.Add(count >= 2 * rep)
                self.model.Add(count <= 1 + (len(held) - 1) * rep)
            syncs = {}
            for k, y in held.items():
                if isinstance(y, int) or isinstance(rep, int):
                    z = rep if isinstance(y, int) else y  # one side is the constant 1
                else:
                    z = syncs[k] = self.model.NewBoolVar(f"sync[{w.name},{k}]")
                    self.model.AddImplication(z, y)
                    self.model.AddImplication(z, rep)
                    self.model.AddBoolOr([y.Not(), rep.Not(), z])
                loads[k] += t * z
            self.syncs.append((rep, syncs, w, t))
        most = self.problem.term_upper_bounds()["grad_sync_peak"]
        peak = self.model.NewIntVar(0, most, "grad_sync_peak")
        self._max_equality(peak, loads, 0, most, "grad_sync")
        self.terms["grad_sync_peak"] = peak
        self.term_parts["grad_sync_peak"] = ("max", loads)
        return [self.weights["grad_sync_peak"] * peak]

    def _comm_total(self):
        comm = self.problem.edge_comm
        hi = int(comm.sum()) * (self.K - 1)
        total = self.model.NewIntVar(0, max(hi, 0), "comm_total")
        expr = sum(int(c) * self.stage[v] for v, c in enumerate(self.net_group.tolist()) if c)
        self.model.Add(total == expr)
        self.term_parts["comm_total"] = ("sum", [expr])
        self.terms["comm_total"] = total
        return total

    def _comm_peak(self) -> list:
        # Traffic over boundary b (between stages b-1 and b) = sum_v net(v) [s_v >= b], exact
        # because s_u <= s_v makes [s_v >= b] - [s_u >= b] the edge's crossing indicator.
        K = self.K
        peak = self.model.NewIntVar(0, int(self.problem.edge_comm.sum()), "comm_peak")
        boundaries = []
        for b in range(1, K):
            expr = 0
            for v, c in enumerate(self.net_group.tolist()):
                if not c:
                    continue
                x = self.on_stage[v]
                if x is None:
                    expr += c * int(self.fixed_stage[v] >= b)
                else:
                    expr += c * sum(lit for k, lit in x.items() if k >= b)
            boundaries.append(expr)
        self._max_equality(peak, boundaries, 0, int(self.problem.edge_comm.sum()), "boundary")
        self.terms["comm_peak"] = peak
        self.term_parts["comm_peak"] = ("max", boundaries)
        return [self.weights["comm_peak"] * peak]

    def solution_cost(self, solver: cp_model.CpSolver) -> int:
        """The scaled objective of the solver's solution, from the term expressions themselves.

        The term variables' values are not used: a peak variable may exceed its max when CP-SAT
        has relaxed the equality (rand_graph_10000_2, K=10: objective 100 above the evaluator's).
        """
        cost = 0
        for name, (kind, exprs) in self.term_parts.items():
            values = [int(e) if isinstance(e, (int, np.integer)) else solver.Value(e) for e in exprs]
            if kind == "max":
                value = max(values)
            elif name == "spill":
                value = sum(max(v, 0) for v in values)
            else:
                value = sum(values)
            cost += self.weights[name] * value
        return cost

    # ------------------------------------------------------------------ warm start

    def add_hint(self, stages: np.ndarray) -> None:
        """Hint every decision and term variable from a full assignment (a complete hint is cheap to check)."""
        g, K = self.problem.graph, self.K
        if stages.shape != (g.n_nodes,):
            raise ValueError(f"hint has shape {stages.shape}, expected ({g.n_nodes},)")
        stages = np.clip(stages, 0, K - 1)
        for v, s in enumerate(stages.tolist()):
            if not self.is_root[v]:
                continue  # its group's variable is hinted once, by the group's root
            self.model.AddHint(self.stage[v], s)
            x = self.on_stage[v]
            if x is not None:
                for k, lit in x.items():
                    self.model.AddHint(lit, int(k == s))
        mem = np.zeros(K, dtype=np.int64)
        np.add.at(mem, stages, g.param_bytes)
        for w, held in zip(self.shared, self.held):
            on = set(stages[list(w.readers)].tolist())
            mem[list(on)] += w.nbytes
            for k, y in held.items():
                if not isinstance(y, int):
                    self.model.AddHint(y, int(k in on))
        ticks = np.zeros(K, dtype=np.int64)
        np.add.at(ticks, stages, self.problem.node_ticks[np.arange(g.n_nodes), stages])
        comm = self.problem.edge_comm
        boundary = [int(comm[(stages[g.src] < b) & (stages[g.dst] >= b)].sum()) for b in range(1, K)]
        per_stage = {"mem": mem.tolist(), "ticks": ticks.tolist(), "boundary": boundary}
        values = {
            "mem_peak": int(mem.max()),
            "compute_peak": int(ticks.max()),
            "comm_total": sum(boundary),  # Python ints: (K-1) times the edges' bytes may pass int64
            "comm_peak": max(boundary, default=0),
        }
        if self.use_stage_time:
            data = self.problem.readers
            last = np.full(g.n_nodes, -1, dtype=np.int64)
            np.maximum.at(last, g.src[data], stages[g.dst[data]])
            for (u, k), var in self.sends.items():
                self.model.AddHint(var, int(stages[u] <= k < last[u]))
            stage_time = ticks.copy()
            for u in np.flatnonzero(last > stages).tolist():
                stage_time[stages[u]:last[u]] += int(self.problem.send_ticks[u])
            per_stage["stage_time"] = stage_time.tolist()
            values["stage_time_peak"] = int(stage_time.max())
        if self.use_grad_sync:
            sync = [0] * K
            for rep, syncs, w, t in self.syncs:
                on = set(stages[list(w.readers)].tolist())
                replicated = len(on) > 1
                if not isinstance(rep, int):
                    self.model.AddHint(rep, int(replicated))
                for k, z in syncs.items():
                    self.model.AddHint(z, int(replicated and k in on))
                for k in on if replicated else ():
                    sync[k] += t
            per_stage["grad_sync"] = sync
            values["grad_sync_peak"] = max(sync, default=0)
        if self.problem.spill_capacity is not None:
            total = g.total_param_bytes
            over = mem - np.asarray([min(int(c), total) for c in self.problem.spill_capacity], dtype=np.int64)
            values["spill"] = int(np.maximum(over, 0).sum())
            for k, var in enumerate(getattr(self, "spill_parts", [])):
                self.model.AddHint(var, int(max(over[k], 0)))
                per_stage[f"over{k}"] = {0: int(over[k])}
        for name, stage_vars in self.per_stage.items():
            for k, var in stage_vars.items():
                self.model.AddHint(var, int(per_stage[name][k]))
        for name, var in self.terms.items():
            self.model.AddHint(var, values[name])
