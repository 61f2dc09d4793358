"""Tests of the entry/exit queue relaxation (incsched.solvers.cpsat.placement_queues)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.baselines.placement_local import schedule_assignment
from incsched.bounds.placement import placement_bound_details
from incsched.evaluate.simulate import simulate
from incsched.generators import bandwidth_for_comm_ratio, transformer_block
from incsched.inc_ilp.placement import solve_cpsat
from incsched.problems import PlacementProblem
from incsched.problems.decompose import segments, subproblem
from incsched.solvers.cpsat.placement_queues import QUEUE_MAX_CHILDREN, queue_bound
from incsched.solvers.cpsat.placement_segments import segment_bound

from test_placement_local import EXACT, fork_joins, problem_of


def heads(k: int, devices: int, crossing_bytes: int = 400):
    """s -> k heads (q, v: 10 ticks each -> a: 2 -> o: 10) -> t; the entry's and the exit's edges cost
    ``crossing_bytes / 10`` ticks to cross, those inside a head 5."""
    edges, secs, out, outs = [], [1], [crossing_bytes], []
    for _ in range(k):
        q, v, a, o = range(len(secs), len(secs) + 4)
        secs += [10, 10, 2, 10]
        out += [50, 50, 50, crossing_bytes]
        edges += [(0, q), (0, v), (q, a), (v, a), (a, o)]
        outs.append(o)
    t = len(secs)
    secs.append(1)
    out.append(0)
    edges += [(o, t) for o in outs]
    return problem_of(len(secs), edges, secs, out, D=devices, bandwidth=10.0)


# (3, 2): the flow's feeding budget (pinned ancestors) reaches the queues' 69 ticks too (optimum 74).
@pytest.mark.parametrize("k,devices,above", [(3, 2, False), (3, 3, True), (4, 4, True)])
def test_the_queues_bound_heads_above_every_other_family_and_below_the_optimum(k, devices, above):
    p = heads(k, devices)
    families = placement_bound_details(p)["bound"]
    bound, capped = queue_bound(p, EXACT)
    opt = solve_cpsat(p, EXACT)
    assert opt.status == "optimal" and not capped
    assert (families < bound if above else families == bound) and bound <= opt.objective
    assert segment_bound(p, EXACT)[0] >= bound  # the segment phase's relaxation includes it


def test_the_queues_need_one_entry_and_one_exit():
    two_sinks = problem_of(3, [(0, 1), (0, 2)], [1, 2, 2], [10, 0, 0])
    assert queue_bound(two_sinks, EXACT) == (two_sinks.lower_bound_ticks(), False)
    one_device = heads(2, 1)
    assert queue_bound(one_device, EXACT) == (one_device.lower_bound_ticks(), False)
    wide = heads(QUEUE_MAX_CHILDREN // 2 + 1, 4)  # two children per head: past the cap, no model
    assert queue_bound(wide, EXACT) == (wide.lower_bound_ticks(), False)
    assert queue_bound(wide, EXACT, lower=wide.lower_bound_ticks() + 7) == (wide.lower_bound_ticks() + 7, False)


def test_a_node_that_is_both_a_child_of_the_entry_and_a_parent_of_the_exit():
    # s -> a -> t directly beside s -> b -> c -> t: a is in both queues (one interval, one device)
    p = problem_of(5, [(0, 1), (1, 4), (0, 2), (2, 3), (3, 4)], [1, 9, 5, 5, 1], [300, 300, 40, 300, 0], D=2)
    bound, _ = queue_bound(p, EXACT)
    opt = solve_cpsat(p, EXACT)
    assert opt.status == "optimal" and bound <= opt.objective


@pytest.mark.slow
@given(fork_joins(max_width=3, max_blocks=1), st.integers(0, 2**16))
@settings(max_examples=30, deadline=None)
def test_the_queue_bound_never_exceeds_the_optimum(p, seed):
    out = solve_cpsat(p, EXACT)
    assert out.status == "optimal"
    bound, _ = queue_bound(p, EXACT)
    assert p.lower_bound_ticks() <= bound <= out.objective
    rng = np.random.default_rng(seed)
    for _ in range(5):  # nor does any random placement beat it
        device = rng.integers(p.n_devices, size=p.n_nodes)
        assert bound <= simulate(p, schedule_assignment(p, device)).makespan


@pytest.mark.slow
def test_on_a_transformer_attention_segment_the_queues_beat_the_families():
    g = transformer_block(n_blocks=1, heads=4, ffn_tiles=2, jitter=0.1, seed=3)
    p = PlacementProblem.identical(g, 8, kind="cpu", bandwidth=bandwidth_for_comm_ratio(g, 4.0, "cpu"))
    i, nodes = next((i, s) for i, s in enumerate(segments(p)) if any(g.names[v].endswith("attn_sum") for v in s))
    sub = subproblem(p, nodes, instant=(nodes[0],) if i else ())
    bound, _ = queue_bound(sub, EXACT)
    assert bound > placement_bound_details(sub)["bound"]
    assert bound <= solve_cpsat(sub, EXACT).objective  # below the best schedule the full model finds
