"""The machines of a placement problem: `Device` (kind, speed, memory) and `Links` (latency and
bandwidth between devices), and which devices are interchangeable (`identical_device_groups`).

A `PlacementProblem` reads them to turn seconds into ticks; symmetry breaking in the CP-SAT model
and the bounds read the groups. Interchangeable devices are found by hashing each device's links,
in O(D^2) for link matrices and O(D) for uniform links, each candidate pair then checked exactly.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph.dag import find_root
from ..errors import PlacementError

__all__ = ["Device", "Links", "identical_device_groups"]


@dataclass(frozen=True)
class Device:
    """One device that runs operations one at a time.

    Parameters
    ----------
    name : str
        Unique label (``"gpu0"``).
    kind : str
        Device kind whose per-node times the graph supplies (``graph.time(kind)``): measured, else
        estimated by the roofline preset of that name (`incsched.graph.cost_model.ROOFLINES`).
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
        if not isinstance(data, Mapping):
            raise PlacementError(f"links must be an object with latency and bandwidth, got {type(data).__name__}")
        unknown = set(data) - {"latency", "bandwidth"}
        if unknown:
            raise PlacementError(f"links: unknown field(s) {sorted(unknown)}; expected latency and bandwidth")
        bw = data.get("bandwidth")
        if isinstance(bw, list):
            if not all(isinstance(row, list) for row in bw):
                raise PlacementError("links: bandwidth must be a number or a list of rows (lists)")
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


# ---------------------------------------------------------------------- interchangeable devices


def identical_device_groups(devices: Sequence[Device], links: Links) -> tuple[tuple[int, ...], ...]:
    """Groups of interchangeable devices (same kind, speed, memory and links), each sorted.

    Two devices are interchangeable when swapping them leaves every cost unchanged; since swaps
    generate all permutations, each group may be relabelled freely (symmetry breaking).

    Parameters
    ----------
    devices : sequence of Device
        The devices, in the problem's order.
    links : Links
        Their interconnect (uniform, or [D, D] matrices).

    Returns
    -------
    tuple of tuple of int
        Device indices, one sorted tuple per group, groups ordered by their first device.

    Examples
    --------
    >>> lat = [[0, 1, 1, 2], [1, 0, 1, 2], [1, 1, 0, 2], [2, 2, 2, 0]]
    >>> identical_device_groups([Device(f"d{i}") for i in range(4)], Links(latency=lat))
    ((0, 1, 2), (3,))
    """
    D = len(devices)
    parent = list(range(D))

    attrs = [(d.kind, d.speed, d.memory) for d in devices]
    if links.uniform:
        # Uniform links: only kind, speed and memory tell devices apart. O(D).
        first: dict[tuple, int] = {}
        for d, key in enumerate(attrs):
            parent[d] = first.setdefault(key, d)
    else:
        lat, bw = links.matrices(D)
        for a, b in _twin_candidates(attrs, lat, bw):
            ra, rb = find_root(parent, a), find_root(parent, b)
            # Candidates come from a hash; each is verified exactly, and only while the two
            # devices are not yet known to be together, so at most D - 1 checks succeed.
            if ra != rb and _swappable(devices, lat, bw, a, b):
                parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for d in range(D):
        groups.setdefault(find_root(parent, d), []).append(d)
    return tuple(tuple(g) for g in sorted(groups.values()))


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
