"""Shared weights on the placement side: a weight read by several nodes costs its bytes once on
every device that holds a reader, in the problem's checks, the simulator, the baselines, the CP-SAT
model and the bounds. Tiny instances with tight memory are held against brute force."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import incsched
from incsched.baselines.placement import PLACEMENT_BASELINES, local_search
from incsched.bounds.placement import placement_lower_bound
from incsched.evaluate.simulate import simulate
from incsched.graph import SharedWeight
from incsched.problems import Device, DeviceMemory, Links, Placement, PlacementInfeasibleError, PlacementProblem
from incsched.problems.decompose import subproblem
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.placement import solve_placement


def _graph(rng: random.Random, n: int, n_shared: int) -> incsched.CompGraph:
    names = [f"v{i}" for i in range(n)]
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.4]
    shared = []
    for k in range(n_shared):
        readers = rng.sample(range(n), rng.randint(2, min(n, 3)))
        shared.append({"name": f"w{k}", "bytes": rng.randint(1, 8), "read_by": readers})
    return incsched.CompGraph(
        names, [i for i, _ in pairs], [j for _, j in pairs],
        param_bytes=[rng.randint(0, 6) for _ in range(n)], out_bytes=[rng.choice([0, 4, 8]) for _ in range(n)],
        compute_time={"cpu": [float(rng.randint(1, 4)) for _ in range(n)]}, shared_weights=shared,
    )


def _brute_force(problem: PlacementProblem) -> int | None:
    """The least makespan over every assignment within memory and every order: None if none fits.

    Sorting an optimal schedule by start gives a topological order whose per-device restriction,
    run as early as possible, ends no later; so every topological order covers every schedule.
    """
    g, n, D = problem.graph, problem.n_nodes, problem.n_devices
    caps = [d.memory for d in problem.devices]
    orders = [p for p in itertools.permutations(range(n))
              if all(p.index(int(u)) < p.index(int(v)) for u, v in zip(g.src, g.dst))]
    best = None
    for a in itertools.product(range(D), repeat=n):
        used = g.part_param_bytes(a, D)
        if any(c is not None and u > c for u, c in zip(used, caps)):
            continue
        for topo in orders:
            order = tuple(tuple(v for v in topo if a[v] == d) for d in range(D))
            m = simulate(problem, Placement(np.asarray(a), order), "ordered").makespan
            best = m if best is None or m < best else best
    return best


def _tight_problem(rng: random.Random, g: incsched.CompGraph, D: int) -> PlacementProblem | None:
    """Devices whose memory sits between the largest node's need and the whole graph: sharing decides."""
    need = int(g.node_weight_bytes.max())
    mems = [rng.randint(need, max(need, g.total_param_bytes // D + 3)) for _ in range(D)]
    return PlacementProblem(g, [Device(f"d{k}", memory=m) for k, m in enumerate(mems)],
                            Links(latency=1.0), time_unit=1.0)


def test_part_param_bytes_counts_a_shared_weight_once_per_device():
    g = incsched.CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], param_bytes=[1, 2, 4], compute_time={"cpu": [1.0] * 3},
                           shared_weights=[{"name": "w", "bytes": 8, "read_by": ["a", "c"]}])
    p = PlacementProblem.identical(g, 2, time_unit=1.0)
    together = simulate(p, Placement.from_assignment([0, 1, 0], 2))
    apart = simulate(p, Placement.from_assignment([0, 0, 1], 2))
    assert together.memory.tolist() == [13, 2] and apart.memory.tolist() == [11, 12]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 7), D=st.integers(1, 3), n_shared=st.integers(0, 3))
def test_the_simulator_agrees_with_part_param_bytes(seed, n, D, n_shared):
    rng = random.Random(seed)
    g = _graph(rng, n, n_shared)
    caps = [rng.randint(0, g.total_param_bytes + 1) for _ in range(D)]
    p = PlacementProblem(g, [Device(f"d{k}", memory=max(c, int(g.node_weight_bytes.max()))) for k, c in enumerate(caps)],
                         time_unit=1.0)
    device = [rng.randrange(D) for _ in range(n)]
    s = simulate(p, Placement.from_assignment(device, D))
    used = g.part_param_bytes(device, D)
    assert s.memory.tolist() == used
    assert s.memory_ok == all(u <= d.memory for u, d in zip(used, p.devices))
    assert sum(used) >= g.total_param_bytes  # every weight somewhere, replicas on top


def test_a_reader_that_cannot_hold_the_weight_makes_the_problem_infeasible():
    g = incsched.CompGraph(["emb", "mid", "head"], ["emb", "mid"], ["mid", "head"], param_bytes=[0, 5, 3],
                           compute_time={"cpu": [1.0] * 3}, shared_weights=[{"name": "wte", "bytes": 10, "read_by": ["emb", "head"]}])
    with pytest.raises(PlacementInfeasibleError, match="'head' needs 13 parameter bytes \\(10 of them in shared"):
        PlacementProblem.identical(g, 2, memory=12)
    p = PlacementProblem(g, [Device("big", memory=13), Device("small", memory=12)])
    assert p.allowed_devices().tolist() == [[True, True], [True, True], [True, False]]  # emb 10, mid 5, head 13


def test_device_memory_charges_a_shared_weight_with_its_first_reader_only():
    g = incsched.CompGraph(["a", "b", "c"], [], [], param_bytes=[1, 2, 3], compute_time={"cpu": [1.0] * 3},
                           shared_weights=[SharedWeight("w", 8, (0, 2))])
    mem = DeviceMemory(PlacementProblem.identical(g, 2, memory=20, time_unit=1.0))
    assert (mem.cost(0, 0), mem.cost(2, 0)) == (9, 11)
    mem.take(0, 0)
    assert (mem.cost(2, 0), mem.cost(2, 1), mem.left) == (3, 11, [11, 20])


@pytest.mark.parametrize("method", ["critical_path_list", "heft", "local_search"])
def test_heuristics_fit_two_readers_that_fit_only_together(method):
    """Two readers of a 10-byte weight on 12-byte devices: per-node sums (20) would not fit one device.

    (Round robin deals the readers to different devices, then the third node fits on neither.)"""
    g = incsched.CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], param_bytes=[1, 1, 6],
                           compute_time={"cpu": [1.0, 1.0, 1.0]}, shared_weights=[{"name": "w", "bytes": 10, "read_by": ["a", "b"]}])
    p = PlacementProblem.identical(g, 2, memory=12, latency=0.5, time_unit=0.5)
    pl = PLACEMENT_BASELINES[method](p)
    s = simulate(p, pl, "ordered")
    assert s.memory_ok and int(s.memory.max()) <= 12


def test_heuristics_never_return_an_answer_over_memory():
    rng = random.Random(3)
    for _ in range(30):
        g = _graph(rng, rng.randint(3, 7), rng.randint(1, 3))
        p = _tight_problem(rng, g, rng.randint(2, 3))
        for method in ("heft", "critical_path_list", "round_robin", "local_search"):
            run = (lambda q: local_search(q, evaluations=40)) if method == "local_search" else PLACEMENT_BASELINES[method]
            try:
                pl = run(p)
            except PlacementInfeasibleError:
                continue  # greedy choices may paint themselves into a corner; they say so
            assert simulate(p, pl, "ordered").memory_ok, method


def test_cpsat_and_bounds_agree_with_brute_force_under_tight_memory():
    rng = random.Random(11)
    seen = {"optimal": 0, "infeasible": 0, "replicated": 0}
    for _ in range(24):
        g = _graph(rng, rng.randint(2, 5), rng.randint(1, 2))
        D = rng.randint(2, 3)
        p = _tight_problem(rng, g, D)
        truth = _brute_force(p)
        out = solve_placement(p, SolverSettings(time_limit=10, workers=1, deterministic=True))
        if truth is None:
            assert out.status == "infeasible", (g.to_json(), [d.memory for d in p.devices])
            seen["infeasible"] += 1
            continue
        assert out.status == "optimal" and out.objective == truth, (out.status, out.objective, truth)
        s = simulate(p, Placement(out.assignment, out.info["order"]), "ordered")
        assert s.memory_ok and s.makespan == truth
        assert placement_lower_bound(p) <= truth
        seen["optimal"] += 1
        seen["replicated"] += bool(g.replicated_weights(out.assignment))
    assert seen["optimal"] >= 8 and seen["infeasible"] >= 1 and seen["replicated"] >= 1, seen


def test_solve_lists_the_replicated_weights_and_respects_memory():
    g = incsched.CompGraph(["emb", "l1", "l2", "head"], ["emb", "l1", "l2"], ["l1", "l2", "head"], param_bytes=[1, 6, 6, 1],
                           compute_time={"cpu": [1.0] * 4}, shared_weights=[{"name": "wte", "bytes": 4, "read_by": ["emb", "head"]}])
    # The layers (12 bytes) fit no 11-byte device together, nor one beside both readers (12): the
    # only answers put a reader and a layer on each device, each with its own copy of wte.
    p = PlacementProblem.identical(g, 2, memory=11, time_unit=1.0)
    r = incsched.solve(p, "ilp", time_limit=10)
    assert r.status == "optimal" and r.terms["memory"] == [11, 11]
    assert r.terms["replicated_weights"] == {"wte": [0, 1]}
    assert r.terms["memory"] == g.part_param_bytes(r.device, 2)


def test_without_shared_weights_the_model_is_unchanged():
    """Loose memory adds no 'holds' literals; without shared weights there is nothing to add."""
    base = dict(param_bytes=[1, 2, 3], compute_time={"cpu": [1.0, 2.0, 1.0]})
    plain = incsched.CompGraph(["a", "b", "c"], ["a"], ["b"], **base)
    tied = incsched.CompGraph(["a", "b", "c"], ["a"], ["b"], **base, shared_weights=[{"name": "w", "bytes": 4, "read_by": ["a", "c"]}])
    st_ = SolverSettings(time_limit=5, workers=1, deterministic=True)
    n_plain = solve_placement(PlacementProblem.identical(plain, 2, memory=6, time_unit=1.0), st_).info["n_variables"]
    n_loose = solve_placement(PlacementProblem.identical(tied, 2, memory=10, time_unit=1.0), st_).info["n_variables"]
    n_tight = solve_placement(PlacementProblem.identical(tied, 2, memory=7, time_unit=1.0), st_).info["n_variables"]
    assert n_loose == n_plain and n_tight == n_plain + 2  # one literal per (weight, device)


def test_a_segment_keeps_what_each_node_needs():
    g = incsched.CompGraph(["a", "b", "c", "d"], ["a", "b", "c"], ["b", "c", "d"], param_bytes=[1, 1, 1, 1],
                           compute_time={"cpu": [1.0] * 4},
                           shared_weights=[{"name": "w", "bytes": 5, "read_by": ["a", "c"]}, {"name": "u", "bytes": 3, "read_by": ["b", "c", "d"]}])
    p = PlacementProblem.identical(g, 2, time_unit=1.0)
    sub = subproblem(p, [1, 2, 3])
    assert sub.graph.node_weight_bytes.tolist() == g.node_weight_bytes[[1, 2, 3]].tolist()
    assert [w.name for w in sub.graph.shared_weights] == ["u"]


@pytest.mark.parametrize("method", ["inc-ilp", "ilp-hinted"])
def test_solve_agrees_with_brute_force_under_tight_memory(method):
    rng = random.Random(5)
    solved = replicated = 0
    for _ in range(6):
        g = _graph(rng, rng.randint(3, 5), 2)
        p = _tight_problem(rng, g, 3)
        truth = _brute_force(p)
        r = incsched.solve(p, method, time_limit=10)
        if truth is None:
            assert r.status == "infeasible" and r.objective is None
            continue
        solved += 1
        assert r.status == "optimal" and r.terms["makespan"] == truth, (r.status, r.terms, truth)
        assert all(m <= d.memory for m, d in zip(r.terms["memory"], p.devices))
        assert r.terms["memory"] == g.part_param_bytes(r.device, 3)
        replicated += bool(r.terms["replicated_weights"])
    assert solved >= 3 and replicated >= 1, (solved, replicated)
