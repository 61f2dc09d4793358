"""`incsched.show` and ``incsched show``: a stage split drawn as its 1F1B pipeline, a placement as
a Gantt chart, both checked against the problem they were solved for.

The 1F1B schedule is checked against its own rules (precedence, one pass at a time per stage) and
against `StageProblem.in_flight`, the memory rule the solvers count activations by.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched import PlacementProblem, StageProblem, solve
from incsched.cli import main
from incsched.errors import IncschedError
from incsched.formats import save_graph
from incsched.graph import CompGraph
from incsched.show import bubble_fractions, draw, one_f_one_b, timeline

pytest.importorskip("matplotlib")

PNG = b"\x89PNG\r\n\x1a\n"


def small_graph(name: str = "diamonds") -> CompGraph:
    """Two diamonds in a row: branches for a placement to spread, parameters for stages to balance."""
    names = ["in", "a1", "b1", "j1", "a2", "b2", "j2", "out"]
    src = ["in", "in", "a1", "b1", "j1", "j1", "a2", "b2", "j2"]
    dst = ["a1", "b1", "j1", "j1", "a2", "b2", "j2", "j2", "out"]
    return CompGraph(names, src, dst, name=name, op=["input", "matmul", "conv", "add", "matmul", "conv", "add", "linear"],
                     param_bytes=[0, 4000, 3000, 0, 5000, 2000, 0, 1000], out_bytes=[800, 400, 400, 800, 400, 400, 800, 100],
                     compute_time={"cpu": [1e-4, 3e-3, 2e-3, 5e-4, 4e-3, 1e-3, 5e-4, 2e-3]})


@pytest.fixture(scope="module")
def solved():
    """A solved stage split and placement of `small_graph`, with their problems."""
    g = small_graph()
    stage = StageProblem.peer(g, n_stages=3, alpha=1)
    placement = PlacementProblem.identical(g, 2, bandwidth=1e6, latency=1e-4)
    return (solve(stage, time_limit=20), stage), (solve(placement, time_limit=20), placement)


# ---------------------------------------------------------------------------- 1F1B


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9)), min_size=1, max_size=6), st.integers(1, 8))
def test_one_f_one_b_keeps_its_rules(times, micro_batches):
    forward, backward = [float(f) for f, _ in times], [float(b) for _, b in times]
    K = len(times)
    blocks = one_f_one_b(forward, backward, micro_batches)
    assert len(blocks) == 2 * K * micro_batches
    end = {(b.stage, b.backward, b.micro_batch): b.end for b in blocks}
    start = {(b.stage, b.backward, b.micro_batch): b.start for b in blocks}
    for b in blocks:
        assert b.end - b.start == (backward if b.backward else forward)[b.stage]
        if b.backward:  # after the next stage's backward, or its own forward on the last stage
            assert b.start >= end[(b.stage + 1, True, b.micro_batch)] if b.stage + 1 < K else b.start >= end[(b.stage, False, b.micro_batch)]
        elif b.stage > 0:
            assert b.start >= end[(b.stage - 1, False, b.micro_batch)]
    problem = StageProblem.pipeline(small_graph(), K, micro_batches=micro_batches)
    for k in range(K):
        passes = sorted((b for b in blocks if b.stage == k), key=lambda b: b.start)
        assert all(p.end <= q.start for p, q in zip(passes, passes[1:]))  # one pass at a time
        # activations kept between a micro-batch's forward and its backward: the problem's rule
        kept = max(sum(start[(k, False, m)] <= b.start < end[(k, True, m)] for m in range(micro_batches)) for b in passes)
        assert kept == problem.in_flight()[k]


def test_one_f_one_b_with_equal_stages_takes_micro_batches_plus_stages_minus_one_steps():
    blocks = one_f_one_b([1.0] * 4, [2.0] * 4, 8)
    assert max(b.end for b in blocks) == (8 + 4 - 1) * 3.0
    assert bubble_fractions(one_f_one_b([1.0], [2.0], 5), 1) == [0.0]  # one stage never waits


# ---------------------------------------------------------------------------- the library


@pytest.mark.slow  # four pictures drawn: 2-8 s here
@pytest.mark.parametrize("which", [0, 1], ids=["stage", "placement"])
def test_draw_writes_a_png_and_an_svg(solved, tmp_path, which):
    result, problem = solved[which]
    png = draw(result, problem, tmp_path / "r.png")
    svg = draw(result, problem, tmp_path / "r.svg")
    assert png.read_bytes().startswith(PNG) and png.stat().st_size > 20_000
    assert ET.parse(svg).getroot().tag.endswith("svg") and svg.stat().st_size > 20_000
    # the same result draws the same bytes (no dates, a fixed SVG salt)
    assert draw(result, problem, tmp_path / "again.svg").read_bytes() == svg.read_bytes()
    assert draw(result, problem, tmp_path / "again.png").read_bytes() == png.read_bytes()


def test_a_stage_split_draws_without_its_problem(solved, tmp_path):
    result, _ = solved[0]
    assert draw(result, None, tmp_path / "s", "svg").read_bytes().lstrip().startswith(b"<?xml")


def test_the_timeline_is_the_result_replayed(solved):
    result, problem = solved[1]
    t = timeline(problem, result.device, result.order)
    assert [round(s / problem.time_unit) for s in t.start] == result.start
    assert round(t.makespan / problem.time_unit) == result.terms["makespan"]
    for x in t.transfers:
        assert x.from_device != x.to_device and x.sent == t.end[x.source] and t.start[x.target] >= x.arrived - 1e-12


def test_draw_refuses_what_does_not_fit(solved, tmp_path):
    (stage, stage_problem), (placement, problem) = solved
    slower = small_graph()
    slower = slower.replace(compute_time={"cpu": slower.time("cpu") * 3})
    cases = [
        (placement, None, "drawn with its problem"),
        (placement, stage_problem, "drawn with its PlacementProblem"),
        (placement, PlacementProblem.identical(slower, 2, bandwidth=1e6, latency=1e-4), "not the problem it was solved for"),
        (placement, PlacementProblem.identical(small_graph(), 2, bandwidth=1e5, latency=1e-4, time_unit=problem.time_unit),
         "not the problem it was solved for"),
        (stage, StageProblem.peer(small_graph(), n_stages=4, alpha=1), "the problem 4"),
    ]
    for result, prob, said in cases:
        with pytest.raises(IncschedError, match=said):
            draw(result, prob, tmp_path / "x.png")
    with pytest.raises(IncschedError, match=r"\.png or \.svg"):
        draw(stage, stage_problem, tmp_path / "x.jpg")
    infeasible = StageProblem.peer(small_graph(), n_stages=2, alpha=1, capacity=4500)
    with pytest.raises(IncschedError, match="no answer to draw"):
        draw(solve(infeasible, time_limit=10), infeasible, tmp_path / "x.png")
    assert not list(tmp_path.glob("x.*"))


# ---------------------------------------------------------------------------- the command line


@pytest.fixture(scope="module")
def files(solved, tmp_path_factory):
    """The graph and both results as files, as incsched solve --json writes them."""
    tmp = tmp_path_factory.mktemp("show")
    save_graph(small_graph(), tmp / "g.json")
    (stage, _), (placement, _) = solved
    stage.save(tmp / "stage.json")
    placement.save(tmp / "placement.json")
    return tmp


@pytest.mark.slow  # pictures drawn through the command line: 2-6 s here
def test_cli_draws_both_kinds(files, tmp_path, capsys):
    g, placement_options = str(files / "g.json"), ["--bandwidth", "1e6", "--latency", "1e-4"]
    assert main(["show", str(files / "stage.json"), "--png", str(tmp_path / "a.png")]) == 0
    assert main(["show", str(files / "stage.json"), "--graph", g, "--alpha", "1", "--micro-batches", "6",
                 "--png", str(tmp_path / "b.png"), "--svg", str(tmp_path / "b.svg")]) == 0
    assert main(["show", str(files / "placement.json"), "--graph", g, *placement_options, "--svg", str(tmp_path / "c.svg")]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / n) for n in ("a.png", "b.png", "b.svg", "c.svg")]
    assert (tmp_path / "b.png").read_bytes().startswith(PNG) and ET.parse(tmp_path / "c.svg").getroot().tag.endswith("svg")


@pytest.mark.parametrize("args, said", [
    ("{files}/stage.json", "give --png OUT.png and/or --svg OUT.svg"),
    ("{files}/g.json --png {tmp}/x.png", "not an incsched result"),
    ("{files}/missing.json --png {tmp}/x.png", "No such file"),
    ("{files}/placement.json --png {tmp}/x.png", "give --graph"),
    ("{files}/placement.json --graph resnet18 --png {tmp}/x.png", "solved for another graph"),
    ("{files}/placement.json --graph {files}/g.json --png {tmp}/x.png", "not the problem it was solved for"),  # solved with slow links
    ("{files}/placement.json --graph {files}/g.json --stages 2 --png {tmp}/x.png", "options describe a stage problem"),
    ("{files}/stage.json --capacity 100 --png {tmp}/x.png", "need --graph"),
    ("{files}/stage.json --graph {files}/g.json --stages 5 --png {tmp}/x.png", "has 3 stages, the problem 5"),
])
def test_cli_bad_input_is_one_line(files, tmp_path, capsys, args, said):
    assert main(["show", *args.format(files=files, tmp=tmp_path).split()]) == 1
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and err.startswith("incsched: error:"), err
    assert not list(tmp_path.glob("x.*"))


@pytest.mark.slow  # pictures drawn through the command line: 2-6 s here
def test_cli_format_options_name_the_format(files, tmp_path):
    assert main(["show", str(files / "stage.json"), "--png", str(tmp_path / "x.img"), "--svg", str(tmp_path / "y.img")]) == 0
    assert (tmp_path / "x.img").read_bytes().startswith(PNG) and ET.parse(tmp_path / "y.img").getroot().tag.endswith("svg")


def test_cli_without_matplotlib_says_how_to_install(files, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["show", str(files / "stage.json"), "--png", str(tmp_path / "x.png")]) == 1
    err = capsys.readouterr().err
    assert "pip install 'incsched[experiments]'" in err and err.count("\n") == 1
