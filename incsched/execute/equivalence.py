"""Equivalence: a split run must compute what the unsplit model computes.

Outputs are compared with ``torch.testing.assert_close`` at tolerances fit for the dtype and for the
devices involved (the same kernels on CPU agree to float rounding; CPU against CUDA does not). On a
mismatch every fx node is re-run and recorded on both sides, and the error names the first node, in
the original graph's order, whose value differs: that is where a partition went wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from ..errors import OutputMismatch
from ..capture import Capture
from .partition import Program
from .runner import intra_op_threads

__all__ = ["OutputMismatch", "Divergence", "tolerances", "check_outputs", "check_execution", "first_divergence", "reference_outputs"]


@dataclass(frozen=True)
class Divergence:
    """The first fx node whose value differs between the unsplit and the split run."""

    fx_node: str
    graph_node: str
    part: str
    max_abs_diff: float


def tolerances(dtype: torch.dtype, mixed_devices: bool) -> dict[str, float]:
    """``rtol``/``atol`` for comparing values of ``dtype``; looser when CPU and CUDA results are compared."""
    if not dtype.is_floating_point and not dtype.is_complex:
        return {"rtol": 0.0, "atol": 0.0}
    if dtype in (torch.float16, torch.bfloat16):
        return {"rtol": 2e-2, "atol": 2e-2} if mixed_devices else {"rtol": 1e-2, "atol": 1e-2}
    if mixed_devices:  # cuDNN / cuBLAS pick other algorithms (and TF32) than CPU kernels
        return {"rtol": 2e-3, "atol": 2e-3}
    return {"rtol": 1.3e-6, "atol": 1e-5}


def reference_outputs(capture: Capture, batch: Sequence[Any]) -> list[Any]:
    """The unsplit module's flat outputs on ``batch`` (run where the capture lives)."""
    with torch.no_grad():
        out = capture.graph_module(*batch)
    return list(torch.utils._pytree.tree_leaves(out))


def check_outputs(expected: Sequence[Any], actual: Sequence[Any], *, mixed_devices: bool = False, what: str = "output") -> float:
    """Compare flat outputs; return the largest absolute difference.

    Raises
    ------
    OutputMismatch
        Naming the first output (index and shape) that is not close.
    """
    if len(expected) != len(actual):
        raise OutputMismatch(f"{what}: the split run returned {len(actual)} values, the model {len(expected)}")
    worst = 0.0
    for i, (e, a) in enumerate(zip(expected, actual)):
        if not isinstance(e, torch.Tensor):
            if e != a:
                raise OutputMismatch(f"{what} {i}: {a!r} != {e!r}")
            continue
        a = a.to(e.device)
        try:
            torch.testing.assert_close(a, e, **tolerances(e.dtype, mixed_devices))
        except AssertionError as err:
            raise OutputMismatch(f"{what} {i} (shape {tuple(e.shape)}, {e.dtype}) differs from the unsplit model: {str(err).splitlines()[0]}") from None
        if e.numel() and (e.dtype.is_floating_point or e.dtype.is_complex):
            worst = max(worst, float((a - e).abs().max()))
    return worst


def check_execution(
    capture: Capture,
    program: Program,
    batches: Sequence[Sequence[Any]],
    execution,
    devices: Sequence[str | torch.device],
    threads: int | None = None,
) -> float:
    """Check every micro-batch's outputs of ``execution`` against the unsplit model; the largest |diff|.

    ``threads``: the intra-op threads the CPU workers ran with; the reference runs with as many, so
    that the comparison sees partitioning errors and not the thread count's rounding.

    Raises
    ------
    OutputMismatch
        Naming the output, and the first diverging fx node (with its graph node and part).
    """
    with intra_op_threads(threads):
        return _check_execution(capture, program, batches, execution, devices)


def _check_execution(capture, program, batches, execution, devices) -> float:
    mixed = len({torch.device(d).type for d in devices}) > 1
    worst = 0.0
    for m, (batch, got) in enumerate(zip(batches, execution.outputs)):
        try:
            worst = max(worst, check_outputs(reference_outputs(capture, batch), got, mixed_devices=mixed, what=f"micro-batch {m}, output"))
        except OutputMismatch as err:
            where = first_divergence(capture, program, batch, devices, mixed_devices=mixed)
            if where is None:
                raise
            raise OutputMismatch(
                f"{err}; first diverging node: fx node {where.fx_node!r} (graph node {where.graph_node!r}, "
                f"part {where.part}, max |diff| {where.max_abs_diff:.3g})",
                where,
            ) from None
    return worst


class _Recorder(torch.fx.Interpreter):
    """Runs a graph module and keeps the value of every call node by name."""

    def __init__(self, gm: torch.fx.GraphModule, record: dict[str, Any]):
        super().__init__(gm)
        self.record = record

    def run_node(self, n: torch.fx.Node) -> Any:
        value = super().run_node(n)
        if n.op.startswith("call"):
            self.record[n.name] = value
        return value


def first_divergence(capture: Capture, program: Program, batch: Sequence[Any], devices: Sequence[str | torch.device], *, mixed_devices: bool = False) -> Divergence | None:
    """Re-run both sides node by node on ``batch``; the first fx node whose values differ, or None."""
    reference: dict[str, Any] = {}
    with torch.no_grad():
        _Recorder(capture.graph_module, reference).run(*batch)
        split: dict[str, Any] = {}
        part_of: dict[str, str] = {}
        outs: list[tuple] = []
        for part in program.parts:
            device = torch.device(devices[part.worker])
            args = [(batch[r.index] if r.part is None else outs[r.part][r.index]) for r in part.inputs]
            args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
            record: dict[str, Any] = {}
            outs.append(_Recorder(part.module, record).run(*args))
            for name, value in record.items():
                split[name] = value
                part_of[name] = part.name
    for node in capture.graph_module.graph.nodes:
        if node.name not in reference or node.name not in split:
            continue
        ref_leaves = [t for t in torch.utils._pytree.tree_leaves(reference[node.name]) if isinstance(t, torch.Tensor)]
        got_leaves = [t for t in torch.utils._pytree.tree_leaves(split[node.name]) if isinstance(t, torch.Tensor)]
        for e, a in zip(ref_leaves, got_leaves):
            a = a.to(e.device)
            if not _close(a, e, mixed_devices):
                diff = float((a - e).abs().max()) if e.shape == a.shape and e.numel() else float("inf")
                return Divergence(node.name, capture.node_of.get(node.name, "?"), part_of[node.name], diff)
    return None


def _close(a: torch.Tensor, e: torch.Tensor, mixed_devices: bool) -> bool:
    if a.shape != e.shape or a.dtype != e.dtype:
        return False
    if not (e.dtype.is_floating_point or e.dtype.is_complex):
        return torch.equal(a, e)
    return torch.allclose(a, e, **tolerances(e.dtype, mixed_devices), equal_nan=True)
