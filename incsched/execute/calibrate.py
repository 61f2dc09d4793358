"""Calibration: measure what a captured graph costs on the real devices, for the solver to read.

Runs beside capture and before problem building: per graph node, the kernel time and the launch
overhead on each device kind (written into ``CompGraph.compute_time``), and the latency and
bandwidth of copies between devices (written as `Links`). ``incsched profile`` is the command line.

Why not time each node with a synchronisation around it (as ``capture(measure=True)`` does): on a
GPU that more than doubles the cost (ResNet-50, batch 32: 11.7 ms summed against a 5.2 ms forward).
Here the whole forward runs unsynchronised under ``torch.profiler``, each fx node inside its own
``record_function`` range, and the ATen ops in a range are charged to that node: on CUDA their
kernels' device time, on CPU their own CPU time. The per-op launch (dispatch) overhead is measured
separately and charged per op, and the ratio of kernel time to the forward's wall time names the
regime (launch-bound at batch 1 on a GPU, kernel-bound when the device is saturated).
"""

from __future__ import annotations

import copy
import logging
import math
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx

from ..errors import CalibrationError
from ..capture import Capture
from ..graph import CompGraph
from ..problems import Device, Links
from .runner import cpu_threads_per_worker, intra_op_threads

log = logging.getLogger(__name__)

__all__ = [
    "CalibrationError",
    "NodeTimes",
    "LinkMeasurement",
    "profile_node_times",
    "profile_devices",
    "with_measured_times",
    "measure_links",
    "calibrated_devices",
    "DEFAULT_LINK_SIZES",
    "KERNEL_BOUND_SHARE",
    "LAUNCH_BOUND_SHARE",
    "LINK_FORMAT",
    "LINK_VERSION",
]

#: Copy sizes `measure_links` times by default: 4 KiB to 64 MiB.
DEFAULT_LINK_SIZES: tuple[int, ...] = (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)

LINK_FORMAT = "incsched.link_measurement"
LINK_VERSION = 1

# Prefix of the profiler ranges that mark fx nodes; "::" never occurs in it, so no ATen op matches.
_RANGE_PREFIX = "incsched.fx/"

#: Kernel share of the wall time at or above which a device counts as kernel-bound, and below
#: which (the lower one) it counts as launch-bound; in between it is "mixed".
KERNEL_BOUND_SHARE = 0.8
LAUNCH_BOUND_SHARE = 0.5


# ---------------------------------------------------------------------- node times


@dataclass(frozen=True, eq=False)
class NodeTimes:
    """Measured per-node costs of one captured graph on one device.

    Attributes
    ----------
    names : tuple of str
        Graph node names, in the graph's order.
    kernel : numpy.ndarray
        Seconds per node per forward: CUDA kernel time on a GPU, ATen op CPU time on a CPU
        (median over the profiled forwards).
    launch : numpy.ndarray
        Seconds per node per forward of launch overhead: ``ops * launch_per_op``. On a GPU this is
        host time the kernels overlap when the device is saturated; on a CPU the op's own time
        already holds part of it (from the profiler hook on), so the sum is slightly pessimistic.
    ops : numpy.ndarray
        ATen ops the node issues per forward.
    launch_per_op : float
        Measured seconds to issue one trivial op (a 1-element ``torch.add``) on the device.
    wall_seconds : float
        Median wall time of one unprofiled, unsynchronised-per-node forward of the whole graph.
    device : str
        The torch device measured (``"cpu"``, ``"cuda:0"``).
    regime : str
        ``"kernel-bound"`` (kernels fill at least `KERNEL_BOUND_SHARE` of the wall time),
        ``"launch-bound"`` (under `LAUNCH_BOUND_SHARE`) or ``"mixed"``.
    repeats, warmup : int
        Profiled forwards and discarded warm-up forwards.
    conditions : mapping
        What else the numbers depend on: intra-op threads, load average, GPU name.
    """

    names: tuple[str, ...]
    kernel: np.ndarray
    launch: np.ndarray
    ops: np.ndarray
    launch_per_op: float
    wall_seconds: float
    device: str
    regime: str
    repeats: int = 0
    warmup: int = 0
    conditions: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """The device kind the times belong to (``"cpu"``, ``"cuda"``)."""
        return torch.device(self.device).type

    @property
    def kernel_seconds(self) -> float:
        """Sum of the kernel times over all nodes (one forward)."""
        return float(self.kernel.sum())

    @property
    def kernel_share(self) -> float:
        """Sum of kernel times over the measured wall time of a forward."""
        return self.kernel_seconds / self.wall_seconds if self.wall_seconds > 0 else math.inf

    def total(self) -> np.ndarray:
        """Seconds per node of the cost model: ``kernel + launch``."""
        return self.kernel + self.launch

    def summary(self) -> dict[str, Any]:
        """What the measurement says about the device, JSON-ready (recorded in the graph's meta)."""
        return {
            "device": self.device,
            "regime": self.regime,
            "wall_s": self.wall_seconds,
            "kernel_sum_s": self.kernel_seconds,
            "kernel_share": round(self.kernel_share, 4) if math.isfinite(self.kernel_share) else None,
            "launch_per_op_s": self.launch_per_op,
            "ops": int(self.ops.sum()),
            "repeats": self.repeats,
            "warmup": self.warmup,
            **dict(self.conditions),
        }


def profile_node_times(
    capture: Capture, device: str | torch.device = "cpu", *, repeats: int = 10, warmup: int = 3, threads: int | None = None
) -> NodeTimes:
    """Measure kernel time and launch overhead of every graph node of ``capture`` on ``device``.

    The whole graph module runs ``warmup`` times, then ``repeats`` times under ``torch.profiler``
    with every fx node in its own ``record_function`` range (no synchronisation between nodes); the
    ATen ops inside a range are charged to that fx node, and fx nodes are summed into graph nodes
    through ``capture.node_of``. Per fx node the median over the profiled forwards is kept. The wall
    time of a forward is measured separately, without the profiler.

    Parameters
    ----------
    capture : Capture
        A captured model (`incsched.capture.capture`). Its graph module is not modified: it is
        copied when it has to move to another device.
    device : str or torch.device
        Where to measure: ``"cpu"``, ``"cuda"``, ``"cuda:1"``.
    repeats : int
        Profiled forwards (and timed forwards for the wall time); at least 1.
    warmup : int
        Forwards run first and discarded (allocator, cuDNN algorithm choice); at least 0.
    threads : int, optional
        Intra-op threads to measure with (default: the current ``torch.get_num_threads()``). A CPU
        node's time depends on it: measure with the threads each CPU worker will get
        (`incsched.execute.cpu_threads_per_worker` of the devices it will run on), or predictions of a run with
        several CPU workers come out about half the measured time on 2 cores.

    Returns
    -------
    NodeTimes

    Raises
    ------
    CalibrationError
        If the device is unavailable (CUDA asked for on a machine without it), or ``repeats`` < 1.

    Examples
    --------
    >>> import torch
    >>> from incsched.capture import capture
    >>> cap = capture(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval(), (torch.randn(2, 8),))
    >>> times = profile_node_times(cap, "cpu", repeats=2, warmup=1)
    >>> len(times.names) == cap.graph.n_nodes and bool((times.total() >= 0).all())
    True
    """
    if repeats < 1 or warmup < 0:
        raise CalibrationError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    if threads is not None and threads < 1:
        raise CalibrationError(f"threads must be >= 1, got {threads}")
    device = _available_device(device)
    gm = _module_on(capture.graph_module, device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in capture.example_inputs]
    sync = _synchroniser(device)

    with torch.no_grad(), intra_op_threads(threads):
        for _ in range(warmup):
            gm(*inputs)
        sync()
        wall = _median_seconds(lambda: gm(*inputs), sync, repeats)
        per_fx = _profile_fx_nodes(gm, inputs, device, repeats, sync)
        launch_per_op = _launch_overhead(device)
        used_threads = torch.get_num_threads()

    names = capture.graph.names
    index = {nm: i for i, nm in enumerate(names)}
    kernel = np.zeros(len(names))
    ops = np.zeros(len(names), dtype=np.int64)
    unmapped = []
    for fx_name, (seconds, n_ops) in per_fx.items():
        owner = capture.node_of.get(fx_name)
        if owner is None or owner not in index:
            unmapped.append(fx_name)
            continue
        kernel[index[owner]] += seconds
        ops[index[owner]] += n_ops
    if unmapped:  # e.g. a node the graph dropped; its time is not charged to anything
        log.warning("%d profiled fx node(s) belong to no graph node, e.g. %s", len(unmapped), unmapped[0])

    kernel_sum = float(kernel.sum())
    share = kernel_sum / wall if wall > 0 else math.inf
    regime = "kernel-bound" if share >= KERNEL_BOUND_SHARE else ("launch-bound" if share < LAUNCH_BOUND_SHARE else "mixed")
    times = NodeTimes(
        names=tuple(names),
        kernel=_readonly(kernel),
        launch=_readonly(ops * launch_per_op),
        ops=_readonly(ops),
        launch_per_op=launch_per_op,
        wall_seconds=wall,
        device=str(device),
        regime=regime,
        repeats=repeats,
        warmup=warmup,
        conditions=_conditions(device, unmapped, used_threads),
    )
    log.info(
        "%s on %s: wall %.3f ms, kernels %.3f ms (%.0f%%), %d ops x %.1f us launch: %s",
        capture.graph.name, device, 1e3 * wall, 1e3 * kernel_sum, 100 * share, int(ops.sum()), 1e6 * launch_per_op, regime,
    )
    return times


def _profile_fx_nodes(gm, inputs, device, repeats: int, sync) -> dict[str, tuple[float, int]]:
    """Median seconds and op count per fx node over ``repeats`` profiled forwards."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    on_gpu = device.type == "cuda"
    if on_gpu:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    interpreter = _RangeInterpreter(gm, garbage_collect_values=True)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(repeats):
            interpreter.run(*inputs)
        sync()  # every kernel must have finished inside the profiled region
    return _charge_ranges(prof.events(), on_gpu)


def _charge_ranges(events, on_gpu: bool) -> dict[str, tuple[float, int]]:
    """Median seconds and op count per fx node, from the profiler's events of its ranges.

    A range's ops are its direct CPU children that are ATen (or other ``ns::op``) calls; their
    seconds are the device time of the kernels they launched on a GPU, their CPU time otherwise.
    """
    samples: dict[str, list[float]] = {}
    counts: dict[str, list[int]] = {}
    for evt in events:
        if not evt.name.startswith(_RANGE_PREFIX) or evt.device_type != torch.autograd.DeviceType.CPU or evt.is_async:
            continue  # the GPU-side copies of the annotation carry no children
        fx_name = evt.name[len(_RANGE_PREFIX):]
        ops = [ch for ch in evt.cpu_children if "::" in ch.name and not ch.name.startswith(_RANGE_PREFIX)]
        if on_gpu:
            # Summed over the ops, not the range's own ``device_time_total``: that also counts the
            # annotation's GPU-side copy (its whole span) as if it were a kernel.
            micros = sum(ch.device_time_total for ch in ops)
        else:
            micros = sum(ch.cpu_time_total for ch in ops)
        samples.setdefault(fx_name, []).append(micros * 1e-6)
        counts.setdefault(fx_name, []).append(len(ops))
    return {nm: (float(statistics.median(s)), int(round(statistics.median(counts[nm])))) for nm, s in samples.items()}


class _RangeInterpreter(torch.fx.Interpreter):
    """Runs every call node inside a profiler range named after it (free when not profiling)."""

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op in ("call_function", "call_method", "call_module"):
            with torch.profiler.record_function(_RANGE_PREFIX + n.name):
                return super().run_node(n)
        return super().run_node(n)


def _launch_overhead(device: torch.device, calls: int = 1000, rounds: int = 5) -> float:
    """Seconds to issue one trivial op on ``device``: median over ``rounds`` loops of ``calls`` adds.

    On CUDA the loop is not synchronised per call, so this is the rate at which the host can
    launch kernels (the kernels themselves take about a microsecond); on CPU it is the dispatch
    cost of an op that does no work.
    """
    a = torch.ones(1, device=device)
    b = torch.ones(1, device=device)
    out = torch.empty(1, device=device)
    sync = _synchroniser(device)

    def loop():
        for _ in range(calls):
            torch.add(a, b, out=out)

    loop()  # warm-up
    sync()
    return _median_seconds(loop, sync, rounds) / calls


def with_measured_times(graph: CompGraph, times: NodeTimes, kind: str | None = None) -> CompGraph:
    """``graph`` with ``compute_time[kind]`` set to the measured ``kernel + launch`` per node.

    Parameters
    ----------
    graph : CompGraph
        The graph the times were measured on (the same node names, in any order).
    times : NodeTimes
        From `profile_node_times`.
    kind : str, optional
        Device kind to store the times under; default the measured device's type (``"cpu"``,
        ``"cuda"``), the kind `incsched.problems.placement.Device` names.

    Returns
    -------
    CompGraph
        A new graph; other kinds' times are kept, and ``meta["calibration"][kind]`` records the
        device, regime, wall time, kernel sum, launch overhead per op and the conditions
        (``meta["costs"]["times"][kind]`` the same for `CompGraph.time_source`).

    Raises
    ------
    CalibrationError
        If the node names differ from the graph's (the message names the first differences).

    Examples
    --------
    >>> import numpy as np
    >>> g = CompGraph(["a", "b"], ["a"], ["b"])
    >>> t = NodeTimes(("b", "a"), kernel=np.array([0.5, 0.25]), launch=np.array([0.125, 0.125]), ops=np.array([1, 1]),
    ...               launch_per_op=0.125, wall_seconds=1.0, device="cpu", regime="kernel-bound")
    >>> with_measured_times(g, t).time("cpu").tolist()
    [0.375, 0.625]
    """
    kind = kind or times.kind
    if not isinstance(kind, str) or not kind:
        raise CalibrationError(f"kind must be a non-empty device-kind string, got {kind!r}")
    position = {nm: i for i, nm in enumerate(times.names)}
    missing = [nm for nm in graph.names if nm not in position]
    extra = sorted(set(position) - set(graph.names))
    if missing or extra or len(position) != len(times.names):
        raise CalibrationError(
            f"node times measured on {len(times.names)} nodes do not match graph {graph.name!r} ({graph.n_nodes} nodes): "
            f"{len(missing)} graph node(s) not measured{' (e.g. ' + repr(missing[0]) + ')' if missing else ''}, "
            f"{len(extra)} measured node(s) not in the graph{' (e.g. ' + repr(extra[0]) + ')' if extra else ''}"
            + ("" if len(position) == len(times.names) else ", and duplicate measured names")
        )
    order = np.asarray([position[nm] for nm in graph.names], dtype=np.int64)
    compute_time = dict(graph.compute_time)
    compute_time[kind] = times.total()[order]
    meta = dict(graph.meta)
    calibration = dict(meta.get("calibration") or {})
    calibration[kind] = {
        **times.summary(),
        "cost_model": "kernel + ops * launch_per_op",
        "torch_version": torch.__version__.split("+")[0],
    }
    meta["calibration"] = calibration
    costs = dict(meta.get("costs") or {})  # what CompGraph.time_source reads: this column is now measured so
    costs["times"] = {**(costs.get("times") or {}), kind: {
        "source": "measured", "how": f"torch.profiler kernels + launch per op, {times.regime}", "device": times.device,
        "repeats": times.repeats, "warmup": times.warmup, **dict(times.conditions)}}
    meta["costs"] = costs
    return graph.replace(compute_time=compute_time, meta=meta)


def profile_devices(
    capture: Capture, devices: Sequence[str], *, repeats: int = 10, warmup: int = 3, threads: int | None = None
) -> tuple[CompGraph, dict[str, NodeTimes]]:
    """Measure ``capture`` on one device of each kind in ``devices`` and write the times into its graph.

    The CPU is measured with the intra-op threads each CPU worker gets when ``devices`` run
    together (`incsched.execute.cpu_threads_per_worker`; all of the current threads for a lone CPU
    worker), or ``threads`` when given.

    Returns
    -------
    (graph, times)
        The graph with ``compute_time`` (and ``meta["calibration"]``) for every kind measured, and
        the `NodeTimes` of each kind.
    """
    graph, times = capture.graph, {}
    for dev in devices:
        kind = torch.device(dev).type
        if kind in times:  # times are kept per device kind: one device of each is enough
            continue
        cpu_threads = (threads or cpu_threads_per_worker(devices)) if kind == "cpu" else None
        times[kind] = profile_node_times(capture, dev, repeats=repeats, warmup=warmup, threads=cpu_threads)
        graph = with_measured_times(graph, times[kind])
    return graph, times


# ---------------------------------------------------------------------- links


@dataclass(frozen=True, eq=False)
class LinkMeasurement:
    """Timed copies between every ordered pair of devices, and the latency/bandwidth fitted to them.

    Attributes
    ----------
    devices : tuple of str
        The torch devices, in the order of the matrices' rows and columns.
    sizes : tuple of int
        Bytes per timed copy.
    seconds : numpy.ndarray
        [D, D, S] median seconds per copy from row device to column device; NaN on the diagonal.
    latency : numpy.ndarray
        [D, D] fitted seconds per transfer (the intercept, at least 0); 0 on the diagonal.
    bandwidth : numpy.ndarray
        [D, D] fitted bytes per second (1 / slope); ``inf`` on the diagonal.
    pinned : bool
        Whether host memory on a host-GPU pair was page-locked.
    repeats : int
        Timed copies per size and pair (median kept).
    """

    devices: tuple[str, ...]
    sizes: tuple[int, ...]
    seconds: np.ndarray
    latency: np.ndarray
    bandwidth: np.ndarray
    pinned: bool = True
    repeats: int = 0

    def pairs(self) -> list[tuple[int, int]]:
        """The ordered pairs (source, target) of distinct positions that were measured."""
        d = len(self.devices)
        return [(i, j) for i in range(d) for j in range(d) if i != j]

    def method(self, i: int, j: int) -> str:
        """What the copy from device ``i`` to device ``j`` really measured, in words."""
        a, b = torch.device(self.devices[i]), torch.device(self.devices[j])
        if a == b:
            return f"memory copy within {a} (a stand-in for a link between two workers on it)"
        host = "pinned" if self.pinned and "cpu" in (a.type, b.type) and a.type != b.type else "pageable"
        return f"copy {a} -> {b}" + (f" ({host} host memory)" if "cpu" in (a.type, b.type) else "")

    def to_links(self) -> Links:
        """The measured `Links`: [D, D] latency and bandwidth matrices in `devices` order."""
        return Links(latency=self.latency, bandwidth=self.bandwidth)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (``inf`` and ``NaN`` written as ``null``); see `from_dict`."""
        d = len(self.devices)
        return {
            "format": LINK_FORMAT,
            "version": LINK_VERSION,
            "devices": list(self.devices),
            "sizes": list(self.sizes),
            "seconds": _encode(self.seconds.tolist()),
            "latency": _encode(self.latency.tolist()),
            "bandwidth": _encode(self.bandwidth.tolist()),
            "pinned": self.pinned,
            "repeats": self.repeats,
            "methods": [[None if i == j else self.method(i, j) for j in range(d)] for i in range(d)],
            "links": self.to_links().to_dict(),
            "torch_version": torch.__version__.split("+")[0],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LinkMeasurement:
        """Rebuild from `to_dict`'s form.

        Raises
        ------
        CalibrationError
            If the dictionary is not a link measurement of a known version, or its shapes disagree.
        """
        if not isinstance(data, Mapping) or data.get("format") != LINK_FORMAT:
            raise CalibrationError(f"not a link measurement (format {LINK_FORMAT!r} expected)")
        if data.get("version") != LINK_VERSION:
            raise CalibrationError(f"link measurement version {data.get('version')!r} is not supported (expected {LINK_VERSION})")
        try:
            devices = tuple(str(d) for d in data["devices"])
            sizes = tuple(int(s) for s in data["sizes"])
            seconds = np.asarray(_decode(data["seconds"], math.nan), dtype=np.float64)
            latency = np.asarray(_decode(data["latency"], 0.0), dtype=np.float64)
            bandwidth = np.asarray(_decode(data["bandwidth"], math.inf), dtype=np.float64)
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"malformed link measurement: {type(exc).__name__}: {exc}") from None
        d = len(devices)
        if seconds.shape != (d, d, len(sizes)) or latency.shape != (d, d) or bandwidth.shape != (d, d):
            raise CalibrationError(f"link measurement shapes do not match {d} devices and {len(sizes)} sizes")
        return cls(devices, sizes, _readonly(seconds), _readonly(latency), _readonly(bandwidth),
                   pinned=bool(data.get("pinned", True)), repeats=int(data.get("repeats", 0)))


def _encode(value):
    """Nested lists of floats with non-finite values (NaN, inf) as ``None``: JSON has neither."""
    if isinstance(value, list):
        return [_encode(x) for x in value]
    return float(value) if math.isfinite(value) else None


def _decode(value, missing: float):
    """`_encode` reversed, ``None`` read as ``missing`` (what it stood for in that field)."""
    if isinstance(value, list):
        return [_decode(x, missing) for x in value]
    return missing if value is None else float(value)


def measure_links(
    devices: Sequence[str],
    sizes: Sequence[int] = DEFAULT_LINK_SIZES,
    *,
    repeats: int = 5,
    warmup: int = 2,
    pinned: bool = True,
) -> LinkMeasurement:
    """Time copies between every ordered pair of ``devices`` and fit latency and bandwidth.

    For each pair and size, the median of ``repeats`` synchronised ``dst.copy_(src)`` calls into a
    preallocated buffer. The fit is least squares of ``seconds = latency + bytes / bandwidth`` on
    relative residuals, so the small copies fix the latency and the large ones the bandwidth; a
    negative intercept is clamped to 0 (and the slope refitted through the origin).

    Two positions naming the same torch device (``["cpu", "cpu"]``) measure a memory copy on that
    device: a stand-in for two workers sharing it, cheaper than a real inter-process transfer.

    Parameters
    ----------
    devices : sequence of str
        Torch devices, e.g. ``["cpu", "cuda:0"]``; repeats allowed.
    sizes : sequence of int
        Bytes per copy; at least one, all positive.
    repeats, warmup : int
        Timed and discarded copies per pair and size.
    pinned : bool
        Page-lock the host buffer of host-GPU pairs (about 55 GB/s against 20 GB/s pageable on
        an H200 host).

    Returns
    -------
    LinkMeasurement

    Raises
    ------
    CalibrationError
        For no devices, a bad size, or an unavailable device.

    Examples
    --------
    >>> m = measure_links(["cpu", "cpu"], sizes=[1 << 12, 1 << 16], repeats=2, warmup=1)
    >>> links = m.to_links()
    >>> bool(m.bandwidth[0, 1] > 0 and m.latency[0, 1] >= 0)
    True
    """
    if not devices:
        raise CalibrationError("measure_links needs at least one device")
    sizes = tuple(int(s) for s in sizes)
    if not sizes or any(s <= 0 for s in sizes):
        raise CalibrationError(f"copy sizes must be positive byte counts, got {list(sizes)}")
    if repeats < 1 or warmup < 0:
        raise CalibrationError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    torch_devices = [_available_device(d) for d in devices]
    d, s = len(devices), len(sizes)
    seconds = np.full((d, d, s), math.nan)
    latency = np.zeros((d, d))
    bandwidth = np.full((d, d), math.inf)
    for i in range(d):
        for j in range(d):
            if i == j:
                continue
            for k, size in enumerate(sizes):
                seconds[i, j, k] = _copy_seconds(torch_devices[i], torch_devices[j], size, repeats, warmup, pinned)
            latency[i, j], bandwidth[i, j] = _fit_link(np.asarray(sizes, dtype=np.float64), seconds[i, j])
            log.info(
                "link %s -> %s: latency %.2f us, bandwidth %.2f GB/s",
                devices[i], devices[j], 1e6 * latency[i, j], bandwidth[i, j] / 1e9,
            )
    return LinkMeasurement(
        devices=tuple(str(x) for x in devices),
        sizes=sizes,
        seconds=_readonly(seconds),
        latency=_readonly(latency),
        bandwidth=_readonly(bandwidth),
        pinned=pinned,
        repeats=repeats,
    )


def _copy_seconds(src_dev: torch.device, dst_dev: torch.device, size: int, repeats: int, warmup: int, pinned: bool) -> float:
    crosses_host = (src_dev.type == "cpu") != (dst_dev.type == "cpu")
    src = torch.ones(size, dtype=torch.uint8, device=src_dev, pin_memory=pinned and crosses_host and src_dev.type == "cpu")
    dst = torch.empty(size, dtype=torch.uint8, device=dst_dev, pin_memory=pinned and crosses_host and dst_dev.type == "cpu")
    sync_src, sync_dst = _synchroniser(src_dev), _synchroniser(dst_dev)

    def sync():
        sync_src()
        sync_dst()

    for _ in range(warmup):
        dst.copy_(src)
    sync()
    return _median_seconds(lambda: dst.copy_(src), sync, repeats)


def _fit_link(sizes: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """Latency (>= 0) and bandwidth (> 0) of ``seconds ~ latency + sizes / bandwidth``."""
    t = np.maximum(seconds, 1e-9)  # a copy timed at 0 (coarse clock) would divide by zero
    if len(sizes) >= 2 and np.ptp(sizes) > 0:
        a = np.stack([1.0 / t, sizes / t], axis=1)  # rows divided by t: relative residuals
        (lat, slope), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
        if lat < 0:
            lat = 0.0
            x = sizes / t
            slope = float(x.sum() / (x @ x))
        lat = min(float(lat), float(t.min()))  # no copy can be faster than the latency
        if slope > 0:
            return lat, 1.0 / float(slope)
    # One size, or noise made the slope non-positive: the largest copy's average rate.
    k = int(np.argmax(sizes))
    return 0.0, float(sizes[k] / t[k])


def calibrated_devices(devices: Sequence[str], memory: int | str | Sequence[int | None] | None = None) -> list[Device]:
    """`Device` objects for measured torch devices: kind = the torch device type, speed 1.

    Speed is 1 because measured times are stored per kind (``graph.time("cuda")``); a device name
    is the torch device string, with ``#k`` appended to its k-th repeat (``["cpu", "cpu"]`` gives
    ``cpu`` and ``cpu#1``), since problem devices need unique names.

    Parameters
    ----------
    devices : sequence of str
        Torch devices, in the order of the links' matrices.
    memory : int, "auto", sequence, or None
        Parameter bytes each device can hold: one value for all, one per device, ``"auto"`` (a GPU's
        total memory, no limit for the host), or ``None`` (no limits).

    Returns
    -------
    list of Device

    Raises
    ------
    CalibrationError
        For a malformed device string or a memory list of the wrong length.

    Examples
    --------
    >>> [(d.name, d.kind) for d in calibrated_devices(["cpu", "cuda:0", "cpu"])]
    [('cpu', 'cpu'), ('cuda:0', 'cuda'), ('cpu#1', 'cpu')]
    """
    parsed = []
    for dev in devices:
        try:
            parsed.append(torch.device(dev))
        except (RuntimeError, TypeError) as exc:
            raise CalibrationError(f"{dev!r} is not a torch device ({exc})") from None
    if memory is None or isinstance(memory, (int, np.integer)) and not isinstance(memory, bool):
        capacities = [memory] * len(parsed)
    elif memory == "auto":
        gpu = torch.cuda.is_available()
        capacities = [torch.cuda.get_device_properties(d.index or 0).total_memory if d.type == "cuda" and gpu else None for d in parsed]
    elif isinstance(memory, Sequence) and not isinstance(memory, str):
        if len(memory) != len(parsed):
            raise CalibrationError(f"memory has {len(memory)} entries for {len(parsed)} devices")
        capacities = list(memory)
    else:
        raise CalibrationError(f"memory must be None, a byte count, 'auto' or one value per device, got {memory!r}")
    seen: dict[str, int] = {}
    out = []
    for dev, text, cap in zip(parsed, devices, capacities):
        k = seen.get(str(text), 0)
        seen[str(text)] = k + 1
        out.append(Device(name=str(text) if k == 0 else f"{text}#{k}", kind=dev.type, speed=1.0, memory=cap))
    return out


# ---------------------------------------------------------------------- shared measuring helpers


def _available_device(device: str | torch.device) -> torch.device:
    """`runner.check_devices` for one device, raising `CalibrationError` (the calibration's error)."""
    from .partition import ExecutionError
    from .runner import check_devices

    try:
        return check_devices([device])[0]
    except ExecutionError as err:
        raise CalibrationError(str(err)) from None


def _synchroniser(device: torch.device):
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _median_seconds(fn, sync, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - start)
    return float(statistics.median(samples))


def _module_on(gm: torch.fx.GraphModule, device: torch.device) -> torch.fx.GraphModule:
    """``gm`` itself when all its tensors already sit on ``device``, else a copy moved there."""
    tensors = list(gm.parameters()) + list(gm.buffers())
    if all(t.device == device for t in tensors) and (tensors or device.type == "cpu"):
        return gm
    return copy.deepcopy(gm).to(device)


def _conditions(device: torch.device, unmapped: list[str], threads: int) -> dict[str, Any]:
    # Measured times are only as good as the machine was quiet: keep the load beside them.
    try:
        load = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        load = None
    out: dict[str, Any] = {"threads": threads, "load_average": load}
    if device.type == "cuda":
        out["device_name"] = torch.cuda.get_device_name(device)
    if unmapped:
        out["unattributed_fx_nodes"] = len(unmapped)
    return out


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    a.setflags(write=False)
    return a
