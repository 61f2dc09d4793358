"""The learned pre-scheduler of the placement problem, after DOPPLER: SEL picks the next ready op, PLC its device.

The shared `GraphEncoder` embeds the graph once; decoding then list-schedules it, one op per step,
from the simulator's state (per-device free time, where each op's inputs live, when they arrive).
SEL scores the ready ops, PLC the devices for the chosen op; both are small MLPs over the op's
embedding and a few dynamic features. The op placed at step t goes last on its device, so decoding
yields a device and an order per device that `simulate(..., "ordered")` executes to the same makespan.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..baselines.placement import mean_costs
from ..problems import Placement, PlacementError, PlacementProblem
from .checkpoint import FORMAT, MODELS_DIR, VERSION, PolicyKind, load_policy, register_policy, save_checkpoint
from .compiled import call_compiled
from .encoder import GraphEncoder
from .features import (
    EDGE_FEATURES,
    N_EDGE_FEATURES,
    N_NODE_FEATURES,
    N_OP_BUCKETS,
    NODE_FEATURES,
    edge_features,
    edge_index,
    node_features,
)
from .sampling import default_samples

__all__ = [
    "PlacementPolicy",
    "PolicyConfig",
    "Trajectory",
    "decode",
    "decode_rows",
    "Decodings",
    "placement_inputs",
    "N_PLACEMENT_FEATURES",
    "SEL_FEATURES",
    "PLC_FEATURES",
    "preschedule",
    "device_preferences",
    "save_placement_policy",
    "load_placement_policy",
    "DEFAULT_CHECKPOINT",
]

log = logging.getLogger(__name__)

#: Temperature of `preschedule`'s sampled decodes (how many: `sampling.default_samples`). On the
#: 12 held-out graphs rl_placement.py had before it became the doppler experiment, mean makespan / cpl over 10 seeds:
#: 0.834 with 16 samples, 0.830 with 24, 0.827 with 32, 0.823 with 64.
SAMPLE_TEMPERATURE = 0.3


#: Placement-specific node features appended to the shared ones (costs in the problem's ticks,
#: relative to the mean op duration, so they mean the same on any time scale).
PLACEMENT_NODE_FEATURES = (
    "dur_rel",  # log1p(mean duration / mean duration over nodes)
    "bottom_comm",  # log1p(bottom level with mean transfers / mean duration)
    "bottom_comm_share",  # bottom level with transfers / its maximum
    "top_comm_share",  # top level with transfers / the largest bottom level
    "in_transfer",  # log1p(summed incoming transfer ticks / mean duration)
    "out_transfer",  # log1p(summed outgoing transfer ticks / mean duration)
    "comm_ratio",  # log1p(mean transfer / mean duration) over the whole graph
    "inv_devices",  # 1 / D
)
N_PLACEMENT_FEATURES = N_NODE_FEATURES + len(PLACEMENT_NODE_FEATURES)

#: Dynamic features of a ready op (SEL), in ticks over the mean duration, log1p-compressed.
SEL_FEATURES = (
    "est_min",  # earliest start over devices - the earliest start of any ready op
    "finish_min",  # earliest finish over devices - the same reference
    "pen_min",  # fewest incoming transfer ticks it must pay (0: all inputs on one device)
    "home_delay",  # earliest start on its inputs' device - earliest start anywhere
    "ready_frac",  # ready-set size / D, log1p
)
#: Dynamic features of an (op, device) pair (PLC).
PLC_FEATURES = (
    "est",  # earliest start here - earliest start anywhere
    "finish",  # earliest finish here - earliest finish anywhere
    "data_ready",  # inputs' arrival here - earliest arrival anywhere
    "free",  # device free tick - the earliest free device's
    "pen",  # incoming transfer ticks paid if placed here
    "local",  # share of incoming transfer ticks saved here
    "affinity",  # transfer ticks of the op's consumers' other inputs already here
    "load",  # busy ticks here / busy ticks on all devices
    "empty",  # nothing placed here yet
)


@dataclass(frozen=True)
class PolicyConfig:
    """Sizes of the placement policy (stored with every checkpoint)."""

    hidden: int = 32
    n_layers: int = 2
    head_hidden: int = 32

    def to_dict(self) -> dict:
        return asdict(self)


def placement_inputs(problem: PlacementProblem) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Encoder inputs of a placement problem: ``x [n, N_PLACEMENT_FEATURES]``, ``edge_index``, ``edge_attr``.

    Parameters
    ----------
    problem : PlacementProblem

    Returns
    -------
    tuple of torch.Tensor
        Shared node features (``n_slots`` = devices, kind of device 0) followed by the
        transfer-aware columns of `PLACEMENT_NODE_FEATURES`; edge index; edge features.
    """
    g = problem.graph
    n, D = problem.n_nodes, problem.n_devices
    shared = node_features(g, n_slots=D, kind=problem.devices[0].kind)
    node_cost, edge_cost = mean_costs(problem)
    unit = max(float(node_cost.mean()), 1e-9) if n else 1.0
    bl = g.bottom_level(node_cost, edge_cost)
    tl = g.top_level(node_cost, edge_cost)
    top = max(float(bl.max()), 1e-9) if n else 1.0
    in_tr = np.bincount(g.dst, weights=edge_cost, minlength=n)
    out_tr = np.bincount(g.src, weights=edge_cost, minlength=n)
    comm = float(edge_cost.mean()) / unit if g.n_edges else 0.0
    extra = np.stack(
        [
            np.log1p(node_cost / unit),
            np.log1p(bl / unit),
            bl / top,
            tl / top,
            np.log1p(in_tr / unit),
            np.log1p(out_tr / unit),
            np.full(n, math.log1p(comm)),
            np.full(n, 1.0 / D),
        ],
        axis=1,
    ).astype(np.float32)
    x = torch.cat([shared, torch.from_numpy(extra)], dim=1)
    return x, edge_index(g), edge_features(g)


class PlacementPolicy(nn.Module):
    """GraphEncoder + SEL and PLC heads.

    Each head is ``w2 . relu(W_node z_v + W_dyn f + b)``: the node part is computed once per graph
    (`node_parts`), so a decoding step costs one small matrix product over the ready set (SEL) and
    one over the devices (PLC).

    Parameters
    ----------
    config : PolicyConfig
    conv : {"plain", "torch_geometric"}
        The encoder's ``GINEConv`` implementation (`GraphEncoder`): training builds
        ``"torch_geometric"``, loading for inference ``"plain"``. Not part of `config`: both take
        the same weights.
    """

    def __init__(self, config: PolicyConfig = PolicyConfig(), *, conv: str = "plain"):
        super().__init__()
        self.config = config
        H, K = config.hidden, config.head_hidden
        self.encoder = GraphEncoder(in_dim=N_PLACEMENT_FEATURES, edge_dim=N_EDGE_FEATURES, hidden=H, n_layers=config.n_layers,
                                    conv=conv)
        self.sel_node = nn.Linear(H, K)
        self.sel_dyn = nn.Linear(len(SEL_FEATURES), K, bias=False)
        self.sel_out = nn.Linear(K, 1)
        self.plc_node = nn.Linear(H, K)
        self.plc_dyn = nn.Linear(len(PLC_FEATURES), K, bias=False)
        self.plc_out = nn.Linear(K, 1)

    def with_conv(self, conv: str) -> PlacementPolicy:
        """A copy of this policy (weights and train / eval mode) whose encoder is built with ``conv``.

        Training uses it to learn with torch_geometric's layer from a checkpoint loaded for
        inference. Building the copy leaves the global torch random stream as it was.
        """
        with torch.random.fork_rng(devices=[]):
            twin = PlacementPolicy(self.config, conv=conv)
        twin.load_state_dict(self.state_dict())
        return twin.train(self.training)

    def node_parts(self, x, edge_index, edge_attr) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-node first-layer activations of SEL and PLC, ``[n, K]`` each."""
        z = self.encoder(x, edge_index, edge_attr)
        return self.sel_node(z), self.plc_node(z)

    def sel_logits(self, sel_part: torch.Tensor, dyn: torch.Tensor) -> torch.Tensor:
        """SEL logits from gathered node parts ``[..., K]`` and dynamic features ``[..., F_sel]``."""
        return self.sel_out(torch.relu(sel_part + self.sel_dyn(dyn))).squeeze(-1)

    def plc_logits(self, plc_part: torch.Tensor, dyn: torch.Tensor) -> torch.Tensor:
        """PLC logits from node parts ``[..., K]`` (broadcast over devices) and features ``[..., D, F_plc]``."""
        return self.plc_out(torch.relu(plc_part.unsqueeze(-2) + self.plc_dyn(dyn))).squeeze(-1)

    @torch.no_grad()
    def numpy_heads(self, problem: PlacementProblem) -> _Heads:
        """Everything decoding needs, as float64 numpy arrays (one encoder pass)."""
        x, ei, ea = placement_inputs(problem)
        sel_part, plc_part = self.node_parts(x, ei, ea)
        return _Heads(
            sel_part=sel_part.double().numpy(),
            plc_part=plc_part.double().numpy(),
            sel_dyn=self.sel_dyn.weight.double().numpy().T.copy(),
            sel_out=self.sel_out.weight.double().numpy()[0].copy(),
            plc_dyn=self.plc_dyn.weight.double().numpy().T.copy(),
            plc_out=self.plc_out.weight.double().numpy()[0].copy(),
        )

    def preschedule(
        self, problem: PlacementProblem, seed: int = 0, *, samples: int = 0, temperature: float = SAMPLE_TEMPERATURE
    ) -> Placement:
        """The policy's placement of ``problem``: greedy decoding, optionally the best of it and samples.

        Parameters
        ----------
        problem : PlacementProblem
        seed : int
            Seeds the sampled decodings (none with ``samples=0``, which is fully deterministic).
        samples : int
            Extra decodings sampled at ``temperature``; the shortest list schedule among them
            and the greedy one is returned (ties: the earlier one, greedy first).
        temperature : float
            Softmax temperature of those samples.

        Returns
        -------
        Placement
            Method ``"rl_policy"``, with the start ticks of its list schedule;
            ``simulate(problem, p, "ordered")`` reproduces them.
        """
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        # One compiled call decodes the greedy row and every sample; the first shortest wins.
        greedy = np.zeros(1 + max(int(samples), 0), dtype=np.bool_)
        greedy[0] = True
        rng = np.random.default_rng(seed) if samples > 0 else None
        rows = decode_rows(problem, self.numpy_heads(problem), greedy, rng=rng, temperature=temperature)
        return rows.placement(int(np.argmin(rows.makespan)))


@dataclass
class _Heads:
    sel_part: np.ndarray  # [n, K] node part of SEL's hidden layer (bias included)
    plc_part: np.ndarray  # [n, K]
    sel_dyn: np.ndarray  # [F_sel, K]
    sel_out: np.ndarray  # [K] (the output bias cancels in the softmax)
    plc_dyn: np.ndarray  # [F_plc, K]
    plc_out: np.ndarray  # [K]


@dataclass
class Trajectory:
    """One decoding, as needed to recompute its log-probabilities with gradients.

    Step t chose ``ready[t][sel_action[t]]`` with SEL features ``sel_features[t]`` and put it on
    device ``plc_action[t]`` with PLC features ``plc_features[t]``.
    """

    placement: Placement
    makespan: int
    ready: list[np.ndarray] = field(default_factory=list)
    sel_features: list[np.ndarray] = field(default_factory=list)
    sel_action: list[int] = field(default_factory=list)
    node: list[int] = field(default_factory=list)
    plc_features: list[np.ndarray] = field(default_factory=list)
    plc_action: list[int] = field(default_factory=list)


def decode(
    problem: PlacementProblem,
    heads: _Heads | None,
    *,
    greedy: bool = True,
    rng: np.random.Generator | None = None,
    teacher: tuple[np.ndarray, np.ndarray] | None = None,
    record: bool = False,
    temperature: float = 1.0,
) -> Trajectory:
    """List-schedule ``problem`` with the policy (or follow a teacher), one op per step.

    Parameters
    ----------
    problem : PlacementProblem
    heads : _Heads or None
        From `PlacementPolicy.numpy_heads`; may be None only with a ``teacher``.
    greedy : bool
        Arg-max actions (inference) or sampled ones (training, needs ``rng``).
    rng : numpy Generator, optional
    teacher : (start, device) arrays, optional
        Follow this schedule instead: SEL takes the ready op the teacher starts first, PLC its
        device (identical devices are relabelled by first use, so labels match the policy's view).
    record : bool
        Keep the per-step features and actions (for imitation and policy gradients).
    temperature : float
        Softmax temperature of sampling.

    Returns
    -------
    Trajectory
        ``placement`` (method ``"rl_policy"``) and its list-schedule ``makespan`` in ticks.

    Raises
    ------
    PlacementError
        When some node's parameters fit only some devices: the decoder does not model memory.
        (Capacities every node fits are not tracked either; ``simulate`` reports any overflow
        in ``memory_violations``.)
    """
    g = problem.graph
    n, D = problem.n_nodes, problem.n_devices
    dur = problem.durations().astype(np.float64)
    ticks = problem.transfer_ticks()
    uniform = problem.uniform_transfer_ticks()
    node_cost, edge_cost = mean_costs(problem)
    unit = max(float(node_cost.mean()), 1e-9) if n else 1.0
    inv_unit = 1.0 / unit
    _check_unrestricted(problem)
    pred_ptr, pred_idx, pred_edge = g.pred_ptr, g.pred_idx, g.pred_edge
    succ_ptr, succ_idx = g.succ_ptr.tolist(), g.succ_idx.tolist()
    pp_l, pi_l, pe_l = pred_ptr.tolist(), pred_idx.tolist(), pred_edge.tolist()
    edge_tr = edge_cost.tolist()  # mean transfer per edge (uniform links: the exact cost)
    in_total_l = (np.bincount(g.dst, weights=edge_cost, minlength=n) if g.n_edges else np.zeros(n)).tolist()

    device = np.full(n, -1, dtype=np.int64)
    dev_l = [-1] * n
    start = np.zeros(n, dtype=np.int64)
    end = np.zeros(n, dtype=np.float64)
    tail = np.zeros(D, dtype=np.float64)
    tail_py = [0.0] * D
    busy_py = [0.0] * D
    used_py = [False] * D
    order: list[list[int]] = [[] for _ in range(D)]
    waiting = g.in_degree.tolist()

    # The ready set as dense rows (swap-remove), filled once per node when its last input is
    # placed: node id, inputs' arrival per device, transfer ticks paid per device, the device
    # that pays least ("home"), its duration per device.
    r_node = np.zeros(n, dtype=np.int64)
    r_arrive = np.zeros((n, D), dtype=np.float64)
    r_pen = np.zeros((n, D), dtype=np.float64)
    r_home = np.zeros(n, dtype=np.int64)
    r_dur = np.zeros((n, D), dtype=np.float64)
    R = 0
    sel_buf = np.zeros((n, len(SEL_FEATURES)), dtype=np.float64)
    rows = np.arange(n)

    # SEL's fast path (inference only): see the step loop.
    fast_sel = teacher is None and not record
    if fast_sel:
        sel_dyn3 = heads.sel_dyn[[0, 1, 3]]
        sel_dyn_pen, sel_dyn_size = heads.sel_dyn[2], heads.sel_dyn[4]
        r_static = np.zeros((n, heads.sel_part.shape[1]), dtype=np.float64)
        sel3_buf = np.zeros((n, 3), dtype=np.float64)
    minimum_reduce = np.minimum.reduce  # skips ndarray.min's Python wrapper, once per step
    uniform_l = uniform.tolist() if uniform is not None else None
    end_l = [0.0] * n

    def push(v):
        nonlocal R
        lo, hi = pp_l[v], pp_l[v + 1]
        if uniform_l is not None:
            # Plain Python over inputs x devices: in-degrees are small, numpy calls are not free.
            arrive = [0.0] * D
            pen = [0.0] * D
            for k in range(lo, hi):
                u = pi_l[k]
                c = uniform_l[pe_l[k]]
                du = dev_l[u]
                eu = end_l[u]
                for d in range(D):
                    if d == du:
                        a = eu
                    else:
                        a = eu + c
                        pen[d] += c
                    if a > arrive[d]:
                        arrive[d] = a
            r_arrive[R] = arrive
            r_pen[R] = pen
            pen_min = min(pen)
            r_home[R] = pen.index(pen_min)
        else:
            if hi > lo:
                us = pred_idx[lo:hi]
                cost = ticks[pred_edge[lo:hi], device[us]].astype(np.float64)
                r_arrive[R] = (end[us][:, None] + cost).max(axis=0)
                pen = cost.sum(axis=0)
            else:
                r_arrive[R] = 0.0
                pen = np.zeros(D)
            r_pen[R] = pen
            r_home[R] = int(pen.argmin())
            pen_min = float(pen[r_home[R]])
        r_node[R] = v
        r_dur[R] = dur[v]
        if fast_sel:
            r_static[R] = heads.sel_part[v] + math.log1p(pen_min * inv_unit) * sel_dyn_pen
        R += 1

    for v in np.flatnonzero(g.in_degree == 0).tolist():
        push(v)

    traj = Trajectory(placement=None, makespan=0)  # type: ignore[arg-type]
    if teacher is not None:
        t_start, t_dev = (np.asarray(a) for a in teacher)
        relabel = len(problem.identical_devices) == 1
        t_map: dict[int, int] = {}
    for _step in range(n):
        nodes = r_node[:R]
        est = np.maximum(r_arrive[:R], tail)
        if R == 1 and not record:
            i = 0  # nothing to select: skip SEL's features (chains make this the common case)
        elif fast_sel:
            # Inference: pen_min and the ready-set size enter SEL's hidden layer linearly after
            # log1p, so they sit in `r_static` (per ready row, set by `push`) and one shared row;
            # only the three timing features are computed here. Same values as the path below.
            est_min = minimum_reduce(est, axis=1)
            ref = minimum_reduce(est_min)
            f3 = sel3_buf[:R]
            np.subtract(est_min, ref, out=f3[:, 0])
            np.subtract(minimum_reduce(est + r_dur[:R], axis=1), ref, out=f3[:, 1])
            np.subtract(est[rows[:R], r_home[:R]], est_min, out=f3[:, 2])
            f3 *= inv_unit
            np.log1p(f3, out=f3)
            hid = f3 @ sel_dyn3
            hid += r_static[:R]
            hid += math.log1p(R / D) * sel_dyn_size
            np.maximum(hid, 0.0, out=hid)
            i = int((hid @ heads.sel_out).argmax()) if greedy else _choose(hid @ heads.sel_out, greedy, rng, temperature)
        else:
            fin = est + r_dur[:R]
            est_min = est.min(axis=1)
            ref = est_min.min()
            # Every SEL feature is a non-negative tick count before the log1p(x / unit) compression.
            f = sel_buf[:R]
            np.subtract(est_min, ref, out=f[:, 0])
            np.subtract(fin.min(axis=1), ref, out=f[:, 1])
            r_pen[:R].min(axis=1, out=f[:, 2])
            np.subtract(est[rows[:R], r_home[:R]], est_min, out=f[:, 3])
            f[:, 4] = R * unit / D
            sel_f = np.log1p(f * inv_unit)
            if teacher is not None:
                i = int(np.lexsort((nodes, t_start[nodes]))[0])
            else:
                hid = heads.sel_part[nodes]
                hid += sel_f @ heads.sel_dyn
                np.maximum(hid, 0.0, out=hid)
                i = _choose(hid @ heads.sel_out, greedy, rng, temperature)
        v = int(nodes[i])

        # PLC's features over D devices in plain Python: D is small, and numpy's per-call
        # overhead would dominate the decoding time of large graphs.
        aff = [0.0] * D
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[k]
            for kk in range(pp_l[w], pp_l[w + 1]):
                u = pi_l[kk]
                if u != v and dev_l[u] >= 0:
                    aff[dev_l[u]] += edge_tr[pe_l[kk]]
        est_i = est[i].tolist()
        dur_i = r_dur[i].tolist()
        arr_i = r_arrive[i].tolist()
        pen_i = r_pen[i].tolist()
        tail_l = tail_py
        fin_i = [a + b for a, b in zip(est_i, dur_i)]
        m_est, m_fin, m_arr, m_tail = min(est_i), min(fin_i), min(arr_i), min(tail_l)
        total_busy = sum(busy_py)
        tot_in = in_total_l[v]
        log1p = math.log1p
        plc_f = np.array(
            [
                [
                    log1p((est_i[d] - m_est) * inv_unit),
                    log1p((fin_i[d] - m_fin) * inv_unit),
                    log1p((arr_i[d] - m_arr) * inv_unit),
                    log1p((tail_l[d] - m_tail) * inv_unit),
                    log1p(pen_i[d] * inv_unit),
                    (1.0 - pen_i[d] / tot_in) if tot_in > 0 else 0.0,
                    log1p(aff[d] * inv_unit),
                    busy_py[d] / total_busy if total_busy > 0 else 0.0,
                    0.0 if used_py[d] else 1.0,
                ]
                for d in range(D)
            ]
        )
        if teacher is not None:
            td = int(t_dev[v])
            if relabel:
                if td not in t_map:
                    free = [d for d in range(D) if not used_py[d]]
                    t_map[td] = free[0] if free else td
                d = t_map[td]
            else:
                d = td
        else:
            hid = plc_f @ heads.plc_dyn
            hid += heads.plc_part[v]
            np.maximum(hid, 0.0, out=hid)
            d = int((hid @ heads.plc_out).argmax()) if greedy else _choose(hid @ heads.plc_out, greedy, rng, temperature)
        if record:
            traj.ready.append(nodes.copy())
            traj.sel_features.append(sel_f.astype(np.float32))
            traj.sel_action.append(i)
            traj.node.append(v)
            traj.plc_features.append(plc_f.astype(np.float32))
            traj.plc_action.append(d)

        s = est_i[d]
        e = s + dur_i[d]
        device[v], dev_l[v], start[v], end[v], end_l[v] = d, d, int(s), e, e
        tail[d] = e
        tail_py[d] = e
        busy_py[d] += e - s
        used_py[d] = True
        order[d].append(v)
        R -= 1
        if i != R:
            r_node[i], r_home[i] = r_node[R], r_home[R]
            r_arrive[i], r_pen[i], r_dur[i] = r_arrive[R], r_pen[R], r_dur[R]
            if fast_sel:
                r_static[i] = r_static[R]
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[k]
            waiting[w] -= 1
            if waiting[w] == 0:
                push(w)
    traj.placement = Placement(device, tuple(tuple(o) for o in order), start=start, method="rl_policy")
    traj.makespan = int(end.max()) if n else 0
    return traj


def _check_unrestricted(problem: PlacementProblem) -> None:
    ok = problem.allowed_devices()
    if any(d.memory is not None for d in problem.devices) and not ok.all():
        raise PlacementError(f"placement policy: problem {problem.name!r} has nodes that fit only some devices; not supported")


# Two decoders exist on purpose. `decode` (numpy) is the reference and what training uses: it
# records per-step features, follows teachers and keeps the shipped checkpoint reproducible.
# `decode_rows` (numba, `placement_kernel`) runs the inference path only, many decodes per call,
# ~100x faster; tests/test_placement_kernel.py holds its greedy rows equal to `decode`'s.


@dataclass
class Decodings:
    """``S`` decodings of one problem by `decode_rows`, row by row.

    Attributes
    ----------
    device, start : int64 arrays [S, n]
        Device and list-schedule start tick of each node.
    seq : int64 array [S, n]
        The node placed at each step: a device's order is its nodes in this order.
    makespan : int64 array [S]
    """

    device: np.ndarray
    start: np.ndarray
    seq: np.ndarray
    makespan: np.ndarray
    n_devices: int

    def placement(self, r: int) -> Placement:
        """Row ``r`` as a `Placement` (method ``"rl_policy"``), as `decode` would build it."""
        seq, device = self.seq[r], self.device[r]
        by_device = seq[np.argsort(device[seq], kind="stable")]
        bounds = np.cumsum(np.bincount(device, minlength=self.n_devices))[:-1]
        order = tuple(tuple(o) for o in np.split(by_device, bounds))
        return Placement(device, order, start=self.start[r], method="rl_policy")


def decode_rows(
    problem: PlacementProblem,
    heads: _Heads,
    greedy: np.ndarray,
    *,
    rng: np.random.Generator | None = None,
    temperature: float = 1.0,
) -> Decodings:
    """Decode ``problem`` once per entry of ``greedy`` with the compiled kernel (inference only).

    Row r is `decode` (``teacher=None, record=False``) with ``greedy=greedy[r]``: greedy rows
    take the same actions as `decode`; sampled rows draw Gumbel noise from their own stream,
    seeded by one 64-bit integer per row drawn from ``rng`` (see `placement_kernel`), so a row's
    draws never depend on the other rows.

    Parameters
    ----------
    problem : PlacementProblem
    heads : _Heads
        From `PlacementPolicy.numpy_heads`.
    greedy : bool array [S]
    rng : numpy Generator, optional
        Needed when some row is sampled.
    temperature : float
        Softmax temperature of the sampled rows.

    Returns
    -------
    Decodings

    Raises
    ------
    PlacementError
        As `decode`: some node's parameters fit only some devices.
    """

    greedy = np.asarray(greedy, dtype=np.bool_).reshape(-1)
    if not greedy.all() and rng is None:
        raise ValueError("decode_rows: sampled rows need an rng")
    _check_unrestricted(problem)
    g = problem.graph
    n = problem.n_nodes
    node_cost, edge_cost = mean_costs(problem)
    unit = max(float(node_cost.mean()), 1e-9) if n else 1.0
    in_total = np.bincount(g.dst, weights=edge_cost, minlength=n) if g.n_edges else np.zeros(n)
    seeds = rng.integers(0, 2**64, size=len(greedy), dtype=np.uint64) if rng is not None else np.zeros(len(greedy), np.uint64)
    i64 = np.int64
    device, start, seq, makespan = call_compiled(  # numba: imported and compiled at the first decode
        "incsched.policy.placement_kernel:decode_rows",
        g.pred_ptr.astype(i64), g.pred_idx.astype(i64), g.pred_edge.astype(i64), g.succ_ptr.astype(i64),
        g.succ_idx.astype(i64), g.in_degree.astype(i64), np.flatnonzero(g.in_degree == 0).astype(i64),
        problem.durations().astype(np.float64), problem.transfer_ticks().astype(np.float64),
        edge_cost.astype(np.float64), in_total.astype(np.float64), 1.0 / unit,
        *(np.ascontiguousarray(a, dtype=np.float64) for a in (heads.sel_part, heads.sel_dyn, heads.sel_out,
                                                              heads.plc_part, heads.plc_dyn, heads.plc_out)),
        greedy, seeds, float(temperature),
    )
    return Decodings(device, start, seq, makespan, problem.n_devices)


def _choose(logits: np.ndarray, greedy: bool, rng, temperature: float) -> int:
    if greedy or len(logits) == 1:
        return int(logits.argmax())
    # Gumbel-max: one draw per step, the same distribution as the softmax at this temperature.
    return int((logits / temperature + rng.gumbel(size=len(logits))).argmax())


# ---------------------------------------------------------------------- checkpoints and the pre-scheduler

#: The placement policy's entry in the checkpoint format: the layout of every input it reads.
CHECKPOINT = register_policy(PolicyKind(
    kind="placement",
    build=lambda config, conv: PlacementPolicy(PolicyConfig(**config), conv=conv),
    layout={
        "node_features": list(NODE_FEATURES),
        "n_op_buckets": N_OP_BUCKETS,
        "placement_node_features": list(PLACEMENT_NODE_FEATURES),
        "edge_features": list(EDGE_FEATURES),
        "sel_features": list(SEL_FEATURES),
        "plc_features": list(PLC_FEATURES),
    },
    default_path=MODELS_DIR / "placement_policy.pt",
))
#: The shipped checkpoint (trained by ``python -m incsched.train.placement``).
DEFAULT_CHECKPOINT = CHECKPOINT.default_path
#: The checkpoint format both policies share (`incsched.policy.checkpoint`), under the names
#: incsched/cli.py's early check imports.
CHECKPOINT_FORMAT, CHECKPOINT_VERSION = FORMAT, VERSION


def save_placement_policy(model: PlacementPolicy, path, *, train_config: dict | None = None, metrics=None) -> Path:
    """Save a `PlacementPolicy` (`incsched.policy.checkpoint.save_checkpoint`); returns the metadata path.

    Parameters
    ----------
    model : PlacementPolicy
    path : str or PathLike
        The weights file; the metadata goes beside it as ``.json``.
    train_config : dict, optional
        The training run's configuration (``PlacementTrainConfig.to_dict()``).
    metrics : optional
        That run's metrics (`incsched.train.metrics`).
    """
    return save_checkpoint(path, model.state_dict(), kind="placement", model_config=model.config.to_dict(),
                           train_config=train_config, metrics=metrics)


def load_placement_policy(path=None, *, conv: str = "plain") -> PlacementPolicy:
    """Read a checkpoint written by `save_placement_policy` (default: the shipped one), in eval mode.

    ``conv`` picks the encoder's ``GINEConv`` implementation (`GraphEncoder`); the default
    ``"plain"`` runs without importing torch_geometric.

    Raises
    ------
    CheckpointError
        See `incsched.policy.checkpoint.load_policy`: missing, corrupt, of another format, version
        or feature layout, or weights that do not fit the recorded architecture.
    """
    return load_policy(path, kind="placement", conv=conv)[0]


@lru_cache(maxsize=4)
def _cached_policy(path: str) -> PlacementPolicy:
    return load_placement_policy(path)


def preschedule(
    problem: PlacementProblem,
    seed: int = 0,
    *,
    checkpoint=None,
    samples: int | None = None,
) -> Placement:
    """The RL pre-scheduler with the baselines' interface: the shipped policy's decoding.

    The best of the greedy decoding and ``samples`` sampled ones (seeded by ``seed``), all in one
    compiled call.

    Parameters
    ----------
    problem : PlacementProblem
    seed : int
        Seeds the sampled decodings; the same seed gives the same placement.
    checkpoint : str or PathLike, optional
        Another checkpoint than `DEFAULT_CHECKPOINT`.
    samples : int, optional
        Sampled decodings on top of the greedy one (0: greedy only); default
        `sampling.default_samples` (64 up to 250 ops, 16 from 1,000 ops up).

    Returns
    -------
    Placement
        Method ``"rl_policy"``, with per-device orders and planned start ticks.

    Raises
    ------
    CheckpointError
        If the checkpoint cannot be read (one line naming the file and the problem).
    """
    model = _cached_policy(str(Path(DEFAULT_CHECKPOINT if checkpoint is None else checkpoint).resolve()))
    k = default_samples(problem.n_nodes) if samples is None else int(samples)
    with torch.inference_mode():
        return model.preschedule(problem, seed, samples=k, temperature=SAMPLE_TEMPERATURE)


def device_preferences(problem: PlacementProblem, placement: Placement, *, checkpoint=None) -> np.ndarray:
    """How the shipped policy ranks the devices of every op, decoding along ``placement``.

    The decoder follows ``placement`` (its start order and devices) as a teacher, and at each op's
    step the PLC head's softmax over devices is read: the policy's view of where that op could have
    gone, in the incumbent's own context. Identical devices are relabelled by first use inside the
    decoder; the probabilities come back under ``placement``'s labels.

    Returns
    -------
    float64 array [n, D]
        Row v sums to 1: the policy's probability of each device for node v.
    """
    model = _cached_policy(str(Path(DEFAULT_CHECKPOINT if checkpoint is None else checkpoint).resolve()))
    n, D = problem.n_nodes, problem.n_devices
    with torch.inference_mode():
        heads = model.numpy_heads(problem)
    if placement.start is None:
        raise ValueError("device_preferences: the placement needs its start ticks (simulate it first)")
    traj = decode(problem, heads, teacher=(np.asarray(placement.start), np.asarray(placement.device)), record=True)
    # The decoder's label of each teacher device (first use); unused labels pair up in order.
    to_teacher = np.full(D, -1, dtype=np.int64)
    for v, d in zip(traj.node, traj.plc_action):
        to_teacher[d] = int(placement.device[v])
    spare = iter(sorted(set(range(D)) - set(to_teacher[to_teacher >= 0].tolist())))
    to_teacher[to_teacher < 0] = [next(spare) for _ in range(int((to_teacher < 0).sum()))]
    probs = np.zeros((n, D), dtype=np.float64)
    for v, f in zip(traj.node, traj.plc_features):
        hid = np.maximum(f.astype(np.float64) @ heads.plc_dyn + heads.plc_part[v], 0.0)
        logits = hid @ heads.plc_out
        e = np.exp(logits - logits.max())
        probs[v, to_teacher] = e / e.sum()
    return probs
