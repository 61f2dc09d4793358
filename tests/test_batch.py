"""Batch solving keeps going past bad graphs, resumes, and never leaves half-written results."""

from __future__ import annotations

import dataclasses
import json

import pytest

from incsched import load_graph, save_graph
from incsched.batch import BatchInterrupted, ProblemRecipe, batch_key, graph_files, left_out, result_path, run_batch
from incsched.cli import main
from incsched.errors import FormatError
from incsched.formats.gml import write_gml
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
    (out / "g2.json.result.json").write_text("{ half-written")  # as if an older, non-atomic tool died here
    items = run_batch(graph_files(graph_dir), out, ProblemRecipe("stage", n_stages=2), time_limit=5)
    by_name = {it.graph_file.split("/")[-1]: it.outcome for it in items}
    assert by_name == {"corrupt.json.gz": "failed", "g1.json": "skipped", "g2.json": "solved"}
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
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


# ---------------------------------------------------------------------- keyed by content and recipe


def _outcomes(items):
    return {it.graph_file.split("/")[-1]: it.outcome for it in items}


@pytest.fixture
def two_graphs(tmp_path):
    folder = tmp_path / "graphs"
    for seed in (1, 2):
        save_graph(layered_dag(15, n_layers=5, param_bytes=(0, 1000), out_bytes=(1, 50), seed=seed, name=f"g{seed}"), folder / f"g{seed}.json")
    return folder


def test_same_stem_in_three_formats_gets_three_results(tmp_path):
    folder = tmp_path / "graphs"
    g = layered_dag(12, n_layers=4, param_bytes=(0, 1000), out_bytes=(1, 50), seed=3, name="a")
    save_graph(g, folder / "a.json")
    save_graph(g, folder / "a.json.gz")
    write_gml(g, folder / "a.gml")
    out = tmp_path / "out"
    items = run_batch(graph_files(folder), out, ProblemRecipe("stage", n_stages=2), time_limit=5)
    assert [it.outcome for it in items] == ["solved"] * 3
    assert sorted(p.name for p in out.iterdir()) == ["a.gml.result.json", "a.json.gz.result.json", "a.json.result.json", "batch.json"]
    assert len({it.result_file for it in items}) == 3


@pytest.mark.slow
def test_another_recipe_or_setting_solves_again(two_graphs, tmp_path):
    out = tmp_path / "out"
    files = graph_files(two_graphs)
    assert set(_outcomes(run_batch(files, out, ProblemRecipe("stage", n_stages=2), time_limit=5)).values()) == {"solved"}
    assert set(_outcomes(run_batch(files, out, ProblemRecipe("stage", n_stages=2), time_limit=5)).values()) == {"skipped"}
    items = run_batch(files, out, ProblemRecipe("stage", n_stages=3), time_limit=5)
    assert set(_outcomes(items).values()) == {"solved"}
    assert max(Result.load(items[0].result_file).stages) <= 2 and len(Result.load(items[0].result_file).terms["stage_mem"]) == 3
    for recipe, kwargs in [
        (ProblemRecipe("stage", n_stages=3, alpha=7), {"time_limit": 5}),
        (ProblemRecipe("stage", n_stages=3, alpha=7), {"time_limit": 6, "seed": 1}),
        (ProblemRecipe("stage", n_stages=3, alpha=7), {"time_limit": 6, "seed": 1, "work_limit": 3}),
        (ProblemRecipe("stage", n_stages=3, alpha=7), {"time_limit": 6, "seed": 1, "method": "ilp"}),
        (ProblemRecipe("placement", n_devices=2), {"time_limit": 6}),
    ]:
        assert set(_outcomes(run_batch(files, out, recipe, **kwargs)).values()) == {"solved"}, (recipe, kwargs)
        assert set(_outcomes(run_batch(files, out, recipe, **kwargs)).values()) == {"skipped"}, (recipe, kwargs)


def test_the_objective_is_part_of_the_recipe_and_its_key(two_graphs, tmp_path, capsys):
    out = tmp_path / "out"
    files = graph_files(two_graphs)
    peer = ProblemRecipe("stage", n_stages=2)
    run_batch(files, out, peer, time_limit=5)
    memory = ProblemRecipe("stage", n_stages=2, objective="memory")
    throughput = ProblemRecipe("stage", n_stages=2, objective="throughput", bandwidth=1e6, memory=10**6, micro_batches=2)
    for recipe in (memory, throughput):
        items = run_batch(files, out, recipe, time_limit=5)
        assert set(_outcomes(items).values()) == {"solved"}, recipe
        r = Result.load(items[0].result_file)
        assert r.objective == r.terms["mem_peak" if recipe is memory else "stage_time_peak"]
    # The CLI's flags make the same recipe: stored, so skipped.
    assert main(["batch", str(two_graphs), "-o", str(out), "--stages", "2", "--objective", "throughput", "--bandwidth", "1e6",
                 "--memory", "1000000", "--micro-batches", "2", "--time-limit", "5", "-q"]) == 0
    assert "0 solved, 2 already done" in capsys.readouterr().out
    # A peer recipe keys as it did before the objective fields existed: stored peer results stay valid.
    g = load_graph(two_graphs / "g1.json")
    before = {k: v for k, v in dataclasses.asdict(peer).items() if k not in ("objective", "memory", "micro_batches")}
    assert batch_key(g, peer, {}) == batch_key(g, _FrozenRecipe(before), {})


class _FrozenRecipe:
    """A recipe as it was serialised before the objective fields existed."""

    def __init__(self, fields):
        self.fields = fields

    def to_dict(self):
        return dict(self.fields)


def test_an_edited_graph_solves_again(two_graphs, tmp_path):
    out = tmp_path / "out"
    recipe = ProblemRecipe("stage", n_stages=2)
    run_batch(graph_files(two_graphs), out, recipe, time_limit=5)
    g = load_graph(two_graphs / "g1.json")
    params = g.param_bytes.copy()
    params[0] += 1
    save_graph(g.replace(param_bytes=params), two_graphs / "g1.json")
    assert _outcomes(run_batch(graph_files(two_graphs), out, recipe, time_limit=5)) == {"g1.json": "solved", "g2.json": "skipped"}
    # the key is the content's, whatever the file format (meta aside): GML holds all of this graph
    key = batch_key(load_graph(two_graphs / "g2.json"), recipe, {"time_limit": 5})
    write_gml(load_graph(two_graphs / "g2.json"), tmp_path / "g2.gml")
    assert batch_key(load_graph(tmp_path / "g2.gml"), recipe, {"time_limit": 5}) == key
    assert batch_key(load_graph(tmp_path / "g2.gml"), recipe, {"time_limit": 6}) != key


def _edit_result(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


@pytest.mark.slow
@pytest.mark.parametrize("edit", ["stages", "objective", "status_unknown", "bool_stage", "key"])
def test_a_stored_result_is_rechecked_before_it_counts(two_graphs, tmp_path, edit):
    out = tmp_path / "out"
    recipe = ProblemRecipe("stage", n_stages=3)
    run_batch(graph_files(two_graphs), out, recipe, time_limit=5)
    path = result_path(two_graphs / "g1.json", out)
    data = json.loads(path.read_text())
    if edit == "stages":  # still a valid assignment, but not the one the objective was computed for
        stages = data["stages"]
        moved = [0] * len(stages) if any(stages) else [2] * len(stages)
        _edit_result(path, stages=moved)
    elif edit == "objective":
        _edit_result(path, objective=data["objective"] - 1, exact=None)
    elif edit == "status_unknown":  # unknown is retried
        _edit_result(path, status="unknown")
    elif edit == "bool_stage":
        _edit_result(path, stages=[True if s == 1 else s for s in data["stages"]] if 1 in data["stages"] else [True] * len(data["stages"]))
    else:
        _edit_result(path, provenance={**data["provenance"], "batch_key": "0" * 64, "batch_key_untimed": "0" * 64})
    items = run_batch(graph_files(two_graphs), out, recipe, time_limit=5)
    assert _outcomes(items) == {"g1.json": "solved", "g2.json": "skipped"}
    fresh = Result.load(path)
    assert fresh.status == "optimal" and fresh.provenance["batch_key"] == items[0].extra["key"]


@pytest.mark.slow
def test_placement_results_are_rechecked_too(two_graphs, tmp_path):
    out = tmp_path / "out"
    recipe = ProblemRecipe("placement", n_devices=2, bandwidth=1e9)
    run_batch(graph_files(two_graphs), out, recipe, time_limit=5)
    path = result_path(two_graphs / "g2.json", out)
    data = json.loads(path.read_text())
    _edit_result(path, objective=data["objective"] + 5, exact=None)
    assert _outcomes(run_batch(graph_files(two_graphs), out, recipe, time_limit=5)) == {"g1.json": "skipped", "g2.json": "solved"}


def test_two_files_with_one_name_are_refused(two_graphs, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "g1.json").write_bytes((two_graphs / "g1.json").read_bytes())
    with pytest.raises(FormatError, match="two graph files named 'g1.json' would share one result file"):
        run_batch([two_graphs / "g1.json", other / "g1.json"], tmp_path / "out", ProblemRecipe("stage", n_stages=2))


def test_ctrl_c_keeps_what_is_written_and_writes_the_summary(two_graphs, tmp_path, monkeypatch, capsys):
    import incsched.batch.tasks as tasks

    real, calls, interrupt_at = tasks.run_task, [], [2]

    def solve_then_interrupt(task, *args):
        calls.append(task.graph_name)
        if len(calls) == interrupt_at[0]:
            raise KeyboardInterrupt
        return real(task, *args)

    monkeypatch.setattr(tasks, "run_task", solve_then_interrupt)
    out = tmp_path / "out"
    with pytest.raises(BatchInterrupted) as stop:
        run_batch(graph_files(two_graphs), out, ProblemRecipe("stage", n_stages=2), time_limit=5)
    assert [it.outcome for it in stop.value.items] == ["solved", "interrupted"]
    summary = json.loads((out / "batch.json").read_text())
    assert summary["interrupted"] is True and [it["outcome"] for it in summary["items"]] == ["solved", "interrupted"]

    calls.clear()
    interrupt_at[0] = 1  # g1 is done (checked by the batch, not solved): g2 is the first solve
    assert main(["batch", str(two_graphs), "-o", str(out), "--stages", "2", "--time-limit", "5"]) == 130
    captured = capsys.readouterr()
    assert "1 not done (interrupted)" in captured.out and "interrupted" in captured.err
    monkeypatch.setattr(tasks, "run_task", real)
    # the CLI's settings are solve()'s defaults spelt out: the same key as the API's time_limit=5
    assert _outcomes(run_batch(graph_files(two_graphs), out, ProblemRecipe("stage", n_stages=2), time_limit=5)) == {
        "g1.json": "skipped", "g2.json": "solved"}


def test_batch_summary_is_json_with_the_recipe(two_graphs, tmp_path):
    out = tmp_path / "out"
    recipe = ProblemRecipe("stage", n_stages=2, weights={"mem_peak": 1, "spill": 2}, spill_capacity=500)
    run_batch(graph_files(two_graphs), out, recipe, time_limit=5, seed=3)
    summary = json.loads((out / "batch.json").read_text())
    assert summary["recipe"] == dataclasses.asdict(recipe) and summary["solve"] == {"time_limit": 5, "seed": 3}
    assert summary["interrupted"] is False


# ---------------------------------------------------------------------- nothing skipped without a word (issue 24)


def test_a_broken_link_a_link_loop_and_a_folder_named_json_are_reported_not_skipped(tmp_path, capsys, caplog):
    folder = tmp_path / "graphs"
    save_graph(layered_dag(12, n_layers=4, seed=1, name="ok"), folder / "ok.json")
    (folder / "dir.json").mkdir()
    (folder / "broken.json").symlink_to(folder / "missing.json")
    (folder / "loop.json").symlink_to(folder / "loop.json")
    (folder / "notes.txt").write_text("not a graph: named and left out")
    (folder / "alias.json").symlink_to(folder / "ok.json")  # a link to a graph file is a graph file
    files = graph_files(folder)
    assert [f.name for f in files] == ["alias.json", "broken.json", "dir.json", "loop.json", "ok.json"]
    out = tmp_path / "out"
    items = {it.graph_file.split("/")[-1]: it for it in run_batch(files, out, ProblemRecipe("stage", n_stages=2), time_limit=5)}
    assert {k: (it.outcome, it.error) for k, it in items.items() if it.outcome == "failed"} == {
        "broken.json": ("failed", "a broken symbolic link"),
        "dir.json": ("failed", "a folder, not a graph file"),
        "loop.json": ("failed", "a symbolic link loop"),
    }
    assert items["ok.json"].outcome == items["alias.json"].outcome == "solved"
    written = {it["graph_file"].split("/")[-1]: it["error"] for it in json.loads((out / "batch.json").read_text())["items"]}
    assert written["loop.json"] == "a symbolic link loop" and written["ok.json"] is None
    assert "loop.json: a symbolic link loop; reported as failed" in caplog.text
    # the CLI names each one and exits 1
    assert main(["batch", str(folder), "-o", str(tmp_path / "cli"), "--stages", "2", "--time-limit", "5"]) == 1
    printed = capsys.readouterr().out
    for name, why in (("broken.json", "a broken symbolic link"), ("dir.json", "a folder"), ("loop.json", "a symbolic link loop")):
        assert f"failed: {folder / name}: {why}" in printed


# ---------------------------------------------------------------------- ONNX, left-out entries, time limits (issue 26)


def test_onnx_files_are_batch_graphs(tmp_path):
    onnx = pytest.importorskip("onnx")
    from test_onnx import small_cnn

    folder = tmp_path / "graphs"
    folder.mkdir()
    onnx.save(small_cnn(), str(folder / "cnn.onnx"))
    save_graph(layered_dag(12, n_layers=4, seed=1, name="g"), folder / "g.json")
    files = graph_files(folder)
    assert [f.name for f in files] == ["cnn.onnx", "g.json"] and left_out(folder) == []
    items = run_batch(files, tmp_path / "out", ProblemRecipe("stage", n_stages=2), time_limit=5)
    assert [(it.outcome, it.status) for it in items] == [("solved", "optimal")] * 2
    solved = Result.load(items[0].result_file)
    assert len(solved.stages) == load_graph(folder / "cnn.onnx").n_nodes and solved.provenance["graph_file"] == "cnn.onnx"


def test_every_entry_left_out_is_named_with_why(tmp_path, capsys):
    folder = tmp_path / "graphs"
    save_graph(layered_dag(12, n_layers=4, seed=1, name="ok"), folder / "ok.json")
    (folder / "notes.txt").write_text("not a graph")
    (folder / "model.pt2").write_bytes(b"")
    (folder / "README").write_text("")
    (folder / "old").mkdir()
    why = {p.name: reason for p, reason in left_out(folder)}
    assert set(why) == {"README", "model.pt2", "notes.txt", "old"}
    assert why["notes.txt"].startswith("unknown extension .txt (graph files end in .json, .json.gz, .gml, .gml.gz, .onnx, .onnx.gz)")
    assert why["model.pt2"].startswith("unknown extension .pt2") and why["README"].startswith("no extension")
    assert why["old"].startswith("a folder")
    assert main(["batch", str(folder), "-o", str(tmp_path / "out"), "--stages", "2", "--time-limit", "5", "-q"]) == 0
    captured = capsys.readouterr()
    assert "1 solved, 0 already done, 0 failed, 4 left out (not graph files)" in captured.out
    for name, reason in why.items():
        assert f"left out {folder / name}: {reason}" in captured.err and f"  left out: {folder / name}: {reason}" in captured.out
    (folder / "ok.json").unlink()
    assert main(["batch", str(folder), "-o", str(tmp_path / "out"), "--stages", "2"]) == 1
    captured = capsys.readouterr()
    assert "no graph files (.json, .json.gz, .gml, .gml.gz, .onnx, .onnx.gz) found" in captured.err
    assert f"left out {folder / 'notes.txt'}" in captured.err


def test_a_proven_result_is_kept_under_another_time_limit(two_graphs, tmp_path):
    out = tmp_path / "out"
    files = graph_files(two_graphs)
    recipe = ProblemRecipe("stage", n_stages=2)
    first = run_batch(files, out, recipe, time_limit=5, work_limit=3)
    assert [it.status for it in first] == ["optimal", "optimal"]
    kept = run_batch(files, out, recipe, time_limit=9, work_limit=3)
    assert [it.outcome for it in kept] == ["skipped", "skipped"]
    assert [it.extra for it in kept] == [{"key": it.extra["key"], "time_limit": 5.0} for it in first]
    stored = Result.load(kept[0].result_file)
    assert stored.provenance["time_limit"] == 5 and stored.provenance["batch_key"] == first[0].extra["key"]
    # the rest of the settings, the recipe and the content are still in the key
    assert set(_outcomes(run_batch(files, out, recipe, time_limit=9, work_limit=4)).values()) == {"solved"}
    assert set(_outcomes(run_batch(files, out, ProblemRecipe("stage", n_stages=3), time_limit=5, work_limit=4)).values()) == {"solved"}
    g = load_graph(two_graphs / "g1.json")
    save_graph(g.replace(param_bytes=g.param_bytes + 1), two_graphs / "g1.json")
    assert _outcomes(run_batch(files, out, ProblemRecipe("stage", n_stages=3), time_limit=7, work_limit=4)) == {
        "g1.json": "solved", "g2.json": "skipped"}


@pytest.mark.parametrize("status, stop_reason, kept", [
    ("feasible", "time", False), ("window_optimal", "work", False), ("infeasible", "time", False), ("infeasible", "optimal", True),
])
def test_an_unproven_result_is_solved_again_under_another_time_limit(two_graphs, tmp_path, status, stop_reason, kept):
    out = tmp_path / "out"
    files = graph_files(two_graphs)
    recipe = ProblemRecipe("stage", n_stages=2)
    run_batch(files, out, recipe, time_limit=5)
    path = result_path(files[0], out)
    data = json.loads(path.read_text())
    unproven = {"status": status, "stop_reason": stop_reason, "lower_bound": None, "gap": None}
    if status == "infeasible":
        unproven.update(objective=None, stages=None, reason="made up for the test")
    _edit_result(path, **unproven)
    assert _outcomes(run_batch(files, out, recipe, time_limit=5))["g1.json"] == "skipped"  # the same time limit: kept as it is
    assert _outcomes(run_batch(files, out, recipe, time_limit=6)) == {"g1.json": "skipped" if kept else "solved", "g2.json": "skipped"}


def test_the_untimed_key_leaves_out_the_time_limit_only():
    g = layered_dag(12, n_layers=4, seed=1, name="g")
    recipe = ProblemRecipe("stage", n_stages=2)

    def untimed(**kwargs):
        return batch_key(g, recipe, kwargs, untimed=True)

    assert untimed(time_limit=5) == untimed(time_limit=60) == untimed() != batch_key(g, recipe, {}, untimed=False)
    assert batch_key(g, recipe, {"time_limit": 5}) != batch_key(g, recipe, {"time_limit": 6})
    for other in ({"work_limit": 3}, {"seed": 1}, {"deterministic": False, "workers": 4}, {"method": "ilp"}):
        assert untimed(time_limit=5, **other) != untimed(time_limit=5), other
    assert batch_key(g, ProblemRecipe("stage", n_stages=3), {}, untimed=True) != untimed()
