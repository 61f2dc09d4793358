"""The Ray engine: the same results as local processes, a killed worker retried into one result,
Ctrl-C leaves no worker running, and everything without Ray installed says how to get it.

One local Ray with 2 CPUs serves the module (started once: a start costs seconds); the two-node
cluster lives in test_batch_ray_cluster.py, since a process joins one Ray at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from incsched.batch import ProblemRecipe, SolveTask, graph_files, run_batch, solve_many
from incsched.cli import main
from incsched.errors import IncschedError
from incsched.formats import graph_to_dict
from incsched.formats.gml import write_gml
from incsched.generators import layered_dag
from incsched.jsonio import json_bytes
from incsched.result import Result

from batch_support import descendants, graph_folder, interrupt, kill_once, slow_graph_folder, slow_task, wait_gone

REPO = Path(__file__).resolve().parents[1]


def _solving(pid: int) -> dict[int, str]:
    """Ray workers below ``pid`` running a solve (Ray titles a busy worker ``ray::<task name>``)."""
    return {p: c for p, c in descendants(pid).items() if c.startswith("ray::incsched solve")}


@pytest.fixture(scope="module")
def local_ray(ray_sandbox):
    with ray_sandbox() as temp:  # a folder of its own, loopback only
        ray = pytest.importorskip("ray")
        ray.init(address="local", num_cpus=2, include_dashboard=False, _temp_dir=temp, _node_ip_address="127.0.0.1",
                 object_store_memory=100 * 2**20, log_to_driver=False, logging_level="WARNING")
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
        yield ray
        ray.shutdown()


@pytest.fixture
def mixed_graphs(tmp_path):
    """Three good graphs in three formats and two bad ones."""
    folder = graph_folder(tmp_path / "graphs", (1, 2), 18, 5)
    write_gml(layered_dag(14, n_layers=4, param_bytes=(0, 1000), out_bytes=(1, 50), seed=3, name="g3"), folder / "g3.gml")
    (folder / "corrupt.json.gz").write_bytes(b"\x1f\x8b not really gzip")
    (folder / "empty.json").write_text("{}")
    return folder


def _same(items_a, items_b):
    for a, b in zip(items_a, items_b, strict=True):
        assert (a.graph_file, a.outcome, a.status, a.objective, a.error) == (b.graph_file, b.outcome, b.status, b.objective, b.error)
        if a.outcome == "solved":
            ra, rb = Result.load(a.result_file), Result.load(b.result_file)
            assert ra.to_json(timing=False) == rb.to_json(timing=False)


@pytest.mark.slow  # a Ray starts for the module
def test_mixed_batch_gives_the_local_engines_results_and_resumes_across_engines(local_ray, mixed_graphs, tmp_path):
    recipe = ProblemRecipe("stage", n_stages=3)
    local = run_batch(graph_files(mixed_graphs), tmp_path / "local", recipe, jobs=1, time_limit=5)
    on_ray = run_batch(graph_files(mixed_graphs), tmp_path / "ray", recipe, engine="ray", time_limit=5)
    assert [it.outcome for it in on_ray] == ["failed", "failed", "solved", "solved", "solved"]
    assert "corrupt.json.gz" in on_ray[0].error and "empty.json" in on_ray[1].error
    assert "/tmp" not in on_ray[0].error  # the worker's private copy of the file is not the user's business
    _same(local, on_ray)
    ray_nodes = {n["NodeID"] for n in local_ray.nodes()}
    assert {it.extra["node"] for it in on_ray if it.outcome == "solved"} <= ray_nodes
    # results solved on Ray are done for the local engine, and the other way round
    again = run_batch(graph_files(mixed_graphs), tmp_path / "ray", recipe, jobs=2, time_limit=5)
    assert [it.outcome for it in again] == ["failed", "failed", "skipped", "skipped", "skipped"]
    # another setting (the seed) solves again; another time limit alone keeps the proven results
    changed = run_batch(graph_files(mixed_graphs), tmp_path / "local", recipe, engine="ray", time_limit=5, seed=1)
    assert [it.outcome for it in changed] == ["failed", "failed", "solved", "solved", "solved"]


@pytest.mark.slow  # a Ray starts for the module
def test_solve_many_carries_keys_progress_and_errors_back(local_ray):
    graph = layered_dag(16, n_layers=4, param_bytes=(0, 1000), out_bytes=(1, 50), seed=4, name="p")
    data = json_bytes(graph_to_dict(graph))
    recipe = ProblemRecipe("stage", n_stages=2)
    tasks = [
        SolveTask("good", data, "p.json", recipe, {"time_limit": 5}, record_progress=True),
        SolveTask("no-fit", data, "p.json", ProblemRecipe("stage", n_stages=0), {"time_limit": 5}),
        SolveTask("bad-kwarg", data, "p.json", recipe, {"time_limit": -1}),
    ]
    outcomes = {o.task.key: o for o in solve_many(tasks, engine="ray")}
    assert set(outcomes) == {"good", "no-fit", "bad-kwarg"}
    good = outcomes["good"]
    assert good.error is None and good.result.status == "optimal" and good.seconds > 0
    assert good.progress and good.progress[-1]["objective"] == good.result.objective
    assert {"phase", "objective", "lower_bound", "elapsed"} <= set(good.progress[0])
    for key in ("no-fit", "bad-kwarg"):
        assert outcomes[key].result is None and "\n" not in outcomes[key].error
    assert "time_limit" in outcomes["bad-kwarg"].error


@pytest.mark.slow
def test_a_worker_killed_mid_solve_is_retried_into_one_outcome(local_ray):
    outcomes = solve_many([slow_task("big", 2.0)], engine="ray")
    killer, killed = kill_once(lambda: list(_solving(os.getpid()))[:1], delay=0.5)  # inside the solve, not its start-up
    got = list(outcomes)
    killer.join()
    assert len(killed) == 1
    assert len(got) == 1 and got[0].error is None and got[0].result is not None
    assert got[0].result.provenance["graph_file"] == "big.json"


def test_without_ray_the_engine_says_how_to_install_it(monkeypatch, two_graph_folder, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(IncschedError, match=r"pip install 'incsched\[distributed\]'"):
        solve_many([], engine="ray")
    assert main(["batch", str(two_graph_folder), "-o", str(tmp_path / "out"), "--stages", "2", "--engine", "ray"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'incsched[distributed]'" in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_package_imports_without_ray():
    code = ("import sys; sys.modules['ray'] = None\n"  # as if not installed
            "import incsched, incsched.batch, incsched.cli\n"
            "from incsched.batch import SolveTask, TaskOutcome, solve_many\n")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


@pytest.mark.parametrize("argv, message", [
    (["--address", "auto"], "--address names a Ray cluster: it needs --engine ray"),
    (["--engine", "spark"], "invalid choice: 'spark'"),
])
def test_engine_options_are_checked(two_graph_folder, tmp_path, capsys, argv, message):
    code = main(["batch", str(two_graph_folder), "-o", str(tmp_path / "out"), "--stages", "2", *argv])
    assert code in (1, 2) and message in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, message", [
    ({"engine": "spark"}, "engine must be one of local, ray"),
    ({"address": "auto"}, "needs engine 'ray'"),
    ({"workers": 0}, "workers must be a whole number"),
])
def test_solve_many_checks_its_arguments(kwargs, message):
    with pytest.raises(IncschedError, match=message):
        solve_many([], **kwargs)


@pytest.fixture
def two_graph_folder(tmp_path):
    return graph_folder(tmp_path / "graphs", (1, 2), 12, 4)


@pytest.mark.slow  # a Ray starts for the module
def test_cli_batch_on_ray(local_ray, two_graph_folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["batch", str(two_graph_folder), "-o", str(out), "--stages", "2", "--time-limit", "5", "--engine", "ray"]) == 0
    captured = capsys.readouterr()
    assert "2 solved, 0 already done, 0 failed" in captured.out and "2/2" in captured.err
    assert json.loads((out / "batch.json").read_text())["interrupted"] is False


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the workers")
def test_ctrl_c_cancels_every_task_and_leaves_no_worker(tmp_path, ray_env):
    """A real `incsched batch --engine ray` starting its own Ray: Ctrl-C stops it all, exit 130."""
    pytest.importorskip("ray")
    folder = slow_graph_folder(tmp_path / "graphs")
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "incsched.cli", "batch", str(folder), "-o", str(out), "--stages", "8", "--method", "ilp",
            "--time-limit", "60", "--engine", "ray", "--jobs", "2"]
    env = dict(os.environ)  # with ray_env's RAY_TMPDIR (a folder of its own) and loopback only
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    everything: dict[int, str] = {}
    try:
        deadline = time.time() + 90
        while time.time() < deadline and len(_solving(proc.pid)) < 2 and proc.poll() is None:
            time.sleep(0.2)
        everything = descendants(proc.pid)
        assert len(_solving(proc.pid)) == 2, everything
        time.sleep(0.5)
        interrupt(proc, timeout=60)
        assert wait_gone(everything, 15.0) == []  # workers, raylet, GCS: all of the Ray it started
        summary = json.loads((out / "batch.json").read_text())
        assert summary["interrupted"] is True and not any(p.name.endswith(".result.json") for p in out.iterdir())
    finally:  # whatever the test found, no process of this batch's Ray is left behind
        left = {**everything, **descendants(proc.pid)}
        proc.kill()
        proc.wait()
        for pid in wait_gone(left, 0):
            os.kill(pid, signal.SIGKILL)

