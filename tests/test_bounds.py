"""incsched.bounds: no lower bound exceeds the brute-force optimum (issue 12).

Stage: every monotone assignment priced in exact arithmetic (the oracle of test_exact), here with
hard capacities and the spill term, which test_exact's properties leave out. Placement: every
memory-feasible device assignment and every topological order of the nodes (which fixes each
device's order), started as early as allowed by a schedule computed here from the problem's
integer durations and transfer ticks, independently of the simulator.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from incsched.bounds import placement_lower_bound, stage_lower_bound, stage_term_bounds
from incsched.evaluate.simulate import simulate
from incsched.graph import CompGraph
from incsched.problems import Device, Links, Placement, PlacementInfeasibleError, PlacementProblem
from incsched.problems.stage import ObjectiveWeights, StageProblem
from test_exact import brute_force

# ---------------------------------------------------------------------- stage


@st.composite
def capped_stage_instances(draw, max_nodes=6):
    n = draw(st.integers(1, max_nodes))
    edges = [(u, v) for v in range(n) for u in range(v) if draw(st.integers(0, 2)) == 0]
    big = st.one_of(st.integers(0, 20), st.integers(2**55, 2**58))
    params = draw(st.lists(big, min_size=n, max_size=n))
    out = draw(st.lists(st.one_of(st.integers(0, 9), st.integers(2**45, 2**50)), min_size=n, max_size=n))
    g = CompGraph([f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges],
                  param_bytes=params, out_bytes=out, flops=[0.0] * n)
    K = draw(st.integers(1, 3))
    total = sum(params)
    capacity = draw(st.one_of(st.none(), st.integers(max(params), total + 1), st.integers(2**62, 2**70)))
    spill = draw(st.one_of(st.none(), st.integers(0, total), st.lists(st.integers(0, total), min_size=K, max_size=K)))
    weights = {
        "mem_peak": draw(st.sampled_from([0, 1, 0.5, 100])),
        "comm_total": draw(st.sampled_from([0, 1, 1e-6])),
        "comm_peak": draw(st.sampled_from([0, 2])),
        "spill": 0 if spill is None else draw(st.sampled_from([0, 1, 3, 0.25])),
    }
    return g, K, weights, capacity, spill


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capped_stage_instances())
def test_stage_bound_never_exceeds_the_optimum_with_capacities_and_spill(inst):
    g, K, weights, capacity, spill = inst
    p = StageProblem(g, K, ObjectiveWeights(**weights), capacity=capacity, spill_capacity=spill)
    best = brute_force(g, K, weights, capacity=capacity, spill_capacity=spill)
    assume(best is not None)  # no assignment fits the capacity: nothing to bound
    opt, _ = best
    assert stage_lower_bound(p) <= opt
    # each term's bound holds for the term alone, at the optimum of that term's own objective
    for term, bound in stage_term_bounds(p).items():
        if term == "compute_peak":
            continue  # the oracle's graphs carry no compute time
        alone = brute_force(g, K, {term: 1}, capacity=capacity, spill_capacity=spill)
        assert bound <= alone[0], term


# ---------------------------------------------------------------------- placement


def topological_orders(n: int, preds: list[list[int]]):
    """Every order of 0..n-1 that lists each node after its predecessors."""
    placed = [False] * n
    order: list[int] = []

    def extend():
        if len(order) == n:
            yield tuple(order)
            return
        for v in range(n):
            if not placed[v] and all(placed[u] for u in preds[v]):
                placed[v] = True
                order.append(v)
                yield from extend()
                order.pop()
                placed[v] = False

    yield from extend()


def brute_force_placement(p: PlacementProblem) -> tuple[int, tuple, tuple]:
    """(optimal makespan in ticks, its device per node, its global order), memory respected.

    Every semi-active schedule runs each device's nodes in some order consistent with one global
    topological order, each node as early as its device and inputs allow, so the minimum over
    (assignment, topological order) pairs is the optimum.
    """
    n, D = p.n_nodes, p.n_devices
    dur = p.durations().tolist()
    ticks = p.transfer_ticks().tolist()
    src, dst = p.graph.src.tolist(), p.graph.dst.tolist()
    preds: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for e, (u, v) in enumerate(zip(src, dst)):
        preds[v].append((u, e))
    params = [int(x) for x in p.graph.param_bytes.tolist()]
    memory = [d.memory for d in p.devices]
    orders = list(topological_orders(n, [[u for u, _ in ps] for ps in preds]))
    best = None
    for dev in itertools.product(range(D), repeat=n):
        load = [0] * D
        for v in range(n):
            load[dev[v]] += params[v]
        if any(m is not None and load[d] > m for d, m in enumerate(memory)):
            continue
        for order in orders:
            end = [0] * n
            free = [0] * D
            for v in order:
                d = dev[v]
                start = max([free[d]] + [end[u] + ticks[e][dev[u]][d] for u, e in preds[v]])
                end[v] = free[d] = start + dur[v][d]
            makespan = max(end, default=0)
            if best is None or makespan < best[0]:
                best = (makespan, dev, order)
    return best


@st.composite
def placement_instances(draw, max_nodes=6):
    n = draw(st.integers(1, max_nodes))
    D = draw(st.integers(1, 3 if n <= 5 else 2))
    edges = [(u, v) for v in range(n) for u in range(v) if draw(st.integers(0, 2)) == 0]
    secs = draw(st.lists(st.integers(1, 8), min_size=n, max_size=n))
    out = draw(st.lists(st.sampled_from([0, 5, 40, 200]), min_size=n, max_size=n))
    # Huge parameters and memories: feasibility must be decided in exact integers.
    params = draw(st.lists(st.sampled_from([0, 1, 2**52 + 1, 2**53, 2**58 - 3]), min_size=n, max_size=n))
    memory = draw(st.lists(st.one_of(st.none(), st.sampled_from([2**53, 2**53 + 1, 2**58, 2**59 + 7])), min_size=D, max_size=D))
    speeds = draw(st.lists(st.sampled_from([1.0, 2.0]), min_size=D, max_size=D))
    g = CompGraph([f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges], out_bytes=out,
                  param_bytes=params, compute_time={"cpu": [float(s) for s in secs]})
    if D > 1 and draw(st.booleans()):
        latency = np.array(draw(st.lists(st.sampled_from([0.0, 1.0, 3.0]), min_size=D * D, max_size=D * D))).reshape(D, D)
        bandwidth = np.array(draw(st.lists(st.sampled_from([5.0, 10.0, 40.0]), min_size=D * D, max_size=D * D))).reshape(D, D)
        links = Links(latency=latency, bandwidth=bandwidth)
    else:
        links = Links(latency=draw(st.sampled_from([0.0, 2.0])), bandwidth=draw(st.sampled_from([None, 10.0])))
    devices = [Device(f"d{i}", speed=speeds[i], memory=memory[i]) for i in range(D)]
    try:
        return PlacementProblem(g, devices, links, time_unit=1.0)
    except PlacementInfeasibleError:
        return None  # a node fits no device: refused up front, nothing to bound


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placement_instances())
def test_placement_bounds_never_exceed_the_brute_force_optimum(p):
    assume(p is not None)
    best = brute_force_placement(p)
    assume(best is not None)  # the devices' memories hold no complete assignment
    opt, dev, order = best
    pos = np.empty(p.n_nodes, dtype=np.int64)
    pos[list(order)] = np.arange(p.n_nodes)
    # the optimum found here is a real schedule: the independent simulator agrees on its makespan
    assert simulate(p, Placement.from_assignment(dev, p.n_devices, priority=pos)).makespan == opt
    assert type(placement_lower_bound(p)) is int
    assert placement_lower_bound(p) <= opt
    assert placement_lower_bound(p) <= placement_lower_bound(p) <= opt


def test_placement_bound_is_tight_on_a_chain():
    # one device, a chain: the optimum is the sum of the durations, and both bounds reach it
    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], out_bytes=[1, 1, 0], compute_time={"cpu": [2.0, 3.0, 4.0]})
    p = PlacementProblem(g, [Device("d0")], time_unit=1.0)
    assert brute_force_placement(p)[0] == 9 == placement_lower_bound(p) == placement_lower_bound(p)
