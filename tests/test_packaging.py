"""Packaging: public names declared, one logging namespace, the CLI's --json - and log levels, a
built wheel that works on its own (its package data, the policy weights among them, included), and
the venv `make` builds, where transformers and torchvision import with no call needed first."""

from __future__ import annotations

import ast
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import layout
from incsched.cli import _configure_logging, main

ROOT = Path(__file__).resolve().parent.parent


def _public_modules() -> list[Path]:
    """Every module a user may import: no path part starting with an underscore (``__init__`` aside)."""
    return [
        p for p in layout.modules().values()
        if not any(part.startswith("_") and part != "__init__.py" for part in p.relative_to(ROOT).parts)
    ]


def test_the_wheel_lists_every_package_folder():
    """pyproject lists the packages by name (package-dir maps solvers/ and data/ into incsched):
    a new folder missing there would be missing from the wheel."""
    listed = set(layout.pyproject()["tool"]["setuptools"]["packages"])
    found = {name for name, path in layout.modules().items() if path.name == "__init__.py"}
    assert listed == found
    assert all(name == "incsched" or name.startswith("incsched.") for name in listed)


@pytest.mark.slow
def test_public_modules_declare_their_names():
    missing = [str(p.relative_to(ROOT)) for p in _public_modules()
               if not any(isinstance(node, (ast.Assign, ast.AnnAssign)) and "__all__" in ast.unparse(node).split("=")[0]
                          for node in ast.parse(p.read_text()).body)]
    assert not missing, "modules without __all__: " + ", ".join(missing)


@pytest.mark.slow
def test_everything_logs_under_incsched():
    """Module loggers are named after their module (``__name__``, always ``incsched.*``) or
    ``incsched``; nothing logs through the root logger (``logging.info(...)``). A function may look
    up another library's logger (to quieten it); that is not a logger incsched logs through."""
    bad = []
    for path in layout.modules().values():
        tree = ast.parse(path.read_text())
        for node in tree.body:  # module-level `log = logging.getLogger(...)`
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "logging.getLogger":
                arg = node.value.args[0] if node.value.args else None
                named = isinstance(arg, ast.Name) and arg.id == "__name__"
                ours = isinstance(arg, ast.Constant) and str(arg.value).split(".")[0] == "incsched"
                if not (named or ours):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: logger {ast.unparse(arg) if arg else '(root)'}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "logging"
                    and node.func.attr in ("debug", "info", "warning", "error", "exception", "critical", "log")):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: logs through the root logger")
    assert not bad, "\n".join(bad)


def test_log_levels_from_the_command_line():
    logger = logging.getLogger("incsched")
    before = logger.level
    try:
        for verbose, quiet, level in [(0, False, logging.WARNING), (1, False, logging.INFO), (2, False, logging.DEBUG),
                                      (3, False, logging.DEBUG), (0, True, logging.ERROR), (2, True, logging.ERROR)]:
            _configure_logging(verbose, quiet)
            assert logger.level == level, (verbose, quiet)
    finally:
        logger.setLevel(before)


def test_main_leaves_the_callers_log_level_alone(capsys):
    logger = logging.getLogger("incsched")
    before = logger.level
    assert main(["-vv", "graph", "info", "resnet18"]) == 0
    assert main(["-q", "graph", "info", "no_such_graph"]) == 1
    assert logger.level == before
    assert "no shipped graph named 'no_such_graph'" in capsys.readouterr().err  # errors still shown under -q


def test_json_dash_writes_the_result_to_stdout(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["solve", "resnet18", "--stages", "2", "--method", "contiguous_params", "--json", "-", "-q"]) == 0
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert result["problem"] == "stage" and result["method"] == "contiguous_params"
    assert "status" in out.err and not (tmp_path / "-").exists()  # the summary went to stderr, no file named '-'


@pytest.mark.long
@pytest.mark.slow
def test_a_built_wheel_solves_with_its_own_policy_weights(tmp_path):
    """Build the wheel from a copy of the sources, unpack it with pip into a folder, and solve with the
    learned pre-scheduler from outside the repository: the package and the policy files opened must
    all come from that folder, not from the editable install. The design card's top-level solvers/
    and data/ install inside the package, and nothing else goes to the top level."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in set(layout.pyproject()["tool"]["setuptools"]["package-dir"].values()):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    # no build isolation: the venv's setuptools builds it, nothing is downloaded
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)],
                   check=True, cwd=tmp_path, timeout=300)
    wheel = next((tmp_path / "dist").glob("incsched-*.whl"))
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True, timeout=300)
    top = {p.name for p in site.iterdir() if not p.name.endswith((".dist-info", ".data")) and p.name != "bin"}
    assert top == {"incsched"}, top
    assert (site / "incsched" / "solvers" / "cpsat" / "stage.py").is_file()
    assert (site / "incsched" / "data" / "models" / "stage_policy.pt").is_file()
    assert (site / "incsched" / "data" / "links" / "example.json").is_file()  # the README's links file

    script = """
import json, sys
sys.path.insert(0, sys.argv[1])  # before site-packages, whose editable finder comes later
opened = []
sys.addaudithook(lambda event, args: opened.append(args[0]) if event == "open" and isinstance(args[0], str) else None)
import incsched
graph = incsched.load_graph("resnet18")
result = incsched.solve(incsched.StageProblem.peer(graph, n_stages=4), "inc-ilp", preschedule="rl", time_limit=60)
print(json.dumps({"package": incsched.__file__, "status": result.status,
                  "policy_files": sorted({p for p in opened if p.endswith(("stage_policy.pt", "stage_policy.json"))})}))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    run = subprocess.run([sys.executable, "-s", "-c", script, str(site)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(report["package"]).is_relative_to(site)
    assert report["status"] in ("optimal", "window_optimal", "feasible")
    assert {Path(p).name for p in report["policy_files"]} == {"stage_policy.pt", "stage_policy.json"}
    assert all(Path(p).is_relative_to(site / "incsched" / "data" / "models") for p in report["policy_files"])


def test_graph_save_and_load_round_trip(tmp_path):
    from incsched import CompGraph, load_graph
    from incsched.errors import CycleError, FormatError

    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], flops=[1, 2.5, 3], param_bytes=[2**62 - 1, 0, 1], out_bytes=[4, 4, 0],
                  compute_time={"cpu": [1e-3, 2e-3, 3e-3]}, name="chain", meta={"model": "x"})
    for name in ("g.json", "g.json.gz"):
        g.save(tmp_path / name)
        assert CompGraph.load(tmp_path / name) == g == load_graph(tmp_path / name)
        assert CompGraph.load(tmp_path / name).param_bytes[0] == 2**62 - 1  # exact, not through a float
    assert CompGraph.from_json(g.to_json()) == g
    with pytest.raises(FormatError, match=r"g\.gml: graphs are saved as \.json or \.json\.gz"):
        g.save(tmp_path / "g.gml")
    with pytest.raises(FormatError, match="incsched.load_graph reads .gml and .onnx too"):
        CompGraph.load(tmp_path / "g.gml")
    cyclic = g.to_json()
    cyclic["edges"] = {"src": ["a", "b"], "dst": ["b", "a"], "bytes": [1, 1]}
    (tmp_path / "cyclic.json").write_text(json.dumps(cyclic))
    with pytest.raises(CycleError, match=r"cyclic\.json: "):
        CompGraph.load(tmp_path / "cyclic.json")


@pytest.mark.long
@pytest.mark.slow
def test_transformers_and_torchvision_import_in_a_fresh_interpreter():
    """A user's own script in the venv: ``from transformers import ...`` first, nothing of incsched.

    Where torchvision's C++ ops cannot load (its CUDA wheel beside the CPU torch; see
    scripts/torchvision_guard.py), they still raise torchvision's own error when called.
    """
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    script = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=8, bos_token_id=0, eos_token_id=0))
print(tuple(model(torch.zeros(1, 4, dtype=torch.long)).logits.shape))
import torchvision, torchvision.extension
print(type(torchvision.models.resnet18(weights=None)).__name__)
if not torchvision.extension._has_ops():
    try:
        torchvision.ops.nms(torch.rand(3, 4), torch.rand(3), 0.5)
    except RuntimeError as exc:
        print(str(exc).split(".")[0])
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT.parent, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.split("\n")
    assert lines[0] == "(1, 4, 64)" and lines[1] == "ResNet"
    assert lines[2] in ("", "Couldn't load custom C++ ops")
