"""The learned stage pre-scheduler's torch model: a GNN that decodes one stage per node, in topological order.

What the policy is, how it decodes and the pre-schedulers built on it (``preschedule_policy``,
``preschedule_sampled`` "rl", ``preschedule`` "rl+dp", ``preschedule_with_fallback``) are described
in `stage_decoder`, which runs them without torch. This module holds the torch model that training
learns (`StagePolicy`, same decoder, same weights), its checkpoints, and re-exports the
pre-schedulers.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..problems.stage import StageProblem
from .checkpoint import PolicyKind, load_policy, register_policy, save_checkpoint
from .encoder import GraphEncoder
# Inference (decoding, the pre-schedulers) runs without torch in `stage_decoder`; its names stay
# importable from here, where they always were.
from .stage_decoder import (  # noqa: F401 - re-exported
    DEFAULT_CHECKPOINT,
    N_STATE,
    SAMPLE_TEMPERATURE,
    STAGE_LAYOUT,
    STATE_FEATURES,
    GraphTensors,
    StageDecoder,
    StageDecoding,
    default_samples,
    depth_first_order,
    graph_arrays,
    preschedule,
    preschedule_policy,
    preschedule_sampled,
    preschedule_with_fallback,
    recut_along_order,
)

__all__ = [
    "StagePolicy",
    "StageDecoding",
    "GraphTensors",
    "graph_tensors",
    "trajectory_states",
    "STATE_FEATURES",
    "preschedule",
    "preschedule_policy",
    "preschedule_sampled",
    "preschedule_with_fallback",
    "default_samples",
    "recut_along_order",
    "depth_first_order",
    "save_stage_policy",
    "load_stage_policy",
    "default_stage_checkpoint",
]


def graph_tensors(problem: StageProblem) -> GraphTensors:
    """`graph_arrays` with its features as torch tensors (what training reads)."""
    gt = graph_arrays(problem)
    return replace(gt, x=torch.from_numpy(gt.x), edge_index=torch.from_numpy(gt.edge_index), edge_attr=torch.from_numpy(gt.edge_attr))


def _state(mem: np.ndarray, peak: float, done: float, p_v: float, lo: int, cross_a: float, cross_b: float,
           deg: int, total: float, K: int, ks: np.ndarray, target: float) -> np.ndarray:
    """State features ``[K, N_STATE]`` of one node; the single definition both code paths follow."""
    T = total / K if total > 0 else 1.0
    P = total if total > 0 else 1.0
    after = mem + p_v
    spare = np.maximum(T - mem, 0.0)
    room = np.cumsum(spare[::-1])[::-1] / P
    return np.stack(
        [
            after / T,
            mem / T,
            np.maximum(after - peak, 0.0) / T,
            np.full(K, peak / T),
            ks / K,
            (ks - lo) / K,
            (ks == lo).astype(np.float64),
            np.full(K, done / P),
            np.full(K, p_v / T),
            (cross_a * ks - cross_b) / (deg + 1),
            room,
            np.full(K, (P - done - p_v) / P if total > 0 else 0.0),
            np.full(K, target / T),
            after / max(target, 1.0),
            (after <= target).astype(np.float64),
        ],
        axis=1,
    )


def trajectory_states(gt: GraphTensors, stages: np.ndarray, edge_src: np.ndarray, edge_dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """State features of every node along a complete trajectory, as the sequential decoder saw them.

    Parameters
    ----------
    gt : GraphTensors
    stages : int array (n,)
        A precedence-feasible assignment (a label, or a sampled trajectory).
    edge_src, edge_dst : int arrays (m,)
        The graph's edges.

    Returns
    -------
    states : float array (n, K, N_STATE), in node index order
    lo : int array (n,), each node's earliest allowed stage (max over its predecessors)
    """
    n, K = len(stages), gt.n_stages
    order = gt.order
    ks = np.arange(K, dtype=np.float64)
    p = gt.params
    total = float(p.sum())
    # Loads of each stage from the nodes decoded before each position (exclusive prefix sums).
    onehot = np.zeros((n, K))
    onehot[np.arange(n), stages[order]] = p[order]
    mem_before = np.vstack([np.zeros((1, K)), np.cumsum(onehot, axis=0)[:-1]])
    peak_before = np.maximum.accumulate(mem_before.max(axis=1))
    done_before = np.concatenate([[0.0], np.cumsum(p[order])[:-1]])
    lo = np.zeros(n, dtype=np.int64)
    np.maximum.at(lo, edge_dst, stages[edge_src])
    cross_a = np.bincount(edge_dst, weights=gt.units, minlength=n)
    cross_b = np.bincount(edge_dst, weights=gt.units * stages[edge_src], minlength=n)
    deg = np.bincount(edge_dst, minlength=n)
    states = np.empty((n, K, N_STATE))
    for i, v in enumerate(order.tolist()):
        states[v] = _state(mem_before[i], peak_before[i], done_before[i], p[v], int(lo[v]), cross_a[v], cross_b[v],
                           int(deg[v]), total, K, ks, gt.target)
    return states, lo


class StagePolicy(nn.Module, StageDecoder):
    """Per-node stage distributions from a `GraphEncoder` embedding and the decoding's running state.

    ``logit(v, k) = w . relu(A h_v + B state(v, k) + b) + c``, masked to k >= max over predecessors;
    decoding is `StageDecoder`'s (inference runs it on `NumpyStagePolicy`, without torch).

    Parameters
    ----------
    hidden : int
        Encoder width.
    n_layers : int
        Encoder message-passing rounds.
    decoder_hidden : int
        Width of the per-(node, stage) head.
    conv : {"plain", "torch_geometric"}
        The encoder's ``GINEConv`` implementation (`GraphEncoder`): training builds
        ``"torch_geometric"``, loading for inference ``"plain"``. Not part of `config`: both take
        the same weights.
    """

    def __init__(self, hidden: int = 32, n_layers: int = 3, decoder_hidden: int = 32, *, conv: str = "plain"):
        super().__init__()
        self.config = {"hidden": hidden, "n_layers": n_layers, "decoder_hidden": decoder_hidden}
        self.encoder = GraphEncoder(hidden=hidden, n_layers=n_layers, conv=conv)
        self.node_proj = nn.Linear(hidden, decoder_hidden)
        self.state_proj = nn.Linear(N_STATE, decoder_hidden, bias=False)
        self.out = nn.Linear(decoder_hidden, 1)

    # ---------------------------------------------------------------- batched (training)

    def node_terms(self, gt: GraphTensors) -> torch.Tensor:
        """``A h_v + b`` for every node, ``[n, decoder_hidden]`` (the graph-dependent half of the head)."""
        return self.node_proj(self.encoder(gt.x, gt.edge_index, gt.edge_attr))

    def log_probs(self, gt: GraphTensors, states: np.ndarray, lo: np.ndarray, node_terms: torch.Tensor | None = None) -> torch.Tensor:
        """Masked log-probabilities of every stage for every node, given trajectory states.

        ``states`` is ``[n, K, N_STATE]`` (one trajectory) or ``[S, n, K, N_STATE]`` (S trajectories
        of one graph, sharing one encoder pass); ``lo`` is ``[n]`` or ``[S, n]``. Returns
        ``[n, K]`` or ``[S, n, K]``.
        """
        a = self.node_terms(gt) if node_terms is None else node_terms
        s = torch.from_numpy(states.astype(np.float32))
        logits = self.out(torch.relu(a[..., :, None, :] + self.state_proj(s))).squeeze(-1)
        K = gt.n_stages
        mask = torch.from_numpy(np.arange(K) < lo[..., None])
        return torch.log_softmax(logits.masked_fill(mask, float("-inf")), dim=-1)

    # ---------------------------------------------------------------- sequential (`StageDecoder`)

    def _graph_inputs(self, problem: StageProblem) -> GraphTensors:
        return graph_tensors(problem)

    @torch.no_grad()
    def _node_terms_array(self, gt: GraphTensors) -> np.ndarray:
        return self.node_terms(gt).numpy().astype(np.float64)

    def _head_weights(self) -> tuple[np.ndarray, np.ndarray]:
        B = self.state_proj.weight.detach().numpy().astype(np.float64).T
        return B, self.out.weight.detach().numpy().astype(np.float64)[0]

# ---------------------------------------------------------------------- checkpoints

#: The stage policy's entry in the checkpoint format: the layout of every input it reads.
CHECKPOINT = register_policy(PolicyKind(
    kind="stage",
    build=lambda config, conv: StagePolicy(**config, conv=conv),
    layout=STAGE_LAYOUT,
    default_path=DEFAULT_CHECKPOINT,
))


def default_stage_checkpoint() -> Path:
    """Path of the shipped stage policy, ``data/models/stage_policy.pt`` in the repository."""
    return CHECKPOINT.default_path


def save_stage_policy(path: str | os.PathLike, policy: StagePolicy, *, train_config: dict | None = None, metrics: Any = None) -> Path:
    """Save a `StagePolicy` (`incsched.policy.checkpoint.save_checkpoint`); returns the metadata path."""
    return save_checkpoint(path, policy.state_dict(), kind="stage", model_config=policy.config, train_config=train_config,
                           metrics=metrics)


def load_stage_policy(path: str | os.PathLike | None = None, *, conv: str = "plain") -> tuple[StagePolicy, dict]:
    """Load a `StagePolicy` in eval mode, with its metadata (default: the shipped one).

    Parameters
    ----------
    path : path-like, optional
        Default `default_stage_checkpoint`.
    conv : {"plain", "torch_geometric"}
        The encoder's ``GINEConv`` implementation (`GraphEncoder`); the default runs without
        importing torch_geometric.

    Returns
    -------
    (StagePolicy, dict)

    Raises
    ------
    CheckpointError
        See `incsched.policy.checkpoint.load_policy`.
    """
    return load_policy(path, kind="stage", conv=conv)


