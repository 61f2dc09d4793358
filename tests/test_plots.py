"""The experiment figures (`incsched.experiment.plots`) follow the rules a reviewer checks, on small
synthetic run folders shaped like each shipped experiment's rows (respect, inc_ilp, icml24,
doppler and hsdag, fidelity, training).

Checked mechanically on every figure drawn: no empty axes, no offset or exponent text on an axis,
a legend wherever several methods are drawn (at a readable size), integer ticks on count axes, no
symmetric-log gap axes, no curve on the frame; and an empty figure is skipped with its reason.
"""

from __future__ import annotations

import pytest

from incsched.experiment.plots import FIGURES, Skipped, draw_all, draw_figures
from incsched.show.canvas import style

pytest.importorskip("matplotlib")
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

# ---------------------------------------------------------------------------- synthetic rows


def solve_row(graph, instance, method, objective, lower_bound, seconds, *, status=None, progress=(), terms=None, schedule=None, nodes=60):
    """A solve row as `incsched.experiment.run` writes it, with what the figures read."""
    status = status or ("optimal" if objective == lower_bound else "feasible")
    return {"key": f"{graph}/{instance}/{method}", "kind": "solve", "error": None, "seconds": seconds, "progress": list(progress),
            "cell": {"graph": graph, "instance": instance, "method": method, "method_name": method.split()[0], "nodes": nodes,
                     "problem": "stage" if instance.startswith("K") else "placement", "repeat": 0, "seed": 0},
            "result": {"status": status, "objective": objective, "lower_bound": lower_bound, "gap": (objective - lower_bound) / objective,
                       "stop_reason": "optimal" if status == "optimal" else "done", "terms": terms or {}, "timing": {"total": seconds}},
            "provenance": {"seed": 0, "stop_reason": "optimal" if status == "optimal" else "done"},
            **({"schedule": schedule} if schedule else {})}


def events(*points):
    """Progress events (elapsed, objective, lower bound)."""
    return [{"elapsed": t, "objective": o, "lower_bound": b, "phase": "x"} for t, o, b in points]


def split_terms(mem, compute_ms):
    return {"stage_mem": [int(m * 2**20) for m in mem], "stage_compute_s": [c / 1e3 for c in compute_ms]}


def respect_rows():
    """Heuristics against the proven optimum on five instances: gaps of a few per cent."""
    rows = []
    for i, g in enumerate(["resnet18", "resnet50", "inception_v3", "gen_a", "gen_b"]):
        opt = 1000 + 100 * i
        rows += [solve_row(g, "K=4", "rl", opt + 20 * (i % 3), opt - 40, 0.02 + 0.01 * i, terms=split_terms([3, 4, 3, 3], [40, 7, 5, 4])),
                 solve_row(g, "K=4", "contiguous (DeepSpeed)", opt + 30 + 5 * i, opt - 40, 0.001, terms=split_terms([3, 3, 4, 3], [44, 6, 4, 4])),
                 solve_row(g, "K=4", "exact (inc-ilp)", opt, opt, 0.1 * (i + 1), terms=split_terms([3, 3, 3, 4], [40, 7, 5, 4]),
                           progress=events((0.001, None, opt - 40), (0.02, opt + 20, opt - 40), (0.1 * (i + 1), opt, opt)))]
    return rows


def inc_ilp_rows():
    """Three exact methods proving every instance: every gap 0; vgg16's bound one unit (5e-9 %) below."""
    rows = []
    for g, opt in (("resnet18", 1_416_397_605), ("vgg16", 14_163_976_001)):
        for j, m in enumerate(("inc-ilp", "ilp", "ilp-hinted")):
            end = 0.05 * (j + 1)
            rows.append(solve_row(g, "K=4", m, opt, opt, end, terms=split_terms([10, 13, 9, 11], [44, 7, 5, 4]),
                                  progress=events((0.0002, None, opt - 1 if g == "vgg16" else opt * 0.83), (end / 2, opt, opt - 1), (end, opt, opt))))
    return rows


def icml24_rows():
    """One long anytime run beside a heuristic: improvements of 1 % down to 0.002 %."""
    opt = 11_343_865
    return [solve_row("rand_graph_1000_1", "K=10", "inc-ilp", opt, int(opt * 0.9998), 40.0,
                      progress=events((0.001, None, int(opt * 0.9998)), (0.05, int(opt * 1.01), None), (5.0, int(opt * 1.00003), None),
                                      (30.0, opt, None))),
            solve_row("rand_graph_1000_1", "K=10", "dp_local_search", int(opt * 1.0003), int(opt * 0.9998), 1.2)]


def schedule(shift):
    """A 4-op placement on two devices with two transfers, in seconds."""
    return {"device": [0, 0, 1, 0], "start_s": [0.0, 1.0, 1.5 + shift, 3.0 + shift], "end_s": [1.0, 2.0, 2.5 + shift, 4.0 + shift],
            "op": ["matmul", "add", "matmul", "linear"], "makespan_s": 4.0 + shift,
            "transfers": [[0, 2, 0, 1, 1.0, 1.5 + shift], [2, 3, 1, 0, 2.5 + shift, 3.0 + shift]]}


def doppler_rows():
    """Placements: list schedulers and inc-ilp (with progress), none proven optimal."""
    rows = []
    for g in ("ffnn", "chained_matmul"):
        rows += [solve_row(g, "D=4", "critical_path_list", 130, 90, 0.3, schedule=schedule(0.3)),
                 solve_row(g, "D=4", "heft", 125, 90, 0.2, schedule=schedule(0.2)),
                 solve_row(g, "D=4", "inc-ilp", 110, 95, 8.0, schedule=schedule(0.0),
                           progress=events((0.001, None, 60), (0.1, 125, 60), (2.0, 110, 90), (8.0, 110, 95)))]
    return rows


def execution_rows():
    """Executions of solved answers and single-device runs (fidelity, hsdag)."""
    def row(problem, method, predicted, measured):
        return {"key": f"{problem}/{method}", "kind": "execute", "error": None,
                "cell": {"graph": "resnet18", "instance": f"{problem} on cpu,cpu", "problem": problem, "method": method, "seed": 0, "repeat": 0},
                "validation": {"predicted": {"makespan_s": predicted}, "measured": {"makespan_s": measured}, "max_abs_diff": 0.0}}
    return [row("stage", "inc-ilp", 1.28, 1.57), row("stage", "contiguous_params", 1.79, 1.89), row("placement", "inc-ilp", 0.18, 0.25),
            row("placement", "only cpu", 0.18, 0.22)]


def training_rows():
    return [{"key": "t", "kind": "train", "error": None, "cell": {"graph": "-", "instance": "-", "method": "stage (tiny)", "seed": 0, "repeat": 0},
             "result": {"weights_sha256": "0" * 64, "validation": 1.2}}]


#: experiment -> (rows, figures drawn, figures skipped)
EXPERIMENTS = {
    "respect": (respect_rows, {"anytime", "time_to_optimum", "gaps", "split", "pipeline"}, set()),
    "inc_ilp": (inc_ilp_rows, {"anytime", "time_to_optimum", "split", "pipeline"}, {"gaps"}),
    "icml24": (icml24_rows, {"anytime", "gaps"}, {"time_to_optimum"}),
    "doppler": (doppler_rows, {"anytime", "gaps", "gantt"}, {"time_to_optimum"}),
    "fidelity": (execution_rows, {"measured"}, set()),
    "training": (training_rows, set(), set()),
}


# ---------------------------------------------------------------------------- the rules


def check_readable(name: str, fig, methods: set[str]) -> None:
    """The rules a reviewer checks that a program can: see the module notes."""
    FigureCanvasAgg(fig).draw()  # lays out ticks, offsets and legends as a file would have them
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    ticks = " ".join(t.get_text() for ax in fig.axes for t in ax.get_xticklabels())
    if len(methods) > 1:  # each method told apart: by a legend, or by name on the axis
        assert legends or all(m in ticks for m in methods), f"{name}: {len(methods)} methods and no legend"
    for legend in legends:
        assert all(t.get_fontsize() >= 7 for t in legend.get_texts()), f"{name}: a legend too small to read"
    for ax in fig.axes:
        if not ax.axison:
            continue
        assert ax.has_data(), f"{name}: an empty axes is drawn"
        for axis in (ax.xaxis, ax.yaxis):
            assert axis.get_offset_text().get_text() == "", f"{name}: offset text {axis.get_offset_text().get_text()!r}"
            labels = [t.get_text() for t in axis.get_ticklabels() if t.get_visible()]
            assert not any("e-" in t or "e+" in t or "times" in t for t in labels), f"{name}: exponent tick labels {labels}"
    if name == "gaps":
        assert all(ax.get_yscale() == "linear" for ax in fig.axes), "gaps on a symmetric-log axis"
    if name == "time_to_optimum":
        ax = fig.axes[0]
        low, high = ax.get_ylim()
        assert all(float(t).is_integer() for t in ax.get_yticks() if low <= t <= high), "fractional ticks on a count axis"
    if name == "anytime":  # curves and bounds stay off the frame: at least 2 pixels inside
        for ax in (a for a in fig.axes if a.axison):
            box = ax.get_window_extent()
            for line in ax.get_lines():
                if len(line.get_xdata()) and line.get_linestyle() != "None":
                    ys = ax.transData.transform(list(zip(line.get_xdata(), line.get_ydata())))[:, 1]
                    assert box.y0 + 2 <= ys.min() and ys.max() <= box.y1 - 2, f"anytime: a curve on the frame of {ax.get_title()!r}"


@pytest.mark.slow  # up to five figures laid out and rendered per experiment: 1-5 s each here
@pytest.mark.parametrize("experiment", sorted(EXPERIMENTS))
def test_every_figure_follows_the_rules(experiment):
    make, drawn, skipped = EXPERIMENTS[experiment]
    rows = make()
    methods = {r["cell"]["method"] for r in rows}
    with style():
        built = {name: build(rows) for name, build in FIGURES}
    assert {n for n, f in built.items() if f is not None and not isinstance(f, Skipped)} == drawn
    assert {n for n, f in built.items() if isinstance(f, Skipped)} == skipped
    for name in drawn:
        with style():
            check_readable(name, built[name], methods if name != "pipeline" else set())  # pipeline: one result


@pytest.mark.slow  # four figures, each written as PNG and SVG: 3-8 s here
def test_draw_figures_writes_and_says_what_it_skipped(tmp_path):
    done = draw_figures(inc_ilp_rows(), tmp_path)
    assert [p.name for p in done.written] == [f"{n}.{s}" for n in ("anytime", "time_to_optimum", "split", "pipeline") for s in ("png", "svg")]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in done.written if p.suffix == ".png")
    assert set(done.skipped) == {"gaps"} and "every method's gap" in done.skipped["gaps"]
    assert not (tmp_path / "gaps.png").exists()
    assert draw_all(execution_rows(), tmp_path) == draw_figures(execution_rows(), tmp_path).written  # what report.py calls


def test_one_method_alone_is_not_a_comparison():
    rows = [r for r in respect_rows() if r["cell"]["method"] == "exact (inc-ilp)"]
    with style():
        for name, build in FIGURES:
            if name in ("time_to_optimum", "split"):
                fig = build(rows)
                assert isinstance(fig, Skipped) and "one method only" in fig.reason


def test_lines_that_coincide_stay_visible():
    """Three exact methods with the same bound: each later one drawn thinner and on top."""
    with style():
        fig = dict(FIGURES)["anytime"](inc_ilp_rows())
    bounds = [line for line in fig.axes[0].get_lines() if line.get_linestyle() == "--" and len(line.get_xdata())]
    widths = [line.get_linewidth() for line in bounds]
    assert len(bounds) == 3 and widths == sorted(widths, reverse=True) and len(set(widths)) == 3
    assert [line.get_zorder() for line in bounds] == sorted(line.get_zorder() for line in bounds)
    assert len({line.get_color() for line in bounds}) == 3 and len({line.get_marker() for line in bounds}) == 3
    assert isinstance(bounds[0], Line2D)
