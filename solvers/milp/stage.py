"""The stage problem as a mixed-integer linear program through PuLP: CP-SAT's cross-check.

Same problem, same window and hint arguments, same `SolverOutput` as `incsched.solvers.cpsat.stage`, but an
independent formulation (one binary per node and allowed stage, stages as their weighted sum,
peaks as epigraph variables, a shared weight as one variable per stage at least each of its
readers' binaries there, whose bytes join that stage's parameters; the pipeline's sends and
training's gradient sync as variables at least their indicators) solved by CBC, or HiGHS where ``highspy`` is installed. Tests compare
the two back ends' optima on small instances.

Exact numbers. MILP solvers compute in float64 with tolerances, so this back end (1) uses the
same exact integer weights as CP-SAT (`ObjectiveWeights.scaled`), (2) refuses with `ProblemError`
any problem whose worst objective or longest linear sum passes `MILP_LIMIT` (2**53, where float64
stops representing every integer), (3) recomputes the objective of the rounded assignment in
Python ints, and (4) claims ``optimal`` only when that exact cost equals the solver's own
objective (within 0.5); otherwise the answer is ``feasible`` with no bound and the reason in
``info["reason"]``. ``objective`` and ``bound`` are a Python int when whole, else a
`fractions.Fraction`, in the problem's units.
"""

from __future__ import annotations

import logging
import math
import time
import warnings

import numpy as np
import pulp

from incsched.problems.stage import ProblemError, StageProblem, exact_number

from .. import SolverOutput, SolverSettings

__all__ = ["solve_stage_milp", "available_backends", "MILP_LIMIT"]

log = logging.getLogger(__name__)

#: Largest objective or linear sum a MILP may see: float64 is exact for integers up to 2**53 only.
MILP_LIMIT = 2**53


def available_backends() -> list[str]:
    """The MILP solvers usable here: ``"cbc"`` (bundled with PuLP) and ``"highs"`` if highspy imports."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        cbc = pulp.PULP_CBC_CMD(msg=False).available()
    if cbc:
        out.append("cbc")
    try:
        if pulp.HiGHS(msg=False).available():
            out.append("highs")
    except (AttributeError, pulp.PulpSolverError):
        pass
    return out


def solve_stage_milp(
    problem: StageProblem,
    settings: SolverSettings,
    window: tuple[np.ndarray, np.ndarray] | None = None,
    hint: np.ndarray | None = None,
    backend: str = "cbc",
) -> SolverOutput:
    """Solve ``problem`` (inside ``window`` if given) as a MILP.

    Parameters
    ----------
    problem : StageProblem
        The problem (its integer coefficients, as for CP-SAT).
    settings : SolverSettings
        ``time_limit`` (seconds) and ``workers`` (CBC threads; 1 in deterministic mode).
    window : (lo, hi) pair of int arrays, optional
        Inclusive per-node stage ranges.
    hint : int array, optional
        A full stage assignment passed as a MIP start.
    backend : {"cbc", "highs"}
        The MILP solver.

    Returns
    -------
    SolverOutput
        ``objective``: the exact cost of the rounded assignment in the problem's units (int or
        Fraction); ``bound`` equals it when proven optimal (and the solver's float objective agrees
        with the exact cost) and is None otherwise, since PuLP does not report the solver's dual
        bound. Infeasibility visible before solving gives ``infeasible`` with ``info["reason"]``.

    Raises
    ------
    ValueError
        If ``backend`` is unknown or not installed here.
    ProblemError
        If the objective's range or a linear sum passes `MILP_LIMIT` (2**53), or the problem keeps
        the inputs a stage receives under recompute (CP-SAT's only).
    """
    if problem.memory is not None and any(problem.stage_input_coef):
        raise ProblemError("the MILP back end does not model the inputs a stage keeps under recompute; solve it with CP-SAT")
    start = time.perf_counter()
    name = f"milp-{backend}"
    info: dict = {"time_unit": problem.time_unit}
    allowed, reason = problem.allowed_or_reason(window)
    if reason is None and problem.training and not allowed.any(axis=0).all():  # an empty row would read as no constraint
        reason = f"the window leaves stage {int(np.argmin(allowed.any(axis=0)))} no node, and training mode puts one on every stage"
    if reason is not None:
        info["reason"] = reason
        return SolverOutput("infeasible", None, None, None, time.perf_counter() - start, name, info=info)

    ints, unit = problem.weights.scaled()
    _check_range(problem, ints)
    prob, stage_expr, on = _build(problem, allowed, ints)
    if hint is not None:
        hint = np.asarray(hint, dtype=np.int64)
        for (v, k), var in on.items():
            var.setInitialValue(int(hint[v] == k))
    solver = _solver(backend, settings, warm=hint is not None)
    prob.solve(solver)
    sol = prob.sol_status
    assignment = objective = bound = None
    if sol in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        assignment = np.asarray([max(opts, key=lambda kv: pulp.value(kv[1]) or 0.0)[0] for opts in _by_node(on, len(stage_expr))], dtype=np.int64)
        cost = _exact_cost(problem, assignment, ints)
        reported = pulp.value(prob.objective) or 0.0
        objective = exact_number(unit * cost)
        status = "optimal" if sol == pulp.LpSolutionOptimal else "feasible"
        if status == "feasible":  # PuLP reads CBC's "Stopped on time - objective value" as Optimal/IntegerFeasible
            info["reason"] = f"{backend} stopped before its proof (time limit {settings.time_limit:g} s, wall clock)"
        if status == "optimal" and abs(reported - cost) > 0.5:
            # The solver's tolerances (a binary at 1e-7 times a byte count) moved its objective off
            # what the rounded assignment costs: its proof is not about this assignment.
            status = "feasible"
            info["reason"] = f"{backend}'s objective {reported!r} differs from the assignment's exact cost {cost}; optimality not claimed"
        bound = objective if status == "optimal" else None
    elif sol == pulp.LpSolutionInfeasible or prob.status == pulp.LpStatusInfeasible:
        status = "infeasible"
        info["reason"] = f"{backend} proved that no assignment meets the capacities within the window"
    else:
        status = "unknown"
    info.update(n_variables=len(prob.variables()), n_constraints=prob.numConstraints(), pulp_status=pulp.LpStatus[prob.status])
    return SolverOutput(status, assignment, objective, bound, time.perf_counter() - start, name, info=info)


def _solver(backend: str, settings: SolverSettings, warm: bool):
    threads = 1 if settings.deterministic else settings.workers
    if backend == "cbc":
        # The bundled CBC binary: PuLP 3.3 warns it moves to an extra in 4.0, but it is what a
        # plain `pip install pulp` ships, so it stays the default here.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return pulp.PULP_CBC_CMD(msg=settings.log_search, timeLimit=settings.time_limit, threads=threads, warmStart=warm)
    if backend == "highs" and "highs" in available_backends():
        return pulp.HiGHS(msg=settings.log_search, timeLimit=settings.time_limit, threads=threads)
    raise ValueError(f"unknown or unavailable MILP backend {backend!r} (available: {available_backends()})")


def _variable(prob: pulp.LpProblem, name: str, **kwargs) -> pulp.LpVariable:
    # PuLP 3.3 deprecates free-standing LpVariable in favour of attaching it to the problem.
    if hasattr(prob, "add_variable"):
        return prob.add_variable(name, **kwargs)
    return pulp.LpVariable(name, **kwargs)


def _by_node(on: dict, n: int) -> list[list[tuple[int, pulp.LpVariable]]]:
    out: list[list[tuple[int, pulp.LpVariable]]] = [[] for _ in range(n)]
    for (v, k), var in on.items():
        out[v].append((k, var))
    return out


def _check_range(problem: StageProblem, ints: dict[str, int]) -> None:
    ub = problem.term_upper_bounds()
    worst = sum(c * ub[t] for t, c in ints.items() if c)
    longest = max(ub["mem_peak"], ub["compute_peak"] if ints["compute_peak"] else 0, 2 * ub["comm_peak"],
                  ub["stage_time_peak"] if ints["stage_time_peak"] else 0, ub["grad_sync_peak"] if ints["grad_sync_peak"] else 0)
    if problem.memory is not None:
        longest = max(longest, int(problem.stage_memory_coef.sum(axis=0).max(initial=0)) + problem.param_factor * problem.shared_bytes
                      + int(problem.work_coef.max(initial=0)) + int(problem.step_coef.max(initial=0)))
    for what, size in (("the objective's range", worst), ("a linear sum", longest)):
        if size > MILP_LIMIT:
            raise ProblemError(
                f"stage problem on graph {problem.graph.name!r}: {what} reaches 2^{math.log2(size):.1f}, beyond the "
                "MILP back end's 2^53 limit (float64 stops being exact there); use CP-SAT or scale the byte counts down"
            )


def _exact_cost(problem: StageProblem, stages: np.ndarray, ints: dict[str, int]) -> int:
    """sum_t c_t * term_t of an assignment, in Python ints (the MILP's objective, recomputed exactly)."""
    g, K = problem.graph, problem.n_stages
    s = stages.tolist()
    load, ticks = [0] * K, [0] * K
    node_ticks = problem.node_ticks
    for v, (p, k) in enumerate(zip(g.param_bytes.tolist(), s)):
        load[k] += p
        ticks[k] += int(node_ticks[v, k])
    for w in g.shared_weights:
        for k in {s[v] for v in w.readers}:
            load[k] += w.nbytes
    cross = [0] * (K + 1)
    comm_total = 0
    for u, v, c in zip(g.src.tolist(), g.dst.tolist(), problem.edge_comm.tolist()):
        if s[u] < s[v]:
            cross[s[u]] += c
            cross[s[v]] -= c
            comm_total += c * (s[v] - s[u])
    boundary, run = [], 0
    for b in range(K - 1):
        run += cross[b]
        boundary.append(run)
    spill = 0 if problem.spill_capacity is None else sum(max(x - c, 0) for x, c in zip(load, problem.spill_capacity))
    # Sends: u's value leaves every stage from its own to the one before its last data reader's.
    last = [-1] * g.n_nodes
    for u, v, b in zip(g.src.tolist(), g.dst.tolist(), g.edge_bytes.tolist()):
        if b > 0:
            last[u] = max(last[u], s[v])
    timed = list(ticks)
    for u, t in enumerate(problem.send_ticks.tolist()):
        for k in range(s[u], last[u]):
            timed[k] += t
    # Gradient sync: a shared weight held on two or more stages costs its ticks on each.
    sync = [0] * K
    for w, t in zip(g.shared_weights, problem.grad_sync_ticks.tolist()):
        on = {s[v] for v in w.readers}
        for k in on if len(on) > 1 else ():
            sync[k] += t
    terms = {
        "mem_peak": max(load),
        "comm_total": comm_total,
        "comm_peak": max(boundary, default=0),
        "compute_peak": max(ticks),
        "spill": spill,
        "stage_time_peak": max(timed),
        "grad_sync_peak": max(sync),
    }
    return sum(c * terms[t] for t, c in ints.items() if c)


def _build(problem: StageProblem, allowed: np.ndarray, w: dict[str, int]):
    """The MILP: binaries on[v, k], s_v = sum k on[v, k], epigraph variables for the peaks."""
    g, K = problem.graph, problem.n_stages
    total = g.total_param_bytes
    prob = pulp.LpProblem("stage", pulp.LpMinimize)
    on = {
        (v, k): _variable(prob, f"on_{v}_{k}", cat="Binary")
        for v in range(g.n_nodes)
        for k in np.flatnonzero(allowed[v]).tolist()
    }
    by_node: list[list[tuple[int, pulp.LpVariable]]] = [[] for _ in range(g.n_nodes)]
    for (v, k), var in on.items():
        by_node[v].append((k, var))
    for v, opts in enumerate(by_node):
        prob += pulp.lpSum(var for _, var in opts) == 1, f"one_stage_{v}"
    stage_expr = [pulp.lpSum(k * var for k, var in opts) for opts in by_node]
    for e, (u, v) in enumerate(zip(g.src.tolist(), g.dst.tolist())):
        prob += stage_expr[u] <= stage_expr[v], f"precedence_{e}"
    if problem.training:  # a training pipeline runs every stage (incsched.problems.training's notes)
        for k in range(K):
            prob += pulp.lpSum(on[v, k] for v in range(g.n_nodes) if (v, k) in on) >= 1, f"nonempty_{k}"

    def stage_load(k: int, coef) -> pulp.LpAffineExpression:
        return pulp.lpSum(int(coef[v]) * on[v, k] for v in range(g.n_nodes) if (v, k) in on and coef[v])

    p = g.param_bytes
    mem = [stage_load(k, p) for k in range(K)]
    # held_w_k >= on[v, k] for each reader v: minimisation (or a capacity's room) keeps it at the
    # readers' OR; the exact cost below is recomputed from the assignment whatever it is.
    shared = [pulp.lpSum([]) for _ in range(K)]
    held_vars: dict[tuple[int, int], pulp.LpVariable] = {}  # (weight, stage): at least its readers' OR there
    for i, weight in enumerate(g.shared_weights):
        for k in range(K):
            readers = [on[v, k] for v in weight.readers if (v, k) in on]
            if weight.nbytes and readers:
                held = held_vars[i, k] = _variable(prob, f"held_{i}_{k}", lowBound=0, upBound=1)
                for j, x in enumerate(readers):
                    prob += held >= x, f"held_{i}_{k}_{j}"
                shared[k] += weight.nbytes * held
    if g.shared_weights:
        mem = [mem[k] + shared[k] for k in range(K)]
    if problem.memory is not None:
        # Training: factor x (parameters and shared weights) + max(stash + work_k, step_k): one row per
        # node for the working set, an epigraph variable for the step (all 0 in inference).
        coef, factor = problem.stage_memory_coef, problem.param_factor
        work, step = problem.work_coef, problem.step_coef
        most = coef.sum(axis=0) + factor * problem.shared_bytes

        release = problem.release_coef
        for k, cap in enumerate(problem.effective_memory):
            if cap < int(most[k]) + int(work.max(initial=0)):
                base = stage_load(k, coef[:, k]) + factor * shared[k]
                prob += base <= cap, f"memory_{k}"
                # at v: base + work_v on[v, k] - what the nodes on k after v released (weaker than base <= cap without v)
                for v in range(g.n_nodes):
                    if (v, k) in on and work[v]:
                        after = pulp.lpSum(int(release[u]) * on[u, k] for u in range(v + 1, g.n_nodes) if (u, k) in on and release[u])
                        prob += base + int(work[v]) * on[v, k] - after <= cap, f"memory_{k}_{v}"
            if step.any() and cap < factor * total + int(step.max()):
                top = _variable(prob, f"step_{k}", lowBound=0)
                for v in range(g.n_nodes):
                    if (v, k) in on and step[v]:
                        prob += top >= int(step[v]) * on[v, k], f"step_{k}_{v}"
                prob += factor * mem[k] + top <= cap, f"memory_step_{k}"
    objective = []
    if problem.capacity is not None:
        for k in range(K):
            if problem.effective_capacity[k] < total:  # above the total a capacity constrains nothing
                prob += mem[k] <= problem.effective_capacity[k], f"capacity_{k}"
    if w["mem_peak"] > 0:
        peak = _variable(prob, "mem_peak", lowBound=0)
        for k in range(K):
            prob += peak >= mem[k], f"mem_peak_{k}"
        objective.append(w["mem_peak"] * peak)
    if w["spill"] > 0:
        for k in range(K):
            spill_k = _variable(prob, f"spill_{k}", lowBound=0)
            prob += spill_k >= mem[k] - min(problem.spill_capacity[k], total), f"spill_{k}"
            objective.append(w["spill"] * spill_k)
    if w["compute_peak"] > 0:
        ticks = problem.node_ticks
        peak_t = _variable(prob, "compute_peak", lowBound=0)
        for k in range(K):
            prob += peak_t >= stage_load(k, ticks[:, k]), f"compute_peak_{k}"
        objective.append(w["compute_peak"] * peak_t)
    comm = problem.edge_comm
    if w["comm_total"] > 0:
        objective.append(
            w["comm_total"]
            * pulp.lpSum(int(c) * (stage_expr[v] - stage_expr[u]) for u, v, c in zip(g.src.tolist(), g.dst.tolist(), comm.tolist()) if c)
        )
    if w["comm_peak"] > 0 and K > 1:
        # An edge crosses boundary b (between b-1 and b) iff s_u < b <= s_v; with s_u <= s_v that
        # is [s_v >= b] - [s_u >= b], each a sum of binaries.
        peak_c = _variable(prob, "comm_peak", lowBound=0)
        for b in range(1, K):
            at_or_after = [pulp.lpSum(var for k, var in opts if k >= b) for opts in by_node]
            prob += peak_c >= pulp.lpSum(
                int(c) * (at_or_after[v] - at_or_after[u]) for u, v, c in zip(g.src.tolist(), g.dst.tolist(), comm.tolist()) if c
            ), f"comm_peak_{b}"
        objective.append(w["comm_peak"] * peak_c)
    if w["stage_time_peak"] > 0:
        objective.append(w["stage_time_peak"] * _stage_time(prob, problem, on, by_node))
    if w["grad_sync_peak"] > 0 and problem.grad_sync_ticks.any() and K > 1:
        objective.append(w["grad_sync_peak"] * _grad_sync(prob, problem, held_vars))
    prob += pulp.lpSum(objective)
    return prob, stage_expr, on


def _stage_time(prob, problem: StageProblem, on: dict, by_node: list) -> pulp.LpVariable:
    """Epigraph of the slowest stage: peak >= compute_k + sum_u send_ticks[u] send[u, k], with
    send[u, k] >= [s_v > k] - [s_u > k] for each data reader v of u (stage k sends u exactly when
    s_u <= k < s_v for some reader; minimisation keeps send at that indicator)."""
    g, K = problem.graph, problem.n_stages
    ticks, send_ticks = problem.node_ticks, problem.send_ticks
    reads: dict[int, list[int]] = {}
    for u, v, b in zip(g.src.tolist(), g.dst.tolist(), g.edge_bytes.tolist()):
        if b > 0 and send_ticks[u] > 0:
            reads.setdefault(u, []).append(v)
    after = [[pulp.lpSum(var for k, var in opts if k > b) for b in range(K)] for opts in by_node]  # [s_v > b]
    loads = [pulp.lpSum(int(ticks[v, k]) * on[v, k] for v in range(g.n_nodes) if (v, k) in on and ticks[v, k]) for k in range(K)]
    for u, readers in reads.items():
        for k in range(K - 1):
            send = _variable(prob, f"send_{u}_{k}", lowBound=0, upBound=1)
            for j, v in enumerate(readers):
                prob += send >= after[v][k] - after[u][k], f"send_{u}_{k}_{j}"
            loads[k] += int(send_ticks[u]) * send
    peak = _variable(prob, "stage_time_peak", lowBound=0)
    for k in range(K):
        prob += peak >= loads[k], f"stage_time_{k}"
    return peak


def _grad_sync(prob, problem: StageProblem, held: dict) -> pulp.LpVariable:
    """Epigraph of the busiest stage's gradient sync: peak >= sum_w ticks_w sync[w, k], with
    sync[w, k] >= held[w, k] + held[w, j] - 1 for every other stage j a reader may take (w held
    on k and elsewhere; minimisation keeps it at that AND). An independent form of CP-SAT's rows,
    which pin a replicated indicator instead."""
    K = problem.n_stages
    loads = [pulp.lpSum([]) for _ in range(K)]
    for i, t in enumerate(problem.grad_sync_ticks.tolist()):
        stages = sorted(k for (j, k) in held if j == i)
        if not t or len(stages) < 2:
            continue
        for k in stages:
            sync = _variable(prob, f"sync_{i}_{k}", lowBound=0, upBound=1)
            for j in stages:
                if j != k:
                    prob += sync >= held[i, k] + held[i, j] - 1, f"sync_{i}_{k}_{j}"
            loads[k] += t * sync
    peak = _variable(prob, "grad_sync_peak", lowBound=0)
    for k in range(K):
        prob += peak >= loads[k], f"grad_sync_{k}"
    return peak
