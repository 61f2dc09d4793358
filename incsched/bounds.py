"""Global lower bounds that need no solver: the floor every certificate is measured against.

A result is ``optimal`` only when its objective meets a proven global lower bound; these
combinatorial bounds are the cheap part of that bound (CP-SAT's own bound on the full model is the
other), and they hold for any assignment, inside a window or not.
"""

from __future__ import annotations

import numpy as np

from .problems.placement import PlacementProblem
from .problems.stage import StageProblem

__all__ = ["stage_lower_bound", "stage_term_bounds", "placement_lower_bound"]


def stage_term_bounds(problem: StageProblem) -> dict[str, int]:
    """A lower bound on each objective term, in the problem's integer units.

    ``mem_peak``: the heaviest node, and the average stage load rounded up. ``compute_peak``: the
    same two arguments on each node's fastest ticks. ``spill``: parameters beyond the stages' total
    spill capacity. Communication terms are bounded by 0 (every node may share one stage).
    """
    K = problem.n_stages
    params = problem.graph.param_bytes
    ticks = problem.node_ticks.min(axis=1) if problem.graph.n_nodes else np.zeros(0, dtype=np.int64)
    out = {"mem_peak": 0, "comm_total": 0, "comm_peak": 0, "compute_peak": 0, "spill": 0}
    if problem.graph.n_nodes:
        out["mem_peak"] = max(int(params.max()), -(-int(params.sum()) // K))
        out["compute_peak"] = max(int(ticks.max()), -(-int(ticks.sum()) // K))
    if problem.spill_capacity is not None:
        out["spill"] = max(0, int(params.sum()) - int(sum(problem.spill_capacity)))
    return out


def stage_lower_bound(problem: StageProblem) -> float:
    """The weighted sum of `stage_term_bounds`: no stage assignment has a smaller objective."""
    w = problem.weights.as_dict()
    return sum(w[t] * b for t, b in stage_term_bounds(problem).items())


def placement_lower_bound(problem: PlacementProblem) -> int:
    """max(critical path with free transfers, total fastest work / devices), in ticks."""
    return problem.lower_bound_ticks()
