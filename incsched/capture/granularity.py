"""Granularity: group a captured graph's operations into the model's own modules, in call order.

The last step of capture when the caller wants split points rather than operations: every fx node
belongs to the innermost *unit* module on its module stack (``"layer"``: the elements of the model's
stacks of repeated blocks, ``"module:<depth>"``: the modules at that depth), one graph node per call
of a unit, named by its module path. Operations that run in no unit (the inputs, glue code in a
parent's ``forward``) join the unit called next. Consecutive nodes are joined by zero-byte
*call-order* edges: ``pipeline()``, DeepSpeed and torchtitan can only cut the
call order into contiguous runs, so the graph states that constraint and every stage result of it
maps onto split points.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np
from torch import nn

from ..graph.coarsen import quotient
from ..errors import CaptureError
from ..graph import CompGraph
from .trace import module_kind

__all__ = ["GRANULARITIES", "parse_granularity", "unit_modules", "group_by_units"]

#: The granularities `capture` accepts (``"module:<depth>"`` with any depth >= 1).
GRANULARITIES = ("op", "layer", "module:<depth>")

# Containers whose elements can be split points (torchtitan splits ModuleList/ModuleDict elements).
_CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential)
_INDEXED = (nn.ModuleList, nn.ModuleDict)


def parse_granularity(granularity: str) -> tuple[str, int | None]:
    """``"op"`` -> ``("op", None)``, ``"layer"`` -> ``("layer", None)``, ``"module:2"`` -> ``("module", 2)``.

    Raises
    ------
    CaptureError
        For any other value, naming it and the accepted ones.
    """
    if granularity in ("op", "layer"):
        return granularity, None
    if isinstance(granularity, str) and granularity.startswith("module:"):
        text = granularity.split(":", 1)[1]
        if text.isdigit() and int(text) >= 1:
            return "module", int(text)
    raise CaptureError(f"unknown granularity {granularity!r} (expected 'op', 'layer' or 'module:<depth>' with depth >= 1)")


def _is_indexed(module: nn.Module) -> bool:
    """A ModuleList or ModuleDict, or what ``torch.export`` leaves of one in the module of a loaded
    program (``ExportedProgram.module()``): a plain ``nn.Module`` whose children are named 0, 1, ...
    (every class there is ``Module``, so a numbered Sequential of distinct pieces counts too)."""
    if isinstance(module, _INDEXED):
        return True
    names = [name for name, _ in module.named_children()]
    return type(module) is nn.Module and len(names) >= 2 and all(name.isdigit() for name in names)


def _is_stack(module: nn.Module) -> bool:
    """A container of repeated blocks: at least two children of one class (resnet's ``layer1``,
    a transformer's ``layers``), not a container of distinct pieces (resnet's ``downsample``)."""
    if not (isinstance(module, _CONTAINERS) or _is_indexed(module)):
        return False
    counts = Counter(type(c) for c in module.children())
    return bool(counts) and max(counts.values()) >= 2


def unit_modules(model: nn.Module, granularity: str) -> dict[str, str]:
    """The module paths that become graph nodes at ``granularity``, with their class names.

    ``"layer"``: the root is opened; a stack (see `_is_stack`) is opened into its elements, and so
    is any module that holds a stack somewhere below it (``LlamaForCausalLM.model``); an element of a
    stack is a unit whatever it holds (a ``Bottleneck``, a decoder layer). ``"module:<depth>"``: the
    modules ``depth`` levels down, and shallower modules that have no children.

    Returns
    -------
    dict of str to str
        Unit path -> class name, in the model's registration order.
    """
    kind, depth = parse_granularity(granularity)
    if kind == "op":
        raise CaptureError("granularity 'op' groups nothing: every operation is a node")
    units: dict[str, str] = {}
    if kind == "module":
        for path, module in model.named_modules(remove_duplicate=False):
            level = path.count(".") + 1 if path else 0
            if level == depth or (0 < level < depth and not any(True for _ in module.children())):
                units[path] = type(module).__name__
        return units

    holds: dict[int, bool] = {}

    def holds_stack(module: nn.Module) -> bool:
        key = id(module)
        if key not in holds:
            holds[key] = any(_is_stack(c) or holds_stack(c) for c in module.children())
        return holds[key]

    def visit(prefix: str, module: nn.Module, elements_are_units: bool) -> None:
        for name, child in module.named_children():
            path = f"{prefix}.{name}" if prefix else name
            if _is_stack(child):
                visit(path, child, True)
            elif not elements_are_units and holds_stack(child):
                visit(path, child, False)
            else:
                units[path] = type(child).__name__

    visit("", model, False)
    return units


def _unit_of(path: str, units: Mapping[str, str]) -> str | None:
    """The outermost unit on the module path ``path`` (its prefixes), or None for glue."""
    if not path:
        return None
    parts = path.split(".")
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        if prefix in units:
            return prefix
    return None


def _bytes_into_glue(graph: CompGraph, first_glue: int, run: np.ndarray, last_run: int) -> int:
    """Bytes the last unit's operations hand to the glue after it (nodes ``first_glue`` on): each
    producer's largest edge into the glue once, as `quotient` counts a tensor. The model's inputs
    (the labels, which a schedule passes as its target) are not the unit's."""
    largest: dict[int, int] = {}
    for u, v, b in zip(graph.src.tolist(), graph.dst.tolist(), graph.edge_bytes.tolist()):
        if v >= first_glue > u and run[u] == last_run and graph.in_degree[u] > 0:
            largest[u] = max(largest.get(u, 0), int(b))
    return sum(largest.values())


def group_by_units(
    graph: CompGraph, module_paths: Mapping[str, str], units: Mapping[str, str], model: nn.Module, *, label: str
) -> CompGraph:
    """One node per call of a unit module, in call order; glue joins the module called after it.

    Parameters
    ----------
    graph : CompGraph
        The fine graph from `assemble`: one node per fx node, index order = call order.
    module_paths : mapping of str to str
        Innermost module path of every fx node (`assemble`'s ``module_paths``).
    units : mapping of str to str
        From `unit_modules`.
    model : torch.nn.Module
        The captured model, for the ModuleList/ModuleDict containers torchtitan can split.
    label : str
        The granularity, recorded in ``meta["granularity"]`` and ``meta["coarsening"]``.

    Returns
    -------
    CompGraph
        Nodes in call order, each named by its module path (``path#2`` for a second call).
        Operations outside every unit (the inputs, glue code in a parent's ``forward``) join the
        unit called next, or the last one at the end: a split *after* the previous unit then puts
        them where the graph does. ``meta["modules"]`` maps every node to its module path,
        ``meta["module_classes"]`` to its class, ``meta["glue_before"]`` counts the glue operations
        a node took in before its call; ``meta["containers"]`` lists the ModuleList/ModuleDict
        paths above a unit; ``meta["call_order_edges"]`` counts the zero-byte edges added. Where
        glue runs after the last unit call (the loss of a model called with its labels),
        ``meta["loss_input_bytes"]`` maps the last node to the bytes the last unit hands to it:
        what a pipeline that runs the loss outside its last stage returns and keeps per
        micro-batch (`incsched.problems.training.kept_output_bytes`).

    Raises
    ------
    CaptureError
        If the graph is not in call order, or no operation runs in a unit module.
    """
    names = graph.names
    if not bool(np.all(graph.src < graph.dst)):
        raise CaptureError(f"{graph.name}: the captured graph is not in call order; cannot group it by module")
    unit_of = [_unit_of(module_paths.get(fx_name, ""), units) for fx_name in names]
    if all(u is None for u in unit_of):
        raise CaptureError(f"{graph.name}: no operation runs inside a module at granularity {label!r}; use granularity 'op'")
    run = np.empty(graph.n_nodes, dtype=np.int64)
    run_unit: list[str] = []
    glue_before: list[int] = []
    pending = 0  # glue seen since the last unit call, waiting for the next one
    for v, unit in enumerate(unit_of):
        if unit is None:
            pending += 1
            continue
        if not run_unit or unit != run_unit[-1] or pending:
            run_unit.append(unit)
            glue_before.append(0)
        glue_before[-1] += pending
        run[v - pending : v + 1] = len(run_unit) - 1
        pending = 0
    loss_input = 0
    if pending:  # glue after the last unit call joins it
        run[graph.n_nodes - pending :] = len(run_unit) - 1
        loss_input = _bytes_into_glue(graph, graph.n_nodes - pending, run, len(run_unit) - 1)
    grouped = quotient(graph, run, label=label)

    # quotient numbers groups by its own topological order; put them back in call order.
    order = [0] * len(run_unit)
    for i, group in enumerate(grouped.members):
        order[int(run[graph.index(group[0])])] = i
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))

    calls: Counter[str] = Counter()
    node_names: list[str] = []
    for unit in run_unit:
        calls[unit] += 1
        node_names.append(unit if calls[unit] == 1 else f"{unit}#{calls[unit]}")
    modules = dict(zip(node_names, run_unit))

    src = position[grouped.src].tolist()
    dst = position[grouped.dst].tolist()
    edge_bytes = grouped.edge_bytes.tolist()
    present = set(zip(src, dst))
    chained = [(r, r + 1) for r in range(len(order) - 1) if (r, r + 1) not in present]
    src += [a for a, _ in chained]
    dst += [b for _, b in chained]
    edge_bytes += [0] * len(chained)

    containers = sorted(
        path
        for path, module in model.named_modules(remove_duplicate=False)
        if path and _is_indexed(module) and any(u.startswith(path + ".") for u in units)
    )
    meta = dict(grouped.meta)
    if meta.get("outputs") is not None:
        meta["outputs"] = sorted(node_names[position[grouped.index(nm)]] for nm in meta["outputs"])
    meta.update(
        granularity=label,
        modules=modules,
        module_classes={nm: units[path] for nm, path in modules.items()},
        glue_before={nm: n for nm, n in zip(node_names, glue_before) if n},
        containers=containers,
        call_order_edges=len(chained),
    )
    if loss_input:
        meta["loss_input_bytes"] = {node_names[-1]: loss_input}  # read by training mode's kept output
    return CompGraph(
        node_names,
        np.asarray(src, dtype=np.int64),
        np.asarray(dst, dtype=np.int64),
        op=[module_kind(units[path]) for path in run_unit],
        flops=grouped.flops[order],
        param_bytes=grouped.param_bytes[order],
        out_bytes=grouped.out_bytes[order],
        edge_bytes=np.asarray(edge_bytes, dtype=np.int64),
        compute_time={kind: t[order] for kind, t in grouped.compute_time.items()},
        backward_time={kind: t[order] for kind, t in grouped.backward_time.items()},
        saved_bytes=None if grouped.saved_bytes is None else grouped.saved_bytes[order],
        work_bytes=None if grouped.work_bytes is None else grouped.work_bytes[order],
        largest_weight_bytes=None if grouped.largest_weight_bytes is None else grouped.largest_weight_bytes[order],
        members=[grouped.members[i] for i in order],
        shared_weights=[{"name": w.name, "bytes": w.nbytes, "read_by": [int(position[v]) for v in w.readers]} for w in grouped.shared_weights],
        name=graph.name,
        meta=meta,
    )
