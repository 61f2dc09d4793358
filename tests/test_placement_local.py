"""Tests of incsched.baselines.placement_local (local search), incsched.problems.decompose (cut-node segments) and the segment models of incsched.solvers.cpsat.placement_segments."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.baselines.placement import PLACEMENT_BASELINES, critical_path_list, heft
from incsched.baselines.placement_local import local_search, schedule_assignment
from incsched.evaluate.simulate import simulate
from incsched.generators import bandwidth_for_comm_ratio, transformer_block
from incsched.graph import CompGraph
from incsched.inc_ilp.placement import solve_cpsat
from incsched.inc_ilp.tuning import Tuning
from incsched.problems import Device, Links, PlacementProblem
from incsched.problems.decompose import compose, cut_nodes, decomposable, segments, subproblem
from incsched.front_door import solve
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.placement_segments import CLOSE_GAP, segment_bound, segment_decision, segment_proof_bound

EXACT = SolverSettings(time_limit=10.0, max_deterministic_time=5.0)


def problem_of(n, edges, secs, out, D=2, bandwidth=10.0, latency=0.0):
    g = CompGraph([f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges], out_bytes=out,
                  compute_time={"cpu": [float(s) for s in secs]})
    return PlacementProblem(g, [Device(f"d{i}") for i in range(D)], Links(latency=latency, bandwidth=bandwidth), time_unit=1.0)


@st.composite
def fork_joins(draw, max_width=3, max_blocks=2):
    """Blocks of parallel branches between single join nodes: s -> {branches} -> t -> ... (cut nodes between)."""
    edges, secs, out = [], [draw(st.integers(1, 4))], [draw(st.integers(0, 80))]
    entry = 0
    for _ in range(draw(st.integers(1, max_blocks))):
        tails = []
        for _ in range(draw(st.integers(1, max_width))):
            prev = entry
            for _ in range(draw(st.integers(1, 2))):
                v = len(secs)
                secs.append(draw(st.integers(1, 8)))
                out.append(draw(st.integers(0, 80)))
                edges.append((prev, v))
                prev = v
            tails.append(prev)
        join = len(secs)
        secs.append(draw(st.integers(1, 4)))
        out.append(draw(st.integers(0, 80)))
        edges += [(u, join) for u in tails]
        if draw(st.booleans()) and entry != 0:
            edges.append((0, join))  # a residual-style edge that skips a cut node
        entry = join
    D = draw(st.integers(2, 3))
    return problem_of(len(secs), edges, secs, out, D=D, bandwidth=draw(st.sampled_from([5.0, 10.0, 40.0])))


def transformer_problem(**kw):
    g = transformer_block(**kw)
    return PlacementProblem.identical(g, 4, kind="cpu", bandwidth=bandwidth_for_comm_ratio(g, 4.0, "cpu"))


# ---------------------------------------------------------------------- local search


def test_local_search_is_registered_and_beats_the_list_schedulers_on_a_transformer():
    assert "local_search" in PLACEMENT_BASELINES
    p = transformer_problem(heads=4, ffn_tiles=4)
    best_list = min(simulate(p, f(p)).makespan for f in (heft, critical_path_list))
    ls = local_search(p, 0, evaluations=600)
    assert simulate(p, ls).makespan < best_list
    again = local_search(p, 0, evaluations=600)
    assert again.device.tolist() == ls.device.tolist() and again.order == ls.order


@given(fork_joins())
@settings(max_examples=15, deadline=None)
def test_local_search_is_feasible_and_never_worse_than_its_start(p):
    start = heft(p)
    pl = local_search(p, 1, evaluations=60, start=start)
    s = simulate(p, pl, "ordered")
    assert s.makespan <= simulate(p, start, "ordered").makespan
    if pl.start is not None:
        assert s.makespan <= simulate(p, pl, "timed").makespan  # its plan is a real schedule


def test_schedule_assignment_keeps_the_devices():
    p = problem_of(4, [(0, 1), (0, 2), (1, 3), (2, 3)], [1, 3, 3, 1], [10, 10, 10, 0], bandwidth=100.0)
    pl = schedule_assignment(p, [0, 0, 1, 0])
    assert pl.device.tolist() == [0, 0, 1, 0]
    assert simulate(p, pl).makespan == 1 + 3 + 1  # b on d1 runs beside a on d0; transfers take 0.1 -> 0 ticks


# ---------------------------------------------------------------------- segments


def test_transformer_segments_at_norms_and_sums():
    p = transformer_problem(heads=2, ffn_tiles=2)
    names = p.graph.names
    cuts = [names[v] for v in cut_nodes(p)]
    assert cuts == ["x", "B0.attn_norm", "B0.attn_sum", "B0.attn_residual", "B0.mlp_norm", "B0.mlp_sum", "B0.mlp_residual"]
    parts = segments(p)
    assert sorted({v for nodes in parts for v in nodes}) == list(range(p.n_nodes))
    assert [len(nodes) for nodes in parts] == [1, 2, 2 * 7 + 2, 2, 2, 2 * 5 + 2, 2]
    assert decomposable(p)
    glued = compose(p, [(nodes, local_search(subproblem(p, nodes), 0, evaluations=50)) for nodes in parts])
    sched = simulate(p, glued, "ordered")  # every node once, no deadlock
    assert sorted(v for seq in sched.order for v in seq) == list(range(p.n_nodes))


def test_no_cut_node_means_one_segment():
    p = problem_of(4, [(0, 2), (1, 2), (1, 3)], [1, 1, 1, 1], [0, 0, 0, 0])
    assert cut_nodes(p) == [] and segments(p) == [[0, 1, 2, 3]] and not decomposable(p)


# ---------------------------------------------------------------------- the segment bound


def test_segment_bound_sees_that_splitting_a_fork_costs_transfers():
    # s (1) -> a (10), b (10) -> t (1), every transfer 100 ticks: one device is optimal (22), while
    # max(critical path, work / 2) says 12.
    p = problem_of(4, [(0, 1), (0, 2), (1, 3), (2, 3)], [1, 10, 10, 1], [1000, 1000, 1000, 0])
    assert p.lower_bound_ticks() == 12
    assert segment_bound(p, EXACT) == (22, False)
    assert solve_cpsat(p, EXACT).objective == 22


@pytest.mark.slow
@given(fork_joins(max_width=3, max_blocks=1))
@settings(max_examples=20, deadline=None)
def test_segment_bound_never_exceeds_the_optimum(p):
    out = solve_cpsat(p, EXACT)
    assert out.status == "optimal"
    bound, _ = segment_bound(p, EXACT)
    assert p.lower_bound_ticks() <= bound <= out.objective
    rng = np.random.default_rng(0)
    for _ in range(5):  # and no random placement beats it either
        device = rng.integers(p.n_devices, size=p.n_nodes)
        assert bound <= simulate(p, schedule_assignment(p, device)).makespan


@pytest.mark.slow
@given(fork_joins(max_width=2, max_blocks=2))
@settings(max_examples=15, deadline=None)
def test_inc_ilp_segment_bound_is_valid_for_the_whole_graph(p):
    r = solve(p, "inc-ilp", time_limit=2.0)
    out = solve_cpsat(p, EXACT)
    assert out.status == "optimal"
    assert r.lower_bound <= out.objective <= r.objective
    assert r.status != "optimal" or r.objective == out.objective


@pytest.mark.slow  # clock-bound solves (time_limit=3.0): under load the bound comes from another phase
def test_inc_ilp_on_a_transformer_reports_the_segment_bound():
    p = transformer_problem(heads=2, ffn_tiles=2)
    r = solve(p, "inc-ilp", time_limit=3.0)
    assert r.bound_source in ("segments", "cpsat-full") and r.lower_bound > p.lower_bound_ticks()
    assert r.lower_bound <= r.objective
    assert r.objective <= simulate(p, critical_path_list(p)).makespan
    again = solve(p, "inc-ilp", time_limit=3.0)
    assert again.objective == r.objective and again.device == r.device


@pytest.mark.slow
def test_inc_ilp_segment_phase_runs_the_decision_proofs():
    p = transformer_problem(heads=2, ffn_tiles=2)
    # With no least time per probed segment (3 s leave a few tenths for the probes pass), every
    # segment its search left unproven is bounded by the relaxation and the probes after it. (With
    # the LP in the segments' models, which slows them, some are left unproven: without, both proved;
    # so did they from the compiled moves' start, which the test leaves out.)
    r = solve(p, "inc-ilp", time_limit=3.0, tuning=Tuning(placement_probe_seconds_per_node=0.0, placement_search_linearization=1,
                                                          placement_moves_share=0.0))
    phases = [w for w in r.provenance["steps"] if w["phase"] == "segment"]
    # (The relaxation runs only where the bound phase ran no queue model of the segment.)
    assert phases and all(w["status"] == "optimal" or ("probes" in w and w["bound"] >= w.get("relaxation", w.get("bound_phase", 0)))
                          for w in phases)
    assert any("probes" in w for w in phases)
    assert all(w["bound"] <= w["objective"] for w in phases if w["objective"] is not None)
    # A segment the bound phase ran no queue model for (its share all but nil) gets the relaxation first.
    r = solve(p, "inc-ilp", time_limit=3.0, tuning=Tuning(placement_probe_seconds_per_node=0.0, placement_search_linearization=1,
                                                          placement_bound_share=1e-6, placement_moves_share=0.0))
    phases = [w for w in r.provenance["steps"] if w["phase"] == "segment"]
    assert any("relaxation" in w for w in phases)
    assert all(w["status"] == "optimal" or w["bound"] >= w["relaxation"] for w in phases)
    # A segment the pass cannot give its least time is not probed at all; its bound still holds.
    r = solve(p, "inc-ilp", time_limit=3.0, tuning=Tuning(placement_probe_seconds_per_node=100.0))
    phases = [w for w in r.provenance["steps"] if w["phase"] == "segment"]
    assert phases and not any("probes" in w for w in phases)
    assert r.lower_bound <= r.objective and all(w["bound"] <= w["objective"] for w in phases if w["objective"] is not None)


@pytest.mark.slow
def test_segment_probes_are_capped_by_the_clock_alone_where_it_is_the_budget(monkeypatch):
    # Where the clock is the budget the probes share wall seconds and no run has a work cap of its
    # own (capped at an even part, 60-s runs decided no probe); with a work budget each run gets
    # its even part of it and no clock, so the run repeats.
    import incsched.inc_ilp.placement as placement

    seen, real = [], placement.segment_proof_bound

    def spy(sub, upper, settings_, **kw):
        bound, probes = real(sub, upper, settings_, **kw)
        seen.append((settings_.time_limit, kw["seconds"], probes))
        counts.append(kw["probes"])
        return bound, probes

    counts = []
    monkeypatch.setattr(placement, "segment_proof_bound", spy)
    p = transformer_problem(heads=2, ffn_tiles=2)
    tuning = Tuning(placement_probe_seconds_per_node=0.0, placement_search_linearization=1, placement_moves_share=0.0,
                    placement_proof_probes=3, placement_proof_probes_clock=7)
    solve(p, "inc-ilp", time_limit=6.0, tuning=tuning)  # 3 s reached no probe on a loaded machine
    assert seen and all(limit == float("inf") and 0 < seconds <= 6.0 for limit, seconds, _ in seen)
    # the clock alone ends the probes: the count only stops a segment whose probes keep being decided
    assert set(counts) == {7}
    seen.clear(), counts.clear()
    r = solve(p, "inc-ilp", time_limit=60.0, work_limit=0.1, tuning=tuning)
    assert seen and all(limit < 1.0 and seconds is None for limit, seconds, _ in seen)
    assert set(counts) == {3}  # each run an even part of the segment's proof share: 2 x 3 runs
    # each probe reports the deterministic seconds it used, which the run is charged
    assert all(pr["work"] >= 0 for *_, probes in seen for pr in probes) and any(pr["work"] > 0 for *_, probes in seen for pr in probes)
    assert r.reproducible


def test_a_segments_hint_is_its_earlier_twins_placement_where_that_runs_shorter():
    # Two blocks of a transformer give segments of one shape with other durations: the placement
    # searched for the first is a placement of the second, and CP-SAT's hint where it runs shorter there.
    import incsched.inc_ilp.placement as placement
    from incsched.problems import Placement

    p = transformer_problem(n_blocks=2, heads=4, ffn_tiles=2, jitter=0.1, seed=3)
    big = [nodes for nodes in segments(p) if len(nodes) > 2]
    subs = [subproblem(p, nodes, instant=(nodes[0],)) for nodes in big]
    first, second = subs[0], next(sub for sub in subs[1:] if placement._shape(sub) == placement._shape(subs[0]))
    assert first.signature() != second.signature()  # the same shape, other durations
    assert placement._shape(subs[0]) != placement._shape(subs[1])  # attention and MLP differ
    one_device = Placement(np.zeros(second.n_nodes, dtype=np.int64),
                           (tuple(second.graph.topological_order().tolist()),) + ((),) * (second.n_devices - 1))
    searched = local_search(first, 0, evaluations=300)
    start, from_twin = placement._shorter_twin(second, one_device, searched)
    assert from_twin and start.start is None and np.array_equal(start.device, searched.device)
    assert simulate(second, start).makespan < simulate(second, one_device).makespan
    # local search's answer stays where the twin's runs no shorter, and with no twin
    assert placement._shorter_twin(second, start, one_device) == (start, False)
    assert placement._shorter_twin(second, one_device, None) == (one_device, False)


def test_probes_pass_sizes_its_end_with_each_segments_setup():
    # Sized at the least times alone, a 60-s tblock2_d8's first MLP took its 4.4 s with the
    # offsets' solves, and the second was left 4.0 s of its 4.2: no probe.
    import types

    import incsched.inc_ilp.placement as placement

    ctx = types.SimpleNamespace(tuning=Tuning(placement_probe_seconds_per_node=0.1, placement_probe_setup_seconds=0.5,
                                              placement_probe_wall_share=0.7),
                                elapsed=lambda: 10.0, wall_left=lambda: 50.0)
    assert placement._probes_end(ctx, None, [42, 42]) is None  # a work budget: no wall end
    assert placement._probes_end(ctx, 11.0, [42, 42]) == pytest.approx(10.0 + 2 * (4.2 + 0.5))
    assert placement._probes_end(ctx, 30.0, [42, 42]) == 30.0  # the phase's own end is later
    assert placement._probes_end(ctx, 11.0, [42] * 20) == pytest.approx(10.0 + 0.7 * 50.0)  # at most its wall share


def test_proof_side_runs_one_deterministic_worker_in_either_mode(monkeypatch):
    # The window bounds, the segment relaxations and the probes prove bounds, not answers: with 2
    # workers the windows once got 6 wall s shared with the pure-Python families (chained matmul
    # 15x2 on 4 devices fell 10 % below the deterministic mode's bound), and a probe's refutation
    # took 1.8-2.6 times as long. Both modes now give them one worker and the same deterministic seconds.
    import incsched.inc_ilp.placement as placement
    from incsched.inc_ilp.context import Context

    seen = {"bound": [], "relaxation": [], "probes": []}

    def spy(name, real, at):
        def call(*args, **kw):
            seen[name].append(args[at])
            return real(*args, **kw)
        monkeypatch.setattr(placement, real.__name__, call)

    spy("bound", placement.placement_bound_cpsat, 1)
    spy("relaxation", placement.segment_bound, 1)
    spy("probes", placement.segment_proof_bound, 2)
    p = transformer_problem(heads=2, ffn_tiles=2)
    solve(p, "inc-ilp", time_limit=4.0, deterministic=False, workers=2)
    solve(p, "inc-ilp", time_limit=4.0)
    assert len(seen["bound"]) == 2 and seen["bound"][0].time_limit == seen["bound"][1].time_limit
    # a segment's relaxation and probes, called as the segment phase calls them in a 2-worker run
    nodes = max(segments(p), key=len)
    sub = subproblem(p, nodes, instant=(nodes[0],))
    ctx = Context(sub, time_limit=4.0, work_limit=None, deterministic=False, workers=2, seed=0, check=lambda *a: None)
    bound = placement._segment_relaxation_bound(ctx, sub, sub.lower_bound_ticks(), 0.3)[0]
    placement._segment_probes(ctx, sub, bound + 1000, bound, 1.0, 0.3)
    assert all(seen.values()) and all(s.deterministic and s.workers == 1 for calls in seen.values() for s in calls)


# ---------------------------------------------------------------------- the segment decision model (proofs)


@pytest.mark.slow
@given(fork_joins(max_width=3, max_blocks=1))
@settings(max_examples=20, deadline=None)
def test_segment_decision_refutes_only_what_is_below_the_optimum(p):
    opt = solve_cpsat(p, EXACT)
    assert opt.status == "optimal"
    assert segment_decision(p, int(opt.objective), EXACT) != "infeasible"
    assert segment_decision(p, int(opt.objective) - 1, EXACT) != "feasible"


@pytest.mark.slow
def test_segment_decision_on_identical_branches_and_twins():
    # s -> two identical branches (a -> b) plus twin leaves c, c' -> t: symmetry breaking in use.
    p = problem_of(8, [(0, 1), (1, 2), (0, 3), (3, 4), (0, 5), (0, 6), (2, 7), (4, 7), (5, 7), (6, 7)],
                   [1, 6, 6, 6, 6, 3, 3, 1], [40, 40, 40, 40, 40, 20, 20, 0], D=3, bandwidth=10.0)
    opt = int(solve_cpsat(p, EXACT).objective)
    assert segment_decision(p, opt, EXACT) == "feasible"
    assert segment_decision(p, opt - 1, EXACT) == "infeasible"
    bound, probes = segment_proof_bound(p, opt, EXACT)
    assert bound == opt and {"makespan": opt - 1, "verdict": "infeasible"} in [{k: pr[k] for k in ("makespan", "verdict")} for pr in probes]
    assert not any(pr["wall_capped"] for pr in probes)
    # From a wide gap the probes start a third of the way up; from within CLOSE_GAP, at the incumbent.
    lower = p.lower_bound_ticks()
    assert opt - 1 - lower > CLOSE_GAP * opt and probes[0]["makespan"] == lower + (opt - 1 - lower) // 3
    _, close = segment_proof_bound(p, opt, EXACT, lower=opt - 1 - int(CLOSE_GAP * opt))
    assert close[0]["makespan"] == opt - 1 and close[0]["verdict"] == "infeasible"
    # the two exit cases at once (two workers): the same probes, the same verdicts
    both, in_parallel = segment_proof_bound(p, opt, EXACT, parallel=True)
    assert both == bound and [(pr["makespan"], pr["verdict"]) for pr in in_parallel] == [(pr["makespan"], pr["verdict"]) for pr in probes]


@pytest.mark.slow  # solves cut by the wall clock
def test_segment_proofs_say_when_the_wall_clock_cut_a_deterministic_run():
    # A deterministic run stopped by the wall clock may not repeat: every probe must say so, and
    # an undecided probe proves nothing beyond the bound it was given.
    p = problem_of(8, [(0, 1), (1, 2), (0, 3), (3, 4), (0, 5), (0, 6), (2, 7), (4, 7), (5, 7), (6, 7)],
                   [1, 6, 6, 6, 6, 3, 3, 1], [40, 40, 40, 40, 40, 20, 20, 0], D=3, bandwidth=10.0)
    opt = int(solve_cpsat(p, EXACT).objective)
    bound, probes = segment_proof_bound(p, opt, replace(EXACT, wall_cap_s=1e-9))
    assert probes and all(pr["wall_capped"] for pr in probes)
    assert bound <= opt


def test_segment_decision_declines_unsupported_shapes():
    two_sinks = problem_of(3, [(0, 1), (0, 2)], [1, 2, 2], [10, 0, 0])
    assert segment_decision(two_sinks, 100, EXACT) == "unknown"


@pytest.mark.slow
def test_segment_proof_bound_beats_the_relaxation_on_a_transformer_mlp():
    p = transformer_problem(heads=2, ffn_tiles=3)
    nodes = max(segments(p), key=len)
    i = segments(p).index(nodes)
    sub = subproblem(p, nodes, instant=(nodes[0],) if i > 0 else ())
    relaxed, _ = segment_bound(sub, EXACT)
    best = solve_cpsat(sub, EXACT)
    bound, _ = segment_proof_bound(sub, int(best.objective), EXACT, lower=relaxed, probes=4)
    assert relaxed <= bound <= best.objective


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])


def test_the_incumbents_schedule_of_each_segment_glues_back_to_it():
    # What the segment phase starts every segment from, and keeps where the clock leaves one unsolved.
    from incsched.inc_ilp.placement import _restrict

    p = transformer_problem(heads=2, ffn_tiles=2)
    best = critical_path_list(p)
    parts = []
    for i, nodes in enumerate(segments(p)):
        own = _restrict(best, nodes)
        sub = subproblem(p, nodes, instant=(nodes[0],) if i > 0 else ())
        assert own.device.tolist() == np.asarray(best.device)[nodes].tolist()
        assert sorted(v for seq in own.order for v in seq) == list(range(len(nodes)))
        simulate(sub, own, "ordered")  # a valid schedule of the segment's own problem
        parts.append((nodes, own))
    glued = compose(p, parts)
    # the same devices up to relabelling per segment: each device's nodes keep their order
    assert simulate(p, glued, "ordered").makespan <= simulate(p, best, "ordered").makespan


def test_the_segment_phase_never_loses_the_incumbent_and_its_bounds_add_up():
    p = transformer_problem(heads=2, ffn_tiles=2)
    r = solve(p, "inc-ilp", time_limit=3.0)
    steps = r.provenance["steps"]
    start = next(s for s in steps if s["phase"] == "incumbent")
    assert r.objective <= min(v for v in start["scores"].values() if v is not None)
    assert r.lower_bound <= r.objective


def test_segments_on_devices_of_two_kinds_keep_their_cut_nodes_in_place():
    # Two GPUs (1.5x faster) and a CPU on links 8x slower: the devices are not interchangeable, so
    # each segment is searched with its cut nodes where the incumbent has them, and glued as is.
    from incsched.inc_ilp.placement import _pinned, _restrict
    from incsched.problems.decompose import gluable

    g = transformer_block(n_blocks=2, heads=4, ffn_tiles=4)
    g = g.replace(compute_time={"cpu": g.time("cpu"), "gpu": np.asarray(g.time("cpu")) / 1.5})
    devices = [Device("gpu0", kind="gpu"), Device("gpu1", kind="gpu"), Device("cpu0", kind="cpu")]
    bw = bandwidth_for_comm_ratio(g, 4.0, "gpu")
    p = PlacementProblem(g, devices, Links(bandwidth=np.array([[bw, bw, bw / 8], [bw, bw, bw / 8], [bw / 8, bw / 8, bw]])))
    assert gluable(p) and not decomposable(p)
    best = critical_path_list(p)
    nodes = segments(p)[1]
    window = _pinned(_restrict(best, nodes), [0])
    assert window.allowed[0].tolist() == [d == int(best.device[nodes[0]]) for d in range(3)] and window.allowed[1:].all()
    r = solve(p, "inc-ilp", time_limit=5.0)
    steps = r.provenance["steps"]
    start = next(s for s in steps if s["phase"] == "incumbent")
    assert r.objective <= min(v for v in start["scores"].values() if v is not None)
    searched = [s for s in steps if s["phase"] == "segment"]
    assert searched and all(s["pinned_cut_nodes"] and "probes" not in s for s in searched)  # no bound read from a pinned segment


@given(fork_joins(max_width=3, max_blocks=2))
@settings(max_examples=12, deadline=None)
def test_the_bound_phase_bounds_each_segment_below_its_optimum(p):
    # inc-ilp's segment phase starts each segment from these: each must hold for the segment's own problem.
    from incsched.inc_ilp.exact_bounds import placement_bound_cpsat

    _, info = placement_bound_cpsat(p, SolverSettings(time_limit=5.0))
    assert info["queued"] <= set(info["parts"])
    for i, nodes in enumerate(segments(p)):
        sub = subproblem(p, nodes, instant=(nodes[0],) if i > 0 else ())
        if sub.signature() in info["parts"]:
            out = solve_cpsat(sub, EXACT)
            assert out.status == "optimal"
            assert info["parts"][sub.signature()] <= out.objective


@pytest.mark.slow
def test_the_segment_phase_starts_from_the_bound_phases_segment_bounds():
    p = transformer_problem(n_blocks=2, heads=4, ffn_tiles=3)
    r = solve(p, "inc-ilp", time_limit=8.0)
    phases = [w for w in r.provenance["steps"] if w["phase"] == "segment"]
    started = [w for w in phases if "bound_phase" in w]
    assert started, phases
    assert all(w["bound_phase"] <= w["bound"] <= w["objective"] for w in started)
    families = next(w for w in r.provenance["steps"] if w["phase"] == "bound")["families"]
    assert r.lower_bound >= families.get("window_segment_sum", 0)


def test_segment_rounds_never_lose_their_start_and_stop_with_the_run():
    from incsched.inc_ilp.context import Context
    from incsched.inc_ilp.placement import _segment_rounds, make_check

    p = transformer_problem(heads=4, ffn_tiles=2)
    ctx = Context(p, time_limit=20.0, work_limit=None, deterministic=True, workers=1, seed=0, check=make_check(p))
    nodes = max(segments(p), key=len)
    sub = subproblem(p, nodes, instant=(nodes[0],))
    start = critical_path_list(sub)
    before = simulate(sub, start, "ordered").makespan
    pl, improved = _segment_rounds(ctx, sub, start, sub.lower_bound_ticks(), 1.0, 0.1)
    after = simulate(sub, pl, "ordered").makespan
    assert after <= before and (improved > 0) == (after < before)
    assert ctx.work_spent > 0  # the segment's rounds are charged to the run
    ctx.stop.stop("interrupted")  # the run's stop (its clock, Ctrl-C) ends the segment's rounds too
    again, improved = _segment_rounds(ctx, sub, start, sub.lower_bound_ticks(), 1.0, 0.1)
    assert again is start and improved == 0
