"""Tests of incsched.bounds.placement_flow: the flow bound and its feeding budgets never exceed a schedule's makespan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from incsched.baselines.placement import critical_path_list
from incsched.baselines.placement_local import local_search
from incsched.bounds.placement import energetic_heads, placement_bound_details, transfer_heads, transfer_tails
from incsched.bounds.placement_flow import feeding_budget, flow_bound
from incsched.evaluate.simulate import simulate
from incsched.generators import bandwidth_for_comm_ratio, transformer_block
from incsched.inc_ilp.placement import solve_cpsat
from incsched.problems import Placement, PlacementProblem
from incsched.solvers import SolverSettings
from oracles import brute_force_makespan, small_placement_problem

EXACT = SolverSettings(time_limit=20.0, max_deterministic_time=10.0)


@st.composite
def fork_problems(draw, max_middle=6, max_devices=4, hetero=True):
    """One source, one sink, a random DAG between them (every middle node reachable from the source and reaching the sink)."""
    m = draw(st.integers(1, max_middle))
    n = m + 2
    edges = set()
    for v in range(1, m + 1):
        preds = [u for u in range(1, v) if draw(st.integers(0, 2)) == 0]
        edges |= {(u, v) for u in preds} if preds else {(0, v)}
        if draw(st.integers(0, 3)) == 0:
            edges.add((0, v))
    for u in range(1, m + 1):
        if not any(a == u for a, _ in edges) or draw(st.integers(0, 3)) == 0:
            edges.add((u, n - 1))
    secs = [draw(st.integers(0, 2))] + draw(st.lists(st.integers(1, 9), min_size=m, max_size=m)) + [draw(st.integers(0, 2))]
    out = draw(st.lists(st.sampled_from([0, 10, 40, 80, 150]), min_size=n, max_size=n))
    D = draw(st.integers(2, max_devices))
    speeds, latency, bandwidth = None, 0.0, 10.0
    if hetero and draw(st.booleans()):
        speeds = draw(st.lists(st.sampled_from([1.0, 1.0, 2.0]), min_size=D, max_size=D))
    if hetero and draw(st.booleans()):
        latency = np.array(draw(st.lists(st.sampled_from([0.0, 1.0, 3.0]), min_size=D * D, max_size=D * D)), float).reshape(D, D)
        bandwidth = np.array(draw(st.lists(st.sampled_from([5.0, 10.0, 40.0]), min_size=D * D, max_size=D * D)), float).reshape(D, D)
    return small_placement_problem(n, sorted(edges), secs, out, D=D, speeds=speeds, latency=latency, bandwidth=bandwidth)


@st.composite
def multi_problems(draw, max_middle=6, max_devices=4):
    """2-3 sources and 1-3 sinks around a random middle (every middle node fed by some source or
    earlier middle node, feeding some later one or a sink); identical devices."""
    k, m, j = draw(st.integers(2, 3)), draw(st.integers(1, max_middle)), draw(st.integers(1, 3))
    n = k + m + j
    edges = set()
    for v in range(k, k + m):
        preds = [u for u in range(v) if draw(st.integers(0, 3)) == 0]
        edges |= {(u, v) for u in preds} if preds else {(draw(st.integers(0, k - 1)), v)}
    for a in range(k):  # every source feeds something
        if not any(u == a for u, _ in edges):
            edges.add((a, draw(st.integers(k, k + m - 1))))
    for v in range(k, k + m):  # every middle node reaches a sink
        if not any(u == v for u, _ in edges) or draw(st.integers(0, 3)) == 0:
            edges.add((v, k + m + draw(st.integers(0, j - 1))))
    for z in range(k + m, n):  # every sink has an input
        if not any(w == z for _, w in edges):
            edges.add((draw(st.integers(k, k + m - 1)), z))
    secs = draw(st.lists(st.integers(0, 2), min_size=k, max_size=k)) + draw(st.lists(st.integers(1, 9), min_size=m, max_size=m))
    secs += draw(st.lists(st.integers(0, 2), min_size=j, max_size=j))
    out = draw(st.lists(st.sampled_from([0, 10, 40, 80, 150]), min_size=n, max_size=n))
    D = draw(st.integers(k + 1, max(k + 1, max_devices)))
    return small_placement_problem(n, sorted(edges), secs, out, D=D)


@st.composite
def scheduled(draw, multi=False, **kw):
    """A fork problem (several sources and sinks with ``multi``) and one arbitrary schedule of it
    (random devices, random topological priority)."""
    p = draw(multi_problems(**kw) if multi else fork_problems(**kw))
    n, D = p.n_nodes, p.n_devices
    dev = draw(st.lists(st.integers(0, D - 1), min_size=n, max_size=n))
    prio = draw(st.permutations(list(range(n))))
    pos = {v: i for i, v in enumerate(p.graph.topological_order().tolist())}
    return p, simulate(p, Placement.from_assignment(dev, D, priority=[pos[v] * n + prio[v] for v in range(n)]))


def every_flow(p) -> dict[str, int]:
    head, tail = transfer_heads(p), transfer_tails(p)
    eh, et = energetic_heads(p, head), energetic_heads(p, tail, forward=False)
    return {
        "flow": flow_bound(p, head, tail, precision=0.0),
        "flow_energetic": flow_bound(p, eh, et, precision=0.0),
        "flow_no_feeding": flow_bound(p, eh, et, feeding=False, precision=0.0),
        "flow_coarse": flow_bound(p, eh, et, max_points=4),
        "details": placement_bound_details(p)["bound"],
    }


# ---------------------------------------------------------------------- the feeding budgets hold in any schedule


def check_feeding(p, sched) -> None:
    """Every budget of ``p`` (its single source and sink, or the set of its sources and of its sinks)
    bounds the work the schedule runs off the anchors' devices, at every window length."""
    g = p.graph
    # Budgets count work in fastest durations: each node's first dmin ticks of its run (what the flow routes).
    dmin = p.durations().min(axis=1).astype(np.int64)
    start, dev = np.asarray(sched.start), np.asarray(sched.device)
    end = start + dmin
    T = int(sched.makespan)
    for forward in (True, False):
        anchors = np.flatnonzero((g.in_degree if forward else g.out_degree) == 0).tolist()
        anchor = anchors[0] if len(anchors) == 1 else tuple(anchors)
        base = transfer_heads(p) if forward else transfer_tails(p)
        budget = feeding_budget(p, anchor, base, forward=forward)
        off = ~np.isin(dev, dev[anchors])
        for t in range(0, T + 1):  # the budget holds at every t, not only up to its reach
            if forward:
                work = np.clip(np.minimum(end, t) - start, 0, None)  # each node's run inside [0, t]
            else:
                last = np.asarray(sched.end)  # mirrored: each node's last dmin ticks
                work = np.clip(last - np.maximum(last - dmin, T - t), 0, None)  # inside [T - t, T]
            assert int(work[off].sum()) <= budget(t), (forward, t, int(work[off].sum()), budget(t))


# one source and sink, or several of each (anchored on their sets)
SCHEDULED = st.one_of(scheduled(max_middle=9), scheduled(multi=True, max_middle=9, max_devices=5))
TINY = st.one_of(fork_problems(max_middle=4, max_devices=3), multi_problems(max_middle=2, max_devices=3))


@given(SCHEDULED)
@settings(max_examples=160, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_feeding_budget_holds_in_any_schedule(case):
    check_feeding(*case)


@given(SCHEDULED)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_flow_below_any_schedule(case):
    p, sched = case
    for name, value in every_flow(p).items():
        assert value <= sched.makespan, f"{name} = {value} exceeds a schedule's makespan {sched.makespan}"


@given(TINY)
@settings(max_examples=45, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_flow_below_brute_force(p):
    assume(p.n_nodes <= 5)
    best = brute_force_makespan(p)
    for name, value in every_flow(p).items():
        assert value <= best, f"{name} = {value} exceeds the optimum {best}"


@pytest.mark.slow
@given(fork_problems(max_middle=8, max_devices=4, hetero=False))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_flow_below_proven_optimum(p):
    out = solve_cpsat(p, EXACT)
    assume(out.status == "optimal")
    for name, value in every_flow(p).items():
        assert value <= out.objective, f"{name} = {value} exceeds the optimum {out.objective}"


# ---------------------------------------------------------------------- stronger than before


def attention_like(heads: int, D: int):
    """s -> per head q, k (8 ticks) -> c (2) -> o (6) -> t; s's and o's outputs cost 25 ticks to move, q, k, c's 6."""
    edges, secs, out = [], [1], [250]
    for i in range(heads):
        q, k, c, o = 1 + 4 * i, 2 + 4 * i, 3 + 4 * i, 4 + 4 * i
        edges += [(0, q), (0, k), (q, c), (k, c), (c, o)]
        secs += [8, 8, 2, 6]
        out += [60, 60, 60, 250]
    t = 1 + 4 * heads
    edges += [(4 + 4 * i, t) for i in range(heads)]
    return small_placement_problem(t + 1, edges, secs + [1], out + [0], D=D)


def test_fork_join_flow_beats_every_earlier_family():
    # 4 heads on 3 devices. A q or k off s's device waits for s's 25-tick transfer, so before
    # tick 26 the other devices can only run c and o of heads whose q and k s's device has
    # finished: 8 ticks of (c, o) per 16 ticks of (q, k) there (the feeding budget, ratio 1/2),
    # far less than the two idle devices' 2 x 25 ticks the energy bound lets them fill.
    p = attention_like(4, 3)
    before = placement_bound_details(p, flow=False)["bound"]
    head, tail = transfer_heads(p), transfer_tails(p)
    eh, et = energetic_heads(p, head), energetic_heads(p, tail, forward=False)
    plain_flow = flow_bound(p, eh, et, feeding=False)
    fed = flow_bound(p, eh, et)
    # By tick 26, s's device has had 26 - 1 (s) - 6 (the cheapest crossing on the way out) = 19
    # ticks for q and k. A c or o fed so starts no earlier than 1 + 16 (its head's q and k) + 6 =
    # 23, so it runs at most 3 ticks by 26: 2 + 3 per 16 ticks of q and k, 19 x 5 / 16 = 5.9, floored
    # (without that cap, all 8 of c and o per 16: 9).
    assert feeding_budget(p, 0, head)(26) == 5
    schedule = simulate(p, local_search(p, 0), "ordered").makespan
    assert before < fed <= schedule
    assert plain_flow < fed
    assert placement_bound_details(p)["bound"] == max(before, fed)


def twin_attention(heads: int, D: int):
    """Two `attention_like` graphs side by side, each source's output through a one-tick norm
    (25 ticks to move, as are the norm's): two sources, two sinks."""
    edges, secs, out = [], [], []
    for _ in range(2):
        base = len(secs)
        s, norm = base, base + 1
        edges.append((s, norm))
        secs += [1, 1]
        out += [250, 250]
        for i in range(heads):
            q, k, c, o = base + 2 + 4 * i, base + 3 + 4 * i, base + 4 + 4 * i, base + 5 + 4 * i
            edges += [(norm, q), (norm, k), (q, c), (k, c), (c, o)]
            secs += [8, 8, 2, 6]
            out += [60, 60, 60, 250]
        t = base + 2 + 4 * heads
        edges += [(base + 5 + 4 * i, t) for i in range(heads)]
        secs.append(1)
        out.append(0)
    return small_placement_problem(len(secs), edges, secs, out, D=D)


def test_every_source_feeds_and_pinned_ancestors_beyond_its_successors():
    # No single source, so only the set of both sources anchors the feeding; and the one-tick
    # norms, the sources' only successors, say nothing of what the sources' two devices must run
    # before the other two can start a c or an o: the q and k of its head (pinned: off the
    # sources' devices they could not end before tick 26 + 8).
    p = twin_attention(3, 4)
    sched = simulate(p, local_search(p, 0), "ordered")
    check_feeding(p, sched)
    # Both sources' devices feeding at once: each runs its graph's norm, q and k, one head after
    # another, and a device of its own runs the c and o of that graph (and its sink).
    fed = [0, 0] + [0, 0, 2, 2] * 3 + [2]  # s, norm, (q, k, c, o) per head, the sink
    fed = fed + [d + 1 for d in fed]
    feeders = simulate(p, Placement.from_assignment(fed, 4, priority=list(range(p.n_nodes))), "ordered")
    check_feeding(p, feeders)
    head, tail = transfer_heads(p), transfer_tails(p)
    eh, et = energetic_heads(p, head), energetic_heads(p, tail, forward=False)
    assert flow_bound(p, eh, et, feeding=False) < flow_bound(p, eh, et) <= sched.makespan
    assert placement_bound_details(p, flow=False)["bound"] < placement_bound_details(p)["bound"]


@pytest.mark.slow
def test_twin_attention_flow_below_the_optimum():
    p = twin_attention(2, 3)
    out = solve_cpsat(p, EXACT)
    assert out.status == "optimal"
    assert placement_bound_details(p)["bound"] <= out.objective


@pytest.mark.slow
def test_fork_join_flow_below_the_optimum():
    p = attention_like(4, 3)
    out = solve_cpsat(p, EXACT)
    assert out.status == "optimal"
    assert placement_bound_details(p, flow=False)["bound"] < placement_bound_details(p)["bound"] <= out.objective


def test_flow_without_anchors_and_on_one_device():
    # Two sources: no anchor, plain windows on all devices; one device: the single-machine bound.
    p = small_placement_problem(4, [(0, 2), (1, 3)], [3, 4, 5, 6], [10, 10, 0, 0], D=2)
    assert flow_bound(p) <= brute_force_makespan(p)
    one = small_placement_problem(3, [(0, 1), (0, 2)], [3, 4, 5], [10, 10, 0], D=1)
    assert flow_bound(one) == 12 == brute_force_makespan(one)
    assert flow_bound(small_placement_problem(0, [], [], [], D=2), lower=5) == 5


def test_wide_attention_segment_gets_the_flow_by_default():
    # 32 heads on 8 devices: a 226-node attention segment between cut nodes, transfers out of the
    # norm and into the sum about 2.4 branches long. Only the feeding budget sees that the norm's
    # device must run the projections of every head started elsewhere early; the default applies
    # it to segments this wide too (it once stopped at 120 nodes, leaving the segment at 82,689).
    g = transformer_block(n_blocks=1, heads=32, ffn_tiles=16, jitter=0.1, kinds=("cpu",), seed=1005)
    p = PlacementProblem.identical(g, 8, bandwidth=bandwidth_for_comm_ratio(g, 4.0, "cpu"))
    without = placement_bound_details(p, flow=False)
    default = placement_bound_details(p)
    assert default["segment_sum"] >= without["segment_sum"] * 1.08
    assert default["bound"] <= simulate(p, critical_path_list(p), "ordered").makespan
