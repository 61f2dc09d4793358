"""The placement policy's inference decode, compiled: every requested decode in one call.

`placement_policy.decode` is the reference: it records per-step features for training and
follows teachers, and runs one decode per call as an interpreted loop whose per-step numpy calls
dominate its time. `decode_rows` reproduces its inference path (``teacher=None, record=False``,
SEL's fast path) as plain loops under numba, for ``S`` decodes at once: the greedy one and the
samples of `PlacementPolicy.preschedule`. tests/test_placement_kernel.py holds the two equal.

Every step does what `decode` does, in the same order: the ready set as dense rows with
swap-remove, SEL over the ready rows (first maximum wins, as numpy's argmax), PLC over the
devices, the chosen op last on the chosen device. Sums of the heads' hidden units run in a fixed
order (no fastmath), so results are the same on every machine; they may differ from numpy's BLAS
products in the last bit, which can only matter on exact ties of logits.

Transfers come as ``ticks[e, d_from, d_to]`` for every problem. Uniform links are the special
case ``ticks[e, a, b] = c_e`` off the diagonal and 0 on it, and `decode`'s uniform fast path adds
``c_e`` exactly where this one adds ``ticks[e, a, b]`` (and 0.0 elsewhere): the same exact
integer-valued sums, so one code path covers both.

Sampled rows draw Gumbel noise from their own splitmix64 stream, seeded by ``seeds[r]``: one
draw per candidate whenever a step has more than one (SEL with two or more ready ops, PLC with
two or more devices), in candidate order. A row's draws depend only on its seed and its own path,
never on the other rows.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .kernel_math import fixed_order_sum

__all__ = ["decode_rows"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


@njit(cache=True, nogil=True)
def _gumbel(state):  # pragma: no cover - compiled
    """One splitmix64 step: the new state and a standard Gumbel draw from it."""
    state = state + _GOLDEN
    z = state
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    z = z ^ (z >> _S31)
    u = (np.float64(z >> _S11) + 0.5) * (1.0 / 9007199254740992.0)  # in (0, 1): 53 bits, centred
    return state, -math.log(-math.log(u))


@njit(cache=True, nogil=True)
def _pick(logits, m, greedy, state, temperature):  # pragma: no cover - compiled
    """Index among ``logits[:m]``: the first maximum, or Gumbel-max at ``temperature`` (one draw
    per candidate, in order); returns it with the row's new random state."""
    best = -np.inf
    choice = 0
    for j in range(m):
        x = logits[j]
        if not greedy:
            state, g = _gumbel(state)
            x = x / temperature + g
        if x > best:
            best = x
            choice = j
    return choice, state


@njit(cache=True, nogil=True)
def _push(w, R, dev, end, pred_ptr, pred_idx, pred_edge, ticks, inv_unit, sel_part, sel_pen,
          r_node, r_home, r_arrive, r_pen, r_static):  # pragma: no cover - compiled
    """Fill ready row ``R`` with node ``w``: inputs' arrival and transfer ticks paid per device, the
    device that pays least ("home", first on ties), and SEL's per-op constant part."""
    D = r_arrive.shape[1]
    for d in range(D):
        r_arrive[R, d] = 0.0
        r_pen[R, d] = 0.0
    for k in range(pred_ptr[w], pred_ptr[w + 1]):
        u = pred_idx[k]
        e = pred_edge[k]
        du = dev[u]
        for d in range(D):
            c = ticks[e, du, d]
            a = end[u] + c
            r_pen[R, d] += c
            if a > r_arrive[R, d]:
                r_arrive[R, d] = a
    home = 0
    for d in range(1, D):
        if r_pen[R, d] < r_pen[R, home]:
            home = d
    lp = math.log1p(r_pen[R, home] * inv_unit)
    r_node[R] = w
    r_home[R] = home
    for k in range(sel_part.shape[1]):
        r_static[R, k] = sel_part[w, k] + lp * sel_pen[k]


@njit(cache=True, nogil=True)
def decode_rows(pred_ptr, pred_idx, pred_edge, succ_ptr, succ_idx, in_degree, sources, dur, ticks, edge_mean,
                in_total, inv_unit, sel_part, sel_dyn, sel_out, plc_part, plc_dyn, plc_out,
                greedy, seeds, temperature):  # pragma: no cover - compiled
    """Decode ``len(greedy)`` placements; row r is greedy when ``greedy[r]``, else sampled from ``seeds[r]``.

    Parameters
    ----------
    pred_ptr, pred_idx, pred_edge, succ_ptr, succ_idx : int64 arrays
        The graph's CSR adjacency (`CompGraph` attributes of the same names).
    in_degree : int64 array [n]
    sources : int64 array
        Nodes without inputs, in increasing order (the ready set's first rows).
    dur : float64 array [n, D]
        Ticks of each node on each device.
    ticks : float64 array [m, D, D]
        Transfer ticks of each edge from its producer's device to each device (0 on the diagonal).
    edge_mean : float64 array [m]
        Mean transfer ticks of each edge over distinct device pairs (PLC's affinity).
    in_total : float64 array [n]
        Summed ``edge_mean`` of each node's inputs.
    inv_unit : float
        One over the mean op duration (features are in units of it).
    sel_part, sel_dyn, sel_out, plc_part, plc_dyn, plc_out : float64 arrays
        The heads (`_Heads` of placement_policy): node parts [n, K], dynamic weights [F, K],
        output weights [K].
    greedy : bool array [S]
    seeds : uint64 array [S]
        Seeds of the sampled rows' Gumbel streams (ignored for greedy rows).
    temperature : float
        Sampling temperature: a row takes the arg-max of logits / temperature + Gumbel noise.

    Returns
    -------
    device : int64 array [S, n]
    start : int64 array [S, n]
        Start tick of each node in its row's list schedule.
    seq : int64 array [S, n]
        The node placed at each step; a device's order is its nodes in this order.
    makespan : int64 array [S]
    """
    S = greedy.shape[0]
    n, D = dur.shape
    K = sel_part.shape[1]
    device = np.full((S, n), -1, dtype=np.int64)
    start = np.zeros((S, n), dtype=np.int64)
    seq = np.zeros((S, n), dtype=np.int64)
    makespan = np.zeros(S, dtype=np.int64)

    # SEL's inputs: the timing features' weights, and the two features that enter linearly
    # after log1p (pen_min per ready op, folded into r_static; the ready-set size, per step).
    sel_pen = sel_dyn[2]
    sel_size = sel_dyn[4]

    end = np.zeros(n)
    waiting = np.empty(n, dtype=np.int64)
    tail = np.zeros(D)
    busy = np.zeros(D)
    used = np.zeros(D, dtype=np.bool_)
    aff = np.zeros(D)
    est = np.zeros(D)
    fin = np.zeros(D)
    plc_f = np.zeros(9)
    plc_logit = np.zeros(D)
    # The ready set as dense rows (swap-remove), as in `decode`.
    r_node = np.zeros(n, dtype=np.int64)
    r_arrive = np.zeros((n, D))
    r_pen = np.zeros((n, D))
    r_home = np.zeros(n, dtype=np.int64)
    r_static = np.zeros((n, K))
    sel_logit = np.zeros(n)
    r_est = np.zeros(n)
    r_fin = np.zeros(n)
    size_part = np.zeros(K)
    hidden = np.zeros(K)

    for r in range(S):
        dev = device[r]
        state = seeds[r]
        for v in range(n):
            end[v] = 0.0
            waiting[v] = in_degree[v]
        for d in range(D):
            tail[d] = 0.0
            busy[d] = 0.0
            used[d] = False
        R = 0
        for j in range(sources.shape[0]):
            _push(sources[j], R, dev, end, pred_ptr, pred_idx, pred_edge, ticks, inv_unit, sel_part, sel_pen,
                  r_node, r_home, r_arrive, r_pen, r_static)
            R += 1
        for step in range(n):
            # SEL: which ready op goes next.
            i = 0
            if R > 1:
                # Each ready op's earliest start and finish over devices, then the reference.
                ref = np.inf
                for j in range(R):
                    v = r_node[j]
                    est_min = np.inf
                    fin_min = np.inf
                    for d in range(D):
                        x = max(r_arrive[j, d], tail[d])
                        est_min = min(est_min, x)
                        fin_min = min(fin_min, x + dur[v, d])
                    r_est[j] = est_min
                    r_fin[j] = fin_min
                    ref = min(ref, est_min)
                size = math.log1p(R / D)
                for k in range(K):
                    size_part[k] = size * sel_size[k]
                for j in range(R):
                    f0 = math.log1p((r_est[j] - ref) * inv_unit)
                    f1 = math.log1p((r_fin[j] - ref) * inv_unit)
                    hd = r_home[j]
                    f2 = math.log1p((max(r_arrive[j, hd], tail[hd]) - r_est[j]) * inv_unit)
                    # Element-wise over hidden units (vectorises), then one fixed-order sum.
                    for k in range(K):
                        h = f0 * sel_dyn[0, k] + f1 * sel_dyn[1, k] + f2 * sel_dyn[3, k]
                        h = h + r_static[j, k]
                        h = h + size_part[k]
                        hidden[k] = max(h, 0.0) * sel_out[k]
                    sel_logit[j] = fixed_order_sum(hidden)
                i, state = _pick(sel_logit, R, greedy[r], state, temperature)
            v = r_node[i]

            # PLC: which device it goes on.
            for d in range(D):
                aff[d] = 0.0
            for k in range(succ_ptr[v], succ_ptr[v + 1]):
                w = succ_idx[k]
                for kk in range(pred_ptr[w], pred_ptr[w + 1]):
                    u = pred_idx[kk]
                    if u != v and dev[u] >= 0:
                        aff[dev[u]] += edge_mean[pred_edge[kk]]
            m_est = m_fin = m_arr = m_tail = np.inf
            total_busy = 0.0
            for d in range(D):
                est[d] = max(r_arrive[i, d], tail[d])
                fin[d] = est[d] + dur[v, d]
                m_est = min(m_est, est[d])
                m_fin = min(m_fin, fin[d])
                m_arr = min(m_arr, r_arrive[i, d])
                m_tail = min(m_tail, tail[d])
                total_busy += busy[d]
            tot_in = in_total[v]
            d_best = 0
            if D > 1:
                for d in range(D):
                    plc_f[0] = math.log1p((est[d] - m_est) * inv_unit)
                    plc_f[1] = math.log1p((fin[d] - m_fin) * inv_unit)
                    plc_f[2] = math.log1p((r_arrive[i, d] - m_arr) * inv_unit)
                    plc_f[3] = math.log1p((tail[d] - m_tail) * inv_unit)
                    plc_f[4] = math.log1p(r_pen[i, d] * inv_unit)
                    plc_f[5] = (1.0 - r_pen[i, d] / tot_in) if tot_in > 0 else 0.0
                    plc_f[6] = math.log1p(aff[d] * inv_unit)
                    plc_f[7] = busy[d] / total_busy if total_busy > 0 else 0.0
                    plc_f[8] = 0.0 if used[d] else 1.0
                    for k in range(K):
                        hidden[k] = 0.0
                    for c in range(9):  # each unit sums its features in order; units vectorise
                        fc = plc_f[c]
                        for k in range(K):
                            hidden[k] += fc * plc_dyn[c, k]
                    for k in range(K):
                        hidden[k] = max(hidden[k] + plc_part[v, k], 0.0) * plc_out[k]
                    plc_logit[d] = fixed_order_sum(hidden)
                d_best, state = _pick(plc_logit, D, greedy[r], state, temperature)
            d = d_best

            # List-schedule v last on d, then drop its ready row (swap-remove).
            s = est[d]
            e = s + dur[v, d]
            dev[v] = d
            start[r, v] = int(s)
            end[v] = e
            tail[d] = e
            busy[d] += e - s
            used[d] = True
            seq[r, step] = v
            R -= 1
            if i != R:
                r_node[i] = r_node[R]
                r_home[i] = r_home[R]
                for dd in range(D):
                    r_arrive[i, dd] = r_arrive[R, dd]
                    r_pen[i, dd] = r_pen[R, dd]
                for k in range(K):
                    r_static[i, k] = r_static[R, k]
            # Successors whose last input this was become ready, in successor order.
            for k in range(succ_ptr[v], succ_ptr[v + 1]):
                w = succ_idx[k]
                waiting[w] -= 1
                if waiting[w] == 0:
                    _push(w, R, dev, end, pred_ptr, pred_idx, pred_edge, ticks, inv_unit, sel_part, sel_pen,
                          r_node, r_home, r_arrive, r_pen, r_static)
                    R += 1
        ms = 0.0
        for v in range(n):
            if end[v] > ms:
                ms = end[v]
        makespan[r] = int(ms)
    return device, start, seq, makespan
