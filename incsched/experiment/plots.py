"""Figures of a run's rows (PNG and SVG, no display needed), each comparing the run's methods:
anytime curves from the solver's progress stream, answers at the proven optimum against time,
gaps per method, each method's split per stage, each method's placement on one time axis,
measured against predicted runtimes; and the best split of the run as the 1F1B pipeline it runs.

A figure that would draw nothing (every gap 0, a single method) is skipped, and `draw_figures`
says why, so that the report can say it in words instead. Only `report` imports this module, and
only when plots are asked for: matplotlib is an extra.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..show.canvas import byte_scale, format_seconds, new_figure, save, style, time_scale
from ..show.draw import DEFAULT_MICRO_BATCHES
from ..show.gantt import Timeline, gantt_figure
from ..show.pipeline import pipeline_figure
from .summary import instance_of, seconds, summarise

__all__ = ["draw_figures", "draw_all", "Figures", "Skipped", "FIGURES"]

#: Instances drawn in the anytime and split figures (one panel, or one row, each).
ANYTIME_PANELS = 6
SPLIT_INSTANCES = 6
#: Methods stacked in the Gantt figure (the best makespans first).
GANTT_METHODS = 4
#: Larger placements make an unreadable Gantt chart; the largest at most this size is drawn.
GANTT_MAX_OPS = 400
#: Elapsed times below this are drawn at it: a log axis has no 0, and a first bound found in
#: 0.2 ms and one found in 1 ms are the same to a reader.
_EARLIEST_S = 1e-3
#: A y range narrower than this (percentage points) is noise around the best known (a bound
#: 5e-9 % below it): drawn as a flat line at 0, and the panel says so.
_FLAT_PERCENT = 1e-6
_MARKERS = "osD^vPX*<>"
_LINESTYLES = ("-", (0, (5, 2)), (0, (3, 1, 1, 1)), (0, (1, 1)))


@dataclass(frozen=True)
class Skipped:
    """A figure not drawn although its rows are there, and why (the report says it in words)."""

    reason: str


@dataclass
class Figures:
    """What `draw_figures` did: the files written, and the figures skipped with the reason."""

    written: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def draw_figures(rows: list[dict], out: Path) -> Figures:
    """Draw every figure the rows have data for into ``out`` (PNG and SVG of each).

    Parameters
    ----------
    rows : list of dict
        A run folder's rows (`incsched.experiment.run.load_run`).
    out : Path
        Folder for ``NAME.png`` and ``NAME.svg``.

    Returns
    -------
    Figures
        ``written``: the files, PNG before SVG per figure; ``skipped``: figure name -> why it was not
        drawn although rows for it exist (e.g. ``gaps``: every gap is 0). Figures whose rows are
        absent (no placements in a stage experiment) are in neither.
    """
    done = Figures()
    with style():
        for name, build in FIGURES:
            fig = build(rows)
            if isinstance(fig, Skipped):
                done.skipped[name] = fig.reason
            elif fig is not None:
                done.written += [save(fig, Path(out) / f"{name}.{suffix}") for suffix in ("png", "svg")]
    return done


def draw_all(rows: list[dict], out: Path) -> list[Path]:
    """The files `draw_figures` writes (without the reasons for the figures it skipped)."""
    return draw_figures(rows, out).written


# ---------------------------------------------------------------------------- shared looks


def _method_styles(methods: list[str]) -> dict[str, dict]:
    """Colour, marker and line style per method, fixed by the order methods first appear.

    Lines of methods that coincide must stay visible: each later method is drawn thinner and on
    top, so an earlier one shows as a rim around it.
    """
    n = len(methods)
    step = min(1.0, 3.0 / max(n - 1, 1))  # the widest rim at most 4.2 points
    return {m: {"color": f"C{i % 10}", "marker": _MARKERS[i % len(_MARKERS)], "linestyle": _LINESTYLES[i % len(_LINESTYLES)],
                "linewidth": 1.2 + step * (n - 1 - i), "zorder": 3 + i} for i, m in enumerate(methods)}


def _methods(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["cell"]["method"] for r in rows if r.get("kind") == "solve"))


def _plain_axis(ax, axis: str = "y") -> None:
    # Plain numbers: no "1e-9" offset above the ticks, no scientific notation on a percent axis.
    ax.ticklabel_format(axis=axis, style="plain", useOffset=False)


def _seconds_axis(ax, xs: list[float]) -> None:
    """A log axis of seconds labelled in plain numbers (0.05, not 5 x 10^-2): at 1-2-5 steps over a
    few decades, at powers of ten over more."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    decades = math.log10(max(xs) / min(xs)) if xs and min(xs) > 0 else 0.0
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 2.5 else (1.0,)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _integer_axis(ax, axis: str = "y") -> None:
    from matplotlib.ticker import MaxNLocator

    (ax.yaxis if axis == "y" else ax.xaxis).set_major_locator(MaxNLocator(integer=True))


# ---------------------------------------------------------------------------- anytime


def _best_known(rows: list[dict]) -> dict[tuple, float]:
    best: dict[tuple, float] = {}
    for r in rows:
        res = r.get("result") or {}
        if r.get("kind") == "solve" and res.get("objective") is not None:
            best[instance_of(r)] = min(best.get(instance_of(r), math.inf), res["objective"])
    return best


def anytime(rows: list[dict]):
    """Per instance: each method's best objective and proven lower bound against wall time (% from
    the best known); methods without a progress stream (heuristics) as one point where they ended."""
    with_progress = [r for r in rows if r.get("kind") == "solve" and r.get("progress") and r.get("result")]
    if not with_progress:
        return None
    best = _best_known(rows)
    longest: dict[tuple, float] = defaultdict(float)  # the longest runs show the most of a curve
    for r in with_progress:
        longest[instance_of(r)] = max(longest[instance_of(r)], seconds(r))
    instances = sorted(longest, key=lambda i: -longest[i])[:ANYTIME_PANELS]
    styles = _method_styles(_methods(rows))
    cols = min(3, len(instances))
    nrows = math.ceil(len(instances) / cols)
    fig = new_figure(figsize=(4.4 * cols, 3.1 * nrows + 0.9))
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax, inst in zip(axes.flat, instances):
        firsts = [r for r in rows if r.get("kind") == "solve" and instance_of(r) == inst and r.get("result")
                  and r["cell"]["repeat"] == 0 and r["cell"]["seed"] == r["provenance"]["seed"]]
        _anytime_panel(ax, inst, firsts, best[inst] or 1, styles)
    for ax in list(axes.flat)[len(instances):]:
        ax.axis("off")
    _anytime_legend(fig, styles, rows)
    fig.suptitle("Anytime: best objective (solid) and proven lower bound (dashed) against wall time")
    fig.tight_layout(rect=(0, 0.07 if nrows == 1 else 0.04, 1, 1))
    return fig


def _anytime_panel(ax, inst: tuple, runs: list[dict], best: float, styles: dict) -> None:
    curves = []  # (method, field, points)
    ends = []  # (method, seconds, y): answers of runs without a progress stream
    for r in runs:
        res, m = r["result"], r["cell"]["method"]
        if not r.get("progress"):
            if res.get("objective") is not None:
                ends.append((m, max(seconds(r), _EARLIEST_S), 100 * (res["objective"] / best - 1)))
            continue
        events = r["progress"] + [{"elapsed": seconds(r), "objective": res["objective"], "lower_bound": res["lower_bound"]}]
        for fld in ("objective", "lower_bound"):
            pts = [(max(e["elapsed"], _EARLIEST_S), 100 * (e[fld] / best - 1)) for e in events if e.get(fld) is not None]
            curves.append((m, fld, _running(pts, lower=fld == "objective")))
    ys = [y for _, _, pts in curves for _, y in pts] + [y for _, _, y in ends]
    flat = bool(ys) and max(abs(y) for y in ys) < _FLAT_PERCENT
    for m, fld, pts in curves:
        if pts:
            xs, yv = zip(*pts)
            s = styles[m]
            ax.step(xs, [0.0] * len(yv) if flat else yv, where="post", color=s["color"], linewidth=s["linewidth"], zorder=s["zorder"],
                    linestyle="-" if fld == "objective" else (0, (4, 2)), alpha=1.0 if fld == "objective" else 0.8,
                    marker=s["marker"], markersize=3.5, markevery=list(range(len(xs) - 1)) or None)
    for m, x, y in ends:
        s = styles[m]
        ax.plot([x], [0.0 if flat else y], linestyle="none", marker=s["marker"], markersize=7, markerfacecolor="white",
                markeredgecolor=s["color"], markeredgewidth=1.5, zorder=20)
    ax.axhline(0, color="grey", lw=0.6, zorder=1)
    _seconds_axis(ax, [x for _, _, pts in curves for x, _ in pts] + [x for _, x, _ in ends])
    _anytime_y(ax, [0.0] if flat else ys)
    ax.set_title(f"{inst[0]} {inst[1]}" + (f"\n(all within {_FLAT_PERCENT:g} % of the best known)" if flat else ""))
    ax.set_xlabel("wall seconds (log)")
    ax.set_ylabel("% above the best known")


def _anytime_y(ax, ys: list[float]) -> None:
    """Linear unless the values span orders of magnitude (a 0.003 % step beside a 40 % start):
    then symmetric log, its linear part as small as the smallest step, with plain labels. Either
    way with room above and below, so no curve lies on the frame."""
    from matplotlib.ticker import FuncFormatter

    lo, hi = min(ys + [0.0]), max(ys + [0.0])
    nonzero = [abs(y) for y in ys if abs(y) >= _FLAT_PERCENT]
    if nonzero and max(nonzero) / min(nonzero) > 100:
        thresh = 10 ** math.floor(math.log10(min(nonzero)))
        ax.set_yscale("symlog", linthresh=thresh, linscale=0.5)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_ylim(lo * 2.5 if lo < 0 else -thresh, hi * 2.5 if hi > 0 else thresh)
        ax.set_ylabel("% above the best known (symmetric log)")
        return
    span = max(hi - lo, 1.0)
    ax.set_ylim(lo - 0.1 * span, hi + 0.1 * span)
    _plain_axis(ax)


def _anytime_legend(fig, styles: dict, rows: list[dict]) -> None:
    from matplotlib.lines import Line2D

    traced = {r["cell"]["method"] for r in rows if r.get("kind") == "solve" and r.get("progress")}
    handles = []
    for m, s in styles.items():
        if m in traced:
            handles.append(Line2D([], [], color=s["color"], marker=s["marker"], linewidth=2, markersize=5, label=m))
        else:
            handles.append(Line2D([], [], color=s["color"], marker=s["marker"], linestyle="none", markersize=7, markerfacecolor="white",
                                  markeredgewidth=1.5, label=f"{m} (answer at the end of its run)"))
    handles += [Line2D([], [], color="black", label="best objective"), Line2D([], [], color="black", linestyle=(0, (4, 2)), label="lower bound")]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles) if len(handles) <= 6 else math.ceil(len(handles) / 2), frameon=False)


def _running(pts: list[tuple[float, float]], lower: bool) -> list[tuple[float, float]]:
    # An answer only improves and a bound only rises: the curves are the running best.
    out: list[tuple[float, float]] = []
    for t, y in sorted(pts):
        if not out or (y < out[-1][1] if lower else y > out[-1][1]):
            out.append((t, y))
    if out and pts and max(pts)[0] > out[-1][0]:
        out.append((max(pts)[0], out[-1][1]))  # held until the run ended
    return out


# ---------------------------------------------------------------------------- time to optimum


def time_to_optimum(rows: list[dict]):
    """Per method: instances answered at the proven optimum against the seconds each took (a
    cactus plot); filled markers where the method proved it, hollow where it only reached it."""
    per_instance, _ = summarise(rows)
    proven_instances = {(p["graph"], p["instance"]) for p in per_instance if p["best_proven"]}
    if not per_instance:
        return None
    methods = list(dict.fromkeys(p["method"] for p in per_instance))
    if not proven_instances:
        return Skipped("no instance was proven optimal by any method: there is no optimum to reach")
    if len(methods) < 2:
        return Skipped(f"one method only ({methods[0]}): nothing to compare its times with")
    from matplotlib.lines import Line2D

    styles = _method_styles(methods)
    n = len(proven_instances)
    fig = new_figure(figsize=(7.5, 4.2))
    ax = fig.subplots()
    handles = []
    for m in methods:
        hits = sorted((p["seconds"], p["status"] == "optimal") for p in per_instance
                      if p["method"] == m and p["best_proven"] and p["objective"] == p["best_known"] and p["seconds"] is not None)
        s = styles[m]
        handles.append(Line2D([], [], color=s["color"], marker=s["marker"], linestyle=s["linestyle"], linewidth=min(s["linewidth"], 2.5),
                              markersize=6, label=f"{m}: {len(hits)} of {n}, {sum(pr for _, pr in hits)} proven"))
        if not hits:
            continue
        xs = [max(t, _EARLIEST_S) for t, _ in hits]
        ys = list(range(1, len(hits) + 1))
        ax.step(xs, ys, where="post", color=s["color"], linestyle=s["linestyle"], linewidth=s["linewidth"], zorder=s["zorder"])
        for x, y, (_, pr) in zip(xs, ys, hits):
            ax.plot([x], [y], marker=s["marker"], markersize=6, color=s["color"], markerfacecolor=s["color"] if pr else "white",
                    markeredgewidth=1.3, zorder=s["zorder"] + 10)
    ax.axhline(n, color="grey", lw=0.8, linestyle=":", zorder=1)
    _seconds_axis(ax, [max(p["seconds"], _EARLIEST_S) for p in per_instance if p["seconds"] is not None])
    ax.set_ylim(0, n + 0.6)
    _integer_axis(ax)
    ax.set_xlabel("wall seconds of the run (log)")
    ax.set_ylabel("instances at the proven optimum")
    ax.set_title(f"Answers at the proven optimum, of the {n} instances some method proved (dotted)\n"
                 "filled marker: the method proved it; hollow: it reached the optimum without a proof")
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2 if len(methods) > 3 else len(methods), frameon=False)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------- gaps


def gaps(rows: list[dict]):
    """Per method, every instance as a point: the gap to its own proven lower bound, and the excess
    over the best known answer (the median as a bar). Linear axes: every point is shown as it is."""
    per_instance, _ = summarise(rows)
    if not per_instance:
        return None
    methods = list(dict.fromkeys(p["method"] for p in per_instance))
    measures = {
        "gap to the method's own proven lower bound (%)": {m: [100 * p["gap"] for p in per_instance if p["method"] == m and p["gap"] is not None]
                                                           for m in methods},
        "above the best known answer (%)": {m: [100 * (p["ratio"] - 1) for p in per_instance if p["method"] == m and p["ratio"] is not None]
                                            for m in methods},
    }
    # a measure that is 0 everywhere draws an empty panel: it is said in words instead
    drawn = {title: data for title, data in measures.items() if any(v != 0 for vs in data.values() for v in vs)}
    if not drawn:
        return Skipped("every method's gap and excess over the best known are 0 on every instance "
                       "(each answer is the proven optimum): nothing to draw")
    styles = _method_styles(methods)
    fig = new_figure(figsize=(max(5.0, 1.0 + 1.15 * len(methods)) * len(drawn), 3.6))
    axes = fig.subplots(1, len(drawn), squeeze=False)[0]
    for ax, (title, data) in zip(axes, drawn.items()):
        _strip(ax, data, styles)
        ax.set_title(title)
    zero = [title.rsplit(" (", 1)[0] for title in measures if title not in drawn]
    if zero:
        fig.text(0.5, 0.01, f"(not drawn: the {zero[0]} is 0 for every method and instance)", ha="center", va="bottom")
    fig.tight_layout(rect=(0, 0.05 if zero else 0, 1, 1))
    return fig


def _strip(ax, data: dict[str, list[float]], styles: dict) -> None:
    """One column of points per method, spread sideways so equal values stay countable."""
    for i, (m, vs) in enumerate(data.items()):
        s = styles[m]
        k = len(vs)
        offsets = [0.0] if k == 1 else [-0.22 + 0.44 * j / (k - 1) for j in range(k)]
        ax.scatter([i + o for o in offsets], sorted(vs), s=22, color=s["color"], marker=s["marker"], edgecolor="black", linewidth=0.4, zorder=3)
        if vs:
            med = sorted(vs)[k // 2] if k % 2 else sum(sorted(vs)[k // 2 - 1:k // 2 + 1]) / 2
            ax.plot([i - 0.3, i + 0.3], [med, med], color="black", lw=1.2, zorder=4)
    ax.set_xticks(range(len(data)), [f"{m}\n(n={len(vs)})" for m, vs in data.items()], rotation=20, ha="right")
    top = max((v for vs in data.values() for v in vs), default=1.0) or 1.0
    ax.set_ylim(-0.05 * top, 1.08 * top)  # room under 0: points at 0 are not hidden in the frame
    ax.axhline(0, color="grey", lw=0.6, zorder=1)
    ax.set_xlim(-0.6, len(data) - 0.4)
    _plain_axis(ax)


# ---------------------------------------------------------------------------- splits


def split(rows: list[dict]):
    """Per instance (the ones where the methods differ most): each method's parameters and compute
    per stage, side by side."""
    cands = [r for r in rows if r.get("kind") == "solve" and ((r.get("result") or {}).get("terms") or {}).get("stage_mem")]
    if not cands:
        return None
    methods = list(dict.fromkeys(r["cell"]["method"] for r in cands))
    if len(methods) < 2:
        return Skipped(f"one method only ({methods[0]}): nothing to compare its splits with (the pipeline figure draws it)")
    by_instance: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in sorted(cands, key=lambda r: r["result"]["objective"]):
        by_instance[instance_of(r)].setdefault(r["cell"]["method"], r)  # each method's best run
    instances = sorted(by_instance, key=lambda i: (-_spread(by_instance[i]), -by_instance[i][next(iter(by_instance[i]))]["cell"].get("nodes", 0)))
    shown = instances[:SPLIT_INSTANCES]
    styles = _method_styles(methods)
    height = 0.8 + 2.3 * len(shown)
    fig = new_figure(figsize=(10, height))
    axes = fig.subplots(len(shown), 2, squeeze=False)
    for (ax_mem, ax_time), inst in zip(axes, shown):
        runs = by_instance[inst]
        runs = {m: runs[m] for m in methods if m in runs}  # the same order of bars in every group
        per_byte, bytes_name = byte_scale(max(b for r in runs.values() for b in r["result"]["terms"]["stage_mem"]))
        per_second, seconds_name = time_scale(max(t for r in runs.values() for t in r["result"]["terms"]["stage_compute_s"]))
        _grouped_bars(ax_mem, {m: [b / per_byte for b in r["result"]["terms"]["stage_mem"]] for m, r in runs.items()}, styles)
        _grouped_bars(ax_time, {m: [t / per_second for t in r["result"]["terms"]["stage_compute_s"]] for m, r in runs.items()}, styles)
        ax_mem.set_ylabel(f"parameters ({bytes_name})")
        ax_time.set_ylabel(f"compute ({seconds_name})")
        ax_mem.set_title(f"{inst[0]} {inst[1]}", loc="left")
    for ax in axes[-1]:
        ax.set_xlabel("stage")
    from matplotlib.patches import Patch

    fig.legend(handles=[Patch(facecolor=styles[m]["color"], label=m) for m in methods], loc="lower center", ncol=min(len(methods), 5), frameon=False)
    what = f"{len(shown)} of {len(instances)} instances, where the methods' objectives differ most" if len(instances) > len(shown) else "every instance"
    fig.suptitle(f"Each method's split per stage ({what})")
    fig.tight_layout(rect=(0, 0.35 / height, 1, 1))  # the legend below
    return fig


def _spread(runs: dict[str, dict]) -> float:
    objs = [r["result"]["objective"] for r in runs.values()]
    return (max(objs) - min(objs)) / max(abs(min(objs)), 1e-12)


def _grouped_bars(ax, values: dict[str, list[float]], styles: dict) -> None:
    n_stages = max(len(v) for v in values.values())
    width = 0.8 / len(values)
    for i, (m, vs) in enumerate(values.items()):
        ax.bar([k - 0.4 + width * (i + 0.5) for k in range(len(vs))], vs, width=width, color=styles[m]["color"], edgecolor="black", linewidth=0.3)
    ax.set_xticks(range(n_stages))
    _plain_axis(ax)


def pipeline(rows: list[dict]):
    """The best split of the largest stage instance as the 1F1B pipeline it runs (`incsched.show`)."""
    cands = [r for r in rows if r.get("kind") == "solve" and ((r.get("result") or {}).get("terms") or {}).get("stage_mem")]
    if not cands:
        return None
    r = min(cands, key=lambda r: (-r["cell"].get("nodes", 0), -len(r["result"]["terms"]["stage_mem"]), r["result"]["objective"]))
    t, c = r["result"]["terms"], r["cell"]
    forward = t.get("stage_time_s") or t["stage_compute_s"]
    return pipeline_figure(forward, None, DEFAULT_MICRO_BATCHES, t["stage_mem"], sends_included="stage_time_s" in t,
                           title=f"{c['graph']} {c['instance']}, {c['method']} ({r['result']['status']}): the split as a pipeline")


# ---------------------------------------------------------------------------- placements


def gantt(rows: list[dict]):
    """Each method's best placement of the largest instance with schedules, on one time axis."""
    cands = [r for r in rows if r.get("schedule") and len(r["schedule"]["device"]) <= GANTT_MAX_OPS]
    if not cands:
        return None
    by_instance: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in sorted(cands, key=lambda r: r["schedule"]["makespan_s"]):
        by_instance[instance_of(r)].setdefault(r["cell"]["method"], r)
    compared = [i for i, runs in by_instance.items() if len(runs) >= 2]
    if not compared:
        return Skipped("one method per instance: nothing to compare its placement with")
    inst = max(compared, key=lambda i: (next(iter(by_instance[i].values()))["cell"].get("nodes", 0), i))
    runs = list(by_instance[inst].items())[:GANTT_METHODS]
    panels = [(f"{m} ({r['result']['status']}): makespan {format_seconds(r['schedule']['makespan_s'])}, "
               f"{len(r['schedule']['transfers'])} transfers", Timeline.from_row(r["schedule"])) for m, r in runs]
    return gantt_figure(panels, title=f"{inst[0]} {inst[1]}: each method's placement, best makespan first")


# ---------------------------------------------------------------------------- executions


def measured(rows: list[dict]):
    """Executions: measured against predicted makespan per placement (left), and each answer's
    measured makespan beside the single-device runs of the same model (right)."""
    ex = [r for r in rows if r.get("kind") == "execute" and r.get("validation")]
    if not ex:
        return None
    from matplotlib.lines import Line2D

    methods = list(dict.fromkeys(r["cell"]["method"] for r in ex))
    styles = _method_styles(methods)
    ms = 1e3
    fig = new_figure(figsize=(11, 4.0))
    left, right = fig.subplots(1, 2, width_ratios=(1, 1.4))
    kinds = list(dict.fromkeys(r["cell"]["problem"] for r in ex))
    shape = {k: "os^D"[i % 4] for i, k in enumerate(kinds)}
    for r in ex:
        v = r["validation"]
        left.scatter([ms * v["predicted"]["makespan_s"]], [ms * v["measured"]["makespan_s"]], s=40, color=styles[r["cell"]["method"]]["color"],
                     marker=shape[r["cell"]["problem"]], edgecolor="black", linewidth=0.4, zorder=3)
    hi = 1.1 * max(ms * max(r["validation"]["predicted"]["makespan_s"], r["validation"]["measured"]["makespan_s"]) for r in ex)
    left.plot([0, hi], [0, hi], color="grey", lw=0.8, zorder=1)
    left.set_xlim(0, hi)
    left.set_ylim(0, hi)
    left.set_xlabel("predicted makespan (ms)")
    left.set_ylabel("measured makespan (ms)")
    left.set_title("fidelity of the cost model (grey: measured = predicted)")
    left.legend(handles=[Line2D([], [], linestyle="none", marker="s", markersize=8, color=styles[m]["color"], label=m) for m in methods]
                + [Line2D([], [], linestyle="none", marker=shape[k], color="grey", label=f"{k} result") for k in kinds],
                loc="upper left", frameon=False)
    labels = []
    for i, r in enumerate(ex):
        v, c = r["validation"], r["cell"]
        right.bar(i, ms * v["measured"]["makespan_s"], color=styles[c["method"]]["color"], edgecolor="black", linewidth=0.4)
        right.plot([i - 0.4, i + 0.4], [ms * v["predicted"]["makespan_s"]] * 2, color="black", lw=1.5)
        labels.append(f"{c['graph']} {c['problem']}\n{c['method']}")
    right.set_xticks(range(len(ex)), labels, rotation=25, ha="right")
    right.set_ylabel("measured makespan (ms)")
    single = any(r["cell"]["method"].startswith("only ") for r in ex)
    right.set_title("each answer measured (bar) and predicted (black line)" + ("; 'only D': the model on device D alone" if single else ""))
    for ax in (left, right):
        _plain_axis(ax)
    fig.tight_layout()
    return fig


#: Every figure, in the order a report shows them: (file stem, builder). A builder returns a
#: figure, `Skipped` (rows there, nothing to draw), or None (no rows of its kind).
FIGURES = (("anytime", anytime), ("time_to_optimum", time_to_optimum), ("gaps", gaps), ("split", split), ("pipeline", pipeline),
           ("gantt", gantt), ("measured", measured))
