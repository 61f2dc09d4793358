"""The placement problem (DOPPLER, HSDAG, HEFT): a device and a start time for every node.

A `PlacementProblem` wraps a `CompGraph` with devices and links (`incsched.problems.devices`) and
converts every duration and transfer time, once, to integer ticks; the simulator, the CP-SAT model
and the list schedulers all read those same ticks, so their makespans are directly comparable.
Their common answer is a `Placement` (`incsched.problems.answers`).

Integer ranges. Ticks are int64 everywhere (durations, transfers, start times, makespans), so
the tick is chosen, or a given one checked, such that the horizon (every node at its slowest
plus every edge at its slowest transfer, an upper bound on any schedule's makespan) is at most
`MAX_HORIZON_TICKS` (2**50): sums of ticks then never wrap and stay exact even in float64. The
automatic tick is the rule both problems share (`incsched.problems.units.auto_time_unit`: total
work of at least 10**6 ticks), coarsened when the horizon would pass the limit, as with a
bandwidth of 1e-6 or a latency of 1e12 s against microsecond operations; a given ``time_unit``
that is too fine, or times beyond float64, raise `PlacementError` naming the limit. At most
`MAX_DEVICES` devices are accepted, and the [edges, D, D] transfer table at most
``max_transfer_table_bytes`` (`incsched.limits`, 1 GiB unless ``INCSCHED_MAX_TRANSFER_TABLE_BYTES``
says otherwise): a problem whose table would not fit is refused when it is made.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import FormatError, LimitError, PlacementError, PlacementInfeasibleError
from ..formats import graph_from_dict, graph_to_dict
from ..graph import CompGraph
from ..jsonio import read_json, write_json
from ..limits import ENV_VARS, input_limits
from .devices import Device, Links, identical_device_groups
from .documents import check_document
from .units import auto_time_unit, finest_time_unit

__all__ = ["PlacementProblem", "DeviceMemory", "FORMAT", "VERSION", "MAX_HORIZON_TICKS", "MAX_DEVICES"]

FORMAT = "incsched.placement_problem"
VERSION = 1

#: Most ticks a schedule's horizon may span (see the module notes): int64 sums of ticks cannot
#: wrap, and CP-SAT's start-time domains stay far inside its range.
MAX_HORIZON_TICKS = 2**50

#: Most devices a problem may have: transfer ticks are an [edges, D, D] table, so 1,000 devices
#: on resnet18 would need gigabytes before any solver starts.
MAX_DEVICES = 256


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
        Seconds per integer tick. Chosen automatically when omitted (`auto_time_unit`: a round
        1/2/5 x 10^k value giving the total work on the fastest devices at least 10**6 ticks, coarser
        if the horizon needs it) and recorded, so a saved problem converts to exactly the same
        ticks when loaded.
    name : str, optional
        Label for reports; defaults to the graph's name.

    Raises
    ------
    PlacementError
        No devices, duplicate device names, links of the wrong shape, a non-positive time unit.
    PlacementInfeasibleError
        A node's weights (its ``param_bytes`` and the shared weights it reads) exceed every
        device's memory (the message names the node).
    LimitError
        The transfer table (edges x devices x devices ticks) would pass the
        ``max_transfer_table_bytes`` input limit.
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
        self._check_table_size()
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
            # Transfers (or one slow node) may dwarf the total work: then a coarser tick keeps int64 safe.
            work = float(seconds.min(axis=1).sum()) if seconds.size else 0.0
            object.__setattr__(self, "time_unit", auto_time_unit(work, span_seconds=horizon, max_ticks=MAX_HORIZON_TICKS))
        elif isinstance(self.time_unit, bool) or not (
            isinstance(self.time_unit, (int, float, np.floating)) and math.isfinite(self.time_unit) and self.time_unit > 0
        ):
            raise PlacementError(f"time_unit must be a positive number of seconds, got {self.time_unit!r}")
        elif horizon / float(self.time_unit) > MAX_HORIZON_TICKS:
            raise PlacementError(
                f"placement problem {self.name!r}: a schedule may span {horizon:.3g} s, {horizon / float(self.time_unit):.3g} "
                f"ticks of {float(self.time_unit):g} s, beyond the supported 2**50 ticks; use a time_unit of at least "
                f"{finest_time_unit(horizon, MAX_HORIZON_TICKS):g} s"
            )
        object.__setattr__(self, "time_unit", float(self.time_unit))
        self._check_memory()

    def _check_table_size(self) -> None:
        """Refuse, before anything is allocated, a transfer table larger than the input limit: at
        5,197 edges on 256 devices it is 2.7 GB of int64 ticks, and the solvers copy it."""
        m, D = self.graph.n_edges, len(self.devices)
        table = 8 * m * D * D
        limit = input_limits().max_transfer_table_bytes
        if table > limit:
            raise LimitError(
                f"placement problem for graph {self.graph.name!r}: its transfer table of {m:,} edges x {D} x {D} devices "
                f"needs {table:,} bytes, more than the limit of {limit:,} (set {ENV_VARS['max_transfer_table_bytes']} "
                "to raise it, or use fewer devices)"
            )

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
        # A node needs its own weights and every shared weight it reads on its device. Compared as
        # Python ints (memories may exceed int64; floats round above 2**53).
        need = self.graph.node_weight_bytes.tolist()
        too_big = [v for v, p in enumerate(need) if p > largest]
        if too_big:
            v = too_big[0]
            nm = self.graph.names[v]
            shared = need[v] - int(self.graph.param_bytes[v])
            what = f"{need[v]} parameter bytes" + (f" ({shared} of them in shared weights it reads)" if shared else "")
            raise PlacementInfeasibleError(
                f"placement problem {self.name!r} is infeasible: node {nm!r} needs {what}, more than any device "
                f"holds (largest memory {int(largest)} bytes)",
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
        # In place after the one [m, D, D] allocation: the table is the largest array of a problem.
        sec = self.graph.edge_bytes.astype(np.float64)[:, None, None] / bw[None, :, :]
        sec += lat[None, :, :]
        sec[:, np.arange(self.n_devices), np.arange(self.n_devices)] = 0.0
        return sec

    def transfer_ticks(self) -> np.ndarray:
        """Ticks to move each edge between each ordered device pair, [m, D, D] int64; zero on the diagonal."""
        return self._transfer_ticks

    @cached_property
    def _transfer_ticks(self) -> np.ndarray:
        ticks = _to_ticks(self.transfer_seconds(), self.time_unit, in_place=True)
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
        (shared weights included) and device memories. Repeated blocks of a graph give equal
        signatures, so their subproblems are solved (and bounded) once."""
        g = self.graph
        parts = (self.durations(), g.src, g.dst, self.transfer_ticks(), g.param_bytes)
        shapes = [a.shape for a in parts] + [d.memory for d in self.devices]
        if g.shared_weights:
            shapes.append([(w.nbytes, w.readers) for w in g.shared_weights])
        return b"|".join(np.ascontiguousarray(a).tobytes() for a in parts) + repr(shapes).encode()

    def allowed_devices(self) -> np.ndarray:
        """Boolean [n, D]: which devices can hold each node's parameters (shared weights it reads included) on their own."""
        # int64, not float64: 2**53 + 1 bytes must not fit a device of 2**53. Memories beyond the
        # graph's total (<= 2**62) are clamped there, which changes no comparison.
        # A node's need counts the shared weights it reads: they must sit on its device too.
        cap = self.graph.total_param_bytes
        mem = np.array([cap if d.memory is None else min(d.memory, cap) for d in self.devices], dtype=np.int64)
        return self.graph.node_weight_bytes[:, None] <= mem[None, :]

    @cached_property
    def identical_devices(self) -> tuple[tuple[int, ...], ...]:
        """Groups of interchangeable devices, each sorted (`identical_device_groups`)."""
        return identical_device_groups(self.devices, self.links)

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
        check_document(data, format=FORMAT, version=VERSION, fields=("graph", "devices"), noun="placement problem", source=source)
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


class DeviceMemory:
    """Parameter bytes left on each device while a heuristic places nodes one at a time.

    Placing node v on device d costs its ``param_bytes`` plus each shared weight it reads that no
    node placed on d so far reads: a tied weight is charged once per device that holds a reader,
    as `CompGraph.part_param_bytes` counts it. Python ints throughout (``math.inf``: no limit),
    so bytes near 2**62 never round.

    >>> g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[1, 2],
    ...               shared_weights=[{"name": "w", "bytes": 8, "read_by": ["a", "b"]}])
    >>> mem = DeviceMemory(PlacementProblem.identical(g, 2, memory=11, time_unit=1.0))
    >>> mem.take(0, 0); mem.cost(1, 0), mem.cost(1, 1), mem.fits(1, 0), mem.left
    (2, 10, True, [2, 11])
    """

    def __init__(self, problem: PlacementProblem):
        g = problem.graph
        self.left: list[int | float] = [math.inf if d.memory is None else int(d.memory) for d in problem.devices]
        self._own = g.param_bytes.tolist()
        self._reads: list[list[tuple[int, int]]] = [[] for _ in range(g.n_nodes)]
        for i, w in enumerate(g.shared_weights):
            for r in w.readers:
                self._reads[r].append((i, w.nbytes))
        self._held: list[set[int]] = [set() for _ in problem.devices]

    def cost(self, v: int, d: int) -> int:
        """Bytes that placing node ``v`` on device ``d`` adds there now."""
        held = self._held[d]
        return self._own[v] + sum(b for i, b in self._reads[v] if i not in held)

    def fits(self, v: int, d: int) -> bool:
        """Whether node ``v`` fits on device ``d`` beside what is placed there."""
        return self.cost(v, d) <= self.left[d]

    def take(self, v: int, d: int) -> None:
        """Place node ``v`` on device ``d``: its bytes (and the shared weights it brings) are used there."""
        self.left[d] -= self.cost(v, d)
        self._held[d].update(i for i, _ in self._reads[v])


def _to_ticks(seconds: np.ndarray, time_unit: float, in_place: bool = False) -> np.ndarray:
    # Half-up rounding (not numpy's half-to-even) so the rule is the one a reader would guess.
    # ``in_place`` overwrites ``seconds`` (a float64 array the caller owns) with the same values.
    if in_place:
        ticks = seconds
        ticks /= time_unit
        ticks += 0.5
        np.floor(ticks, out=ticks)
    else:
        ticks = np.floor(np.asarray(seconds, dtype=np.float64) / time_unit + 0.5)
    # The horizon check makes this unreachable from a constructed problem; a cast of inf or 1e20
    # to int64 would give -9.2e18 silently, so it is checked here too.
    if ticks.size and not (np.all(np.isfinite(ticks)) and float(ticks.max()) <= MAX_HORIZON_TICKS):
        worst = float(np.nanmax(ticks)) * time_unit if in_place else float(np.nanmax(seconds))
        raise PlacementError(f"a time of {worst:.3g} s is beyond 2**50 ticks of {time_unit:g} s")
    return ticks.astype(np.int64)
