"""Running a partitioned program: one worker thread per stage or device, each in its solved order.

The step after partitioning. A *plan* lists, per worker, the (part, micro-batch) tasks in the order
the worker must run them; a task waits until every part it reads from has finished that micro-batch,
moves its inputs to its device, runs, and records when it started and ended. A stage pipeline's plan
is GPipe's fill and drain (each stage takes micro-batch 0, 1, ... in turn); a placement's plan is each
device's solved order. PyTorch kernels release the GIL, so workers on different devices overlap.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..capture.profile import tensor_bytes
from .partition import ExecutionError, Program, Ref

log = logging.getLogger(__name__)

__all__ = ["Execution", "TaskRecord", "check_devices", "cpu_threads_per_worker", "execute", "intra_op_threads", "pipeline_plan", "placement_plan", "prepare", "worker_weight_bytes"]


@dataclass(frozen=True)
class TaskRecord:
    """One part run on one micro-batch; times in seconds from the start of the run."""

    part: int
    micro_batch: int
    worker: int
    start: float
    end: float


@dataclass
class Execution:
    """What a run produced and how long each piece took.

    Attributes
    ----------
    outputs : list of list of torch.Tensor
        Per micro-batch, the flat outputs (on the device that computed them).
    records : list of TaskRecord
    makespan : float
        Seconds from the first task's start to the last task's end.
    devices : list of str
        The device of each worker.
    peak_bytes : list of int
        Per worker: CUDA's peak allocated memory on its device, or on CPU the weights the worker holds
        plus the largest sum of its part outputs alive at once (an upper bound; CPU has no allocator
        statistics per thread).
    """

    outputs: list[list[Any]]
    records: list[TaskRecord]
    makespan: float
    devices: list[str]
    peak_bytes: list[int] = field(default_factory=list)

    def busy(self) -> list[float]:
        """Seconds each worker spent running parts."""
        out = [0.0] * len(self.devices)
        for r in self.records:
            out[r.worker] += r.end - r.start
        return out

    def latency(self) -> float:
        """Seconds from micro-batch 0's first task to its last."""
        mine = [r for r in self.records if r.micro_batch == 0]
        return max(r.end for r in mine) - min(r.start for r in mine)

    def throughput(self) -> float:
        """Micro-batches per second over the whole run."""
        return len(self.outputs) / self.makespan if self.makespan > 0 else float("inf")


def check_devices(devices: Sequence[str | torch.device]) -> list[torch.device]:
    """The torch devices named, each checked to exist here (CPU, or a visible CUDA GPU).

    Raises
    ------
    ExecutionError
        Naming the device that is malformed, of an unsupported type, or not on this machine.
    """
    out = []
    for d in devices:
        try:
            dev = torch.device(d)
        except (RuntimeError, TypeError) as err:
            raise ExecutionError(f"{d!r} is not a torch device ({err})") from None
        if dev.type == "cuda":
            if not torch.cuda.is_available():
                why = "this torch build has no CUDA" if torch.version.cuda is None else "no GPU is visible"
                raise ExecutionError(f"{d}: CUDA is not available here ({why}; torch {torch.__version__})")
            if (dev.index or 0) >= torch.cuda.device_count():
                raise ExecutionError(f"{d}: this machine has {torch.cuda.device_count()} visible GPU(s)")
        elif dev.type != "cpu":
            raise ExecutionError(f"{d}: only cpu and cuda devices are supported")
        out.append(dev)
    return out


def prepare(program: Program, devices: Sequence[str | torch.device]) -> None:
    """Move every part (its weights) to the device of the worker that runs it."""
    if len(devices) < program.n_workers:
        raise ExecutionError(f"{program.n_workers} stages or devices but only {len(devices)} torch devices given")
    check_devices(devices)
    for part in program.parts:
        part.module.to(torch.device(devices[part.worker]))


def cpu_threads_per_worker(devices: Sequence[str | torch.device]) -> int | None:
    """Cores per worker when several workers share the CPU (None when at most one worker is on it)."""
    on_cpu = sum(torch.device(d).type == "cpu" for d in devices)
    if on_cpu <= 1:
        return None
    return max(1, (os.cpu_count() or 1) // on_cpu)


@contextlib.contextmanager
def intra_op_threads(threads: int | None):
    """``torch.set_num_threads(threads)`` for the block (nothing when None); restored afterwards.

    The thread count changes how CPU kernels split their reductions, and so the last bits of float
    results: a reference must be computed with the threads the workers used.
    """
    saved = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def pipeline_plan(program: Program, n_micro_batches: int) -> list[list[tuple[int, int]]]:
    """GPipe forward fill and drain: each stage runs its parts on micro-batch 0, then 1, ..."""
    return [
        [(p, m) for m in range(n_micro_batches) for p in program.parts_of(w)] for w in range(program.n_workers)
    ]


def placement_plan(order: Sequence[Sequence[int]]) -> list[list[tuple[int, int]]]:
    """Each device runs its parts once, in the solved order."""
    return [[(p, 0) for p in seq] for seq in order]


def execute(
    program: Program,
    batches: Sequence[Sequence[Any]],
    devices: Sequence[str | torch.device],
    plan: Sequence[Sequence[tuple[int, int]]],
    *,
    threads: int | None = None,
    cuda_timing: str = "sync",
) -> Execution:
    """Run ``plan`` with one thread per worker; ``prepare`` must have moved the parts first.

    Parameters
    ----------
    program : Program
    batches : sequence of sequences
        The flat program inputs of each micro-batch.
    devices : sequence of str or torch.device
        The torch device of each worker.
    plan : per worker, (part, micro-batch) tasks in order
    threads : int, optional
        Intra-op threads per worker (``torch.set_num_threads``) for the run; restored afterwards.
        Workers that share one CPU should split its cores rather than each spawn a full pool.
    cuda_timing : {"sync", "events"}
        How a GPU part is timed. ``"sync"``: the worker synchronises the device after each part
        and reads the host clock (true end times; the worker cannot queue ahead). ``"events"``:
        CUDA events recorded around each part on the device's stream, read after the run, with no
        synchronisation in between, so a worker queues its next part while the GPU still runs;
        consumers wait through PyTorch's stream semantics (every worker uses its device's current
        stream, and copies off a GPU wait for it). Event times are placed on the host clock at
        the run's start. CPU parts are timed on the host clock either way.

    Returns
    -------
    Execution

    Raises
    ------
    ExecutionError
        If the plan does not run every part on every micro-batch exactly once, or a part fails
        (naming the part, its device and micro-batch).
    """
    if cuda_timing not in ("sync", "events"):
        raise ValueError(f"cuda_timing must be 'sync' or 'events', got {cuda_timing!r}")
    devices = [torch.device(d) for d in devices]
    _check_plan(program, len(batches), plan)
    done = {(p, m): threading.Event() for p in range(len(program.parts)) for m in range(len(batches))}
    values: dict[tuple[int, int], tuple] = {}
    records: list[TaskRecord] = []
    failure: list[BaseException] = []
    held = [0] * len(devices)
    peak_held = [0] * len(devices)
    lock = threading.Lock()
    gpus = {d for d in devices if d.type == "cuda"}
    events = cuda_timing == "events" and bool(gpus)
    pending: list[tuple[int, int, int, Any, Any]] = []  # GPU tasks timed by events: (part, batch, worker, start, end)
    origin: dict[torch.device, Any] = {}  # per GPU, an event recorded at t0 on an idle device
    for d in gpus:
        torch.cuda.reset_peak_memory_stats(d)
        if events:
            torch.cuda.synchronize(d)
    t0 = time.perf_counter()
    for d in gpus if events else ():
        with torch.cuda.device(d):
            origin[d] = torch.cuda.Event(enable_timing=True)
            origin[d].record()

    def fetch(ref: Ref, m: int, device: torch.device):
        value = batches[m][ref.index] if ref.part is None else values[(ref.part, m)][ref.index]
        return value.to(device) if isinstance(value, torch.Tensor) else value

    def work(w: int) -> None:
        device = devices[w]
        if threads:
            torch.set_num_threads(threads)
        for p, m in plan[w]:
            part = program.parts[p]
            for ref in part.inputs:
                if ref.part is not None:
                    done[(ref.part, m)].wait()
            if failure:
                return
            try:
                with torch.no_grad():
                    args = [fetch(ref, m, device) for ref in part.inputs]
                    if events and device.type == "cuda":
                        with torch.cuda.device(device):
                            ev_start, ev_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                            ev_start.record()
                            out = part.module(*args)
                            ev_end.record()
                    else:
                        start = time.perf_counter()
                        out = part.module(*args)
                        if device.type == "cuda":
                            torch.cuda.synchronize(device)
                        end = time.perf_counter()
            except Exception as err:  # stop every worker, report which part failed
                failure.append(ExecutionError(f"part {part.name} (nodes {part.nodes[0]}..{part.nodes[-1]}) on {device}, micro-batch {m}: {type(err).__name__}: {err}"))
                for ev in done.values():
                    ev.set()
                return
            with lock:
                values[(p, m)] = out
                if events and device.type == "cuda":
                    pending.append((p, m, w, ev_start, ev_end))
                else:
                    records.append(TaskRecord(p, m, w, start - t0, end - t0))
                held[w] += tensor_bytes(out)
                peak_held[w] = max(peak_held[w], held[w])
            done[(p, m)].set()

    workers = [threading.Thread(target=work, args=(w,), name=f"incsched-worker-{w}", daemon=True) for w in range(len(plan))]
    with intra_op_threads(None):  # workers set their own; the caller's count comes back afterwards
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    if failure:
        raise failure[0]
    for d in origin:
        torch.cuda.synchronize(d)
    for p, m, w, ev_start, ev_end in pending:
        zero = origin[devices[w]]
        records.append(TaskRecord(p, m, w, zero.elapsed_time(ev_start) / 1e3, zero.elapsed_time(ev_end) / 1e3))
    outputs = [[values[(r.part, m)][r.index] if r.part is not None else batches[m][r.index] for r in program.outputs] for m in range(len(batches))]
    makespan = max(r.end for r in records) - min(r.start for r in records) if records else 0.0
    return Execution(outputs, sorted(records, key=lambda r: (r.start, r.worker)), makespan, [str(d) for d in devices[: len(plan)]], _peaks(program, devices[: len(plan)], peak_held))


def _check_plan(program: Program, n_batches: int, plan) -> None:
    seen: dict[tuple[int, int], int] = {}
    for w, tasks in enumerate(plan):
        for p, m in tasks:
            if not (0 <= p < len(program.parts) and 0 <= m < n_batches):
                raise ExecutionError(f"worker {w}: task (part {p}, micro-batch {m}) does not exist")
            if program.parts[p].worker != w:
                raise ExecutionError(f"worker {w} is planned to run part {program.parts[p].name} of worker {program.parts[p].worker}")
            if (p, m) in seen:
                raise ExecutionError(f"part {program.parts[p].name}, micro-batch {m} is planned twice")
            seen[(p, m)] = w
    missing = len(program.parts) * n_batches - len(seen)
    if missing:
        raise ExecutionError(f"the plan leaves {missing} (part, micro-batch) tasks unrun")


def worker_weight_bytes(program: Program, worker: int) -> int:
    """Bytes of the weights (part buffers) one worker holds."""
    return sum(tensor_bytes(list(p.module.buffers())) for p in program.parts if p.worker == worker)


def _peaks(program: Program, devices: list[torch.device], peak_held: list[int]) -> list[int]:
    out = []
    for w, device in enumerate(devices):
        if device.type == "cuda":
            out.append(int(torch.cuda.max_memory_allocated(device)))
        else:
            out.append(int(worker_weight_bytes(program, w) + peak_held[w]))
    return out
