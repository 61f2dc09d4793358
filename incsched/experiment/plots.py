"""Figures of a run's rows (PNG and SVG, no display needed): anytime curves from the solver's
progress stream, time to proven optimum, gap distributions, a Gantt chart of a placement, the
per-stage memory and time of a split, and measured against predicted runtimes.

Only `report` imports this module, and only when plots are asked for: matplotlib is an extra.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt  # noqa: E402

from .summary import instance_of, seconds, summarise  # noqa: E402

__all__ = ["draw_all"]

plt.rcParams.update({"svg.hashsalt": "incsched", "figure.dpi": 100, "font.size": 8})

#: Instances drawn in the anytime figure (one panel each).
ANYTIME_PANELS = 6
#: Larger placements make an unreadable Gantt chart; the largest at most this size is drawn.
GANTT_MAX_OPS = 400


def draw_all(rows: list[dict], out: Path) -> list[Path]:
    """Every figure the rows have data for; returns the files written (PNG and SVG of each)."""
    written: list[Path] = []
    for name, draw in (("anytime", anytime), ("time_to_optimum", time_to_optimum), ("gaps", gaps), ("gantt", gantt),
                       ("split", split), ("measured", measured)):
        fig = draw(rows)
        if fig is None:
            continue
        for suffix in (".png", ".svg"):
            path = out / f"{name}{suffix}"
            fig.savefig(path, metadata={"Date": None} if suffix == ".svg" else {"Software": None}, bbox_inches="tight")
            written.append(path)
        plt.close(fig)
    return written


def _best_known(rows: list[dict]) -> dict[tuple, float]:
    best: dict[tuple, float] = {}
    for r in rows:
        res = r.get("result") or {}
        if r.get("kind") == "solve" and res.get("objective") is not None:
            best[instance_of(r)] = min(best.get(instance_of(r), math.inf), res["objective"])
    return best


def anytime(rows: list[dict]):
    """Objective and lower bound against wall time, as % from the best known, per instance."""
    with_progress = [r for r in rows if r.get("kind") == "solve" and r.get("progress") and r.get("result")]
    if not with_progress:
        return None
    best = _best_known(rows)
    # the longest runs show the most of a curve
    longest: dict[tuple, float] = defaultdict(float)
    for r in with_progress:
        longest[instance_of(r)] = max(longest[instance_of(r)], seconds(r))
    instances = sorted(longest, key=lambda i: -longest[i])[:ANYTIME_PANELS]
    cols = min(3, len(instances))
    nrows = math.ceil(len(instances) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.0 * nrows), squeeze=False)
    methods = list(dict.fromkeys(r["cell"]["method"] for r in with_progress))
    colour = {m: f"C{i}" for i, m in enumerate(methods)}
    for ax, inst in zip(axes.flat, instances):
        b = best[inst] or 1
        for r in (r for r in with_progress if instance_of(r) == inst and r["cell"]["repeat"] == 0 and r["cell"]["seed"] == r["provenance"]["seed"]):
            res = r["result"]
            events = r["progress"] + [{"elapsed": seconds(r), "objective": res["objective"], "lower_bound": res["lower_bound"]}]
            for field, style in (("objective", "-"), ("lower_bound", "--")):
                pts = [(max(e["elapsed"], 1e-3), 100 * (e[field] / b - 1)) for e in events if e.get(field) is not None]
                pts = _running(pts, lower=field == "objective")
                if pts:
                    xs, ys = zip(*pts)
                    ax.step(xs, ys, style, where="post", marker=".", ms=3, color=colour[r["cell"]["method"]],
                            label=f"{r['cell']['method']} {'objective' if field == 'objective' else 'bound'}")
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=0.01)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_title(f"{inst[0]} {inst[1]}", fontsize=8)
        ax.set_xlabel("wall seconds")
        ax.set_ylabel("% from best known")
    for ax in list(axes.flat)[len(instances):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.suptitle("Anytime: objective (solid) and lower bound (dashed) against wall time")
    fig.tight_layout()
    return fig


def _running(pts: list[tuple[float, float]], lower: bool) -> list[tuple[float, float]]:
    # An answer only improves and a bound only rises: the curves are the running best.
    out: list[tuple[float, float]] = []
    for t, y in sorted(pts):
        if not out or (y < out[-1][1] if lower else y > out[-1][1]):
            out.append((t, y))
    if out and pts and max(pts)[0] > out[-1][0]:
        out.append((max(pts)[0], out[-1][1]))  # held until the run ended
    return out


def time_to_optimum(rows: list[dict]):
    """Instances proven optimal against the seconds it took, per method (sorted: a cactus plot)."""
    per_method: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        res = r.get("result") or {}
        if r.get("kind") == "solve" and res.get("status") == "optimal" and res.get("stop_reason", "optimal") == "optimal":
            per_method[r["cell"]["method"]].append(seconds(r))
    exact = {m: sorted(ts) for m, ts in per_method.items() if m in _exact_methods(rows)}
    if not exact:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for m, ts in exact.items():
        ax.step(ts, range(1, len(ts) + 1), where="post", label=f"{m} ({len(ts)} proven, {sum(ts):.1f} s)")
    ax.set_xscale("log")
    ax.set_xlabel("wall seconds to proven optimum")
    ax.set_ylabel("instances proven")
    ax.legend(fontsize=7)
    ax.set_title("Time to proven optimum")
    fig.tight_layout()
    return fig


def _exact_methods(rows: list[dict]) -> set[str]:
    return {r["cell"]["method"] for r in rows if r.get("kind") == "solve" and r["cell"].get("method_name") in ("inc-ilp", "ilp", "ilp-hinted")}


def gaps(rows: list[dict]):
    """Per method: the proven gap (objective vs its lower bound) and the excess over the best known."""
    per_instance, _ = summarise(rows)
    if not per_instance:
        return None
    methods = list(dict.fromkeys(p["method"] for p in per_instance))
    proven = [[100 * p["gap"] for p in per_instance if p["method"] == m and p["gap"] is not None] for m in methods]
    excess = [[100 * (p["ratio"] - 1) for p in per_instance if p["method"] == m and p["ratio"] is not None] for m in methods]
    fig, axes = plt.subplots(1, 2, figsize=(max(6, 1.1 * len(methods) * 2), 3.2))
    for ax, data, title in ((axes[0], proven, "gap to the proven lower bound (%)"), (axes[1], excess, "above the best known (%)")):
        ax.boxplot([d or [math.nan] for d in data], showfliers=False)
        for i, d in enumerate(data, 1):
            ax.plot([i] * len(d), d, ".", color="C0", alpha=0.6, ms=4)
        ax.set_xticks(range(1, len(methods) + 1), methods, rotation=30, ha="right")
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_ylim(bottom=0)  # both are non-negative
        ax.set_title(title)
    fig.tight_layout()
    return fig


def gantt(rows: list[dict]):
    """The best placement of the largest instance with a schedule: ops per device, transfers between them."""
    cands = [r for r in rows if r.get("schedule") and len(r["schedule"]["device"]) <= GANTT_MAX_OPS]
    if not cands:
        return None
    r = min(cands, key=lambda r: (-r["cell"].get("nodes", 0), r["result"]["objective"]))
    s = r["schedule"]
    n_dev = max(s["device"]) + 1
    kinds = list(dict.fromkeys(s["op"]))
    colour = {k: f"C{i % 10}" for i, k in enumerate(kinds)}
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * n_dev))
    ms = 1e3
    for v, d in enumerate(s["device"]):
        ax.barh(d, (s["end_s"][v] - s["start_s"][v]) * ms, left=s["start_s"][v] * ms, height=0.6, color=colour[s["op"][v]],
                edgecolor="black", linewidth=0.2)
    for _, _, du, dv, t0, t1 in s["transfers"]:
        ax.plot([t0 * ms, t1 * ms], [du, dv], color="grey", lw=0.4, alpha=0.6)
    ax.set_yticks(range(n_dev), [f"device {d}" for d in range(n_dev)])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    c = r["cell"]
    ax.set_title(f"{c['graph']} {c['instance']}, {c['method']}: makespan {s['makespan_s'] * ms:.3f} ms, "
                 f"{len(s['transfers'])} transfers (grey)", fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[k]) for k in kinds[:10]]
    ax.legend(handles, kinds[:10], fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def split(rows: list[dict]):
    """Per-stage parameter memory and compute time of the best split of the largest stage instance."""
    cands = [r for r in rows if r.get("kind") == "solve" and (r.get("result") or {}).get("terms", {}).get("stage_mem")]
    if not cands:
        return None
    r = min(cands, key=lambda r: (-r["cell"].get("nodes", 0), -len(r["result"]["terms"]["stage_mem"]), r["result"]["objective"]))
    t = r["result"]["terms"]
    k = range(len(t["stage_mem"]))
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.8))
    axes[0].bar(k, [m / 2**20 for m in t["stage_mem"]], color="C0")
    axes[0].set_ylabel("parameters (MiB)")
    axes[1].bar(k, [1e3 * s for s in t["stage_compute_s"]], color="C1")
    axes[1].set_ylabel("compute (ms)")
    for ax in axes:
        ax.set_xlabel("stage")
        ax.set_xticks(list(k))
    c = r["cell"]
    fig.suptitle(f"{c['graph']} {c['instance']}, {c['method']} ({r['result']['status']})", fontsize=8)
    fig.tight_layout()
    return fig


def measured(rows: list[dict]):
    """Executions: measured against predicted makespan (left), measured makespan per placement (right)."""
    ex = [r for r in rows if r.get("kind") == "execute" and r.get("validation")]
    if not ex:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    ms = 1e3
    pred = [ms * r["validation"]["predicted"]["makespan_s"] for r in ex]
    meas = [ms * r["validation"]["measured"]["makespan_s"] for r in ex]
    axes[0].scatter(pred, meas, s=12)
    for r, x, y in zip(ex, pred, meas):
        axes[0].annotate(f"{r['cell']['graph']} {r['cell']['problem']} {r['cell']['method']}", (x, y), fontsize=5)
    hi = max(pred + meas) * 1.1
    axes[0].plot([0, hi], [0, hi], color="grey", lw=0.5)
    axes[0].set_xlabel("predicted ms")
    axes[0].set_ylabel("measured ms")
    axes[0].set_title("fidelity of the cost model")
    labels = [f"{r['cell']['graph']} {r['cell']['problem']}\n{r['cell']['method']}" for r in ex]
    axes[1].bar(range(len(ex)), meas, color=["C1" if r["cell"]["method"].startswith("only ") else "C0" for r in ex])
    axes[1].set_xticks(range(len(ex)), labels, rotation=60, ha="right", fontsize=5)
    axes[1].set_ylabel("measured makespan (ms)")
    axes[1].set_title("solved answers (blue), one device alone (orange)")
    fig.tight_layout()
    return fig
