"""The clock inside the placement phases: a step started when the run's clock has already run out
returns at once instead of running its own budget (issue 25: seven 60-s runs ended 4-10 s late on a
loaded machine; each test below is one of the places that did it)."""

from __future__ import annotations

import time

import pytest

from incsched.baselines import placement_local
from incsched.baselines.placement_local import local_search
from incsched.bounds.placement import energetic_heads, transfer_heads
from incsched.generators import bandwidth_for_comm_ratio, transformer_block
from incsched.inc_ilp.exact_bounds import placement_bound_cpsat
from incsched.inc_ilp.placement import solve_cpsat
from incsched.inc_ilp.context import Context
from incsched.inc_ilp.incumbent import local_search_clock
from incsched.problems import PlacementProblem
from incsched.problems.decompose import segments, subproblem
from incsched.solvers import SolverSettings, StopSignal
from incsched.solvers.cpsat.placement_bounds import window_heads
from incsched.solvers.cpsat.placement_segments import segment_proof_bound


def _transformer(devices: int = 8) -> PlacementProblem:
    g = transformer_block(n_blocks=1, jitter=0.1, seed=1001)
    return PlacementProblem.identical(g, devices, bandwidth=bandwidth_for_comm_ratio(g, 4.0))


def _stopped() -> StopSignal:
    stop = StopSignal()
    stop.stop("time")
    return stop


def test_a_search_started_after_the_stop_does_not_run_its_limit():
    # CP-SAT drops a StopSearch made before its solve begins: this one searched its whole 5 s.
    p = _transformer()
    t0 = time.perf_counter()
    out = solve_cpsat(p, SolverSettings(time_limit=5.0, deterministic=False, workers=2, stop=_stopped()))
    assert time.perf_counter() - t0 < 2.5
    assert out.info["solve_seconds"] < 1.0


def test_window_heads_build_no_window_after_the_stop():
    p = _transformer()
    head, info = window_heads(p, SolverSettings(time_limit=5.0, deterministic=False, workers=1, stop=_stopped()))
    assert info["windows"] == 0 and info["skipped"] > 0
    assert info["wall_capped"] and not info["reproducible"]
    assert len(head) == p.n_nodes


def test_exact_window_bound_returns_at_once_after_the_stop():
    p = _transformer()
    t0 = time.perf_counter()
    bound, info = placement_bound_cpsat(p, SolverSettings(time_limit=5.0, deterministic=False, workers=1, stop=_stopped()))
    assert time.perf_counter() - t0 < 2.5
    assert bound >= p.lower_bound_ticks()


def test_energetic_heads_ask_the_clock_at_every_node():
    p = _transformer(4)
    start = transfer_heads(p)
    asked = []
    stop_after = 5

    def should_stop():
        asked.append(1)
        return len(asked) > stop_after

    head = energetic_heads(p, start, should_stop=should_stop)
    assert len(asked) == stop_after + 1  # it stopped on the first yes, not at the end of the pass
    assert all(h >= s for h, s in zip(head, start))
    full = energetic_heads(p, start)
    assert all(h <= f for h, f in zip(head, full))  # the nodes left keep the heads they had


def test_local_search_asks_the_clock_inside_a_round(monkeypatch):
    # A round that improves nothing tries every critical node's moves before the next question
    # between rounds: hundreds of assignments, seconds under load.
    p = _transformer(8)
    runs = []
    real = placement_local._Decoder.run

    def counted(self, device):
        runs.append(1)
        return real(self, device)

    monkeypatch.setattr(placement_local._Decoder, "run", counted)
    asked = []

    def should_stop():
        asked.append(1)
        return len(asked) > 2

    local_search(p, 0, evaluations=5000, should_stop=should_stop)
    assert len(runs) <= 3 * placement_local._ASK_EVERY + 2


@pytest.mark.parametrize("parallel", [False, True])
def test_segment_proofs_build_no_decision_model_after_the_stop(parallel):
    p = _transformer(4)
    nodes = max(segments(p), key=len)
    i = segments(p).index(nodes)
    sub = subproblem(p, nodes, instant=(nodes[0],) if i > 0 else ())
    t0 = time.perf_counter()
    bound, probes = segment_proof_bound(sub, 10 * sub.lower_bound_ticks(), SolverSettings(time_limit=5.0, stop=_stopped()), probes=4,
                                        parallel=parallel)
    assert probes == [] and bound == sub.lower_bound_ticks()
    assert time.perf_counter() - t0 < 2.5


def test_a_probes_two_cases_at_once_stop_each_other_and_on_the_callers_stop(monkeypatch):
    # Fakes for the two CP-SAT runs: "wait" searches until it is stopped (then undecided).
    import threading

    from ortools.sat.python import cp_model

    from incsched.solvers.cpsat import placement_segments as ps

    def fake(model, settings, runs):
        if model == "wait":
            while not settings.stop.stopped:
                time.sleep(0.01)
            code = cp_model.UNKNOWN
        elif model == "raise":
            raise RuntimeError("boom")
        else:
            code = model
        runs.append((False, 0.0))
        return None, code

    monkeypatch.setattr(ps, "_solve_decision", fake)
    settings = SolverSettings(time_limit=60.0)
    t0 = time.perf_counter()
    assert ps._decide_both([cp_model.FEASIBLE, "wait"], settings, []) == "feasible"  # the open case stops the other
    assert ps._decide_both([cp_model.INFEASIBLE, cp_model.INFEASIBLE], settings, []) == "infeasible"
    assert ps._decide_both([cp_model.INFEASIBLE, cp_model.UNKNOWN], settings, []) == "unknown"
    stop = StopSignal()
    threading.Timer(0.2, stop.stop, args=("time",)).start()
    runs: list = []
    assert ps._decide_both(["wait", "wait"], SolverSettings(time_limit=60.0, stop=stop), runs) == "unknown" and len(runs) == 2
    assert time.perf_counter() - t0 < 2.0
    with pytest.raises(RuntimeError, match="boom"):  # a case that raised refutes nothing
        ps._decide_both([cp_model.INFEASIBLE, "raise"], settings, [])


def test_segment_proofs_keep_to_their_seconds():
    # A caller's few seconds cover the offsets' solves and every probe, not each run alone.
    p = _transformer(4)
    nodes = max(segments(p), key=len)
    i = segments(p).index(nodes)
    sub = subproblem(p, nodes, instant=(nodes[0],) if i > 0 else ())
    upper = 10 * sub.lower_bound_ticks()
    t0 = time.perf_counter()
    bound, probes = segment_proof_bound(sub, upper, SolverSettings(time_limit=5.0, deterministic=True), probes=12, seconds=0.5)
    assert time.perf_counter() - t0 < 0.5 + 2.0  # one model built after the last check, on a loaded machine
    assert sub.lower_bound_ticks() <= bound < upper and len(probes) < 12
    t0 = time.perf_counter()
    bound, probes = segment_proof_bound(sub, upper, SolverSettings(time_limit=5.0, deterministic=True), probes=12, seconds=0.0)
    assert probes == [] and bound == sub.lower_bound_ticks() and time.perf_counter() - t0 < 1.0
    with pytest.raises(ValueError, match="seconds must be a finite number"):
        segment_proof_bound(sub, upper, SolverSettings(time_limit=5.0), seconds=float("nan"))


def _context(p, **kw) -> Context:
    return Context(p, time_limit=kw.pop("time_limit", 60.0), check=lambda *a: None, workers=1, seed=0, **kw)


def test_a_phase_is_cut_at_its_share_of_the_clock_only_without_a_work_limit():
    p = _transformer(4)
    by_clock = _context(p, work_limit=None, deterministic=True)
    assert by_clock.settings(1.2, wall_share=0.02).wall_cap_s <= 0.02 * 60
    by_work = _context(p, work_limit=5.0, deterministic=True)
    assert by_work.settings(1.2, wall_share=0.02).wall_cap_s > 0.02 * 60  # only the clock: the run repeats


def test_local_search_cut_at_its_share_of_the_clock_marks_the_run_unrepeatable():
    p = _transformer(4)
    ctx = _context(p, work_limit=None, deterministic=True, time_limit=1.0)
    should_stop = local_search_clock(ctx, 0.0)
    assert should_stop() and ctx.wall_capped
    ctx = _context(p, work_limit=5.0, deterministic=True, time_limit=1.0)
    assert not local_search_clock(ctx, 0.0)() and not ctx.wall_capped
