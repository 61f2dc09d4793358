"""Tests of incsched.bounds.placement_kinds: per-kind bounds never pass the optimum, and reduce to the old ones on one kind."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from incsched.bounds.placement import energetic_heads, energy_bound, placement_bound_details
from incsched.bounds.placement_flow import flow_bound
from incsched.bounds.placement_heads import transfer_heads, transfer_tails
from incsched.bounds.placement_kinds import (
    device_kinds,
    kind_energy_bound,
    kind_heads,
    kind_interval_bound,
    kind_load_bound,
    kind_path_bound,
    kind_tails,
)
from incsched.evaluate.simulate import simulate
from incsched.graph import CompGraph
from incsched.inc_ilp.placement import solve_cpsat
from incsched.problems import Device, Links, Placement, PlacementProblem
from incsched.solvers import SolverSettings
from oracles import brute_force_makespan, small_placement_problem


def kinds_problem(n, edges, fast, slow, out, kinds, *, latency=0.0, bandwidth=10.0):
    """Nodes n0.. with ``fast`` seconds on a "gpu" and ``slow`` on a "cpu"; devices of the given kinds; a tick a second."""
    g = CompGraph([f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges], out_bytes=out,
                  compute_time={"gpu": [float(x) for x in fast], "cpu": [float(x) for x in slow]})
    devices = [Device(f"{k}{i}", kind=k) for i, k in enumerate(kinds)]
    return PlacementProblem(g, devices, Links(latency=latency, bandwidth=bandwidth), time_unit=1.0)


@st.composite
def kind_problems(draw, max_nodes=5, max_devices=3):
    n = draw(st.integers(1, max_nodes))
    edges = [(u, v) for v in range(n) for u in range(v) if draw(st.integers(0, 2)) == 0]
    fast = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    ratio = draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))  # some ops barely faster on the gpu
    out = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    D = draw(st.integers(1, max_devices))
    kinds = draw(st.lists(st.sampled_from(["gpu", "cpu"]), min_size=D, max_size=D))
    latency: float | np.ndarray = draw(st.sampled_from([0.0, 1.0]))
    bandwidth: float | np.ndarray = draw(st.sampled_from([5.0, 20.0]))
    if D > 1 and draw(st.booleans()):  # per-pair links, slower when they touch a cpu (as the benchmark's)
        cpu = np.array([k == "cpu" for k in kinds])
        bandwidth = np.where(cpu[:, None] | cpu[None, :], 5.0, 40.0)
        latency = np.array(draw(st.lists(st.sampled_from([0.0, 1.0, 3.0]), min_size=D * D, max_size=D * D)), float).reshape(D, D)
    return kinds_problem(n, edges, fast, [f * r for f, r in zip(fast, ratio)], out, kinds, latency=latency, bandwidth=bandwidth)


def every_kind_bound(p: PlacementProblem) -> dict[str, int]:
    """Each per-kind family alone, every node tried as entry and exit anchor (any node is a valid anchor)."""
    head, tail = transfer_heads(p), transfer_tails(p)
    eh, et = energetic_heads(p, head), energetic_heads(p, tail, forward=False)
    kh, kq = kind_heads(p, eh, energetic=True), kind_tails(p, et, energetic=True)
    out = {"load": kind_load_bound(p), "path": kind_path_bound(p, kh, kq), "path_plain": kind_path_bound(p),
           "interval": kind_interval_bound(p, kh, kq, precision=0.0), "details": placement_bound_details(p)["bound"]}
    anchors = [None] + list(range(p.n_nodes))
    for x in anchors:
        for y in anchors:
            out[f"energy[{x},{y}]"] = kind_energy_bound(p, eh, et, kh, kq, entry=x, exit_=y)
    return out


def fractional_load(p: PlacementProblem) -> int:
    """Oracle for two kinds: least T whose greedy fractional knapsack (best gpu-saving ratio first) fits, by scan."""
    dk, counts, _ = device_kinds(p)
    order = sorted(range(p.n_nodes), key=lambda o: Fraction(int(dk[o, 1]), int(dk[o, 0])), reverse=True)

    def fits(T):
        room = Fraction(int(counts[0]) * T)  # kind 0's capacity, filled with the ops kind 1 is slowest at
        rest = Fraction(0)
        for o in order:
            take = min(Fraction(1), room / int(dk[o, 0]))
            room -= take * int(dk[o, 0])
            rest += (1 - take) * int(dk[o, 1])
        return rest <= int(counts[1]) * T

    T = 0
    while not fits(T):
        T += 1
    return T


# ---------------------------------------------------------------------- hand-built


def test_load_charges_the_slow_kind():
    # Two independent ops, 10 ticks on the gpu, 40 on the cpu, one device of each: both on the gpu
    # take 20, one on each 40. Fastest durations claim 10; the fractional assignment 16; and below
    # 40 the cpu's window holds no op at all, so the interval bound proves 20.
    p = kinds_problem(2, [], [10, 10], [40, 40], [0, 0], ["gpu", "cpu"])
    details = placement_bound_details(p)
    # (the flow family starts from the others' maximum: run it alone for the old value)
    old = max([v for k, v in details.items() if not k.startswith("kind_") and k not in ("flow", "bound")] + [flow_bound(p)])
    assert old == 10
    assert kind_load_bound(p) == details["kind_energy"] == 16 == fractional_load(p)
    assert details["kind_interval"] == details["bound"] == 20 == brute_force_makespan(p)


def test_kind_heads_charge_the_cpu_link():
    # a -> b; a slow link into the cpu: b on the cpu starts after a's transfer (or after a on the cpu).
    p = kinds_problem(2, [(0, 1)], [2, 2], [6, 6], [50, 0], ["gpu", "gpu", "cpu"],
                      bandwidth=np.where(np.eye(3, dtype=bool), 1e9, np.array([[50, 50, 5], [50, 50, 5], [5, 5, 50]], float)))
    kh = kind_heads(p)
    assert kh.tolist() == [[0, 0], [2, 6]]  # gpu: a on the same gpu; cpu: a there too (6) beats 2 + 10
    assert kind_path_bound(p) == 4


# ---------------------------------------------------------------------- one kind: the old families exactly


@given(st.integers(1, 6), st.data())
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_one_kind_equals_the_old_families(n, data):
    edges = [(u, v) for v in range(n) for u in range(v) if data.draw(st.integers(0, 2)) == 0]
    secs = data.draw(st.lists(st.integers(1, 9), min_size=n, max_size=n))
    out = data.draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    D = data.draw(st.integers(1, 4))
    p = small_placement_problem(n, edges, secs, out, D=D)
    head, tail = transfer_heads(p), transfer_tails(p)
    assert kind_load_bound(p) == -(-p.total_work_ticks() // D)
    assert kind_heads(p, head)[:, 0].tolist() == head and kind_tails(p, tail)[:, 0].tolist() == tail
    anchors = [None] + list(range(n))
    for x in anchors:
        for y in anchors:
            assert kind_energy_bound(p, head, tail, entry=x, exit_=y) == energy_bound(p, head, tail, entry=x, exit_=y)
    assert "kind_load" not in placement_bound_details(p)  # not run: nothing new on one kind


def test_two_kind_load_is_the_fractional_assignment():
    rng = np.random.default_rng(5)
    for _ in range(20):
        n = int(rng.integers(1, 12))
        fast = rng.integers(1, 20, n)
        slow = fast * rng.integers(1, 12, n)
        slow[0] = 2 * fast[0]  # two duration columns, whatever the rest draws
        p = kinds_problem(n, [], fast, slow, [0] * n,
                          list(rng.permutation(["gpu"] * int(rng.integers(1, 3)) + ["cpu"] * int(rng.integers(1, 4)))))
        assert kind_load_bound(p) == fractional_load(p)


# ---------------------------------------------------------------------- against brute force


@given(kind_problems(max_nodes=4, max_devices=3))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_kind_families_below_brute_force_small(p):
    opt = brute_force_makespan(p)
    for name, value in every_kind_bound(p).items():
        assert value <= opt, f"{name} = {value} exceeds the optimum {opt}"


@pytest.mark.slow
@given(kind_problems(max_nodes=5, max_devices=3))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_kind_families_below_brute_force(p):
    opt = brute_force_makespan(p)
    for name, value in every_kind_bound(p).items():
        assert value <= opt, f"{name} = {value} exceeds the optimum {opt}"


@pytest.mark.slow
@given(kind_problems(max_nodes=8, max_devices=4))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_kind_families_below_proven_optimum(p):
    out = solve_cpsat(p, SolverSettings(time_limit=20.0, max_deterministic_time=10.0))
    assume(out.status == "optimal")  # CP-SAT proved it in time (nearly always at this size)
    for name, value in every_kind_bound(p).items():
        assert value <= int(out.objective), f"{name} = {value} exceeds the optimum {int(out.objective)}"


def test_three_kinds_below_brute_force():
    rng = np.random.default_rng(11)
    for _ in range(6):
        n = int(rng.integers(2, 5))
        edges = [(u, v) for v in range(n) for u in range(v) if rng.integers(0, 3) == 0]
        secs = rng.integers(1, 7, n).tolist()
        p = small_placement_problem(n, edges, secs, rng.integers(0, 60, n).tolist(), D=3, speeds=[1.0, 2.0, 3.0])
        assert len(device_kinds(p)[1]) == 3
        opt = brute_force_makespan(p)
        for name, value in every_kind_bound(p).items():
            assert value <= opt, f"{name} = {value} exceeds the optimum {opt}"


@given(kind_problems(max_nodes=8, max_devices=4), st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_kind_heads_hold_in_any_schedule(p, data):
    n, D = p.n_nodes, p.n_devices
    dev = data.draw(st.lists(st.integers(0, D - 1), min_size=n, max_size=n))
    prio = data.draw(st.permutations(list(range(n))))
    pos = {v: i for i, v in enumerate(p.graph.topological_order().tolist())}
    sched = simulate(p, Placement.from_assignment(dev, D, priority=[pos[v] * n + prio[v] for v in range(n)]))
    _, _, members = device_kinds(p)
    kind_of = {e: k for k, m in enumerate(members) for e in m}
    head, tail = energetic_heads(p, transfer_heads(p)), energetic_heads(p, transfer_tails(p), forward=False)
    for energetic in (False, True):
        kh, kq = kind_heads(p, head, energetic=energetic), kind_tails(p, tail, energetic=energetic)
        for v in range(n):
            k = kind_of[int(sched.device[v])]
            assert int(sched.start[v]) >= kh[v, k]
            assert int(sched.makespan) - int(sched.end[v]) >= kq[v, k]
    assert placement_bound_details(p)["bound"] <= sched.makespan
