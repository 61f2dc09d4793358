"""Tracing: turn a PyTorch module into a torch.fx graph of operations, the first step of capture.

``torch.export`` (default) gives an ATen-level graph and copes with data-dependent Python such as
transformers' models; ``torch.fx.symbolic_trace`` keeps ``nn.Module`` calls as single nodes. Both
end as a `torch.fx.GraphModule` whose node names become the ``members`` of the captured graph.
"""

from __future__ import annotations

import logging
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from ..errors import CaptureError

log = logging.getLogger(__name__)

__all__ = ["Traced", "trace", "op_kind", "module_kind", "module_path", "mutated_args"]

METHODS = ("export", "fx")


@dataclass(frozen=True)
class Traced:
    """A traced model: the graph module and the flat tensors its placeholders receive, in order."""

    graph_module: torch.fx.GraphModule
    flat_inputs: tuple[Any, ...]
    method: str


def trace(
    model: torch.nn.Module, example_inputs: Sequence[Any], *, method: str = "export", name: str = "model"
) -> Traced:
    """Trace ``model`` called on ``example_inputs`` into a `torch.fx.GraphModule`.

    Parameters
    ----------
    model : torch.nn.Module
        The model, normally in eval mode.
    example_inputs : sequence
        Positional arguments of one forward call (tensors, or nested tuples/lists of them).
    method : {"export", "fx"}
        ``torch.export.export`` (strict=False) or ``torch.fx.symbolic_trace``.
    name : str
        The model's name, for error messages.

    Returns
    -------
    Traced

    Raises
    ------
    CaptureError
        If ``method`` is unknown or tracing fails; the message names the model, the method and
        the underlying error.
    """
    if method not in METHODS:
        raise CaptureError(f"{name}: unknown capture method {method!r} (expected one of {', '.join(METHODS)})")
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"{name}: expected a torch.nn.Module, got {type(model).__name__}")
    args = tuple(example_inputs)
    try:
        if method == "export":
            exported = torch.export.export(model, args, strict=False)
            gm = exported.module()
        else:
            gm = torch.fx.symbolic_trace(model)
    except Exception as err:  # tracing fails in many library-specific ways; all mean "cannot capture"
        raise CaptureError(f"{name}: tracing with {method} failed: {type(err).__name__}: {_first_line(err)}") from err
    flat_inputs = tuple(torch.utils._pytree.tree_leaves(args))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(flat_inputs):
        raise CaptureError(
            f"{name}: traced graph has {len(placeholders)} inputs but the example inputs flatten to "
            f"{len(flat_inputs)} values; pass tensors only (constants become part of the trace)"
        )
    log.debug("%s: traced with %s, %d fx nodes", name, method, len(gm.graph.nodes))
    return Traced(gm, flat_inputs, method)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else "(no message)"


# ---------------------------------------------------------------------- reading fx nodes

#: Module classes whose snake-cased names would be unhelpful or inconsistent with ATen op names.
_MODULE_OPS = {
    "Conv1d": "conv1d", "Conv2d": "conv2d", "Conv3d": "conv3d",
    "ConvTranspose1d": "conv_transpose1d", "ConvTranspose2d": "conv_transpose2d",
    "Linear": "linear", "BatchNorm1d": "batch_norm", "BatchNorm2d": "batch_norm",
    "BatchNorm3d": "batch_norm", "LayerNorm": "layer_norm", "GroupNorm": "group_norm",
    "ReLU": "relu", "ReLU6": "hardtanh", "GELU": "gelu", "SiLU": "silu", "Hardswish": "hardswish",
    "Hardsigmoid": "hardsigmoid", "Sigmoid": "sigmoid", "Tanh": "tanh", "Softmax": "softmax",
    "Embedding": "embedding", "Identity": "identity", "Flatten": "flatten",
    "Dropout": "dropout", "MultiheadAttention": "multihead_attention",
}

_OPERATOR_NAMES = {
    operator.add: "add", operator.iadd: "add", operator.mul: "mul", operator.imul: "mul",
    operator.sub: "sub", operator.isub: "sub", operator.truediv: "div", operator.itruediv: "div",
    operator.matmul: "matmul", operator.getitem: "getitem", operator.neg: "neg", getattr: "getattr",
}


def op_kind(node: torch.fx.Node, graph_module: torch.fx.GraphModule) -> str:
    """A short, readable op kind for an fx node: ``"conv2d"``, ``"relu"``, ``"getitem"``, ``"input"``.

    In-place variants share their functional name (``relu_`` -> ``relu``); dropout that is active
    (training mode) is ``"dropout_train"`` so that it is not mistaken for a free op.
    """
    if node.op == "placeholder":
        return "input"
    if node.op == "get_attr":
        return "parameter"
    if node.op == "call_module":
        if node.target == "_guards_fn":
            return "guard"
        mod = graph_module.get_submodule(str(node.target))
        kind = module_kind(type(mod).__name__)
        if kind == "dropout" and mod.training:
            return "dropout_train"
        return kind
    if node.op == "call_method":
        return _clean(str(node.target))
    if node.op == "call_function":
        target = node.target
        if target in _OPERATOR_NAMES:
            return _OPERATOR_NAMES[target]
        if isinstance(target, torch._ops.OpOverload):
            kind = _clean(target._overloadpacket.__name__)
            if kind == "dropout" and _dropout_active(node):
                return "dropout_train"
            return kind
        return _clean(getattr(target, "__name__", str(target)))
    return node.op


def module_kind(class_name: str) -> str:
    """The op kind of a module class: ``"Conv2d"`` -> ``"conv2d"``, ``"LlamaDecoderLayer"`` -> ``"llama_decoder_layer"``."""
    return _MODULE_OPS.get(class_name) or _snake(class_name)


def _dropout_active(node: torch.fx.Node) -> bool:
    train = node.kwargs.get("train", node.args[2] if len(node.args) > 2 else False)
    return bool(train)


def _clean(name: str) -> str:
    # "relu_" -> "relu", "_to_copy" -> "to_copy", "__getitem__" -> "getitem"
    name = name.strip("_")
    return name.lower() or "op"


def _snake(cls_name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls_name).lower()


def module_path(node: torch.fx.Node) -> str:
    """The dotted path of the innermost ``nn.Module`` the node ran in (``""`` at top level)."""
    if node.op == "call_module":
        return str(node.target) if node.target != "_guards_fn" else ""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return str(path).split("@")[0]


def mutated_args(node: torch.fx.Node, graph_module: torch.fx.GraphModule) -> list[int]:
    """Positions of the node's positional arguments that its op writes in place (for timing on copies)."""
    target = node.target
    if node.op == "call_function" and isinstance(target, torch._ops.OpOverload):
        return [
            i
            for i, arg in enumerate(target._schema.arguments[: len(node.args)])
            if arg.alias_info is not None and arg.alias_info.is_write
        ]
    if node.op == "call_function" and target in (operator.iadd, operator.isub, operator.imul, operator.itruediv):
        return [0]
    if node.op == "call_function" and getattr(target, "__name__", "").endswith("_"):
        return [0]
    if node.op == "call_method" and str(target).endswith("_") and not str(target).startswith("_"):
        return [0]
    if node.op == "call_module" and node.target != "_guards_fn":
        if getattr(graph_module.get_submodule(str(target)), "inplace", False):
            return [0]
    return []
