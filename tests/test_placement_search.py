"""Placement search (issue 25, item 4): doubt neighbourhoods, symmetry inside windows, rounds that hold their other ops."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from incsched.evaluate.simulate import simulate
from incsched.graph import CompGraph
from incsched.inc_ilp.context import Context
from incsched.inc_ilp.placement import make_check, round_window, rounds, solve_cpsat
from incsched.inc_ilp.tuning import Tuning
from incsched.problems import Placement, PlacementProblem, PlacementWindow
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.placement import interchangeable_devices
from incsched.windows.relax import free_in, policy_margin, uncertain_nodes

EXACT = SolverSettings(time_limit=10.0, max_deterministic_time=5.0)


def chains(n_chains=4, length=3, D=4, out=30):
    """``n_chains`` independent chains of ``length`` unit ops: the optimum runs one chain per device."""
    names, src, dst = [], [], []
    for c in range(n_chains):
        for i in range(length):
            names.append(f"c{c}_{i}")
            if i:
                src.append(c * length + i - 1)
                dst.append(c * length + i)
    n = len(names)
    g = CompGraph(names, src, dst, out_bytes=[out] * n, compute_time={"cpu": [2.0] * n})
    return PlacementProblem.identical(g, D, bandwidth=10.0, time_unit=1.0)


def test_policy_margin_and_uncertain_nodes():
    p = chains(3, 3, D=3)  # nodes 0-2, 3-5, 6-8 in chains
    pref = np.tile([0.9, 0.05, 0.05], (9, 1))
    pref[4] = [0.45, 0.45, 0.10]  # torn: the middle of the second chain
    pref[7] = [0.6, 0.3, 0.1]
    margin = policy_margin(pref)
    assert margin[4] == pytest.approx(0.0) and margin[7] == pytest.approx(0.3) and margin[0] == pytest.approx(0.85)
    sets = uncertain_nodes(p, pref, size=3, count=5)
    # The least sure node comes first, with its data partners (its whole chain here).
    assert np.flatnonzero(sets[0]).tolist() == [3, 4, 5]
    assert np.flatnonzero(sets[1]).tolist() == [6, 7, 8]
    assert all(s.sum() <= 3 for s in sets) and len(sets) <= 5
    # Every node is a seed once: the sets cover the graph.
    assert np.logical_or.reduce(sets).all()
    assert len(uncertain_nodes(p, pref, size=3, count=1)) == 1
    # A seed whose partners would overflow the set comes alone.
    assert np.flatnonzero(uncertain_nodes(p, pref, size=2, count=1)[0]).tolist() == [4, 7]
    with pytest.raises(ValueError, match="size and count"):
        uncertain_nodes(p, pref, size=0, count=1)


def test_interchangeable_devices_follow_the_window_columns():
    p = chains(2, 2, D=4)
    allowed = np.zeros((4, 4), dtype=bool)
    allowed[:, [1, 3]] = True  # devices 1 and 3 open to every node: interchangeable
    allowed[0, 0] = True  # device 0 only for node 0, device 2 for nobody
    assert interchangeable_devices(p, allowed) == ((0,), (1, 3), (2,))
    assert interchangeable_devices(p, np.ones((4, 4), dtype=bool)) == ((0, 1, 2, 3),)


def _pair_window(p, device, a, b):
    free = (device == a) | (device == b)
    devices = np.zeros(p.n_devices, dtype=bool)
    devices[[a, b]] = True
    return PlacementWindow(free_in(p, device, free, devices))


def test_pair_rounds_break_their_symmetry_and_keep_the_window_optimum():
    p = chains(4, 3, D=4)
    device = np.array([1] * 6 + [3] * 6)  # two chains each on devices 1 and 3, devices 0 and 2 idle
    hint = Placement.from_assignment(device, 4, start=simulate(p, Placement.from_assignment(device, 4)).start)
    window = _pair_window(p, device, 1, 3)
    plain = solve_cpsat(p, EXACT, window=window, hint=hint)
    broken = solve_cpsat(p, EXACT, window=window, hint=hint, window_symmetry=True)
    assert not plain.info["symmetry_breaking"] and broken.info["symmetry_breaking"]
    assert plain.status == broken.status == "optimal" and plain.objective == broken.objective == 12
    for out in (plain, broken):
        assert set(out.assignment.tolist()) <= {1, 3}  # the window holds: devices 0 and 2 stay closed
    # Device 1 (the first of the pair) holds the op that comes first in topological order.
    assert broken.assignment[p.graph.topological_order()[0]] == 1
    # A hint that uses device 3 first is relabelled, and still counts as an incumbent.
    swapped = np.where(device == 1, 3, 1)
    relabelled = Placement.from_assignment(swapped, 4, start=hint.start)
    out = solve_cpsat(p, SolverSettings(time_limit=5.0, max_deterministic_time=0.01), window=window, hint=relabelled, window_symmetry=True)
    assert out.info["hinted"] and out.objective <= simulate(p, relabelled).makespan


def _ctx(p, device, *, tuning=None):
    ctx = Context(p, time_limit=60.0, work_limit=5.0, deterministic=True, workers=1, seed=0, check=make_check(p),
                  tuning=tuning or Tuning())
    start = simulate(p, Placement.from_assignment(device, p.n_devices)).start
    best = Placement.from_assignment(device, p.n_devices, start=start)
    ctx.improve(best, ctx.check(best), "start")
    ctx.raise_bound(int(p.lower_bound_ticks()), "combinatorial", "bounds")
    return ctx


def test_rounds_improve_hold_their_ops_and_repeat():
    p = chains(4, 3, D=4)
    device = np.array([0] * 12)  # everything on one device: 24 ticks, the optimum is 6
    runs = []
    for _ in range(2):
        ctx = _ctx(p, device)
        rounds(ctx)
        runs.append(ctx)
    ctx = runs[0]
    assert ctx.best_value < 24 and ctx.best_value == ctx.check(ctx.best)
    assert any(step["phase"] == "round" for step in ctx.steps)
    # Deterministic: the same rounds, the same answer.
    assert ctx.best_value == runs[1].best_value and np.array_equal(ctx.best.device, runs[1].best.device)
    assert json.dumps(ctx.steps) == json.dumps(runs[1].steps)


def test_round_windows_hold_the_ops_they_do_not_free():
    p = chains(4, 3, D=4)
    device = np.array([0] * 3 + [2] * 3 + [0] * 3 + [3] * 3)
    tuning = replace(Tuning(), placement_round_slack=0.5, placement_round_fixed_slack=0.0)
    ctx = _ctx(p, device, tuning=tuning)
    sched = simulate(p, ctx.best)
    free = np.zeros(12, dtype=bool)
    free[6:9] = True  # the second chain on device 0
    window = round_window(ctx, sched, free)
    held = ~free
    assert (window.start_lo[held] == sched.start[held]).all() and (window.start_hi[held] == sched.start[held]).all()
    assert (window.allowed[held].sum(1) == 1).all() and window.allowed[free].all()
    slack = int(0.5 * ctx.best_value)
    assert (window.start_hi[free] == sched.start[free] + slack).all()
    # Solved, the round moves the freed chain to an idle device and nothing else.
    out = solve_cpsat(p, EXACT, window=window, hint=ctx.best, window_symmetry=True)
    assert out.status == "optimal" and out.objective == 6
    assert (out.assignment[held] == device[held]).all() and out.assignment[6] in (1,)
    # The old rounds (held ops as free to start as the freed ones) reach it too, in a larger model.
    wide = round_window(_ctx(p, device, tuning=replace(tuning, placement_round_fixed_slack=0.5)), sched, free)
    assert (wide.start_hi[held] > window.start_hi[held]).all()


def test_the_portfolio_samples_a_larger_pool_that_holds_the_default_one():
    from incsched.generators.dataflow import ffnn
    from incsched.inc_ilp.incumbent import PLACEMENT_PRESCHEDULERS, _sampled
    from incsched.policy.placement_policy import preschedule

    p = PlacementProblem.identical(ffnn(n_layers=4, tiles=2), 4, bandwidth=1e8)
    ctx = _ctx(p, np.zeros(p.n_nodes, dtype=np.int64), tuning=replace(Tuning(), placement_policy_decodes_per_second=40 * p.n_nodes))
    rl = PLACEMENT_PRESCHEDULERS["rl"]
    pooled = _sampled(ctx, "placement", rl)(p, 3)
    alone = preschedule(p, 3)
    assert simulate(p, pooled).makespan <= simulate(p, alone).makespan
    assert np.array_equal(pooled.device, _sampled(ctx, "placement", rl)(p, 3).device)  # seeded: repeats
    off = _ctx(p, np.zeros(p.n_nodes, dtype=np.int64), tuning=replace(Tuning(), placement_policy_decodes_per_second=0))
    assert _sampled(off, "placement", rl) is rl and _sampled(ctx, "stage", rl) is rl
    short = replace(ctx, work_limit=0.1)  # a nominal budget of 0.1 s affords no more than the default pool
    assert _sampled(short, "placement", rl) is rl
