"""Batch solving keeps going past bad graphs, resumes, and never leaves half-written results."""

from __future__ import annotations

import json

import pytest

from incsched import save_graph
from incsched.batch import ProblemRecipe, graph_files, run_batch
from incsched.cli import main
from incsched.generators import layered_dag
from incsched.result import Result


@pytest.fixture
def graph_dir(tmp_path):
    folder = tmp_path / "graphs"
    for seed in (1, 2):
        save_graph(layered_dag(20, n_layers=5, param_bytes=(0, 1000), out_bytes=(1, 50), seed=seed, name=f"g{seed}"), folder / f"g{seed}.json")
    (folder / "corrupt.json.gz").write_bytes(b"\x1f\x8b not really gzip")
    return folder


def test_batch_reports_bad_graph_and_solves_the_rest(graph_dir, tmp_path):
    out = tmp_path / "out"
    items = run_batch(graph_files(graph_dir), out, ProblemRecipe("stage", n_stages=3), time_limit=5)
    outcomes = {it.graph_file.split("/")[-1]: it for it in items}
    assert outcomes["corrupt.json.gz"].outcome == "failed" and "corrupt.json.gz" in outcomes["corrupt.json.gz"].error
    for name in ("g1.json", "g2.json"):
        assert outcomes[name].outcome == "solved"
        assert Result.load(outcomes[name].result_file).status == "optimal"
    summary = json.loads((out / "batch.json").read_text())
    assert [it["outcome"] for it in summary["items"]] == [it.outcome for it in items]


def test_batch_resumes_and_redoes_unreadable_results(graph_dir, tmp_path):
    out = tmp_path / "out"
    run_batch(graph_files(graph_dir), out, ProblemRecipe("stage", n_stages=2), time_limit=5)
    (out / "g2.result.json").write_text("{ half-written")  # as if an older, non-atomic tool died here
    items = run_batch(graph_files(graph_dir), out, ProblemRecipe("stage", n_stages=2), time_limit=5)
    by_name = {it.graph_file.split("/")[-1]: it.outcome for it in items}
    assert by_name == {"corrupt.json.gz": "failed", "g1.json": "skipped", "g2.json": "solved"}
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_cli_batch_and_solve_round_trip(graph_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["batch", str(graph_dir), "-o", str(out), "--devices", "2", "--bandwidth", "1e9", "--time-limit", "5"]) == 1
    assert "2 solved, 0 already done, 1 failed" in capsys.readouterr().out
    res_path = tmp_path / "one.json"
    assert main(["solve", str(graph_dir / "g1.json"), "--stages", "3", "--time-limit", "5", "--json", str(res_path)]) == 0
    text = capsys.readouterr().out
    assert "status       optimal" in text and "stage memory" in text
    r = Result.load(res_path)
    assert r.problem == "stage" and len(r.stages) == 20
