"""Profiling: run a traced graph once, node by node, and record what each fx node costs.

Second step of capture, after `trace`: per fx node, the FLOPs that
``torch.utils.flop_counter.FlopCounterMode`` counts, the bytes of the real output tensors, and
optionally a measured time (median over repeats). `assemble` turns these into a `CompGraph`.
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
    values: dict[str, Any] = field(default_factory=dict)  # get_attr results, for parameter attribution
    device_kind: str = "cpu"


def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in ``value`` (nested tuples, lists and dicts); 0 for anything else."""
    return sum(
        t.numel() * t.element_size() for t in torch.utils._pytree.tree_leaves(value) if isinstance(t, torch.Tensor)
    )


class _ProfilingInterpreter(torch.fx.Interpreter):
    """Runs each node under its own FlopCounterMode, and optionally times repeated runs of it."""

    def __init__(self, gm: torch.fx.GraphModule, profile: NodeProfile, measure: bool, repeats: int, warmup: int):
        super().__init__(gm, garbage_collect_values=True)
        self.profile = profile
        self.measure = measure
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


def profile_nodes(
    gm: torch.fx.GraphModule,
    flat_inputs: Sequence[Any],
    *,
    measure: bool = False,
    device: str | torch.device = "cpu",
    repeats: int = 5,
    warmup: int = 2,
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

    Returns
    -------
    NodeProfile
    """
    device = torch.device(device)
    gm.to(device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in flat_inputs]
    profile = NodeProfile(device_kind=device.type)
    with torch.no_grad():
        _ProfilingInterpreter(gm, profile, measure, max(1, repeats), max(0, warmup)).run(*inputs)
    return profile
