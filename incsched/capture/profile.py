"""Profiling: run a traced graph once, node by node, and record what each fx node costs.

Second step of capture, after `trace`: per fx node, the FLOPs that
``torch.utils.flop_counter.FlopCounterMode`` counts, the bytes of the real output tensors, and
optionally a measured time (median over repeats), and with ``backward`` the time of each node's
backward pass through autograd (the training model's backward column). `assemble` turns these
into a `CompGraph`.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.utils.flop_counter import FlopCounterMode

from .trace import mutated_args

log = logging.getLogger(__name__)

__all__ = ["NodeProfile", "profile_nodes", "tensor_bytes"]


@dataclass
class NodeProfile:
    """Per-fx-node measurements, keyed by fx node name."""

    flops: dict[str, float] = field(default_factory=dict)
    out_bytes: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    backward_seconds: dict[str, float] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)  # get_attr results, for parameter attribution
    device_kind: str = "cpu"


def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in ``value`` (nested tuples, lists and dicts); 0 for anything else."""
    return sum(
        t.numel() * t.element_size() for t in torch.utils._pytree.tree_leaves(value) if isinstance(t, torch.Tensor)
    )


class _ProfilingInterpreter(torch.fx.Interpreter):
    """Runs each node under its own FlopCounterMode, and optionally times repeated runs of it."""

    def __init__(self, gm: torch.fx.GraphModule, profile: NodeProfile, measure: bool, repeats: int, warmup: int,
                 backward: bool = False):
        super().__init__(gm, garbage_collect_values=True)
        self.profile = profile
        self.measure = measure
        self.backward = backward
        self.repeats = repeats
        self.warmup = warmup
        self.sync = torch.cuda.synchronize if profile.device_kind == "cuda" else (lambda: None)

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op in ("placeholder", "output"):
            result = super().run_node(n)
            if n.op == "placeholder":
                self.profile.out_bytes[n.name] = tensor_bytes(result)
                self.profile.flops[n.name] = 0.0
            return result
        if n.op == "get_attr":
            result = super().run_node(n)
            self.profile.values[n.name] = result
            return result
        if self.measure:
            self.profile.seconds[n.name] = self._time(n)
        if self.measure and self.backward:
            self.profile.backward_seconds[n.name] = self._time_backward(n)
        counter = FlopCounterMode(display=False)
        with counter:
            result = super().run_node(n)
        self.profile.flops[n.name] = float(counter.get_total_flops())
        self.profile.out_bytes[n.name] = tensor_bytes(result)
        return result

    def _time(self, n: torch.fx.Node) -> float:
        """Median seconds of the node's op over ``repeats`` runs after ``warmup`` runs.

        Ops that write an input in place run on fresh copies of it (copied outside the timed
        region) so that repeats neither accumulate into nor corrupt the values the rest of the
        graph reads. On CUDA each run is synchronised before and after; a sync per node inflates
        GPU times (launch-bound at small batch) well above the kernels' own time, so these are an
        upper bound: kernel times from ``torch.profiler`` are the better GPU cost model.
        """
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        written = mutated_args(n, self.module)
        run = getattr(self, n.op)
        samples = []
        for k in range(self.warmup + self.repeats):
            call_args = tuple(
                a.clone() if i in written and isinstance(a, torch.Tensor) else a for i, a in enumerate(args)
            )
            self.sync()
            start = time.perf_counter()
            run(n.target, call_args, kwargs)
            self.sync()
            if k >= self.warmup:
                samples.append(time.perf_counter() - start)
        return float(statistics.median(samples))


    def _time_backward(self, n: torch.fx.Node) -> float:
        """Median seconds of the node's backward pass, timed like `_time`.

        The op runs once with grad enabled on detached copies of its floating-point tensor inputs
        (the weights a call_function reads arrive as such inputs; a call_module's own parameters
        are added), then ``torch.autograd.grad`` of its outputs against ones, for those inputs and
        weights, is timed ``repeats`` times after ``warmup``: the gradients a training step computes
        at this node. An op with no differentiable output (shapes, indices) takes 0.
        """
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        leaves: list[torch.Tensor] = []
        if not hasattr(self, "_buffers"):  # batch-norm statistics are inputs no gradient flows to
            self._buffers = {b.untyped_storage().data_ptr() for b in self.module.buffers()}

        in_place = bool(mutated_args(n, self.module))

        def leaf(a: Any) -> Any:
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.untyped_storage().data_ptr() not in self._buffers:
                x = a.detach().clone().requires_grad_(True)
                leaves.append(x)
                return x.clone() if in_place else x  # an in-place op (relu_) may not write a leaf
            return a

        call_args = torch.utils._pytree.tree_map(leaf, args)
        call_kwargs = torch.utils._pytree.tree_map(leaf, kwargs)
        if n.op == "call_module":
            leaves += [w for w in self.module.get_submodule(n.target).parameters() if w.requires_grad]
        with torch.enable_grad():
            result = getattr(self, n.op)(n.target, call_args, call_kwargs)
        outs = [t for t in torch.utils._pytree.tree_leaves(result) if isinstance(t, torch.Tensor) and t.requires_grad]
        if not outs or not leaves:
            return 0.0
        ones = [torch.ones_like(t) for t in outs]
        samples = []
        for k in range(self.warmup + self.repeats):
            self.sync()
            start = time.perf_counter()
            torch.autograd.grad(outs, leaves, ones, retain_graph=True, allow_unused=True)
            self.sync()
            if k >= self.warmup:
                samples.append(time.perf_counter() - start)
        return float(statistics.median(samples))


def profile_nodes(
    gm: torch.fx.GraphModule,
    flat_inputs: Sequence[Any],
    *,
    measure: bool = False,
    device: str | torch.device = "cpu",
    repeats: int = 5,
    warmup: int = 2,
    backward: bool = False,
) -> NodeProfile:
    """Run ``gm`` on ``flat_inputs`` once and measure every node.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        A traced model (moved to ``device`` in place).
    flat_inputs : sequence
        One value per placeholder, in order.
    measure : bool
        Also time every call node (median of ``repeats`` runs after ``warmup`` runs).
    device : str or torch.device
        Where to run (``"cpu"``, ``"cuda"``, ``"cuda:1"``); times are recorded under its type.
    repeats, warmup : int
        Timing repeats (>= 1) and discarded warm-up runs (>= 0).
    backward : bool
        With ``measure``, also time every call node's backward pass (`NodeProfile.backward_seconds`).

    Returns
    -------
    NodeProfile
    """
    device = torch.device(device)
    gm.to(device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in flat_inputs]
    profile = NodeProfile(device_kind=device.type)
    with torch.no_grad():
        _ProfilingInterpreter(gm, profile, measure, max(1, repeats), max(0, warmup), backward).run(*inputs)
    return profile
