"""A stage split as the pipeline it runs: the 1F1B schedule of its stage times over micro-batches,
with the bubbles where a stage waits, beside the memory each stage holds.

`one_f_one_b` is plain arithmetic (no matplotlib); `pipeline_figure` draws it. The schedule is
PipeDream-Flush's 1F1B, the one `StageProblem` counts activations for: stage k of K runs
``min(K - 1 - k, M)`` forwards, then alternates one forward and one backward, then drains its
backwards, so it holds at most ``min(K - k, M)`` micro-batches' activations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .canvas import add_bars, byte_scale, new_figure, time_scale

__all__ = ["Block", "one_f_one_b", "bubble_fractions", "pipeline_figure", "BACKWARD_ESTIMATE", "FORWARD_COLOUR", "BACKWARD_COLOUR"]

#: Backward over forward time when a result has no backward times: the usual estimate for a
#: layer's backward (two matrix products, for the input's and the weights' gradients, per forward one).
BACKWARD_ESTIMATE = 2.0

FORWARD_COLOUR = "#4C72B0"
BACKWARD_COLOUR = "#DD8452"
_BUBBLE_COLOUR = "#E5E5E5"


@dataclass(frozen=True)
class Block:
    """One pass of one micro-batch on one stage, in seconds from the start of the batch."""

    stage: int
    micro_batch: int
    backward: bool
    start: float
    end: float


def _stage_passes(k: int, n_stages: int, micro_batches: int) -> list[tuple[bool, int]]:
    """(backward?, micro-batch) in the order stage ``k`` runs them under 1F1B."""
    warm_up = min(n_stages - 1 - k, micro_batches)
    passes = [(False, m) for m in range(warm_up)]
    for i in range(micro_batches - warm_up):
        passes += [(False, warm_up + i), (True, i)]
    passes += [(True, m) for m in range(micro_batches - warm_up, micro_batches)]
    return passes


def one_f_one_b(forward_s: Sequence[float], backward_s: Sequence[float], micro_batches: int) -> list[Block]:
    """The 1F1B schedule of one batch of ``micro_batches`` over stages with these pass times.

    A forward of micro-batch m on stage k starts once stage k - 1 has finished m's forward; a
    backward once stage k + 1 has finished m's backward (the last stage: its own forward of m);
    each stage runs its passes in 1F1B order, one at a time. Sends take no time here (a result of
    the throughput objective counts them in its stage times).

    Parameters
    ----------
    forward_s, backward_s : sequences of float
        Seconds of one micro-batch's forward and backward pass on each stage.
    micro_batches : int
        Micro-batches per batch (>= 1).

    Returns
    -------
    list of Block
        Every pass, stage by stage in the order each stage runs them.

    Examples
    --------
    >>> blocks = one_f_one_b([1.0, 1.0], [2.0, 2.0], 2)
    >>> [(b.stage, b.micro_batch, "B" if b.backward else "F", b.start) for b in blocks]
    [(0, 0, 'F', 0.0), (0, 1, 'F', 1.0), (0, 0, 'B', 4.0), (0, 1, 'B', 7.0), (1, 0, 'F', 1.0), (1, 0, 'B', 2.0), (1, 1, 'F', 4.0), (1, 1, 'B', 5.0)]
    """
    n_stages = len(forward_s)
    if len(backward_s) != n_stages:
        raise ValueError(f"{n_stages} forward times but {len(backward_s)} backward times")
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be >= 1, got {micro_batches}")
    todo = [_stage_passes(k, n_stages, micro_batches) for k in range(n_stages)]
    done: dict[tuple[int, bool, int], float] = {}  # (stage, backward?, micro-batch) -> end
    free = [0.0] * n_stages
    placed: list[list[Block]] = [[] for _ in range(n_stages)]
    # Stages take turns running their next pass as soon as its input is done; 1F1B never
    # deadlocks, so every sweep places at least one pass.
    while any(todo):
        progressed = False
        for k in range(n_stages):
            while todo[k]:
                backward, m = todo[k][0]
                if backward:
                    ready = done.get((k + 1, True, m)) if k + 1 < n_stages else done.get((k, False, m))
                else:
                    ready = done.get((k - 1, False, m)) if k > 0 else 0.0
                if ready is None:
                    break
                start = max(free[k], ready)
                end = start + (backward_s[k] if backward else forward_s[k])
                placed[k].append(Block(k, m, backward, start, end))
                done[(k, backward, m)] = free[k] = end
                todo[k].pop(0)
                progressed = True
        if not progressed:  # pragma: no cover - a wrong pass order, not a user's input
            raise AssertionError("1F1B pass order deadlocked")
    return [b for stage in placed for b in stage]


def bubble_fractions(blocks: Sequence[Block], n_stages: int) -> list[float]:
    """Idle share of each stage over the whole batch (first pass of any stage to the last end)."""
    span = max((b.end for b in blocks), default=0.0)
    busy = [0.0] * n_stages
    for b in blocks:
        busy[b.stage] += b.end - b.start
    return [1.0 - busy[k] / span if span > 0 else 0.0 for k in range(n_stages)]


def pipeline_figure(
    forward_s: Sequence[float],
    backward_s: Sequence[float] | None,
    micro_batches: int,
    parameters: Sequence[int],
    *,
    activations: Sequence[int] | None = None,
    capacity: Sequence[int] | None = None,
    memory: Sequence[int] | None = None,
    sends_included: bool = False,
    title: str = "",
):
    """The 1F1B schedule (left) and the memory per stage (right) of a stage split.

    Parameters
    ----------
    forward_s : sequence of float
        Seconds of a micro-batch's forward pass per stage.
    backward_s : sequence of float, optional
        Seconds of its backward pass per stage; None estimates `BACKWARD_ESTIMATE` x forward,
        and the figure says so.
    micro_batches : int
        Micro-batches per batch.
    parameters : sequence of int
        Parameter bytes per stage.
    activations : sequence of int, optional
        Bytes of the activations each stage keeps in flight under 1F1B, stacked on the parameters.
    capacity : sequence of int, optional
        Hard per-stage parameter bytes (drawn as a line).
    memory : sequence of int, optional
        Hard per-stage bytes for parameters plus activations (drawn as a line).
    sends_included : bool
        Whether ``forward_s`` counts each stage's sends (a throughput result's stage times);
        either way they are not drawn apart, and the figure says which.
    title : str
        What was split and how it was solved.

    Returns
    -------
    matplotlib.figure.Figure
    """
    estimated = backward_s is None
    if estimated:
        backward_s = [BACKWARD_ESTIMATE * f for f in forward_s]
    n_stages = len(forward_s)
    blocks = one_f_one_b(forward_s, backward_s, micro_batches)
    fig = new_figure(figsize=(11, 1.2 + 0.55 * n_stages + 0.6))
    grid = fig.add_gridspec(1, 2, width_ratios=(3.2, 1))
    _draw_schedule(fig.add_subplot(grid[0]), blocks, n_stages, micro_batches, estimated, sends_included)
    _draw_memory(fig.add_subplot(grid[1]), parameters, activations, capacity, memory)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _draw_schedule(ax, blocks: list[Block], n_stages: int, micro_batches: int, estimated: bool, sends_included: bool) -> None:
    from matplotlib.patches import Patch

    span = max((b.end for b in blocks), default=0.0)
    unit, unit_name = time_scale(span)
    height = 0.8
    # the bubbles first, as the background of each row: what the passes do not cover is idle
    add_bars(ax, [(0, span / unit, k - height / 2, height) for k in range(n_stages)], _BUBBLE_COLOUR, hatch="///", edgecolor="#BBBBBB",
             linewidth=0, zorder=1)
    add_bars(ax, [(b.start / unit, (b.end - b.start) / unit, b.stage - height / 2, height) for b in blocks],
             [BACKWARD_COLOUR if b.backward else FORWARD_COLOUR for b in blocks], edgecolor="white", linewidth=0.6)
    for b in blocks:
        width = (b.end - b.start) / unit
        if width >= 0.022 * span / unit:  # a number only where it fits
            ax.text((b.start / unit) + width / 2, b.stage, str(b.micro_batch + 1), ha="center", va="center", color="white", fontsize=7)
    idle = bubble_fractions(blocks, n_stages)
    ax.set_yticks(range(n_stages), [f"stage {k}\nidle {100 * idle[k]:.0f}%" for k in range(n_stages)])
    ax.set_ylim(n_stages - 0.5, -0.5)  # stage 0 on top, as the data flows down
    ax.set_xlim(0, span / unit * 1.01 if span else 1)
    ax.set_xlabel(f"time within one batch ({unit_name})")
    total_idle = sum(idle) / n_stages if n_stages else 0.0
    backward = f"backward = {BACKWARD_ESTIMATE:g} x forward (estimated: the result has no backward times)" if estimated else "backward as given"
    ax.set_title(f"1F1B over {micro_batches} micro-batches: {span / unit:.4g} {unit_name} per batch, {100 * total_idle:.0f}% idle (bubbles)\n"
                 f"{backward}; {'sends inside each forward' if sends_included else 'sends not counted'}", fontsize=8)
    ax.legend(handles=[Patch(facecolor=FORWARD_COLOUR, label="forward (micro-batch number)"),
                       Patch(facecolor=BACKWARD_COLOUR, label="backward"),
                       Patch(facecolor=_BUBBLE_COLOUR, hatch="///", edgecolor="#BBBBBB", label="bubble (idle)")],
              loc="upper center", bbox_to_anchor=(0.5, -0.18 - 0.04 * max(0, 4 - n_stages)), ncol=3, frameon=False)


def _draw_memory(ax, parameters, activations, capacity, memory) -> None:
    stages = range(len(parameters))
    most = max([p + (a or 0) for p, a in zip(parameters, activations or [0] * len(parameters))] + list(capacity or []) + list(memory or []))
    unit, unit_name = byte_scale(most)
    ax.barh(list(stages), [p / unit for p in parameters], color="#55A868", label="parameters")
    if activations is not None:
        ax.barh(list(stages), [a / unit for a in activations], left=[p / unit for p in parameters], color="#8172B3",
                label="activations in flight (1F1B)")
    for limit, label, style in ((capacity, "capacity (parameters)", "-"), (memory, "memory (parameters + activations)", "--")):
        if limit is not None:
            # one short vertical mark per stage: capacities may differ between stages
            for k, c in zip(stages, limit):
                ax.plot([c / unit, c / unit], [k - 0.45, k + 0.45], style, color="#C44E52", lw=1.5,
                        label=label if k == 0 else None)
    ax.set_ylim(len(parameters) - 0.5, -0.5)
    ax.set_yticks(list(stages), [f"stage {k}" for k in stages])
    ax.set_xlabel(f"{unit_name} per stage")
    ax.set_xlim(left=0)
    ax.set_title("memory per stage", fontsize=8)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18 - 0.04 * max(0, 4 - len(parameters))), frameon=False)
