"""A placement as it runs: a Gantt chart with a row per device, its operations in their solved
order and times, and the transfers between devices on link rows below, joined by arrows from
the producer's end to the arrival.

`timeline` replays a result on its problem with the independent simulator (never the solver's
own numbers), so the chart shows the schedule that executes; `gantt_figure` draws one or several
timelines on one time axis.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

from .canvas import add_bars, new_figure, time_scale

__all__ = ["Transfer", "Timeline", "timeline", "gantt_figure", "MAX_ARROWS", "MAX_LINK_ROWS"]

#: More transfers than this are joined by plain lines: arrow heads would cover the bars.
MAX_ARROWS = 150
#: Op kinds coloured by name (the ones with the most time); the rest share one grey.
_KIND_COLOURS = 9
#: More device pairs than this share one transfer row (8 devices have 56 pairs).
MAX_LINK_ROWS = 4
_LINK_LANES = 6


@dataclass(frozen=True)
class Transfer:
    """An edge's tensor moving from ``source``'s device to ``target``'s, in seconds."""

    source: int
    target: int
    from_device: int
    to_device: int
    sent: float
    arrived: float


@dataclass(frozen=True)
class Timeline:
    """An executed placement in seconds: what a Gantt chart draws.

    Attributes
    ----------
    device_names : tuple of str
    device : tuple of int
        Device of each node.
    start, end : tuple of float
        Seconds of each node.
    op : tuple of str
        Op kind of each node (colours the bars).
    transfers : tuple of Transfer
        Every edge between two devices.
    makespan : float
        Seconds from the first start to the last end.
    """

    device_names: tuple[str, ...]
    device: tuple[int, ...]
    start: tuple[float, ...]
    end: tuple[float, ...]
    op: tuple[str, ...]
    transfers: tuple[Transfer, ...]
    makespan: float

    @classmethod
    def from_row(cls, schedule: dict[str, Any], device_names: Sequence[str] | None = None) -> Timeline:
        """From an experiment row's ``schedule`` (`incsched.experiment.run` writes it, in seconds)."""
        n_devices = max(schedule["device"], default=-1) + 1
        names = tuple(device_names) if device_names is not None else tuple(f"device {d}" for d in range(n_devices))
        return cls(names, tuple(schedule["device"]), tuple(schedule["start_s"]), tuple(schedule["end_s"]), tuple(schedule["op"]),
                   tuple(Transfer(*t) for t in schedule["transfers"]), float(schedule["makespan_s"]))

    def busy_fractions(self) -> list[float]:
        """Share of the makespan each device computes."""
        busy = [0.0] * len(self.device_names)
        for d, s, e in zip(self.device, self.start, self.end):
            busy[d] += e - s
        return [b / self.makespan if self.makespan > 0 else 0.0 for b in busy]


def timeline(problem, device, order) -> Timeline:
    """Run a placement on ``problem`` with the simulator, each device in its order as soon as it
    can (as `solve` certified it), and return it in seconds.

    Parameters
    ----------
    problem : PlacementProblem
    device : sequence of int
        Device of each node.
    order : sequence of sequences of int
        Each device's nodes in order.

    Raises
    ------
    PlacementError
        The placement does not fit the problem (node or device count, an order that is not a
        partition), or `DeadlockError` (a subclass) when an order contradicts precedence.
    """
    from ..evaluate.simulate import simulate
    from ..problems import Placement

    sched = simulate(problem, Placement(device, order), "ordered")
    unit = problem.time_unit
    ticks = problem.transfer_ticks()
    g = problem.graph
    transfers = []
    for e, (u, v) in enumerate(zip(g.src.tolist(), g.dst.tolist())):
        du, dv = int(sched.device[u]), int(sched.device[v])
        if du != dv:
            sent = int(sched.end[u])
            transfers.append(Transfer(u, v, du, dv, sent * unit, (sent + int(ticks[e, du, dv])) * unit))
    return Timeline(tuple(d.name for d in problem.devices), tuple(sched.device.tolist()), tuple((sched.start * unit).tolist()),
                    tuple((sched.end * unit).tolist()), tuple(g.op), tuple(transfers), float(sched.makespan_seconds))


def gantt_figure(panels: Sequence[tuple[str, Timeline]], *, title: str = ""):
    """One Gantt chart per (label, timeline), stacked on a shared time axis.

    Rows: the devices (operations coloured by op kind, each device's busy share in its label),
    then one row per link that carried data (transfers as thin bars, overlapping ones in lanes),
    with a grey arrow (or line, beyond `MAX_ARROWS`) from each producer's end to the arrival.

    Returns
    -------
    matplotlib.figure.Figure
    """
    colours = _kind_colours([t for _, t in panels])
    row_counts = [len(t.device_names) + len(_links(t)) for _, t in panels]
    fig = new_figure(figsize=(10, 0.9 + sum(0.38 * r + 0.7 for r in row_counts)))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False, height_ratios=[r + 1.5 for r in row_counts])[:, 0]
    longest = max((t.makespan for _, t in panels), default=0.0)
    unit, unit_name = time_scale(longest)
    for i, (ax, (label, t)) in enumerate(zip(axes, panels)):
        _draw_timeline(ax, t, colours, unit)
        # the figure's title heads the first panel: a suptitle left a band of white above short charts
        ax.set_title(f"{title}\n{label}" if title and i == 0 else label, fontsize=8, loc="left")
    axes[-1].set_xlabel(f"time ({unit_name})")
    axes[-1].set_xlim(0, longest / unit * 1.01 if longest else 1)
    _legend(fig, colours)
    fig.tight_layout()
    return fig


def _kind_colours(timelines: Sequence[Timeline]) -> dict[str, str]:
    """A colour per op kind: the kinds with the most time get their own, the rest grey."""
    seconds: dict[str, float] = defaultdict(float)
    for t in timelines:
        for k, s, e in zip(t.op, t.start, t.end):
            seconds[k] += e - s
    ranked = sorted(seconds, key=lambda k: (-seconds[k], k))
    palette = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#CCB974", "#64B5CD"]
    out = {k: palette[i] for i, k in enumerate(ranked[:_KIND_COLOURS])}
    out.update({k: "#A0A0A0" for k in ranked[_KIND_COLOURS:]})
    return out


def _links(t: Timeline) -> list[tuple[int, int] | None]:
    """The link rows: each (from, to) device pair that carried data for a measurable time, in
    device order; or, beyond `MAX_LINK_ROWS` pairs, one row (None) for all of them."""
    pairs = sorted({(x.from_device, x.to_device) for x in t.transfers if x.arrived > x.sent})
    return pairs if len(pairs) <= MAX_LINK_ROWS else [None]


def _lanes(transfers: list[Transfer]) -> list[int]:
    """A lane per transfer so that overlapping ones sit side by side (first free lane, wrapping)."""
    lane_end: list[float] = []
    out = []
    for x in transfers:
        lane = next((i for i, end in enumerate(lane_end) if end <= x.sent), None)
        if lane is None:
            lane = len(lane_end) if len(lane_end) < _LINK_LANES else min(range(len(lane_end)), key=lane_end.__getitem__)
            if lane == len(lane_end):
                lane_end.append(0.0)
        lane_end[lane] = x.arrived
        out.append(lane)
    return out


def _draw_timeline(ax, t: Timeline, colours: dict[str, str], unit: float) -> None:
    from matplotlib.collections import LineCollection

    n_dev = len(t.device_names)
    add_bars(ax, [(s / unit, (e - s) / unit, d - 0.35, 0.7) for d, s, e in zip(t.device, t.start, t.end)], [colours[k] for k in t.op])
    links = _links(t)
    transfer_bars = []
    for row, pair in enumerate(links, start=n_dev):
        moving = sorted((x for x in t.transfers if pair in (None, (x.from_device, x.to_device)) and x.arrived > x.sent), key=lambda x: x.sent)
        lanes = _lanes(moving)
        height = 0.7 / (max(lanes, default=0) + 1)
        transfer_bars += [(x.sent / unit, (x.arrived - x.sent) / unit, row - 0.35 + lane * height, 0.85 * height) for x, lane in zip(moving, lanes)]
    add_bars(ax, transfer_bars, "#7F7F7F", edgecolor="none")
    # producer's end on its device -> arrival on the consumer's: which device fed which, and when
    if len(t.transfers) <= MAX_ARROWS:
        x0 = [x.sent / unit for x in t.transfers]
        y0 = [x.from_device for x in t.transfers]
        ax.quiver(x0, y0, [x.arrived / unit - a for x, a in zip(t.transfers, x0)], [x.to_device - b for x, b in zip(t.transfers, y0)],
                  angles="xy", scale_units="xy", scale=1, color="#555555", alpha=0.6, width=0.0015, headwidth=5, headlength=6,
                  headaxislength=5, zorder=4)
    else:
        segments = [((x.sent / unit, x.from_device), (x.arrived / unit, x.to_device)) for x in t.transfers]
        ax.add_collection(LineCollection(segments, colors="#555555", linewidths=0.4, alpha=0.4, zorder=4))
    busy = t.busy_fractions()
    labels = [f"{name}\nbusy {100 * b:.0f}%" for name, b in zip(t.device_names, busy)]
    labels += [f"link {t.device_names[p[0]]} → {t.device_names[p[1]]}" if p else "transfers\n(all links)" for p in links]
    ax.set_yticks(range(n_dev + len(links)), labels)
    ax.set_ylim(n_dev + len(links) - 0.5, -0.5)


def _legend(fig, colours: dict[str, str]) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    named = [k for k, c in colours.items() if c != "#A0A0A0"]
    handles = [Patch(facecolor=colours[k], edgecolor="black", linewidth=0.25, label=k) for k in named]
    if len(named) < len(colours):
        handles.append(Patch(facecolor="#A0A0A0", edgecolor="black", linewidth=0.25, label=f"{len(colours) - len(named)} other op kinds"))
    handles += [Patch(facecolor="#7F7F7F", label="transfer on a link"),
                Line2D([], [], color="#555555", lw=0.8, marker=">", markersize=4, label="producer end → arrival")]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(handles), 6), frameon=False)
