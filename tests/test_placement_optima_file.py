"""The shipped offline optima (benchmarks/optima/placement.json) hold what they claim.

Every recorded schedule re-runs in the simulator to its recorded makespan, every bound is at most
that makespan, and every recipe rebuilds the problem it was recorded for (same content hash).
"""

import importlib.util
import json
from pathlib import Path

import pytest

from incsched.evaluate.simulate import simulate
from incsched.jsonio import read_json
from incsched.problems import Placement

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "placement_gaps.py"
OPTIMA = ROOT / "benchmarks" / "optima" / "placement.json"


@pytest.fixture(scope="module")
def gaps():
    spec = importlib.util.spec_from_file_location("placement_gaps", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def optima():
    return read_json(OPTIMA)


def test_file_covers_the_benchmark(gaps, optima):
    assert optima["format"] == "incsched-placement-optima"
    assert optima["instances"], "the offline file has no instance"
    assert set(optima["instances"]) <= set(gaps.INSTANCES)


def test_every_entry_rebuilds_and_re_simulates(gaps, optima):
    for name, e in optima["instances"].items():
        p = gaps.build(e["recipe"])
        assert gaps.content_hash(p) == e["hash"], f"{name}: the recipe no longer builds the recorded problem"
        assert e["recipe"] == gaps.INSTANCES[name], f"{name}: the benchmark's recipe changed; record it under a new name"
        s = e["upper"]["schedule"]
        m = simulate(p, Placement(s["device"], s["order"]), "ordered")
        assert m.makespan == e["upper"]["ticks"], name
        assert m.memory_ok, name
        assert p.lower_bound_ticks() <= e["lower"]["ticks"] <= e["upper"]["ticks"], name
        assert e["lower"]["proof"]["method"], name
        assert e["runs"] and e["seconds_total"] == pytest.approx(sum(r["seconds"] for r in e["runs"]))
        for side in ("upper", "lower"):
            assert e[side]["date"] and e[side]["machine"] and e[side]["versions"]["ortools"], (name, side)


def test_merge_keeps_the_better_side_of_each(gaps, tmp_path):
    path = tmp_path / "optima.json"
    base = {"hash": "h", "upper": {"ticks": 100, "tag": "a"}, "lower": {"ticks": 80, "tag": "a"}, "runs": [{"seconds": 5.0}]}
    gaps.write_optima({"x": base}, path)
    better_upper = {**base, "upper": {"ticks": 95, "tag": "b"}, "lower": {"ticks": 70, "tag": "b"}, "runs": [{"seconds": 7.0}]}
    e = gaps.write_optima({"x": better_upper}, path)["instances"]["x"]
    assert (e["upper"]["tag"], e["lower"]["tag"], e["seconds_total"]) == ("b", "a", 12.0)
    e = json.loads(path.read_text())["instances"]["x"]
    assert (e["upper"]["ticks"], e["lower"]["ticks"]) == (95, 80)
    # Another problem under the same name (its generator changed): the old entry is dropped whole.
    other = {**base, "hash": "h2", "upper": {"ticks": 200, "tag": "c"}, "lower": {"ticks": 90, "tag": "c"}}
    e = gaps.write_optima({"x": other}, path)["instances"]["x"]
    assert (e["upper"]["ticks"], e["lower"]["ticks"], len(e["runs"])) == (200, 90, 1)


def test_verdict(gaps):
    assert gaps.verdict(100, 100, None, None) == "closed"
    assert gaps.verdict(110, 80, 100, 80) == "search weak"
    assert gaps.verdict(100, 80, 100, 95) == "bound weak"
    assert gaps.verdict(110, 80, 100, 95) == "both"
    assert gaps.verdict(100, 80, 100, 80) == "neither"
    assert gaps.verdict(100, 80, None, None) == ""


def test_a_recorded_measurement_lands_in_the_offline_file(gaps, tmp_path, monkeypatch, capsys):
    """``--record``: each measured inc-ilp schedule and certified bound is merged into the file, re-simulable."""
    monkeypatch.setitem(gaps.INSTANCES, "tiny_ffnn", gaps._identical("ffnn", {"n_layers": 2, "tiles": 2}, 1, 2))
    path = tmp_path / "optima.json"
    argv = ["--instances", "tiny_ffnn", "--time-limit", "3", "--record", "--optima", str(path)]
    assert gaps.main(argv) == 0
    e = json.loads(path.read_text())["instances"]["tiny_ffnn"]
    p = gaps.build(e["recipe"])
    assert e["hash"] == gaps.content_hash(p)
    s = e["upper"]["schedule"]
    assert simulate(p, Placement(s["device"], s["order"]), "ordered").makespan == e["upper"]["ticks"]
    assert p.lower_bound_ticks() <= e["lower"]["ticks"] <= e["upper"]["ticks"]
    assert e["upper"]["found_by"] == "inc-ilp at 3 s (deterministic)"
    assert e["runs"][0]["steps"][0]["makespan"] == e["upper"]["ticks"]
    row = capsys.readouterr().out.splitlines()[3]  # the comparison re-reads the file: the run is its own offline entry
    assert row.startswith("tiny_ffnn") and row.rstrip().endswith(("neither", "closed")), row
    assert gaps.main(argv) == 0  # a second run adds its run record; each side keeps the better value
    e2 = json.loads(path.read_text())["instances"]["tiny_ffnn"]
    assert len(e2["runs"]) == 2 and e2["upper"]["ticks"] <= e["upper"]["ticks"] and e2["lower"]["ticks"] >= e["lower"]["ticks"]
