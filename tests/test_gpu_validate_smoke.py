"""benchmarks/gpu_validate.py runs end to end on CPU (the GPU run is the same code with --device cuda)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

# The whole pipeline (capture, solve, execute, profile): part of `make test-long`, not of `make test`.
pytestmark = [pytest.mark.slow, pytest.mark.long]

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_validate.py"


def test_gpu_validate_smoke_on_cpu(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("gpu_validate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = ["--device", "cpu", "--models", "resnet18", "--batch-sizes", "1", "--stages", "2", "--image-size", "64",
            "--time-limit", "2", "--repeats", "1", "--repeats-profile", "2", "--workers", "1", "--micro-batches", "2", "--random-placements", "1", "--out", str(tmp_path)]
    assert module.main(argv) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    (entry,) = report["models"]
    assert entry["graph"] == "resnet18_b1" and "cpu" in entry["regimes"]
    (stage,) = entry["stage"]
    assert "error" not in stage and stage["max_abs_diff"] <= 1e-5 and stage["measured_makespan_s"] > 0
    methods = [r["method"] for r in entry["placement"]]
    assert methods == ["inc-ilp", "heft", "critical_path_list", "single_device", "random_0"]
    assert all("error" not in r and r["measured_s"] > 0 for r in entry["placement"])
    assert (tmp_path / "report.md").read_text().startswith("# GPU validation")


def test_a_failing_model_and_the_time_budget_leave_a_report(tmp_path):
    """One bad model must not lose the others' rows, and a spent budget skips what is left:
    the GPU run is one shot, under a hard timeout."""
    spec = importlib.util.spec_from_file_location("gpu_validate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = ["--device", "cpu", "--models", "no_such_model", "--batch-sizes", "1", "--out", str(tmp_path)]
    assert module.main(argv) == 0
    (entry,) = json.loads((tmp_path / "report.json").read_text())["models"]
    assert entry["graph"] == "no_such_model_b1" and "no_such_model" in entry["error"]
    assert module.main(argv[:-2] + ["--budget-s", "0", "--out", str(tmp_path)]) == 0
    (entry,) = json.loads((tmp_path / "report.json").read_text())["models"]
    assert "time budget" in entry["skipped"]
    assert "time budget" in (tmp_path / "report.md").read_text()
    assert module._finite({"a": [float("nan"), 1.0, float("inf")]}) == {"a": [None, 1.0, None]}
