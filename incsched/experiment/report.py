"""Tables from a run folder's rows, without solving again: markdown (``report.md``) and CSV
(``summary.csv`` one line per instance and method, ``rows.csv`` one line per cell), with the
provenance they were measured under; figures from `plots`.

The numbers come from `summary`.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import IncschedError
from ..jsonio import atomic_write_bytes
from .run import load_run
from .summary import execution_table, seconds, speedups, summarise, versus

__all__ = ["write_report", "MATPLOTLIB_HINT"]

MATPLOTLIB_HINT = "plots need matplotlib: pip install 'incsched[experiments]' (or --no-plots for the tables alone)"


# ---------------------------------------------------------------------------- writing


def write_report(folder: str | Path, *, plots: bool = True) -> list[Path]:
    """Write ``report/report.md``, ``report/summary.csv``, ``report/rows.csv`` and (``plots``) the
    figures of a run folder; return the paths written.

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

        figures = draw_all(rows, out)
    text = _markdown(meta, rows, stale, per_instance, per_method, executions, figures)
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
    return written + figures


def _markdown(meta, rows, stale, per_instance, per_method, executions, figures) -> str:
    cfg = meta["config"]
    env = meta["environment"]
    loads = [r["provenance"]["load_average"][0] for r in rows if (r.get("provenance") or {}).get("load_average")]
    lines = [f"# {cfg['name']}" + (f" (profile {cfg['profile']})" if cfg.get("profile") else ""), ""]
    if cfg.get("description"):
        lines += [cfg["description"], ""]
    libs = env.get("libraries", {})
    lines += [
        f"- config hash `{meta['config_hash'][:16]}`, {len(rows)} of {len(meta.get('keys', []))} cells done"
        + (f" ({stale} rows of other configs or versions left out)" if stale else ""),
        f"- incsched {env['incsched']}, commit {(env.get('git_commit') or 'none')[:12]}" + (" (uncommitted changes)" if env.get("git_dirty") else "")
        + f"; Python {env['python']}, OR-Tools {libs.get('ortools')}, torch {libs.get('torch')}, numpy {libs.get('numpy')}",
        f"- {env['cpu_model']}, {env['cores']} cores; 1-min load while rows were written "
        + (f"{min(loads):.2f}-{max(loads):.2f}" if loads else "n/a"),
        f"- last command: `{' '.join(env.get('command_line') or [])}`",
    ]
    at_once = sorted({r.get("cells_at_once") for r in rows if r.get("kind") == "solve" and r.get("cells_at_once")})
    if at_once and at_once != [1]:
        lines.append(f"- solve cells ran {'/'.join(map(str, at_once))} at a time: their wall times disturb each other")
    warm = sorted({r["warm_up_s"] for r in rows if r.get("kind") == "solve" and r.get("warm_up_s") is not None})
    if warm:  # what a first call in a fresh process pays besides its own work
        lines.append(f"- warm-up before the cells (imports, OR-Tools, the learned policies where used, untimed): {_f(warm[0], 2)}"
                     + (f"-{_f(warm[-1], 2)}" if len(warm) > 1 else "") + " s")
    commits = Counter((r.get("provenance") or {}).get("git_commit") or "none" for r in rows)
    if len(commits) > 1:  # rows kept from earlier runs carry their own provenance
        lines.append("- rows by commit: " + ", ".join(f"{c[:12]} ({n})" for c, n in commits.most_common()))
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
        lines += [f"![{p.stem}]({p.name})" for p in figures if p.suffix == ".png"]
    return "\n".join(lines) + "\n"


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
        "error": r.get("error"), "incsched": prov.get("incsched"), "git_commit": prov.get("git_commit"), "cpu_model": prov.get("cpu_model"),
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
