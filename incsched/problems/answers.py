"""What a placement solver answers: `Placement` (a device per node, an order per device, start
ticks when planned) and the window a solver may be restricted to (`PlacementWindow`).

Every producer (list schedulers, the CP-SAT model, the RL policy) returns a `Placement`; the
simulator evaluates it and execution runs it. The relaxation step narrows a problem to a
`PlacementWindow` (allowed devices and start ranges per node) around an incumbent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import PlacementError
from .documents import check_document

if TYPE_CHECKING:
    from .placement import PlacementProblem

__all__ = ["Placement", "PlacementWindow", "PLACEMENT_FORMAT", "PLACEMENT_VERSION"]

PLACEMENT_FORMAT = "incsched.placement"
PLACEMENT_VERSION = 1


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
            "version": PLACEMENT_VERSION,
            "method": self.method,
            "device": self.device.tolist(),
            "order": [list(seq) for seq in self.order],
            "start": None if self.start is None else self.start.tolist(),
        }

    @classmethod
    def from_json(cls, data: Any, *, source: str = "placement") -> Placement:
        check_document(data, format=PLACEMENT_FORMAT, version=PLACEMENT_VERSION, fields=("device", "order"), noun="placement", source=source)
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
