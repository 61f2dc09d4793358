"""The placement problem (DOPPLER, HSDAG, HEFT): a device and a start time for every node.

A `PlacementProblem` wraps a `CompGraph` with devices and links and converts every duration and
transfer time, once, to integer ticks; the simulator, the CP-SAT model and the list schedulers all
read those same ticks, so their makespans are directly comparable. `Placement` is the common answer
(device per node, order per device) and `PlacementWindow` the relaxation's restriction of it.

Integer ranges. Ticks are int64 everywhere (durations, transfers, start times, makespans), so
the tick is chosen, or a given one checked, such that the horizon (every node at its slowest
plus every edge at its slowest transfer, an upper bound on any schedule's makespan) is at most
`MAX_HORIZON_TICKS` (2**50): sums of ticks then never wrap and stay exact even in float64. When
the automatic tick (about `TARGET_TOTAL_TICKS` of total work) would pass it, as with a
bandwidth of 1e-6 or a latency of 1e12 s against microsecond operations, the tick is coarsened
until the horizon fits; a given ``time_unit`` that is too fine, or times beyond float64, raise
`PlacementError` naming the limit. Device symmetry (`PlacementProblem.identical_devices`) is
found by hashing each device's links, in O(D^2) for link matrices and O(D) for uniform links; at
most `MAX_DEVICES` devices are accepted.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import FormatError, IncschedError
from ..formats import graph_from_dict, graph_to_dict
from ..graph import CompGraph
from ..jsonio import read_json, write_json

__all__ = [
    "Device",
    "Links",
    "PlacementProblem",
    "Placement",
    "PlacementWindow",
    "PlacementError",
    "PlacementInfeasibleError",
    "FORMAT",
    "VERSION",
    "TARGET_TOTAL_TICKS",
    "MAX_HORIZON_TICKS",
    "MAX_DEVICES",
]

FORMAT = "incsched.placement_problem"
PLACEMENT_FORMAT = "incsched.placement"
VERSION = 1

#: The automatic tick is chosen so that the graph's total work is about this many ticks: fine
#: enough that rounding moves a makespan by well under 0.1%, coarse enough for small CP-SAT domains.
TARGET_TOTAL_TICKS = 2e5

#: Most ticks a schedule's horizon may span (see the module notes): int64 sums of ticks cannot
#: wrap, and CP-SAT's start-time domains stay far inside its range.
MAX_HORIZON_TICKS = 2**50

#: Most devices a problem may have: transfer ticks are an [edges, D, D] table, so 1,000 devices
#: on resnet18 would need gigabytes before any solver starts.
MAX_DEVICES = 256


class PlacementError(IncschedError, ValueError):
    """A placement problem, placement or window is malformed (bad device, unknown node, bad order)."""


class PlacementInfeasibleError(PlacementError):
    """No placement can exist; ``node`` names the node that cannot go anywhere, when there is one."""

    def __init__(self, message: str, node: str | None = None):
        super().__init__(message)
        self.node = node


# ---------------------------------------------------------------------- devices and links


@dataclass(frozen=True)
class Device:
    """One device that runs operations one at a time.

    Parameters
    ----------
    name : str
        Unique label (``"gpu0"``).
    kind : str
        Device kind whose per-node times the graph supplies (``graph.time(kind)``).
    speed : float
        Relative speed: a node takes ``graph.time(kind)[v] / speed`` seconds here.
    memory : int, optional
        Bytes of parameters the device can hold; ``None`` for no limit.
    """

    name: str
    kind: str = "cpu"
    speed: float = 1.0
    memory: int | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise PlacementError(f"device name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.kind, str) or not self.kind:
            raise PlacementError(f"device {self.name!r}: kind must be a non-empty string, got {self.kind!r}")
        if isinstance(self.speed, bool) or not isinstance(self.speed, (int, float, np.integer, np.floating)):
            raise PlacementError(f"device {self.name!r}: speed must be a number, got {self.speed!r}")
        if not (math.isfinite(self.speed) and self.speed > 0):
            raise PlacementError(f"device {self.name!r}: speed must be finite and positive, got {self.speed}")
        object.__setattr__(self, "speed", float(self.speed))
        if self.memory is not None:
            if isinstance(self.memory, bool) or not isinstance(self.memory, (int, np.integer)) or self.memory < 0:
                raise PlacementError(
                    f"device {self.name!r}: memory must be a non-negative whole number of bytes or None, got {self.memory!r}"
                )
            object.__setattr__(self, "memory", int(self.memory))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "speed": self.speed, "memory": self.memory}


@dataclass(frozen=True, eq=False)
class Links:
    """Interconnect between devices: moving ``b`` bytes from d1 to d2 takes latency + b / bandwidth.

    Parameters
    ----------
    latency : float or array-like [D, D]
        Seconds per transfer, uniform or per ordered device pair (the diagonal is ignored).
    bandwidth : float, array-like [D, D] or None
        Bytes per second; ``None`` (or ``inf``) for an infinitely fast link.

    Transfers between a device and itself are always free.
    """

    latency: float | np.ndarray = 0.0
    bandwidth: float | np.ndarray | None = None

    def __post_init__(self):
        lat = _link_values("latency", self.latency, allow_zero=True)
        bw = _link_values("bandwidth", math.inf if self.bandwidth is None else self.bandwidth, allow_zero=False)
        if isinstance(lat, np.ndarray) and isinstance(bw, np.ndarray) and lat.shape != bw.shape:
            raise PlacementError(f"links: latency is {lat.shape} but bandwidth is {bw.shape}")
        object.__setattr__(self, "latency", lat)
        object.__setattr__(self, "bandwidth", bw)

    @property
    def uniform(self) -> bool:
        """True when every pair of distinct devices has the same latency and bandwidth."""
        return not isinstance(self.latency, np.ndarray) and not isinstance(self.bandwidth, np.ndarray)

    def matrices(self, n_devices: int) -> tuple[np.ndarray, np.ndarray]:
        """Latency and bandwidth as [D, D] arrays (uniform values broadcast)."""
        out = []
        for label, value in (("latency", self.latency), ("bandwidth", self.bandwidth)):
            if isinstance(value, np.ndarray):
                if value.shape != (n_devices, n_devices):
                    raise PlacementError(f"links: {label} matrix is {value.shape}, expected ({n_devices}, {n_devices})")
                out.append(value)
            else:
                out.append(np.full((n_devices, n_devices), value, dtype=np.float64))
        return out[0], out[1]

    def to_dict(self) -> dict[str, Any]:
        def enc(a, inf_as_none):
            if isinstance(a, np.ndarray):
                return [[(None if inf_as_none and math.isinf(x) else float(x)) for x in row] for row in a.tolist()]
            return None if inf_as_none and math.isinf(a) else float(a)

        return {"latency": enc(self.latency, False), "bandwidth": enc(self.bandwidth, True)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Links:
        bw = data.get("bandwidth")
        if isinstance(bw, list):
            bw = [[math.inf if x is None else x for x in row] for row in bw]
        return cls(latency=data.get("latency", 0.0), bandwidth=bw)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Links):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]


def _link_values(label: str, value, allow_zero: bool):
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise PlacementError(f"links: {label} must be a number or a square matrix of numbers, got {value!r}") from None
    if arr.ndim not in (0, 2) or (arr.ndim == 2 and arr.shape[0] != arr.shape[1]):
        raise PlacementError(f"links: {label} must be a number or a square [D, D] matrix, got shape {arr.shape}")
    off = arr if arr.ndim == 0 else arr[~np.eye(arr.shape[0], dtype=bool)]
    bad = np.isnan(off) | (off < 0) | (~allow_zero & (off == 0))
    if label == "latency":
        bad |= np.isinf(off)
    if np.any(bad):
        shown = float(np.asarray(off)[bad][0]) if arr.ndim else float(arr)
        need = "non-negative and finite" if allow_zero else "positive"
        raise PlacementError(f"links: {label} must be {need}, got {shown}")
    if arr.ndim == 0:
        return float(arr)
    arr = arr.copy()
    arr.setflags(write=False)
    return arr


# ---------------------------------------------------------------------- the problem


@dataclass(frozen=True, eq=False)
class PlacementProblem:
    """Place every node of ``graph`` on one of ``devices`` and order each device, minimising makespan.

    Parameters
    ----------
    graph : CompGraph
        The operations, their times per device kind, parameter bytes and edge bytes.
    devices : sequence of Device
        At least one; names unique.
    links : Links, optional
        Interconnect; default free and instantaneous.
    time_unit : float, optional
        Seconds per integer tick. Chosen automatically when omitted (a round 1/2/5 x 10^k value
        that makes the total work about `TARGET_TOTAL_TICKS` ticks) and recorded, so a saved
        problem converts to exactly the same ticks when loaded.
    name : str, optional
        Label for reports; defaults to the graph's name.

    Raises
    ------
    PlacementError
        No devices, duplicate device names, links of the wrong shape, a non-positive time unit.
    PlacementInfeasibleError
        A node's ``param_bytes`` exceed every device's memory (the message names the node).
    GraphError
        A device kind for which the graph has neither measured times nor a roofline estimate.

    Examples
    --------
    >>> g = CompGraph(["a", "b"], ["a"], ["b"], out_bytes=[1000, 0], compute_time={"cpu": [1e-3, 2e-3]})
    >>> p = PlacementProblem(g, [Device("d0"), Device("d1")], Links(latency=1e-3), time_unit=1e-4)
    >>> p.durations().tolist(), p.uniform_transfer_ticks().tolist()
    ([[10, 10], [20, 20]], [10])
    """

    graph: CompGraph
    devices: tuple[Device, ...]
    links: Links = field(default_factory=Links)
    time_unit: float | None = None
    name: str | None = None

    def __post_init__(self):
        if not isinstance(self.graph, CompGraph):
            raise PlacementError(f"graph must be a CompGraph, got {type(self.graph).__name__}")
        devices = tuple(self.devices)
        if not devices:
            raise PlacementError(f"placement problem for graph {self.graph.name!r} has no devices")
        for d in devices:
            if not isinstance(d, Device):
                raise PlacementError(f"devices must be Device objects, got {type(d).__name__} ({d!r})")
        seen: dict[str, int] = {}
        for i, d in enumerate(devices):
            if d.name in seen:
                raise PlacementError(f"duplicate device name {d.name!r} (devices {seen[d.name]} and {i})")
            seen[d.name] = i
        if len(devices) > MAX_DEVICES:
            raise PlacementError(
                f"placement problem for graph {self.graph.name!r} has {len(devices)} devices; at most {MAX_DEVICES} are "
                "supported (transfer times are a table over every pair of devices)"
            )
        object.__setattr__(self, "devices", devices)
        if self.links is None:
            object.__setattr__(self, "links", Links())
        if not isinstance(self.links, Links):
            raise PlacementError(f"links must be a Links object, got {type(self.links).__name__}")
        self.links.matrices(len(devices))  # shape check
        if self.name is None:
            object.__setattr__(self, "name", self.graph.name)

        seconds = self.durations_seconds()
        horizon = self._horizon_seconds()
        if self.time_unit is None:
            unit = _auto_time_unit(float(seconds.min(axis=1).sum()))
            if horizon / unit > MAX_HORIZON_TICKS:
                # Transfers (or one slow node) dwarf the total work: a coarser tick keeps int64 safe.
                unit = _round_unit_up(horizon / MAX_HORIZON_TICKS)
            object.__setattr__(self, "time_unit", unit)
        elif isinstance(self.time_unit, bool) or not (
            isinstance(self.time_unit, (int, float, np.floating)) and math.isfinite(self.time_unit) and self.time_unit > 0
        ):
            raise PlacementError(f"time_unit must be a positive number of seconds, got {self.time_unit!r}")
        elif horizon / float(self.time_unit) > MAX_HORIZON_TICKS:
            raise PlacementError(
                f"placement problem {self.name!r}: a schedule may span {horizon:.3g} s, {horizon / float(self.time_unit):.3g} "
                f"ticks of {float(self.time_unit):g} s, beyond the supported 2**50 ticks; use a time_unit of at least "
                f"{_round_unit_up(horizon / MAX_HORIZON_TICKS):g} s"
            )
        object.__setattr__(self, "time_unit", float(self.time_unit))
        self._check_memory()

    def _horizon_seconds(self) -> float:
        """Every node at its slowest plus every edge over its slowest link: no schedule takes longer.

        Computed from the link matrices' extremes (not the [m, D, D] table), so it is an upper
        bound in O(n D + m + D^2). Raises `PlacementError` when it is not a finite float.
        """
        sec = self._seconds
        work = float(sec.max(axis=1).sum()) if sec.size else 0.0
        transfers = 0.0
        if self.n_devices > 1 and self.graph.n_edges:
            lat, bw = self.links.matrices(self.n_devices)
            off = ~np.eye(self.n_devices, dtype=bool)
            transfers = self.graph.n_edges * float(lat[off].max()) + float(self.graph.edge_bytes.sum()) / float(bw[off].min())
        horizon = work + transfers
        if not math.isfinite(horizon):
            raise PlacementError(
                f"placement problem {self.name!r}: node and transfer times add up to more than a float64 holds "
                f"(work {work:.3g} s, transfers {transfers:.3g} s); check the speeds, latencies and bandwidths"
            )
        return horizon

    def _check_memory(self) -> None:
        caps = [d.memory for d in self.devices]
        if all(c is None for c in caps):
            return
        largest = math.inf if any(c is None for c in caps) else max(caps)
        # Compared as Python ints (memories may exceed int64; floats round above 2**53).
        too_big = [v for v, p in enumerate(self.graph.param_bytes.tolist()) if p > largest]
        too_big = np.asarray(too_big, dtype=np.int64)
        if too_big.size:
            v = int(too_big[0])
            nm = self.graph.names[v]
            raise PlacementInfeasibleError(
                f"placement problem {self.name!r} is infeasible: node {nm!r} has {int(self.graph.param_bytes[v])} "
                f"parameter bytes, more than any device holds (largest memory {int(largest)} bytes)",
                node=nm,
            )

    # ------------------------------------------------------------------ sizes and costs

    @property
    def n_nodes(self) -> int:
        return self.graph.n_nodes

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def durations_seconds(self) -> np.ndarray:
        """Seconds of each node on each device, [n, D] float64."""
        return self._seconds

    @cached_property
    def _seconds(self) -> np.ndarray:
        times = {}
        for d in self.devices:
            if d.kind not in times:
                times[d.kind] = np.asarray(self.graph.time(d.kind), dtype=np.float64)
        out = np.stack([times[d.kind] / d.speed for d in self.devices], axis=1) if self.n_nodes else np.zeros((0, self.n_devices))
        out.setflags(write=False)
        return out

    def durations(self) -> np.ndarray:
        """Ticks of each node on each device, [n, D] int64, rounded half up and at least one tick.

        The one-tick floor keeps every operation a real interval, so that "one at a time per
        device" and "the order by start time" mean the same thing to the solver and the simulator.
        """
        return self._durations

    @cached_property
    def _durations(self) -> np.ndarray:
        ticks = np.maximum(_to_ticks(self._seconds, self.time_unit), 1)
        ticks.setflags(write=False)
        return ticks

    def transfer_seconds(self) -> np.ndarray:
        """Seconds to move each edge's bytes between each ordered device pair, [m, D, D]; zero on the diagonal."""
        lat, bw = self.links.matrices(self.n_devices)
        sec = lat[None, :, :] + self.graph.edge_bytes.astype(np.float64)[:, None, None] / bw[None, :, :]
        sec[:, np.arange(self.n_devices), np.arange(self.n_devices)] = 0.0
        return sec

    def transfer_ticks(self) -> np.ndarray:
        """Ticks to move each edge between each ordered device pair, [m, D, D] int64; zero on the diagonal."""
        return self._transfer_ticks

    @cached_property
    def _transfer_ticks(self) -> np.ndarray:
        ticks = _to_ticks(self.transfer_seconds(), self.time_unit)
        ticks.setflags(write=False)
        return ticks

    def uniform_transfer_ticks(self) -> np.ndarray | None:
        """Per-edge ticks when every pair of distinct devices costs the same, [m] int64; else None."""
        return self._uniform_ticks

    @cached_property
    def _uniform_ticks(self) -> np.ndarray | None:
        D, m = self.n_devices, self.graph.n_edges
        if D == 1:
            out = np.zeros(m, dtype=np.int64)
        else:
            off = self.transfer_ticks()[:, ~np.eye(D, dtype=bool)]  # [m, D*(D-1)]
            if m and not np.all(off == off[:, :1]):
                return None
            out = off[:, 0].copy() if m else np.zeros(0, dtype=np.int64)
        out.setflags(write=False)
        return out

    def signature(self) -> bytes:
        """What the problem is up to node names: durations, edges, transfer ticks, parameter bytes
        and device memories. Repeated blocks of a graph give equal signatures, so their
        subproblems are solved (and bounded) once."""
        g = self.graph
        parts = (self.durations(), g.src, g.dst, self.transfer_ticks(), g.param_bytes)
        shapes = [a.shape for a in parts] + [d.memory for d in self.devices]
        return b"|".join(np.ascontiguousarray(a).tobytes() for a in parts) + repr(shapes).encode()

    def allowed_devices(self) -> np.ndarray:
        """Boolean [n, D]: which devices can hold each node's parameters on their own."""
        # int64, not float64: 2**53 + 1 bytes must not fit a device of 2**53. Memories beyond the
        # graph's total (<= 2**62) are clamped there, which changes no comparison.
        cap = int(self.graph.param_bytes.sum())
        mem = np.array([cap if d.memory is None else min(d.memory, cap) for d in self.devices], dtype=np.int64)
        return self.graph.param_bytes[:, None] <= mem[None, :]

    @cached_property
    def identical_devices(self) -> tuple[tuple[int, ...], ...]:
        """Groups of interchangeable devices (same kind, speed, memory and links), each sorted.

        Two devices are interchangeable when swapping them leaves every cost unchanged; since
        swaps generate all permutations, each group may be relabelled freely (symmetry breaking).
        """
        D = self.n_devices
        parent = list(range(D))

        def find(a):
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        attrs = [(d.kind, d.speed, d.memory) for d in self.devices]
        if self.links.uniform:
            # Uniform links: only kind, speed and memory tell devices apart. O(D).
            first: dict[tuple, int] = {}
            for d, key in enumerate(attrs):
                parent[d] = first.setdefault(key, d)
        else:
            lat, bw = self.links.matrices(D)
            for a, b in _twin_candidates(attrs, lat, bw):
                ra, rb = find(a), find(b)
                # Candidates come from a hash; each is verified exactly, and only while the two
                # devices are not yet known to be together, so at most D - 1 checks succeed.
                if ra != rb and _swappable(self.devices, lat, bw, a, b):
                    parent[max(ra, rb)] = min(ra, rb)
        groups: dict[int, list[int]] = {}
        for d in range(D):
            groups.setdefault(find(d), []).append(d)
        return tuple(tuple(g) for g in sorted(groups.values()))

    def total_work_ticks(self) -> int:
        """Sum over nodes of their fastest duration: total work / devices bounds the makespan below."""
        return int(self.durations().min(axis=1).sum()) if self.n_nodes else 0

    def critical_path_ticks(self) -> int:
        """Longest path with fastest durations and free transfers: a lower bound on the makespan."""
        if not self.n_nodes:
            return 0
        return int(round(self.graph.longest_path(self.durations().min(axis=1).astype(np.float64), None)[0]))

    def lower_bound_ticks(self) -> int:
        """max(critical path, ceil(total work / devices)): the trivial global lower bound."""
        return max(self.critical_path_ticks(), -(-self.total_work_ticks() // self.n_devices))

    def seconds(self, ticks) -> float | np.ndarray:
        """Convert ticks to seconds with this problem's time unit."""
        if np.ndim(ticks) == 0:
            return float(ticks) * self.time_unit
        return np.asarray(ticks, dtype=np.float64) * self.time_unit

    # ------------------------------------------------------------------ construction helpers

    @classmethod
    def identical(
        cls,
        graph: CompGraph,
        n_devices: int,
        *,
        kind: str = "cpu",
        latency: float = 0.0,
        bandwidth: float | None = None,
        memory: int | None = None,
        time_unit: float | None = None,
    ) -> PlacementProblem:
        """``n_devices`` identical devices named ``{kind}0..`` behind uniform links."""
        if n_devices < 1:
            raise PlacementError(f"need at least one device, got {n_devices}")
        devices = [Device(f"{kind}{i}", kind=kind, memory=memory) for i in range(n_devices)]
        return cls(graph, devices, Links(latency=latency, bandwidth=bandwidth), time_unit=time_unit)

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        """The versioned JSON-ready dictionary (graph embedded in its own format)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "graph": graph_to_dict(self.graph),
            "devices": [d.to_dict() for d in self.devices],
            "links": self.links.to_dict(),
            "time_unit": self.time_unit,
        }

    @classmethod
    def from_json(cls, data: Any, *, source: str = "placement problem") -> PlacementProblem:
        """Rebuild from `to_json`'s form.

        Raises
        ------
        FormatError
            Wrong format or version, missing field; the message names ``source``.
        PlacementError, GraphError
            The file is well-formed but describes an invalid problem.
        """
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise FormatError(f"{source}: not an incsched placement problem (format is {found!r}, expected {FORMAT!r})")
        if data.get("version") != VERSION:
            raise FormatError(f"{source}: placement problem version {data.get('version')!r} is not supported (expected {VERSION})")
        for key in ("graph", "devices"):
            if key not in data:
                raise FormatError(f"{source}: missing field {key!r}")
        graph = graph_from_dict(data["graph"], source=source)
        try:
            devices = [Device(**{k: d[k] for k in ("name", "kind", "speed", "memory") if k in d}) for d in data["devices"]]
        except TypeError as exc:
            raise FormatError(f"{source}: malformed device entry ({exc})") from None
        return cls(
            graph,
            devices,
            Links.from_dict(data.get("links") or {}),
            time_unit=data.get("time_unit"),
            name=data.get("name"),
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write the problem as JSON (gzipped if the name ends in ``.gz``), atomically."""
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> PlacementProblem:
        """Read a problem written by `save`."""
        return cls.from_json(read_json(path), source=str(path))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlacementProblem):
            return NotImplemented
        return self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"PlacementProblem({self.name!r}, nodes={self.n_nodes}, devices={self.n_devices}, "
            f"time_unit={self.time_unit:g}s)"
        )


def _to_ticks(seconds: np.ndarray, time_unit: float) -> np.ndarray:
    # Half-up rounding (not numpy's half-to-even) so the rule is the one a reader would guess.
    ticks = np.floor(np.asarray(seconds, dtype=np.float64) / time_unit + 0.5)
    # The horizon check makes this unreachable from a constructed problem; a cast of inf or 1e20
    # to int64 would give -9.2e18 silently, so it is checked here too.
    if ticks.size and not (np.all(np.isfinite(ticks)) and float(ticks.max()) <= MAX_HORIZON_TICKS):
        raise PlacementError(f"a time of {float(np.nanmax(seconds)):.3g} s is beyond 2**50 ticks of {time_unit:g} s")
    return ticks.astype(np.int64)


def _round_unit_up(raw: float) -> float:
    """The smallest 1/2/5 x 10^k value at least ``raw`` (a tick that reads well in reports)."""
    exp = math.floor(math.log10(raw))
    for mant in (1.0, 2.0, 5.0, 10.0):
        unit = float(f"{mant * 10.0**exp:.6g}")
        if unit >= raw:
            return unit
    return float(f"{10.0 ** (exp + 1):.6g}")


def _auto_time_unit(total_seconds: float) -> float:
    if not total_seconds > 0:
        return 1e-6
    raw = total_seconds / TARGET_TOTAL_TICKS
    if raw < 1e-300:
        # Subnormal work (5e-324 s): its log10 and 10**exp underflow; such times are all but zero.
        return 1e-300
    exp = math.floor(math.log10(raw))
    for mant in (5.0, 2.0, 1.0):
        unit = mant * 10.0**exp
        if unit <= raw * (1 + 1e-12):
            return float(f"{unit:.6g}")
    return float(f"{10.0**exp:.6g}")


def _twin_candidates(attrs, lat: np.ndarray, bw: np.ndarray):
    """Device pairs (a, b) that may be swappable, from an O(D^2) hash of the link matrices.

    For a matrix M and device a let g(a) = sum_{k != a} f(k, M[a, k]), with f(k, x) a random
    64-bit hash of position k and value x. If a and b are swappable (equal rows and columns off
    {a, b}, M[a, b] == M[b, a] == x) then g(a) + f(a, x) == g(b) + f(b, x): the key
    H[a, b] = g(a) + f(a, M[a, b]) (and the same over columns, for both matrices, plus the
    device's kind, speed and memory) equals H[b, a]. So every swappable pair has H == H.T; the
    converse holds up to hash collisions, which the caller's exact check removes.
    """
    D = lat.shape[0]
    rng = np.random.default_rng(0x5EED)  # fixed: the grouping must not depend on the run
    pos = rng.integers(1, 2**63, size=D, dtype=np.uint64) | np.uint64(1)
    off = ~np.eye(D, dtype=bool)
    key = np.zeros((D, D), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for m in (lat, bw):
            vals = np.where(off, m + 0.0, 0.0)  # + 0.0 folds -0.0 into 0.0; the diagonal is ignored
            hv = _mix(vals.view(np.uint64))
            for mat in (hv, hv.T):  # rows, then columns
                f = mat * pos[None, :]  # f(k, M[a, k]) for row a, column k
                g = np.where(off, f, np.uint64(0)).sum(axis=1, dtype=np.uint64)
                h = g[:, None] + mat * pos[:, None]  # g(a) + f(a, M[a, b]) at [a, b]
                key = _mix(key * np.uint64(0x9E3779B97F4A7C15) + h)
            key = _mix(key + hv)  # the pair's own value M[a, b] (equal to M[b, a] for twins)
        device_hash = np.array([int.from_bytes(hashlib.blake2b(repr(a).encode(), digest_size=8).digest(), "little") for a in attrs], dtype=np.uint64)
        key = _mix(key + device_hash[:, None])
    a_idx, b_idx = np.nonzero(np.triu(key == key.T, k=1))
    return zip(a_idx.tolist(), b_idx.tolist())


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _swappable(devices, lat, bw, a, b) -> bool:
    da, db = devices[a], devices[b]
    if (da.kind, da.speed, da.memory) != (db.kind, db.speed, db.memory):
        return False
    others = np.ones(len(devices), dtype=bool)
    others[[a, b]] = False
    for m in (lat, bw):
        if m[a, b] != m[b, a]:
            return False
        if not (np.array_equal(m[a, others], m[b, others]) and np.array_equal(m[others, a], m[others, b])):
            return False
    return True


# ---------------------------------------------------------------------- answers and windows


@dataclass(frozen=True, eq=False)
class Placement:
    """A device per node and the order each device runs its nodes in; optionally start times.

    The common answer of the list schedulers, the CP-SAT model, the simulator and the RL policy.

    Parameters
    ----------
    device : array-like of int [n]
        Device index of each node.
    order : sequence of sequences of int
        For each device, its nodes in execution order; together a partition of the nodes that
        agrees with ``device``.
    start : array-like of int [n], optional
        Start tick of each node, when the producer planned them.
    method : str
        Who produced it (``"heft"``, ``"cpsat"`` ...), for reports.

    Raises
    ------
    PlacementError
        If ``order`` does not partition the nodes consistently with ``device``.
    """

    device: np.ndarray
    order: tuple[tuple[int, ...], ...]
    start: np.ndarray | None = None
    method: str = ""

    def __post_init__(self):
        device = np.asarray(self.device, dtype=np.int64).reshape(-1).copy()
        device.setflags(write=False)
        order = tuple(tuple(int(v) for v in seq) for seq in self.order)
        n, D = len(device), len(order)
        if n and (device.min() < 0 or device.max() >= D):
            v = int(np.flatnonzero((device < 0) | (device >= D))[0])
            raise PlacementError(f"node {v} is placed on device {int(device[v])}, but the order lists {D} devices")
        seen = np.full(n, -1, dtype=np.int64)
        for d, seq in enumerate(order):
            for v in seq:
                if not 0 <= v < n:
                    raise PlacementError(f"device {d}'s order lists node {v}, not a node index (0..{n - 1})")
                if seen[v] >= 0:
                    raise PlacementError(f"node {v} appears twice in the device orders (devices {int(seen[v])} and {d})")
                if device[v] != d:
                    raise PlacementError(f"node {v} is ordered on device {d} but placed on device {int(device[v])}")
                seen[v] = d
        missing = np.flatnonzero(seen < 0)
        if missing.size:
            raise PlacementError(f"node {int(missing[0])} is in no device's order ({missing.size} nodes missing)")
        start = self.start
        if start is not None:
            start = np.asarray(start, dtype=np.int64).reshape(-1).copy()
            if start.shape != (n,):
                raise PlacementError(f"start has {start.size} entries for {n} nodes")
            start.setflags(write=False)
        object.__setattr__(self, "device", device)
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "start", start)

    @property
    def n_devices(self) -> int:
        return len(self.order)

    @classmethod
    def from_assignment(
        cls,
        device: Sequence[int] | np.ndarray,
        n_devices: int,
        *,
        start: Sequence[int] | np.ndarray | None = None,
        priority: Sequence[int] | np.ndarray | None = None,
        method: str = "",
    ) -> Placement:
        """Build the per-device orders from an assignment.

        Nodes are ordered by ``start`` when given, else by ``priority`` (e.g. a topological
        position), else by index; remaining ties by index.
        """
        device = np.asarray(device, dtype=np.int64).reshape(-1)
        n = len(device)
        key = np.arange(n) if priority is None else np.asarray(priority)
        if start is not None:
            ranks = np.lexsort((np.arange(n), key, np.asarray(start)))
        else:
            ranks = np.lexsort((np.arange(n), key))
        order: list[list[int]] = [[] for _ in range(n_devices)]
        for v in ranks.tolist():
            if not 0 <= device[v] < n_devices:
                raise PlacementError(f"node {v} is placed on device {int(device[v])}, not one of 0..{n_devices - 1}")
            order[device[v]].append(v)
        return cls(device, tuple(tuple(o) for o in order), start=start, method=method)

    def relabel(self, mapping: Sequence[int]) -> Placement:
        """The same schedule with device d renamed ``mapping[d]`` (a permutation)."""
        mapping = np.asarray(mapping, dtype=np.int64)
        if sorted(mapping.tolist()) != list(range(self.n_devices)):
            raise PlacementError(f"device relabelling {mapping.tolist()} is not a permutation of 0..{self.n_devices - 1}")
        order: list[tuple[int, ...]] = [()] * self.n_devices
        for d, seq in enumerate(self.order):
            order[int(mapping[d])] = seq
        return Placement(mapping[self.device], tuple(order), start=self.start, method=self.method)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": PLACEMENT_FORMAT,
            "version": VERSION,
            "method": self.method,
            "device": self.device.tolist(),
            "order": [list(seq) for seq in self.order],
            "start": None if self.start is None else self.start.tolist(),
        }

    @classmethod
    def from_json(cls, data: Any, *, source: str = "placement") -> Placement:
        if not isinstance(data, dict) or data.get("format") != PLACEMENT_FORMAT:
            raise FormatError(f"{source}: not an incsched placement (expected format {PLACEMENT_FORMAT!r})")
        if data.get("version") != VERSION:
            raise FormatError(f"{source}: placement version {data.get('version')!r} is not supported (expected {VERSION})")
        for key in ("device", "order"):
            if key not in data:
                raise FormatError(f"{source}: missing field {key!r}")
        return cls(data["device"], data["order"], start=data.get("start"), method=data.get("method", ""))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Placement):
            return NotImplemented
        return self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class PlacementWindow:
    """The relaxation's restriction of a placement: allowed devices and start ranges per node.

    Parameters
    ----------
    allowed : bool array-like [n, D], optional
        ``allowed[v, d]``: node v may run on device d. ``None`` allows every device.
    start_lo, start_hi : int array-like [n], optional
        Inclusive start-tick range per node; ``None`` for unbounded.

    Raises
    ------
    PlacementError
        On wrong shapes, or a node with an empty start range.
    """

    allowed: np.ndarray | None = None
    start_lo: np.ndarray | None = None
    start_hi: np.ndarray | None = None

    def __post_init__(self):
        if self.allowed is not None:
            a = np.asarray(self.allowed, dtype=bool)
            if a.ndim != 2:
                raise PlacementError(f"window: allowed must be an [n, D] boolean array, got shape {a.shape}")
            a = a.copy()
            a.setflags(write=False)
            object.__setattr__(self, "allowed", a)
        for key in ("start_lo", "start_hi"):
            v = getattr(self, key)
            if v is not None:
                arr = np.asarray(v, dtype=np.int64).reshape(-1).copy()
                arr.setflags(write=False)
                object.__setattr__(self, key, arr)
        if self.start_lo is not None and self.start_hi is not None:
            if self.start_lo.shape != self.start_hi.shape:
                raise PlacementError("window: start_lo and start_hi have different lengths")
            bad = np.flatnonzero(self.start_lo > self.start_hi)
            if bad.size:
                v = int(bad[0])
                raise PlacementError(
                    f"window: node {v} has an empty start range [{int(self.start_lo[v])}, {int(self.start_hi[v])}]"
                )

    @classmethod
    def from_devices(cls, devices: Sequence[Sequence[int]], n_devices: int, **ranges) -> PlacementWindow:
        """A window from per-node lists of allowed device indices."""
        allowed = np.zeros((len(devices), n_devices), dtype=bool)
        for v, ds in enumerate(devices):
            allowed[v, list(ds)] = True
        return cls(allowed, **ranges)

    def check(self, problem: PlacementProblem) -> None:
        """Raise `PlacementError` if the window's shapes do not fit ``problem``."""
        n, D = problem.n_nodes, problem.n_devices
        if self.allowed is not None and self.allowed.shape != (n, D):
            raise PlacementError(f"window: allowed is {self.allowed.shape}, problem has ({n}, {D})")
        for key in ("start_lo", "start_hi"):
            v = getattr(self, key)
            if v is not None and v.shape != (n,):
                raise PlacementError(f"window: {key} has {v.size} entries for {n} nodes")

    def contains(self, problem: PlacementProblem, device: np.ndarray, start: np.ndarray | None = None) -> bool:
        """Whether an assignment (and start ticks, when given) lies inside the window."""
        self.check(problem)
        device = np.asarray(device, dtype=np.int64)
        if self.allowed is not None and not np.all(self.allowed[np.arange(problem.n_nodes), device]):
            return False
        if start is not None:
            start = np.asarray(start, dtype=np.int64)
            if self.start_lo is not None and np.any(start < self.start_lo):
                return False
            if self.start_hi is not None and np.any(start > self.start_hi):
                return False
        return True
