"""Tables from a run folder's rows, without solving again: markdown (``report.md``) and CSV
(``summary.csv`` one line per instance and method, ``rows.csv`` one line per cell), with the
provenance they were measured under; figures from `plots`. ``publish`` copies the page and its
figures into a results folder (``docs/results/NAME.md``, ``docs/results/NAME/``) and rewrites
that folder's index.

A seed paper's experiment opens with the paper's headline claim, quoted and cited, beside our
figure on the same kind of instance (`CLAIMS`). The numbers come from `summary`.

    python -m incsched.experiment.report out/experiments/inc_ilp-quick --publish docs/results
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import IncschedError
from ..jsonio import atomic_write_bytes
from .provenance import build_label
from .run import load_run
from .summary import execution_table, seconds, speedups, summarise, versus

__all__ = ["write_report", "publish", "write_index", "CLAIMS", "Claim", "MATPLOTLIB_HINT", "INDEX"]

MATPLOTLIB_HINT = "plots need matplotlib: pip install 'incsched[experiments]' (or --no-plots for the tables alone)"

#: The command that writes a results page; `incsched experiment report` takes the same arguments.
REPORT_COMMAND = "incsched experiment report"

#: A results folder's index, rewritten by every `publish`.
INDEX = "README.md"

#: Shipped experiments in the order the index lists them (others follow by name).
ORDER = ("inc_ilp", "respect", "icml24", "doppler", "hsdag", "fidelity", "training")


# ---------------------------------------------------------------------------- writing


def write_report(folder: str | Path, *, plots: bool = True, publish_to: str | Path | None = None) -> list[Path]:
    """Write ``report/report.md``, ``report/summary.csv``, ``report/rows.csv`` and (``plots``) the
    figures of a run folder; with ``publish_to``, also the results page (`publish`). Return the
    paths written.

    Raises
    ------
    IncschedError
        Not a run folder, or ``plots`` without matplotlib (the message says how to install it).
    """
    folder = Path(folder)
    meta, rows, stale = load_run(folder)
    if plots:
        try:
            import matplotlib  # noqa: F401 - checked before any table is written
        except ImportError:
            raise IncschedError(MATPLOTLIB_HINT) from None
    out = folder / "report"
    out.mkdir(exist_ok=True)
    per_instance, per_method = summarise(rows)
    executions = execution_table(rows)
    written = []
    figures: list[Path] = []
    if plots:
        from .plots import draw_all

        for old in out.iterdir():  # a figure these rows no longer call for must not outlive them
            if old.suffix in (".png", ".svg") and old.is_file():
                old.unlink()
        figures = draw_all(rows, out)
    text = _markdown(meta, rows, stale, per_instance, per_method, executions, figures, folder=folder)
    atomic_write_bytes(out / "report.md", text.encode("utf-8"))
    written.append(out / "report.md")
    if per_instance:
        atomic_write_bytes(out / "summary.csv", _csv(per_instance))
        written.append(out / "summary.csv")
    if executions:
        atomic_write_bytes(out / "executions.csv", _csv(executions))
        written.append(out / "executions.csv")
    atomic_write_bytes(out / "rows.csv", _csv([_flat_row(r) for r in rows]))
    written.append(out / "rows.csv")
    written += figures
    if publish_to is not None:
        written += publish(folder, publish_to, figures=figures, _parts=(meta, rows, stale, per_instance, per_method, executions))
    return written


def publish(folder: str | Path, dest: str | Path, *, figures: list[Path] | None = None, _parts=None) -> list[Path]:
    """Write a run folder's results page into ``dest``: ``dest/NAME.md`` (NAME: the experiment's),
    its PNG figures under ``dest/NAME/`` (the folder's old figures removed first) and the index
    ``dest/README.md``; return the paths written. ``figures``: those `write_report` drew (default:
    the PNGs already in ``folder/report``)."""
    folder, dest = Path(folder), Path(dest)
    meta, rows, stale, per_instance, per_method, executions = _parts or _summaries(folder)
    name = _page_name(meta["config"]["name"])
    if figures is None:
        figures = sorted((folder / "report").glob("*.png"))
    pngs = [f for f in figures if f.suffix == ".png"]
    fig_dir = dest / name
    dest.mkdir(parents=True, exist_ok=True)
    if fig_dir.is_dir():
        for old in fig_dir.iterdir():
            if old.is_file() and old.suffix in (".png", ".svg"):
                old.unlink()
    written = []
    if pngs:
        fig_dir.mkdir(exist_ok=True)
        for f in pngs:
            shutil.copyfile(f, fig_dir / f.name)
            written.append(fig_dir / f.name)
    elif fig_dir.is_dir() and not any(fig_dir.iterdir()):
        fig_dir.rmdir()
    text = _markdown(meta, rows, stale, per_instance, per_method, executions, pngs, folder=folder, figure_prefix=f"{name}/",
                     published=dest)
    atomic_write_bytes(dest / f"{name}.md", text.encode("utf-8"))
    written.insert(0, dest / f"{name}.md")
    written.append(write_index(dest))
    return written


def _summaries(folder: Path):
    meta, rows, stale = load_run(folder)
    per_instance, per_method = summarise(rows)
    return meta, rows, stale, per_instance, per_method, execution_table(rows)


def _page_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".") or "experiment"


def write_index(dest: str | Path) -> Path:
    """Rewrite ``dest/README.md``: one line per results page in ``dest`` (read from the summary
    each page carries in its first line), shipped experiments first."""
    dest = Path(dest)
    pages = []
    for page in dest.glob("*.md"):
        if page.name == INDEX:
            continue
        first = page.read_text(encoding="utf-8").split("\n", 1)[0]
        m = re.fullmatch(r"<!-- incsched results page (\{.*\}) -->", first)
        if m:
            pages.append((page, json.loads(m.group(1))))
    pages.sort(key=lambda pm: (ORDER.index(pm[1]["name"]) if pm[1]["name"] in ORDER else len(ORDER), pm[1]["name"]))
    lines = ["# Results", "",
             "One page per experiment, each written from its run's rows by "
             f"`{REPORT_COMMAND} RUN_FOLDER --publish docs/results` (`make experiments` runs every quick profile and "
             "publishes it). Each page gives the command that reproduces it, the machine and the library versions; "
             "a seed paper's page opens with the paper's claim beside ours. Do not edit the pages by hand.", "",
             "| experiment | what it measures | profile | our headline figure | machine | run |",
             "|---|---|---|---|---|---|"]
    for page, m in pages:
        lines.append(f"| [{m['name']}]({page.name}) | {_cell(m.get('description'))} | {m.get('profile') or 'default'} | "
                     f"{_cell(m.get('headline'))} | {_cell(m.get('machine'))} | {_cell((m.get('started') or '')[:10])} |")
    path = dest / INDEX
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"))
    return path


def _cell(text) -> str:
    return "" if text is None else str(text).replace("|", "\\|").replace("\n", " ")


# ---------------------------------------------------------------------------- the page


def _markdown(meta, rows, stale, per_instance, per_method, executions, figures, *, folder: Path, figure_prefix: str = "",
              published: Path | None = None) -> str:
    cfg = meta["config"]
    env = meta["environment"]
    claim = CLAIMS.get(cfg["name"])
    claim_rows = claim.figures(rows, per_instance, executions) if claim else []
    summary = {"name": cfg["name"], "profile": cfg.get("profile"), "description": cfg.get("description") or "",
               "headline": _headline(cfg["name"], claim_rows, rows, per_instance, executions),
               "machine": f"{_short_cpu(env.get('cpu_model'))}, {env.get('cores')} cores",
               "started": min((r["provenance"]["written_at"] for r in rows if (r.get("provenance") or {}).get("written_at")),
                              default=meta.get("started"))}
    lines = [f"<!-- incsched results page {json.dumps(summary, sort_keys=True)} -->",
             f"# {cfg['name']}" + (f" (profile {cfg['profile']})" if cfg.get("profile") else ""), ""]
    if cfg.get("description"):
        lines += [cfg["description"], ""]
    if claim:
        lines += ["## The paper's claim beside ours", ""] + _claim_lines(claim, claim_rows) + [""]
    lines += [f"- {len(rows)} of {len(meta.get('keys', []))} cells done"
              + (f" ({stale} rows of other configs or versions left out)" if stale else "")
              + "; the command, the machine and the versions are at the end of the page"]
    at_once = sorted({r.get("cells_at_once") for r in rows if r.get("kind") == "solve" and r.get("cells_at_once")})
    if at_once and at_once != [1]:
        lines.append(f"- solve cells ran {'/'.join(map(str, at_once))} at a time: their wall times disturb each other")
    warm = sorted({r["warm_up_s"] for r in rows if r.get("kind") == "solve" and r.get("warm_up_s") is not None})
    if warm:  # what a first call in a fresh process pays besides its own work
        lines.append(f"- warm-up before the cells (imports, OR-Tools, the learned policies where used, untimed): {_f(warm[0], 2)}"
                     + (f"-{_f(warm[-1], 2)}" if len(warm) > 1 else "") + " s")
    lines += [f"- note: {n}" for n in meta.get("notes", [])]
    errors = [r for r in rows if r.get("error")]
    lines += [f"- failed: {r['cell']['graph']} {r['cell']['instance']} {r['cell']['method']}: {r['error']}" for r in errors]
    if per_method:
        ref = cfg.get("report", {}).get("reference")
        vs = versus(per_instance, ref) if ref else {}
        sp = speedups(per_instance, ref) if ref else {}
        head = ("| method | instances | proven optimal | at best known | mean above best known | worst | mean gap | median s | total s |"
                + (f" objective / {ref} (mean; n) |" if vs else "") + (f" time to optimum, {ref} / method (total; median; n) |" if sp else ""))
        lines += ["", "## By method", "", head, "|---|" + "---:|" * (head.count("|") - 2)]
        for m in per_method:
            line = (f"| {m['method']} | {m['instances']} | {m['proven_optimal']} | {m['at_best_known']} | {_pct(m['mean_excess'])} | "
                    f"{_pct(m['worst_excess'])} | {_pct(m['mean_gap'])} | {_f(m['median_seconds'], 3)} | {_f(m['total_seconds'], 2)} |")
            if vs:
                v = vs.get(m["method"])
                line += f" {v[0]:.4f}; {v[1]} |" if v else " |"
            if sp:
                t = sp.get(m["method"])
                line += f" {t[0]:.2f}x; {t[1]:.2f}x; {t[2]} |" if t else " |"
            lines.append(line)
        lines += ["", "## By instance", "",
                  "| graph | nodes | instance | method | runs | status | objective | above best known | gap | seconds | pre-schedule s | stopped |",
                  "|---|---:|---|---|---:|---|---:|---:|---:|---:|---:|---|"]
        for p in per_instance:
            obj = _n(p["objective"]) + ("" if p["objective"] == p["objective_max"] else f"-{_n(p['objective_max'])}")
            best = "" if p["ratio"] is None else _pct(p["ratio"] - 1) + (" (of the optimum)" if p["best_proven"] else "")
            lines.append(f"| {p['graph']} | {p['nodes']} | {p['instance']} | {p['method']} | {p['runs']} | {p['status']} | {obj} | {best} | "
                         f"{_pct(p['gap'])} | {_f(p['seconds'], 3)} | {_f(p['preschedule_seconds'], 3)} | {p['stop']} |")
    if executions:
        lines += ["", "## Executed on real devices", "",
                  "| model | devices | placement | seed | predicted ms | measured ms | measured / predicted | speed-up vs best single device | max abs diff |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|"]
        for e in executions:
            if e["error"]:
                lines.append(f"| {e['model']} | {e['instance']} | {e['method']} | {e['seed']} | failed: {e['error']} | | | | |")
                continue
            lines.append(f"| {e['model']} | {e['instance']} | {e['method']} | {e['seed']} | {_f(1e3 * e['predicted_s'], 2)} | "
                         f"{_f(1e3 * e['measured_s'], 2)} | {_f(e['measured_over_predicted'], 3)} | {_f(e['speedup_vs_single_device'], 3)} | "
                         f"{e['max_abs_diff']:.2g} |")
    trained = [r for r in rows if r.get("kind") == "train"]
    if trained:
        lines += ["", "## Training", ""] + _training_lines(trained)
    if figures:
        lines += ["", "## Figures", ""]
        lines += [f"![{p.stem}]({figure_prefix}{p.name})" for p in figures if p.suffix == ".png"]
    lines += ["", "## Reproduce", ""] + _reproduce_lines(meta, folder, published)
    lines += ["", "## Machine and versions", ""] + _machine_lines(meta, rows)
    return "\n".join(lines) + "\n"


def _reproduce_lines(meta: dict, folder: Path, published: Path | None) -> list[str]:
    """The commands that give this page again, and whether the shipped config still is the one run."""
    cfg = meta["config"]
    env = meta["environment"]
    profile = cfg.get("profile")
    shipped = _shipped_digest(cfg)
    what = cfg["name"] if shipped else cfg.get("source") or "CONFIG.toml"
    run_dir = Path("out", "experiments", cfg["name"] + (f"-{profile}" if profile else "")).as_posix()
    lines = ["```sh",
             f"incsched experiment run {what}" + (f" --profile {profile}" if profile else "") + f" -o {run_dir}",
             f"{REPORT_COMMAND} {run_dir}" + (f" --publish {_shown_path(published)}" if published is not None else ""),
             "```", ""]
    if shipped == meta.get("config_hash"):
        lines.append(f"The shipped config `{cfg['name']}`" + (f", profile `{profile}`," if profile else "")
                     + f" is still the one run here (config hash `{meta['config_hash'][:16]}`).")
    elif shipped:
        lines.append(f"The shipped config `{cfg['name']}` has changed since this run: config hash `{meta['config_hash'][:16]}` "
                     f"here, `{shipped[:16]}` now; the command runs the new one.")
    else:
        lines.append(f"From the config file `{cfg.get('source')}` (config hash `{meta['config_hash'][:16]}`), run from its folder.")
    recorded = " ".join(env.get("command_line") or [])
    if recorded:
        lines.append(f"Run as `{recorded}`.")
    lines.append("A deterministic cell that ends on a proof, on its work budget or by itself (a heuristic) repeats exactly with "
                 "the same versions; wall times, cells stopped by the clock (`stopped: time`) and measured runtimes do not.")
    return lines


def _shipped_digest(cfg: dict) -> str | None:
    """The config hash of the shipped config of this name and profile now, or None (not shipped)."""
    from .config import EXPERIMENTS_DIR, load_experiment

    if cfg.get("source") != f"{cfg['name']}.toml" or not (EXPERIMENTS_DIR / cfg["source"]).is_file():
        return None
    try:
        return load_experiment(cfg["name"], cfg.get("profile")).digest
    except IncschedError:
        return None


def _shown_path(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _machine_lines(meta: dict, rows: list[dict]) -> list[str]:
    """The machine, its load while the rows were written, the build and every library version."""
    env = meta["environment"]
    libs = env.get("libraries", {})
    loads = [r["provenance"]["load_average"][0] for r in rows if (r.get("provenance") or {}).get("load_average")]
    written = sorted(r["provenance"]["written_at"] for r in rows if (r.get("provenance") or {}).get("written_at"))
    nodes = sorted({r["provenance"].get("node") for r in rows if (r.get("provenance") or {}).get("node") not in (None, "driver", "local")})
    lines = [
        f"- CPU: {env.get('cpu_model')}, {env.get('cores')} cores ({env.get('platform')})"
        + (f"; rows also solved on {', '.join(map(str, nodes))}" if nodes else ""),
        "- load (1-minute average) while rows were written: " + (f"{min(loads):.2f}-{max(loads):.2f}" if loads else "not recorded"),
        (f"- rows written {written[0]} to {written[-1]}; " if written else "- ")
        + f"the folder's last `incsched experiment run` started {meta.get('started') or 'at a time not recorded'}",
    ]
    # the rows' own builds: a rerun that reused rows ran under the last command's build, not theirs
    builds = Counter(build_label(r["provenance"]) for r in rows if r.get("provenance"))
    if len(builds) > 1:
        lines.append("- build, by rows: " + "; ".join(f"{b} ({n} rows)" for b, n in builds.most_common()))
    else:
        lines.append(f"- build: {next(iter(builds)) if builds else build_label(env)}")
    variables = env.get("environment_variables") or {}
    if variables:
        lines.append("- kernel environment: " + ", ".join(f"`{k}={v}`" for k, v in sorted(variables.items())))
    lines += ["", "| library | version |", "|---|---|", f"| Python | {env.get('python')} |", f"| incsched | {env.get('incsched')} |"]
    names = {"ortools": "OR-Tools"}
    lines += [f"| {names.get(lib, lib)} | {version} |" for lib, version in libs.items() if version]
    missing = [lib for lib, version in libs.items() if not version]
    if missing:
        lines += ["", f"Not installed: {', '.join(missing)}."]
    return lines


def _short_cpu(cpu: str | None) -> str:
    return re.sub(r"\s*\[.*\]$", "", cpu or "unknown CPU")


def _headline(name: str, claim_rows: list[tuple], rows: list[dict], per_instance: list[dict], executions: list[dict]) -> str:
    """One figure for the index: the claim table's first figure of ours, else the experiment's own."""
    if claim_rows:
        return claim_rows[0][2]
    measured = [e for e in executions if e.get("measured_over_predicted")]
    if measured:
        ratios = [e["measured_over_predicted"] for e in measured]
        return f"measured / predicted makespan {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} executions"
    trained = [r for r in rows if r.get("kind") == "train" and not r.get("error") and r.get("result")]
    if trained:
        groups: dict[tuple, dict[int, set]] = {}
        for r in trained:
            c = r["cell"]
            groups.setdefault((c["method"], c.get("kernels", "native")), {}).setdefault(c["seed"], set()).add(r["result"]["weights_sha256"])
        repeat = sum(all(len(d) == 1 for d in seeds.values()) for seeds in groups.values())
        return (f"{len(trained)} trainings: every repeat gave the same bytes in {repeat} of {len(groups)} training x kernel settings; "
                f"{len({r['result']['weights_sha256'] for r in trained})} distinct checkpoints")
    if per_instance:
        proven = len({(p["graph"], p["instance"]) for p in per_instance if p["best_proven"]})
        return f"{proven} of {len({(p['graph'], p['instance']) for p in per_instance})} instances proven optimal"
    return f"{len(rows)} cells"


# ---------------------------------------------------------------------------- the papers' claims
#
# The config loader refuses keys it does not know, so the claims live here, keyed by experiment
# name. Quotes are from each paper's abstract.

#: (what is compared, the paper's figure, ours from this run's rows, how the instances differ)
ClaimRow = tuple[str, str, str, str]


@dataclass(frozen=True)
class Claim:
    """A seed paper's headline and how to read ours off a run's rows."""

    paper: str
    citation: str
    figures: Callable[[list[dict], list[dict], list[dict]], list[ClaimRow]]


def _claim_lines(claim: Claim, rows: list[ClaimRow]) -> list[str]:
    lines = [f"| | {claim.paper} | ours, this run | how the instances differ |", "|---|---|---|---|"]
    lines += [f"| {_cell(a)} | {_cell(b)} | {_cell(c)} | {_cell(d)} |" for a, b, c, d in rows]
    return lines + ["", f"Source: {claim.citation}"]


def _method_names(rows: list[dict]) -> dict[str, str]:
    """Method label -> the `solve()` method it runs."""
    return {r["cell"]["method"]: r["cell"].get("method_name", r["cell"]["method"]) for r in rows if r.get("kind") == "solve"}


def _by_instance(per_instance: list[dict], rows: list[dict], method: str) -> dict[tuple, dict]:
    names = _method_names(rows)
    return {(p["graph"], p["instance"]): p for p in per_instance if names.get(p["method"]) == method}


def _x(v: float) -> str:
    return f"{v:.0f}x" if v >= 100 else f"{v:.1f}x"


def _inc_ilp_figures(rows, per_instance, executions) -> list[ClaimRow]:
    inc, ilp = _by_instance(per_instance, rows, "inc-ilp"), _by_instance(per_instance, rows, "ilp")
    pairs = [(ilp[k]["proven_seconds"], inc[k]["proven_seconds"]) for k in inc
             if k in ilp and inc[k]["proven_seconds"] is not None and ilp[k]["proven_seconds"] is not None]
    at_optimum = sum(p["best_proven"] and p["objective"] == p["best_known"] for p in inc.values())
    if pairs:
        ratios = [a / max(b, 1e-9) for a, b in pairs]
        ours = (f"cold CP-SAT's time to proven optimum / inc-ilp's: up to {_x(max(ratios))} (median {_x(statistics.median(ratios))}, "
                f"{_x(sum(a for a, _ in pairs) / max(sum(b for _, b in pairs), 1e-9))} in total) over the {len(pairs)} instances both proved; "
                f"inc-ilp at the proven optimum on {at_optimum} of {len(inc)}")
    else:
        ours = f"no instance proved by both inc-ilp and cold CP-SAT (inc-ilp at the proven optimum on {at_optimum} of {len(inc)})"
    return [("exact quality, time to optimum",
             "\"the same scheduling performance compared with using exact scheduling methods while achieving up to 128x speed "
             "improvements\" (ImageNet DNN computation graphs, EdgeTPU platforms)",
             ours,
             "Ours: the shipped real-model graphs (vision and transformer models captured from PyTorch), the RESPECT/ICML'24 peer "
             "objective (100 x the largest stage's parameter bytes + crossed data edges), the profile's K; the exact method is the "
             "same CP-SAT model cold (`ilp`), one deterministic worker each. 'Up to' is the best single instance, as in the paper.")]


def _respect_figures(rows, per_instance, executions) -> list[ClaimRow]:
    rl, exact = _by_instance(per_instance, rows, "rl"), _by_instance(per_instance, rows, "inc-ilp")
    contiguous = _by_instance(per_instance, rows, "contiguous_params")
    vs = [contiguous[k]["objective"] / rl[k]["objective"] for k in rl if k in contiguous and rl[k]["objective"] and contiguous[k]["objective"]]
    first = (f"DeepSpeed's contiguous split's objective / rl's: up to {max(vs):.3f} (mean {statistics.mean(vs):.3f}) over {len(vs)} instances"
             if vs else "no instance with both rl and the contiguous split")
    optimal = [k for k in rl if rl[k]["best_proven"]]
    at = sum(rl[k]["objective"] == rl[k]["best_known"] for k in optimal)
    above = [rl[k]["ratio"] - 1 for k in optimal if rl[k]["ratio"] is not None]
    speed = [exact[k]["seconds"] / max(rl[k]["seconds"], 1e-9) for k in optimal if k in exact and exact[k]["seconds"] and rl[k]["seconds"]]
    second = (f"rl at the proven optimum on {at} of {len(optimal)} instances, mean {100 * statistics.mean(above):.2f}% above it"
              + (f"; the exact method (inc-ilp, to proof) / rl in seconds: up to {_x(max(speed))} (median {_x(statistics.median(speed))})" if speed else "")
              if optimal else "no instance proven optimal in this run")
    return [
        ("learned schedule vs the production partitioner",
         "\"up to ~2.5x real-world on-chip inference runtime speedups over the commercial compiler with ten popular ImageNet models "
         "deployed on the physical Coral Edge TPUs system\"",
         first,
         "Theirs is measured latency on Edge TPUs against the Edge TPU compiler. Ours has no TPU: it is the peer objective (100 x the "
         "largest stage's parameter bytes + crossed data edges, the on-chip cache pressure RESPECT schedules for), with DeepSpeed's "
         "contiguous parameter split standing in for a production compiler: an objective ratio, not a speed-up."),
        ("learned schedule vs exact",
         "\"matches the exact optimal solutions with up to 930x speedups\"",
         second,
         "Theirs times an exact ILP solve against the RL scheduler. Ours times one `solve()` call each (rl: features, encoder, decodes, "
         "the exact DP re-cut, evaluation; exact: inc-ilp to its proof, itself many times faster than a cold exact model, see the "
         "inc_ilp page), on shipped graphs and held-out RESPECT-like graphs."),
    ]


def _icml24_figures(rows, per_instance, executions) -> list[ClaimRow]:
    peer = [r for r in rows if r.get("kind") == "solve" and r["cell"]["graph"] == "rand_graph_1000_1" and r.get("result")]
    names = {r["cell"].get("method_name"): r for r in peer}
    r = names.get("inc-ilp")
    if r is not None and r["result"].get("objective") is not None:
        res = r["result"]
        budget = r["cell"].get("budget") or {}
        limits = f"time limit {_n(budget.get('time_limit'))} s" + (f", work limit {_n(budget['work_limit'])}" if budget.get("work_limit") else "")
        ours = (f"inc-ilp {_n(res['objective'])} in {seconds(r):.1f} s ({limits}; stopped: {res.get('stop_reason')}"
                + (", reproducible" if res.get("reproducible") else "") + f"), proven gap {_pct(res.get('gap'))}")
        other = [(m, x["result"]["objective"]) for m, x in names.items() if m != "inc-ilp" and x["result"].get("objective") is not None]
        ours += "".join(f"; {m} {_n(o)}" for m, o in other)
    else:
        ours = "rand_graph_1000_1 is not in this run (its folder, ../shared/benchmarks/icml24, is optional)"
    return [("rand_graph_1000_1, K=10, alpha 100",
             "the peer's own CP-SAT formulation: 11,343,865 after 120 s, not proven (measured by this project: 2 cores, OR-Tools 9.15, "
             "2 workers); the paper's method: \"surpassing state-of-the-art solutions offered by commercial and open-source solvers such "
             "as CPLEX, Gurobi, and CP-SAT in the majority of the designs\"",
             ours,
             "The same file, K and alpha. The 11,343,865 is the peer's CP-SAT model, not its differentiable (GPU) scheduler; ours runs "
             "under the profile's budget, not 120 s.")]


def _doppler_figures(rows, per_instance, executions) -> list[ClaimRow]:
    # makespan per (graph source, instance) and method; DOPPLER's figures are for 4 GPUs
    span: dict[tuple, dict[str, float]] = {}
    for r in rows:
        res = r.get("result") or {}
        if r.get("kind") == "solve" and res.get("objective") is not None:
            c = r["cell"]
            span.setdefault((c.get("graph_source", c["graph"]), c["instance"]), {})[c.get("method_name", c["method"])] = \
                (res.get("terms") or {}).get("makespan_s", res["objective"])
    baselines = ("critical_path_list", "heft")

    def lower(methods: dict[str, float], m: str) -> float | None:
        base = [methods[b] for b in baselines if b in methods]
        return 1 - methods[m] / min(base) if base and m in methods and min(base) > 0 else None

    parts = []
    for devices in ("D=4", "D=8"):
        for m in ("rl", "inc-ilp"):
            xs = [x for (g, i), ms in span.items() if i == devices and (x := lower(ms, m)) is not None]
            if xs:
                parts.append(f"{m} up to {100 * max(xs):.1f}% (mean {100 * statistics.mean(xs):.1f}%) on {devices[2:]} devices")
    out = [("against the best baseline",
            "\"up to 52.7% lower execution times than the best baseline\"",
            ("makespan below the better of critical-path list and HEFT: " + "; ".join(parts) + f" ({len({g for g, _ in span})} graphs)")
            if parts else "no placement instance with a baseline in this run",
            "Theirs is measured on 4 GPUs (P100) in a work-conserving runtime. Ours are simulated makespans on identical devices, each "
            "schedule run in its solved order, a mean transfer 4x a mean op, on jittered generated graphs of DOPPLER's families (seeds "
            "training never draws).")]
    families = (("ChainMM", "chained_matmul", 230.4, 123.4), ("FFNN", "ffnn", 217.8, 47.4), ("Llama-block", "transformer_block", 230.9, 160.3),
                ("Llama-layer", None, 292.6, 150.6))
    for label, family, cpl, theirs in families:
        found = [(g, ms) for (g, i), ms in span.items() if i == "D=4" and family and g.startswith(f"{family}(") and "critical_path_list" in ms]
        if found:
            g, ms = found[0]
            ours = f"{g.split('(')[0]}, 4 devices: critical-path list {ms['critical_path_list']:.4g} s" + "".join(
                f", {m} {ms[m]:.4g} s ({100 * (ms[m] / ms['critical_path_list'] - 1):+.1f}%)" for m in ("rl", "inc-ilp") if m in ms)
        else:
            ours = "no graph of this family in this run"
        out.append((f"{label}, 4 devices",
                    f"critical-path list {cpl} ms, DOPPLER {theirs} ms ({100 * (theirs / cpl - 1):+.1f}%), as reported",
                    ours,
                    "Theirs: ms measured on 4 P100s. Ours: the simulated makespan of a generated graph of that family, whose op "
                    "times are the generator's own units, not a device's: only the change against critical-path list compares."))
    return out


def _hsdag_figures(rows, per_instance, executions) -> list[ClaimRow]:
    single = {(e["model"], e["instance"], e["method"]): e["measured_s"] for e in executions if e["method"].startswith("only ") and e["measured_s"]}
    parts = []
    for e in executions:
        if e["method"].startswith("only ") or not e["measured_s"]:
            continue
        cpu = single.get((e["model"], e["instance"], "only cpu"))
        if cpu:
            change = 1 - e["measured_s"] / cpu
            parts.append(f"{e['model']} on {e['instance'].split(' on ')[-1]}, {e['method']}: {1e3 * e['measured_s']:.1f} ms against "
                         f"{1e3 * cpu:.1f} ms on the CPU alone ({100 * abs(change):.1f}% {'lower' if change >= 0 else 'higher'} latency)")
    devices = sorted({e["instance"].split(" on ")[-1] for e in executions})
    return [("placement against CPU-only",
             "\"The suggested placements improve the inference speed for the benchmark models by up to 58.2% over CPU execution\"",
             "; ".join(parts) if parts else "no placement measured against the CPU alone in this run",
             "Theirs: CPU + GPU, Inception-V3, ResNet-50 and BERT (OpenVINO graphs), measured. Ours: the devices of this run ("
             + (", ".join(devices) or "none") + "); without a GPU the config places across two CPU worker processes that share this "
             "machine's cores, and 'the CPU alone' is the whole model on one of them.")]


#: The seed papers' headlines, by experiment name.
CLAIMS: dict[str, Claim] = {
    "inc_ilp": Claim("Inc-ILP (Yin & Yu, ICCAD 2023)",
                     "J. Yin, C. Yu. \"Accelerating Exact Combinatorial Optimization via RL-based Initialization -- A Case Study in "
                     "Scheduling.\" ICCAD 2023. arXiv:2308.11652.", _inc_ilp_figures),
    "respect": Claim("RESPECT (Yin, Li, Robinson & Yu, DAC 2023)",
                     "J. Yin, Y. Li, D. Robinson, C. Yu. \"RESPECT: Reinforcement Learning based Edge Scheduling on Pipelined Coral "
                     "Edge TPUs.\" DAC 2023. arXiv:2304.04716.", _respect_figures),
    "icml24": Claim("ICML'24 peer (Liu, Li, Yin, Zhang & Yu, ICML 2024)",
                    "M. Liu, Y. Li, J. Yin, Z. Zhang, C. Yu. \"Differentiable Combinatorial Scheduling at Scale.\" ICML 2024, PMLR 235. "
                    "arXiv:2406.06593; instances from github.com/Yu-Maryland/Differentiable_Scheduler_ICML24 (MIT).", _icml24_figures),
    "doppler": Claim("DOPPLER (Yao et al., ICLR 2026)",
                     "X. Yao, D. Bourgeois, A. Jain, Y. Tang, J. Yao, Z. Ding, A. Silva, C. Jermaine. \"DOPPLER: Dual-Policy Learning "
                     "for Device Assignment in Asynchronous Dataflow Graphs.\" ICLR 2026. arXiv:2505.23131.", _doppler_figures),
    "hsdag": Claim("HSDAG (Duan et al., NeurIPS 2024)",
                   "S. Duan, H. Ping, N. Kanakaris, X. Xiao, P. Kyriakis, N. K. Ahmed, P. Zhang, G. Ma, M. Capota, S. Nazarian, T. L. "
                   "Willke, P. Bogdan. \"A Structure-Aware Framework for Learning Device Placements on Computation Graphs.\" "
                   "NeurIPS 2024. arXiv:2405.14185.", _hsdag_figures),
}


def _training_lines(trained: list[dict]) -> list[str]:
    """Every training run, then per training x kernel setting: whether its repeats gave one
    checkpoint, and per seed whether the settings agreed; the validation measure's spread."""
    ok = [r for r in trained if not r.get("error") and r.get("result")]
    digests = {r["result"]["weights_sha256"] for r in ok}
    lines = [f"{len(trained)} runs, {len(digests)} distinct checkpoint(s).", "",
             "| training | kernels | seed | repeat | weights sha256 | kept epoch | validation | the shipped checkpoint | seconds | CPU |",
             "|---|---|---:|---:|---|---|---:|---|---:|---|"]
    for r in trained:
        c, res, prov = r["cell"], r.get("result") or {}, r.get("provenance") or {}
        kernels = c.get("kernels", "native")
        if r.get("error"):
            lines.append(f"| {c['method']} | {kernels} | {c['seed']} | {c['repeat']} | failed: {r['error']} | | | | | |")
            continue
        shipped = "same bytes" if res["shipped_weights"] else ("same config, other bytes" if res["shipped_config"] else "other config")
        lines.append(f"| {c['method']} | {kernels} | {c['seed']} | {c['repeat']} | `{res['weights_sha256'][:16]}` | {res['selected_epoch']} | "
                     f"{res['validation_metric']} {_f(res['validation'], 4)} | {shipped} | {_f(r.get('seconds'), 1)} | {prov.get('cpu_model')} |")
    groups: dict[tuple, list[dict]] = {}
    for r in ok:
        groups.setdefault((r["cell"]["method"], r["cell"].get("kernels", "native")), []).append(r)
    lines += ["", "| training | kernels | runs | every repeat the same bytes | distinct checkpoints | validation min / mean / max |",
              "|---|---|---:|---|---:|---|"]
    for (label, kernels), rs in groups.items():
        by_seed: dict[int, set] = {}
        for r in rs:
            by_seed.setdefault(r["cell"]["seed"], set()).add(r["result"]["weights_sha256"])
        values = [r["result"]["validation"] for r in rs if r["result"]["validation"] is not None]
        spread = " / ".join(_f(v, 4) for v in (min(values), sum(values) / len(values), max(values))) if values else "-"
        lines.append(f"| {label} | {kernels} | {len(rs)} | {_repeats_agree(by_seed, len(rs))} | "
                     f"{len({r['result']['weights_sha256'] for r in rs})} | {spread} |")
    settings = sorted({k for _, k in groups})
    if len(settings) > 1:
        lines += ["", "Same seed, other kernel settings (a checkpoint shared by two settings is named once):", ""]
        for label in dict.fromkeys(lbl for lbl, _ in groups):
            if sum(lbl == label for lbl, _ in groups) < 2:
                continue  # trained under one setting only: nothing to compare
            for seed in sorted({r["cell"]["seed"] for r in ok if r["cell"]["method"] == label}):
                per = {}
                for r in ok:
                    if r["cell"]["method"] == label and r["cell"]["seed"] == seed:
                        per.setdefault(r["cell"].get("kernels", "native"), set()).add(r["result"]["weights_sha256"][:16])
                classes: dict[tuple, list[str]] = {}
                for k, d in per.items():
                    classes.setdefault(tuple(sorted(d)), []).append(k)
                text = "; ".join(f"{' = '.join(ks)}: {', '.join(f'`{x}`' for x in d)}" for d, ks in classes.items())
                lines.append(f"- {label}, seed {seed}: {len(classes)} distinct across {len(per)} settings ({text})")
    return lines


def _repeats_agree(by_seed: dict[int, set], runs: int) -> str:
    if runs == len(by_seed):
        return "- (one run per seed)"
    return "yes" if all(len(d) == 1 for d in by_seed.values()) else "no"


def _flat_row(r: dict) -> dict[str, Any]:
    c, res, prov = r.get("cell", {}), r.get("result") or {}, r.get("provenance") or {}
    v = r.get("validation") or {}
    return {
        "key": r.get("key"), "kind": r.get("kind"), "graph": c.get("graph"), "graph_digest": c.get("graph_digest"), "nodes": c.get("nodes"),
        "instance": c.get("instance"), "method": c.get("method"), "seed": c.get("seed"), "repeat": c.get("repeat"),
        "time_limit": (c.get("budget") or {}).get("time_limit"), "work_limit": (c.get("budget") or {}).get("work_limit"),
        "status": res.get("status"), "objective": res.get("objective"), "lower_bound": res.get("lower_bound"), "gap": res.get("gap"),
        "stop_reason": prov.get("stop_reason"), "reproducible": res.get("reproducible"), "seconds": seconds(r),
        "preschedule_s": (res.get("timing") or {}).get("preschedule"),
        "predicted_s": (v.get("predicted") or {}).get("makespan_s"), "measured_s": (v.get("measured") or {}).get("makespan_s"),
        "error": r.get("error"), "incsched": prov.get("incsched"), "git_commit": prov.get("git_commit"),
        "build": build_label(prov) if prov else None, "cpu_model": prov.get("cpu_model"),
        "cores": prov.get("cores"), "load_1min": (prov.get("load_average") or [None])[0], "node": prov.get("node"),
        "config_hash": r.get("config_hash"), "written_at": prov.get("written_at"),
    }


def _csv(records: list[dict]) -> bytes:
    buf = io.StringIO()
    if records:
        w = csv.DictWriter(buf, fieldnames=list(records[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(records)
    return buf.getvalue().encode("utf-8")


def _f(x, digits: int) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def _pct(x) -> str:
    return "" if x is None else f"{100 * x:.4f}%"


def _n(x) -> str:
    if x is None:
        return ""
    return f"{x:,}" if isinstance(x, int) else f"{x:,.6g}"
