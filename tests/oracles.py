"""Small placement problems and the brute-force optima (placement and stage) the tests judge solvers and bounds by."""

from __future__ import annotations

import itertools

import numpy as np

from incsched.evaluate import simulate
from incsched.evaluate.stage import evaluate_stages
from incsched.graph import CompGraph
from incsched.problems import Device, Links, Placement, PlacementProblem
from incsched.solvers import SolverSettings

# For MILP checks that must end in a proof: CBC's limit is wall clock, and a loaded CI host once
# stalled it past 5 s on a 3-node model. A small model proves in well under a second when quiet.
MILP_PROOF = SolverSettings(time_limit=120.0, deterministic=True)


def small_placement_problem(n, edges, secs, out, *, D=2, speeds=None, latency=0.0, bandwidth=10.0, memory=None, params=None):
    """Nodes n0.., edges as index pairs, CPU seconds per node, output bytes; D devices, one tick a second."""
    g = CompGraph([f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges], out_bytes=out,
                  param_bytes=params, compute_time={"cpu": [float(x) for x in secs]})
    speeds = speeds or [1.0] * D
    devices = [Device(f"d{i}", speed=speeds[i], memory=memory) for i in range(D)]
    return PlacementProblem(g, devices, Links(latency=latency, bandwidth=bandwidth), time_unit=1.0)


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


def brute_force_stages(problem):
    """Least evaluated objective of a `StageProblem` over every assignment (None: none is feasible)."""
    best = None
    for s in itertools.product(range(problem.n_stages), repeat=problem.graph.n_nodes):
        ev = evaluate_stages(problem, np.asarray(s))
        if ev.feasible and (best is None or ev.objective < best):
            best = ev.objective
    return best
