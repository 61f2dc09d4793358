"""The stage policy's inference without torch: its inputs, its decoder and the pre-schedulers built on it.

`StagePolicy` (stage_policy.py, torch) is what training learns; both it and `NumpyStagePolicy`
(the shipped weights as numpy arrays, `checkpoint.load_weight_arrays`, embedded by
`numpy_encoder.encode`) decode through `StageDecoder`, so a fresh process pre-schedules without
importing torch. What the policy is and how it decodes:

Pipeline position: `StageProblem` -> (this) -> incumbent stages + per-node confidence -> the
relaxation step, which sizes each node's window from its confidence. The graph is embedded once by
`GraphEncoder`; then nodes are decoded one by one in the graph's topological order. Each node's
stage distribution comes from a small head that reads the node's embedding together with the
*running state* of the decoding (every stage's load so far against the even share, the peak so
far, the edges each choice would cross ...), and is masked to stages >= every predecessor's
stage, so precedence holds by construction. The decode order is a depth-first topological order
(`depth_first_order`), which keeps the branches of a block together. The same state features are computed for a whole
trajectory at once (`trajectory_states`) to train by teacher forcing and policy gradient.

Three pre-schedulers (each ``f(problem, seed) -> stages``), from the policy alone to the policy
plus an exact split:
- `preschedule_policy`: the greedy decode, nothing else;
- `preschedule_sampled` ("rl"): the best of the greedy decode and 16 to 64 seeded samples at
  temperature 0.5 (`default_samples`; all decoded in one compiled pass, `stage_kernel`), picked
  by the evaluator: still only the policy's own assignments;
- `preschedule` ("rl+dp", what `solve()` uses): those candidates re-cut exactly along the order the
  policy chose (stage, then topological position) by the contiguous-run dynamic program of
  `incsched.baselines.stage`. The cut only moves boundaries within the policy's own order, never
  falls back to another heuristic's order, and is kept only when the evaluator scores it no worse.
`preschedule_with_fallback` ("rl+fallback") also takes DeepSpeed's contiguous split when that is
better, and says so.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..baselines.stage import best_split_of_order, contiguous_params
from ..evaluate.stage import evaluate_stages
from ..problems.stage import StageProblem
from .checkpoint import MODELS_DIR, load_weight_arrays
from .compiled import call_compiled
from .features import EDGE_FEATURES, N_EDGE_FEATURES, N_NODE_FEATURES, N_OP_BUCKETS, NODE_FEATURES, edge_feature_array, edge_index_array, node_feature_array
from .numpy_encoder import check_config_keys, encode, encoder_shapes, linear
from .sampling import default_samples

__all__ = [
    "StageDecoder",
    "NumpyStagePolicy",
    "StageDecoding",
    "GraphTensors",
    "graph_arrays",
    "stage_shapes",
    "STATE_FEATURES",
    "STAGE_LAYOUT",
    "DEFAULT_CHECKPOINT",
    "preschedule",
    "preschedule_policy",
    "preschedule_sampled",
    "preschedule_with_fallback",
    "default_samples",
    "recut_along_order",
    "depth_first_order",
]

log = logging.getLogger(__name__)

#: Running-state features of (node v, candidate stage k) while decoding; T = total params / K.
STATE_FEATURES = (
    "load_after",  # (params on stage k so far + p_v) / T
    "load_before",  # params on stage k so far / T
    "peak_rise",  # how much choosing k raises the peak stage load so far, / T
    "peak_so_far",  # peak stage load so far / T
    "stage_pos",  # k / K
    "beyond_min",  # (k - earliest allowed stage) / K
    "is_min",  # k is the earliest allowed stage
    "done",  # params decoded so far / total params
    "node_share",  # p_v / T
    "cross",  # data-carrying in-edges' boundary crossings if v takes k, / (in-degree + 1)
    "room_after",  # spare room of the stages k..K-1 (even share minus load, >= 0) / total params
    "rest",  # params not yet decoded (v excluded) / total params
    "target",  # the contiguous split's bottleneck (a peak known to be reachable) / T
    "after_over_target",  # (params on stage k so far + p_v) / that bottleneck
    "fits_target",  # stage k still holds v within that bottleneck
)
N_STATE = len(STATE_FEATURES)


#: The layout of every input the stage policy reads, recorded in its checkpoints.
STAGE_LAYOUT = {
    "node_features": list(NODE_FEATURES),
    "n_op_buckets": N_OP_BUCKETS,
    "edge_features": list(EDGE_FEATURES),
    "state_features": list(STATE_FEATURES),
}
#: The shipped checkpoint (trained by ``incsched train stage``).
DEFAULT_CHECKPOINT = MODELS_DIR / "stage_policy.pt"


@dataclass(frozen=True)
class GraphTensors:
    """Everything the policy reads about one problem, computed once per problem.

    ``x``, ``edge_index`` and ``edge_attr`` are numpy arrays (`graph_arrays`, inference) or the
    same values as torch tensors (`stage_policy.graph_tensors`, training).
    """

    x: Any
    edge_index: Any
    edge_attr: Any
    order: np.ndarray  # decode order (topological)
    params: np.ndarray  # float64 param bytes
    units: np.ndarray  # communication units per edge (0/1 in the peer form)
    n_stages: int
    target: float  # bottleneck of the parameter-balanced contiguous split of `order`


def graph_arrays(problem: StageProblem) -> GraphTensors:
    """Features, edges and decode order of ``problem`` (see `features`).

    Parameters
    ----------
    problem : StageProblem

    Returns
    -------
    GraphTensors
    """
    g = problem.graph
    order = depth_first_order(g)
    kahn = g.topological_order()
    return GraphTensors(
        x=node_feature_array(g, n_slots=problem.n_stages, kind=problem.device_kind),
        edge_index=edge_index_array(g),
        edge_attr=edge_feature_array(g),
        order=order,
        # Shared weights counted with each reader (`CompGraph.node_weight_bytes`), as in the features:
        # a proxy for the decoder's running loads; the evaluator prices its answer exactly.
        params=g.node_weight_bytes.astype(np.float64),
        units=(problem.graph.edge_bytes > 0).astype(np.float64),
        n_stages=problem.n_stages,
        target=min(_contiguous_bottleneck(g.node_weight_bytes[o], problem.n_stages) for o in (order, kahn)),
    )


def depth_first_order(graph) -> np.ndarray:
    """The decode order: `CompGraph.topological_order` depth first, so a block's branch decodes together."""
    return graph.topological_order(depth_first=True)


def _contiguous_bottleneck(loads: np.ndarray, K: int) -> float:
    """Least peak at which ``loads`` (in order) split into K contiguous runs: binary search, greedy fill."""
    prefix = np.concatenate([[0], np.cumsum(loads, dtype=np.int64)])
    total = int(prefix[-1])

    def fits(cap: int) -> bool:
        i = 0
        for _ in range(K):
            i = int(np.searchsorted(prefix, prefix[i] + cap, side="right")) - 1
            if i >= len(loads):
                return True
        return False

    lo, hi = int(loads.max(initial=0)), total
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return float(lo)


@dataclass(frozen=True)
class StageDecoding:
    """One decoded assignment: stages, the probability of each chosen stage, and the total log-probability."""

    stages: np.ndarray
    confidence: np.ndarray
    log_prob: float
    seconds: float


@dataclass(frozen=True)
class _HeadParts:
    """The decoder head of one graph as float64 arrays: a decoding step sums rows of these (`stage_kernel`)."""

    T: float  # total params / K
    P: float  # total params
    target: float
    w: np.ndarray  # [D] output weights (its bias cancels in the softmax)
    stage_rows: np.ndarray  # [K, D] stage position terms
    load_coef: np.ndarray  # [D] per unit of a stage's load
    b_room: np.ndarray
    b_fits: np.ndarray
    b_rise: np.ndarray
    b_min: np.ndarray
    ks_cross: np.ndarray  # [K, D] k * cross row
    node_base: np.ndarray  # [n, D] each node's static part
    B_dyn: np.ndarray  # [4, D] rows of peak / T, done / P, lo / K, cb / (deg + 1)


class StageDecoder:
    """The stage policy's sequential decoding, over whichever implementation computes its embeddings.

    ``logit(v, k) = w . relu(A h_v + B state(v, k) + b) + c``, masked to k >= max over predecessors.
    A subclass provides the graph inputs (`_graph_inputs`), the per-node terms ``A h_v + b``
    (`_node_terms_array`) and the head's ``B`` and ``w`` (`_head_weights`), all as numpy arrays.
    """

    def _graph_inputs(self, problem: StageProblem) -> GraphTensors:
        raise NotImplementedError

    def _node_terms_array(self, gt: GraphTensors) -> np.ndarray:
        raise NotImplementedError

    def _head_weights(self) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _head_parts(self, gt: GraphTensors) -> _HeadParts:
        """The decoder head split into per-graph, per-node and per-stage parts (see `decode`)."""
        K, n = gt.n_stages, len(gt.params)
        p = gt.params
        total = float(p.sum())
        T = total / K if total > 0 else 1.0
        P = total if total > 0 else 1.0
        target = float(gt.target)
        tdiv = max(target, 1.0)
        # The head is linear in the state before its relu, so its hidden layer is a sum of rows of
        # B (``state_proj``) weighted by the state features. The parts that change only when a
        # stage's load changes (load, room, fits-the-target at zero weight) live in `stage_base`
        # [K, D], refreshed only after a node with parameters; the node's own static part in
        # `node_base` [n, D], computed once for all nodes. A step of `stage_kernel` then sums a few
        # of these rows per candidate stage. Same values as `_state` @ B up to rounding (tests
        # check against the batched path).
        B, w = self._head_weights()  # B: (N_STATE, D)
        f = {name: i for i, name in enumerate(STATE_FEATURES)}
        ks = np.arange(K, dtype=np.float64)
        stage_rows = np.outer(ks / K, B[f["stage_pos"]] + B[f["beyond_min"]])
        load_coef = (B[f["load_after"]] + B[f["load_before"]]) / T + B[f["after_over_target"]] / tdiv
        b_room, b_fits, b_rise, b_min = B[f["room_after"]], B[f["fits_target"]], B[f["peak_rise"]], B[f["is_min"]]
        ks_cross = np.outer(ks, B[f["cross"]])
        # Per-node static part: embedding, the target, the node's own weight, "rest" but for `done`.
        a = self._node_terms_array(gt)
        node_base = (a + (target / T) * B[f["target"]] + B[f["rest"]]
                     + np.outer(p / T, B[f["load_after"]] + B[f["node_share"]])
                     + np.outer(p / tdiv, B[f["after_over_target"]])
                     - np.outer(p / P if total > 0 else np.zeros(n), B[f["rest"]]))
        if total <= 0:
            node_base -= B[f["rest"]]  # "rest" is 0 on a graph without parameters
        # Per-step dynamic scalars: peak / T, done / P, lo / K, cb / (deg + 1).
        B_dyn = np.stack([B[f["peak_so_far"]], B[f["done"]] - (B[f["rest"]] if total > 0 else 0.0), -B[f["beyond_min"]], -B[f["cross"]]])
        return _HeadParts(T=T, P=P, target=target, w=w, stage_rows=stage_rows, load_coef=load_coef, b_room=b_room,
                          b_fits=b_fits, b_rise=b_rise, b_min=b_min, ks_cross=ks_cross, node_base=node_base, B_dyn=B_dyn)


    def decode(self, problem: StageProblem, *, greedy: bool = True, rng: np.random.Generator | None = None,
               gt: GraphTensors | None = None, temperature: float = 1.0) -> StageDecoding:
        """Decode one stage per node in `depth_first_order`.

        Parameters
        ----------
        problem : StageProblem
        greedy : bool
            Take each node's most likely stage (inference); else sample (training).
        rng : numpy.random.Generator, optional
            For sampling; required when ``greedy`` is False.
        gt : GraphTensors, optional
            Precomputed `graph_arrays` (or `graph_tensors`) of ``problem``.
        temperature : float
            Softmax temperature of sampling and of the reported confidence (training uses 1).

        Returns
        -------
        StageDecoding
            Stages (precedence-feasible by construction), per-node confidence (probability of the
            chosen stage), total log-probability, and wall seconds. A hard capacity is honoured
            best-effort only: stages it rules out for a node are masked while another stage can
            still take the node (the policy was trained without capacities); the evaluator decides.
        """
        t0 = time.perf_counter()
        if not greedy and rng is None:
            raise ValueError("sampling needs an rng")
        stages, conf, log_prob = self._decode_rows(problem, gt, np.array([greedy]), rng, temperature)
        return StageDecoding(stages[0], conf[0], float(log_prob[0]), time.perf_counter() - t0)

    def decode_samples(self, problem: StageProblem, n_samples: int, rng: np.random.Generator, *, temperature: float = 1.0,
                       gt: GraphTensors | None = None, include_greedy: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Sample ``n_samples`` assignments: `decode` with ``greedy=False``, all from one encoder pass.

        Every sample follows its own trajectory (its own stage loads, peak and earliest stages)
        and is masked to stages at or above its own predecessors', so precedence holds in every
        sample.

        Parameters
        ----------
        problem : StageProblem
        n_samples : int
            S >= 1.
        rng : numpy.random.Generator
        temperature : float
            Softmax temperature (1 is the trained distribution; lower concentrates on the mode).
        gt : GraphTensors, optional
        include_greedy : bool
            Prepend the greedy decode as row 0 (then S + 1 rows).

        Returns
        -------
        stages : int array (S, n)
            Precedence-feasible assignments (hard capacity best effort, as in `decode`).
        log_prob : float array (S,)
            Each sample's log-probability under the tempered distribution.
        """
        if n_samples < 1:
            raise ValueError(f"n_samples must be >= 1, got {n_samples!r}")
        greedy = np.zeros(int(n_samples) + bool(include_greedy), dtype=np.bool_)
        greedy[0] = include_greedy
        stages, _, log_prob = self._decode_rows(problem, gt, greedy, rng, temperature)
        return stages, log_prob

    def _decode_rows(self, problem: StageProblem, gt: GraphTensors | None, greedy: np.ndarray,
                     rng: np.random.Generator | None, temperature: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Run `stage_kernel.decode_rows`: one row per entry of ``greedy`` (sampled rows draw from ``rng``)."""

        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        gt = gt or self._graph_inputs(problem)
        g = problem.graph
        hp = self._head_parts(gt)
        n_sampled = int((~greedy).sum())
        # One uniform per (sampled row, node in decode order), drawn up front so the draws do not
        # depend on the path a row takes.
        uniforms = rng.random((len(greedy), g.n_nodes)) if n_sampled else np.zeros((len(greedy), 0))
        cap = problem.capacity_array()
        return call_compiled(  # numba: imported and compiled at the first decode, not with the policy
            "incsched.policy.stage_kernel:decode_rows",
            gt.order.astype(np.int64), g.pred_ptr.astype(np.int64), g.pred_idx.astype(np.int64), g.pred_edge.astype(np.int64),
            gt.units, gt.params, np.zeros(problem.n_stages) if cap is None else np.asarray(cap, dtype=np.float64), cap is not None,
            hp.node_base, hp.stage_rows, hp.load_coef, hp.b_room, hp.b_fits, hp.b_rise, hp.b_min, hp.ks_cross, hp.B_dyn, hp.w,
            hp.T, hp.P, hp.target, greedy, uniforms, 1.0 / temperature,
        )



def stage_shapes(model_config: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """Every weight of a stage policy of ``model_config`` (`StagePolicy`'s arguments), with its shape."""
    check_config_keys(model_config, ("hidden", "n_layers", "decoder_hidden"))
    H, D = model_config["hidden"], model_config["decoder_hidden"]
    return encoder_shapes(N_NODE_FEATURES, N_EDGE_FEATURES, H, model_config["n_layers"]) | {
        "node_proj.weight": (D, H), "node_proj.bias": (D,), "state_proj.weight": (D, N_STATE),
        "out.weight": (1, D), "out.bias": (1,)}


class NumpyStagePolicy(StageDecoder):
    """A trained `StagePolicy`'s inference over its weights as numpy arrays (no torch).

    Parameters
    ----------
    weights : dict of str to float32 array
        The state dict (`stage_shapes`).
    model_config : dict
        The checkpoint's model config.
    """

    def __init__(self, weights: dict[str, np.ndarray], model_config: dict[str, int]):
        self.weights, self.config = weights, dict(model_config)

    @classmethod
    def load(cls, path=None) -> NumpyStagePolicy:
        """The checkpoint ``path`` (default `DEFAULT_CHECKPOINT`); raises `CheckpointError` as `load_weight_arrays`."""
        weights, meta = load_weight_arrays(DEFAULT_CHECKPOINT if path is None else path, kind="stage", layout=STAGE_LAYOUT,
                                           shapes=stage_shapes)
        return cls(weights, meta["model_config"])

    def _graph_inputs(self, problem: StageProblem) -> GraphTensors:
        return graph_arrays(problem)

    def _node_terms_array(self, gt: GraphTensors) -> np.ndarray:
        h = encode(self.weights, gt.x, gt.edge_index, gt.edge_attr, n_layers=self.config["n_layers"])
        return linear(self.weights, "node_proj", h).astype(np.float64)

    def _head_weights(self) -> tuple[np.ndarray, np.ndarray]:
        return self.weights["state_proj.weight"].astype(np.float64).T, self.weights["out.weight"].astype(np.float64)[0]


# ---------------------------------------------------------------------- pre-scheduler interface


def recut_along_order(problem: StageProblem, stages: np.ndarray) -> np.ndarray:
    """Re-cut an assignment exactly along its own order: the best contiguous split of (stage, topo position).

    Sorting nodes by (stage, topological position) gives a topological order in which the given
    assignment is one contiguous split; the contiguous-run dynamic program then finds the best
    split of that same order (memory-capped runs of least communication, several caps), and the
    result is kept only if `evaluate_stages` scores it no worse than ``stages``.

    Parameters
    ----------
    problem : StageProblem
    stages : int array (n,)
        A precedence-feasible assignment.

    Returns
    -------
    numpy.ndarray
        Stages, never worse than ``stages`` under the problem's objective.
    """
    g = problem.graph
    if problem.n_stages == 1 or g.n_nodes == 0:
        return np.asarray(stages, dtype=np.int64)
    base = evaluate_stages(problem, stages)
    best, best_key = np.asarray(stages, dtype=np.int64), (not base.feasible, base.objective)
    # Within a stage the policy fixes no order; both topological tie-breaks are tried.
    for tie_order in (depth_first_order(g), g.topological_order()):
        pos = np.empty(g.n_nodes, dtype=np.int64)
        pos[tie_order] = np.arange(g.n_nodes)
        order = np.lexsort((pos, stages))
        cand, key = best_split_of_order(
            problem, order, mem_factors=(0, 5, 20), time_factors=(0,), extra_mem_caps=(int(base.mem_peak),), uncapped=False
        )
        if cand is not None and key < best_key:
            best, best_key = cand, key
    return best


_DEFAULT: dict[str, NumpyStagePolicy] = {}


def _default_policy() -> NumpyStagePolicy:
    if "stage" not in _DEFAULT:
        _DEFAULT["stage"] = NumpyStagePolicy.load()
    return _DEFAULT["stage"]


def preschedule_policy(problem: StageProblem, seed: int = 0, policy: StageDecoder | None = None) -> np.ndarray:
    """The shipped stage policy alone, greedy: stages in topological order, no re-cut.

    Parameters
    ----------
    problem : StageProblem
    seed : int
        Accepted for the common interface; greedy decoding does not depend on it.
    policy : StagePolicy, optional
        Default: the shipped checkpoint ``data/models/stage_policy.pt``.

    Returns
    -------
    numpy.ndarray
        One stage per node, precedence-feasible.
    """
    policy = policy or _default_policy()
    return policy.decode(problem).stages


#: Temperature of the sampled decodes: the tempered distribution finds better assignments than
#: the trained one (benchmarks/rl_stage.py). How many: `sampling.default_samples`.
SAMPLE_TEMPERATURE = 0.5


def _policy_candidates(problem: StageProblem, seed: int, policy: StagePolicy, n_samples: int | None,
                       temperature: float) -> list[np.ndarray]:
    """The greedy decode and the best of the seeded sampled ones (by the evaluator), from one encoder pass."""
    n_samples = default_samples(problem.graph.n_nodes) if n_samples is None else int(n_samples)
    if n_samples <= 0 or problem.graph.n_nodes == 0:
        return [policy.decode(problem).stages]
    rows, _ = policy.decode_samples(problem, n_samples, np.random.default_rng(seed), temperature=temperature,
                                    include_greedy=True)
    return [rows[0], min(rows[1:], key=lambda s: _rank(problem, s))]


def preschedule_sampled(problem: StageProblem, seed: int = 0, policy: StageDecoder | None = None, n_samples: int | None = None,
                        temperature: float = SAMPLE_TEMPERATURE) -> np.ndarray:
    """"rl": the policy alone, searched: the best of its greedy decode and ``n_samples`` sampled ones.

    Every candidate is one of the policy's own decodes (no heuristic, no re-cut); the evaluator
    only picks among them, the way the placement pre-scheduler keeps its best sampled decode.

    Parameters
    ----------
    problem : StageProblem
    seed : int
        Seeds the samples (same seed, same result).
    policy : StagePolicy, optional
        Default: the shipped checkpoint.
    n_samples : int, optional
        Default `default_samples`; 0 gives the greedy decode.
    temperature : float
        Sampling temperature (default `SAMPLE_TEMPERATURE`).

    Returns
    -------
    numpy.ndarray
        One stage per node, precedence-feasible, never worse than `preschedule_policy`'s.
    """
    policy = policy or _default_policy()
    return min(_policy_candidates(problem, seed, policy, n_samples, temperature), key=lambda s: _rank(problem, s))


def preschedule(problem: StageProblem, seed: int = 0, policy: StageDecoder | None = None, n_samples: int | None = None,
                temperature: float = SAMPLE_TEMPERATURE) -> np.ndarray:
    """"rl+dp": the policy's greedy and best sampled decodes, each re-cut exactly along its own order.

    The candidates of `preschedule_sampled` (seeded by ``seed``, so the result is reproducible)
    are each re-cut by `recut_along_order` -- an exact dynamic program over contiguous splits of
    the order the policy chose -- and the best kept. No other heuristic's assignment or order
    enters; the split itself is exact, not learned.

    Parameters
    ----------
    problem : StageProblem
    seed : int
        Seeds the sampled decodes.
    policy : StagePolicy, optional
        Default: the shipped checkpoint.
    n_samples : int, optional
        Sampled decodes; default `default_samples`. 0 gives the greedy decode re-cut.
    temperature : float
        Sampling temperature (default `SAMPLE_TEMPERATURE`).

    Returns
    -------
    numpy.ndarray
        One stage per node, precedence-feasible, never worse than `preschedule_sampled`'s.
    """
    policy = policy or _default_policy()
    recut = [recut_along_order(problem, s) for s in _policy_candidates(problem, seed, policy, n_samples, temperature)]
    return min(recut, key=lambda s: _rank(problem, s))


def preschedule_with_fallback(problem: StageProblem, seed: int = 0, policy: StageDecoder | None = None) -> np.ndarray:
    """"rl+fallback": `preschedule`'s answer or DeepSpeed's contiguous split, whichever is better.

    Not the policy's own answer: the fallback exists because the policy (even with its re-cut)
    is sometimes worse than the contiguous split on generated DNN-like graphs (see
    benchmarks/rl_stage.py), and an incumbent should never be worse than the obvious one.

    Parameters
    ----------
    problem : StageProblem
    seed : int
    policy : StagePolicy, optional

    Returns
    -------
    numpy.ndarray
        One stage per node, never worse than `incsched.baselines.stage.contiguous_params`.
    """
    candidates = [preschedule(problem, seed, policy), contiguous_params(problem, seed)]
    return min(candidates, key=lambda s: _rank(problem, s))


def _rank(problem: StageProblem, stages: np.ndarray) -> tuple[bool, float]:
    ev = evaluate_stages(problem, stages)
    return (not ev.feasible, ev.objective)
