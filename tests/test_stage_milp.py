"""The PuLP MILP of the stage problem, and its agreement with CP-SAT on small random instances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from oracles import MILP_PROOF
from test_stage_problem import diamond, stage_instances

from incsched.evaluate.stage import evaluate_stages
from incsched.problems.stage import StageProblem
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.stage import solve_stage
from incsched.solvers.milp.stage import available_backends, solve_stage_milp

FAST = SolverSettings(time_limit=20.0, deterministic=True)


@pytest.mark.slow
@given(stage_instances(min_nodes=6, max_nodes=15, max_stages=4))
@settings(max_examples=12, deadline=None)
def test_cbc_and_cpsat_agree_on_the_optimum(problem):
    milp = solve_stage_milp(problem, MILP_PROOF)
    cpsat = solve_stage(problem, FAST)
    assert milp.status == cpsat.status, (milp.info, cpsat.info)
    if cpsat.status == "infeasible":
        return
    assert cpsat.status == "optimal"
    assert milp.objective == pytest.approx(cpsat.objective, rel=1e-9, abs=1e-6)
    ev = evaluate_stages(problem, milp.assignment)
    assert ev.feasible, ev.violations
    assert ev.objective == pytest.approx(milp.objective, rel=1e-9, abs=1e-6)


def test_window_and_warm_start():
    p = StageProblem.peer(diamond(), 3)
    lo, hi = np.array([1, 1, 1, 1]), np.array([2, 2, 2, 2])
    out = solve_stage_milp(p, MILP_PROOF, window=(lo, hi), hint=np.array([1, 1, 2, 2]))
    assert out.status == "optimal" and np.all((out.assignment >= 1) & (out.assignment <= 2))
    assert out.objective == solve_stage(p, FAST, window=(lo, hi)).objective


def test_infeasible_capacity_is_reported():
    out = solve_stage_milp(StageProblem.peer(diamond(), 3, capacity=39), MILP_PROOF)
    assert out.status == "infeasible" and "'d'" in out.info["reason"]
    g = diamond().replace(param_bytes=[6, 6, 6, 0], edge_bytes=[0, 0, 0, 0])
    out = solve_stage_milp(StageProblem.peer(g, 2, capacity=10), MILP_PROOF)
    assert out.status == "infeasible"


def test_unknown_backend_is_refused():
    assert "cbc" in available_backends()
    with pytest.raises(ValueError, match="gurobi"):
        solve_stage_milp(StageProblem.peer(diamond(), 2), FAST, backend="gurobi")
