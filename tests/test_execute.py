"""Execution on CPU: split runs match the unsplit model, placements run in their solved order,
mismatches are caught and located, measured figures sit beside predicted ones."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from incsched.baselines.stage import contiguous_compute
from incsched.execute import (
    ExecutionError,
    OutputMismatch,
    check_devices,
    check_execution,
    cpu_threads_per_worker,
    cpu_time_threads,
    device_problem,
    execute,
    execute_distributed,
    first_divergence,
    micro_batches,
    pipeline_plan,
    placement_plan,
    placement_program,
    predict_pipeline,
    prepare,
    rank_placements,
    segments,
    stage_program,
    validate_placement,
    validate_result,
    validate_stages,
)
from incsched.problems import Links, Placement, StageProblem
from incsched.front_door import solve

pytestmark = pytest.mark.slow  # runs captured models split into parts


def _stages(cap, K):
    return contiguous_compute(StageProblem(cap.graph, K))


@pytest.mark.parametrize("which", ["resnet18", "block"])
@pytest.mark.parametrize("K", [2, 3])
def test_stage_pipeline_matches_unsplit_model(which, K, request):
    cap = request.getfixturevalue(which)
    stages = _stages(cap, K)
    program = stage_program(cap, stages, K)
    assert {p.worker for p in program.parts} == set(int(s) for s in stages)
    devices = ["cpu"] * K
    prepare(program, devices)
    batches = micro_batches(cap.example_inputs, 3, seed=1)
    run = execute(program, batches, devices, pipeline_plan(program, 3))
    assert check_execution(cap, program, batches, run, devices) <= 1e-5
    # GPipe: a stage takes micro-batch m only after it finished m - 1, and after its producers finished m
    done = {(r.part, r.micro_batch): r for r in run.records}
    for r in run.records:
        if r.micro_batch:
            assert r.start >= done[(r.part, r.micro_batch - 1)].end
        for ref in program.parts[r.part].inputs:
            if ref.part is not None:
                assert r.start >= done[(ref.part, r.micro_batch)].end


def test_parts_own_their_weights(resnet18):
    program = stage_program(resnet18, _stages(resnet18, 2), 2)
    weights = sum(b.numel() * b.element_size() for p in program.parts for b in p.module.buffers())
    gm = resnet18.graph_module
    read = [n for n in gm.graph.nodes if n.op == "get_attr" and n.users]  # weights some node reads
    assert weights == sum(gm.get_buffer(n.target).nbytes if n.target in dict(gm.named_buffers()) else gm.get_parameter(n.target).nbytes for n in read)
    for part in program.parts:  # no weight arrives as an argument: every input is data
        assert all(r.part is not None or r.index < program.n_inputs for r in part.inputs)
        assert len(part.inputs) == sum(n.op == "placeholder" for n in part.module.graph.nodes)


def test_backward_stage_edge_is_rejected(block):
    K = 2
    stages = np.array(_stages(block, K))
    stages[0] = 1  # the input node after its consumers' stage
    stages[stages == 0] = 0
    with pytest.raises(ExecutionError, match="goes from stage 1 back to stage 0"):
        stage_program(block, stages, K)


@pytest.mark.parametrize("which", ["resnet18", "block"])
@pytest.mark.parametrize("method", ["heft", "round_robin", "inc-ilp"])
def test_two_device_placement_runs_in_solved_order(which, method, request):
    cap = request.getfixturevalue(which)
    problem = device_problem(cap.graph, ["cpu", "cpu"], Links(bandwidth=1e9))  # transfers make the split matter
    result = solve(problem, method, time_limit=5)
    placement = Placement(result.device, result.order)
    program, order = placement_program(cap, placement)
    devices = ["cpu", "cpu"]
    prepare(program, devices)
    batches = micro_batches(cap.example_inputs, 1)
    run = execute(program, batches, devices, placement_plan(order))
    assert check_execution(cap, program, batches, run, devices) <= 1e-5

    # every part runs on its device, in the solved order, after its producers
    rank = {v: i for seq in placement.order for i, v in enumerate(seq)}
    index = {nm: v for v, nm in enumerate(cap.graph.names)}
    by_part = {r.part: r for r in run.records}
    for d, parts in enumerate(order):
        starts = [by_part[p].start for p in parts]
        assert starts == sorted(starts)
        firsts = [rank[index[program.parts[p].nodes[0]]] for p in parts]
        assert firsts == sorted(firsts)
        assert all(int(placement.device[index[nm]]) == d for p in parts for nm in program.parts[p].nodes)
    for p, part in enumerate(program.parts):
        for ref in part.inputs:
            if ref.part is not None:
                assert by_part[p].start >= by_part[ref.part].end


def test_segments_receive_first_and_send_last(block):
    g = block.graph
    rng = np.random.default_rng(3)
    device = rng.integers(0, 3, g.n_nodes)
    placement = Placement.from_assignment(device, 3)
    label, device_of = segments(g, placement)
    # labels increase along each device's order and belong to that device
    for d, seq in enumerate(placement.order):
        labs = [label[v] for v in seq]
        assert labs == sorted(labs)
        assert all(device_of[lab] == d for lab in labs)
        for a, b in zip(seq, seq[1:]):  # a receiving node starts a segment; a sending node ends one
            if any(device[u] != d for u in g.predecessors(b)) or any(device[w] != d for w in g.successors(a)):
                assert label[b] == label[a] + 1


def test_deadlocking_orders_are_rejected_naming_nodes(block):
    g = block.graph
    # device 1 runs the last node; device 0 runs everything else but in reverse topological order
    last = int(g.topological_order()[-1])
    device = np.zeros(g.n_nodes, dtype=int)
    device[last] = 1
    rest = [int(v) for v in g.topological_order() if v != last][::-1]
    with pytest.raises(ExecutionError, match="cannot run in its device orders"):
        placement_program(block, Placement(device, [rest, [last]]))


def test_a_broken_part_is_caught_and_located(resnet18):
    K = 2
    stages = _stages(resnet18, K)
    program = stage_program(resnet18, stages, K)
    devices = ["cpu"] * K
    prepare(program, devices)
    broken = program.parts[1]
    name, buf = next((n, b) for n, b in broken.module.named_buffers() if b.dim() == 4)  # a conv weight
    broken.module.register_buffer(name, buf + 1.0, persistent=False)
    batches = micro_batches(resnet18.example_inputs, 1)
    run = execute(program, batches, devices, pipeline_plan(program, 1))
    with pytest.raises(OutputMismatch, match="first diverging node") as err:
        check_execution(resnet18, program, batches, run, devices)
    where = err.value.divergence
    assert where.part == broken.name
    assert where.graph_node in broken.nodes
    assert first_divergence(resnet18, program, batches[0], devices) == where


def test_a_failing_part_names_part_and_device(block):
    program = stage_program(block, _stages(block, 2), 2)
    prepare(program, ["cpu", "cpu"])
    bad = [(torch.randn(2, 8, 31),)]  # wrong feature size: the first linear fails
    with pytest.raises(ExecutionError, match=r"part submod_0 .* on cpu, micro-batch 0"):
        execute(program, bad, ["cpu", "cpu"], pipeline_plan(program, 1))


def test_plan_must_cover_every_task_once(block):
    program = stage_program(block, _stages(block, 2), 2)
    plan = pipeline_plan(program, 2)
    plan[1] = plan[1][:-1]
    with pytest.raises(ExecutionError, match="unrun"):
        execute(program, micro_batches(block.example_inputs, 2), ["cpu", "cpu"], plan)


def test_micro_batches_are_valid_and_seeded():
    tokens = (torch.randint(0, 50, (2, 6)), torch.randn(2, 3))
    a, b = micro_batches(tokens, 4, seed=7), micro_batches(tokens, 4, seed=7)
    assert len(a) == 4 and a[0] is not None and a[0][0] is tokens[0]
    for x, y in zip(a, b):
        assert all(torch.equal(p, q) for p, q in zip(x, y))
    assert all(int(m[0].max()) <= int(tokens[0].max()) and m[0].dtype == torch.int64 for m in a)


def test_pipeline_prediction_formula(block):
    g = block.graph
    stages = np.array(_stages(block, 2))
    t = g.time("cpu")
    T = [t[stages == k].sum() for k in range(2)]
    p = predict_pipeline(g, stages, ["cpu", "cpu"], 5)
    assert p["latency_s"] == pytest.approx(sum(T))
    assert p["makespan_s"] == pytest.approx(sum(T) + 4 * max(T))
    assert p["throughput"] == pytest.approx(5 / p["makespan_s"])


def test_forwarded_values_pay_every_hop_between_devices():
    """a (stage 0) and b (stage 1) feed c (stage 2). Sent directly, a's output enters stage 2 only;
    forwarded (the pipelining runtime's chain), it also enters stage 1 on its way."""
    from incsched.graph import CompGraph

    g = CompGraph(["a", "b", "c"], ["a", "b"], ["c", "c"], out_bytes=[100, 10, 0], compute_time={"cpu": [0.0, 0.0, 0.0]})
    links = Links(latency=1.0, bandwidth=10.0)  # a transfer takes 1 s + bytes / 10
    devices = ["cpu", "cpu:1", "cpu:2"]  # three devices, so every hop is a transfer
    direct = predict_pipeline(g, [0, 1, 2], devices, 1, links)
    forwarded = predict_pipeline(g, [0, 1, 2], devices, 1, links, forwarded=True)
    assert direct["busy_s"] == pytest.approx([0.0, 0.0, 11.0 + 2.0])
    assert forwarded["busy_s"] == pytest.approx([0.0, 11.0, 11.0 + 2.0])
    same_device = predict_pipeline(g, [0, 1, 2], ["cpu"] * 3, 1, links, forwarded=True)
    assert same_device["busy_s"] == pytest.approx([0.0, 0.0, 0.0])  # no transfers between stages sharing a device


def test_validate_stages_reports_both_sides(block):
    v = validate_stages(block, _stages(block, 2), ["cpu", "cpu"], n_micro_batches=2, repeats=1)
    assert v.max_abs_diff <= 1e-5 and v.parts == 2
    for key in ("makespan_s", "latency_s", "throughput"):
        assert v.predicted[key] > 0 and v.measured[key] > 0
    assert len(v.measured["busy_s"]) == len(v.predicted["busy_s"]) == 2
    assert all(b > 0 for b in v.measured["peak_bytes"])
    assert set(v.relative_error()) >= {"makespan_s", "latency_s", "throughput"}
    json.dumps(v.to_json())
    assert "| makespan_s |" in v.table()


def test_validate_result_checks_the_graph(block, resnet18):
    r = solve(StageProblem(block.graph, 2), "contiguous_params")
    v = validate_result(block, r, repeats=1, n_micro_batches=2)
    assert v.kind == "stage" and v.devices == ["cpu", "cpu"]
    with pytest.raises(ExecutionError, match="assigns"):
        validate_result(resnet18, r)


def test_rank_placements(block):
    problem = device_problem(block.graph, ["cpu", "cpu"])
    results = {m: solve(problem, m) for m in ("heft", "round_robin", "single_device")}
    placements = {m: Placement(r.device, r.order) for m, r in results.items()}
    rows, rho = rank_placements(block, placements, ["cpu", "cpu"], repeats=1)
    assert [r["placement"] for r in rows] == list(placements)
    assert all(r["measured_s"] > 0 for r in rows)
    assert [r["predicted_s"] for r in rows] == pytest.approx([results[m].terms["makespan_s"] for m in placements])
    # rho is Spearman's correlation of exactly these two columns (nan only when one is constant)
    expected = _spearman([r["predicted_s"] for r in rows], [r["measured_s"] for r in rows])
    assert (math.isnan(rho) and math.isnan(expected)) or rho == pytest.approx(expected)
    two = dict(list(placements.items())[:2])
    assert math.isnan(rank_placements(block, two, ["cpu", "cpu"], repeats=1)[1])  # too few to rank


def _spearman(a, b) -> float:
    """Spearman's rho by hand: Pearson's correlation of average ranks; nan for a constant column."""

    def ranks(xs):
        order = sorted(range(len(xs)), key=lambda i: xs[i])
        out = [0.0] * len(xs)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    sa = sum((x - ma) ** 2 for x in ra)
    sb = sum((y - mb) ** 2 for y in rb)
    if sa == 0 or sb == 0:
        return math.nan
    return sum((x - ma) * (y - mb) for x, y in zip(ra, rb)) / math.sqrt(sa * sb)


def test_validate_placement_predicts_with_the_simulator(block):
    problem = device_problem(block.graph, ["cpu", "cpu"])
    r = solve(problem, "heft")
    v = validate_placement(block, Placement(r.device, r.order), ["cpu", "cpu"], repeats=1)
    assert v.predicted["makespan_s"] == pytest.approx(r.terms["makespan_s"])
    assert v.measured["makespan_s"] > 0


def _with_cpu_threads(cap, threads: int):
    """``cap`` whose graph says its CPU times were calibrated with ``threads`` intra-op threads."""
    meta = {**cap.graph.meta, "calibration": {"cpu": {"threads": threads, "device": "cpu"}}}
    return dataclasses.replace(cap, graph=cap.graph.replace(meta=meta))


def test_validation_warns_when_cpu_times_were_measured_with_other_threads(block):
    placement = Placement.from_assignment(np.arange(block.graph.n_nodes) % 2, 2)
    running = cpu_threads_per_worker(["cpu", "cpu"])
    assert cpu_time_threads(_with_cpu_threads(block, 97).graph) == 97
    v = validate_placement(_with_cpu_threads(block, 97), placement, ["cpu", "cpu"], repeats=1)
    assert len(v.notes) == 1 and "97 intra-op thread(s)" in v.notes[0] and f"ran with {running}" in v.notes[0]
    v = validate_placement(_with_cpu_threads(block, running), placement, ["cpu", "cpu"], repeats=1)
    assert v.notes == []
    v = validate_stages(_with_cpu_threads(block, 97), _stages(block, 2), ["cpu", "cpu"], n_micro_batches=1, repeats=1)
    assert any("97 intra-op" in n for n in v.notes)


@pytest.mark.parametrize("which", ["resnet18", "block"])
def test_multi_process_pipeline_matches_unsplit_model(which, request):
    cap = request.getfixturevalue(which)
    program = stage_program(cap, _stages(cap, 3), 3)
    devices = ["cpu"] * 3
    batches = micro_batches(cap.example_inputs, 3, seed=2)
    run = execute_distributed(program, batches, devices, pipeline_plan(program, 3))
    assert check_execution(cap, program, batches, run, devices) <= 1e-5
    assert {r.worker for r in run.records} == {p.worker for p in program.parts}
    done = {(r.part, r.micro_batch): r for r in run.records}
    for r in run.records:  # one clock across processes: a consumer starts after its producer ended
        for ref in program.parts[r.part].inputs:
            if ref.part is not None:
                assert r.start >= done[(ref.part, r.micro_batch)].end


def test_multi_process_placement_and_failure_report(block):
    problem = device_problem(block.graph, ["cpu", "cpu"], Links(bandwidth=1e9))
    r = solve(problem, "heft")
    v = validate_placement(block, Placement(r.device, r.order), ["cpu", "cpu"], repeats=1, runtime="processes")
    assert v.max_abs_diff <= 1e-5 and v.measured["makespan_s"] > 0
    program = stage_program(block, _stages(block, 2), 2)
    with pytest.raises(ExecutionError, match="part submod_0 .*dry run"):
        execute_distributed(program, [(torch.randn(2, 8, 31),)], ["cpu", "cpu"], pipeline_plan(program, 1))
    with pytest.raises(ExecutionError, match="rank 1: "):  # fails inside the second process only
        execute_distributed(program, micro_batches(block.example_inputs, 1), ["cpu", "cuda:63"], pipeline_plan(program, 1))


def test_split_without_tuple_return(block, monkeypatch):
    """Older torch (the GPU machine's 2.11) has no ``tuple_return``: single-output parts get wrapped."""
    import sys
    from torch.fx.passes.split_module import split_module

    def older(m, root_m, split_callback, qualname_map=None, keep_original_order=False, keep_original_node_name=False):
        return split_module(m, root_m, split_callback, keep_original_node_name=keep_original_node_name)

    monkeypatch.setattr(sys.modules["incsched.execute.partition"], "split_module", older)
    program = stage_program(block, _stages(block, 3), 3)
    devices = ["cpu"] * 3
    prepare(program, devices)
    batches = micro_batches(block.example_inputs, 2)
    run = execute(program, batches, devices, pipeline_plan(program, 2))
    assert check_execution(block, program, batches, run, devices) <= 1e-5


def test_cuda_event_timing_leaves_cpu_runs_as_they_are(block):
    # Without a GPU the events mode times CPU parts on the host clock, like the default; a bad
    # mode name is refused before anything runs.
    r = solve(device_problem(block.graph, ["cpu", "cpu"], Links(bandwidth=1e9)), "heft")
    placement = Placement(r.device, r.order)
    program, order = placement_program(block, placement)
    prepare(program, ["cpu", "cpu"])
    batches = micro_batches(block.example_inputs, 1, 0)
    ex = execute(program, batches, ["cpu", "cpu"], placement_plan(order), cuda_timing="events")
    assert len(ex.records) == len(program.parts) and ex.makespan > 0
    check_execution(block, program, batches, ex, ["cpu", "cpu"])
    with pytest.raises(ValueError, match="cuda_timing"):
        execute(program, batches, ["cpu", "cpu"], placement_plan(order), cuda_timing="stream")


@pytest.mark.parametrize("bad", ["nonsense", "meta"] + ([] if torch.cuda.is_available() else ["cuda:0"]))
def test_devices_that_are_not_here_are_named_before_anything_runs(bad):
    with pytest.raises(ExecutionError, match=bad.split(":")[0]):
        check_devices(["cpu", bad])
    assert check_devices(["cpu", "cpu"]) == [torch.device("cpu"), torch.device("cpu")]


def test_default_devices_count_trailing_empty_stages():
    from types import SimpleNamespace

    from incsched.execute.validate import default_devices

    # K = 4 with the last stage empty: four workers, not max(stage) + 1 = 3.
    r = SimpleNamespace(problem="stage", stages=[0, 1, 2, 2], terms={"stage_mem": [5, 5, 5, 0]}, order=None)
    assert default_devices(r) == ["cpu"] * 4
    assert default_devices(SimpleNamespace(problem="stage", stages=[0, 2], terms={}, order=None)) == ["cpu"] * 3
    assert default_devices(SimpleNamespace(problem="placement", stages=None, terms={}, order=[[0], [1]])) == ["cpu"] * 2
