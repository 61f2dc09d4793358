"""A real multi-process run: one process per stage or device, tensors passed over ``torch.distributed``.

The threaded runner shares one address space; here each worker is its own process with its own
cores (gloo on CPU, NCCL where each rank has its own GPU), and every tensor that crosses a worker
boundary is really sent. Point-to-point ``isend``/``recv`` are used rather than
``torch.distributed.pipelining``'s stages because a solved stage assignment is not a chain: stage 3
may read stage 0's output directly (skip connections), and a placement's segments form a DAG. Each
value is sent once per receiving process, tagged by (part, output, micro-batch) so that receives can
be posted in the receiver's own order.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .partition import ExecutionError, Program
from ..capture.profile import tensor_bytes
from .runner import Execution, TaskRecord, worker_weight_bytes

log = logging.getLogger(__name__)

__all__ = ["execute_distributed", "from_earliest_start", "run_ranks"]

_TIMEOUT_S = 600.0


def execute_distributed(
    program: Program,
    batches: Sequence[Sequence[Any]],
    devices: Sequence[str],
    plan: Sequence[Sequence[tuple[int, int]]],
    *,
    backend: str = "gloo",
    threads: int = 1,
) -> Execution:
    """Run ``plan`` with one process per worker (forked), passing tensors with ``torch.distributed``.

    Each process runs its tasks once untimed, then again, timed, after a barrier: first sends,
    receives and kernel calls in a fresh process cost more than the placement does.

    Parameters
    ----------
    program, batches, devices, plan
        As for `incsched.execute.execute`. The processes are forked (Linux), so each inherits the
        parts; only the tensors crossing processes travel.
    backend : str
        ``"gloo"`` (CPU tensors) or ``"nccl"`` (one GPU per rank).
    threads : int
        Intra-op threads per process.

    Returns
    -------
    Execution
        Outputs on the CPU; records with start and end on the machine's monotonic clock, relative
        to the earliest start (processes on one machine share that clock).

    Raises
    ------
    ExecutionError
        If a value crossing processes is not a tensor, or a process fails (its error is named).
    """
    world = len(plan)
    shapes = _crossing_shapes(program, batches[:1])
    reports = run_ranks(world, _run_rank, (program, list(batches), list(devices), [list(t) for t in plan], shapes), backend=backend, threads=threads)
    records: list[TaskRecord] = []
    values: dict[tuple[int, int, int], torch.Tensor] = {}
    for rep in reports.values():
        records += rep["records"]
        values.update({k: torch.from_numpy(v) if hasattr(v, "__array__") else v for k, v in rep["outputs"].items()})
    records = from_earliest_start(records)
    outputs = [[batches[m][ref.index] if ref.part is None else values[(ref.part, ref.index, m)] for ref in program.outputs] for m in range(len(batches))]
    makespan = max(r.end for r in records) if records else 0.0
    peaks = [reports[r]["peak_bytes"] for r in range(world)]
    return Execution(outputs, records, makespan, [str(d) for d in devices[:world]], peaks)


def _crossing_shapes(program: Program, batches) -> dict[tuple[int, int], tuple[tuple[int, ...], torch.dtype]]:
    """Shape and dtype of every part output another worker reads, from one sequential dry run."""
    needed = {(ref.part, ref.index) for part in program.parts for ref in part.inputs if ref.part is not None and program.parts[ref.part].worker != part.worker}
    outs: list[tuple] = []
    shapes = {}
    with torch.no_grad():
        for p, part in enumerate(program.parts):
            args = [batches[0][r.index] if r.part is None else outs[r.part][r.index] for r in part.inputs]
            device = next((b.device for b in part.module.buffers()), torch.device("cpu"))
            args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
            try:
                outs.append(part.module(*args))
            except Exception as err:
                raise ExecutionError(f"part {part.name} (nodes {part.nodes[0]}..{part.nodes[-1]}), dry run: {type(err).__name__}: {err}") from err
            for i, value in enumerate(outs[-1]):
                if (p, i) in needed:
                    if not isinstance(value, torch.Tensor):
                        raise ExecutionError(f"part {part.name} passes a {type(value).__name__} to another process; only tensors can be sent")
                    shapes[(p, i)] = (tuple(value.shape), value.dtype)
    return shapes


def _tag(part: int, index: int, micro_batch: int) -> int:
    return (part * 1024 + index) * 4096 + micro_batch


def from_earliest_start(records: list[TaskRecord]) -> list[TaskRecord]:
    """Records from several processes (one monotonic clock per machine) in seconds from the earliest
    start, ordered by start."""
    t0 = min(r.start for r in records)
    return sorted((TaskRecord(r.part, r.micro_batch, r.worker, r.start - t0, r.end - t0) for r in records), key=lambda r: (r.start, r.worker))


def run_ranks(world: int, rank_fn, args: tuple, *, backend: str = "gloo", threads: int = 1) -> dict[int, Any]:
    """Run ``rank_fn(rank, *args)`` in ``world`` forked processes joined in one process group.

    Each process sets its intra-op threads, joins the group (a file store in a temporary folder),
    runs ``rank_fn`` (which calls ``dist.barrier()`` once its set-up is done, so that every rank's
    timing starts together), waits at a barrier, and sends back what ``rank_fn`` returns. The
    processes are forked so that they inherit ``args`` (export's graph modules cannot be pickled
    for spawn).

    Raises
    ------
    ExecutionError
        Naming every rank that failed (with its error) or did not report within the time limit.
    """
    ctx = mp.get_context("fork")
    results = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory(prefix="incsched-dist-") as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_rank_main, args=(r, world, store, backend, threads, rank_fn, args, results), daemon=True) for r in range(world)]
        for p in procs:
            p.start()
        reports = {}
        deadline = time.monotonic() + _TIMEOUT_S
        while len(reports) < world:
            if time.monotonic() > deadline:
                break
            if results.empty():
                if any(p.exitcode not in (None, 0) for p in procs) and results.empty():
                    break
                time.sleep(0.01)
                continue
            rank, report = results.get()
            reports[rank] = report
            if isinstance(report, str):  # one rank failed: the others may wait on it forever
                break
        for p in procs:
            p.join(timeout=5 if len(reports) == world else 0.5)
            if p.is_alive():
                p.kill()
    errors = [f"rank {r}: {rep}" for r, rep in sorted(reports.items()) if isinstance(rep, str)]
    if errors or len(reports) < world:
        missing = sorted(set(range(world)) - set(reports))
        raise ExecutionError("distributed run failed: " + "; ".join(errors + ([f"ranks {missing} did not report"] if missing else [])))
    return reports


def _rank_main(rank, world, store_path, backend, threads, rank_fn, args, results) -> None:
    try:
        torch.set_num_threads(threads)
        store = dist.FileStore(store_path, world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world)
        report = rank_fn(rank, *args)
        dist.barrier()
        dist.destroy_process_group()
        results.put((rank, report))
    except Exception as err:  # reported to the parent, which names the rank
        results.put((rank, f"{type(err).__name__}: {err}"))


def _run_rank(rank: int, program: Program, batches, devices, plan, shapes) -> dict[str, Any]:
    device, tasks = torch.device(devices[rank]), plan[rank]
    for p, part in enumerate(program.parts):
        if part.worker == rank:
            part.module.to(device)
    receivers: dict[tuple[int, int], set[int]] = {}
    for part in program.parts:
        for ref in part.inputs:
            if ref.part is not None and program.parts[ref.part].worker != part.worker:
                receivers.setdefault((ref.part, ref.index), set()).add(part.worker)
    # Once untimed, then timed: a freshly forked process pays first-use costs (its first sends and
    # receives, first kernel calls) that are not the placement's time.
    _run_tasks(rank, program, batches, device, tasks, shapes, receivers)
    dist.barrier()
    return _run_tasks(rank, program, batches, device, tasks, shapes, receivers)


def _run_tasks(rank: int, program: Program, batches, device: torch.device, tasks, shapes, receivers) -> dict[str, Any]:
    """This rank's tasks in order: receive what other ranks made, run the part, send its outputs."""
    wanted_outputs = {(r.part, r.index) for r in program.outputs if r.part is not None}
    local: dict[tuple[int, int, int], Any] = {}  # (part, output, micro-batch) -> value on this rank
    sends, records, outputs = [], [], {}
    held = peak = 0
    with torch.no_grad():
        for p, m in tasks:
            part = program.parts[p]
            args = []
            for ref in part.inputs:
                if ref.part is None:
                    value = batches[m][ref.index]
                elif (ref.part, ref.index, m) in local:
                    value = local[(ref.part, ref.index, m)]
                else:  # produced by another process: receive it once
                    shape, dtype = shapes[(ref.part, ref.index)]
                    value = torch.empty(shape, dtype=dtype, device=device if device.type == "cuda" else "cpu")
                    dist.recv(value, src=program.parts[ref.part].worker, tag=_tag(ref.part, ref.index, m))
                    local[(ref.part, ref.index, m)] = value
                args.append(value.to(device) if isinstance(value, torch.Tensor) else value)
            start = time.perf_counter()
            out = part.module(*args)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            end = time.perf_counter()
            records.append(TaskRecord(p, m, rank, start, end))
            for i, value in enumerate(out):
                local[(p, i, m)] = value
                for dst in sorted(receivers.get((p, i), ())):
                    sends.append(dist.isend(value.contiguous(), dst=dst, tag=_tag(p, i, m)))
                if (p, i) in wanted_outputs:
                    # by value: a tensor shared through the queue dies with this process
                    outputs[(p, i, m)] = value.cpu().numpy() if isinstance(value, torch.Tensor) else value
            held += tensor_bytes(out)
            peak = max(peak, held)
    for work in sends:
        work.wait()
    peak_bytes = int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else int(worker_weight_bytes(program, rank) + peak)
    return {"records": records, "outputs": outputs, "peak_bytes": peak_bytes}
