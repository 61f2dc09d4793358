"""`CompGraph`: the DAG of operations that every part of incsched reads.

Capture, file formats and generators produce it; problems wrap it; solvers, evaluators and policies
read its arrays. It is array-backed (numpy, read-only) and validated once, at construction, so that
everything downstream may assume a well-formed acyclic graph with finite, non-negative costs.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np

from .cost_model import DEFAULT_KIND, Roofline, byte_label, roofline_for, time_label
from . import dag, json_form
from ..errors import FormatError, GraphError
from ..jsonio import read_json, write_json
from ..limits import InputLimits, input_limits

__all__ = ["CompGraph", "SharedWeight"]


@dataclass(frozen=True)
class SharedWeight:
    """A weight that several nodes read (a tied embedding and its output head, a shared block).

    Its ``nbytes`` live once on every stage or device that holds at least one of its ``readers``
    (node indices, sorted), and not in those nodes' ``param_bytes``: a weight read on two stages
    costs its bytes on both, one read twice on one stage costs them once.
    """

    name: str
    nbytes: int
    readers: tuple[int, ...]


class CompGraph:
    """A directed acyclic graph of operations with their costs.

    Parameters
    ----------
    names : sequence of str
        Unique node names, in the order that node indices follow.
    src, dst : sequence of str or of int
        Edge endpoints, as node names or as indices into ``names``.
    op : sequence of str, optional
        Operation kind per node (``"conv2d"``, ``"linear"`` ...); default ``"op"``.
    flops : sequence of float, optional
        Floating-point operations per node; default 0.
    param_bytes : sequence of int, optional
        Bytes of weights that must live on the node's device; default 0.
    out_bytes : sequence of int, optional
        Bytes of the node's output tensor(s); default 0.
    edge_bytes : sequence of int, optional
        Bytes moved along each edge when its ends sit apart; default ``out_bytes[src]``.
    compute_time : mapping of str to sequence of float, optional
        Measured seconds per node, keyed by device kind (``"cpu"``, ``"cuda"``).
    backward_time : mapping of str to sequence of float, optional
        Measured seconds of each node's backward pass (training), keyed by device kind like
        ``compute_time``; a kind without a column is estimated (`incsched.problems.training`).
    saved_bytes : sequence of int, optional
        Bytes of the activations autograd saves for each node's backward, per micro-batch
        (measured by ``capture(..., training=True)``); None when not measured, and training mode
        then counts ``out_bytes`` instead, as an estimate.
    work_bytes : sequence of int, optional
        Training: bytes node v's forward or backward holds at once beyond the weights, their
        gradients and the saved activations (the gradients of activations, a weight's gradient
        before it is accumulated, temporaries; the loss's when the graph computes it), per
        micro-batch (measured by ``capture(..., training=True)``); None when not measured, and
        training mode then estimates it (`incsched.problems.training.work_bytes`).
    largest_weight_bytes : sequence of int, optional
        Training: bytes of the largest single weight tensor node v reads, shared weights included
        (what an optimizer stepping one tensor at a time needs temporaries for); None when not
        measured, and training mode then takes all the weights v reads, an upper bound.
    members : sequence of sequence of str, optional
        For captured graphs: the torch.fx node names each node stands for (after coarsening).
    shared_weights : sequence of SharedWeight or of mapping, optional
        Weights read by two or more nodes, each ``{"name": str, "bytes": int, "read_by": [node
        names or indices]}`` or a `SharedWeight`; their bytes are in no node's ``param_bytes``.
    name : str
        A label for reports.
    meta : mapping, optional
        Provenance (model, batch size, capture method, library versions); JSON-serialisable.

    Raises
    ------
    GraphError
        On duplicate or non-string names, edges to unknown nodes, self-loops, duplicate edges,
        negative / NaN / infinite / non-numeric costs, non-integral byte counts, wrong lengths.
    CycleError
        If the edges form a directed cycle; the message names the nodes on it.

    Examples
    --------
    >>> g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], flops=[1, 2, 3], out_bytes=[4, 4, 0])
    >>> g.n_nodes, g.n_edges, g.longest_path()[0]
    (3, 2, 2.0)
    """

    def __init__(
        self,
        names: Sequence[str],
        src: Sequence[str] | Sequence[int] | np.ndarray,
        dst: Sequence[str] | Sequence[int] | np.ndarray,
        *,
        op: Sequence[str] | None = None,
        flops: Sequence[float] | np.ndarray | None = None,
        param_bytes: Sequence[int] | np.ndarray | None = None,
        out_bytes: Sequence[int] | np.ndarray | None = None,
        edge_bytes: Sequence[int] | np.ndarray | None = None,
        compute_time: Mapping[str, Sequence[float] | np.ndarray] | None = None,
        backward_time: Mapping[str, Sequence[float] | np.ndarray] | None = None,
        saved_bytes: Sequence[int] | np.ndarray | None = None,
        work_bytes: Sequence[int] | np.ndarray | None = None,
        largest_weight_bytes: Sequence[int] | np.ndarray | None = None,
        members: Sequence[Sequence[str]] | None = None,
        shared_weights: Sequence[SharedWeight | Mapping[str, Any]] | None = None,
        name: str = "graph",
        meta: Mapping[str, Any] | None = None,
    ):
        self.names: tuple[str, ...] = _check_names(names)
        n = len(self.names)
        self._index = {nm: i for i, nm in enumerate(self.names)}
        self.src, self.dst = self._edge_indices(src, dst)
        m = len(self.src)

        self.op: tuple[str, ...] = _check_strings("op", op, n, default="op", names=self.names)
        self.flops = _check_costs("flops", flops, n, self.names, integral=False)
        self.param_bytes = _check_costs("param_bytes", param_bytes, n, self.names, integral=True)
        self.out_bytes = _check_costs("out_bytes", out_bytes, n, self.names, integral=True)
        edge_labels = _EdgeLabels(self.names, self.src, self.dst)
        if edge_bytes is None:
            self.edge_bytes = _readonly(self.out_bytes[self.src].copy())
            # A node's output forwarded along many edges can add up past the column limit.
            _check_total("edge_bytes (out_bytes of each edge's source)", self.edge_bytes)
        else:
            self.edge_bytes = _check_costs("edge_bytes", edge_bytes, m, edge_labels, integral=True)
        self.compute_time: Mapping[str, np.ndarray] = _check_times("compute_time", compute_time, n, self.names)
        self.backward_time: Mapping[str, np.ndarray] = _check_times("backward_time", backward_time, n, self.names)
        self.saved_bytes: np.ndarray | None = None if saved_bytes is None else _check_costs("saved_bytes", saved_bytes, n, self.names, integral=True)
        self.work_bytes: np.ndarray | None = None if work_bytes is None else _check_costs("work_bytes", work_bytes, n, self.names, integral=True)
        self.largest_weight_bytes: np.ndarray | None = (
            None if largest_weight_bytes is None else _check_costs("largest_weight_bytes", largest_weight_bytes, n, self.names, integral=True))
        self.members: tuple[tuple[str, ...], ...] | None = None
        if members is not None:
            if len(members) != n:
                raise GraphError(f"members has {len(members)} entries for {n} nodes")
            for i, group in enumerate(members):
                if isinstance(group, (str, bytes)) or not all(isinstance(x, str) for x in group):
                    raise GraphError(f"members of node {self.names[i]!r} must be a list of fx node names, got {group!r}")
            self.members = tuple(tuple(group) for group in members)
        self.shared_weights: tuple[SharedWeight, ...] = self._check_shared(shared_weights or ())
        self.name = str(name)
        self.meta: Mapping[str, Any] = MappingProxyType(dict(meta or {}))
        self._check_simple_edges()
        self._topo = _readonly(dag.topological_order(self))  # also refuses cycles, naming one

    # ------------------------------------------------------------------ construction checks

    def _edge_indices(self, src, dst) -> tuple[np.ndarray, np.ndarray]:
        for role, ends_in in (("src", src), ("dst", dst)):
            if isinstance(ends_in, (str, bytes)) or not isinstance(ends_in, (Iterable, np.ndarray)):
                raise GraphError(f"{role} must be a sequence of node names or indices, got {type(ends_in).__name__} ({ends_in!r:.60})")
        src_list, dst_list = list(src), list(dst)
        if len(src_list) != len(dst_list):
            raise GraphError(f"src has {len(src_list)} endpoints but dst has {len(dst_list)}")
        ends = []
        for role, ends_in in (("source", src_list), ("target", dst_list)):
            if all(isinstance(x, str) for x in ends_in):
                idx = [self._index.get(x, -1) for x in ends_in]
                for k, i in enumerate(idx):
                    if i < 0:
                        raise GraphError(
                            f"edge {k} ({src_list[k]!r} -> {dst_list[k]!r}) has unknown {role} node {ends_in[k]!r}"
                        )
                arr = np.asarray(idx, dtype=np.int64)
            else:
                try:
                    arr = np.asarray(ends_in)
                    if arr.size and (arr.dtype.kind not in "iu"):
                        raise TypeError
                    arr = arr.astype(np.int64)
                except (TypeError, ValueError):
                    raise GraphError(
                        f"edge {role}s must be all node names or all integer indices, got {ends_in[:5]!r}..."
                    ) from None
                bad = np.flatnonzero((arr < 0) | (arr >= len(self.names)))
                if bad.size:
                    k = int(bad[0])
                    raise GraphError(f"edge {k} has {role} index {int(arr[k])}, not a node (0..{len(self.names) - 1})")
            ends.append(_readonly(arr.reshape(-1)))
        return ends[0], ends[1]

    def _check_shared(self, weights) -> tuple[SharedWeight, ...]:
        if isinstance(weights, (str, bytes, Mapping)) or not isinstance(weights, Iterable):
            raise GraphError(f"shared_weights must be a list of weights, got {type(weights).__name__}")
        out: list[SharedWeight] = []
        seen: set[str] = set()
        for i, w in enumerate(weights):
            if isinstance(w, SharedWeight):
                name, nbytes, readers = w.name, w.nbytes, list(w.readers)
            elif isinstance(w, Mapping):
                unknown = set(w) - {"name", "bytes", "read_by"}
                if unknown or not {"name", "bytes", "read_by"} <= set(w):
                    raise GraphError(f"shared weight {i} must have exactly the keys name, bytes, read_by; got {sorted(w)}")
                name, nbytes, readers = w["name"], w["bytes"], w["read_by"]
            else:
                raise GraphError(f"shared weight {i} must be a SharedWeight or a mapping, got {type(w).__name__}")
            if not isinstance(name, str) or not name:
                raise GraphError(f"shared weight {i} must have a non-empty string name, got {name!r:.60}")
            if name in seen:
                raise GraphError(f"duplicate shared weight {name!r}")
            seen.add(name)
            whole = isinstance(nbytes, (int, np.integer)) and not isinstance(nbytes, bool)
            if not whole or not 0 <= nbytes <= MAX_TOTAL_BYTES:
                raise GraphError(f"shared weight {name!r} has {nbytes!r:.40} bytes; byte counts are whole numbers from 0 to 2**62")
            if isinstance(readers, (str, bytes)) or not isinstance(readers, (Iterable, np.ndarray)):
                raise GraphError(f"read_by of shared weight {name!r} must be a list of nodes, got {readers!r:.60}")
            idx = set()
            for r in readers:
                if isinstance(r, str):
                    if r not in self._index:
                        raise GraphError(f"shared weight {name!r} is read by unknown node {r!r}")
                    idx.add(self._index[r])
                elif isinstance(r, (int, np.integer)) and not isinstance(r, bool) and 0 <= r < len(self.names):
                    idx.add(int(r))
                else:
                    raise GraphError(f"shared weight {name!r} is read by {r!r}, not a node name or index")
            if len(idx) < 2:
                raise GraphError(f"shared weight {name!r} is read by {len(idx)} node(s); a weight one node reads belongs in its param_bytes")
            out.append(SharedWeight(name, int(nbytes), tuple(sorted(idx))))
        total = int(self.param_bytes.sum()) + sum(w.nbytes for w in out)
        if total > MAX_TOTAL_BYTES:
            raise GraphError(f"parameters (param_bytes and shared weights) total {total} bytes, beyond the supported 2**62 (4.6e18)")
        return tuple(out)

    def _check_simple_edges(self) -> None:
        loops = np.flatnonzero(self.src == self.dst)
        if loops.size:
            k = int(loops[0])
            raise GraphError(f"self-loop on node {self.names[self.src[k]]!r} (edge {k})")
        key = self.src * max(len(self.names), 1) + self.dst
        order = np.argsort(key, kind="stable")
        same = np.flatnonzero(key[order][1:] == key[order][:-1])
        if same.size:
            a, b = int(order[same[0]]), int(order[same[0] + 1])
            raise GraphError(
                f"duplicate edge {self.names[self.src[a]]!r} -> {self.names[self.dst[a]]!r} (edges {a} and {b})"
            )

    # ------------------------------------------------------------------ structure

    @property
    def n_nodes(self) -> int:
        return len(self.names)

    @property
    def n_edges(self) -> int:
        return len(self.src)

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"CompGraph({self.name!r}, nodes={self.n_nodes}, edges={self.n_edges})"

    def index(self, name: str) -> int:
        """Index of the node called ``name``."""
        try:
            return self._index[name]
        except KeyError:
            raise GraphError(f"no node named {name!r} in graph {self.name!r}") from None

    @cached_property
    def succ_ptr(self) -> np.ndarray:
        return self._csr(self.src, self.dst)[0]

    @cached_property
    def succ_idx(self) -> np.ndarray:
        return self._csr(self.src, self.dst)[1]

    @cached_property
    def succ_edge(self) -> np.ndarray:
        """Edge ids in the order of ``succ_idx``."""
        return self._csr(self.src, self.dst)[2]

    @cached_property
    def pred_ptr(self) -> np.ndarray:
        return self._csr(self.dst, self.src)[0]

    @cached_property
    def pred_idx(self) -> np.ndarray:
        return self._csr(self.dst, self.src)[1]

    @cached_property
    def pred_edge(self) -> np.ndarray:
        """Edge ids in the order of ``pred_idx``."""
        return self._csr(self.dst, self.src)[2]

    def _csr(self, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        order = np.argsort(rows, kind="stable")
        ptr = np.zeros(len(self.names) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=len(self.names)), out=ptr[1:])
        return _readonly(ptr), _readonly(cols[order]), _readonly(order.astype(np.int64))

    def successors(self, v: int) -> np.ndarray:
        return self.succ_idx[self.succ_ptr[v] : self.succ_ptr[v + 1]]

    def predecessors(self, v: int) -> np.ndarray:
        return self.pred_idx[self.pred_ptr[v] : self.pred_ptr[v + 1]]

    @property
    def in_degree(self) -> np.ndarray:
        return np.diff(self.pred_ptr)

    @property
    def out_degree(self) -> np.ndarray:
        return np.diff(self.succ_ptr)

    # ------------------------------------------------------------------ algorithms (incsched.graph.dag)

    def topological_order(self, depth_first: bool = False) -> np.ndarray:
        """`incsched.graph.dag.topological_order`, computed once per graph (read-only)."""
        return self._depth_first_topo if depth_first else self._topo

    @cached_property
    def _depth_first_topo(self) -> np.ndarray:
        return _readonly(dag.topological_order(self, depth_first=True))

    @cached_property
    def asap_level(self) -> np.ndarray:
        """`incsched.graph.dag.asap_level`: edges on the longest path from any source to each node."""
        return _readonly(dag.asap_level(self))

    @cached_property
    def alap_level(self) -> np.ndarray:
        """`incsched.graph.dag.alap_level`: the latest level of each node that keeps the graph's depth."""
        return _readonly(dag.alap_level(self))

    @property
    def depth(self) -> int:
        """`incsched.graph.dag.depth`: number of ASAP levels (nodes on the longest path)."""
        return dag.depth(self)

    def top_level(self, node_weight=None, edge_weight=None) -> np.ndarray:
        """`incsched.graph.dag.top_level`: longest weighted path from any source to the start of each node."""
        return dag.top_level(self, node_weight, edge_weight)

    def bottom_level(self, node_weight=None, edge_weight=None) -> np.ndarray:
        """`incsched.graph.dag.bottom_level`: longest weighted path from each node's start to any sink's end."""
        return dag.bottom_level(self, node_weight, edge_weight)

    def longest_path(self, node_weight=None, edge_weight=None) -> tuple[float, list[str]]:
        """`incsched.graph.dag.longest_path`: length and node names of a longest (weighted) path."""
        return dag.longest_path(self, node_weight, edge_weight)

    # ------------------------------------------------------------------ costs

    def time(self, kind: str = DEFAULT_KIND, roofline: Roofline | None = None) -> np.ndarray:
        """Seconds per node on a device of ``kind``: measured where captured, else estimated.

        The estimate is the roofline of `incsched.graph.cost_model` over flops and the bytes each node
        reads and writes (its inputs, parameters and output).
        """
        if kind in self.compute_time and roofline is None:
            return self.compute_time[kind]
        model = roofline or roofline_for(kind, self.compute_time, self.name)
        in_bytes = np.bincount(self.dst, weights=self.edge_bytes, minlength=self.n_nodes)
        return model.estimate(self.flops, in_bytes + self.node_weight_bytes + self.out_bytes)

    def time_source(self, kind: str = DEFAULT_KIND) -> str:
        """Where `time` of ``kind`` comes from, for people (`incsched.graph.cost_model`, ``meta["costs"]``).

        ``"measured on cpu (each node timed alone, median of 5 after 2 warm-up, 2 threads, load
        0.6)"``, ``"estimated by the h100 roofline (989 TFLOP/s bf16 tensor, 3.35 TB/s, 5 us per
        op)"``, ``"synthetic (...)"`` or ``"given in the graph file"``.

        Raises
        ------
        GraphError
            A kind with neither times nor a roofline preset; the message lists the known kinds.

        >>> CompGraph(["a"], [], []).time_source("a100")
        'estimated by the a100 roofline (312 TFLOP/s bf16 tensor, 2.039 TB/s, 5 us per op)'
        """
        return time_label(self.meta, kind, self.compute_time, self.name)

    def byte_source(self) -> str:
        """Where the byte counts come from: ``"from tensor shapes (torch capture)"``, ``"given in the graph file"`` ..."""
        return byte_label(self.meta)

    @property
    def total_param_bytes(self) -> int:
        """Every weight once: the nodes' own ``param_bytes`` plus each shared weight."""
        return int(self.param_bytes.sum()) + sum(w.nbytes for w in self.shared_weights)

    @cached_property
    def node_weight_bytes(self) -> np.ndarray:
        """Bytes of weights node v needs on its device: its ``param_bytes`` plus every shared weight it reads."""
        need = self.param_bytes.copy()
        for w in self.shared_weights:
            need[list(w.readers)] += w.nbytes
        return _readonly(need)

    def part_param_bytes(self, part_of: Sequence[int] | np.ndarray, n_parts: int) -> list[int]:
        """Weight bytes each part (stage or device) holds when node v sits on ``part_of[v]``.

        A shared weight counts once on every part that holds one of its readers. Exact Python ints.

        >>> g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], param_bytes=[1, 2, 4],
        ...               shared_weights=[{"name": "w", "bytes": 8, "read_by": ["a", "c"]}])
        >>> g.part_param_bytes([0, 0, 1], 2), g.part_param_bytes([0, 0, 0], 2)
        ([11, 12], [15, 0])
        """
        part = np.asarray(part_of, dtype=np.int64)
        out = [0] * n_parts
        for v, b in zip(part.tolist(), self.param_bytes.tolist()):
            out[v] += b
        for w in self.shared_weights:
            for k in set(part[list(w.readers)].tolist()):
                out[k] += w.nbytes
        return out

    def replicated_weights(self, part_of: Sequence[int] | np.ndarray) -> dict[str, list[int]]:
        """The shared weights held on more than one part, by name, with the parts (sorted) that hold them."""
        part = np.asarray(part_of, dtype=np.int64)
        out = {}
        for w in self.shared_weights:
            parts = sorted(set(part[list(w.readers)].tolist()))
            if len(parts) > 1:
                out[w.name] = parts
        return out

    def summary(self) -> dict[str, Any]:
        """Size, shape and cost totals, as shown by ``incsched graph info``."""
        widest = int(np.bincount(self.asap_level).max()) if self.n_nodes else 0
        return {
            "name": self.name,
            "nodes": self.n_nodes,
            "edges": self.n_edges,
            "sources": int((self.in_degree == 0).sum()),
            "sinks": int((self.out_degree == 0).sum()),
            "depth": self.depth,
            "widest_level": widest,
            "total_flops": float(self.flops.sum()),
            "total_param_bytes": self.total_param_bytes,
            "shared_weights": len(self.shared_weights),
            "total_out_bytes": int(self.out_bytes.sum()),
            "total_edge_bytes": int(self.edge_bytes.sum()),
            "measured_time_s": {k: float(v.sum()) for k, v in sorted(self.compute_time.items())},
            "op_kinds": len(set(self.op)),
        }

    def structure_digest(self) -> str:
        """SHA-256 of the node names and the edge set: equal for re-captures of one model, whatever
        their measured costs, so a result can be matched to the graph it was solved for."""
        h = hashlib.sha256()
        h.update("\n".join(self.names).encode())
        edges = np.lexsort((self.dst, self.src))
        h.update(np.ascontiguousarray(self.src[edges], dtype="<i8").tobytes())
        h.update(np.ascontiguousarray(self.dst[edges], dtype="<i8").tobytes())
        return h.hexdigest()

    # ------------------------------------------------------------------ copies and comparison

    def replace(self, **changes: Any) -> CompGraph:
        """A new graph with some fields replaced (the graph itself is immutable)."""
        fields = {
            "names": self.names,
            "src": self.src,
            "dst": self.dst,
            "op": self.op,
            "flops": self.flops,
            "param_bytes": self.param_bytes,
            "out_bytes": self.out_bytes,
            "edge_bytes": self.edge_bytes,
            "compute_time": self.compute_time,
            "backward_time": self.backward_time,
            "saved_bytes": self.saved_bytes,
            "work_bytes": self.work_bytes,
            "largest_weight_bytes": self.largest_weight_bytes,
            "members": self.members,
            "shared_weights": self.shared_weights,
            "name": self.name,
            "meta": self.meta,
        }
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"CompGraph has no field(s) {sorted(unknown)}")
        fields.update(changes)
        return CompGraph(fields.pop("names"), fields.pop("src"), fields.pop("dst"), **fields)

    # ------------------------------------------------------------------ files

    def to_json(self) -> dict[str, Any]:
        """The versioned JSON-ready dictionary (`incsched.graph.json_form`; the schema has every field)."""
        return json_form.graph_to_dict(self)

    @classmethod
    def from_json(cls, data: Any, *, source: str = "graph", limits: InputLimits | None = None) -> CompGraph:
        """Rebuild a graph from `to_json`'s form, every field's JSON type checked first.

        Raises
        ------
        FormatError
            Not an incsched graph of a supported version, a missing field, a field of the wrong
            JSON type, a name with a NUL or a lone surrogate, a byte count that is not whole.
        LimitError
            More nodes or edges than ``limits`` allow (default `incsched.limits.input_limits()`).
        GraphError
            The graph it describes is invalid (cycle, unknown node, bad cost ...); ``source`` named.
        """
        names, src, dst, fields = json_form.graph_fields(data, source=source, limits=limits)
        try:
            return cls(names, src, dst, **fields)
        except GraphError as exc:
            exc.args = (f"{source}: {exc}",)  # keep the type (CycleError keeps .cycle), name the file
            raise

    def save(self, path: str | os.PathLike) -> None:
        """Write the JSON form atomically, gzipped when the name ends in ``.gz`` (as `incsched.save_graph`).

        Raises
        ------
        FormatError
            If the name does not end in ``.json`` or ``.json.gz``.
        """
        if not str(path).endswith((".json", ".json.gz")):
            raise FormatError(f"{path}: graphs are saved as .json or .json.gz")
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike, *, limits: InputLimits | None = None) -> CompGraph:
        """Read a graph `save` wrote (``.json``, ``.json.gz``); `incsched.load_graph` also reads GML and ONNX.

        >>> import tempfile, os
        >>> g = CompGraph(["a", "b"], ["a"], ["b"], out_bytes=[4, 0])
        >>> path = os.path.join(tempfile.mkdtemp(), "g.json.gz")
        >>> g.save(path); CompGraph.load(path) == g
        True
        """
        if not str(path).endswith((".json", ".json.gz")):
            raise FormatError(f"{path}: CompGraph.load reads incsched JSON (.json, .json.gz); incsched.load_graph reads .gml and .onnx too")
        lim = input_limits(limits)
        return cls.from_json(read_json(path, limits=lim), source=str(path), limits=lim)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CompGraph):
            return NotImplemented
        return (
            self.names == other.names
            and self.op == other.op
            and self.name == other.name
            and self.members == other.members
            and self.shared_weights == other.shared_weights
            and self.meta == other.meta
            and self.compute_time.keys() == other.compute_time.keys()
            and all(
                np.array_equal(getattr(self, f), getattr(other, f))
                for f in ("src", "dst", "flops", "param_bytes", "out_bytes", "edge_bytes")
            )
            and all(np.array_equal(v, other.compute_time[k]) for k, v in self.compute_time.items())
            and self.backward_time.keys() == other.backward_time.keys()
            and all(
                (getattr(self, f) is None) == (getattr(other, f) is None)
                and (getattr(self, f) is None or np.array_equal(getattr(self, f), getattr(other, f)))
                for f in ("saved_bytes", "work_bytes", "largest_weight_bytes")
            )
            and all(np.array_equal(v, other.backward_time[k]) for k, v in self.backward_time.items())
        )

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ networkx

    def to_networkx(self):
        """A ``networkx.DiGraph`` with node and edge attributes named as here."""
        import networkx as nx

        g = nx.DiGraph(name=self.name, **({"meta": dict(self.meta)} if self.meta else {}))
        if self.shared_weights:
            g.graph["shared_weights"] = self.to_json()["shared_weights"]
        for i, nm in enumerate(self.names):
            attrs = {
                "op": self.op[i],
                "flops": float(self.flops[i]),
                "param_bytes": int(self.param_bytes[i]),
                "out_bytes": int(self.out_bytes[i]),
            }
            if self.compute_time:
                attrs["compute_time"] = {k: float(v[i]) for k, v in self.compute_time.items()}
            for column in ("saved_bytes", "work_bytes", "largest_weight_bytes"):  # training's measured bytes
                if getattr(self, column) is not None:
                    attrs[column] = int(getattr(self, column)[i])
            if self.members is not None:
                attrs["members"] = list(self.members[i])
            g.add_node(nm, **attrs)
        for k in range(self.n_edges):
            g.add_edge(self.names[self.src[k]], self.names[self.dst[k]], bytes=int(self.edge_bytes[k]))
        return g

    @classmethod
    def from_networkx(cls, g, *, name: str | None = None) -> CompGraph:
        """Build from a ``networkx.DiGraph``; attributes as in `to_networkx`, missing ones default.

        Node keys become names through ``str``; an edge without ``bytes`` carries its source's
        ``out_bytes``. Edges are numbered in networkx's order (grouped by source node), so a round
        trip through networkx gives an equal graph up to the order of its edges.
        """
        if not g.is_directed():
            raise GraphError("a computation graph must be a directed graph")
        nodes = list(g.nodes)
        names = [str(v) for v in nodes]
        data = [g.nodes[v] for v in nodes]
        kinds = sorted({k for d in data for k in (d.get("compute_time") or {})})
        compute_time = {}
        for kind in kinds:
            missing = [names[i] for i, d in enumerate(data) if kind not in (d.get("compute_time") or {})]
            if missing:
                raise GraphError(f"compute_time[{kind!r}] is missing on node {missing[0]!r}")
            compute_time[kind] = [d["compute_time"][kind] for d in data]
        has_members = any("members" in d for d in data)
        # A training column comes back only when every node has it (it was measured for the graph).
        columns = {c: [d[c] for d in data] for c in ("saved_bytes", "work_bytes", "largest_weight_bytes") if data and all(c in d for d in data)}
        out_bytes = [d.get("out_bytes", 0) for d in data]
        pos = {v: i for i, v in enumerate(nodes)}
        edges = list(g.edges(data=True))
        src = [pos[u] for u, _, _ in edges]
        dst = [pos[v] for _, v, _ in edges]
        edge_bytes = [d.get("bytes", out_bytes[pos[u]]) for u, _, d in edges]
        return cls(
            names,
            np.asarray(src, dtype=np.int64),
            np.asarray(dst, dtype=np.int64),
            op=[d.get("op", "op") for d in data],
            flops=[d.get("flops", 0.0) for d in data],
            param_bytes=[d.get("param_bytes", 0) for d in data],
            out_bytes=out_bytes,
            edge_bytes=edge_bytes,
            compute_time=compute_time,
            **columns,
            members=[d.get("members", []) for d in data] if has_members else None,
            shared_weights=g.graph.get("shared_weights"),
            name=name if name is not None else str(g.graph.get("name") or "graph"),
            meta=g.graph.get("meta"),
        )


# ---------------------------------------------------------------------- validation helpers


class _EdgeLabels:
    """Lazily names edge k as 'u -> v' for error messages without building m strings up front."""

    def __init__(self, names, src, dst):
        self.names, self.src, self.dst = names, src, dst

    def __getitem__(self, k: int) -> str:
        return f"{self.names[self.src[k]]} -> {self.names[self.dst[k]]}"


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _check_names(names: Iterable[str]) -> tuple[str, ...]:
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        # a string would be taken letter by letter as node names
        raise GraphError(f"names must be a sequence of node names, got {type(names).__name__} ({names!r:.60})")
    names = tuple(names)
    seen: dict[str, int] = {}
    for i, nm in enumerate(names):
        if not isinstance(nm, str):
            raise GraphError(f"node {i} has a name of type {type(nm).__name__} ({nm!r}); names must be strings")
        if not nm:
            raise GraphError(f"node {i} has an empty name")
        if "\x00" in nm or any("\ud800" <= c <= "\udfff" for c in nm):
            # Files refuse them too: no reader or writer can round-trip such a name.
            raise GraphError(f"node {i} has a name with a NUL or a lone surrogate ({nm!r})")
        if nm in seen:
            raise GraphError(f"duplicate node name {nm!r} (nodes {seen[nm]} and {i})")
        seen[nm] = i
    return names


def _check_strings(field: str, values, n: int, default: str, names) -> tuple[str, ...]:
    if values is None:
        return (default,) * n
    values = tuple(values)
    if len(values) != n:
        raise GraphError(f"{field} has {len(values)} entries for {n} nodes")
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise GraphError(f"{field} of node {names[i]!r} must be a string, got {type(v).__name__} ({v!r})")
    return values


#: Largest whole number a float may carry into a byte count: beyond it a float no longer tells
#: which integer was meant (2**53 + 1 reads as 2**53), so such values must come as integers.
MAX_EXACT_FLOAT_INT = 2**53

#: Largest total of one byte-count column (``param_bytes``, ``out_bytes``, ``edge_bytes``). Every
#: sum of a column's values then fits numpy's int64 with a factor of two to spare, so per-stage and
#: per-device loads can stay int64 arrays without wrap-around; it is also CP-SAT's domain limit.
MAX_TOTAL_BYTES = 2**62


def _check_times(field: str, times, n: int, names) -> Mapping[str, np.ndarray]:
    """Per-node seconds keyed by device kind (``compute_time``, ``backward_time``), checked, read-only."""
    if times is not None and not isinstance(times, Mapping):
        raise GraphError(f"{field} must map device kinds to per-node seconds (e.g. {{'cpu': [...]}}), got {type(times).__name__}")
    out = {}
    for kind, column in (times or {}).items():
        if not isinstance(kind, str) or not kind:
            raise GraphError(f"{field} keys must be device-kind strings, got {kind!r}")
        out[kind] = _check_costs(f"{field}[{kind!r}]", column, n, names, integral=False)
    return MappingProxyType(out)  # read-only view: graphs are immutable


def _check_costs(field: str, values, n: int, labels, integral: bool) -> np.ndarray:
    if values is None:
        return _readonly(np.zeros(n, dtype=np.int64 if integral else np.float64))
    if integral:
        return _check_byte_counts(field, values, n, labels)
    if isinstance(values, np.ndarray) and values.dtype.kind in "iuf":
        arr = values.reshape(-1)
    else:
        seq = values.tolist() if isinstance(values, np.ndarray) else _as_list(field, values)
        for i, v in enumerate(seq):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise GraphError(f"{field} of {_label(labels, i)} must be a number, got {type(v).__name__} ({v!r})")
        try:
            arr = np.asarray(seq, dtype=np.float64)
        except OverflowError:
            i = next(i for i, v in enumerate(seq) if isinstance(v, int) and abs(v) > 2**1023)
            raise GraphError(
                f"{field} of {_label(labels, i)} is an integer of about {int(seq[i].bit_length() * 0.30103)} digits, beyond a float64"
            ) from None
    if arr.shape != (n,):
        raise GraphError(f"{field} has {arr.size} entries, expected {n}")
    arr = arr.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0))
    if bad.size:
        i = int(bad[0])
        raise GraphError(f"{field} of {_label(labels, i)} is {float(arr[i])}; costs must be finite and non-negative")
    return _readonly(arr)


def _as_list(field: str, values) -> list:
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise GraphError(f"{field} must be a list of numbers, got {type(values).__name__} ({values!r:.80})")
    return list(values)


def _check_byte_counts(field: str, values, n: int, labels) -> np.ndarray:
    """Whole, non-negative byte counts as a read-only int64 array, converted exactly.

    Integers are taken as they are; a float only when it is whole and below `MAX_EXACT_FLOAT_INT`
    (each element on its own: one ``1.0`` in a list must not push its neighbours through float64).
    The column's total must not exceed `MAX_TOTAL_BYTES`.
    """
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        arr = values.reshape(-1)
        if arr.shape != (n,):
            raise GraphError(f"{field} has {arr.size} entries, expected {n}")
        if arr.size and arr.dtype.kind == "i" and int(arr.min()) < 0:
            i = int(np.argmin(arr))
            raise GraphError(f"{field} of {_label(labels, i)} is {int(arr[i])}; costs must be non-negative")
        if arr.size and int(arr.max()) > MAX_TOTAL_BYTES:
            i = int(np.argmax(arr))
            raise GraphError(
                f"{field} of {_label(labels, i)} is {int(arr[i])}, beyond the supported 2**62 bytes per graph"
            )
        arr = arr.astype(np.int64)
        _check_total(field, arr)
        return _readonly(arr)
    seq = values.reshape(-1).tolist() if isinstance(values, np.ndarray) else _as_list(field, values)
    if len(seq) != n:
        raise GraphError(f"{field} has {len(seq)} entries, expected {n}")
    out = []
    for i, v in enumerate(seq):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise GraphError(f"{field} of {_label(labels, i)} must be a number, got {type(v).__name__} ({v!r:.80})")
        if isinstance(v, (float, np.floating)):
            f = float(v)
            if not math.isfinite(f) or f < 0:
                raise GraphError(f"{field} of {_label(labels, i)} is {f}; costs must be finite and non-negative")
            if f != math.floor(f):
                raise GraphError(f"{field} of {_label(labels, i)} is {f}; byte counts must be whole numbers")
            if f > MAX_EXACT_FLOAT_INT:
                raise GraphError(
                    f"{field} of {_label(labels, i)} is the float {f:.17g}, too large to be an exact byte count "
                    "(floats are exact only up to 2**53); give it as an integer"
                )
            v = int(f)
        v = int(v)
        if v < 0:
            raise GraphError(f"{field} of {_label(labels, i)} is {v}; costs must be non-negative")
        if v > MAX_TOTAL_BYTES:
            shown = str(v) if v < 10**30 else f"an integer of about {int(v.bit_length() * 0.30103)} digits"
            raise GraphError(f"{field} of {_label(labels, i)} is {shown}, beyond the supported 2**62 bytes per graph")
        out.append(v)
    total = sum(out)
    if total > MAX_TOTAL_BYTES:
        raise GraphError(f"{field} totals {total} bytes over the graph, beyond the supported 2**62 (4.6e18)")
    return _readonly(np.asarray(out, dtype=np.int64).reshape(n))


def _check_total(field: str, arr: np.ndarray) -> None:
    # Values are each <= 2**62 here; the int64 sum is safe only while n * max stays below 2**63.
    if not arr.size:
        return
    peak = int(arr.max())
    total = int(arr.sum()) if peak * arr.size < 2**63 else sum(arr.tolist())
    if total > MAX_TOTAL_BYTES:
        raise GraphError(f"{field} totals {total} bytes over the graph, beyond the supported 2**62 (4.6e18)")


def _label(labels, i: int) -> str:
    if isinstance(labels, _EdgeLabels):
        return f"edge {i} ({labels[i]})"
    return f"node {labels[i]!r}"
