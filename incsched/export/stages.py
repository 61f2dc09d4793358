"""Pipeline stage modules: an op-level stage result as ready ``PipelineStage`` modules.

An op-level optimum cuts inside modules (``k_proj`` on one stage, ``q_proj`` on the next), which no
``split_spec`` can express. Its stages are handed over as modules instead: the `ChainStage`
forwarding stages that ``incsched validate --runtime pipelining`` runs (each takes the values live
at the boundary before it and returns those live after it), with the example inputs and outputs
``PipelineStage`` needs, and saved as ``torch.export`` programs that load without incsched.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..capture import Capture
from ..execute.partition import ExecutionError, stage_program
from ..execute.pipelining import ChainStage, boundary_examples, chain_stages
from ..jsonio import atomic_write_bytes, write_json
from ..result import Result
from .split_points import FORMAT, VERSION, ExportError, _stage_count, stage_list

__all__ = ["PipelineStages", "pipeline_stages"]


@dataclass(frozen=True)
class PipelineStages:
    """The stages of an op-level result, ready for ``torch.distributed.pipelining.PipelineStage``.

    Attributes
    ----------
    modules : list of torch.nn.Module
        Stage k's module, a `ChainStage` (or the program `save` wrote for it, loaded): takes the
        values live before it, returns those live after it (the last stage returns the model's
        flat outputs).
    inputs, outputs : list of tuple of torch.Tensor
        Per stage, example arguments and results for one micro-batch (``input_args`` /
        ``output_args`` of ``PipelineStage``: shapes and dtypes only matter).
    """

    modules: list[torch.nn.Module]
    inputs: list[tuple[torch.Tensor, ...]]
    outputs: list[tuple[torch.Tensor, ...]]

    @property
    def n_stages(self) -> int:
        return len(self.modules)

    def stage(self, index: int, device: str | torch.device, group: Any = None):
        """``PipelineStage`` for stage ``index`` on ``device``, inside an initialised process group
        (rank r of K: ``ScheduleGPipe(stages.stage(r, "cpu"), n_microbatches=4)``)."""
        from torch.distributed.pipelining import PipelineStage  # needs torch.distributed, only where a stage runs

        if not 0 <= index < self.n_stages:
            raise ExportError(f"stage {index} does not exist (the result has {self.n_stages} stages)")
        device = torch.device(device)
        module = self.modules[index].to(device)
        ins = tuple(x.to(device) for x in self.inputs[index])
        outs = tuple(x.to(device) for x in self.outputs[index])
        return PipelineStage(module, index, self.n_stages, device, input_args=ins, output_args=outs, group=group)

    def save(self, folder: str | os.PathLike) -> list[Path]:
        """Write ``stage_<k>.pt2`` (``torch.export`` programs) and ``stages.json`` (shapes) into ``folder``.

        ``torch.export.load(path).module()`` gives back stage k as a module, without incsched.

        Returns
        -------
        list of Path
            The files written.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        manifest: dict[str, Any] = {"format": FORMAT + ".pipeline_stages", "version": VERSION, "n_stages": self.n_stages, "stages": []}
        for k, module in enumerate(self.modules):
            try:
                program = torch.export.export(module, self.inputs[k], strict=False)
            except Exception as err:  # torch.export fails in many op-specific ways; all mean "cannot save"
                raise ExportError(f"stage {k}: torch.export failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}") from err
            if isinstance(module, ChainStage):  # tracing ran its forward once: not a call to report
                module.calls.clear()
                module.kept.clear()
            path = folder / f"stage_{k}.pt2"
            buffer = io.BytesIO()  # saved to memory first, so the file itself is written atomically
            torch.export.save(program, buffer)
            atomic_write_bytes(path, buffer.getvalue())
            written.append(path)
            manifest["stages"].append(
                {
                    "stage": k,
                    "file": path.name,
                    "input_args": [_describe(x) for x in self.inputs[k]],
                    "output_args": [_describe(x) for x in self.outputs[k]],
                }
            )
        write_json(folder / "stages.json", manifest, indent=1)
        written.append(folder / "stages.json")
        return written


def _describe(x: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}


def pipeline_stages(
    capture: Capture, stages: Result | Sequence[int], *, n_stages: int | None = None, source: str = "result"
) -> PipelineStages:
    """The stages of a stage result as forwarding modules for ``PipelineStage``.

    Parameters
    ----------
    capture : Capture
        The captured model the result was solved for (any granularity; its example inputs are one
        micro-batch).
    stages : Result or sequence of int
        Stage per graph node.
    n_stages : int, optional
        K; default the result's highest stage + 1 (empty stages only forward).

    Returns
    -------
    PipelineStages

    Raises
    ------
    ExportError
        If the result does not fit the graph, ``n_stages`` leaves a used stage out, or a value
        crossing stages is not a tensor.
    """
    stage = stage_list(capture.graph, stages, source)
    K = _stage_count(stage, n_stages, source)
    try:
        program = stage_program(capture, stage, K)
        modules = chain_stages(program)
        examples = boundary_examples(modules, capture.example_inputs, ["cpu"] * K)
    except ExecutionError as err:  # it names the edge or value; keep its line
        raise ExportError(f"{source}: {err}") from err
    return PipelineStages(modules, [tuple(ins) for ins, _ in examples], [tuple(outs) for _, outs in examples])
