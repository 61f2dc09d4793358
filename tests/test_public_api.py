"""The one public face: `incsched.solve` (the function), the problem and result types, `Tuning`,
`load_graph` (a file or a shipped graph's name) and `capture`, importable from the package itself,
which stays light (no torch, no OR-Tools until they are used)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import incsched
from incsched.errors import IncschedError, SolveArgumentError

ROOT = Path(__file__).resolve().parent.parent


def _outside(tmp_path, code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter from a folder outside the repository."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_the_public_names_are_listed_and_resolve():
    for name in ("solve", "StageProblem", "PlacementProblem", "Result", "Tuning", "load_graph", "capture", "CompGraph"):
        assert name in incsched.__all__ and name in dir(incsched)
    assert callable(incsched.solve) and incsched.solve.__name__ == "solve"
    assert incsched.StageProblem.__name__ == "StageProblem" and incsched.PlacementProblem.__name__ == "PlacementProblem"
    assert incsched.Result.__name__ == "Result" and incsched.Tuning().stage_band_width == 2
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        incsched.nope


def test_import_incsched_pulls_in_neither_torch_nor_ortools(tmp_path):
    run = _outside(tmp_path, "import sys, incsched; print(sorted(m for m in ('torch', 'ortools', 'numba', 'pulp') if m in sys.modules))")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_solve_stays_the_function_after_its_modules_are_imported():
    """Importing a submodule binds it on the package: no submodule may be named like a public function."""
    import incsched.capture.zoo  # noqa: F401  (binds the capture package on incsched)
    import incsched.front_door  # noqa: F401
    import incsched.certify  # noqa: F401

    assert callable(incsched.solve) and not isinstance(incsched.solve, type(incsched))
    assert callable(incsched.capture)  # the capture step's package answers calls as its front function


@pytest.mark.slow
def test_capture_is_callable_from_the_package():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
    captured = incsched.capture(model, (torch.randn(3, 4),))
    assert captured.graph.n_nodes >= 3 and isinstance(captured.graph, incsched.CompGraph)


def test_the_readme_call_from_a_folder_outside_the_repo(tmp_path):
    code = (
        "import json, incsched\n"
        "r = incsched.solve(incsched.StageProblem.peer(incsched.load_graph('resnet18'), n_stages=2))\n"
        "print(json.dumps([r.status, r.stop_reason, r.objective == r.lower_bound]))\n"
    )
    run = _outside(tmp_path, code)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == ["optimal", "optimal", True]


def test_load_graph_takes_a_shipped_name_and_names_the_choices(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    g = incsched.load_graph("resnet18")
    assert g.n_nodes > 10
    with pytest.raises(IncschedError, match=r"no shipped graph named 'resnet1' \(shipped: .*resnet18"):
        incsched.load_graph("resnet1")
    (tmp_path / "resnet18").write_text("{}")  # a file of that name here wins over the shipped graph
    with pytest.raises(IncschedError, match="unknown graph file type"):
        incsched.load_graph("resnet18")


def test_tuning_is_checked_and_recorded():
    from dataclasses import replace

    p = incsched.StageProblem.peer(incsched.load_graph("resnet18"), n_stages=2)
    tuning = replace(incsched.Tuning(), stage_window_share=0.3)
    r = incsched.solve(p, time_limit=10, tuning=tuning)
    assert r.provenance["tuning"]["stage_window_share"] == 0.3
    assert incsched.Tuning.from_json(r.provenance["tuning"]) == tuning
    with pytest.raises(SolveArgumentError, match="tuning must be an incsched.Tuning"):
        incsched.solve(p, tuning={"stage_window_share": 0.3})
    with pytest.raises(SolveArgumentError, match=r"Tuning.stage_band_work must be a finite number >= 0, got -1"):
        incsched.Tuning(stage_band_work=-1)
    with pytest.raises(SolveArgumentError, match="unknown Tuning field"):
        incsched.Tuning.from_json({"band": 1})


@pytest.mark.slow
def test_the_cli_records_the_users_time_limit(tmp_path):
    """The command counts its clock from process start, and the result records the limit the user
    gave (it recorded what was left after start-up: 58.62, then 58.57)."""
    exe = Path(sys.executable).with_name("incsched")
    for name in ("a.json", "b.json"):
        run = subprocess.run([str(exe), "solve", "resnet18", "--stages", "2", "--time-limit", "60", "--json", name, "-q"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    assert a["provenance"]["time_limit"] == b["provenance"]["time_limit"] == 60
    a.pop("timing"), b.pop("timing")
    assert a == b
