"""Compare: our split beside the splitters pipeline runtimes use by default, on one graph.

A caller of `solve()` and of the baselines, like the CLI: the throughput objective's certified
split (`StageProblem.pipeline`) and the usual splitters' (torchtitan's even layers, DeepSpeed's
``uniform`` and ``parameters``, torchgpipe's ``balance_by_time``, the PipeDream DP) are judged by
the one evaluator on that problem; with a captured model, each also runs as a pipeline of CPU
worker processes (`incsched.execute.validate.validate_stages`). ``incsched compare`` calls this.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .baselines.stage import balance_by_time, even_layers, parameters, pipeline_dp, uniform
from .errors import IncschedError, ProblemError
from .evaluate.stage import evaluate_stages
from .front_door import solve
from .graph import CompGraph
from .problems.stage import StageProblem

log = logging.getLogger(__name__)

__all__ = ["OURS", "SPLITTERS", "SplitFigures", "Comparison", "compare_splits", "measure_splits", "plot_comparison"]

#: The row of the certified split.
OURS = "incsched"

#: The usual splitters by the name the table gives them, each ``f(problem, seed) -> stages``.
SPLITTERS: dict[str, Callable[[StageProblem, int], np.ndarray]] = {
    "even layers (torchtitan)": even_layers,
    "DeepSpeed uniform": uniform,
    "DeepSpeed parameters": parameters,
    "torchgpipe balance_by_time": balance_by_time,
    "PipeDream DP": pipeline_dp,
}


@dataclass(frozen=True)
class SplitFigures:
    """One split's figures.

    Attributes
    ----------
    method : str
        `OURS` or a key of `SPLITTERS`.
    stages : tuple of int, or None
        Stage per node; None where the splitter does not apply (``note`` says why).
    slowest_stage_s : float or None
        Predicted time of the slowest stage (compute plus sends), seconds.
    peak_memory_bytes : int or None
        Predicted largest stage memory: parameters plus activations in flight.
    throughput : float or None
        Predicted micro-batches per second.
    slower_than_ours : float or None
        ``slowest_stage_s / ours - 1`` (0.19: 19 % slower).
    measured_throughput : float or None
        Micro-batches per second measured on CPU worker processes (`measure_splits`).
    note : str
        Why there are no figures, or the evaluator's word on an infeasible split.
    """

    method: str
    stages: tuple[int, ...] | None
    slowest_stage_s: float | None = None
    peak_memory_bytes: int | None = None
    throughput: float | None = None
    slower_than_ours: float | None = None
    measured_throughput: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Comparison:
    """Our split and the usual splitters' on one graph and K (`compare_splits`).

    Attributes
    ----------
    graph : str
    n_stages : int
    bandwidth : float
        Bytes per second of a stage's sends.
    micro_batches : int
    status : str
        Our result's status (``optimal``: no contiguous or other split has a faster slowest stage).
    rows : tuple of SplitFigures
        Ours first, then `SPLITTERS` in order.
    measured_on : str or None
        How ``measured_throughput`` was measured, when it was.
    """

    graph: str
    n_stages: int
    bandwidth: float
    micro_batches: int
    status: str
    rows: tuple[SplitFigures, ...]
    measured_on: str | None = None

    def row(self, method: str) -> SplitFigures:
        """The row of ``method``."""
        for row in self.rows:
            if row.method == method:
                return row
        raise KeyError(f"no split named {method!r} (the rows are {', '.join(r.method for r in self.rows)})")

    def table(self) -> str:
        """The figures as a markdown table, ours first."""
        measured = self.measured_on is not None
        head = ["split", "slowest stage ms", "slower than ours", "peak memory MiB", "predicted /s"]
        head += ["measured /s", "measured vs ours"] if measured else []
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        ours = self.rows[0].measured_throughput
        for r in self.rows:
            if r.stages is None or r.slowest_stage_s is None:
                lines.append(f"| {r.method} | n/a: {r.note} |" + " |" * (len(head) - 2))
                continue
            slower = "" if r.slower_than_ours is None else f"{100 * r.slower_than_ours:+.1f} %"
            cells = [r.method + ("" if not r.note else " (infeasible)"), f"{1e3 * r.slowest_stage_s:.2f}", slower,
                     f"{r.peak_memory_bytes / 2**20:.1f}", f"{r.throughput:.2f}"]
            if measured:
                m = r.measured_throughput
                cells += ["" if m is None else f"{m:.3f}", "" if m is None or not ours else f"{100 * (ours / m - 1):+.1f} %"]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        return {"format": "incsched.compare", "version": 1, **dataclasses.asdict(self)}


def compare_splits(
    graph: CompGraph,
    n_stages: int,
    *,
    bandwidth: float = 1e9,
    micro_batches: int = 4,
    memory: int | Sequence[int] | None = None,
    time_limit: float = 20.0,
    seed: int = 0,
) -> Comparison:
    """Solve the throughput objective on ``graph`` and judge the usual splitters' splits beside it.

    Parameters
    ----------
    graph : CompGraph
        Any graph; torchtitan's even layers need a layer-level one (``n/a`` otherwise).
    n_stages : int
        K.
    bandwidth, micro_batches, memory
        The pipeline model (`StageProblem.pipeline`): sends at ``bandwidth`` bytes/s,
        ``micro_batches`` in flight under 1F1B, ``memory`` bytes per stage if given.
    time_limit : float
        Seconds for our solve.
    seed : int

    Returns
    -------
    Comparison

    Raises
    ------
    ProblemError
        For a bad K or pipeline setting (from `StageProblem.pipeline`).
    """
    problem = StageProblem.pipeline(graph, n_stages, memory=memory, bandwidth=bandwidth, micro_batches=micro_batches)
    result = solve(problem, time_limit=time_limit, seed=seed)
    ours = _figures(problem, OURS, result.stages, None, "" if result.stages is not None else f"no split fits ({result.status})")
    rows = [ours]
    for name, splitter in SPLITTERS.items():
        try:
            stages = splitter(problem, seed)
        except ProblemError as err:
            rows.append(SplitFigures(name, None, note=str(err)))
            continue
        rows.append(_figures(problem, name, stages, ours.slowest_stage_s))
    return Comparison(graph.name, n_stages, float(bandwidth), int(micro_batches), result.status, tuple(rows))


def _figures(problem: StageProblem, method: str, stages, ours_s: float | None, note: str = "") -> SplitFigures:
    if stages is None:
        return SplitFigures(method, None, note=note)
    ev = evaluate_stages(problem, np.asarray(stages))
    slower = None if not ours_s else ev.stage_time_peak_s / ours_s - 1.0
    return SplitFigures(method, tuple(int(s) for s in stages), ev.stage_time_peak_s, int(max(ev.stage_memory)), ev.throughput,
                        slower, note="" if ev.feasible else "; ".join(ev.violations or ["infeasible"]))


def measure_splits(comparison: Comparison, capture, *, repeats: int = 3, runtime: str = "processes") -> Comparison:
    """Run every split as a pipeline of K CPU workers and add its measured throughput.

    Parameters
    ----------
    comparison : Comparison
        From `compare_splits` on ``capture.graph``'s structure.
    capture : incsched.capture.Capture
        The captured model the splits cut.
    repeats : int
        Timed runs (median taken) after one warm-up.
    runtime : {"processes", "threads"}
        One process per stage over gloo (default), or one thread per stage.

    Returns
    -------
    Comparison
        With ``measured_throughput`` filled and ``measured_on`` saying how.

    Raises
    ------
    IncschedError
        If the capture has another number of nodes than the compared graph.
    OutputMismatch, ExecutionError
        From `incsched.execute.validate.validate_stages`.
    """
    from .execute.validate import validate_stages  # torch, only where splits run

    K = comparison.n_stages
    rows = []
    for row in comparison.rows:
        if row.stages is not None and len(row.stages) != capture.graph.n_nodes:
            raise IncschedError(f"the capture has {capture.graph.n_nodes} nodes, the compared graph {len(row.stages)}: another model or granularity")
        if row.stages is None:
            rows.append(row)
            continue
        v = validate_stages(capture, row.stages, ["cpu"] * K, n_micro_batches=comparison.micro_batches, repeats=repeats, runtime=runtime)
        log.info("%s: %.3f micro-batches/s measured", row.method, v.measured["throughput"])
        rows.append(dataclasses.replace(row, measured_throughput=float(v.measured["throughput"])))
    how = f"{K} CPU worker {'processes' if runtime == 'processes' else 'threads'}, {comparison.micro_batches} micro-batches, median of {repeats}"
    return dataclasses.replace(comparison, rows=tuple(rows), measured_on=how)


def plot_comparison(comparison: Comparison, path: str | os.PathLike, fmt: str | None = None) -> Path:
    """Bars per split: predicted slowest stage, peak memory and (when measured) measured throughput.

    Raises
    ------
    IncschedError
        matplotlib is not installed (the message says how to install it).
    """
    from .show.canvas import new_figure, style  # matplotlib, only where a figure is drawn

    rows = [r for r in comparison.rows if r.slowest_stage_s is not None]
    panels = [("predicted slowest stage (ms)", [1e3 * r.slowest_stage_s for r in rows]),
              ("predicted peak memory (MiB)", [r.peak_memory_bytes / 2**20 for r in rows])]
    if comparison.measured_on is not None:
        panels.append(("measured micro-batches / s", [r.measured_throughput or 0.0 for r in rows]))
    path = Path(path)
    with style():
        fig = new_figure(figsize=(3.2 * len(panels), 0.35 * len(rows) + 1.4), layout="constrained")
        axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
        labels = [r.method for r in rows]
        colors = ["tab:green" if r.method == OURS else "tab:gray" for r in rows]
        for ax, (title, values) in zip(axes, panels):
            ax.barh(range(len(rows)), values, color=colors)
            ax.set_title(title)
            ax.set_yticks(range(len(rows)), labels)
        axes[0].invert_yaxis()  # ours on top (the axes share it: once)
        fig.suptitle(f"{comparison.graph}, K = {comparison.n_stages} (ours: {comparison.status})")
        fig.savefig(path, format=fmt or path.suffix.lstrip(".") or "png")
    return path
