"""Export: hand a stage result over to the runtimes that execute pipelines.

The last arrow after ``solve()``: a result of a layer-level graph (``capture(...,
granularity="layer")``) becomes a ``split_spec`` for ``torch.distributed.pipelining.pipeline()``,
DeepSpeed ``PipelineModule`` partition boundaries or torchtitan's module names per model part
(`split_points`; `deepspeed_module.PartsPipelineModule` takes the boundaries, `module_split.split_module`
cuts nested models where torchtitan's splitter cannot, each imported on its own); a result of an op-level graph, whose cuts fall inside modules, becomes ready
``PipelineStage`` modules (`stages`). `export_result` is what ``incsched export`` calls.
"""

from __future__ import annotations

from typing import Any

from ..graph import CompGraph
from ..result import Result
from .split_points import (
    FORMAT,
    VERSION,
    ExportError,
    ExportMeta,
    StageRuns,
    deepspeed_partition_method,
    deepspeed_parts,
    export_meta,
    parse_partition_method,
    split_spec,
    split_spec_names,
    stage_runs,
    stage_table,
    tied_layer_groups,
    torchtitan_chunks,
)
from .pipeline_build import TiedGroup, build_pipeline, stage_state_bytes
from .stages import PipelineStages, pipeline_stages

__all__ = [
    "FORMATS",
    "TiedGroup", "build_pipeline", "stage_state_bytes",  # pipeline_build: the pipe as predicted
    "ExportError",
    "ExportMeta",
    "PipelineStages",
    "StageRuns",
    "deepspeed_partition_method",
    "deepspeed_parts",
    "export_meta",
    "export_result",
    "parse_partition_method",
    "pipeline_stages",
    "split_spec",
    "split_spec_names",
    "stage_runs",
    "stage_table",
    "tied_layer_groups",
    "torchtitan_chunks",
]

#: What ``incsched export --format`` writes.
FORMATS = ("pipelining", "deepspeed", "torchtitan", "json")


def export_result(
    result: Result, graph: CompGraph, fmt: str, *, ranks: int | None = None, style: str = "loop", source: str = "result"
) -> dict[str, Any]:
    """The plain-data export of a stage result (JSON-ready).

    Parameters
    ----------
    result : Result
        A stage result.
    graph : CompGraph
        The graph it was solved for.
    fmt : {"pipelining", "deepspeed", "torchtitan", "json"}
        ``pipelining``: ``{"split_spec": {module: "BEGINNING" | "END"}}`` (a layer-level result;
        op-level results export as `pipeline_stages` instead); ``deepspeed``: `deepspeed_parts`;
        ``torchtitan``: `torchtitan_chunks` (``ranks``, ``style``); ``json``: `stage_table`.

    Raises
    ------
    ExportError
        For an unknown format, a result the format cannot express (names the module), or graph
        meta that is not what capture writes (`export_meta`: names the entry).
    """
    K = _n_stages(result)
    if fmt == "pipelining":
        data = {"split_spec": split_spec_names(graph, result, n_stages=K, source=source)}
    elif fmt == "deepspeed":
        data = deepspeed_parts(graph, result, n_stages=K, source=source)
    elif fmt == "torchtitan":
        data = torchtitan_chunks(graph, result, ranks=ranks, style=style, n_stages=K, source=source)
    elif fmt == "json":
        return stage_table(graph, result, n_stages=K, source=source)
    else:
        raise ExportError(f"unknown export format {fmt!r} (expected one of {', '.join(FORMATS)})")
    if K is None:  # the stages were checked by the call above: whole numbers, one per node
        K = max(result.stages, default=-1) + 1
    return {"format": f"{FORMAT}.{fmt}", "version": VERSION, "graph": graph.name, "n_stages": K, **data}


def _n_stages(result: Result) -> int | None:
    """K as solved (empty trailing stages included), from the per-stage terms the evaluator wrote."""
    per_stage = (result.terms or {}).get("stage_mem")
    return len(per_stage) if isinstance(per_stage, list) and per_stage else None
