"""The command line is a thin caller: each command runs end to end on real files."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from incsched import CompGraph, load_graph, save_graph
from incsched.cli import _byte_sizes, _parser, main
from incsched.errors import IncschedError
from incsched.execute import LinkMeasurement, calibrated_devices, cpu_threads_per_worker
from incsched.jsonio import read_json
from incsched.problems.placement import PlacementProblem

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def small_graph_file(tmp_path):
    g = CompGraph(
        ["x", "conv", "relu", "fc"],
        ["x", "conv", "relu"],
        ["conv", "relu", "fc"],
        op=["input", "conv2d", "relu", "linear"],
        flops=[0, 2e9, 1e6, 4e6],
        param_bytes=[0, 4096, 0, 8192],
        out_bytes=[600, 800, 800, 40],
        name="tiny",
    )
    path = tmp_path / "tiny.json.gz"
    save_graph(g, path)
    return g, path


def test_info_prints_summary(small_graph_file, capsys):
    _, path = small_graph_file
    assert main(["graph", "info", str(path)]) == 0
    out = capsys.readouterr().out
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in out.strip().splitlines())
    assert rows["graph"] == "tiny" and rows["nodes"] == "4" and rows["edges"] == "3"
    assert rows["depth (levels)"] == "4" and rows["total flops"] == "2.005 GFLOP" and rows["total parameters"] == "12.00 KiB"


def test_info_json_matches_library_summary(small_graph_file, capsys):
    g, path = small_graph_file
    assert main(["graph", "info", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: out[k] for k in g.summary()} == g.summary()
    assert out["costs"] == {"bytes": g.byte_source(), "times": {"cpu": g.time_source("cpu")}}


def test_info_reports_malformed_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "incsched.graph", ')
    assert main(["graph", "info", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.json" in err and "malformed JSON" in err


def test_info_reports_cycle(tmp_path, capsys):
    path = tmp_path / "cyc.json"
    path.write_text(
        json.dumps(
            {
                "format": "incsched.graph",
                "version": 1,
                "name": "cyc",
                "nodes": {"name": ["a", "b"]},
                "edges": {"src": ["a", "b"], "dst": ["b", "a"]},
            }
        )
    )
    assert main(["graph", "info", str(path)]) == 1
    assert "cycle" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".json", ".gml"])
def test_convert_round_trip(small_graph_file, tmp_path, suffix):
    g, path = small_graph_file
    out = tmp_path / f"out{suffix}"
    assert main(["graph", "convert", str(path), str(out)]) == 0
    back = load_graph(out)
    assert back.names == g.names
    assert (back.param_bytes == g.param_bytes).all()
    assert (back.edge_bytes == g.edge_bytes).all()


def test_convert_csv_round_trip(small_graph_file, tmp_path):
    g, path = small_graph_file
    nodes, edges = tmp_path / "n.csv", tmp_path / "e.csv"
    assert main(["graph", "convert", str(path), str(nodes), "--out-edges", str(edges)]) == 0
    back_path = tmp_path / "back.json"
    assert main(["graph", "convert", str(nodes), str(back_path), "--edges", str(edges)]) == 0
    back = load_graph(back_path)
    assert back.names == g.names and back.op == g.op
    assert (back.flops == g.flops).all() and (back.out_bytes == g.out_bytes).all()


def test_shipped_graph_info(capsys):
    shipped = sorted((REPO / "data" / "graphs").glob("*.json.gz"))
    if not shipped:
        pytest.skip("no shipped graphs")
    assert main(["graph", "info", str(shipped[0])]) == 0
    assert "total parameters" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["threads", "pipelining"])
def test_validate_executes_a_solved_result(tmp_path, capsys, runtime):
    graph = REPO / "data" / "graphs" / "resnet18.json.gz"
    result = tmp_path / "r.json"
    assert main(["solve", str(graph), "--stages", "2", "--method", "contiguous_params", "--json", str(result)]) == 0
    out_json = tmp_path / "v.json"
    argv = ["validate", "--model", "resnet18", "--result", str(result), "--graph", str(graph), "--repeats", "1", "--micro-batches", "2",
            "--json", str(out_json), "--runtime", runtime]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "outputs match the unsplit model" in out and "| makespan_s |" in out
    assert ("torch.distributed.pipelining" in out) == (runtime == "pipelining")
    assert f"predicted with times (cpu) {load_graph(graph).time_source('cpu')}\n" in out  # the shipped graph's measurement
    data = json.loads(out_json.read_text())
    assert data["kind"] == "stage" and data["predicted"]["makespan_s"] > 0 and data["measured"]["makespan_s"] > 0
    # the predictions use the shipped graph's measured times
    assert data["predicted"]["latency_s"] == pytest.approx(float(load_graph(graph).time("cpu").sum()))


@pytest.mark.slow
def test_validate_rejects_a_result_for_another_model(tmp_path, capsys):
    result = tmp_path / "r.json"
    assert main(["solve", str(REPO / "data/graphs/resnet18.json.gz"), "--stages", "2", "--method", "asap", "--json", str(result)]) == 0
    vgg = str(REPO / "data/graphs/vgg16.json.gz")
    assert main(["validate", "--model", "vgg16", "--result", str(result), "--graph", vgg, "--repeats", "1"]) == 1
    assert "solved for another graph than 'vgg16'" in capsys.readouterr().err


@pytest.mark.slow
def test_validate_executes_a_layer_level_result(tmp_path, capsys):
    graph, result = tmp_path / "g.json", tmp_path / "r.json"
    common = ["--model", "resnet18", "--image-size", "64"]
    assert main(["graph", "capture", *common, "--granularity", "layer", "-o", str(graph)]) == 0
    assert main(["solve", str(graph), "--stages", "2", "--time-limit", "10", "-q", "--json", str(result)]) == 0
    run = ["validate", *common, "--result", str(result), "--repeats", "1", "--micro-batches", "2"]
    assert main([*run, "--graph", str(graph)]) == 0  # the granularity read off the graph file
    assert "outputs match the unsplit model" in capsys.readouterr().out
    assert main(run) == 1  # no graph file: op level unless told
    assert "14 nodes, but resnet18 captured at granularity op has" in capsys.readouterr().err
    assert main([*run, "--granularity", "layer"]) == 0
    assert "outputs match the unsplit model" in capsys.readouterr().out


@pytest.mark.slow
def test_profile_solve_validate_loop(tmp_path, capsys):
    """Calibrate on two CPU workers, solve the placement on the measured devices, execute it."""
    graph, links, result = tmp_path / "g.json.gz", tmp_path / "links.json", tmp_path / "r.json"
    common = ["--model", "resnet18", "--image-size", "64"]
    assert main(["profile", *common, "--devices", "cpu,cpu", "--repeats", "2", "--warmup", "1", "-o", str(graph), "--links", str(links), "--link-sizes", "4K,1M"]) == 0
    assert main(["solve", str(graph), "--links", str(links), "--method", "heft", "--json", str(result)]) == 0
    assert json.loads(result.read_text())["problem"] == "placement"
    assert main(["validate", *common, "--result", str(result), "--graph", str(graph), "--devices", "cpu,cpu", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "placement result (heft" in out and "outputs match the unsplit model" in out
    assert "measured with" not in out  # profiled with the threads each of the two workers then got


def test_solve_rejects_a_file_that_is_not_a_links_file(small_graph_file, tmp_path, capsys):
    _, path = small_graph_file
    bogus = tmp_path / "links.json"
    bogus.write_text('{"latency": 0}')
    assert main(["solve", str(path), "--links", str(bogus)]) == 1
    assert "not a links file" in capsys.readouterr().err


def test_the_readme_links_file_parses_and_solves(small_graph_file, tmp_path, capsys):
    """The README's links example is data/links/example.json (in the wheel: tests/test_packaging.py), and it solves."""
    from incsched.result import Result

    shipped = REPO / "data" / "links" / "example.json"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("[data/links/example.json](data/links/example.json)", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    assert json.loads(block) == read_json(shipped)
    _, path = small_graph_file
    result = tmp_path / "solved" / "r.json"
    result.parent.mkdir()
    assert main(["solve", str(path), "--links", str(shipped), "--time-limit", "5", "--json", str(result), "-q"]) == 0
    solved = Result.load(result)
    assert solved.problem == "placement" and solved.status == "optimal" and len(solved.order) == 3
    assert main(["batch", str(path.parent), "-o", str(tmp_path / "out"), "--links", str(shipped), "--time-limit", "5", "-q"]) == 0
    assert "1 solved" in capsys.readouterr().out


@pytest.mark.slow
def test_solve_starts_inc_ilp_from_the_named_prescheduler(tmp_path, capsys):
    graph = REPO / "data/graphs/resnet18.json.gz"
    result = tmp_path / "r.json"
    assert main(["solve", str(graph), "--stages", "4", "--preschedule", "rl", "--time-limit", "10", "--json", str(result)]) == 0
    saved = json.loads(result.read_text())
    incumbent = [w for w in saved["provenance"]["steps"] if w["phase"] == "incumbent"]
    assert saved["method"] == "inc-ilp" and incumbent[0]["prescheduler"] == "rl"


@pytest.mark.parametrize("flag", ["--method", "--preschedule"])
def test_solve_names_an_unknown_method_or_prescheduler(flag, capsys):
    assert main(["solve", str(REPO / "data/graphs/vgg16.json.gz"), "--stages", "2", flag, "nope"]) == 1
    err = capsys.readouterr().err
    assert "unknown" in err and "'nope'" in err and "contiguous_params" in err


# ---------------------------------------------------------------------- incsched profile


def _profile_args(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(["profile", *argv])


def test_byte_sizes():
    assert _byte_sizes("4K,64KiB,1M,2G,512") == [4096, 65536, 1 << 20, 2 << 30, 512]
    with pytest.raises(IncschedError, match="byte count"):
        _byte_sizes("lots")
    with pytest.raises(IncschedError, match="positive"):
        _byte_sizes("0K")


@pytest.mark.slow
def test_profile_command_writes_a_measured_graph_and_links(tmp_path, capsys):
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("needs torchvision")
    graph_file, links_file = tmp_path / "resnet18.json.gz", tmp_path / "links.json"
    args = _profile_args(
        "--model", "resnet18", "--image-size", "32", "--devices", "cpu,cpu", "--repeats", "2", "--warmup", "1",
        "-o", str(graph_file), "--links", str(links_file), "--link-sizes", "4K,64K",
    )
    assert args.run(args) == 0

    graph = load_graph(graph_file)
    assert set(graph.compute_time) == {"cpu"}
    assert np.all(graph.time("cpu") >= 0) and graph.time("cpu").sum() > 0
    assert graph.meta["calibration"]["cpu"]["device"] == "cpu"
    # two CPU workers will share the cores: their times are measured with each one's share
    assert graph.meta["calibration"]["cpu"]["threads"] == cpu_threads_per_worker(["cpu", "cpu"])
    assert graph.meta["model"] == "resnet18"

    data = read_json(links_file)
    m = LinkMeasurement.from_dict(data)
    assert m.devices == ("cpu", "cpu") and m.sizes == (4096, 65536)
    assert [d["name"] for d in data["placement_devices"]] == ["cpu", "cpu#1"]
    PlacementProblem(graph, calibrated_devices(m.devices), m.to_links())  # the solver accepts both

    out = capsys.readouterr().out
    assert "wall" in out and "us/op" in out and "GB/s" in out and "thread(s)" in out and str(graph_file) in out


def test_profile_command_rejects_a_bad_thread_count(tmp_path):
    args = _profile_args("--model", "resnet18", "--threads", "0", "-o", str(tmp_path / "g.json"))
    with pytest.raises(IncschedError, match="--threads"):
        args.run(args)


def test_profile_command_fails_fast_on_a_bad_output_name(tmp_path):
    args = _profile_args("--model", "resnet18", "-o", str(tmp_path / "g.gml"))
    with pytest.raises(IncschedError, match=".json.gz"):
        args.run(args)


def test_profile_command_fails_fast_on_an_unavailable_device(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    args = _profile_args("--model", "resnet18", "--devices", "cpu,cuda:0", "-o", str(tmp_path / "g.json"))
    with pytest.raises(IncschedError, match="CUDA is not available"):
        args.run(args)
    assert not (tmp_path / "g.json").exists()
