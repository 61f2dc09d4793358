"""A stage assignment run by ``torch.distributed.pipelining``: one process per stage, GPipe schedule.

The pipeline API passes one tuple from stage k to stage k + 1 only, while a solved stage
assignment is a DAG of stages (stage 3 may read stage 0's output, a skip connection). So each
stage is wrapped as a `ChainStage` that also *forwards* every value a later stage or the output
still needs: a tensor crosses every boundary between its producer and its last reader, which is
what the stage problem's ``comm_total`` charges (bytes times boundaries crossed). The threaded and
point-to-point runners (`runner`, `distributed`) send it once, directly, instead.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..capture.profile import tensor_bytes
from .distributed import from_earliest_start, run_ranks
from .partition import ExecutionError, Program, Ref
from .runner import Execution, TaskRecord, check_devices, worker_weight_bytes

__all__ = ["ChainStage", "chain_stages", "boundary_examples", "execute_pipelined"]


class ChainStage(nn.Module):
    """Stage k of a stage program as a link of a chain: the values live at the boundary before it in,
    the values live at the boundary after it out.

    Parameters
    ----------
    part : torch.fx.GraphModule or None
        The stage's part (None for an empty stage, which only forwards).
    part_index : int or None
        Its index in the program (the key of its outputs).
    part_inputs : sequence of Ref
        Where each of the part's arguments comes from.
    carry_in, carry_out : sequence of Ref
        The values this stage receives and passes on, in order. The last stage passes on the
        program's outputs (a value may repeat there).

    Each call appends ``(start, end)`` perf-counter seconds to ``calls`` (so a rank can report what
    its stage computed when) and, on the last stage (``keep_outputs``), its outputs to ``kept``.
    """

    def __init__(self, part: nn.Module | None, part_index: int | None, part_inputs: Sequence[Ref],
                 carry_in: Sequence[Ref], carry_out: Sequence[Ref], keep_outputs: bool = False):
        super().__init__()
        self.part = part
        self.part_index = part_index
        self.part_inputs = tuple(part_inputs)
        self.carry_in = tuple(carry_in)
        self.carry_out = tuple(carry_out)
        self.keep_outputs = keep_outputs
        self.calls: list[tuple[float, float]] = []
        self.kept: list[tuple[torch.Tensor, ...]] = []

    def forward(self, *carried: torch.Tensor) -> tuple[torch.Tensor, ...]:
        start = time.perf_counter()
        env: dict[Ref, Any] = dict(zip(self.carry_in, carried))
        if self.part is not None:
            for i, value in enumerate(self.part(*(env[r] for r in self.part_inputs))):
                env[Ref(self.part_index, i)] = value
        out = tuple(env[r].contiguous() for r in self.carry_out)  # gloo and NCCL send contiguous tensors only
        if out and out[0].device.type == "cuda":
            torch.cuda.synchronize(out[0].device)
        self.calls.append((start, time.perf_counter()))
        if self.keep_outputs:
            self.kept.append(out)
        return out


def chain_stages(program: Program) -> list[ChainStage]:
    """One `ChainStage` per stage of a stage program (parts' modules shared, not copied)."""
    if program.kind != "stage":
        raise ExecutionError("torch.distributed.pipelining runs stage assignments only; a placement's segments form a DAG")
    K = program.n_workers
    stage_of_part = [part.worker for part in program.parts]
    part_of_stage: dict[int, int] = {part.worker: p for p, part in enumerate(program.parts)}

    def produced_at(ref: Ref) -> int:  # program inputs enter before stage 0
        return -1 if ref.part is None else stage_of_part[ref.part]

    last_read: dict[Ref, int] = {}
    for p, part in enumerate(program.parts):
        for ref in part.inputs:
            last_read[ref] = max(last_read.get(ref, -1), stage_of_part[p])
    for ref in program.outputs:
        last_read[ref] = K  # read after the last stage

    def live(boundary: int) -> list[Ref]:
        """Values made before stage ``boundary`` and read at it or later, in a fixed order."""
        refs = [r for r, last in last_read.items() if produced_at(r) < boundary <= last]
        return sorted(refs, key=lambda r: (-1 if r.part is None else r.part, r.index))

    stages = []
    for k in range(K):
        p = part_of_stage.get(k)
        part = program.parts[p] if p is not None else None
        # stage 0 takes every program input, in order: the schedule hands it the whole input tuple
        carry_in = [Ref(None, i) for i in range(program.n_inputs)] if k == 0 else live(k)
        carry_out = list(program.outputs) if k == K - 1 else live(k + 1)
        stages.append(ChainStage(part.module if part else None, p, part.inputs if part else (), carry_in, carry_out, keep_outputs=k == K - 1))
    return stages


def execute_pipelined(
    program: Program,
    batches: Sequence[Sequence[Any]],
    devices: Sequence[str],
    *,
    backend: str = "gloo",
    threads: int = 1,
) -> Execution:
    """Run a stage program as a ``torch.distributed.pipelining`` GPipe schedule over ``batches``.

    One process per stage (forked), ``PipelineStage`` and ``ScheduleGPipe`` from torch, forward
    only (``schedule.eval``); each process runs one untimed step first, since the schedule sets up
    its buffers on the first step, then the timed one. The micro-batches are concatenated along dimension 0 and the schedule
    splits them back, so every program input must be a tensor with a leading batch dimension of the
    same size in every micro-batch.

    Parameters
    ----------
    program : Program
        From `stage_program`.
    batches : sequence of tuple
        The micro-batches' flat program inputs.
    devices : sequence of str
        The torch device of each stage.
    backend : str
        ``"gloo"`` (CPU tensors) or ``"nccl"`` (one GPU per rank).
    threads : int
        Intra-op threads per process.

    Returns
    -------
    Execution
        Outputs on the CPU, per micro-batch; one record per stage and micro-batch (the forward of
        its `ChainStage`, forwarding included), on the machine's monotonic clock from the earliest
        start.

    Raises
    ------
    ExecutionError
        If the program is not a stage program, an input has no batch dimension, a value crossing
        stages is not a tensor, or a rank fails (named).
    """
    K = program.n_workers
    if len(devices) < K:
        raise ExecutionError(f"{K} stages but only {len(devices)} torch devices given")
    check_devices(devices[:K])
    stages = chain_stages(program)
    M = len(batches)
    for i, x in enumerate(batches[0]):
        shapes = {tuple(b[i].shape) if isinstance(b[i], torch.Tensor) else None for b in batches}
        if not isinstance(x, torch.Tensor) or x.dim() == 0 or len(shapes) != 1:
            raise ExecutionError(f"program input {i}: the pipeline schedule splits inputs along a batch dimension, "
                                 f"so it must be a tensor of one shape in every micro-batch")
    examples = boundary_examples(stages, batches[0], devices)
    whole = [torch.cat([b[i] for b in batches]) for i in range(len(batches[0]))]
    reports = run_ranks(K, _pipeline_rank, (stages, examples, whole, list(devices), M, program), backend=backend, threads=threads)
    records = [r for k in range(K) for r in reports[k]["records"]]
    records = from_earliest_start(records)
    outputs = [[torch.from_numpy(v) for v in per_mb] for per_mb in reports[K - 1]["outputs"]]
    peaks = [reports[k]["peak_bytes"] for k in range(K)]
    return Execution(outputs, records, max(r.end for r in records), [str(d) for d in devices[:K]], peaks)


def boundary_examples(stages: list[ChainStage], inputs: Sequence[Any], devices) -> list[tuple[tuple, tuple]]:
    """(inputs, outputs) of every stage on one micro-batch: the shapes ``PipelineStage`` sends."""
    env: dict[Ref, Any] = {Ref(None, i): x for i, x in enumerate(inputs)}
    out = []
    with torch.no_grad():
        for k, stage in enumerate(stages):
            carried = tuple(env[r].to(devices[k]) if isinstance(env[r], torch.Tensor) else env[r] for r in stage.carry_in)
            result = stage(*carried)
            stage.calls.clear()
            stage.kept.clear()
            for ref, value in zip(stage.carry_out, result):
                if not isinstance(value, torch.Tensor):
                    raise ExecutionError(f"stage {k} passes a {type(value).__name__} on; only tensors can cross stages")
                env[ref] = value
            out.append((carried, result))
    return out


def _pipeline_rank(rank: int, stages: list[ChainStage], examples, whole, devices, n_micro: int, program: Program) -> dict[str, Any]:
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    device = torch.device(devices[rank])
    stage = stages[rank].to(device)
    ins, outs = (tuple(x.to(device) for x in xs) for xs in examples[rank])  # their shapes and dtypes are sent
    pipe = PipelineStage(stage, rank, len(stages), device, input_args=ins, output_args=outs)
    schedule = ScheduleGPipe(pipe, n_microbatches=n_micro)
    inputs = tuple(x.to(device) for x in whole) if rank == 0 else ()
    with torch.no_grad():
        # An untimed first step: the schedule sets up its buffers and exchanges shapes lazily, on
        # the first step of every (freshly forked) process; that set-up is not the pipeline's time.
        schedule.eval(*inputs)
        stage.calls.clear()
        stage.kept.clear()
        dist.barrier()
        schedule.eval(*inputs)
    if stage.part_index is None:  # an empty stage only forwarded: no part ran
        records = []
    else:
        records = [TaskRecord(stage.part_index, m, rank, s, e) for m, (s, e) in enumerate(stage.calls)]
    held = n_micro * tensor_bytes(outs)  # the schedule keeps every micro-batch's outputs until the step ends
    report: dict[str, Any] = {
        "records": records,
        "peak_bytes": int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else int(worker_weight_bytes(program, rank) + held),
    }
    if stage.keep_outputs:
        if len(stage.kept) != n_micro:
            raise ExecutionError(f"the last stage ran {len(stage.kept)} micro-batches, expected {n_micro}")
        report["outputs"] = [[v.cpu().numpy() for v in out] for out in stage.kept]
    return report
