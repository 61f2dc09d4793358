"""Capture: the first arrow of the pipeline, from a real ``torch.nn.Module`` to a `CompGraph`.

trace (torch.export or torch.fx) -> profile every fx node (FLOPs, output bytes, measured time)
-> assemble one graph node per operation (weights folded into their consumers) -> coarsen, or
group by module (``granularity="layer"``: nodes that are the model's modules, in call order).
`Capture` keeps the fx graph module beside the graph so a placement can later be executed.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from ..graph.coarsen import coarsen as apply_coarsening, parse_coarsening
from ..errors import CaptureError
from ..graph import CompGraph
from .assemble import assemble, describe_params
from .granularity import group_by_units, parse_granularity, unit_modules
from .models import known_fix
from .profile import profile_nodes
from .saved import training_bytes
from .trace import trace

log = logging.getLogger(__name__)

__all__ = ["Capture", "capture", "from_module"]


@dataclass(frozen=True)
class Capture:
    """A captured model: its graph and what is needed to run a placement of it.

    Attributes
    ----------
    graph : CompGraph
        The (coarsened) computation graph; ``graph.members[v]`` are fx node names of
        ``graph_module``.
    graph_module : torch.fx.GraphModule
        The traced model the members refer to (on the capture device).
    example_inputs : tuple
        The flat values fed to ``graph_module``'s placeholders, in order.
    module_paths : dict of str to str
        Module path (``"layer1.0.conv1"``) of every fx placeholder and call node.
    node_of : dict of str to str
        The graph node that holds each fx node: every member, and every get_attr node (the node
        charged with its weight).
    method : str
        ``"export"`` or ``"fx"``.
    """

    graph: CompGraph
    graph_module: torch.fx.GraphModule
    example_inputs: tuple[Any, ...]
    module_paths: dict[str, str] = field(default_factory=dict)
    node_of: dict[str, str] = field(default_factory=dict)
    method: str = "export"

    def scopes(self) -> list[str]:
        """Module path per graph node (that of the member it is named after), for `group_by_module`."""
        return [self.module_paths.get(nm, "") for nm in self.graph.names]


def capture(
    model: torch.nn.Module,
    example_inputs: Sequence[Any],
    *,
    method: str = "export",
    coarsen: str = "trivial",
    granularity: str = "op",
    measure: bool = False,
    device: str | torch.device = "cpu",
    repeats: int = 5,
    warmup: int = 2,
    name: str | None = None,
    training: bool = False,
) -> Capture:
    """Capture ``model`` called on ``example_inputs`` as a computation graph.

    Per node: ``flops`` from ``FlopCounterMode``; ``out_bytes`` from the real output tensors;
    ``param_bytes`` from the parameters and buffers only it reads (a weight read by several nodes,
    such as a tied embedding, is one of the graph's ``shared_weights``, also described in
    ``meta["shared_params"]``; weights no node reads are
    charged to the reader of their module's other weights and listed in ``meta["unread_params"]``);
    with ``measure``, ``compute_time[device kind]`` is the median of ``repeats`` timed runs.
    ``meta["costs"]`` says so (`CompGraph.time_source`, `CompGraph.byte_source`); without
    ``measure``, node times are estimated by a roofline when a problem reads them. With
    ``training``, ``saved_bytes`` are the activations autograd saves for each node's backward
    (`incsched.capture.saved`), what a pipeline schedule stashes per micro-batch, and with
    ``measure`` too, ``backward_time[device kind]`` the median of each node's backward pass.

    Parameters
    ----------
    model : torch.nn.Module
        The model; put it in eval mode first (dropout and batch-norm updates are otherwise traced).
    example_inputs : sequence
        Positional arguments of one forward call.
    method : {"export", "fx"}
        ``torch.export.export`` (ATen ops, works for transformers) or ``torch.fx.symbolic_trace``.
    coarsen : str
        ``"none"``, ``"trivial"`` (fold views and other free ops), ``"chains"`` or
        ``"module:<depth>"``; see `incsched.graph.coarsen`. Op granularity only.
    granularity : {"op", "layer", "module:<depth>"}
        ``"op"``: one node per operation (then ``coarsen``). ``"layer"``: one node per call of a
        layer module (the elements of the model's stacks of repeated blocks, and the modules beside
        them: ``model.embed_tokens``, ``model.layers.0`` ... ``lm_head``), named by module path; code
        outside every layer joins the layer called next, and zero-byte edges follow the call order,
        so that every stage result maps onto split points (`incsched.export`).
        ``"module:<depth>"``: the same with the modules ``depth`` levels down. See
        `incsched.capture.granularity`.
    measure : bool
        Time every node on ``device``. On CUDA each node is synchronised, which inflates times at
        small batch sizes (launch-bound); treat them as upper bounds.
    device : str or torch.device
        Where profiling runs; the traced graph module is moved there.
    repeats, warmup : int
        Timed runs per node (median taken) and untimed warm-up runs.
    name : str, optional
        Model name for the graph and errors; default the model's class name.
    training : bool
        For training mode: run the graph once more with gradients on, and backward, and record
        ``saved_bytes`` (holding one batch's saved activations), ``work_bytes`` (each node's
        working set beyond them) and ``largest_weight_bytes`` (`incsched.capture.saved`); with ``measure``, also time each op's backward
        pass through autograd on its recorded inputs (`incsched.capture.profile`; a layer node sums
        its ops'). Without it, training mode estimates activations from ``out_bytes`` and backward
        as twice the forward, and says so.

    Returns
    -------
    Capture

    Raises
    ------
    CaptureError
        If the model cannot be traced or run, naming the model and the cause; for an unknown
        ``granularity``, or a ``coarsen`` other than "trivial" or "none" with module granularity.
    GraphError
        For an unknown ``coarsen`` value.
    """
    name = name or type(model).__name__
    parse_coarsening(coarsen)  # reject bad names before the expensive part
    grouping, _ = parse_granularity(granularity)
    if grouping != "op" and coarsen not in ("trivial", "none"):
        raise CaptureError(f"{name}: coarsen={coarsen!r} applies to granularity 'op' only; a module's node already holds its operations")
    start = time.perf_counter()
    if isinstance(model, torch.nn.Module) and model.training and not isinstance(model, torch.fx.GraphModule):
        # An exported program's module reports training but its graph is fixed: no warning for it.
        log.warning("%s: the model is in training mode (dropout active, batch-norm statistics updated); "
                    "call model.eval() before capture unless training is what is to be scheduled", name)
    try:
        traced = trace(model, example_inputs, method=method, name=name)
    except CaptureError as err:  # a failure seen before: say how to avoid it
        fix = known_fix(err.__cause__ or err)
        if fix is None:
            raise
        raise CaptureError(f"{name}: {fix}") from err
    try:
        profile = profile_nodes(
            traced.graph_module, traced.flat_inputs, measure=measure, device=device, repeats=repeats, warmup=warmup,
            backward=training,
        )
    except Exception as err:  # the traced graph failed to run: report it as a capture failure
        raise CaptureError(f"{name}: running the traced graph failed: {type(err).__name__}: {err}") from err
    asm = assemble(traced.graph_module, profile, name=name)
    if training:
        try:
            held = training_bytes(traced.graph_module, traced.flat_inputs)
        except Exception as err:  # a graph that runs without gradients may still fail with them
            raise CaptureError(f"{name}: running the traced graph with gradients failed: {type(err).__name__}: {err}") from err
        asm.graph = asm.graph.replace(**{column: [held[key].get(nm, 0) for nm in asm.graph.names] for column, key in
                                         (("saved_bytes", "saved"), ("work_bytes", "work"), ("largest_weight_bytes", "largest_weight"))})
    if grouping == "op":
        graph = apply_coarsening(asm.graph, coarsen, scopes=[asm.module_paths[nm] for nm in asm.graph.names])
        # a node is named after one of its fx nodes: its module, so an export can name where a cut falls
        module_of = {nm: asm.module_paths[nm] for nm in graph.names if asm.module_paths.get(nm)}
    else:
        units = unit_modules(model, granularity)
        graph = group_by_units(asm.graph, asm.module_paths, units, model, label=granularity)
        module_of = None

    node_of = {m: graph.names[v] for v, group in enumerate(graph.members or ()) for m in group}
    node_of.update({attr: node_of[owner] for attr, owner in asm.attr_owner.items()})
    tensors = [x for x in traced.flat_inputs if isinstance(x, torch.Tensor)]
    conditions = {**_measurement_conditions(device, repeats, warmup), "backward": training} if measure else None
    meta = dict(graph.meta)
    meta.update(
        {
            "model": name,
            "input_shapes": [list(x.shape) for x in tensors],
            "input_dtypes": [str(x.dtype).replace("torch.", "") for x in tensors],
            "batch_size": int(tensors[0].shape[0]) if tensors and tensors[0].dim() else None,
            "method": method,
            "granularity": granularity,
            **({"module_of": module_of} if module_of is not None else {}),
            "coarsening": list(graph.meta.get("coarsening", [])),  # steps applied, as `quotient` records them
            "fx_nodes": asm.graph.n_nodes,
            "torch_version": torch.__version__.split("+")[0],
            "measured": conditions,
            "costs": _cost_record(profile.device_kind, conditions),
            "param_count": sum(p.numel() for p in model.parameters()),
            "constant_bytes": asm.constant_bytes,
            **describe_params(asm.params, node_of),
            "capture_seconds": round(time.perf_counter() - start, 3),
        }
    )
    graph = graph.replace(meta=meta)
    log.info("captured %s: %d fx nodes -> %d nodes (%s)", name, asm.graph.n_nodes, graph.n_nodes, coarsen if grouping == "op" else granularity)
    return Capture(
        graph=graph,
        graph_module=traced.graph_module,
        example_inputs=traced.flat_inputs,
        module_paths=asm.module_paths,
        node_of=node_of,
        method=method,
    )


def _measurement_conditions(device: str | torch.device, repeats: int, warmup: int) -> dict[str, Any]:
    # Per-node CPU times are only as good as the machine was quiet: keep the load beside them.
    try:
        load = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not available on every platform
        load = None
    threads = torch.get_num_threads()
    return {"device": str(device), "repeats": repeats, "warmup": warmup, "threads": threads, "load_average": load}


#: How capture counts bytes, in ``meta["costs"]`` (`incsched.graph.cost_model`).
CAPTURED_BYTES = "from tensor shapes (torch capture)"


def _cost_record(kind: str, conditions: dict[str, Any] | None) -> dict[str, Any]:
    if conditions is None:
        return {"bytes": CAPTURED_BYTES}
    measured = {"source": "measured", "how": "each node timed alone", **conditions}
    if kind == "cuda":  # a sync around every node: an upper bound at small batch (see `capture`)
        measured.update(how="each node timed alone, synchronised", device_name=torch.cuda.get_device_name(conditions["device"]))
    return {"bytes": CAPTURED_BYTES, "times": {kind: measured}}


def from_module(model: torch.nn.Module, example_inputs: Sequence[Any], **kwargs: Any) -> CompGraph:
    """The graph of ``capture(model, example_inputs, **kwargs)``; see `capture` for the arguments."""
    return capture(model, example_inputs, **kwargs).graph


class _CallableStep(types.ModuleType):
    """`incsched.capture` is this step's package and its front function at once: a submodule import
    (``incsched.capture.zoo``) binds the package to the name ``capture`` on `incsched`, so the
    package itself must answer ``incsched.capture(model, example_inputs)``."""

    def __call__(self, model: torch.nn.Module, example_inputs: Sequence[Any], **kwargs: Any) -> Capture:
        return capture(model, example_inputs, **kwargs)


sys.modules[__name__].__class__ = _CallableStep
