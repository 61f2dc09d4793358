"""The learned pre-scheduler of the placement problem, after DOPPLER: SEL picks the next ready op, PLC its device.

The shared `GraphEncoder` embeds the graph once; decoding then list-schedules it, one op per step,
from the simulator's state (per-device free time, where each op's inputs live, when they arrive).
SEL scores the ready ops, PLC the devices for the chosen op; both are small MLPs over the op's
embedding and a few dynamic features. The op placed at step t goes last on its device, so decoding
yields a device and an order per device that `simulate(..., "ordered")` executes to the same makespan.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from ..problems import Placement, PlacementProblem
from .checkpoint import FORMAT, VERSION, PolicyKind, load_policy, register_policy, save_checkpoint
from .encoder import GraphEncoder
from .features import N_EDGE_FEATURES
# Inference (inputs, decoders, the pre-scheduler) runs without torch in `placement_decoder`; its
# names stay importable from here, where they always were.
from .placement_decoder import (  # noqa: F401 - re-exported
    DEFAULT_CHECKPOINT,
    N_PLACEMENT_FEATURES,
    PLACEMENT_LAYOUT,
    PLACEMENT_NODE_FEATURES,
    PLC_FEATURES,
    SAMPLE_TEMPERATURE,
    SEL_FEATURES,
    Decodings,
    Trajectory,
    _Heads,
    decode,
    decode_best,
    decode_rows,
    device_preferences,
    placement_arrays,
    preschedule,
)

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


@dataclass(frozen=True)
class PolicyConfig:
    """Sizes of the placement policy (stored with every checkpoint)."""

    hidden: int = 32
    n_layers: int = 2
    head_hidden: int = 32

    def to_dict(self) -> dict:
        return asdict(self)


def placement_inputs(problem: PlacementProblem) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`placement_arrays` as torch tensors (what training reads)."""
    return tuple(torch.from_numpy(a) for a in placement_arrays(problem))


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
        return decode_best(problem, self.numpy_heads(problem), seed, samples=samples, temperature=temperature)


# ---------------------------------------------------------------------- checkpoints and the pre-scheduler

#: The placement policy's entry in the checkpoint format: the layout of every input it reads.
CHECKPOINT = register_policy(PolicyKind(
    kind="placement",
    build=lambda config, conv: PlacementPolicy(PolicyConfig(**config), conv=conv),
    layout=PLACEMENT_LAYOUT,
    default_path=DEFAULT_CHECKPOINT,
))
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

