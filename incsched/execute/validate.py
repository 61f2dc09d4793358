"""Validation: execute a solved stage assignment or placement and set what it measured beside what the
cost model predicted.

The last arrow of the pipeline. A stage assignment runs as a GPipe pipeline over micro-batches, a
placement in its solved per-device order; the outputs are checked against the unsplit model before
anything is timed. Predictions use the same graph times the solver used: a pipeline's per-stage sums
(``sum T_k + (M - 1) max T_k`` for M micro-batches), a placement's simulated schedule.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..capture import Capture
from ..evaluate.simulate import simulate
from ..problems import Links, Placement, PlacementProblem
from .calibrate import calibrated_devices
from .distributed import execute_distributed
from .equivalence import check_execution
from .partition import ExecutionError, Program, placement_program, stage_program
from .pipelining import execute_pipelined
from .runner import Execution, cpu_threads_per_worker, execute, pipeline_plan, placement_plan, prepare

log = logging.getLogger(__name__)

__all__ = [
    "Validation",
    "micro_batches",
    "predict_pipeline",
    "validate_stages",
    "validate_placement",
    "validate_result",
    "default_devices",
    "rank_placements",
    "device_problem",
    "cpu_time_threads",
    "RUNTIMES",
]


@dataclass(frozen=True)
class Validation:
    """Measured against predicted for one executed answer.

    Attributes
    ----------
    graph : str
    kind : {"stage", "placement"}
    devices : list of str
        The torch device of each stage or device.
    micro_batches : int
        Micro-batches per run (1 for a placement).
    repeats : int
        Timed runs (after one untimed warm-up run); measured figures are medians over them.
    max_abs_diff : float
        Largest difference between the split run's outputs and the unsplit model's (all checked).
    predicted, measured : dict
        ``makespan_s``, ``busy_s`` (per worker) and, for pipelines, ``latency_s`` and
        ``throughput`` (micro-batches per second); ``measured`` adds ``peak_bytes`` per worker.
    """

    graph: str
    kind: str
    devices: list[str]
    micro_batches: int
    repeats: int
    max_abs_diff: float
    predicted: dict[str, Any]
    measured: dict[str, Any]
    parts: int = 0
    notes: list[str] = field(default_factory=list)

    def relative_error(self) -> dict[str, float]:
        """(measured - predicted) / predicted for every scalar figure both sides have."""
        out = {}
        for key, p in self.predicted.items():
            m = self.measured.get(key)
            if isinstance(p, (int, float)) and isinstance(m, (int, float)) and p:
                out[key] = (m - p) / p
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "graph": self.graph,
            "kind": self.kind,
            "devices": self.devices,
            "micro_batches": self.micro_batches,
            "repeats": self.repeats,
            "parts": self.parts,
            "max_abs_diff": self.max_abs_diff,
            "predicted": self.predicted,
            "measured": self.measured,
            "relative_error": self.relative_error(),
            "notes": self.notes,
        }

    def table(self) -> str:
        """A markdown table: figure | predicted | measured | relative error."""
        rel = self.relative_error()
        rows = ["| figure | predicted | measured | rel. error |", "|---|---|---|---|"]
        for key in ("makespan_s", "latency_s", "throughput"):
            if key in self.predicted:
                rows.append(f"| {key} | {self.predicted[key]:.4g} | {self.measured[key]:.4g} | {rel.get(key, math.nan):+.1%} |")
        for w, (p, m) in enumerate(zip(self.predicted["busy_s"], self.measured["busy_s"])):
            err = (m - p) / p if p else math.nan
            rows.append(f"| busy_s[{w}] ({self.devices[w]}) | {p:.4g} | {m:.4g} | {err:+.1%} |")
        for w, b in enumerate(self.measured.get("peak_bytes", [])):
            rows.append(f"| peak_bytes[{w}] | | {b / 2**20:.1f} MiB | |")
        return "\n".join(rows)


def micro_batches(example_inputs: Sequence[Any], n: int, seed: int = 0) -> list[tuple[Any, ...]]:
    """``n`` input batches shaped like ``example_inputs``: the example itself, then random ones.

    Floating inputs are drawn from a standard normal, integer inputs (token ids) uniformly below the
    example's largest value plus one, so every micro-batch is valid input for the model.
    """
    gen = torch.Generator().manual_seed(seed)
    out = [tuple(example_inputs)]
    for _ in range(n - 1):
        batch = []
        for x in example_inputs:
            if isinstance(x, torch.Tensor) and x.dtype.is_floating_point:
                batch.append(torch.randn(x.shape, generator=gen, dtype=x.dtype))
            elif isinstance(x, torch.Tensor) and x.dtype in (torch.int32, torch.int64):
                high = int(x.max()) + 1 if x.numel() else 1
                batch.append(torch.randint(0, high, x.shape, generator=gen, dtype=x.dtype))
            else:
                batch.append(x)
        out.append(tuple(batch))
    return out


def device_problem(graph, devices: Sequence[str], links: Links | None = None) -> PlacementProblem:
    """The placement problem of ``graph`` on these torch devices (times per device kind).

    Without measured ``links``, transfers are free between devices of one kind (threads sharing
    host memory) and cost nothing either way; pass `incsched.execute.calibrate` measurements for CPU+GPU.
    """
    return PlacementProblem(graph, calibrated_devices(devices), links or Links())


def predict_pipeline(graph, stages: Sequence[int], devices: Sequence[str], n_micro_batches: int, links: Links | None = None,
                     *, forwarded: bool = False) -> dict[str, Any]:
    """Cost-model figures of a forward GPipe pipeline.

    ``T_k`` = the stage's node times on its device kind plus the transfers into it from stages on
    other devices; latency ``sum T_k``; makespan ``sum T_k + (M - 1) max T_k``, or more when
    stages share a GPU: streams of one GPU do not run side by side, so a GPU holding several
    stages needs ``M * sum of their T_k``. (Stages sharing the CPU get their own cores.)

    A value goes straight from its producer's stage to each reader's, or with ``forwarded`` (the
    ``"pipelining"`` runtime, a chain of stages) through every stage in between, each hop a
    transfer into the next stage when the two sit on different devices.
    """
    stages = np.asarray(stages, dtype=np.int64)
    K = len(devices)
    lat, bw = (links or Links()).matrices(K)
    T = np.zeros(K)
    for k in range(K):
        kind = torch.device(devices[k]).type
        T[k] = float(graph.time(kind)[stages == k].sum())
    sent = set()  # (value, stage it enters): each value enters a stage once
    for u, v in zip(graph.src.tolist(), graph.dst.tolist()):
        a, b = int(stages[u]), int(stages[v])
        hops = zip(range(a, b), range(a + 1, b + 1)) if forwarded else [(a, b)] if a != b else []
        for x, y in hops:
            if devices[x] != devices[y] and (u, y) not in sent:
                sent.add((u, y))
                T[y] += lat[x, y] + float(graph.out_bytes[u]) / bw[x, y]
    makespan = float(T.sum() + (n_micro_batches - 1) * T.max())
    for d in {d for d in devices if torch.device(d).type == "cuda"}:
        shared = [k for k in range(K) if devices[k] == d]
        makespan = max(makespan, n_micro_batches * float(T[shared].sum()))
    return {
        "makespan_s": makespan,
        "latency_s": float(T.sum()),
        "throughput": n_micro_batches / makespan if makespan > 0 else math.inf,
        "busy_s": [float(t) * n_micro_batches for t in T],
    }


def cpu_time_threads(graph) -> int | None:
    """The intra-op threads the graph's CPU node times were measured with, when it says so.

    `incsched.execute.calibrate` records them in ``meta["calibration"]["cpu"]`` (it overrides a
    capture's own measurement, recorded in ``meta["measured"]``).
    """
    calibration = (graph.meta.get("calibration") or {}).get("cpu") or {}
    if "threads" in calibration:
        return int(calibration["threads"])
    measured = graph.meta.get("measured") or {}
    if str(measured.get("device", "")).startswith("cpu") and "threads" in measured:
        return int(measured["threads"])
    return None


def _thread_notes(graph, devices: Sequence[str]) -> list[str]:
    """A warning when CPU workers run with other intra-op threads than the CPU times were measured
    with: a CPU node's time scales with its threads, so the prediction would be off by that ratio."""
    if not any(torch.device(d).type == "cpu" for d in devices):
        return []
    measured = cpu_time_threads(graph)
    running = cpu_threads_per_worker(devices) or torch.get_num_threads()
    if measured is None or measured == running:
        return []
    log.warning("%s: CPU node times were measured with %d thread(s), the CPU workers run with %d", graph.name, measured, running)
    return [f"CPU node times were measured with {measured} intra-op thread(s) but each CPU worker ran with {running}: "
            f"CPU predictions are off by that scaling (re-measure with `incsched profile --devices {','.join(devices)}`)"]


#: How workers run: threads of this process, processes passing tensors point to point over
#: ``torch.distributed``, or (stage assignments) ``torch.distributed.pipelining``'s GPipe schedule.
RUNTIMES = ("threads", "processes", "pipelining")

_RUNTIME_NOTES = {
    "threads": "one thread per worker",
    "processes": "one process per worker (torch.distributed, point-to-point sends)",
    "pipelining": "one process per stage (torch.distributed.pipelining, GPipe; values forwarded stage to stage)",
}


def _timed_runs(program: Program, batches, devices, plan, repeats: int, runtime: str,
                cuda_timing: str = "sync") -> tuple[Execution, list[Execution]]:
    if runtime not in RUNTIMES:
        raise ExecutionError(f"unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}")
    if runtime == "pipelining" and program.kind != "stage":
        raise ExecutionError("the pipelining runtime runs stage assignments only; run a placement with threads or processes")
    threads = cpu_threads_per_worker(devices)
    backend = "nccl" if all(torch.device(d).type == "cuda" for d in devices) else "gloo"
    if runtime == "processes":

        def run():
            return execute_distributed(program, batches, devices, plan, backend=backend, threads=threads or torch.get_num_threads())
    elif runtime == "pipelining":

        def run():
            return execute_pipelined(program, batches, devices, backend=backend, threads=threads or torch.get_num_threads())
    else:

        def run():
            return execute(program, batches, devices, plan, threads=threads, cuda_timing=cuda_timing)

    first = run()  # warm-up; its outputs are the ones checked
    return first, [run() for _ in range(repeats)]


def _measured(runs: list[Execution], pipeline: bool) -> dict[str, Any]:
    med = statistics.median
    out: dict[str, Any] = {
        "makespan_s": med(r.makespan for r in runs),
        "busy_s": [med(r.busy()[w] for r in runs) for w in range(len(runs[0].devices))],
        "peak_bytes": [max(r.peak_bytes[w] for r in runs) for w in range(len(runs[0].devices))],
    }
    if pipeline:
        out["latency_s"] = med(r.latency() for r in runs)
        out["throughput"] = med(r.throughput() for r in runs)
    return out


def validate_stages(
    capture: Capture,
    stages: Sequence[int],
    devices: Sequence[str],
    *,
    n_micro_batches: int = 4,
    repeats: int = 3,
    links: Links | None = None,
    seed: int = 0,
    runtime: str = "threads",
    cuda_timing: str = "sync",
) -> Validation:
    """Run a stage assignment as a pipeline on ``devices`` (one per stage), check and time it.

    ``runtime`` (`RUNTIMES`): ``"threads"`` (default) runs one thread per stage; ``"processes"`` one
    process per stage over ``torch.distributed`` (gloo; NCCL when every stage is on a GPU) sending
    each crossing value once, point to point; ``"pipelining"`` one process per stage under
    ``torch.distributed.pipelining``'s GPipe schedule, values forwarded stage to stage.
    ``cuda_timing`` is `execute`'s (threads only).

    Raises
    ------
    OutputMismatch
        If the pipeline's outputs differ from the unsplit model's (naming the first diverging node).
    ExecutionError
        If the assignment cannot be partitioned or a part fails.
    """
    K = len(devices)
    stages = np.asarray(stages, dtype=np.int64)
    if stages.size and stages.max() >= K:
        raise ExecutionError(f"the assignment uses {int(stages.max()) + 1} stages but {K} devices were given")
    program = stage_program(capture, stages, K)
    prepare(program, devices)
    batches = micro_batches(capture.example_inputs, n_micro_batches, seed)
    plan = pipeline_plan(program, n_micro_batches)
    first, runs = _timed_runs(program, batches, devices, plan, repeats, runtime, cuda_timing)
    worst = check_execution(capture, program, batches, first, devices, cpu_threads_per_worker(devices))
    return Validation(
        graph=capture.graph.name,
        kind="stage",
        devices=list(devices),
        micro_batches=n_micro_batches,
        repeats=repeats,
        max_abs_diff=worst,
        predicted=predict_pipeline(capture.graph, stages, devices, n_micro_batches, links, forwarded=runtime == "pipelining"),
        measured=_measured(runs, pipeline=True),
        parts=len(program.parts),
        notes=_thread_notes(capture.graph, devices),
    )


def validate_placement(
    capture: Capture,
    placement: Placement,
    devices: Sequence[str],
    *,
    repeats: int = 3,
    links: Links | None = None,
    seed: int = 0,
    runtime: str = "threads",
    cuda_timing: str = "sync",
) -> Validation:
    """Run a placement in its solved per-device order on ``devices``, check and time it.

    Predictions come from the simulator on `device_problem` (the same graph times, these devices).
    ``runtime`` is ``"threads"`` or ``"processes"`` (see `validate_stages`); ``cuda_timing`` is
    `execute`'s (threads only).
    """
    if placement.n_devices != len(devices):
        raise ExecutionError(f"the placement uses {placement.n_devices} devices but {len(devices)} were given")
    program, order = placement_program(capture, placement)
    prepare(program, devices)
    batches = micro_batches(capture.example_inputs, 1, seed)
    first, runs = _timed_runs(program, batches, devices, placement_plan(order), repeats, runtime, cuda_timing)
    worst = check_execution(capture, program, batches, first, devices, cpu_threads_per_worker(devices))
    sched = simulate(device_problem(capture.graph, devices, links), placement, "ordered")
    unit = sched.makespan_seconds / sched.makespan if sched.makespan else 0.0  # seconds per tick
    return Validation(
        graph=capture.graph.name,
        kind="placement",
        devices=list(devices),
        micro_batches=1,
        repeats=repeats,
        max_abs_diff=worst,
        predicted={"makespan_s": float(sched.makespan_seconds), "busy_s": [float(b) * unit for b in sched.busy]},
        measured=_measured(runs, pipeline=False),
        parts=len(program.parts),
        notes=_thread_notes(capture.graph, devices),
    )


def rank_placements(
    capture: Capture,
    placements: Mapping[str, Placement],
    devices: Sequence[str],
    *,
    repeats: int = 3,
    links: Links | None = None,
) -> tuple[list[dict[str, Any]], float]:
    """Execute several placements; does the cost model order them as the devices do?

    Returns
    -------
    (rows, spearman)
        Per placement: name, predicted and measured makespan (s); and Spearman's rank correlation
        between the two columns (nan with fewer than three placements or constant columns).
    """
    from scipy.stats import spearmanr

    rows = []
    for name, placement in placements.items():
        v = validate_placement(capture, placement, devices, repeats=repeats, links=links)
        rows.append({"placement": name, "predicted_s": v.predicted["makespan_s"], "measured_s": v.measured["makespan_s"], "parts": v.parts})
    if len(rows) < 3:
        return rows, math.nan
    rho = spearmanr([r["predicted_s"] for r in rows], [r["measured_s"] for r in rows]).statistic
    return rows, float(rho)


def default_devices(result) -> list[str]:
    """One ``"cpu"`` worker per stage or per device of ``result``.

    The stage count is the problem's (one memory per stage in ``terms["stage_mem"]``), so trailing
    empty stages still get their worker; results without it fall back to the highest stage + 1.
    """
    if result.problem == "placement":
        return ["cpu"] * max(1, len(result.order or []))
    stage_mem = (result.terms or {}).get("stage_mem")
    return ["cpu"] * (len(stage_mem) if stage_mem else max(result.stages or [0]) + 1)


def validate_result(
    capture: Capture,
    result,
    devices: Sequence[str] | None = None,
    *,
    n_micro_batches: int = 4,
    repeats: int = 3,
    links: Links | None = None,
    runtime: str = "threads",
) -> Validation:
    """Execute a `Result` of ``solve()`` on the captured model it was solved for.

    ``devices`` default to one ``"cpu"`` per stage or device of the result; ``runtime`` is one of
    `RUNTIMES` (see `validate_stages`).

    Raises
    ------
    ExecutionError
        If the result was solved for another graph (node count or structure differ), or is not
        executable (no assignment, e.g. ``infeasible``).
    """
    graph = capture.graph
    assignment = result.assignment
    if assignment is None:
        raise ExecutionError(f"result for {result.graph!r} has no assignment to execute (status {result.status})")
    if len(assignment) != graph.n_nodes:
        raise ExecutionError(f"result for {result.graph!r} assigns {len(assignment)} nodes but the captured {graph.name!r} has {graph.n_nodes}")
    digest = result.provenance.get("graph_digest")
    if digest is not None and digest != graph.structure_digest():
        raise ExecutionError(f"result was solved for a graph with other nodes or edges than the captured {graph.name!r} (structure digest differs)")
    devices = list(devices) if devices else default_devices(result)
    if result.problem == "stage":
        K = int(max(assignment)) + 1
        if len(devices) < K:
            raise ExecutionError(f"the result uses {K} stages but only {len(devices)} devices were given")
        v = validate_stages(capture, assignment, devices, n_micro_batches=n_micro_batches, repeats=repeats, links=links, runtime=runtime)
    else:
        placement = Placement(result.device, result.order)
        v = validate_placement(capture, placement, devices, repeats=repeats, links=links, runtime=runtime)
    threads = cpu_threads_per_worker(devices)
    v.notes.append(_RUNTIME_NOTES[runtime])
    if threads:
        v.notes.append(f"{sum(torch.device(d).type == 'cpu' for d in devices)} workers share the CPU: {threads} intra-op thread(s) each while measured")
    return v
