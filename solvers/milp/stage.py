"""The stage problem as a mixed-integer linear program through PuLP: CP-SAT's cross-check.

Same problem, same window and hint arguments, same `SolverOutput` as `solvers.cpsat.stage`, but an
independent formulation (one binary per node and allowed stage, stages as their weighted sum,
peaks as epigraph variables) solved by CBC, or HiGHS where ``highspy`` is installed. Tests compare
the two back ends' optima on small instances.
"""

from __future__ import annotations

import logging
import time
import warnings

import numpy as np
import pulp

from incsched.problems.stage import StageProblem

from .. import SolverOutput, SolverSettings

__all__ = ["solve_stage_milp", "available_backends"]

log = logging.getLogger(__name__)


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
        ``objective`` in the problem's integer units (rounded: every coefficient is an integer times a
        weight); ``bound`` equals it when proven optimal and is None otherwise, since PuLP does
        not report the solver's dual bound. Infeasibility visible before solving gives
        ``infeasible`` with ``info["reason"]``.

    Raises
    ------
    ValueError
        If ``backend`` is unknown or not installed here.
    """
    start = time.perf_counter()
    name = f"milp-{backend}"
    info: dict = {"time_unit": problem.time_unit}
    allowed, reason = problem.allowed_or_reason(window)
    if reason is not None:
        info["reason"] = reason
        return SolverOutput("infeasible", None, None, None, time.perf_counter() - start, name, info=info)

    prob, stage_expr, on = _build(problem, allowed)
    if hint is not None:
        hint = np.asarray(hint, dtype=np.int64)
        for (v, k), var in on.items():
            var.setInitialValue(int(hint[v] == k))
    solver = _solver(backend, settings, warm=hint is not None)
    prob.solve(solver)
    sol = prob.sol_status
    assignment = objective = bound = None
    if sol in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        assignment = np.asarray([int(round(pulp.value(e))) for e in stage_expr], dtype=np.int64)
        objective = pulp.value(prob.objective) or 0.0
        objective = int(round(objective)) if abs(objective - round(objective)) < 1e-6 else objective
        status = "optimal" if sol == pulp.LpSolutionOptimal else "feasible"
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


def _build(problem: StageProblem, allowed: np.ndarray):
    """The MILP: binaries on[v, k], s_v = sum k on[v, k], epigraph variables for the peaks."""
    g, K, w = problem.graph, problem.n_stages, problem.weights
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

    def stage_load(k: int, coef) -> pulp.LpAffineExpression:
        return pulp.lpSum(int(coef[v]) * on[v, k] for v in range(g.n_nodes) if (v, k) in on and coef[v])

    p = g.param_bytes
    mem = [stage_load(k, p) for k in range(K)]
    objective = []
    if problem.capacity is not None:
        for k in range(K):
            prob += mem[k] <= problem.capacity[k], f"capacity_{k}"
    if w.mem_peak > 0:
        peak = _variable(prob, "mem_peak", lowBound=0)
        for k in range(K):
            prob += peak >= mem[k], f"mem_peak_{k}"
        objective.append(w.mem_peak * peak)
    if w.spill > 0:
        for k in range(K):
            spill_k = _variable(prob, f"spill_{k}", lowBound=0)
            prob += spill_k >= mem[k] - problem.spill_capacity[k], f"spill_{k}"
            objective.append(w.spill * spill_k)
    if w.compute_peak > 0:
        ticks = problem.node_ticks
        peak_t = _variable(prob, "compute_peak", lowBound=0)
        for k in range(K):
            prob += peak_t >= stage_load(k, ticks[:, k]), f"compute_peak_{k}"
        objective.append(w.compute_peak * peak_t)
    comm = problem.edge_comm
    if w.comm_total > 0:
        objective.append(
            w.comm_total
            * pulp.lpSum(int(c) * (stage_expr[v] - stage_expr[u]) for u, v, c in zip(g.src.tolist(), g.dst.tolist(), comm.tolist()) if c)
        )
    if w.comm_peak > 0 and K > 1:
        # An edge crosses boundary b (between b-1 and b) iff s_u < b <= s_v; with s_u <= s_v that
        # is [s_v >= b] - [s_u >= b], each a sum of binaries.
        peak_c = _variable(prob, "comm_peak", lowBound=0)
        for b in range(1, K):
            at_or_after = [pulp.lpSum(var for k, var in opts if k >= b) for opts in by_node]
            prob += peak_c >= pulp.lpSum(
                int(c) * (at_or_after[v] - at_or_after[u]) for u, v, c in zip(g.src.tolist(), g.dst.tolist(), comm.tolist()) if c
            ), f"comm_peak_{b}"
        objective.append(w.comm_peak * peak_c)
    prob += pulp.lpSum(objective)
    return prob, stage_expr, on
