"""Where a graph's costs come from: the roofline that estimates node times nobody measured, its
presets for common accelerators, and the labels (measured where and how, or estimated by which
roofline) that `CompGraph.time_source` and `CompGraph.byte_source` give.

A roofline with a fixed per-op launch overhead: time = overhead + max(flops / peak, bytes / bandwidth).
`CompGraph.time` uses it for device kinds that have no measured column; measured times (capture with
``measure=True``, `incsched.execute.calibrate`) always take precedence.

The record behind the labels is ``graph.meta["costs"]`` (JSON, kept by every graph file):

- ``"bytes"``: how the byte counts were obtained, as a label (``"from tensor shapes (torch
  capture)"``, ``"from tensor shapes (ONNX shape inference)"``, ``"synthetic (...)"``); absent:
  ``"given in the graph file"``.
- ``"times"``: one entry per ``compute_time`` column, ``{"source": "measured" | "synthetic",
  "how": str, ...}``; a measured entry also holds its conditions (``device``, ``repeats``,
  ``warmup``, ``threads``, ``load_average``). A column without an entry is ``"given in the graph
  file"``; a kind without a column is estimated by ``ROOFLINES[kind]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import GraphError

__all__ = ["Roofline", "ROOFLINES", "DEFAULT_KIND", "roofline_for", "time_label", "byte_label", "short_label"]


@dataclass(frozen=True)
class Roofline:
    """Peak throughput of one device kind, for estimating operation times in seconds."""

    peak_flops: float  # floating-point operations per second
    mem_bandwidth: float  # bytes per second between memory and compute units
    launch_overhead: float  # seconds added to every operation (dispatch, kernel launch)
    precision: str = ""  # what ``peak_flops`` is the peak of (fp32, bf16 tensor ...), for labels

    def estimate(self, flops: np.ndarray, bytes_moved: np.ndarray) -> np.ndarray:
        """Seconds per operation for arrays of flops and bytes read plus written."""
        flops = np.asarray(flops, dtype=np.float64)
        bytes_moved = np.asarray(bytes_moved, dtype=np.float64)
        return self.launch_overhead + np.maximum(flops / self.peak_flops, bytes_moved / self.mem_bandwidth)

    def describe(self) -> str:
        """``"989 TFLOP/s bf16, 3.35 TB/s, 5 us per op"``."""
        flops = _si(self.peak_flops, "FLOP/s") + (f" {self.precision}" if self.precision else "")
        return f"{flops}, {_si(self.mem_bandwidth, 'B/s')}, {self.launch_overhead * 1e6:.3g} us per op"


# The accelerator presets are peak *dense* (no 2:4 sparsity) tensor-core throughput in BF16, the
# precision models are trained and served in on them (FP16 on the V100, which has no BF16), and the
# HBM (GDDR6 on the L4) bandwidth of the named variant, from each vendor's public data sheet. The
# launch overhead of 5 us per op is a round figure: at batch 1 many ops are launch-bound, and the
# roofline says so by never going below it. They are upper bounds on speed: real kernels reach
# 40-80 % of peak, so estimated times are optimistic, by about the same factor on every node.
ROOFLINES: dict[str, Roofline] = {
    # Round figures: a 2-core CPU run of PyTorch eager in fp32, and a generic data-centre GPU.
    "cpu": Roofline(peak_flops=5e10, mem_bandwidth=1e10, launch_overhead=5e-6, precision="fp32"),
    "cuda": Roofline(peak_flops=4e14, mem_bandwidth=4e12, launch_overhead=5e-6, precision="fp16/bf16"),
    # NVIDIA Tesla V100 data sheet (SXM2): 125 TFLOPS tensor (FP16), HBM2 900 GB/s.
    "v100": Roofline(peak_flops=125e12, mem_bandwidth=900e9, launch_overhead=5e-6, precision="fp16 tensor"),
    # NVIDIA A100 data sheet (SXM, 80 GB): BF16 tensor 312 TFLOPS (624 sparse), HBM2e 2,039 GB/s.
    "a100": Roofline(peak_flops=312e12, mem_bandwidth=2.039e12, launch_overhead=5e-6, precision="bf16 tensor"),
    # NVIDIA H100 data sheet (SXM): BF16 tensor 1,979 TFLOPS with sparsity, 989 dense; HBM3 3.35 TB/s.
    "h100": Roofline(peak_flops=989e12, mem_bandwidth=3.35e12, launch_overhead=5e-6, precision="bf16 tensor"),
    # NVIDIA H200 data sheet (SXM): BF16 tensor 1,979 TFLOPS with sparsity, 989 dense; HBM3e 4.8 TB/s.
    "h200": Roofline(peak_flops=989e12, mem_bandwidth=4.8e12, launch_overhead=5e-6, precision="bf16 tensor"),
    # NVIDIA L4 data sheet: BF16 tensor 242 TFLOPS with sparsity, 121 dense; GDDR6 300 GB/s.
    "l4": Roofline(peak_flops=121e12, mem_bandwidth=300e9, launch_overhead=5e-6, precision="bf16 tensor"),
    # AMD Instinct MI300X data sheet: BF16 1,307.4 TFLOPS dense (2,614.9 sparse); HBM3 5.3 TB/s.
    "mi300x": Roofline(peak_flops=1307.4e12, mem_bandwidth=5.3e12, launch_overhead=5e-6, precision="bf16 matrix"),
}
DEFAULT_KIND = "cpu"


def roofline_for(kind: str, measured: Iterable[str] = (), graph: str = "graph") -> Roofline:
    """The preset of ``kind``; for any other kind, a one-line `GraphError` listing the known ones.

    ``measured`` are the kinds the graph has times for, listed in the message with the presets.

    >>> roofline_for("h100").peak_flops
    989000000000000.0
    """
    try:
        return ROOFLINES[kind]
    except (KeyError, TypeError):
        known = ", ".join(sorted(set(measured) | set(ROOFLINES)))
        raise GraphError(f"graph {graph!r} has no times for device kind {kind!r} and no roofline preset of that name "
                         f"(known kinds: {known})") from None


def time_label(meta: Mapping[str, Any], kind: str, measured: Iterable[str], graph: str = "graph") -> str:
    """Where the node times of ``kind`` come from, for people: see `CompGraph.time_source`."""
    measured = set(measured)
    if kind not in measured:
        return f"estimated by the {kind} roofline ({roofline_for(kind, measured, graph).describe()})"
    record = _time_record(meta, kind)
    if record.get("source") == "measured":
        cond = [record.get("device_name"), record.get("how")]
        if "repeats" in record:
            cond.append(f"median of {record['repeats']}" + (f" after {record['warmup']} warm-up" if record.get("warmup") else ""))
        if record.get("threads"):
            cond.append(f"{record['threads']} threads")
        if record.get("load_average") is not None:
            cond.append(f"load {record['load_average']}")
        shown = ", ".join(str(c) for c in cond if c)
        return f"measured on {record.get('device') or kind}" + (f" ({shown})" if shown else "")
    if record.get("source") == "synthetic":
        return "synthetic" + (f" ({record['how']})" if record.get("how") else "")
    return "given in the graph file"


def byte_label(meta: Mapping[str, Any]) -> str:
    """Where the byte counts come from, for people: see `CompGraph.byte_source`."""
    costs = meta.get("costs")
    if isinstance(costs, Mapping) and isinstance(costs.get("bytes"), str):
        return costs["bytes"]
    if "fx_nodes" in meta:  # captured before meta["costs"] was written (the shipped graphs)
        return "from tensor shapes (torch capture)"
    return "given in the graph file"


def short_label(label: str) -> str:
    """The tag printed beside a figure: ``estimated``, ``measured on cpu``, ``synthetic``, ``given``."""
    if label.startswith("measured on "):
        return label.split(" (")[0]
    return label.split(" ")[0]


def _time_record(meta: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    costs = meta.get("costs")
    times = costs.get("times") if isinstance(costs, Mapping) else None
    if isinstance(times, Mapping) and isinstance(times.get(kind), Mapping):
        return times[kind]
    # Graphs written before meta["costs"]: a profile's record, else a capture's (the shipped graphs).
    calibration = (meta.get("calibration") or {}).get(kind) if isinstance(meta.get("calibration"), Mapping) else None
    if isinstance(calibration, Mapping):
        return {"source": "measured", "how": "torch.profiler kernels + launch per op", **calibration}
    captured = meta.get("measured")
    if isinstance(captured, Mapping) and str(captured.get("device", "")).split(":")[0] == kind:
        return {"source": "measured", "how": "each node timed alone", **captured}
    return {}


def _si(value: float, unit: str) -> str:
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"
