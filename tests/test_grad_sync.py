"""The gradient all-reduce of replicated shared weights as part of the proven training step (issue 23):
the ``grad_sync_peak`` term in the evaluator, CP-SAT, the MILP and inc-ilp, against brute force."""

from __future__ import annotations

import itertools
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import MILP_PROOF

from incsched.bounds import stage_term_bounds
from incsched.evaluate.stage import evaluate_stages
from incsched.graph import CompGraph
from incsched.problems import training
from incsched.problems.stage import ObjectiveWeights, ProblemError, StageProblem
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.stage import solve_stage
from incsched.solvers.milp.stage import solve_stage_milp

# Each of these proofs takes milliseconds; the limit only matters on a starved machine, where CBC
# (wall clock) once stopped on time with its answer unproven (CI, load unknown).
FAST = SolverSettings(time_limit=60.0, deterministic=True)


def brute_force(problem: StageProblem):
    """(least objective, an assignment reaching it) over every assignment; (None, None) if none is feasible."""
    best, arg = None, None
    for s in itertools.product(range(problem.n_stages), repeat=problem.graph.n_nodes):
        ev = evaluate_stages(problem, np.asarray(s))
        if ev.feasible and (best is None or ev.objective < best):
            best, arg = ev.objective, s
    return best, arg


def diamond(sync_bytes: int) -> CompGraph:
    """a -> b1, b2 -> c; b1 and b2 read one tied weight of ``sync_bytes``; 1 / 2 / 2 / 1 ms forward."""
    return CompGraph(["a", "b1", "b2", "c"], ["a", "a", "b1", "b2"], ["b1", "b2", "c", "c"], param_bytes=[0, 10, 10, 0],
                     out_bytes=[10, 10, 10, 0], compute_time={"cpu": [1e-3, 2e-3, 2e-3, 1e-3]},
                     shared_weights=[{"name": "tied", "bytes": sync_bytes, "read_by": ["b1", "b2"]}], name="diamond")


def sync_ticks_by_hand(problem: StageProblem, stages) -> list[int]:
    """Per stage, the written rule: round(bytes / bandwidth / tick) of every weight it holds with another stage."""
    per_tick = Fraction(repr(problem.bandwidth)) * Fraction(repr(problem.time_unit))
    out = [0] * problem.n_stages
    for w in problem.graph.shared_weights:
        holders = {int(stages[r]) for r in w.readers}
        for k in holders if len(holders) > 1 else ():
            out[k] += round(Fraction(w.nbytes) / per_tick)
    return out


# ---------------------------------------------------------------------------- the optimum, every back end


@st.composite
def tied_problems(draw):
    n = draw(st.integers(2, 5))
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if draw(st.floats(0, 1)) < 0.5]
    out = draw(st.lists(st.sampled_from([0, 2, 8]), min_size=n, max_size=n))
    readers = sorted(draw(st.sets(st.integers(0, n - 1), min_size=2, max_size=min(3, n))))
    g = CompGraph(
        [f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges],
        param_bytes=draw(st.lists(st.sampled_from([0, 1, 5]), min_size=n, max_size=n)),
        out_bytes=out, edge_bytes=[out[u] for u, _ in edges],
        compute_time={"cpu": draw(st.lists(st.sampled_from([0.0, 1e-3, 3e-3]), min_size=n, max_size=n))},
        work_bytes=[0] * n, largest_weight_bytes=[0] * n,
        shared_weights=[{"name": "tied", "bytes": draw(st.sampled_from([3, 9, 40])), "read_by": readers}],
        name="tied",
    )
    kwargs = {"memory": draw(st.integers(60, 400))} if draw(st.booleans()) else {}
    return StageProblem.pipeline(g, draw(st.integers(2, min(3, n))), micro_batches=draw(st.integers(1, 3)), bandwidth=1000.0, time_unit=1e-3,
                                 mode="training", schedule=draw(st.sampled_from(["1f1b", "gpipe", "interleaved:2"])), **kwargs)


@given(tied_problems())
@settings(max_examples=20, deadline=None)
def test_cpsat_milp_and_inc_ilp_prove_the_brute_force_step(problem):
    from incsched.front_door import solve

    best, arg = brute_force(problem)
    cpsat, milp = solve_stage(problem, FAST), solve_stage_milp(problem, MILP_PROOF)
    r = solve(problem, time_limit=60)  # ends at its proof (milliseconds); 10 s once fell short under load
    if best is None:
        assert cpsat.status == milp.status == r.status == "infeasible"
        return
    statuses = {"cpsat": cpsat.status, "milp": milp.status, "inc-ilp": r.status}
    assert set(statuses.values()) == {"optimal"}, (statuses, milp.info, r.stop_reason)
    assert cpsat.objective == milp.objective == r.objective == r.lower_bound == best
    v = training.parse_schedule(problem.schedule)[1]
    for stages in (cpsat.assignment, milp.assignment, r.stages):
        ev = evaluate_stages(problem, stages)
        assert ev.objective == best == v * ev.step_ticks  # the objective is the step (interleaved: v times it)
        assert ev.step_ticks == problem.step_slots() * ev.stage_time_peak + max(sync_ticks_by_hand(problem, stages))
    assert r.terms["grad_sync_peak"] == evaluate_stages(problem, r.stages).grad_sync_peak


@pytest.mark.parametrize("sync_bytes, together", [(4_000, False), (40_000, True)])
def test_the_sync_decides_whether_the_tied_readers_share_a_stage(sync_bytes, together):
    # Forward plus backward 3 / 6 / 6 / 3 ms, 5 slots (M = 4, K = 2). Apart ([0, 0, 1, 1]) the slowest stage
    # is 9 ms and sends 20 us, and both stages sync the weight; together ([0, 0, 0, 1], [0, 1, 1, 1]) it is
    # 15 ms, nothing synced. A 4 ms sync keeps them apart (45.1 + 4 < 75); a 40 ms one puts them together.
    p = StageProblem.pipeline(diamond(sync_bytes), 2, micro_batches=4, bandwidth=1e6, time_unit=1e-5, mode="training")
    best, arg = brute_force(p)
    out = solve_stage(p, FAST)
    assert out.status == "optimal" and out.objective == best
    shared = out.assignment[1] == out.assignment[2]
    assert shared == together == (arg[1] == arg[2])
    # Without the term (the slowest stage alone, as before) the readers are always apart.
    plain = replace(p, weights=ObjectiveWeights(stage_time_peak=p.weights.stage_time_peak))
    old = solve_stage(plain, FAST)
    assert old.assignment.tolist() == [0, 0, 1, 1] and old.objective == brute_force(plain)[0]
    sync = int(p.grad_sync_ticks[0])
    assert sync == sync_bytes // 10  # bytes / 1e6 B/s / 1e-5 s
    assert evaluate_stages(p, old.assignment).objective == old.objective + sync  # the old optimum pays the sync


def test_a_weight_held_on_three_stages_syncs_on_each():
    # a -> b -> c, all three read w: one stage each gives every stage the sync; two sharing leave the third's.
    g = CompGraph(list("abc"), list("ab"), list("bc"), out_bytes=[0, 0, 0], compute_time={"cpu": [1e-3] * 3},
                  shared_weights=[{"name": "w", "bytes": 2500, "read_by": list("abc")}])
    p = StageProblem.pipeline(g, 3, micro_batches=2, bandwidth=1e6, time_unit=1e-4, mode="training")
    assert p.grad_sync_ticks.tolist() == [25]
    spread, pair = evaluate_stages(p, [0, 1, 2]), evaluate_stages(p, [0, 0, 2])
    assert spread.stage_sync.tolist() == [25, 25, 25] and spread.replicated == {"w": [0, 1, 2]}
    assert pair.stage_sync.tolist() == [25, 0, 25] and pair.grad_sync_peak == 25
    assert evaluate_stages(p, [1, 1, 1]).grad_sync_peak == 0
    best, _ = brute_force(p)
    for out in (solve_stage(p, FAST), solve_stage_milp(p, MILP_PROOF)):
        assert out.status == "optimal" and out.objective == best


def test_no_bandwidth_means_no_sync_and_the_old_step():
    p = StageProblem.pipeline(diamond(40_000), 2, micro_batches=4, mode="training")
    assert p.grad_sync_ticks.tolist() == [0]
    ev = evaluate_stages(p, [0, 0, 1, 1])
    assert ev.grad_sync_peak == 0 and ev.grad_sync_s == 0.0 and ev.replicated == {"tied": [0, 1]}
    assert ev.objective == ev.step_ticks == 5 * ev.stage_time_peak
    out = solve_stage(p, FAST)
    assert out.status == "optimal" and out.objective == brute_force(p)[0]


def test_interleaved_weights_stay_whole_and_weigh_v_steps():
    # 1F1B interleaved with v = 2 chunks: M + (K - 1) / v = 3 + 3/2 slots, so the weights are 2 x (9/2, 1).
    g = diamond(4_000)
    p = StageProblem.pipeline(g, 4, micro_batches=3, bandwidth=1e6, time_unit=1e-5, mode="training", schedule="interleaved:2")
    assert p.step_slots() == Fraction(9, 2)
    assert (p.weights.stage_time_peak, p.weights.grad_sync_peak) == (9, 2)
    assert all(isinstance(x, int) for x in p.weights.as_dict().values())
    ev = evaluate_stages(p, [0, 1, 2, 3])
    assert ev.step_ticks == Fraction(9, 2) * ev.stage_time_peak + ev.grad_sync_peak
    assert ev.objective == 2 * ev.step_ticks
    assert StageProblem.pipeline(g, 4, micro_batches=3, mode="training").weights.as_dict() == dict(
        ObjectiveWeights(stage_time_peak=3 + 4 - 1, grad_sync_peak=1).as_dict())


def test_the_sync_floor_is_a_valid_bound():
    p = StageProblem.pipeline(diamond(40_000), 2, micro_batches=4, bandwidth=1e6, time_unit=1e-5, mode="training")
    floors = stage_term_bounds(p)
    assert floors["grad_sync_peak"] == 0
    assert floors["stage_time_peak"] <= min(evaluate_stages(p, s).stage_time_peak
                                            for s in itertools.product(range(2), repeat=4) if evaluate_stages(p, s).feasible)


# ---------------------------------------------------------------------------- documents, errors, other problems


def test_old_documents_load_with_the_term_at_zero_and_new_ones_keep_it():
    p = StageProblem.pipeline(diamond(4_000), 2, micro_batches=4, bandwidth=1e6, mode="training")
    doc = p.to_json()
    assert doc["weights"]["grad_sync_peak"] == 1 and StageProblem.from_json(doc) == p
    old = dict(doc, weights={"stage_time_peak": 1})  # a file written before the term existed
    q = StageProblem.from_json(old)
    assert q.weights.grad_sync_peak == 0 and q.weights.stage_time_peak == 1
    assert evaluate_stages(q, [0, 0, 1, 1]).objective == evaluate_stages(q, [0, 0, 1, 1]).stage_time_peak
    # Inference documents are written as before: no sync weight in them.
    assert "grad_sync_peak" not in StageProblem.pipeline(diamond(4_000), 2, bandwidth=1e6).to_json()["weights"]


def test_inference_cannot_weigh_the_sync():
    with pytest.raises(ProblemError, match="grad_sync_peak .* needs mode='training'") as err:
        StageProblem(diamond(4_000), 2, ObjectiveWeights(stage_time_peak=1, grad_sync_peak=1), bandwidth=1e6)
    assert "\n" not in str(err.value)
    ev = evaluate_stages(StageProblem.pipeline(diamond(4_000), 2, bandwidth=1e6), [0, 0, 1, 1])
    assert "grad_sync_peak" not in ev.terms and ev.grad_sync_peak == 0  # inference terms read as before


def test_cli_prints_the_step_and_its_sync(tmp_path, capsys):
    from incsched.cli import main

    path = tmp_path / "g.json"
    diamond(40_000).save(path)
    assert main(["solve", str(path), "--stages", "2", "--objective", "throughput", "--training", "--bandwidth", "1e6",
                 "--micro-batches", "4", "--time-limit", "20", "-q"]) == 0
    out = capsys.readouterr().out
    assert "status       optimal" in out and "grad_sync_peak=0" in out
    assert next(x for x in out.splitlines() if x.startswith("grad sync")).startswith("grad sync    0.000 ms (0 ticks")
    path2 = tmp_path / "g2.json"
    diamond(4_000).save(path2)
    assert main(["solve", str(path2), "--stages", "2", "--objective", "throughput", "--training", "--bandwidth", "1e6",
                 "--micro-batches", "4", "--time-limit", "20", "-q"]) == 0
    out = capsys.readouterr().out
    assert "4.000 ms of it syncing replicated weights" in next(x for x in out.splitlines() if x.startswith("step time"))
    assert next(x for x in out.splitlines() if x.startswith("grad sync")).startswith("grad sync    4.000 ms")


def test_local_search_counts_the_sync_and_readers_are_never_loadless():
    from incsched.baselines.stage_local import improve_by_moves, loadless_nodes

    # mem_peak + sync: apart, each stage holds the 40,000-byte weight and syncs 4,000 ticks (44,010);
    # b2 joining b1 holds it once and syncs nothing (40,020). Without the sync the move costs 10 bytes.
    g = diamond(40_000)
    weighed = StageProblem(g, 2, ObjectiveWeights(mem_peak=1, grad_sync_peak=1), bandwidth=1e6, micro_batches=4,
                           mode="training", time_unit=1e-5)
    start = [0, 0, 1, 1]
    assert evaluate_stages(weighed, start).objective == 44_010
    moved = improve_by_moves(weighed, start)
    assert evaluate_stages(weighed, moved).objective == 40_020 == brute_force(weighed)[0]
    plain = replace(weighed, weights=ObjectiveWeights(mem_peak=1))
    assert improve_by_moves(plain, start).tolist() == start
    # Readers with no time, bytes or sends: loadless for comm_total alone, not once their sync is weighed.
    idle = g.replace(compute_time={"cpu": [0.0] * 4}, out_bytes=[0] * 4, edge_bytes=[0] * 4)
    comm = StageProblem(idle, 2, ObjectiveWeights(comm_total=1), bandwidth=1e6, micro_batches=4, mode="training")
    synced = replace(comm, weights=ObjectiveWeights(comm_total=1, grad_sync_peak=1))
    assert loadless_nodes(comm).tolist() == [True] * 4
    assert loadless_nodes(synced).tolist() == [True, False, False, True]


# every stage holds a node (training mode); the tied weight on two or three of them
@pytest.mark.parametrize("stages", [[0, 0, 1, 2], [0, 1, 2, 2], [0, 1, 1, 2], [0, 2, 1, 2]])
def test_the_sync_hint_is_complete_and_consistent(stages):
    # Every sync variable hinted from an assignment, and the hint (all variables fixed to it) is a
    # solution of the model costing what the evaluator says: no slack, no under-charge.
    from ortools.sat.python import cp_model

    from incsched.solvers.cpsat.stage import _StageModel

    g = diamond(4_000).replace(shared_weights=[{"name": "tied", "bytes": 4_000, "read_by": ["a", "b1", "b2"]}])
    p = StageProblem.pipeline(g, 3, micro_batches=4, bandwidth=1e6, time_unit=1e-5, mode="training")
    model = _StageModel(p, p.allowed_stages(), p.weights.scaled()[0])
    model.add_hint(np.asarray(stages))
    hinted = set(model.model.Proto().solution_hint.vars)
    sync_vars = [v for rep, syncs, _, _ in model.syncs for v in [rep, *syncs.values()] if not isinstance(v, int)]
    sync_vars += list(model.per_stage["grad_sync"].values()) + [model.terms["grad_sync_peak"]]
    assert sync_vars and all(v.Index() in hinted for v in sync_vars)
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.num_workers = 1
    assert solver.Solve(model.model) == cp_model.OPTIMAL
    ev = evaluate_stages(p, stages)
    assert solver.Value(model.terms["grad_sync_peak"]) == ev.grad_sync_peak
    assert model.solution_cost(solver) == ev.objective


@st.composite
def tied_branches(draw):
    """A layer, two or three copies of a branch whose first node reads the tied weight (maybe after a
    weightless node), a weightless or heavy join: merges, placing and branch order all apply."""
    names, src, dst, params, out, readers = [], [], [], [], [], []

    def node(p, o, inputs):
        names.append(f"n{len(names)}")
        params.append(p)
        out.append(o)
        for u in inputs:
            src.append(u)
            dst.append(len(names) - 1)
        return len(names) - 1

    first = node(draw(st.sampled_from([0, 4])), draw(st.sampled_from([1, 5])), [])
    lead = draw(st.booleans())  # a weightless node before each branch's reader
    ends = []
    for _ in range(2 if lead else draw(st.integers(2, 3))):  # at most 6 nodes: brute force stays quick
        x = node(0, 1, [first]) if lead else first
        x = node(draw(st.sampled_from([0, 3])), draw(st.sampled_from([1, 5])), [x])
        readers.append(x)
        ends.append(x)
    node(draw(st.sampled_from([0, 6])), 0, ends)
    if draw(st.booleans()):
        readers.append(first)
    g = CompGraph(names, [names[u] for u in src], [names[v] for v in dst], param_bytes=params, out_bytes=out,
                  compute_time={"cpu": [0.0] * len(names)},
                  shared_weights=[{"name": "tied", "bytes": draw(st.sampled_from([2, 9])), "read_by": [names[r] for r in readers]}])
    weights = draw(st.sampled_from([dict(mem_peak=1, comm_total=1, grad_sync_peak=1), dict(comm_total=1, grad_sync_peak=3),
                                    dict(mem_peak=1, comm_peak=1, grad_sync_peak=2)]))
    return StageProblem(g, draw(st.integers(2, 3)), ObjectiveWeights(**weights), bandwidth=1000.0, time_unit=1e-3,
                        micro_batches=2, mode="training")


@given(tied_branches())
@settings(max_examples=20, deadline=None)
def test_the_reductions_never_hide_a_sync(problem):
    # Readers of the tied weight are never merged or placed; swapped branches keep which stages hold it.
    from incsched.bounds.reductions import stage_reduction

    red = stage_reduction(problem)
    readers = set(problem.graph.shared_weights[0].readers)
    assert not readers & {v for v, _ in red.merges} and not readers & {v for v, _ in red.earliest + red.latest}
    best = None
    for s in itertools.product(range(problem.n_stages), repeat=problem.graph.n_nodes):
        ev = evaluate_stages(problem, np.asarray(s))
        if not ev.feasible:
            continue
        best = ev.objective if best is None else min(best, ev.objective)
        t = red.apply(s)
        assert red.holds(t) and evaluate_stages(problem, t).objective <= ev.objective, (s, t.tolist())
    out = solve_stage(problem, FAST, reduction=red)
    assert out.status == "optimal" and out.objective == best and red.holds(out.assignment)
