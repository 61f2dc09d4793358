"""Partitioning: cut a captured model into parts that run where a `Result` placed them.

The step between `solve()` and execution. Every fx node of the captured graph module gets the label
of the graph node that holds it (``Capture.node_of``); ``torch.fx.passes.split_module`` cuts the module
along those labels, and each part then owns the weights it reads, so moving a part moves its weights.
A stage assignment labels nodes by stage (``s_u <= s_v`` keeps the parts acyclic). A placement is cut
into *segments*: runs of consecutive nodes in one device's order that receive only at their first node
and send only from their last, so a segment starts exactly when its first node could and a consumer on
another device waits for nothing its schedule did not.
"""

from __future__ import annotations

import inspect
import logging
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.fx
from torch.fx.passes.split_module import split_module

from ..errors import ExecutionError
from ..capture import Capture
from ..evaluate.simulate import simulate
from ..problems import Placement, PlacementError, PlacementProblem

log = logging.getLogger(__name__)

__all__ = ["ExecutionError", "Part", "Program", "Ref", "partition_program", "stage_program", "placement_program", "segments"]


@dataclass(frozen=True)
class Ref:
    """Where a value comes from: program input ``index`` (``part`` is None) or output ``index`` of ``part``."""

    part: int | None
    index: int


@dataclass(frozen=True)
class Part:
    """One piece of the split model.

    Attributes
    ----------
    name : str
        The submodule's name in the split module (``"submod_3"``).
    module : torch.fx.GraphModule
        The piece itself; holds (as buffers) every weight its nodes read. Returns a tuple.
    label : int
        The stage or segment it was cut along.
    worker : int
        The stage or device that runs it.
    nodes : tuple of str
        The graph nodes it runs, in the module's order.
    inputs : tuple of Ref
        Where each positional argument comes from.
    """

    name: str
    module: torch.fx.GraphModule
    label: int
    worker: int
    nodes: tuple[str, ...]
    inputs: tuple[Ref, ...]


@dataclass(frozen=True)
class Program:
    """A partitioned model: parts in a topological order and where the outputs come from.

    Attributes
    ----------
    parts : tuple of Part
        Topologically ordered: every input of a part comes from a program input or an earlier part.
    outputs : tuple of Ref
        The flat output values of the unsplit module, in order.
    n_inputs : int
        Number of flat program inputs (the captured module's placeholders).
    n_workers : int
        Stages or devices.
    kind : {"stage", "placement"}
    """

    parts: tuple[Part, ...]
    outputs: tuple[Ref, ...]
    n_inputs: int
    n_workers: int
    kind: str

    def parts_of(self, worker: int) -> list[int]:
        """Indices of the parts a worker runs, in program (topological) order."""
        return [i for i, p in enumerate(self.parts) if p.worker == worker]

    def consumers(self) -> list[list[int]]:
        """For each part, the parts that read one of its outputs."""
        out: list[set[int]] = [set() for _ in self.parts]
        for i, part in enumerate(self.parts):
            for ref in part.inputs:
                if ref.part is not None:
                    out[ref.part].add(i)
        return [sorted(s) for s in out]


def partition_program(capture: Capture, label: Sequence[int], worker_of_label: Sequence[int], kind: str) -> Program:
    """Split ``capture.graph_module`` so that the fx nodes of graph node ``v`` land in part ``label[v]``.

    Parameters
    ----------
    capture : Capture
        The captured model (graph, graph module, node_of map).
    label : sequence of int [n]
        Part label per graph node; the quotient of the graph by labels must be acyclic.
    worker_of_label : sequence of int
        The stage or device each label runs on.
    kind : {"stage", "placement"}

    Returns
    -------
    Program

    Raises
    ------
    ExecutionError
        If the labels do not cover the graph, or an fx node belongs to no graph node.
    """
    graph = capture.graph
    label = np.asarray(label, dtype=np.int64).reshape(-1)
    if label.shape != (graph.n_nodes,):
        raise ExecutionError(f"{graph.name}: {label.size} labels for {graph.n_nodes} graph nodes")
    index = {nm: v for v, nm in enumerate(graph.names)}
    fx_label: dict[str, int] = {}
    for fx_node in capture.graph_module.graph.nodes:
        if fx_node.op in ("output",):
            continue
        owner = capture.node_of.get(fx_node.name)
        if owner is None or owner not in index:
            raise ExecutionError(f"{graph.name}: fx node {fx_node.name!r} belongs to no graph node; was the graph coarsened after capture?")
        fx_label[fx_node.name] = int(label[index[owner]])

    split = _split(capture.graph_module, lambda n: fx_label[n.name])
    _move_weights_into_parts(split)
    return _program(split, capture, fx_label, list(worker_of_label), kind)


def _split(gm: torch.fx.GraphModule, label_of) -> torch.fx.GraphModule:
    """``split_module`` with every part returning a tuple (older torch lacks ``tuple_return``)."""
    if "tuple_return" in inspect.signature(split_module).parameters:
        return split_module(gm, gm, label_of, keep_original_node_name=True, tuple_return=True)
    split = split_module(gm, gm, label_of, keep_original_node_name=True)
    for call in [n for n in split.graph.nodes if n.op == "call_module"]:
        sub = split.get_submodule(str(call.target))
        out = next(n for n in sub.graph.nodes if n.op == "output")
        if isinstance(out.args[0], (tuple, list)):
            continue
        out.args = ((out.args[0],),)
        sub.recompile()
        with split.graph.inserting_after(call):
            first = split.graph.call_function(operator.getitem, (call, 0))
        call.replace_all_uses_with(first, delete_user_cb=lambda user: user is not first)
    split.recompile()
    return split


def _move_weights_into_parts(split: torch.fx.GraphModule) -> None:
    """Turn weight arguments of each part into the part's own buffers.

    ``split_module`` reads weights at the top level and passes them in as arguments; a part could then
    not be moved to its device with its weights. A weight read by parts on two devices gets a copy on
    each (buffers are replaced, not moved in place, by ``Module.to``).
    """
    top = split.graph
    for call in list(top.nodes):
        if call.op != "call_module":
            continue
        sub: torch.fx.GraphModule = split.get_submodule(str(call.target))
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(call.args):
            raise ExecutionError(f"{call.target}: {len(call.args)} arguments for {len(placeholders)} inputs")
        kept = []
        anchor = placeholders[-1] if placeholders else None
        for arg, ph in zip(call.args, placeholders):
            if not (isinstance(arg, torch.fx.Node) and arg.op == "get_attr"):
                kept.append(arg)
                continue
            value = _fetch_attr(split, str(arg.target))
            attr = "w_" + str(arg.target).replace(".", "_")
            if isinstance(value, torch.Tensor):
                sub.register_buffer(attr, value.detach(), persistent=False)
            else:
                setattr(sub, attr, value)
            with sub.graph.inserting_after(anchor):
                fetched = sub.graph.get_attr(attr)
            fetched.meta = dict(ph.meta)
            ph.replace_all_uses_with(fetched)
            sub.graph.erase_node(ph)
        call.args = tuple(kept)
        sub.recompile()
    for node in list(top.nodes):
        if node.op == "get_attr" and not node.users:
            top.erase_node(node)
    split.recompile()


def _fetch_attr(module: torch.nn.Module, target: str) -> Any:
    value: Any = module
    for atom in target.split("."):
        value = getattr(value, atom)
    return value


def _program(split: torch.fx.GraphModule, capture: Capture, fx_label: dict[str, int], worker_of_label, kind) -> Program:
    env: dict[str, Ref] = {}
    parts: list[Part] = []
    outputs: tuple[Ref, ...] = ()
    n_inputs = 0
    for node in split.graph.nodes:
        if node.op == "placeholder":
            env[node.name] = Ref(None, n_inputs)
            n_inputs += 1
        elif node.op == "call_module":
            sub = split.get_submodule(str(node.target))
            inner = [n.name for n in sub.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]
            labels = {fx_label[nm] for nm in inner if nm in fx_label}
            if len(labels) != 1:
                raise ExecutionError(f"{node.target}: expected the nodes of one label, found {sorted(labels)}")
            lab = labels.pop()
            if not 0 <= lab < len(worker_of_label):
                raise ExecutionError(f"{node.target}: label {lab} has no stage or device")
            owners = list(dict.fromkeys(capture.node_of[nm] for nm in inner))
            inputs = tuple(_ref(env, a, node) for a in node.args)
            parts.append(Part(str(node.target), sub, lab, int(worker_of_label[lab]), tuple(owners), inputs))
            env[node.name] = Ref(len(parts) - 1, -1)  # the tuple itself; getitem picks an element
        elif node.op == "call_function" and node.target is operator.getitem:
            src = env.get(getattr(node.args[0], "name", None))
            if src is None or src.part is None or src.index >= 0:
                raise ExecutionError(f"{node.name}: indexes something other than a part's output tuple")
            env[node.name] = Ref(src.part, int(node.args[1]))
        elif node.op == "output":
            outputs = tuple(_ref(env, a, node) for a in torch.utils._pytree.tree_leaves(node.args[0]))
        else:
            raise ExecutionError(f"unexpected node {node.name!r} ({node.op} {node.target}) between parts")
    n_workers = max(worker_of_label) + 1 if len(worker_of_label) else 0
    return Program(tuple(parts), outputs, n_inputs, int(n_workers), kind)


def _ref(env: dict[str, Ref], arg: Any, user: torch.fx.Node) -> Ref:
    if not isinstance(arg, torch.fx.Node) or arg.name not in env:
        raise ExecutionError(f"{user.name}: argument {arg!r} is not a program input or a part's output")
    ref = env[arg.name]
    if ref.part is not None and ref.index < 0:
        raise ExecutionError(f"{user.name}: reads a whole part's output tuple; expected one element")
    return ref


def stage_program(capture: Capture, stages: Sequence[int], n_stages: int | None = None) -> Program:
    """Partition by stage: part k holds every node of stage k (empty stages have no part).

    Raises
    ------
    ExecutionError
        If an edge goes from a later stage to an earlier one.
    """
    stages = np.asarray(stages, dtype=np.int64).reshape(-1)
    g = capture.graph
    if stages.shape != (g.n_nodes,):
        raise ExecutionError(f"{g.name}: {stages.size} stages for {g.n_nodes} graph nodes")
    back = np.flatnonzero(stages[g.src] > stages[g.dst])
    if back.size:
        e = int(back[0])
        u, v = int(g.src[e]), int(g.dst[e])
        raise ExecutionError(f"edge {g.names[u]} -> {g.names[v]} goes from stage {stages[u]} back to stage {stages[v]}")
    K = int(n_stages if n_stages is not None else stages.max() + 1)
    return partition_program(capture, stages, list(range(K)), "stage")


def segments(graph, placement: Placement) -> tuple[np.ndarray, list[int]]:
    """Cut each device's order into segments that receive only first and send only last.

    Returns
    -------
    (label, device_of_label)
        Segment per node, and the device of each segment. Segments are numbered along each device's
        order, so a device runs its segments in increasing label order.
    """
    device = placement.device
    label = np.full(graph.n_nodes, -1, dtype=np.int64)
    device_of: list[int] = []
    for d, seq in enumerate(placement.order):
        prev = None
        for v in seq:
            receives = any(device[u] != d for u in graph.predecessors(v))
            sent = prev is not None and any(device[w] != d for w in graph.successors(prev))
            if prev is None or receives or sent:
                device_of.append(d)
            label[v] = len(device_of) - 1
            prev = v
    return label, device_of


def placement_program(capture: Capture, placement: Placement) -> tuple[Program, list[list[int]]]:
    """Partition by placement segments.

    Returns
    -------
    (Program, order)
        The program and, per device, its parts in the solved order.

    Raises
    ------
    ExecutionError
        If the per-device orders contradict the graph's precedence (the segments would form a cycle).
    """
    _check_orders(capture.graph, placement)
    label, device_of = segments(capture.graph, placement)
    try:
        program = partition_program(capture, label, device_of, "placement")
    except (RuntimeError, ValueError) as err:  # split_module rejects a cyclic partition order
        if isinstance(err, ExecutionError):
            raise
        raise ExecutionError(f"{capture.graph.name}: the device orders cannot run (cyclic segments): {err}") from err
    part_of_label = {p.label: i for i, p in enumerate(program.parts)}
    order = [[part_of_label[lab] for lab in range(len(device_of)) if device_of[lab] == d and lab in part_of_label] for d in range(placement.n_devices)]
    return program, order


def _check_orders(graph, placement: Placement) -> None:
    """The simulator names the node a deadlocking order waits on; costs do not matter for that."""
    if placement.device.shape != (graph.n_nodes,):
        raise ExecutionError(f"{graph.name}: the placement places {placement.device.size} nodes, the graph has {graph.n_nodes}")
    try:
        simulate(PlacementProblem.identical(graph, placement.n_devices), placement, "ordered")
    except PlacementError as err:
        raise ExecutionError(f"{graph.name}: the placement cannot run in its device orders: {err}") from err
