"""Assembly: build the fine-grained `CompGraph` of a traced, profiled model.

Third step of capture, after `trace` and `profile_nodes`: one graph node per fx placeholder
("input") and per call node; parameter reads (get_attr) are folded into the node that consumes
them, so a node's ``param_bytes`` is the weight it needs on its device, and a weight several nodes
read is one of the graph's ``shared_weights``; the output node is dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx

from ..graph import CompGraph
from .profile import NodeProfile
from .trace import module_path, op_kind

log = logging.getLogger(__name__)

__all__ = ["Assembled", "ParamRecord", "assemble", "describe_params"]

_CALLS = ("call_function", "call_method", "call_module")


@dataclass
class ParamRecord:
    """One distinct weight tensor: its names in the model, size, and the graph nodes that read it."""

    names: list[str]
    nbytes: int
    holder: str  # fx node charged with its bytes
    used_by: list[str] = field(default_factory=list)  # every fx node that reads it
    unused: bool = False  # read by no node; charged to the node that reads its module's other weights


@dataclass
class Assembled:
    """The fine graph plus what capture needs to map it back onto the fx graph."""

    graph: CompGraph
    module_paths: dict[str, str]  # fx node name -> module path, for every graph node
    attr_owner: dict[str, str]  # get_attr node name -> fx node (graph node) that consumes it first
    params: list[ParamRecord]
    constant_bytes: int  # bytes of tensors the tracer lifted that are neither parameters nor buffers


def assemble(gm: torch.fx.GraphModule, profile: NodeProfile, *, name: str = "model") -> Assembled:
    """Build one `CompGraph` node per placeholder and call node of ``gm``.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        The traced model, as profiled.
    profile : NodeProfile
        `profile_nodes`' measurements of ``gm``.
    name : str
        The graph's name.

    Returns
    -------
    Assembled
    """
    nodes = [n for n in gm.graph.nodes if n.op == "placeholder" or n.op in _CALLS]
    names = [n.name for n in nodes]
    position = {nm: i for i, nm in enumerate(names)}
    params, attr_owner = _attribute_params(gm, nodes, profile)
    # A weight read by one node is that node's; one read by several (tied embeddings) is shared:
    # it costs its bytes on every stage or device that holds a reader.
    param_bytes = np.zeros(len(nodes), dtype=np.int64)
    shared = []
    for rec in params:
        readers = [r for r in rec.used_by if r in position]
        if len(readers) > 1:
            shared.append({"name": rec.names[0], "bytes": rec.nbytes, "read_by": readers})
        else:
            param_bytes[position[rec.holder]] += rec.nbytes

    out_bytes = np.asarray([profile.out_bytes.get(nm, 0) for nm in names], dtype=np.int64)
    src, dst, edge_bytes = [], [], []
    for v, node in enumerate(nodes):
        for u_node in node.all_input_nodes:
            u = position.get(u_node.name)
            if u is None:  # a get_attr, already folded into this node's parameters
                continue
            src.append(u)
            dst.append(v)
            # A getitem reads one element of its producer's tuple, not the whole tuple.
            edge_bytes.append(int(out_bytes[v]) if op_kind(node, gm) == "getitem" else int(out_bytes[u]))

    compute_time = {}
    if profile.seconds:
        compute_time[profile.device_kind] = [profile.seconds.get(nm, 0.0) for nm in names]
    backward_time = {}
    if profile.backward_seconds:
        backward_time[profile.device_kind] = [profile.backward_seconds.get(nm, 0.0) for nm in names]
    output = next(n for n in gm.graph.nodes if n.op == "output")
    outputs = sorted({n.name for n in output.all_input_nodes if n.name in position})
    state_names = {fqn for fqn, _ in gm.named_parameters(remove_duplicate=False)}
    state_names.update(fqn for fqn, _ in gm.named_buffers(remove_duplicate=False))
    constant_bytes = sum(r.nbytes for r in params if not state_names.intersection(r.names))
    graph = CompGraph(
        names,
        np.asarray(src, dtype=np.int64),
        np.asarray(dst, dtype=np.int64),
        op=[op_kind(n, gm) for n in nodes],
        flops=[profile.flops.get(nm, 0.0) for nm in names],
        param_bytes=param_bytes,
        out_bytes=out_bytes,
        edge_bytes=np.asarray(edge_bytes, dtype=np.int64),
        compute_time=compute_time,
        backward_time=backward_time,
        members=[[nm] for nm in names],
        shared_weights=shared,
        name=name,
        meta={"outputs": outputs},
    )
    return Assembled(
        graph=graph,
        module_paths={n.name: module_path(n) for n in nodes},
        attr_owner=attr_owner,
        params=params,
        constant_bytes=constant_bytes,
    )


def _tensor_key(t: torch.Tensor) -> tuple:
    # Two names for one weight (tied embeddings) are distinct Parameter objects at worst but share
    # storage, offset, shape and strides; that is what must be counted once.
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype, t.device)


def _attribute_params(
    gm: torch.fx.GraphModule, nodes: list[torch.fx.Node], profile: NodeProfile
) -> tuple[list[ParamRecord], dict[str, str]]:
    """Charge every distinct weight tensor to the first graph node (in fx order) that reads it."""
    records: dict[tuple, ParamRecord] = {}
    attr_owner: dict[str, str] = {}

    def read(key: tuple, fqn: str, t: torch.Tensor, reader: str) -> None:
        rec = records.get(key)
        if rec is None:
            rec = records[key] = ParamRecord(names=[fqn], nbytes=t.numel() * t.element_size(), holder=reader)
        elif fqn not in rec.names:
            rec.names.append(fqn)
        if reader not in rec.used_by:
            rec.used_by.append(reader)

    for node in nodes:
        if node.op == "call_module" and node.target != "_guards_fn":
            mod = gm.get_submodule(str(node.target))
            state = list(mod.named_parameters(remove_duplicate=False)) + list(mod.named_buffers(remove_duplicate=False))
            for local, t in state:
                read(_tensor_key(t), f"{node.target}.{local}", t, node.name)
        for u in node.all_input_nodes:
            if u.op != "get_attr":
                continue
            value = profile.values.get(u.name)
            if isinstance(value, torch.Tensor):
                read(_tensor_key(value), str(u.target), value, node.name)
                attr_owner.setdefault(u.name, node.name)

    # Weights no node reads (BatchNorm's num_batches_tracked under torch.export, unused layers)
    # still occupy the device their module lives on: charge them to the node that reads the
    # weight with the longest common module path.
    by_name = {fqn: rec for rec in records.values() for fqn in rec.names}
    state = list(gm.named_parameters(remove_duplicate=False)) + list(gm.named_buffers(remove_duplicate=False))
    fallback = next((n.name for n in nodes if n.op in _CALLS), nodes[0].name if nodes else None)
    for fqn, t in state:
        key = _tensor_key(t)
        if key in records:
            if fqn not in records[key].names:
                records[key].names.append(fqn)
            continue
        holder = _nearest_holder(fqn, by_name) or fallback
        if holder is None:
            continue
        records[key] = rec = ParamRecord(names=[fqn], nbytes=t.numel() * t.element_size(), holder=holder, unused=True)
        by_name[fqn] = rec
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.name not in attr_owner:
            value = profile.values.get(node.name)
            if isinstance(value, torch.Tensor) and _tensor_key(value) in records:
                attr_owner[node.name] = records[_tensor_key(value)].holder
    return list(records.values()), attr_owner


def _nearest_holder(fqn: str, by_name: dict[str, ParamRecord]) -> str | None:
    parts = fqn.split(".")
    best, best_len = None, 0
    for other, rec in by_name.items():
        if rec.unused:
            continue
        common = 0
        for a, b in zip(parts, other.split(".")):
            if a != b:
                break
            common += 1
        if common > best_len:
            best, best_len = rec.holder, common
    return best


def describe_params(params: list[ParamRecord], node_of: dict[str, str]) -> dict[str, Any]:
    """JSON-ready notes on weights that are shared (several names or several reading nodes)."""
    shared = []
    for rec in params:
        readers = sorted({node_of.get(r, r) for r in rec.used_by})
        if len(rec.names) > 1 or len(readers) > 1:
            holder = node_of.get(rec.holder, rec.holder)
            shared.append({"params": sorted(rec.names), "bytes": rec.nbytes, "held_by": holder, "read_by": readers})
    unused = sorted(fqn for rec in params if rec.unused for fqn in rec.names)
    return {"shared_params": shared, "unread_params": unused}
