"""`draw`: one result as a picture file, checked against the problem it was solved for.

A stage result is drawn from its own terms (per-stage times and parameter bytes); its problem,
when given, adds the activations 1F1B keeps in flight and the capacity lines. A placement result
is replayed on its problem by the simulator, each device in its order: that must give the
result's own start ticks, else the problem is not the one it was solved for and nothing is drawn.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ..errors import IncschedError
from ..result import Result
from .canvas import format_seconds, picture_format, save, style
from .gantt import gantt_figure, timeline
from .pipeline import pipeline_figure

__all__ = ["draw", "DEFAULT_MICRO_BATCHES"]

#: Micro-batches drawn when neither the caller nor the problem says (the CLI's default too).
DEFAULT_MICRO_BATCHES = 4


def draw(result: Result, problem, path: str | os.PathLike, fmt: str | None = None, *, micro_batches: int | None = None) -> Path:
    """Draw ``result`` to ``path`` (PNG or SVG) and return the path.

    A stage split is drawn as the 1F1B pipeline it runs over ``micro_batches`` (its bubbles, each
    stage's idle share; backward estimated as twice the forward, and labelled so) beside the
    memory per stage; a placement as a Gantt chart per device with its transfers.

    Parameters
    ----------
    result : Result
        A stage or placement result with an answer (not ``infeasible`` or ``unknown`` without one).
    problem : StageProblem, PlacementProblem or None
        The problem ``result`` solved. Needed for a placement (node durations, links); for a stage
        split it adds the activations in flight and the ``capacity`` and ``memory`` lines.
    path : path-like
        File to write (atomically).
    fmt : {"png", "svg"}, optional
        Default: from ``path``'s suffix.
    micro_batches : int, optional
        Stage splits: micro-batches per batch (default: the problem's, else 4).

    Returns
    -------
    Path

    Raises
    ------
    IncschedError
        No answer to draw; an assignment that does not fit the problem's graph (`Result.check_assignment`:
        another graph's digest, node count, out-of-range stages or devices); a placement without its
        problem; a problem of the other kind, with another time unit, or on which the placement's
        start times or makespan do not hold; a path that is not .png or .svg; matplotlib missing
        (the message says how to install it).

    Examples
    --------
    >>> from incsched import StageProblem, load_graph, solve
    >>> problem = StageProblem.peer(load_graph("resnet18"), n_stages=4)
    >>> draw(solve(problem, "pipedream_dp"), problem, "split.svg")  # doctest: +SKIP
    PosixPath('split.svg')
    """
    picture_format(path, fmt)  # a bad name fails before any drawing
    if result.assignment is None:
        why = f": {result.reason}" if result.reason else ""
        raise IncschedError(f"the {result.problem} result for {result.graph!r} has no answer to draw (status {result.status}{why})")
    if problem is not None:
        _check_same_problem(result, problem)
    result.check_assignment(problem.graph if problem is not None else None, source=f"the result for {result.graph!r}")
    with style():
        fig = _stage_figure(result, problem, micro_batches) if result.problem == "stage" else _placement_figure(result, problem)
    return save(fig, path, fmt)


def _check_same_problem(result: Result, problem) -> None:
    from ..problems import PlacementProblem, StageProblem

    kind = StageProblem if result.problem == "stage" else PlacementProblem
    if not isinstance(problem, kind):
        raise IncschedError(f"a {result.problem} result is drawn with its {kind.__name__}, got {type(problem).__name__}")
    unit = result.provenance.get("time_unit")
    if unit is not None and unit != problem.time_unit:
        raise IncschedError(f"the result for {result.graph!r} counts time in ticks of {unit:g} s, this problem in ticks of "
                            f"{problem.time_unit:g} s: not the problem it was solved for (other devices, links or device kind?)")


def _stage_figure(result: Result, problem, micro_batches: int | None):
    terms = result.terms
    if not terms.get("stage_mem") or not terms.get("stage_compute_s"):
        raise IncschedError(f"the stage result for {result.graph!r} has no per-stage terms (stage_mem, stage_compute_s) to draw")
    stages = len(terms["stage_mem"])
    m = micro_batches or (problem.micro_batches if problem is not None else None) or DEFAULT_MICRO_BATCHES
    # A throughput result's stage time counts its sends; any other result's is its compute.
    forward = terms.get("stage_time_s") or terms["stage_compute_s"]
    activations = capacity = memory = None
    if problem is not None:
        activations = _activations_in_flight(result, problem, m)
        capacity, memory = problem.capacity, problem.memory
    what = "sends included" if "stage_time_s" in terms else "compute"
    times = " | ".join(format_seconds(s) for s in forward) if stages <= 8 else f"slowest {format_seconds(max(forward))}"
    title = f"{result.graph}: {stages} stages, {result.method} ({result.status}); stage times ({what}) {times}"
    return pipeline_figure(forward, None, m, terms["stage_mem"], activations=activations, capacity=capacity, memory=memory,
                           sends_included="stage_time_s" in terms, title=title)


def _activations_in_flight(result: Result, problem, micro_batches: int) -> list[int]:
    """Bytes of activations each stage keeps under 1F1B, by the problem's own memory rule."""
    from ..evaluate import evaluate_stages

    K = len(result.terms["stage_mem"])
    if problem.n_stages != K:
        raise IncschedError(f"the result for {result.graph!r} has {K} stages, the problem {problem.n_stages}")
    ev = evaluate_stages(dataclasses.replace(problem, micro_batches=micro_batches), result.stages)
    if ev.stage_mem is None or ev.stage_mem.tolist() != list(result.terms["stage_mem"]):
        raise IncschedError(f"the graph's parameter bytes per stage differ from the result's for {result.graph!r}: "
                            "not the graph it was solved for")
    return [total - params for total, params in zip(ev.stage_memory, ev.stage_mem.tolist())]


def _placement_figure(result: Result, problem):
    if problem is None:
        raise IncschedError(f"a placement result is drawn with its problem (the graph's node times and the links): "
                            f"none given for {result.graph!r}")
    if len(result.order or ()) != problem.n_devices:
        raise IncschedError(f"the result for {result.graph!r} orders {len(result.order or ())} devices, the problem has {problem.n_devices}")
    t = _replay(result, problem)
    bound = "" if result.lower_bound is None else f", lower bound {format_seconds(float(result.lower_bound) * problem.time_unit)}"
    gap = "" if not result.gap else f" (gap {100 * result.gap:.2f}%)"
    label = (f"{result.method} ({result.status}): makespan {format_seconds(t.makespan)}{bound}{gap}, {len(t.transfers)} transfers")
    return gantt_figure([(label, t)], title=f"{result.graph} on {problem.n_devices} devices")


def _replay(result: Result, problem):
    """The placement run in its order on ``problem``, as certify ran it before the result was
    returned: it must give the result's own start ticks, else the problem (node times, links) is
    another one, and a chart of it would show a schedule that was never solved."""
    from ..errors import PlacementError

    elsewhere = "not the problem it was solved for (other node times, devices or links: --kind, --devices/--links, --bandwidth, --latency?)"
    try:
        t = timeline(problem, result.device, result.order)
    except PlacementError as exc:  # an order that deadlocks here
        raise IncschedError(f"the result for {result.graph!r} does not run on this problem ({exc}): {elsewhere}") from None
    ticks = [round(s / problem.time_unit) for s in t.start]
    for v, (replayed, said) in enumerate(zip(ticks, result.start or ticks)):
        if replayed != said:
            raise IncschedError(f"the result for {result.graph!r}, replayed on this problem: node {problem.graph.names[v]!r} starts "
                                f"at tick {replayed:,}, the result says {said:,}: {elsewhere}")
    return t
