"""Every cost says where it came from: measured (where, how) or estimated (by which roofline)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from incsched import CompGraph, load_graph, save_graph
from incsched.capture import capture
from incsched.cli import _parser, format_result, main
from incsched.errors import GraphError
from incsched.generators import respect_like
from incsched.generators.dataflow import ffnn
from incsched.graph.cost_model import ROOFLINES, short_label
from incsched.problems import PlacementProblem, StageProblem
from incsched.result import Result

CPU, H100 = ROOFLINES["cpu"], ROOFLINES["h100"]


def _mlp_capture(**kwargs):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    return capture(model, (torch.randn(2, 8),), name="mlp", **kwargs).graph


def test_measured_capture_is_labelled_with_its_device_and_conditions():
    g = _mlp_capture(measure=True, repeats=3, warmup=1)
    label = g.time_source("cpu")
    assert label.startswith("measured on cpu (each node timed alone, median of 3 after 1 warm-up, ")
    assert f"{torch.get_num_threads()} threads" in label and short_label(label) == "measured on cpu"
    assert g.byte_source() == "from tensor shapes (torch capture)"
    # a kind it was not measured on is estimated, whatever was measured
    assert g.time_source("h100") == "estimated by the h100 roofline (989 TFLOP/s bf16 tensor, 3.35 TB/s, 5 us per op)"


def test_unmeasured_capture_is_estimated_by_the_named_roofline():
    g = _mlp_capture()
    assert not g.compute_time
    assert g.time_source() == g.time_source("cpu") == "estimated by the cpu roofline (50 GFLOP/s fp32, 10 GB/s, 5 us per op)"
    assert short_label(g.time_source("a100")) == "estimated"
    assert g.byte_source() == "from tensor shapes (torch capture)"


@pytest.mark.parametrize("kind", ["v100", "a100", "h100", "h200", "l4", "mi300x"])
def test_accelerator_presets_are_named_with_their_precision(kind):
    r = ROOFLINES[kind]
    assert r.peak_flops > 1e13 and r.mem_bandwidth > 1e11 and r.precision
    assert CompGraph(["a"], [], []).time_source(kind) == f"estimated by the {kind} roofline ({r.describe()})"


def test_presets_from_the_spec_sheets():
    assert (ROOFLINES["a100"].peak_flops, ROOFLINES["a100"].mem_bandwidth) == (312e12, 2.039e12)
    assert (H100.peak_flops, H100.mem_bandwidth) == (989e12, 3.35e12)
    assert (ROOFLINES["h200"].peak_flops, ROOFLINES["h200"].mem_bandwidth) == (989e12, 4.8e12)


def test_a_preset_scales_compute_and_memory_bound_estimates_by_its_ratios():
    compute = CompGraph(["a", "b"], ["a"], ["b"], flops=[1e12, 3e12])  # no bytes: compute-bound
    ratio = (compute.time("cpu") - CPU.launch_overhead) / (compute.time("h100") - H100.launch_overhead)
    np.testing.assert_allclose(ratio, H100.peak_flops / CPU.peak_flops, rtol=1e-12)
    memory = CompGraph(["a", "b"], ["a"], ["b"], out_bytes=[4e9, 0])  # no flops: bandwidth-bound
    ratio = (memory.time("cpu") - CPU.launch_overhead) / (memory.time("h100") - H100.launch_overhead)
    np.testing.assert_allclose(ratio, H100.mem_bandwidth / CPU.mem_bandwidth, rtol=1e-12)


def test_unknown_kind_is_one_line_naming_the_known_ones():
    g = CompGraph(["a", "b"], ["a"], ["b"], flops=[1e9, 1e9], compute_time={"gpu0": [1.0, 1.0]})
    known = "known kinds: a100, cpu, cuda, gpu0, h100, h200, l4, mi300x, v100"
    for make in (lambda: g.time("tpu"), lambda: g.time_source("tpu"),
                 lambda: StageProblem(g, 2, device_kind="tpu", time_unit=1e-3),  # a given tick reads no times
                 lambda: PlacementProblem.identical(g, 2, kind="tpu")):
        with pytest.raises(GraphError) as err:
            make()
        assert "\n" not in str(err.value) and "'tpu'" in str(err.value) and known in str(err.value)


def test_other_sources_synthetic_and_given():
    drawn = respect_like(12, seed=3)
    assert drawn.byte_source() == "synthetic (drawn at random)" and short_label(drawn.time_source()) == "estimated"
    tiled = ffnn(n_layers=2, batch=8, hidden=16, tiles=2, kinds=("cpu",), jitter=0.1)
    assert tiled.time_source("cpu") == "synthetic (cpu roofline x lognormal(0, 0.1))"
    assert tiled.byte_source() == "synthetic (tile shapes of the dataflow generator)"
    given = CompGraph(["a"], [], [], compute_time={"cpu": [1e-3]})
    assert given.time_source("cpu") == "given in the graph file" and given.byte_source() == "given in the graph file"


def test_shipped_graphs_captured_before_the_record_keep_their_measurement():
    g = load_graph("resnet18")
    assert g.time_source("cpu").startswith("measured on cpu (each node timed alone, median of 5 after 2 warm-up, 2 threads")
    assert g.byte_source() == "from tensor shapes (torch capture)"


def test_profiled_times_replace_the_label_of_their_column():
    from incsched.execute.calibrate import NodeTimes, with_measured_times

    g = _mlp_capture(measure=True, repeats=2, warmup=0)
    times = NodeTimes(g.names, kernel=np.full(g.n_nodes, 1e-4), launch=np.full(g.n_nodes, 1e-5), ops=np.ones(g.n_nodes, dtype=np.int64),
                      launch_per_op=1e-5, wall_seconds=1e-3, device="cpu", regime="kernel-bound", repeats=7, warmup=3,
                      conditions={"threads": 1, "load_average": 0.5})
    label = with_measured_times(g, times).time_source("cpu")
    assert label == "measured on cpu (torch.profiler kernels + launch per op, kernel-bound, median of 7 after 3 warm-up, 1 threads, load 0.5)"


def test_onnx_bytes_come_from_shape_inference(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[w])
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    g = load_graph(str(path))
    assert g.byte_source() == "from tensor shapes (ONNX shape inference)"
    assert short_label(g.time_source("h200")) == "estimated"


def test_graph_and_result_json_keep_the_labels(tmp_path, capsys):
    g = _mlp_capture(measure=True, repeats=2, warmup=0)
    path = tmp_path / "mlp.json.gz"
    save_graph(g, path)
    back = load_graph(str(path))
    assert back.time_source("cpu") == g.time_source("cpu") and back.byte_source() == g.byte_source()

    out = tmp_path / "r.json"
    assert main(["solve", str(path), "--stages", "2", "--time-limit", "20", "-q", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    r = Result.load(out)
    assert r.provenance["costs"] == {"times": {"cpu": g.time_source("cpu")}, "bytes": g.byte_source(),
                                     "objective_counts_times": False}  # the peer objective counts no time
    assert Result.from_json(json.loads(json.dumps(r.to_json()))).provenance["costs"] == r.provenance["costs"]
    assert re.search(r"^stage time .* ms  \(measured on cpu\)$", printed, re.M)
    assert f"times (cpu)  {g.time_source('cpu')}\n" in printed
    assert format_result(r).splitlines()[:-1] == printed.splitlines()[:len(format_result(r).splitlines()) - 1]  # timing aside


def test_solve_device_kind_prints_estimated_and_scales_times(tmp_path, capsys):
    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], flops=[2e9, 4e9, 1e9], param_bytes=[8, 8, 8], name="flops")
    path = tmp_path / "g.json"
    save_graph(g, path)
    totals = {}
    for kind in ("cpu", "h100"):
        out = tmp_path / f"{kind}.json"
        argv = ["solve", str(path), "--stages", "2", "--objective", "throughput", "--device-kind", kind,
                "--time-limit", "20", "-q", "--json", str(out)]
        assert main(argv) == 0
        printed = capsys.readouterr().out
        for row in ("objective", "stage time", "time + sends", "throughput"):
            assert re.search(rf"^{re.escape(row)} .*  \(estimated\)$", printed, re.M), (row, printed)
        assert re.search(rf"^times \({kind}\) +estimated by the {kind} roofline \(", printed, re.M)
        totals[kind] = sum(Result.load(out).terms["stage_compute_s"])
    overhead = g.n_nodes * np.array([CPU.launch_overhead, H100.launch_overhead])
    np.testing.assert_allclose((totals["cpu"] - overhead[0]) / (totals["h100"] - overhead[1]), H100.peak_flops / CPU.peak_flops, rtol=1e-9)


def test_cli_unknown_kind_is_one_line_and_kind_stays_an_alias(tmp_path, capsys):
    path = tmp_path / "g.json"
    save_graph(CompGraph(["a", "b"], ["a"], ["b"], flops=[1e9, 1e9]), path)
    assert main(["solve", str(path), "--stages", "2", "--device-kind", "tpu", "-q"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'tpu'" in err and "known kinds: a100, cpu, cuda, h100, h200" in err
    assert _parser().parse_args(["solve", "g", "--stages", "2", "--kind", "h200"]).kind == "h200"


def test_graph_info_says_where_times_and_bytes_come_from(tmp_path, capsys):
    g = _mlp_capture(measure=True, repeats=2, warmup=0)
    path = tmp_path / "mlp.json"
    save_graph(g, path)
    assert main(["graph", "info", str(path), "--device-kind", "a100"]) == 0
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in capsys.readouterr().out.strip().splitlines())
    assert rows["time (cpu)"].endswith(f"ms (sum over nodes), {g.time_source('cpu')}")
    assert rows["time (a100)"].endswith(f"ms (sum over nodes), {g.time_source('a100')}")
    assert rows["bytes"] == "from tensor shapes (torch capture)"
    assert main(["graph", "info", str(path), "--json", "--device-kind", "a100"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["costs"]["times"] == {"cpu": g.time_source("cpu"), "a100": g.time_source("a100")}
    assert data["estimated_time_s"]["a100"] == pytest.approx(float(g.time("a100").sum()))


def test_a_cuda_measurement_names_the_gpu_and_its_synchronisation(monkeypatch):
    from incsched.capture import _cost_record
    from incsched.graph.cost_model import time_label

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    record = _cost_record("cuda", {"device": "cuda:0", "repeats": 5, "warmup": 2, "threads": 16, "load_average": 0.1})
    assert time_label({"costs": record}, "cuda", ["cuda"]) == (
        "measured on cuda:0 (NVIDIA H200, each node timed alone, synchronised, median of 5 after 2 warm-up, 16 threads, load 0.1)")
