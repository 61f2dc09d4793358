"""Brute-force optima the tests judge solvers and bounds by (small instances only)."""

from __future__ import annotations

import itertools

import numpy as np

from incsched.evaluate import simulate
from incsched.problems import Placement, PlacementProblem


def brute_force_makespan(p: PlacementProblem) -> int:
    """Optimum by enumeration: every semi-active schedule is some assignment plus a global node order."""
    n, D = p.n_nodes, p.n_devices
    g = p.graph
    best = None
    for perm in itertools.permutations(range(n)):
        pos = np.empty(n, dtype=np.int64)
        pos[list(perm)] = np.arange(n)
        if g.n_edges and np.any(pos[g.src] > pos[g.dst]):
            continue
        for dev in itertools.product(range(D), repeat=n):
            m = simulate(p, Placement.from_assignment(dev, D, priority=pos)).makespan
            best = m if best is None else min(best, m)
    return best
