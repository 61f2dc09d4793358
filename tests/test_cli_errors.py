"""Every bad input to the command line is one line on stderr naming the problem, exit status 1,
never a traceback; outputs that cannot be written do not lose a result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from incsched import CompGraph, save_graph
from incsched.cli import _parser, main
from incsched.formats.gml import write_gml
from incsched.result import Result

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def graph_file(tmp_path):
    g = CompGraph(["x", "conv", "relu", "fc"], ["x", "conv", "relu"], ["conv", "relu", "fc"],
                  flops=[0, 2e9, 1e6, 4e6], param_bytes=[0, 4096, 0, 8192], out_bytes=[600, 800, 800, 40], name="tiny")
    path = tmp_path / "tiny.json"
    save_graph(g, path)
    return path


def fails(argv, capsys, *needles):
    """Run the CLI, expect exit status 1 and one stderr line holding every needle."""
    rc = main([str(a) for a in argv])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert rc == 1, (rc, captured.out, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("incsched"), err
    for needle in needles:
        assert needle in err, (needle, err)
    return captured


# ---------------------------------------------------------------------- files


def test_unreadable_inputs(tmp_path, capsys):
    (tmp_path / "folder.json").mkdir()
    fails(["graph", "info", tmp_path / "folder.json"], capsys, "folder.json: Is a directory")
    fails(["graph", "info", tmp_path / "missing.json"], capsys, "missing.json: No such file or directory")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 50_000 + "]" * 50_000)
    fails(["graph", "info", deep], capsys, "nested 50000 levels deep", "INCSCHED_MAX_JSON_DEPTH")
    big = tmp_path / "big.json"
    big.write_text('{"format": "incsched.graph", "version": 1, "x": ' + "1" * 5000 + "}")
    fails(["graph", "info", big], capsys, "big.json: a number in the file is too long")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads any file")
def test_file_without_read_permission(graph_file, capsys):
    graph_file.chmod(0)
    fails(["graph", "info", graph_file], capsys, "Permission denied")


def test_limits_from_the_environment(graph_file, capsys, monkeypatch):
    monkeypatch.setenv("INCSCHED_MAX_NODES", "3")
    fails(["graph", "info", graph_file], capsys, "4 nodes, more than the limit of 3", "INCSCHED_MAX_NODES")
    monkeypatch.setenv("INCSCHED_MAX_NODES", "many")
    fails(["graph", "info", graph_file], capsys, "INCSCHED_MAX_NODES='many' is not a whole number")


@pytest.mark.parametrize("fmt", ["json", "gml", "csv"])
def test_zero_node_graph_is_a_trivial_problem_everywhere(tmp_path, capsys, fmt):
    """A graph with no nodes is consistently accepted: nothing to place, objective 0."""
    empty = CompGraph([], [], [], name="empty")
    if fmt == "csv":
        path, extra = tmp_path / "empty.csv", ["--edges", str(tmp_path / "e.csv")]
        from incsched.formats.csv_tables import write_csv_tables

        write_csv_tables(empty, path, tmp_path / "e.csv")
    else:
        path, extra = tmp_path / f"empty.{fmt}", []
        (save_graph if fmt == "json" else write_gml)(empty, path)
    assert main(["graph", "info", str(path), *extra]) == 0
    assert "nodes             0" in capsys.readouterr().out
    if fmt == "csv":
        return  # solve reads graph files, not CSV tables
    for what in (["--stages", "3"], ["--devices", "2"]):
        out = tmp_path / "r.json"
        assert main(["solve", str(path), *what, "--json", str(out)]) == 0
        r = Result.load(out)
        assert r.status == "optimal" and r.objective == 0 and (r.stages == [] or r.device == [])
    capsys.readouterr()


def test_list_label_in_gml(tmp_path, capsys):
    path = tmp_path / "bad.gml"
    path.write_text("graph [ directed 1 node [ id 0 label [ a 1 ] ] ]")
    fails(["solve", path, "--stages", "2"], capsys, "bad.gml, line 1: node 0: 'label' must be a string or a number, got a list")


# ---------------------------------------------------------------------- option values


@pytest.mark.parametrize(
    "option, value, needle",
    [
        ("--time-limit", "nan", "argument --time-limit: 'nan' must be finite and > 0"),
        ("--time-limit", "inf", "argument --time-limit: 'inf' must be finite"),
        ("--time-limit", "0", "argument --time-limit: '0' must be finite and > 0"),
        ("--time-limit", "-1", "argument --time-limit: '-1'"),
        ("--seed", "1e20", "argument --seed: '1e20' is not a whole number"),
        ("--seed", str(10**20), "argument --seed: '100000000000000000000' is out of range (must be between 0 and 2147483647)"),
        ("--seed", "-1", "argument --seed: '-1' is out of range"),
        ("--workers", "0", "argument --workers: '0' is out of range"),
        ("--capacity", "-5", "argument --capacity: '-5' is out of range (must be at least 0)"),
        ("--capacity", "1.5e9", "argument --capacity: '1.5e9' is not a whole number"),
        ("--alpha", "nan", "argument --alpha: 'nan' must be finite and >= 0"),
        ("--alpha", "-1", "argument --alpha"),
        ("--stages", "0", "argument --stages: '0' is out of range (must be at least 1)"),
        ("--weights", "foo=1", "--weights: unknown term 'foo' (terms: mem_peak, comm_total, comm_peak, compute_peak, spill, stage_time_peak)"),
        ("--weights", "mem_peak", "--weights: expected TERM=VALUE, got 'mem_peak'"),
        ("--weights", "mem_peak=lots", "--weights: 'lots' is not a number (for 'mem_peak')"),
        ("--weights", "mem_peak=nan", "--weights: mem_peak=nan must be finite and non-negative"),
        ("--weights", "mem_peak=-1", "--weights: mem_peak=-1 must be finite and non-negative"),
        ("--weights", "mem_peak=1,mem_peak=2", "--weights: term 'mem_peak' given twice"),
        ("--weights", "spill=1", "--weights: the spill term needs --spill-capacity BYTES"),
    ],
)
def test_bad_stage_options(graph_file, capsys, option, value, needle):
    argv = ["solve", graph_file, option, value] if option == "--stages" else ["solve", graph_file, "--stages", "2", option, value]
    fails(argv, capsys, needle)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--devices", "0"], "argument --devices: '0' is out of range"),
        (["--devices", "2", "--bandwidth", "0"], "argument --bandwidth: '0' must be finite and > 0"),
        (["--devices", "2", "--bandwidth", "nan"], "argument --bandwidth"),
        (["--devices", "2", "--latency", "-1"], "argument --latency: '-1' must be finite and >= 0"),
        (["--devices", "2", "--latency", "inf"], "argument --latency"),
        (["--devices", "2", "--spill-capacity", "100"], "--spill-capacity belongs to stage problems"),
        (["--stages", "2", "--method", "nope"], "unknown method 'nope'"),
    ],
)
def test_bad_placement_options(graph_file, capsys, argv, needle):
    fails(["solve", graph_file, *argv], capsys, needle)


def test_batch_jobs_must_be_positive(graph_file, tmp_path, capsys):
    fails(["batch", graph_file.parent, "-o", tmp_path / "out", "--stages", "2", "--jobs", "0"], capsys, "argument --jobs")


def test_usage_errors_are_one_line(capsys):
    fails(["bogus"], capsys, "invalid choice: 'bogus'", "see incsched --help")
    fails(["solve", "g.json"], capsys, "one of the arguments --stages --devices --links is required")


def test_capacity_is_parsed_as_an_exact_int():
    args = _parser().parse_args(["solve", "g.json", "--stages", "2", "--capacity", "9223372036854775807", "--spill-capacity", str(2**70)])
    assert args.capacity == 2**63 - 1 and type(args.capacity) is int and args.spill_capacity == 2**70


def test_huge_capacity_is_not_refused_as_not_whole(graph_file, capsys):
    assert main(["solve", str(graph_file), "--stages", "2", "--capacity", "9223372036854775807"]) == 0
    assert "status       optimal" in capsys.readouterr().out


def test_spill_term_from_the_cli(graph_file, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["solve", str(graph_file), "--stages", "2", "--weights", "mem_peak=1,spill=10", "--spill-capacity", "10000", "--json", str(out)]
    assert main(argv) == 0
    assert Result.load(out).terms["spill"] == 0  # 4096 and 8192 bytes fit two stages of 10,000
    argv[argv.index("10000")] = "1000"
    assert main(argv) == 0
    assert Result.load(out).terms["spill"] > 0
    capsys.readouterr()


# ---------------------------------------------------------------------- links files and device lists


@pytest.mark.parametrize(
    "content, needle",
    [
        ('{"latency": 0}', "not a links file written by incsched profile --links"),
        ('{"placement_devices": 5, "links": {}}', "'placement_devices' must be a non-empty list of device objects"),
        ('{"placement_devices": [], "links": {}}', "'placement_devices' must be a non-empty list"),
        ('{"placement_devices": [{"name": "a"}], "links": []}', "'links' must be an object"),
        ('{"placement_devices": [{"name": "a", "colour": 1}], "links": {}}', "device 0 has unknown field(s) ['colour']"),
        ('{"placement_devices": [{"name": ""}], "links": {}}', "device name must be a non-empty string"),
        ('{"placement_devices": [{"name": "a", "speed": -1}], "links": {}}', "speed must be finite and positive"),
        ('{"placement_devices": [{"name": "a"}, {"name": "b"}], "links": {"bandwidth": [1, 2]}}', "links 'bandwidth' must be a 2 x 2 matrix"),
        ('{"placement_devices": [{"name": "a"}, {"name": "b"}], "links": {"bandwidth": [[null, "x"], [1, null]]}}', "must hold numbers"),
        ('{"placement_devices": [{"name": "a"}], "links": {"latency": -3}}', "latency must be non-negative"),
        ('[1, 2', "malformed JSON"),
    ],
)
def test_malformed_links_files(graph_file, tmp_path, capsys, content, needle):
    links = tmp_path / "links.json"
    links.write_text(content)
    fails(["solve", graph_file, "--links", links], capsys, "links.json", needle)


@pytest.mark.parametrize("devices, needle", [("", "names no device"), ("cpu,,cpu", "entry 2 is empty"), (",", "names no device"),
                                             ("cpu:x", "is not a torch device"), ("tpu", "is not a torch device"), ("meta", "only cpu and cuda")])
def test_malformed_device_lists(tmp_path, capsys, devices, needle):
    fails(["profile", "--model", "resnet18", "--devices", devices, "-o", tmp_path / "g.json"], capsys, needle)
    assert not (tmp_path / "g.json").exists()


# ---------------------------------------------------------------------- outputs


def test_json_to_stdout(graph_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["solve", str(graph_file), "--stages", "2", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["status"] == "optimal"  # stdout is the JSON alone
    assert "status       optimal" in err
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("target", ["folder", "missing_parent_under_a_file"])
def test_unwritable_json_still_prints_the_result(graph_file, tmp_path, capsys, target):
    if target == "folder":
        path = tmp_path / "out.json"
        path.mkdir()
    else:
        (tmp_path / "file").write_text("x")
        path = tmp_path / "file" / "out.json"
    captured = fails(["solve", graph_file, "--stages", "2", "--json", path], capsys, "the result above was not written", str(path.parent))
    assert "status       optimal" in captured.out and "objective" in captured.out


def test_convert_to_a_folder(graph_file, tmp_path, capsys):
    (tmp_path / "out.json").mkdir()
    fails(["graph", "convert", graph_file, tmp_path / "out.json"], capsys, "out.json: is a folder, not a file")


@pytest.mark.slow
def test_closed_stdout_exits_quietly(graph_file):
    proc = subprocess.Popen([sys.executable, "-m", "incsched.cli", "graph", "info", str(graph_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    proc.stdout.close()  # the reader is gone before anything is written, like `| head -0`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert err == "", err


def test_verbose_shows_the_traceback(tmp_path, capsys):
    (tmp_path / "d.json").mkdir()
    assert main(["-v", "graph", "info", str(tmp_path / "d.json")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1] == f"incsched: error: {tmp_path / 'd.json'}: Is a directory"


# ---------------------------------------------------------------------- validate --result


@pytest.fixture
def stage_result(graph_file, tmp_path, capsys):
    path = tmp_path / "r.json"
    assert main(["solve", str(graph_file), "--stages", "2", "--json", str(path)]) == 0
    capsys.readouterr()
    return path


@pytest.mark.parametrize(
    "stages, needle",
    [
        (["0", 0, 0, 1], "stages of node 'x' is '0'; stages are whole numbers"),
        ([0, 1.0, 1, 1], "stages of node 'conv' is 1.0; stages are whole numbers"),
        ([0, 0, [1], 1], "stages of node 'relu' is [1]"),
        ([0, 0, 1, True], "stages of node 'fc' is True; stages are whole numbers"),
        ([0, 0, 1, 99], "stages of node 'fc' is 99, out of range (stages 0 .. 1)"),
        ([0, -1, 1, 1], "stages of node 'conv' is -1, out of range"),
        ("0011", "'stages' must be a list, got str"),
    ],
)
def test_validate_refuses_malformed_stage_results(stage_result, graph_file, capsys, stages, needle):
    data = json.loads(stage_result.read_text())
    data["stages"] = stages
    stage_result.write_text(json.dumps(data))
    fails(["validate", "--model", "resnet18", "--result", stage_result, "--graph", graph_file], capsys, "r.json", needle)


def test_validate_names_nodes_by_index_without_a_graph(stage_result, capsys):
    data = json.loads(stage_result.read_text())
    data["stages"][2] = 7
    stage_result.write_text(json.dumps(data))
    fails(["validate", "--model", "resnet18", "--result", stage_result, "--devices", "cpu,cpu"], capsys, "stages of node 2 is 7, out of range")
