"""The placement policy's inference without torch: its inputs, its heads, its decoders and the pre-scheduler.

`PlacementPolicy` (placement_policy.py, torch) is what training learns; this module is what a
pre-schedule runs. The shipped weights are read as numpy arrays (`checkpoint.load_weight_arrays`:
the ``.npz`` beside the checkpoint, torch only when that is missing), embedded by
`numpy_encoder.encode`, and decoded by the compiled kernel (`decode_rows`), so that a fresh
process pre-schedules without importing torch: seconds of import in the inc-ilp policy child and
in a cold ``solve(p, "rl")``, before a decode of milliseconds.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..baselines.placement import mean_costs
from ..problems import Placement, PlacementError, PlacementProblem
from .checkpoint import MODELS_DIR, load_weight_arrays
from .compiled import call_compiled
from .features import (
    EDGE_FEATURES,
    N_EDGE_FEATURES,
    N_NODE_FEATURES,
    N_OP_BUCKETS,
    NODE_FEATURES,
    edge_feature_array,
    edge_index_array,
    node_feature_array,
)
from .numpy_encoder import check_config_keys, encode, encoder_shapes, linear
from .sampling import default_samples

__all__ = [
    "NumpyPlacementPolicy",
    "Trajectory",
    "Decodings",
    "decode",
    "decode_rows",
    "decode_best",
    "placement_arrays",
    "placement_shapes",
    "PLACEMENT_LAYOUT",
    "N_PLACEMENT_FEATURES",
    "PLACEMENT_NODE_FEATURES",
    "SEL_FEATURES",
    "PLC_FEATURES",
    "SAMPLE_TEMPERATURE",
    "DEFAULT_CHECKPOINT",
    "preschedule",
    "device_preferences",
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


#: The layout of every input the placement policy reads, recorded in its checkpoints.
PLACEMENT_LAYOUT = {
    "node_features": list(NODE_FEATURES),
    "n_op_buckets": N_OP_BUCKETS,
    "placement_node_features": list(PLACEMENT_NODE_FEATURES),
    "edge_features": list(EDGE_FEATURES),
    "sel_features": list(SEL_FEATURES),
    "plc_features": list(PLC_FEATURES),
}
#: The shipped checkpoint (trained by ``python -m incsched.train.placement``).
DEFAULT_CHECKPOINT = MODELS_DIR / "placement_policy.pt"


def placement_arrays(problem: PlacementProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Encoder inputs of a placement problem: ``x [n, N_PLACEMENT_FEATURES]``, ``edge_index``, ``edge_attr``.

    Parameters
    ----------
    problem : PlacementProblem

    Returns
    -------
    tuple of numpy arrays
        Shared node features (``n_slots`` = devices, kind of device 0) followed by the
        transfer-aware columns of `PLACEMENT_NODE_FEATURES`; edge index; edge features.
    """
    g = problem.graph
    n, D = problem.n_nodes, problem.n_devices
    shared = node_feature_array(g, n_slots=D, kind=problem.devices[0].kind)
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
    return np.concatenate([shared, extra], axis=1), edge_index_array(g), edge_feature_array(g)

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



def decode_best(problem: PlacementProblem, heads: _Heads, seed: int, *, samples: int, temperature: float) -> Placement:
    """The best of the greedy decoding and ``samples`` sampled at ``temperature`` (seeded by ``seed``), in one compiled call.

    Ties go to the earlier row, greedy first. Both policies' ``preschedule`` (torch and numpy) end here.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    greedy = np.zeros(1 + max(int(samples), 0), dtype=np.bool_)
    greedy[0] = True
    rng = np.random.default_rng(seed) if samples > 0 else None
    rows = decode_rows(problem, heads, greedy, rng=rng, temperature=temperature)
    return rows.placement(int(np.argmin(rows.makespan)))


# ---------------------------------------------------------------------- the policy as numpy arrays


def placement_shapes(model_config: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """Every weight of a placement policy of ``model_config`` (`PolicyConfig`'s fields), with its shape."""
    check_config_keys(model_config, ("hidden", "n_layers", "head_hidden"))
    H, K = model_config["hidden"], model_config["head_hidden"]
    shapes = encoder_shapes(N_PLACEMENT_FEATURES, N_EDGE_FEATURES, H, model_config["n_layers"])
    for head, n_dyn in (("sel", len(SEL_FEATURES)), ("plc", len(PLC_FEATURES))):
        shapes |= {f"{head}_node.weight": (K, H), f"{head}_node.bias": (K,), f"{head}_dyn.weight": (K, n_dyn),
                   f"{head}_out.weight": (1, K), f"{head}_out.bias": (1,)}
    return shapes


class NumpyPlacementPolicy:
    """A trained `PlacementPolicy`'s inference over its weights as numpy arrays (no torch).

    Parameters
    ----------
    weights : dict of str to float32 array
        The state dict (`placement_shapes`).
    model_config : dict
        The checkpoint's model config.
    """

    def __init__(self, weights: dict[str, np.ndarray], model_config: dict[str, int]):
        self.weights, self.config = weights, dict(model_config)

    @classmethod
    def load(cls, path=None) -> NumpyPlacementPolicy:
        """The checkpoint ``path`` (default `DEFAULT_CHECKPOINT`); raises `CheckpointError` as `load_weight_arrays`."""
        weights, meta = load_weight_arrays(DEFAULT_CHECKPOINT if path is None else path, kind="placement",
                                           layout=PLACEMENT_LAYOUT, shapes=placement_shapes)
        return cls(weights, meta["model_config"])

    def numpy_heads(self, problem: PlacementProblem) -> _Heads:
        """`PlacementPolicy.numpy_heads` in numpy: one encoder pass, the heads' node parts, their weights."""
        w = self.weights
        z = encode(w, *placement_arrays(problem), n_layers=self.config["n_layers"])
        return _Heads(
            sel_part=linear(w, "sel_node", z).astype(np.float64),
            plc_part=linear(w, "plc_node", z).astype(np.float64),
            sel_dyn=w["sel_dyn.weight"].astype(np.float64).T.copy(),
            sel_out=w["sel_out.weight"].astype(np.float64)[0].copy(),
            plc_dyn=w["plc_dyn.weight"].astype(np.float64).T.copy(),
            plc_out=w["plc_out.weight"].astype(np.float64)[0].copy(),
        )

    def preschedule(self, problem: PlacementProblem, seed: int = 0, *, samples: int = 0,
                    temperature: float = SAMPLE_TEMPERATURE) -> Placement:
        """As `PlacementPolicy.preschedule`."""
        return decode_best(problem, self.numpy_heads(problem), seed, samples=samples, temperature=temperature)


@lru_cache(maxsize=4)
def _cached_policy(path: str) -> NumpyPlacementPolicy:
    return NumpyPlacementPolicy.load(path)


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
