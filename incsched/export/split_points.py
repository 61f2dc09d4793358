"""Split points: a stage result of a module-level graph as the call-order cuts other runtimes take.

``torch.distributed.pipelining.pipeline()`` (a ``split_spec`` of ``SplitPoint`` markers), DeepSpeed's
``PipelineModule`` (``parts``, the first layer of every stage) and torchtitan (module names per model
part) all cut one call order of the model's modules into contiguous runs. A result of a graph
captured with ``granularity="layer"`` (or ``"module:<depth>"``) is read here as those runs; anything
that is not one (an op-level result, a module that runs after a later stage's, an empty stage) is
refused with one line naming the node or module. What these read of the graph's ``meta`` (written
by capture, but a graph file can say anything) is checked once, by `export_meta`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ExportError, FormatError
from ..graph import CompGraph
from ..result import Result

__all__ = [
    "ExportError",
    "ExportMeta",
    "export_meta",
    "StageRuns",
    "stage_runs",
    "split_spec",
    "split_spec_names",
    "deepspeed_parts",
    "deepspeed_partition_method",
    "parse_partition_method",
    "tied_layer_groups",
    "PARTS_METHOD",
    "torchtitan_chunks",
    "stage_table",
    "stage_list",
]

FORMAT = "incsched.export"
VERSION = 1


@dataclass(frozen=True)
class ExportMeta:
    """What export reads of a graph's ``meta``, checked (`export_meta`).

    Attributes
    ----------
    granularity : str
        ``"op"``, ``"layer"`` or ``"module:<depth>"`` (``meta["granularity"]``, default ``"op"``).
    modules : dict of str to str, or None
        Module path per node (``meta["modules"]``); None for an op-level graph without it.
    glue_before : dict of str to int
        Glue operations a node takes in before its module's call (``meta["glue_before"]``).
    containers : frozenset of str
        Top-level ModuleList/ModuleDict names (``meta["containers"]``), what torchtitan splits into.
    module_of : dict of str to str
        Innermost module per fx node of an op-level graph (``meta["module_of"]``), for messages.
    """

    granularity: str
    modules: dict[str, str] | None
    glue_before: dict[str, int]
    containers: frozenset[str]
    module_of: dict[str, str]


def export_meta(graph: CompGraph) -> ExportMeta:
    """The ``meta`` entries export reads, checked against their types: one line naming the entry
    and the bad value, never a TypeError or a silently wrong split (a ``containers`` string read as
    its letters, a list of module paths str()-ed into one name).

    Raises
    ------
    ExportError
        If ``granularity`` is not a string, ``modules`` or ``module_of`` does not map node names to
        module paths (non-empty strings), ``glue_before`` does not map node names to counts
        (whole numbers >= 0), ``containers`` is not a list of names, or a module-level graph has no
        ``modules``.
    """
    meta = graph.meta
    where = f"graph {graph.name!r}"
    granularity = meta.get("granularity", "op")
    if not isinstance(granularity, str):
        raise ExportError(f"{where}: meta['granularity'] must be 'op', 'layer' or 'module:<depth>', got {granularity!r:.80}")

    def mapping(key: str, ok, expected: str) -> dict | None:
        value = meta.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ExportError(f"{where}: meta[{key!r}] must map node names to {expected}, got {type(value).__name__} ({value!r:.80})")
        for name, item in value.items():
            if not isinstance(name, str) or not ok(item):
                raise ExportError(f"{where}: meta[{key!r}] must map node names to {expected}; node {name!r} has {item!r:.80}")
        return dict(value)

    def is_path(x) -> bool:
        return isinstance(x, str) and bool(x)

    def is_count(x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and x >= 0

    modules = mapping("modules", is_path, "module paths (non-empty strings)")
    glue_before = mapping("glue_before", is_count, "counts (whole numbers >= 0)") or {}
    module_of = mapping("module_of", is_path, "module paths (non-empty strings)") or {}
    containers = meta.get("containers")
    if containers is None:
        containers = []
    if isinstance(containers, (str, bytes, Mapping)) or not isinstance(containers, Sequence) or not all(is_path(c) for c in containers):
        raise ExportError(f"{where}: meta['containers'] must be a list of module names, got {containers!r:.80}")
    if granularity != "op" and modules is None:
        raise ExportError(f"{where}: granularity {granularity!r} but meta['modules'] (the module path of every node) is missing")
    return ExportMeta(granularity, modules, glue_before, frozenset(containers), module_of)


def _stage_count(stage: list[int], n_stages, source: str) -> int:
    """K: ``n_stages`` when given (a whole number covering every stage used), else the highest + 1."""
    used = max(stage, default=-1) + 1
    if n_stages is None:
        return used
    if isinstance(n_stages, bool) or not isinstance(n_stages, (int, np.integer)) or n_stages < max(used, 1):
        raise ExportError(
            f"{source}: n_stages is {n_stages!r}, but the stages used need a whole number of at least {max(used, 1)}"
        )
    return int(n_stages)


@dataclass(frozen=True)
class StageRuns:
    """A module-level stage result as contiguous runs of the call order.

    Attributes
    ----------
    nodes : list of list of str
        Per stage, its graph nodes in call order (node names: a module's path, ``path#2`` for a
        second call).
    modules : list of list of str
        Per stage, the module paths of its module nodes, in call order.
    param_bytes : list of int
        Per stage, the parameter bytes it holds (`CompGraph.part_param_bytes`: a shared weight on
        every stage that reads it).
    starts : list of int
        Per stage, the index (call order) of its first node.
    meta : ExportMeta
        The graph's meta as export reads it, checked.
    """

    graph: CompGraph
    nodes: list[list[str]]
    modules: list[list[str]]
    param_bytes: list[int]
    starts: list[int]
    meta: ExportMeta

    @property
    def n_stages(self) -> int:
        return len(self.nodes)


def stage_list(graph: CompGraph, stages: Result | Sequence[int], source: str = "result") -> list[int]:
    """The stage of every node of ``graph``, from a `Result` or a sequence, checked against the graph.

    Raises
    ------
    ExportError
        If the result is a placement, was solved for another graph, or has the wrong length.
    """
    if isinstance(stages, Result):
        if stages.problem != "stage" or stages.stages is None:
            raise ExportError(f"{source}: a {stages.problem} result has no stages; export takes stage results")
        result = stages
    else:
        if isinstance(stages, (str, bytes)) or not isinstance(stages, Sequence) and not hasattr(stages, "tolist"):
            raise ExportError(f"{source}: stages must be a sequence with one whole number per node, got {type(stages).__name__}")
        values = stages.tolist() if hasattr(stages, "tolist") else list(stages)
        result = Result("stage", graph.name, "unknown", None, None, None, {}, "given", 0, False, stages=values)
    try:
        result.check_assignment(graph, source=source)  # the one check export, validate and show share
    except FormatError as exc:
        raise ExportError(str(exc)) from None
    return list(result.stages)


def stage_runs(
    graph: CompGraph,
    stages: Result | Sequence[int],
    *,
    n_stages: int | None = None,
    module_paths: Mapping[str, str] | None = None,
    source: str = "result",
) -> StageRuns:
    """Read a module-level stage result as contiguous runs of the call order.

    Parameters
    ----------
    graph : CompGraph
        The graph the result was solved for, captured with ``granularity="layer"`` or
        ``"module:<depth>"`` (node index order is the call order).
    stages : Result or sequence of int
        The stage of every node.
    n_stages : int, optional
        K; default the result's highest stage + 1.
    module_paths : mapping of str to str, optional
        Innermost module path per fx node (``Capture.module_paths``), to name the module an op-level
        result cuts inside; default the graph's ``meta["module_of"]``, which capture writes.
    source : str
        Names the result in errors.

    Raises
    ------
    ExportError
        For an op-level graph, a module that runs after a module of a later stage, or an empty stage;
        for graph meta that is not what capture writes (`export_meta`).
    """
    meta = export_meta(graph)
    stage = stage_list(graph, stages, source)
    K = _stage_count(stage, n_stages, source)
    if module_paths is not None and not isinstance(module_paths, Mapping):
        raise ExportError(f"module_paths must map fx node names to module paths, got {type(module_paths).__name__}")
    modules = meta.modules
    if meta.granularity == "op" or modules is None:
        first = next((v for v in range(1, graph.n_nodes) if stage[v] != stage[v - 1]), None)
        where = ""
        if first is not None:
            where = f" (stage {stage[first]} begins at node {graph.names[first]!r}"
            name = graph.names[first]
            module = (module_paths or {}).get(name) or meta.module_of.get(name)
            if module:
                where += f", inside module {module!r}"
            where += ")"
        raise ExportError(
            f"{source}: an op-level result has no split points{where}; capture with granularity 'layer' "
            f"(incsched graph capture --granularity layer) or export PipelineStage modules (--format pipelining --model M)"
        )
    stray = next((nm for nm in graph.names if nm not in modules), None)
    if stray is not None:
        raise ExportError(f"{source}: node {stray!r} of graph {graph.name!r} is no module call; capture the graph with granularity 'layer'")
    for v in range(1, graph.n_nodes):
        if stage[v] < stage[v - 1]:
            raise ExportError(
                f"{source}: module {modules[graph.names[v]]!r} (stage {stage[v]}) runs after module "
                f"{modules[graph.names[v - 1]]!r} (stage {stage[v - 1]}); "
                f"split points cut the call order into contiguous runs, so later modules need later or equal stages"
            )
    if stage and stage[-1] >= K:
        raise ExportError(f"{source}: node {graph.names[-1]!r} is on stage {stage[-1]} but the result has {K} stages")
    counts = np.bincount(np.asarray(stage, dtype=np.int64), minlength=K)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise ExportError(
            f"{source}: stage {int(empty[0])} is empty; split points make one stage per run of modules, so the result "
            f"maps onto {K - empty.size} stages: solve with --stages {K - empty.size}"
        )
    nodes = [[nm for v, nm in enumerate(graph.names) if stage[v] == k] for k in range(K)]
    per_stage_modules = [[modules[nm] for nm in run] for run in nodes]
    param_bytes = graph.part_param_bytes(stage, K)  # a shared weight on every stage that reads it
    starts = [int(np.cumsum(counts)[k - 1]) if k else 0 for k in range(K)]
    return StageRuns(graph, nodes, per_stage_modules, param_bytes, starts, meta)


def split_spec_names(graph: CompGraph, stages: Result | Sequence[int], **kwargs: Any) -> dict[str, str]:
    """The ``split_spec`` of `split_spec` with the markers as names (``"BEGINNING"``/``"END"``), for JSON."""
    runs = stage_runs(graph, stages, **kwargs)
    modules, glue_before = runs.meta.modules, runs.meta.glue_before
    calls: dict[str, int] = {}
    for path in modules.values():
        calls[path] = calls.get(path, 0) + 1
    spec: dict[str, str] = {}
    for k in range(1, runs.n_stages):
        last, first = graph.names[runs.starts[k] - 1], graph.names[runs.starts[k]]
        # Before the stage's first module where nothing runs between the two modules; else after
        # the previous stage's last module, so the glue code the first node holds moves with it.
        if not glue_before.get(first) and calls[modules[first]] == 1:
            spec[modules[first]] = "BEGINNING"
        elif calls[modules[last]] == 1:
            spec[modules[last]] = "END"
        else:
            path = modules[last] if glue_before.get(first) else modules[first]
            raise ExportError(f"module {path!r} is called {calls[path]} times: a split point at it would cut at every call")
    return spec


def split_spec(graph: CompGraph, stages: Result | Sequence[int], **kwargs: Any) -> dict[str, Any]:
    """A ``split_spec`` for ``torch.distributed.pipelining.pipeline()`` from a layer-level result.

    ``pipeline(model, mb_args, split_spec=split_spec(graph, result))`` then makes exactly the
    result's stages: K - 1 markers, each at the first module of a stage (``SplitPoint.BEGINNING``)
    or, where glue code runs before that module, after the last module of the stage before (``END``).
    ``pipeline()`` wraps the marked modules' ``forward`` in place: hand it a fresh model each time.

    Parameters
    ----------
    graph : CompGraph
        The layer-level graph the result was solved for.
    stages : Result or sequence of int
        Its stage assignment.
    **kwargs
        ``n_stages``, ``module_paths``, ``source``; see `stage_runs`.

    Returns
    -------
    dict of str to torch.distributed.pipelining.SplitPoint

    Raises
    ------
    ExportError
        See `stage_runs`; also for a split at a module called more than once.

    Examples
    --------
    >>> g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], meta={"granularity": "layer", "modules": {"a": "a", "b": "b", "c": "c"}})
    >>> {k: v.name for k, v in split_spec(g, [0, 0, 1]).items()}
    {'c': 'BEGINNING'}
    """
    from torch.distributed.pipelining import SplitPoint  # torch only for the caller who runs pipeline()

    return {path: SplitPoint[marker] for path, marker in split_spec_names(graph, stages, **kwargs).items()}


def deepspeed_parts(graph: CompGraph, stages: Result | Sequence[int], **kwargs: Any) -> dict[str, Any]:
    """DeepSpeed ``PipelineModule`` partition boundaries for the model's modules as a ``LayerSpec`` sequence.

    ``layers`` are the module nodes in call order (one ``LayerSpec`` each, in this order); stage
    ``k`` holds ``layers[parts[k]:parts[k + 1]]``, the list ``PipelineModule._partition_layers``
    stores in ``self.parts``. No DeepSpeed ``partition_method`` takes boundaries, so
    ``partition_method`` is ``"parts:0,3,7,12"``, which the subclass
    `incsched.export.deepspeed_module.PartsPipelineModule` accepts beside DeepSpeed's own methods.
    Glue code is wherever the layer functions put it.

    Returns
    -------
    dict
        ``{"layers": [module paths], "parts": [K + 1 ints, 0 first, len(layers) last],
        "partition_method": "parts:...", "tied": [groups], "param_bytes": [per stage]}``; ``tied``
        lists the layers that share a weight (`tied_layer_groups`), each group one
        ``TiedLayerSpec`` key.

    Examples
    --------
    >>> g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], meta={"granularity": "layer", "modules": {"a": "a", "b": "b", "c": "c"}})
    >>> deepspeed_parts(g, [0, 0, 1])["partition_method"]
    'parts:0,2,3'
    """
    runs = stage_runs(graph, stages, **kwargs)
    layers = [m for run in runs.modules for m in run]
    parts = [0]
    for run in runs.modules:
        parts.append(parts[-1] + len(run))
    return {
        "layers": layers,
        "parts": parts,
        "partition_method": deepspeed_partition_method(parts),
        "tied": tied_layer_groups(graph, layers),
        "param_bytes": runs.param_bytes,
    }


#: What starts the ``partition_method`` of explicit boundaries.
PARTS_METHOD = "parts:"


def deepspeed_partition_method(parts: Sequence[int]) -> str:
    """``"parts:0,3,7,12"``: the boundaries as a ``partition_method`` string (see `parse_partition_method`)."""
    return PARTS_METHOD + ",".join(str(int(p)) for p in parts)


def parse_partition_method(method: str, *, n_layers: int, n_stages: int) -> list[int]:
    """The boundaries of a ``"parts:0,3,7,12"`` partition method, checked against the module.

    Parameters
    ----------
    method : str
        ``"parts:"`` then K + 1 comma-separated whole numbers.
    n_layers, n_stages : int
        The ``PipelineModule``'s layer count and stage count.

    Returns
    -------
    list of int
        ``parts``: K + 1 non-decreasing boundaries, 0 first, ``n_layers`` last.

    Raises
    ------
    ExportError
        If the text is not that, or the boundaries do not fit ``n_layers`` and ``n_stages``.

    Examples
    --------
    >>> parse_partition_method("parts:0,2,3", n_layers=3, n_stages=2)
    [0, 2, 3]
    """
    if not isinstance(method, str) or not method.lower().startswith(PARTS_METHOD):
        raise ExportError(f"partition_method must be 'parts:' and the boundaries (e.g. 'parts:0,3,7'), got {method!r:.80}")
    try:
        parts = [int(x) for x in method[len(PARTS_METHOD):].split(",")]
    except ValueError:
        raise ExportError(f"partition_method {method!r:.80}: the boundaries must be whole numbers separated by commas") from None
    if len(parts) != n_stages + 1:
        raise ExportError(f"partition_method {method!r:.80} has {len(parts)} boundaries, the module's {n_stages} stages need {n_stages + 1}")
    if parts[0] != 0 or parts[-1] != n_layers or any(b < a for a, b in zip(parts, parts[1:])):
        raise ExportError(f"partition_method {method!r:.80}: boundaries must rise from 0 to the layer count {n_layers}")
    return parts


def tied_layer_groups(graph: CompGraph, layers: Sequence[str]) -> list[dict[str, Any]]:
    """The layers that read one weight, one DeepSpeed ``TiedLayerSpec`` key per group.

    Each of the graph's ``shared_weights`` (a weight several nodes read: a tied embedding and its
    output head) whose readers are two or more of ``layers`` is one group, to build with
    ``TiedLayerSpec(key, ...)`` on each of those layers so DeepSpeed keeps the copies in sync (it
    all-reduces their gradients between the stages that hold them).

    Returns
    -------
    list of dict
        ``{"key": the weight's name, "weight": the same, "bytes": its size, "layers": [indices into
        layers]}`` per group.
    """
    modules = export_meta(graph).modules or {}
    index = {path: i for i, path in enumerate(layers)}
    out = []
    for w in graph.shared_weights:
        names = [graph.names[v] for v in w.readers]
        at = sorted({index[modules[nm]] for nm in names if nm in modules and modules[nm] in index})
        if len(at) >= 2:
            out.append({"key": w.name, "weight": w.name, "bytes": w.nbytes, "layers": at})
    return out


def torchtitan_chunks(
    graph: CompGraph, stages: Result | Sequence[int], *, ranks: int | None = None, style: str = "loop", **kwargs: Any
) -> dict[str, Any]:
    """torchtitan's ``module_fqns_per_model_part``: the module names of each model part.

    A result with K stages is K parts, in pipeline order. With ``ranks`` < K it is a looped
    schedule (Interleaved1F1B, LoopedBFS ...: ``style="loop"``, part i on rank i % ranks) or a V
    schedule (ZBVZeroBubble, DualPipeV: ``style="v"``, two parts per rank, rank r holding parts r
    and K - 1 - r). torchtitan 0.3.0's splitter (``_split_module``) keeps a part's modules by name
    among the model's top-level children and the elements of a top-level ModuleList or ModuleDict;
    a nested model (Hugging Face GPT-2: ``transformer.h.3``) is marked ``nested``, and
    `incsched.export.module_split.split_module` takes its names (in the splitter's place).

    Returns
    -------
    dict
        ``module_fqns_per_model_part`` (K lists), ``nested`` (a name torchtitan's own splitter
        does not keep), ``pipeline_parallel_degree`` (ranks), ``stages_per_rank``,
        ``stages_of_rank`` (part indices per rank) and ``param_bytes_per_rank`` (what each rank
        holds: the sum over its parts).

    Raises
    ------
    ExportError
        See `stage_runs`; also if K is not a multiple of ``ranks`` (two per rank for V).
    """
    runs = stage_runs(graph, stages, **kwargs)
    K = runs.n_stages
    ranks = K if ranks is None else int(ranks)
    if ranks < 1 or K % ranks:
        raise ExportError(f"{K} stages cannot be spread over {ranks} ranks: the stage count must be a multiple of the ranks (K = ranks x virtual stages)")
    if style == "loop":
        stages_of_rank = [list(range(r, K, ranks)) for r in range(ranks)]
    elif style == "v":
        if K != 2 * ranks:
            raise ExportError(f"a V schedule puts two stages on each rank: {ranks} ranks need {2 * ranks} stages, the result has {K}")
        stages_of_rank = [[r, K - 1 - r] for r in range(ranks)]
    else:
        raise ExportError(f"unknown schedule style {style!r} (expected 'loop' or 'v')")
    rank_of = {k: r for r, chunk in enumerate(stages_of_rank) for k in chunk}
    containers = runs.meta.containers
    nested = any(
        len(parts) > 2 or (len(parts) == 2 and parts[0] not in containers)
        for run in runs.modules for parts in (path.split(".") for path in run)
    )
    return {
        "module_fqns_per_model_part": runs.modules,
        "nested": nested,
        "pipeline_parallel_degree": ranks,
        "stages_per_rank": K // ranks,
        "stages_of_rank": stages_of_rank,
        # a shared weight once per rank, however many of its chunks read it
        "param_bytes_per_rank": graph.part_param_bytes([rank_of[k] for k, run in enumerate(runs.nodes) for _ in run], ranks),
    }


def stage_table(graph: CompGraph, stages: Result | Sequence[int], *, n_stages: int | None = None, source: str = "result") -> dict[str, Any]:
    """The plain form of any stage result: per stage its nodes, modules (module-level graphs) and bytes.

    Works at every granularity; for op-level graphs ``modules`` is left out.

    Raises
    ------
    ExportError
        If the stages do not fit the graph (`stage_list`), ``n_stages`` leaves a used stage out,
        or the graph's meta is not what capture writes (`export_meta`).
    """
    meta = export_meta(graph)
    stage = stage_list(graph, stages, source)
    K = _stage_count(stage, n_stages, source)
    modules = meta.modules
    held = graph.part_param_bytes(stage, K)  # a shared weight on every stage that reads it
    rows = []
    for k in range(K):
        names = [nm for v, nm in enumerate(graph.names) if stage[v] == k]
        row: dict[str, Any] = {"stage": k, "nodes": names, "param_bytes": held[k]}
        if modules is not None:
            row["modules"] = [modules[nm] for nm in names if nm in modules]
        rows.append(row)
    return {
        "format": f"{FORMAT}.json",
        "version": VERSION,
        "graph": graph.name,
        "granularity": meta.granularity,
        "n_stages": K,
        "stages": rows,
    }
