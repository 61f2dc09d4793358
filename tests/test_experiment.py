"""Experiments (`incsched.experiment`): config validation, provenance of every row, resumption by
key, reproduction of a deterministic config, and the report, on tiny configs (seconds in all)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from incsched.cli import main
from incsched.experiment.config import ConfigError, load_experiment, shipped_experiments
from incsched.experiment.report import write_report
from incsched.experiment.run import ROWS_FILE, load_run, read_rows, run_experiment
from incsched.train.kernels import adam, apply_in_process, child_environment

TINY = """
name = "tiny"
seeds = [0]
repeats = 1

[[graphs]]
generator = "respect_like"
args = {{ n_nodes = 24 }}
seeds = [{graph_seed}]

[[graphs]]
generator = "ffnn"
args = {{ n_layers = 2, tiles = 2 }}
seeds = [1]

[[problems]]
kind = "stage"
stages = [2]

[[problems]]
kind = "placement"
devices = [2]
comm_ratio = 4.0

[[methods]]
name = "ilp"
time_limit = {ilp_limit}
record_progress = true

[[methods]]
name = "contiguous_params"
time_limit = 5

[[methods]]
name = "heft"
time_limit = 5

[report]
reference = "ilp"

[profiles.quick]
seeds = [1]
"""

#: What every row's provenance must name (issue #15).
PROVENANCE = ("incsched", "git_commit", "libraries", "python", "cpu_model", "cores", "environment_variables", "load_average", "command_line", "seed",
              "stop_reason", "node", "engine", "written_at")


def tiny(tmp_path: Path, name: str = "tiny.toml", graph_seed: int = 3, ilp_limit: float = 10) -> Path:
    path = tmp_path / name
    path.write_text(TINY.format(graph_seed=graph_seed, ilp_limit=ilp_limit))
    return path


def run_text(tmp_path: Path, text: str):
    """Run the config ``text`` into ``tmp_path/run``: (config path, run folder, summary, rows)."""
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)
    out = tmp_path / "run"
    summary = run_experiment(load_experiment(cfg), out)
    return cfg, out, summary, load_run(out)[1]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One run of the tiny config, shared: (config path, run folder, summary)."""
    tmp = tmp_path_factory.mktemp("tiny")
    cfg = tiny(tmp)
    out = tmp / "run"
    summary = run_experiment(load_experiment(cfg), out, argv=["incsched", "experiment", "run", str(cfg)])
    return cfg, out, summary


# ---------------------------------------------------------------------------- config validation


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace('name = "tiny"', 'name = "tiny"\nrepeat = 2'), "repeat: unknown key"),
    (lambda t: t.replace("time_limit = 10", "time_limit = -1"), "methods[0].time_limit"),
    (lambda t: t.replace('name = "heft"', 'name = "hefty"'), "methods[2].name: unknown method 'hefty'"),
    (lambda t: t.replace('generator = "ffnn"', 'generator = "mlp"'), "graphs[1].generator"),
    (lambda t: t.replace("n_layers = 2", "layers = 2"), "graphs[1].args.layers"),
    (lambda t: t.replace('kind = "stage"', 'kind = "stages"'), "problems[0].kind"),
    (lambda t: t.replace("stages = [2]", "stages = [0]"), "problems[0].stages"),
    (lambda t: t.replace("comm_ratio = 4.0", "comm_ratio = 4.0\nbandwidth = 1e9"), "problems[1]: give exactly one"),
    (lambda t: t.replace('reference = "ilp"', 'reference = "cold"'), "report.reference"),
    (lambda t: t.replace("seeds = [0]", "seeds = [-1]"), "seeds"),
    (lambda t: t.replace("repeats = 1", "repeats = true"), "repeats: must be a whole number"),
    (lambda t: t.replace("[[graphs]]", "[[graph]]", 1), "graph: unknown key"),
    (lambda t: t + "\n[[graphs]]\nshipped = ['resnet5']\n", "graphs[2].shipped: no shipped graph 'resnet5'"),
    (lambda t: t.replace("args = { n_nodes = 24 }", "args = { n_nodes = 24 "), "not valid TOML"),
    (lambda t: t.replace("stages = [2]", 'stages = [2]\nobjective = "speed"'), "problems[0].objective: must be"),
    (lambda t: t.replace("stages = [2]", "stages = [2]\nmemory = 1000"), "problems[0].memory: belongs to objective = 'throughput'"),
    (lambda t: t.replace("stages = [2]", 'stages = [2]\nobjective = "memory"\nalpha = 3'), "problems[0].objective: 'memory' is an objective"),
])
def test_bad_config_names_the_key(tmp_path, edit, key):
    cfg = tiny(tmp_path)
    cfg.write_text(edit(cfg.read_text()))
    with pytest.raises(ConfigError) as err:
        load_experiment(cfg)
    assert key in str(err.value) and "tiny.toml" in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_config_from_the_cli_is_one_line(tmp_path, capsys):
    cfg = tiny(tmp_path)
    cfg.write_text(cfg.read_text().replace("time_limit = 10", "time_limit = 0"))
    assert main(["experiment", "run", str(cfg), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("incsched: error: tiny.toml: methods[0].time_limit: must be a finite number > 0")
    assert "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # refused before anything ran
    assert main(["experiment", "run", "dopler"]) == 1
    assert "no shipped experiment named 'dopler'" in capsys.readouterr().err
    assert main(["experiment", "run", str(cfg), "--profile", "slow"]) == 1
    assert "profiles: no profile 'slow' (has: quick)" in capsys.readouterr().err
    cfg.write_text(cfg.read_text().replace("time_limit = 0", "time_limit = 10"))
    assert main(["experiment", "run", str(cfg), "-o", str(tmp_path / "out"), "--engine", "slurm"]) == 1
    assert "engine must be one of local, ray, got 'slurm'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_profile_replaces_top_level_keys(tmp_path):
    cfg = tiny(tmp_path)
    base, quick = load_experiment(cfg), load_experiment(cfg, "quick")
    assert (base.seeds, quick.seeds) == ((0,), (1,))
    assert base.digest != quick.digest and quick.profile == "quick"
    cfg.write_text(cfg.read_text() + 'methods = [{ name = "ilp", time_limit = -2 }]\nrepeat = 3\n')
    with pytest.raises(ConfigError, match=r"profiles\.quick\.repeat: unknown key"):
        load_experiment(cfg, "quick")
    cfg.write_text(cfg.read_text().replace("repeat = 3", ""))
    with pytest.raises(ConfigError, match=r"tiny\.toml: profiles\.quick\.methods\[0\]\.time_limit: must be a finite number > 0"):
        load_experiment(cfg, "quick")
    assert load_experiment(cfg).methods[0].time_limit == 10  # the profile's mistake is the profile's


@pytest.mark.slow
def test_stage_cells_take_the_memory_and_throughput_objectives(tmp_path):
    text = TINY.format(graph_seed=3, ilp_limit=10).replace(
        'kind = "stage"\nstages = [2]',
        'kind = "stage"\nstages = [2]\n\n'
        '[[problems]]\nkind = "stage"\nstages = [2]\nobjective = "throughput"\nbandwidth = 1e6\nmemory = 100000000\nmicro_batches = 2\n\n'
        '[[problems]]\nkind = "stage"\nstages = [2]\nobjective = "memory"')
    _, _, _, rows = run_text(tmp_path, text)
    stage = {r["cell"]["instance"]: r["result"] for r in rows
             if r["cell"]["problem"] == "stage" and r["cell"]["method"] == "ilp" and r["cell"]["graph"].startswith("respect_like")}
    assert set(stage) == {"K=2", "K=2 throughput", "K=2 memory"}
    assert stage["K=2 throughput"]["objective"] == stage["K=2 throughput"]["terms"]["stage_time_peak"]
    assert stage["K=2 memory"]["objective"] == stage["K=2 memory"]["terms"]["mem_peak"]
    assert "stage_time_peak" not in stage["K=2"]["terms"]


@pytest.mark.parametrize("name", ["inc_ilp", "respect", "icml24", "doppler", "hsdag", "fidelity", "training"])
def test_shipped_configs_and_their_quick_profiles_check(name):
    assert name in shipped_experiments()
    for profile in (None, "quick"):
        exp = load_experiment(name, profile)
        assert exp.name == name and (exp.methods or exp.executions or exp.trainings)


# ---------------------------------------------------------------------------- rows and provenance


@pytest.mark.slow
def test_every_row_carries_its_provenance(tiny_run):
    cfg, out, summary = tiny_run
    # 2 graphs x (stage: ilp, contiguous_params; placement: ilp, heft)
    assert summary["planned"] == 8 and summary["solved"] == 8 and summary["failed"] == 0
    meta, rows, stale = load_run(out)
    assert len(rows) == 8 and stale == 0
    for row in rows:
        prov = row["provenance"]
        assert all(k in prov for k in PROVENANCE), sorted(set(PROVENANCE) - set(prov))
        assert row["config_hash"] == meta["config_hash"] == load_experiment(cfg).digest
        assert prov["seed"] == row["cell"]["seed"] == 0
        assert prov["stop_reason"] == row["result"]["stop_reason"] in ("optimal", "done")
        assert prov["command_line"] == ["incsched", "experiment", "run", str(cfg)]
        assert prov["libraries"]["ortools"] and prov["cores"] >= 1 and len(prov["load_average"]) == 3
        assert len(row["cell"]["graph_digest"]) == 64
    ilp = [r for r in rows if r["cell"]["method"] == "ilp"]
    assert all(r["result"]["status"] == "optimal" and r["progress"] for r in ilp)
    assert all(r["schedule"]["makespan_s"] > 0 for r in rows if r["cell"]["problem"] == "placement")


@pytest.mark.slow
def test_rerun_reuses_rows_only_while_their_key_holds(tiny_run, tmp_path):
    cfg, out, _ = tiny_run
    again = tmp_path / "again"
    again.mkdir()
    for f in (ROWS_FILE, "experiment.json"):
        (again / f).write_bytes((out / f).read_bytes())
    before = (again / ROWS_FILE).read_bytes()
    summary = run_experiment(load_experiment(cfg), again)
    assert (summary["reused"], summary["solved"]) == (8, 0)
    assert (again / ROWS_FILE).read_bytes() == before
    # Another graph (its generator seed) and another budget (ilp's time limit): only their cells run again.
    changed = tiny(tmp_path, "changed.toml", graph_seed=4, ilp_limit=9)
    summary = run_experiment(load_experiment(changed), again)
    # the respect_like graph's 4 cells and ffnn's 2 ilp cells run again; ffnn's heuristics are kept
    assert (summary["reused"], summary["solved"]) == (2, 6)
    meta, rows, stale = load_run(again)
    assert len(rows) == 8 and stale == 6


@pytest.mark.slow
def test_a_failed_row_is_run_again_and_a_torn_line_is_skipped(tiny_run, tmp_path):
    cfg, out, _ = tiny_run
    again = tmp_path / "again"
    again.mkdir()
    rows = read_rows(out / ROWS_FILE)
    rows[0]["error"], rows[0]["result"] = "RuntimeError: worker died", None
    text = "".join(json.dumps(r) + "\n" for r in rows[1:]) + json.dumps(rows[0]) + "\n" + '{"key": "torn'
    (again / ROWS_FILE).write_text(text)
    summary = run_experiment(load_experiment(cfg), again)
    assert (summary["reused"], summary["solved"]) == (7, 1)
    assert read_rows(again / ROWS_FILE)[-1]["key"] == rows[0]["key"]


@pytest.mark.slow
def test_a_deterministic_config_reproduces_its_numbers(tiny_run, tmp_path):
    cfg, out, _ = tiny_run
    second = tmp_path / "second"
    run_experiment(load_experiment(cfg), second)

    def numbers(folder):
        _, rows, _ = load_run(folder)
        return {r["key"]: ({k: v for k, v in r["result"].items() if k != "timing"}, r.get("answer")) for r in rows}

    first, again = numbers(out), numbers(second)
    assert first == again and len(first) == 8
    assert all(result["reproducible"] for result, _ in first.values())


# ---------------------------------------------------------------------------- report


def test_report_tables_from_rows_without_solving(tiny_run, monkeypatch):
    _, out, _ = tiny_run
    import incsched.front_door

    monkeypatch.setattr(incsched.front_door, "solve", lambda *a, **k: pytest.fail("the report solved something"))
    written = write_report(out, plots=False)
    names = {p.name for p in written}
    assert {"report.md", "summary.csv", "rows.csv"} <= names
    md = (out / "report" / "report.md").read_text()
    assert "## By method" in md and "| ilp | 4 | 4 | 4 | 0.0000% |" in md
    assert "time to optimum, ilp / method" in md
    assert "config hash" in md and "cores" in md
    summary = (out / "report" / "summary.csv").read_text().splitlines()
    assert summary[0].startswith("graph,instance,method") and len(summary) == 1 + 8


@pytest.mark.slow  # matplotlib's import and ten figures: 4-14 s here
def test_report_plots_png_and_svg(tiny_run):
    pytest.importorskip("matplotlib")
    _, out, _ = tiny_run
    written = {p.name for p in write_report(out)}
    for fig in ("anytime", "time_to_optimum", "gaps", "gantt", "split"):
        assert {f"{fig}.png", f"{fig}.svg"} <= written
        assert (out / "report" / f"{fig}.png").read_bytes()[:4] == b"\x89PNG"


def test_report_without_matplotlib_says_how_to_install(tiny_run, monkeypatch, capsys):
    _, out, _ = tiny_run
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["experiment", "report", str(out)]) == 1
    err = capsys.readouterr().err
    assert "pip install 'incsched[experiments]'" in err and err.count("\n") == 1
    assert main(["experiment", "report", str(out / "nowhere")]) == 1
    assert "not an experiment folder" in capsys.readouterr().err


@pytest.mark.slow
def test_core_and_runner_import_without_matplotlib():
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "import incsched, incsched.cli, incsched.experiment.run, incsched.experiment.report\n"
            "assert 'matplotlib.pyplot' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---------------------------------------------------------------------------- executions

EXECUTION = """
name = "tiny_execution"
seeds = [0]

[[executions]]
model = "resnet18"
image_size = 64
devices = ["cpu", "cpu"]
single_device = true
methods = [{ name = "heft", time_limit = 5 }]
timed_runs = 1
profile_runs = 1
"""


@pytest.mark.slow
def test_execution_cells_measure_placements_and_single_devices(tmp_path):
    cfg, out, summary, rows = run_text(tmp_path, EXECUTION)
    assert (summary["planned"], summary["solved"], summary["failed"]) == (2, 2, 0)
    by = {r["cell"]["method"]: r for r in rows}
    assert set(by) == {"heft", "only cpu"}
    for r in rows:
        v = r["validation"]
        assert v["max_abs_diff"] == 0 and v["measured"]["makespan_s"] > 0 and v["predicted"]["makespan_s"] > 0
        assert all(k in r["provenance"] for k in PROVENANCE) and r["cell"]["nodes"] > 50
    assert by["heft"]["result"]["stop_reason"] == by["heft"]["provenance"]["stop_reason"]
    text = (Path(write_report(out, plots=False)[0])).read_text()
    assert "## Executed on real devices" in text and "| resnet18 | placement on cpu,cpu | only cpu |" in text
    assert run_experiment(load_experiment(cfg), out)["reused"] == 2


# ---------------------------------------------------------------------------- training

# graphs of 20-40 ops, not the defaults (20-80 to imitate, 40-99 for RL): four child trainings run
TRAINING = """
name = "tiny_training"
seeds = [0]
repeats = 2

[[trainings]]
policy = "placement"
kernels = ["native", "portable"]
config = { imitation_graphs = 2, imitation_epochs = 2, rl_epochs = 1, rl_graphs_per_epoch = 2, validation_graphs = 2, label_time_limit = 0.0, imitation_ops = [20, 40], rl_ops = [20, 40], rl_samples = 2 }
"""

STAGE_TRAINING = """
name = "tiny_stage_training"
seeds = [3]

[[trainings]]
policy = "stage"
config = { n_graphs = 5, n_validation = 2, min_nodes = 12, max_nodes = 20, ks = [2], hidden = 8, n_layers = 1, decoder_hidden = 8, imitation_epochs = 2, rl_epochs = 1, rl_samples = 2, label_time_limit = 0.05, label_cache = "" }
"""


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace('policy = "placement"', 'policy = "gpu"'), "trainings[0].policy: must be 'placement' or 'stage', got 'gpu'"),
    (lambda t: t.replace("imitation_graphs = 2", "seed = 2"), "trainings[0].config.seed: use seeds"),
    (lambda t: t.replace("imitation_graphs = 2", "graphs = 2"), "trainings[0].config.graphs: not a PlacementTrainConfig field"),
    (lambda t: t.replace("imitation_graphs = 2", "imitation_graphs = 2.5"), "trainings[0].config.imitation_graphs: must be a whole number, got 2.5"),
    (lambda t: t.replace('policy = "placement"', 'policy = "stage"'), "trainings[0].config.imitation_graphs: not a StageTrainConfig field"),
    (lambda t: t.replace('"portable"]', '"avx512"]'), "trainings[0].kernels: unknown setting 'avx512' (settings: native, avx2, portable)"),
    (lambda t: t.replace('"portable"]', '"native"]'), "trainings[0].kernels: a setting named twice (settings: native, avx2, portable)"),
    (lambda t: t.replace('policy = "placement"', 'policy = "stage"').replace("imitation_graphs = 2, imitation_epochs = 2, rl_epochs = 1, rl_graphs_per_epoch = 2, validation_graphs = 2, label_time_limit = 0.0, imitation_ops = [20, 40], rl_ops = [20, 40], rl_samples = 2", "threads = 2"),
     "trainings[0].config.threads: the portable kernels run one thread, got 2"),
    (lambda t: t.replace('kernels = ["native", "portable"]', "kernels = []"), "trainings[0].kernels: at least one setting (settings: native, avx2, portable)"),
])
def test_bad_training_config_names_the_key(tmp_path, edit, key):
    cfg = tmp_path / "train.toml"
    cfg.write_text(edit(TRAINING))
    with pytest.raises(ConfigError, match="^train.toml: " + re.escape(key) + "$"):
        load_experiment(cfg)


def test_a_child_gets_exactly_its_kernel_setting():
    base = {"PATH": "/bin", "ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX512", "OMP_NUM_THREADS": "2"}
    native = child_environment("native", base)
    assert native == {"PATH": "/bin", "INCSCHED_KERNELS": "native"}  # nothing inherited that picks kernels
    portable = child_environment("portable", base)
    assert portable["ATEN_CPU_CAPABILITY"] == "default" and portable["MKL_CBWR"] == "COMPATIBLE"
    assert portable["OMP_NUM_THREADS"] == "1" and portable["PATH"] == "/bin"
    with pytest.raises(ValueError, match="kernels must be one of native, avx2, portable, got 'sse'"):
        child_environment("sse", base)
    with pytest.raises(RuntimeError, match="must be set before torch loads"):
        apply_in_process("portable")  # this process was not started under it


def test_portable_training_takes_adams_fused_kernel(monkeypatch):
    import torch

    params = [torch.nn.Parameter(torch.zeros(3))]
    assert not adam(params, lr=0.1).defaults.get("fused")
    for k, v in child_environment("portable", {}).items():
        monkeypatch.setenv(k, v)
    assert adam(params, lr=0.1).defaults["fused"] is True


@pytest.mark.long
@pytest.mark.slow
def test_training_repeats_byte_for_byte_under_each_kernel_setting(tmp_path):
    cfg, out, summary, rows = run_text(tmp_path, TRAINING)
    assert (summary["solved"], summary["failed"]) == (4, 0), [r["error"] for r in rows]
    by = {}
    for r in rows:
        by.setdefault(r["cell"]["kernels"], []).append(r["result"])
    for kernels, (first, second) in by.items():
        assert first["weights_sha256"] == second["weights_sha256"] and first["epochs"] == second["epochs"]
        assert (out / first["checkpoint"]).is_file() and first["checkpoint"] != second["checkpoint"]
        assert first["shipped_config"] is False and first["validation_metric"] == "val_ratio_to_cpl" and first["validation"] > 0
        assert first["kernels"]["setting"] == kernels
    # the child really ran under its setting: ATen's scalar kernels, deterministic algorithms, MKL's COMPATIBLE branch
    portable, native = by["portable"][0]["kernels"], by["native"][0]["kernels"]
    assert portable["aten_capability"] == "DEFAULT" and portable["deterministic_algorithms"] == "True" and portable["adam"] == "fused"
    assert portable["MKL_CBWR"] == "COMPATIBLE" and portable["ONEDNN_MAX_CPU_ISA"] == "SSE41"
    assert "MKL_CBWR" not in native and native["deterministic_algorithms"] == "False"
    text = write_report(out, plots=False)[0].read_text()
    assert "| placement | portable | 2 | yes | 1 |" in text and "| placement | native | 2 | yes | 1 |" in text
    assert "placement, seed 0:" in text
    assert run_experiment(load_experiment(cfg), out)["reused"] == 4


@pytest.mark.long
@pytest.mark.slow
def test_stage_policy_trains_in_an_experiment(tmp_path):
    from incsched.policy.stage_policy import load_stage_policy

    _, out, summary, rows = run_text(tmp_path, STAGE_TRAINING)
    assert (summary["solved"], summary["failed"]) == (1, 0), rows[0]["error"]
    (row,) = rows
    res = row["result"]
    assert row["cell"]["policy"] == "stage" and row["cell"]["seed"] == 3
    assert res["validation_metric"] == "val_ratio_to_label" and res["validation"] >= 1.0  # the labels are CP-SAT's best
    assert res["labels"]["n"] == 5 and res["shipped_config"] is False and res["shipped_weights"] is False
    policy, meta = load_stage_policy(out / res["checkpoint"])
    assert meta["train_config"]["seed"] == 3 and meta["train_config"]["n_graphs"] == 5
    assert "val_ratio_to_label" in write_report(out, plots=False)[0].read_text()


# ---------------------------------------------------------------------------- results pages (publish)


def test_publish_writes_a_page_with_its_command_machine_and_versions(tiny_run, tmp_path):
    from incsched.cli import main
    from incsched.experiment.report import INDEX

    _, out, _ = tiny_run
    dest = tmp_path / "results"
    (dest / "tiny").mkdir(parents=True)
    (dest / "tiny" / "stale.png").write_bytes(b"old")  # a figure an earlier run drew and this one does not
    assert main(["experiment", "report", str(out), "--no-plots", "--publish", str(dest)]) == 0
    page = (dest / "tiny.md").read_text()
    assert page.startswith("<!-- incsched results page {") and "\n# tiny (profile" not in page
    assert "## Reproduce" in page and "incsched experiment run tiny.toml -o out/experiments/tiny" in page
    assert f"--publish {dest}" in page and "Run as `incsched experiment run" in page
    machine = page.split("## Machine and versions", 1)[1]
    for needle in ("- CPU: ", " cores", "load (1-minute average) while rows were written: ", "- build", "git ", "| Python |", "| OR-Tools |",
                   "| numpy |"):
        assert needle in machine, needle
    assert "commit none" not in page
    assert not (dest / "tiny").exists()  # no figures this time: the old one and its folder are gone
    index = (dest / INDEX).read_text()
    assert "| [tiny](tiny.md) |" in index and "proven optimal" in index


def test_publish_keeps_other_pages_in_the_index(tiny_run, tmp_path):
    from incsched.experiment.report import INDEX, publish

    _, out, _ = tiny_run
    dest = tmp_path / "results"
    dest.mkdir()
    (dest / "notes.md").write_text("# not a results page\n")  # written by hand: not listed, not touched
    publish(out, dest, figures=[])
    text = (dest / "tiny.md").read_text().replace('"name": "tiny"', '"name": "other"')
    (dest / "other.md").write_text(text)
    publish(out, dest, figures=[])
    index = (dest / INDEX).read_text()
    assert "[other](other.md)" in index and "[tiny](tiny.md)" in index and "notes.md" not in index
    assert (dest / "notes.md").read_text() == "# not a results page\n"


def test_claims_say_so_when_the_run_has_no_such_instance():
    from incsched.experiment.report import CLAIMS

    assert set(CLAIMS) == {"inc_ilp", "respect", "icml24", "doppler", "hsdag"}
    for name, claim in CLAIMS.items():
        rows = claim.figures([], [], [])
        assert rows and all(len(r) == 4 and all(isinstance(x, str) and x for x in r) for r in rows), name
        assert "arXiv:" in claim.citation
        assert any(q in rows[0][1] for q in ('"', "11,343,865")), name  # the paper's own words, quoted


def test_build_identity_names_a_checkout_or_an_installed_build():
    from incsched.experiment import provenance

    build = provenance.build_identity()
    assert build["version"] and len(build["files_sha256"]) == 64 and build["files"] > 50
    if provenance.git_commit()[0]:
        assert build["install"] == "checkout" and build["label"].startswith(f"git {build['git_commit'][:12]}")
    wheel = {**build, "git_commit": None, "git_dirty": None, "diff_sha256": None, "install": "wheel", "distribution": "0.1.0"}
    label = provenance.build_label({"build": wheel})
    assert label == f"incsched 0.1.0 (wheel, no git checkout): package files sha256 {build['files_sha256'][:16]}"
    # rows written before builds were recorded say so rather than "commit none"
    assert "not recorded" in provenance.build_label({"incsched": "0.1.0", "git_commit": None})


@pytest.mark.slow  # builds and unpacks a wheel: 30-60 s
def test_an_installed_wheel_names_its_build_without_a_checkout(tmp_path):
    import os
    import shutil

    from incsched import __version__ as version

    root = Path(__file__).resolve().parent.parent
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, source / name)
    for folder in ("incsched", "solvers", "data"):
        shutil.copytree(root / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)],
                   check=True, cwd=tmp_path, timeout=300)
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(next((tmp_path / "dist").glob("incsched-*.whl")))],
                   check=True, timeout=300)
    code = ("import json, sys; sys.path.insert(0, sys.argv[1])\n"
            "import incsched\n"
            "from incsched.experiment.provenance import environment\n"
            "env = environment()\n"
            "print(json.dumps({'package': incsched.__file__, 'commit': env['git_commit'], 'build': env['build']}))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    run = subprocess.run([sys.executable, "-s", "-c", code, str(site)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(out["package"]).is_relative_to(site) and out["commit"] is None
    build = out["build"]
    assert build["install"] == "wheel" and build["distribution"] == version and len(build["files_sha256"]) == 64
    assert build["label"] == f"incsched {version} (wheel, no git checkout): package files sha256 {build['files_sha256'][:16]}"


# ---------------------------------------------------------------------------- bounded before expanding, rows that are not rows (issue 24)


SMALL = """
name = "small"
seeds = [0]
repeats = 1

[[graphs]]
generator = "respect_like"
args = {{ n_nodes = {n_nodes} }}
seeds = [1]

[[problems]]
kind = "stage"
stages = [2]

[[methods]]
name = "contiguous_params"
time_limit = 5
"""


@pytest.mark.parametrize("n_nodes, message", [
    ("1000000000000", "graphs[0].args: respect_like(n_nodes=1000000000000) makes 1,000,000,000,000 nodes, more than the limit of "
                      "2,000,000 (set INCSCHED_MAX_NODES to raise it)"),
    ('"many"', "graphs[0].args.n_nodes: must be a whole number, got 'many'"),
    ("5000000", "graphs[0].args: respect_like(n_nodes=5000000) makes 5,000,000 nodes, more than the limit of 2,000,000"),
    ("0", "graphs[0].args.n_nodes: must be at least 1, got 0"),
    ("2.5", "graphs[0].args.n_nodes: must be a whole number, got 2.5"),
])
def test_generator_arguments_are_checked_when_the_config_loads(tmp_path, n_nodes, message):
    # n_nodes = 10**12 was a 42.6 TiB _ArrayMemoryError, "many" a TypeError, 5,000,000 nodes 2.6 GB and running at 60 s
    import time

    cfg = tmp_path / "small.toml"
    cfg.write_text(SMALL.format(n_nodes=n_nodes))
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        load_experiment(cfg)
    assert time.perf_counter() - start < 5 and "\n" not in str(err.value)
    assert str(err.value).startswith("small.toml: ") and message in str(err.value), str(err.value)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("repeats = 1", f"repeats = {2**63 - 1}"),
     "small.toml: repeats: the grid has 9,223,372,036,854,775,807 cells (1 graphs x 1 problem instances and methods x 1 seeds x "
     "9,223,372,036,854,775,807 repeats), more than the limit of 100,000 (set INCSCHED_MAX_EXPERIMENT_CELLS to raise it)"),
    (lambda t: t.replace("seeds = [0]", f"seeds = {list(range(10))}").replace("repeats = 1", "repeats = 100000")
               .replace("seeds = [1]", f"seeds = {list(range(10))}").replace("stages = [2]", f"stages = {list(range(2, 17))}"),
     "small.toml: repeats: the grid has 150,000,000 cells (10 graphs x 15 problem instances and methods x 10 seeds x 100,000 repeats)"),
    pytest.param(lambda t: t.replace("seeds = [1]", f"seeds = {list(range(200_001))}"), "small.toml: graphs: the grid has 200,001 cells",
                 marks=pytest.mark.slow),  # TOML reads 200,001 seeds in about a second
])
def test_the_grid_is_counted_before_it_is_expanded(tmp_path, edit, message):
    # repeats = 2**63 - 1 reached 4.7 GB of cells after 90 s without running one
    import resource
    import time

    cfg = tmp_path / "small.toml"
    cfg.write_text(edit(SMALL.format(n_nodes=20)))
    before, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    with pytest.raises(ConfigError) as err:
        load_experiment(cfg)
    assert time.perf_counter() - start < 10 and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_the_cell_limit_is_an_input_limit_and_folders_are_counted_when_listed(tmp_path, monkeypatch):
    from incsched import save_graph
    from incsched.experiment.run import plan
    from incsched.generators import layered_dag

    folder = tmp_path / "graphs"
    for seed in range(3):
        save_graph(layered_dag(8, n_layers=3, seed=seed), folder / f"g{seed}.json")
    cfg = tmp_path / "small.toml"
    cfg.write_text(SMALL.format(n_nodes=20) + f'\n[[graphs]]\nfolder = "{folder}"\n')
    monkeypatch.setenv("INCSCHED_MAX_EXPERIMENT_CELLS", "3")
    exp = load_experiment(cfg)  # one graph generated, the folder counted as one: 2 cells
    with pytest.raises(ConfigError, match=r"^small.toml: graphs: the grid has 4 cells .*more than the limit of 3 "):
        plan(exp)  # the folder holds 3: refused at its second file, before expanding it
    monkeypatch.setenv("INCSCHED_MAX_EXPERIMENT_CELLS", "4")
    assert len(plan(exp).cells) == 4


def test_a_folder_entry_that_is_no_file_is_a_note_of_the_run(tmp_path):
    from incsched import save_graph
    from incsched.experiment.run import plan
    from incsched.generators import layered_dag

    folder = tmp_path / "graphs"
    save_graph(layered_dag(8, n_layers=3, seed=0), folder / "g.json")
    (folder / "broken.json").symlink_to(folder / "gone.json")
    (folder / "dir.json").mkdir()
    cfg = tmp_path / "small.toml"
    cfg.write_text(SMALL.format(n_nodes=20).split("[[graphs]]")[0] + f'[[graphs]]\nfolder = "{folder}"\n'
                   + "[[problems]]" + SMALL.split("[[problems]]")[1])
    the_plan = plan(load_experiment(cfg))
    assert len(the_plan.cells) == 1
    assert the_plan.notes == [f"skipped {folder}/broken.json: a broken symbolic link", f"skipped {folder}/dir.json: a folder, not a graph file"]


BAD_ROW_LINES = [b"null", b"[1, 2]", b"5", b'"row"', b'{"no": "key"}', b'{"key": 3}', b'{"key": "k", "result": [1]}',
                 b'{"key": "k", "cell": 4}', b"\xff\xfe", b"[" * 5000, b"7" * 5000]


@pytest.mark.slow  # three runs and two reports: 4 s here
def test_a_rows_line_that_is_not_a_row_is_left_out_and_kept(tmp_path, caplog):
    # null and [1, 2] made `experiment run` (resuming) and `experiment report` fail with AttributeError
    cfg = tmp_path / "small.toml"
    cfg.write_text(SMALL.format(n_nodes=20))
    out = tmp_path / "run"
    run_experiment(load_experiment(cfg), out)
    rows_file = out / ROWS_FILE
    good = rows_file.read_bytes()
    for bad in BAD_ROW_LINES:
        rows_file.write_bytes(bad + b"\n" + good)
        caplog.clear()
        assert len(read_rows(rows_file)) == 1 and "line 1 " in caplog.text, bad[:20]
        meta, rows, stale = load_run(out)
        assert len(rows) == 1 and stale == 0
    rows_file.write_bytes(b"".join(bad + b"\n" for bad in BAD_ROW_LINES) + good)
    write_report(out)  # the report reads the rows through load_run
    assert main(["experiment", "report", str(out)]) == 0
    summary = run_experiment(load_experiment(cfg), out)  # resuming
    assert summary["reused"] == 1 and summary["solved"] == 0
    cfg.write_text(SMALL.format(n_nodes=21))  # another graph: a row is appended, and the bad lines stay in the file as they were
    run_experiment(load_experiment(cfg), out)
    assert rows_file.read_bytes().startswith(b"".join(bad + b"\n" for bad in BAD_ROW_LINES) + good)
    assert len(read_rows(rows_file)) == 2


@pytest.mark.parametrize("config, message", [
    ("imitation_epochs = -1", "trainings[0].config.imitation_epochs: must be a whole number in 0 .. 1,000,000, got -1"),
    ("rl_samples = 0", "trainings[0].config.rl_samples: must be a whole number in 1 .. 1,000,000, got 0"),
    ("imitation_lr = 0.0", "trainings[0].config.imitation_lr: must be a finite number > 0, got 0.0"),
    ("imitation_ops = [80, 20]", "trainings[0].config.imitation_ops: must be a range [low, high] of whole numbers"),
    ("comm_ratios = []", "trainings[0].config.comm_ratios: must be a non-empty list of numbers, got ()"),
    ("n_devices = 1000", "trainings[0].config.n_devices: must be a whole number in 1 .. 256, got 1000"),
    ("policy = { hidden = 0 }", "trainings[0].config.policy.hidden: must be a whole number in 1 .. 4,096, got 0"),
    ("time_budget_s = -5.0", "trainings[0].config.time_budget_s: must be a finite number > 0, got -5.0"),
])
def test_training_values_out_of_range_are_refused_at_the_config(tmp_path, config, message):
    # imitation_epochs = -1 ran (zero epochs, silently)
    cfg = tmp_path / "train.toml"
    cfg.write_text(f'name = "t"\n[[trainings]]\npolicy = "placement"\nconfig = {{ {config} }}\n')
    with pytest.raises(ConfigError, match="^train.toml: " + re.escape(message)):
        load_experiment(cfg)


@pytest.mark.parametrize("config, message", [
    ("imitation_epochs = -1", "trainings[0].config.imitation_epochs: must be a whole number in 0 .. 1,000,000, got -1"),
    ("ks = [64]", "trainings[0].config.ks: must hold a K of at most 5 (max(2, min_nodes // 4)) so that graphs of 20 nodes have one"),
    ("min_nodes = 50, max_nodes = 10", "trainings[0].config.max_nodes: must be a whole number in 50 .. 1,000,000, got 10"),
    ("rl_samples = 0", "trainings[0].config.rl_samples: must be a whole number in 1"),
])
def test_stage_training_values_out_of_range_are_refused_at_the_config(tmp_path, config, message):
    cfg = tmp_path / "train.toml"
    cfg.write_text(f'name = "t"\n[[trainings]]\npolicy = "stage"\nconfig = {{ {config} }}\n')
    with pytest.raises(ConfigError, match="^train.toml: " + re.escape(message)):
        load_experiment(cfg)


def test_a_row_whose_fields_have_the_wrong_types_is_left_out(tmp_path, caplog):
    # a row with its key but objective "x", a list as cell.graph or as provenance made the summary raise
    from incsched.experiment.run import row_problem

    cfg = tmp_path / "small.toml"
    cfg.write_text(SMALL.format(n_nodes=20))
    out = tmp_path / "run"
    run_experiment(load_experiment(cfg), out)
    good = read_rows(out / ROWS_FILE)[0]
    assert row_problem(good) is None
    for line in ("null", "[1, 2]"):  # were AttributeErrors in `experiment run` (resuming) and `experiment report`
        (out / ROWS_FILE).write_text(line + "\n" + json.dumps(good) + "\n")
        assert read_rows(out / ROWS_FILE) == [good] and len(load_run(out)[1]) == 1
        write_report(out, plots=False)
    edits = [("result", "objective", "x"), ("result", "status", 5), ("result", "timing", [1]), ("cell", "graph", [5]),
             ("cell", "method", [5]), (None, "provenance", [1]), (None, "seconds", "x"), ("result", "terms", [1]), (None, "kind", [1])]
    for where, key, value in edits:
        row = json.loads(json.dumps(good))
        (row[where] if where else row)[key] = value
        (out / ROWS_FILE).write_text(json.dumps(row) + "\n")
        caplog.clear()
        assert read_rows(out / ROWS_FILE) == [] and "line 1 has a" in caplog.text, (where, key)
        write_report(out, plots=False)
