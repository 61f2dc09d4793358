"""Training mode of the stage problem (issue 23, item 3): `incsched.problems.training`'s memory,
time and send rules, checked by hand and by loops, the CP-SAT optimum against brute force, the
evaluator, the JSON form and ``incsched solve --training``."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import brute_force_stages as brute_force

from incsched.evaluate.stage import evaluate_stages
from incsched.graph import CompGraph
from incsched.problems import training
from incsched.problems.stage import ProblemError, StageProblem
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.stage import solve_stage

FAST = SolverSettings(time_limit=5.0, deterministic=True)


def chain3(**kwargs) -> CompGraph:
    """a -> b -> c, parameters 10 / 20 / 30 bytes, outputs 4 / 6 / 8 bytes, 1 / 2 / 3 ms forward."""
    return CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], param_bytes=[10, 20, 30], out_bytes=[4, 6, 8],
                     compute_time={"cpu": [1e-3, 2e-3, 3e-3]}, **kwargs)


# ---------------------------------------------------------------------------- the rules, by hand


@pytest.mark.parametrize(
    "optimizer, schedule, recompute, memory",
    [
        # stages [0, 0, 1], K = 2, M = 3; adam-fp32 charges 4 bytes per parameter byte. Stage 1 also
        # keeps c's output, the graph's, per micro-batch in flight (the pipeline's loss runs outside it).
        ("adam-fp32", "1f1b", False, (4 * 30 + 2 * (4 + 6), 4 * 30 + 1 * 8 + 1 * 8)),  # min(K - k, M) = 2, 1
        ("adam-fp32", "gpipe", False, (4 * 30 + 3 * 10, 4 * 30 + 3 * 8 + 3 * 8)),  # all M = 3 on every stage
        # interleaved, v = 2: chunk-forwards min(2 (K - k - 1) + (v - 1) K + 1, M v) = 5, 3 -> ceil(/2) = 3, 2
        ("adam-fp32", "interleaved:2", False, (4 * 30 + 3 * 10, 4 * 30 + 2 * 8 + 2 * 8)),
        # recompute: one micro-batch's rebuilt activations, plus per micro-batch in flight the inputs
        # (stage 0: b's 6 bytes, and a's 4 model-input bytes twice; stage 1: c's 8, b's 6 received bytes once)
        # and the kept output (c's 8, once): checkpointing rebuilds the stash, not what the stage returned
        ("adam-fp32", "1f1b", True, (4 * 30 + 6 + 2 * 4, 4 * 30 + 8 + 1 * 6 + 1 * 8)),
        ("adam-mixed", "1f1b", False, (8 * 30 + 2 * 10, 8 * 30 + 8 + 8)),  # 16 bytes per 2-byte parameter
        ("sgd-momentum-fp32", "1f1b", False, (3 * 30 + 2 * 10, 3 * 30 + 8 + 8)),
        ("sgd-fp32", "1f1b", False, (2 * 30 + 2 * 10, 2 * 30 + 8 + 8)),
    ],
)
def test_stage_memory_by_hand_on_three_nodes(optimizer, schedule, recompute, memory):
    # No working set and no optimizer-step temporaries here: the stash and weights alone (those two below).
    p = StageProblem.pipeline(chain3(work_bytes=[0, 0, 0], largest_weight_bytes=[0, 0, 0]), 2, micro_batches=3, mode="training", optimizer=optimizer, schedule=schedule,
                              recompute=recompute)
    ev = evaluate_stages(p, [0, 0, 1])
    assert ev.stage_memory == memory
    # The solvers' coefficients give the same bytes: per-node terms plus the inputs a stage receives.
    coef = p.stage_memory_coef
    received = [0, 6]  # b's value crosses the boundary before stage 1
    assert (int(coef[[0, 1], 0].sum()) + p.stage_input_coef[0] * received[0],
            int(coef[2, 1]) + p.stage_input_coef[1] * received[1]) == memory


def test_presets_and_schedules_are_the_documented_rules():
    assert {name: training.param_factor(name) for name in training.OPTIMIZERS} == {
        "adam-fp32": 4, "adam-mixed": 8, "sgd-momentum-fp32": 3, "sgd-fp32": 2}
    assert training.stashed_micro_batches("1f1b", 4, 2) == [2, 2, 2, 1]
    # Interleaved stage 0 with equal chunks holds K (1 + (K - 1) / (K v)) micro-batches (Korthikanti et al.); ours is its ceiling.
    for K, v in [(4, 2), (4, 4), (8, 2)]:
        exact = Fraction(K) * (1 + Fraction(K - 1, K * v))
        assert training.stashed_micro_batches(f"interleaved:{v}", K, 64)[0] == math.ceil(exact)
    assert training.step_slots("gpipe", 4, 8) == 11 and training.step_slots("interleaved:3", 4, 8) == 9


def test_time_is_forward_plus_backward_and_sends_go_both_ways():
    g = chain3()
    p = StageProblem.pipeline(g, 2, micro_batches=3, bandwidth=1e3, time_unit=1e-3, mode="training")
    assert p.node_ticks[:, 0].tolist() == [3, 6, 9]  # backward estimated as 2x forward
    assert p.send_ticks.tolist() == [8, 12, 16]  # 2 x out_bytes at 1000 B/s, in ms
    ev = evaluate_stages(p, [0, 0, 1])
    assert ev.stage_time.tolist() == [3 + 6 + 12, 9] and ev.stage_time_peak == 21
    assert ev.stage_time_s.tolist() == pytest.approx([0.021, 0.009])
    assert ev.step_time_s == pytest.approx((3 + 2 - 1) * 0.021)  # M + K - 1 slots of the slowest stage
    measured = g.replace(backward_time={"cpu": [5e-3, 0.0, 1e-3]})
    q = StageProblem.pipeline(measured, 2, micro_batches=3, time_unit=1e-3, mode="training")
    assert q.node_ticks[:, 0].tolist() == [6, 2, 4]
    assert training.backward_source(measured, "cpu") == "measured"
    assert training.backward_source(g, "cpu").startswith("estimated")


# ---------------------------------------------------------------------------- the optimum and the evaluator


@st.composite
def training_problems(draw, max_nodes: int = 6, max_stages: int = 3):
    n = draw(st.integers(1, max_nodes))
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if draw(st.floats(0, 1)) < 0.4]
    out = draw(st.lists(st.sampled_from([0, 2, 3, 8]), min_size=n, max_size=n))
    g = CompGraph(
        [f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges],
        param_bytes=draw(st.lists(st.sampled_from([0, 1, 5, 20]), min_size=n, max_size=n)),
        out_bytes=out, edge_bytes=[out[u] * draw(st.sampled_from([0, 1, 1])) for u, _ in edges],
        compute_time={"cpu": draw(st.lists(st.sampled_from([0.0, 1e-3, 3e-3]), min_size=n, max_size=n))},
        backward_time=draw(st.sampled_from([None, {"cpu": [1e-3 * (i % 3) for i in range(n)]}])),
        saved_bytes=draw(st.sampled_from([None, [3 * (i % 4) for i in range(n)]])),
        work_bytes=draw(st.one_of(st.none(), st.lists(st.sampled_from([0, 4, 30, 90]), min_size=n, max_size=n))),
        largest_weight_bytes=draw(st.one_of(st.none(), st.lists(st.sampled_from([0, 1, 5, 20]), min_size=n, max_size=n))),
        shared_weights=[{"name": "tied", "bytes": draw(st.sampled_from([1, 7])), "read_by": [0, n - 1]}] if n > 1 and draw(st.booleans()) else None,
        name="random",
    )
    K = draw(st.integers(1, min(max_stages, n)))  # training puts a node on every stage
    kwargs = {}
    if draw(st.booleans()):
        kwargs["memory"] = draw(st.integers(20, 300))
    return StageProblem.pipeline(
        g, K, micro_batches=draw(st.integers(1, 4)), bandwidth=draw(st.sampled_from([None, 1000.0])), time_unit=1e-3,
        mode="training", optimizer=draw(st.sampled_from(sorted(training.OPTIMIZERS))),
        schedule=draw(st.sampled_from(["gpipe", "1f1b", "interleaved:2", "interleaved:3"])), recompute=draw(st.booleans()),
        **kwargs)


def reference(p: StageProblem, stages: list[int]) -> tuple[list[int], list[int]]:
    """Stage ticks and training bytes by plain loops over the written rules (training.py's notes)."""
    g, K, M = p.graph, p.n_stages, p.micro_batches
    kind, v = training.parse_schedule(p.schedule)
    if kind == "gpipe":
        kept = [M] * K
    elif kind == "1f1b":
        kept = [min(K - k, M) for k in range(K)]
    else:
        kept = [math.ceil(min(2 * (K - k - 1) + (v - 1) * K + 1, M * v) / v) for k in range(K)]
    factor = training.OPTIMIZERS[p.optimizer].param_factor
    fwd = g.time("cpu")
    bwd = g.backward_time["cpu"] if "cpu" in g.backward_time else 2 * fwd
    ticks, memory = [0] * K, [0] * K
    weights, work, step = [0] * K, [0] * K, [0] * K  # the working set and optimizer step: maxima over a stage's nodes
    own_work, release = [0] * g.n_nodes, [0] * g.n_nodes
    incoming = [sum(int(g.edge_bytes[e]) for e in range(g.n_edges) if g.dst[e] == x) for x in range(g.n_nodes)]
    stash = g.saved_bytes if g.saved_bytes is not None else g.out_bytes  # saved for backward where measured
    for x in range(g.n_nodes):
        k = stages[x]
        ticks[k] += round((float(fwd[x]) + float(bwd[x])) / p.time_unit)
        source = not any(g.dst[e] == x for e in range(g.n_edges))
        if p.recompute:  # a model input kept per micro-batch in flight; the rest rebuilt, one micro-batch
            acts = kept[k] * int(g.out_bytes[x]) if source else int(stash[x])
        else:
            acts = kept[k] * int(stash[x])
        memory[k] += acts
        if not any(g.src[e] == x for e in range(g.n_edges)):  # a graph output: kept per micro-batch for the loss
            memory[k] += kept[k] * int(g.out_bytes[x])
        weights[k] += factor * int(g.param_bytes[x])
        reads = int(g.param_bytes[x]) + sum(w.nbytes for w in g.shared_weights if x in w.readers)
        # measured, else estimated: output, input and weight gradients; the largest weight tensor, else all of them
        own_work[x] = int(g.work_bytes[x]) if g.work_bytes is not None else int(g.out_bytes[x]) + incoming[x] + reads
        release[x] = 0 if p.recompute and source else int(stash[x])  # what x's backward frees of its micro-batch
        largest = int(g.largest_weight_bytes[x]) if g.largest_weight_bytes is not None else reads
        step[k] = max(step[k], training.OPTIMIZERS[p.optimizer].step_factor * largest)
    for w in g.shared_weights:  # held once, with its gradient and optimizer state, on each stage reading it
        for k in {stages[r] for r in w.readers}:
            weights[k] += factor * w.nbytes
    for u in range(g.n_nodes):
        readers = [stages[g.dst[e]] for e in range(g.n_edges) if g.src[e] == u and g.edge_bytes[e] > 0]
        for k in range(K):
            if stages[u] <= k < max(readers, default=-1):  # stage k sends u on; stage k + 1 receives it
                if p.bandwidth is not None:
                    ticks[k] += round(Fraction(2 * int(g.out_bytes[u])) / Fraction(repr(p.bandwidth)) / Fraction(repr(p.time_unit)))
                if p.recompute:
                    memory[k + 1] += kept[k + 1] * int(g.out_bytes[u])
    for k in range(K):  # a node's working set, less what the stage's later nodes already freed in backward
        for x in range(g.n_nodes):
            if stages[x] == k:
                freed = sum(release[u] for u in range(x + 1, g.n_nodes) if stages[u] == k)
                work[k] = max(work[k], own_work[x] - freed)
    # the peak: the stash with the largest working set, or the optimizer step once the stash is gone
    memory = [wt + max(m + wk, st) for wt, m, wk, st in zip(weights, memory, work, step)]
    return ticks, memory


@given(problem=training_problems(), data=st.data())
@settings(max_examples=40, deadline=None)
def test_evaluator_matches_the_written_training_model(problem, data):
    g, K = problem.graph, problem.n_stages
    stages = sorted(data.draw(st.lists(st.integers(0, K - 1), min_size=g.n_nodes, max_size=g.n_nodes)))
    ev = evaluate_stages(problem, stages)
    ticks, memory = reference(problem, stages)
    assert ev.stage_time.tolist() == ticks and ev.stage_time_peak == max(ticks)
    assert list(ev.stage_memory) == memory
    fits = problem.memory is None or all(m <= c for m, c in zip(memory, problem.memory))
    assert ev.feasible == (fits and set(stages) == set(range(K)))  # and no stage left empty
    sync, sync_ticks = [0] * K, [0] * K  # each stage holding a replicated weight sends its gradient once per step
    for w in g.shared_weights:
        holders = {stages[r] for r in w.readers}
        for k in holders if len(holders) > 1 and problem.bandwidth else ():
            sync[k] += w.nbytes
            sync_ticks[k] += round(Fraction(w.nbytes) / (Fraction("1000.0") * Fraction("0.001")))  # bytes / (B/s x s/tick)
    expected_sync = max(sync) / problem.bandwidth if problem.bandwidth else 0.0
    assert ev.grad_sync_s == pytest.approx(expected_sync)
    assert ev.step_time_s == pytest.approx(float(problem.step_slots()) * ev.stage_time_peak_s + expected_sync)
    # The objective is the step in ticks: slots x slowest stage + the busiest stage's sync (interleaved: v times it).
    v = training.parse_schedule(problem.schedule)[1]
    assert ev.grad_sync_peak == max(sync_ticks) and ev.terms["grad_sync_peak"] == max(sync_ticks)
    assert ev.step_ticks == problem.step_slots() * max(ticks) + max(sync_ticks)
    assert ev.objective == v * ev.step_ticks


@given(training_problems(max_nodes=5))
@settings(max_examples=30, deadline=None)
def test_cpsat_and_solve_find_the_brute_force_training_optimum(problem):
    from incsched.front_door import solve

    out, r, best = solve_stage(problem, FAST), solve(problem, time_limit=5), brute_force(problem)
    if best is None:
        assert out.status == r.status == "infeasible"
        return
    assert out.status == r.status == "optimal" and out.objective == r.objective == r.lower_bound == best
    assert evaluate_stages(problem, out.assignment).objective == best
    assert r.terms["step_time_s"] == pytest.approx(float(problem.step_slots()) * r.terms["stage_time_peak_s"] + r.terms.get("grad_sync_s", 0.0))


def test_recompute_memory_moves_the_optimum():
    # A chain of three 8-byte activations and a 0-byte output (3 ms forward and backward each) on 2
    # stages, 30 bytes each; stage 0 keeps 2 micro-batches in flight. Without recompute it holds one
    # node (16 bytes), so stage 1 takes three (9 ms); with recompute it holds two (b once, the 8-byte
    # input a twice), 6 ms each.
    g = CompGraph(list("abcd"), list("abc"), list("bcd"), out_bytes=[8, 8, 8, 0], compute_time={"cpu": [1e-3] * 4},
                  work_bytes=[0] * 4, largest_weight_bytes=[0] * 4)  # the stash alone
    plain = StageProblem.pipeline(g, 2, memory=30, micro_batches=3, time_unit=1e-3, mode="training")
    again = StageProblem.pipeline(g, 2, memory=30, micro_batches=3, time_unit=1e-3, mode="training", recompute=True)
    # The objective is the step: M + K - 1 = 4 slots of the slowest stage (no shared weight to sync).
    first = solve_stage(plain, FAST)
    assert first.objective == 4 * 9 == brute_force(plain) and evaluate_stages(plain, first.assignment).stage_time_peak == 9
    out = solve_stage(again, FAST)
    assert out.status == "optimal" and out.objective == 4 * 6 == brute_force(again)
    assert out.assignment.tolist() == [0, 0, 1, 1] and evaluate_stages(again, out.assignment).stage_time_peak == 6
    assert evaluate_stages(again, out.assignment).stage_memory == (8 + 2 * 8, 8 + 1 * 8)


# ---------------------------------------------------------------------------- JSON, errors, CLI


def test_json_round_trip_keeps_the_training_fields():
    g = chain3(backward_time={"cpu": [2e-3, 4e-3, 6e-3]})
    assert CompGraph.from_json(g.to_json()) == g and g != chain3()
    p = StageProblem.pipeline(g, 2, memory=500, micro_batches=3, mode="training", optimizer="adam-mixed",
                              schedule="interleaved:2", recompute=True)
    q = StageProblem.from_json(p.to_json())
    assert q == p and (q.optimizer, q.schedule, q.recompute, q.param_factor) == ("adam-mixed", "interleaved:2", True, 8)
    assert "mode" not in StageProblem.pipeline(g, 2).to_json()  # inference files read as before


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(mode="train"), "mode must be one of inference, training; got 'train'"),
        (dict(mode="training", optimizer="adam"), "optimizer must be one of adam-fp32, adam-mixed, sgd-momentum-fp32, sgd-fp32"),
        (dict(mode="training", schedule="zb"), "schedule must be one of gpipe, 1f1b, interleaved:v"),
        (dict(mode="training", schedule="interleaved:1"), "interleaved:v needs v"),
        (dict(mode="training", recompute="yes"), "recompute must be True or False"),
        (dict(optimizer="sgd-fp32"), "belong to mode='training'"),
    ],
)
def test_bad_training_values_are_one_line_errors_naming_the_choices(kwargs, message):
    with pytest.raises(ProblemError, match=message) as err:
        StageProblem.pipeline(chain3(), 2, **kwargs)
    assert "\n" not in str(err.value)


def test_cli_training_prints_the_step_time_and_says_backward_is_estimated(tmp_path, capsys):
    from incsched.cli import main

    path = tmp_path / "g.json"
    chain3().save(path)
    assert main(["solve", str(path), "--stages", "2", "--objective", "throughput", "--training", "--optimizer", "adam-mixed",
                 "--schedule", "gpipe", "--micro-batches", "3", "--time-limit", "20", "-q"]) == 0
    out = capsys.readouterr().out
    assert "status       optimal" in out
    line = next(x for x in out.splitlines() if x.startswith("step time"))
    assert "estimated (2x forward)" in line
    # Forward plus backward 3 / 6 / 9 ms: [0, 0, 1] is slowest at 9 ms; GPipe's step is M + K - 1 = 4 of them.
    assert "36.000 ms" in line
    assert "working set  estimated (output, input and weight gradients)" in out


def test_cli_refuses_training_flags_out_of_place(tmp_path, capsys):
    from incsched.cli import main

    path = tmp_path / "g.json"
    chain3().save(path)
    assert main(["solve", str(path), "--stages", "2", "--training", "-q"]) != 0
    assert "--objective throughput" in capsys.readouterr().err
    assert main(["solve", str(path), "--stages", "2", "--objective", "throughput", "--recompute", "-q"]) != 0
    assert "--recompute belongs to --training" in capsys.readouterr().err


# ---------------------------------------------------------------------------- capture


@pytest.mark.slow
@pytest.mark.parametrize("granularity", ["op", "layer"])
def test_capture_measures_backward_where_asked(granularity):
    import torch

    from incsched.capture import capture

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)).eval()
    x = torch.randn(32, 64)
    g = capture(model, (x,), measure=True, training=True, repeats=3, warmup=1, granularity=granularity).graph
    assert set(g.backward_time) == {"cpu"} and g.meta["measured"]["backward"] is True
    back = g.backward_time["cpu"]
    linear = [v for v, nm in enumerate(g.names) if g.param_bytes[v] > 0]
    assert linear and all(back[v] > 0 for v in linear)
    assert CompGraph.from_json(g.to_json()) == g
    p = StageProblem.pipeline(g, 2, micro_batches=2, mode="training")
    assert training.backward_source(g, "cpu") == "measured"
    assert p.node_seconds() == pytest.approx(g.time("cpu") + back)
    plain = capture(model, (x,), measure=True, repeats=1, warmup=0, granularity=granularity).graph
    assert not plain.backward_time and training.backward_source(plain, "cpu").startswith("estimated")


def test_replicated_weights_sync_their_gradients_once_per_step():
    # a and c read one 4,000-byte weight: on two stages its gradient is sent by both, once per step.
    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], out_bytes=[10, 10, 0], compute_time={"cpu": [1e-3, 1e-3, 1e-3]},
                  shared_weights=[{"name": "tied", "bytes": 4000, "read_by": ["a", "c"]}])
    p = StageProblem.pipeline(g, 2, micro_batches=4, bandwidth=1e6, mode="training", time_unit=1e-4)
    apart, together = evaluate_stages(p, [0, 0, 1]), evaluate_stages(p, [0, 0, 0])
    assert apart.replicated == {"tied": [0, 1]} and apart.grad_sync_s == pytest.approx(4e-3)
    assert apart.step_time_s == pytest.approx(float(p.step_slots()) * apart.stage_time_peak_s + 4e-3)
    assert together.replicated == {} and together.grad_sync_s == 0.0
    assert together.step_time_s == pytest.approx(float(p.step_slots()) * together.stage_time_peak_s)
