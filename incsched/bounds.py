"""Global lower bounds that need no solver: the floor every certificate is measured against.

A result is ``optimal`` only when its objective meets a proven global lower bound; these
combinatorial bounds are the cheap part of that bound (CP-SAT's own bound on the full model is the
other), and they hold for any assignment, inside a window or not.

Exact: `stage_term_bounds` gives Python ints and `stage_lower_bound` the weighted sum with each
weight as the decimal it denotes, an int when whole, else a `fractions.Fraction` (never a float),
so ``objective <= stage_lower_bound(p)`` compares exactly with `evaluate_stages`' objective.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .placement_bounds import placement_bound
from .problems.placement import PlacementProblem
from .problems.stage import StageProblem, exact_number

__all__ = ["stage_lower_bound", "stage_term_bounds", "placement_lower_bound"]


def stage_term_bounds(problem: StageProblem) -> dict[str, int]:
    """A lower bound on each objective term, in the problem's integer units.

    ``mem_peak``: the heaviest node, and the average stage load rounded up. ``compute_peak``: the
    same two arguments on each node's fastest ticks. ``stage_time_peak`` (listed only when
    weighed, as the pipeline term): the same as ``compute_peak``, since sends only add to a stage's
    time. ``spill``: parameters beyond the stages' total spill capacity. Communication terms are
    bounded by 0 (every node may share one stage).
    """
    K = problem.n_stages
    params = problem.graph.param_bytes
    ticks = problem.node_ticks.min(axis=1) if problem.graph.n_nodes else np.zeros(0, dtype=np.int64)
    out = {"mem_peak": 0, "comm_total": 0, "comm_peak": 0, "compute_peak": 0, "spill": 0}
    if problem.graph.n_nodes:
        out["mem_peak"] = max(int(params.max()), -(-int(params.sum()) // K))
        out["compute_peak"] = max(int(ticks.max()), -(-int(ticks.sum()) // K))
    if problem.weights.stage_time_peak > 0:
        out["stage_time_peak"] = out["compute_peak"]
    if problem.spill_capacity is not None:
        out["spill"] = max(0, int(params.sum()) - int(sum(problem.spill_capacity)))
    return out


def stage_lower_bound(problem: StageProblem) -> int | Fraction:
    """The weighted sum of `stage_term_bounds`: no stage assignment has a smaller objective.

    Exact: a Python int when whole, else a `fractions.Fraction`.

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[10, 30], out_bytes=[5, 0])
    >>> stage_lower_bound(StageProblem(g, 2, {"mem_peak": 0.1}))
    3
    """
    w = problem.weights.exact()
    return exact_number(sum((w[t] * b for t, b in stage_term_bounds(problem).items()), Fraction(0)))


def placement_lower_bound(problem: PlacementProblem, should_stop=None) -> int:
    """The strongest combinatorial makespan bound, in ticks (`placement_bounds.placement_bound`).

    At least max(critical path with free transfers, total fastest work / devices); the families
    there also charge the transfers no schedule avoids and the work that cannot spread over devices.
    ``should_stop`` (asked between families) ends it early, still a bound.
    """
    return placement_bound(problem, should_stop)
