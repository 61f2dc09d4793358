"""The hand-off built: a layer-level stage result as the ``torch.distributed.pipelining`` pipe it predicts.

``pipeline()`` given our ``split_spec`` (`split_points.split_spec`) cuts the model where the result
says, but it leaves tensors on stages that never read them: a tied weight (GPT-2's ``lm_head``
and ``wte``) sits on the first stage twice, once as ``wte`` and once as a stray ``lm_head`` copy.
`build_pipeline` strips every parameter and buffer a stage's code does not read, gives each stage
one copy of each tied weight it reads (FQNs of one tie on one stage share it), puts the tensors no
code reads (BatchNorm's ``num_batches_tracked`` under an eval trace) where capture charges them,
and lists the tied groups across stages, so that a runtime can keep their copies in sync. Each
stage then holds ``graph.part_param_bytes(stages, K)`` bytes, to the byte.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ExportError
from ..execute.live_bytes import distinct_tensor_bytes
from ..graph import CompGraph
from ..result import Result
from .split_points import split_spec, stage_list

__all__ = ["TiedGroup", "build_pipeline", "stage_state_bytes"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TiedGroup:
    """One tensor the model reaches under several names (a tied embedding), as the built stages hold it.

    Attributes
    ----------
    fqns : tuple of str
        Every name of the tensor in the unsplit model, sorted.
    nbytes : int
        Bytes of one copy.
    stages : dict of int to tuple of str
        Per stage that holds a copy, the names (within that stage's module, the model's own FQNs)
        under which its code reads it; one copy per stage however many names.
    """

    fqns: tuple[str, ...]
    nbytes: int
    stages: dict[int, tuple[str, ...]]

    @property
    def replicated(self) -> bool:
        """Whether several stages hold a copy (their gradients must then be summed across them)."""
        return len(self.stages) > 1


def build_pipeline(model: Any, example_args: Sequence[Any], graph: CompGraph, result: Result | Sequence[int], **kwargs: Any):
    """``torch.distributed.pipelining.pipeline()`` of ``model`` split as ``result`` says, each stage
    holding exactly the weights it reads (and those nobody reads that capture charges to it).

    Parameters
    ----------
    model : torch.nn.Module
        The model ``graph`` was captured from (``granularity="layer"``). ``pipeline()`` wraps the
        marked modules' ``forward`` in place: hand it a fresh model each time.
    example_args : sequence
        One micro-batch of positional inputs, as ``pipeline()`` takes them.
    graph : CompGraph
        The layer-level graph the result was solved for.
    result : Result or sequence of int
        A stage result (or the stage of every node).
    **kwargs
        ``n_stages``, ``module_paths``, ``source``: see `split_points.stage_runs`.

    Returns
    -------
    torch.distributed.pipelining.Pipe
        With ``pipe.tied_groups``: a tuple of `TiedGroup`, one per tensor the model reaches under
        several names and some stage reads, in the order of the model's ``named_parameters`` then
        ``named_buffers``. Stage k's parameter and buffer storages add up to
        ``graph.part_param_bytes(stages, K)[k]`` (`stage_state_bytes`).

    Raises
    ------
    ExportError
        As `split_points.split_spec` (an op-level result, an empty stage, a split at a module
        called twice ...), or when ``pipeline()`` makes a different number of stages than the result.
    """
    from torch.distributed.pipelining import pipeline  # torch only for the caller who builds a pipe

    stages = stage_list(graph, result, kwargs.get("source", "result"))
    names_of = _names_by_tensor(model)
    pipe = pipeline(model, tuple(example_args), split_spec=split_spec(graph, stages, **kwargs))
    K = max(stages, default=-1) + 1  # split_spec refused empty stages
    if pipe.num_stages != K:
        raise ExportError(f"pipeline() made {pipe.num_stages} stages of the result's {K}")
    held: list[dict[int, list[str]]] = []  # per stage: model tensor id -> the FQNs its code reads it by
    for k in range(K):
        held.append(_keep_only_what_is_read(pipe.get_stage_module(k), names_of))
    _place_unread(model, [pipe.get_stage_module(k) for k in range(K)], held)
    pipe.tied_groups = _tied_groups(model, names_of, held)
    built = [stage_state_bytes(pipe.get_stage_module(k)) for k in range(K)]
    predicted = graph.part_param_bytes(stages, K)
    if built != predicted:  # a graph captured from another model, or weights torch.export renamed
        log.warning("pipeline of %r holds %s parameter bytes per stage, %s predicted", graph.name, built, predicted)
    log.info("pipeline of %r: %d stages, %d tied group(s), %d held on several stages", graph.name, K,
             len(pipe.tied_groups), sum(g.replicated for g in pipe.tied_groups))
    return pipe


def stage_state_bytes(module: Any) -> int:
    """Bytes of the distinct parameter and buffer storages of ``module`` (a tensor reached under
    several names counts once): numel times element size, the largest view per storage."""
    return distinct_tensor_bytes(t for _, t in _state(module))


def _state(module: Any) -> list[tuple[str, Any]]:
    """Every (FQN, tensor) of ``module``'s parameters then buffers, every name of a tied one."""
    return [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]


def _names_by_tensor(model: Any) -> dict[int, tuple[str, ...]]:
    """Every FQN of every parameter and buffer of the unsplit model, grouped by tensor."""
    out: dict[int, list[str]] = {}
    for fqn, t in _state(model):
        out.setdefault(id(t), []).append(fqn)
    return {key: tuple(sorted(fqns)) for key, fqns in out.items()}


def _fqns_read(module: Any) -> set[str]:
    """The parameter and buffer names ``module``'s code reads: ``get_attr`` targets of its graph and
    of the graphs it calls, and everything a plain (not graph) module it calls holds."""
    import torch

    out: set[str] = set()

    def everything(scope: str, mod: Any) -> None:
        for name, _ in _state(mod):
            out.add(f"{scope}.{name}" if scope else name)

    def walk(scope: str, mod: Any) -> None:
        graph = getattr(mod, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            everything(scope, mod)
            return
        for node in graph.nodes:
            if node.op not in ("get_attr", "call_module"):
                continue
            path = f"{scope}.{node.target}" if scope else node.target
            target = _resolve(mod, node.target)
            if node.op == "call_module":
                walk(path, target)
            elif isinstance(target, torch.nn.Module):
                everything(path, target)
            else:
                out.add(path)

    walk("", module)
    return out


def _resolve(mod: Any, target: str) -> Any:
    for atom in target.split("."):
        mod = getattr(mod, atom)
    return mod


def _keep_only_what_is_read(stage: Any, names_of: dict[int, tuple[str, ...]]) -> dict[int, list[str]]:
    """Delete the tensors ``stage`` holds but never reads, and make the names of one tied tensor
    on the stage share one copy. Returns, per tensor of the model the stage reads (keyed by its
    ``id`` in the model), the names the stage reads it by."""
    import torch

    read = _fqns_read(stage)
    by_fqn = {fqn: key for key, fqns in names_of.items() for fqn in fqns}
    held: dict[int, list[str]] = {}
    stray = []
    for fqn, _ in _state(stage):
        if fqn not in read:
            stray.append(fqn)
        elif fqn in by_fqn:
            held.setdefault(by_fqn[fqn], []).append(fqn)
    for fqn in stray:
        parent, _, leaf = fqn.rpartition(".")
        owner = stage.get_submodule(parent) if parent else stage
        if hasattr(owner, leaf):  # a tensor reached twice is deleted once
            delattr(owner, leaf)
    if stray:
        log.debug("stage: %d stray tensor name(s) removed: %s", len(stray), stray[:8])
    for key, fqns in held.items():
        if len(fqns) < 2:
            continue
        first = _resolve(stage, fqns[0])
        for fqn in fqns[1:]:
            parent, _, leaf = fqn.rpartition(".")
            owner = stage.get_submodule(parent) if parent else stage
            if leaf in owner._parameters:
                owner._parameters[leaf] = first if isinstance(first, torch.nn.Parameter) else torch.nn.Parameter(first)
            else:
                owner._buffers[leaf] = first
    return held


def _place_unread(model: Any, modules: list[Any], held: list[dict[int, list[str]]]) -> None:
    """Put each tensor of the model that no stage's code reads (BatchNorm's ``num_batches_tracked``
    under an eval trace, which training increments) on the stage holding the read tensor with the
    longest common module path: where capture charges it (`incsched.capture.assemble`)."""
    import torch

    read = [(fqn, k) for k, h in enumerate(held) for fqns in h.values() for fqn in fqns]
    stage_of = {key: None for h in held for key in h}  # None: read there, nothing to place
    for fqn, t in _state(model):
        if id(t) in stage_of and stage_of[id(t)] is None:
            continue
        k = stage_of.get(id(t))  # a second name of a tensor placed already goes where the first went
        if k is None:
            k, best_len = 0, 0
            for other, j in read:
                common = 0
                for a, b in zip(fqn.split("."), other.split(".")):
                    if a != b:
                        break
                    common += 1
                if common > best_len:
                    k, best_len = j, common
            stage_of[id(t)] = k
        _assign(modules[k], fqn, t, parameter=isinstance(t, torch.nn.Parameter))
        held[k].setdefault(id(t), []).append(fqn)
        log.debug("unread %s placed on stage %d", fqn, k)


def _assign(root: Any, fqn: str, t: Any, *, parameter: bool) -> None:
    import torch

    parent, _, leaf = fqn.rpartition(".")
    owner = root
    for atom in parent.split(".") if parent else []:
        if not hasattr(owner, atom):
            owner.add_module(atom, torch.nn.Module())
        owner = getattr(owner, atom)
    if parameter:
        owner.register_parameter(leaf, t)
    else:
        owner.register_buffer(leaf, t)


def _tied_groups(model: Any, names_of: dict[int, tuple[str, ...]], held: list[dict[int, list[str]]]) -> tuple[TiedGroup, ...]:
    tensors = {id(t): t for _, t in _state(model)}
    groups = []
    for key, fqns in names_of.items():
        if len(fqns) < 2:
            continue
        on = {k: tuple(sorted(h[key])) for k, h in enumerate(held) if key in h}
        if on:
            t = tensors[key]
            groups.append(TiedGroup(fqns, int(t.numel() * t.element_size()), on))
    return tuple(groups)
