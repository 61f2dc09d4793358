"""Training of the placement policy (`incsched.policy.placement_policy`): imitation, then policy gradients.

Stage 1 imitates exact schedules (CP-SAT, hinted by the better list scheduler) of small generated
graphs, teacher-forced through the same decoder; stage 2 is REINFORCE on the simulator's makespan
with the greedy decoding as baseline; stage 3, fine-tuning on measured runtimes, runs the same
`reinforce_step` with a measured cost (`incsched.train.measured`; the `reward_fn` hook here). Everything is seeded from `PlacementTrainConfig`; metrics are logged per epoch.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ..baselines.placement import critical_path_list, heft
from ..evaluate.simulate import simulate
from ..generators import bandwidth_for_comm_ratio, chained_matmul, ffnn, transformer_block
from ..graph import CompGraph
from ..problems import Placement, PlacementProblem
from ..policy.placement_policy import (
    DEFAULT_CHECKPOINT,
    PlacementPolicy,
    PolicyConfig,
    Trajectory,
    decode,
    placement_inputs,
    save_placement_policy,
)
from . import fields
from .kernels import KERNEL_SETTINGS, adam, apply_in_process, current_kernels, run_in_child
from .metrics import epoch_row, log_row

__all__ = [
    "PlacementTrainConfig",
    "train_placement_policy",
    "generate_graph",
    "make_problem",
    "reinforce_step",
    "training_problems",
    "teacher_schedule",
    "trajectory_log_probs",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlacementTrainConfig:
    """Every knob of a training run; the run is a function of this and nothing else.

    Sizes are ops per generated graph; the benchmark graphs (100-300 ops, fixed seeds >= 1000)
    are never drawn here, since training draws 20-99 ops with jitter seeds below 1000.
    """

    seed: int = 0
    n_devices: int = 4
    comm_ratios: tuple[float, ...] = (3.0, 4.0, 5.0)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    # stage 1: imitation of exact schedules
    imitation_graphs: int = 32
    imitation_ops: tuple[int, int] = (20, 80)
    label_time_limit: float = 0.3  # CP-SAT deterministic seconds per label (one worker)
    imitation_epochs: int = 60
    imitation_lr: float = 3e-3
    # stage 2: REINFORCE with a greedy-rollout baseline
    rl_epochs: int = 40
    rl_graphs_per_epoch: int = 8
    rl_ops: tuple[int, int] = (40, 99)
    rl_samples: int = 4
    validation_graphs: int = 8  # drawn from their own stream; the best greedy policy on them is kept
    rl_lr: float = 3e-4
    rl_temperature: float = 1.0
    entropy_weight: float = 0.0
    grad_clip: float = 1.0
    # Stop RL early once the whole run has taken this long. None (the default) runs every epoch: a
    # wall-clock stop makes the weights depend on the machine's load, so no reference run uses one.
    time_budget_s: float | None = None

    def __post_init__(self):
        """Every field's type and range (`incsched.train.fields`): counts whole and in range,
        epochs and clipping possibly 0, rates, temperatures and ratios positive."""
        from ..problems.placement import MAX_DEVICES

        fields.whole("seed", self.seed, 0, 2**63 - 1)
        fields.whole("n_devices", self.n_devices, 1, MAX_DEVICES)
        fields.reals("comm_ratios", self.comm_ratios, 0.0, above=True)
        if not isinstance(self.policy, PolicyConfig):
            raise ValueError(f"policy must be a PolicyConfig, got {type(self.policy).__name__}")
        for name in ("hidden", "n_layers", "head_hidden"):
            fields.whole(f"policy.{name}", getattr(self.policy, name), 1, 4096)
        for name in ("imitation_graphs", "imitation_epochs", "rl_epochs"):
            fields.whole(name, getattr(self, name), 0)
        for name in ("rl_graphs_per_epoch", "rl_samples", "validation_graphs"):
            fields.whole(name, getattr(self, name), 1)
        fields.whole_range("imitation_ops", self.imitation_ops, 1)
        fields.whole_range("rl_ops", self.rl_ops, 1)
        for name in ("imitation_lr", "rl_lr", "rl_temperature"):
            fields.real(name, getattr(self, name), 0.0, above=True)
        for name in ("label_time_limit", "entropy_weight", "grad_clip"):
            fields.real(name, getattr(self, name), 0.0)
        fields.real("time_budget_s", self.time_budget_s, 0.0, above=True, optional=True)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["policy"] = self.policy.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: dict) -> PlacementTrainConfig:
        """Rebuild a config from `to_dict`'s form.

        Raises
        ------
        ValueError
            A field out of its range or of the wrong type (the message starts with its name).
        TypeError
            An unknown field.
        """
        data = dict(data)
        policy = data.get("policy", {})
        if not isinstance(policy, dict):
            raise ValueError(f"policy must be a table of hidden, n_layers, head_hidden, got {policy!r:.80}")
        data["policy"] = PolicyConfig(**policy)
        for key in ("comm_ratios", "imitation_ops", "rl_ops"):
            if key in data:
                data[key] = tuple(data[key])
        return cls(**data)


# ---------------------------------------------------------------------- generated problems


def generate_graph(rng: np.random.Generator, ops: tuple[int, int]) -> CompGraph:
    """A random transformer / FFNN / chained-matmul graph with between ``ops[0]`` and ``ops[1]`` nodes.

    Parameters
    ----------
    rng : numpy Generator
    ops : (low, high)
        Inclusive node-count range; shapes are redrawn until one fits.

    Returns
    -------
    CompGraph
        Roofline times with a log-normal jitter, so no two draws look alike.

    Raises
    ------
    ValueError
        If no shape fits the range after many draws.
    """
    lo, hi = ops
    for _ in range(200):
        family = rng.integers(3)
        jitter = float(rng.uniform(0.05, 0.3))
        seed = int(rng.integers(1000))
        if family == 0:
            heads = int(rng.integers(2, 9))
            g = transformer_block(
                n_blocks=int(rng.integers(1, 3)),
                batch=int(rng.choice([1, 4, 8])),
                seq=int(rng.choice([256, 512, 1024])),
                hidden=heads * int(rng.choice([64, 128, 256])),
                heads=heads,
                ffn_tiles=int(rng.integers(2, 9)),
                jitter=jitter,
                seed=seed,
            )
        elif family == 1:
            g = ffnn(
                n_layers=int(rng.integers(2, 9)),
                batch=int(rng.choice([256, 1024, 4096])),
                hidden=int(rng.choice([1024, 2048, 4096])),
                tiles=int(rng.integers(2, 5)),
                jitter=jitter,
                seed=seed,
            )
        else:
            g = chained_matmul(
                n_matrices=int(rng.integers(3, 9)),
                size=int(rng.choice([1024, 2048, 4096])),
                tiles=int(rng.integers(2, 4)),
                jitter=jitter,
                seed=seed,
            )
        if lo <= g.n_nodes <= hi:
            return g
    raise ValueError(f"no generated graph has between {lo} and {hi} ops")


def make_problem(graph: CompGraph, n_devices: int = 4, comm_ratio: float = 4.0) -> PlacementProblem:
    """``n_devices`` identical devices whose links make a mean transfer ``comm_ratio`` x a mean op.

    Parameters
    ----------
    graph : CompGraph
    n_devices : int
    comm_ratio : float

    Returns
    -------
    PlacementProblem
    """
    bandwidth = bandwidth_for_comm_ratio(graph, comm_ratio, "cpu")
    return PlacementProblem.identical(graph, n_devices, kind="cpu", bandwidth=bandwidth)


def training_problems(rng: np.random.Generator, count: int, ops: tuple[int, int], config: PlacementTrainConfig):
    """``count`` generated problems with comm ratios drawn from ``config.comm_ratios``."""
    return [
        make_problem(generate_graph(rng, ops), config.n_devices, float(rng.choice(config.comm_ratios)))
        for _ in range(count)
    ]


def teacher_schedule(problem: PlacementProblem, time_limit: float, seed: int = 0):
    """The best schedule we can afford: CP-SAT (one worker, deterministic) hinted by the better list scheduler.

    Parameters
    ----------
    problem : PlacementProblem
    time_limit : float
        Deterministic seconds for CP-SAT; 0 skips it (best heuristic only).
    seed : int

    Returns
    -------
    (Schedule, str)
        The simulated schedule (``ordered``) and who produced it.
    """
    from incsched.solvers import SolverSettings

    from ..inc_ilp.placement import solve_cpsat

    best, who = None, ""
    for name, fn in (("critical_path_list", critical_path_list), ("heft", heft)):
        s = simulate(problem, fn(problem), "ordered")
        if best is None or s.makespan < best.makespan:
            best, who = s, name
    if time_limit > 0:
        # A generous wall cap: a label cut short by a loaded machine would make the weights depend on load.
        out = solve_cpsat(problem, SolverSettings(time_limit=time_limit, seed=seed, wall_cap_s=600.0), hint=best.to_placement())
        if out.assignment is not None:
            s = simulate(problem, Placement(out.assignment, out.info["order"], start=out.start), "ordered")
            if s.makespan < best.makespan:
                best, who = s, "cpsat"
    return best, who


# ---------------------------------------------------------------------- log-probabilities


def _pack(traj: Trajectory) -> dict[str, torch.Tensor]:
    """Pad a trajectory's steps into tensors (ready sets to the largest one)."""
    T = len(traj.node)
    rmax = max(len(r) for r in traj.ready)
    fs = traj.sel_features[0].shape[1]
    ready = np.zeros((T, rmax), dtype=np.int64)
    mask = np.zeros((T, rmax), dtype=bool)
    sel_f = np.zeros((T, rmax, fs), dtype=np.float32)
    for t, (r, f) in enumerate(zip(traj.ready, traj.sel_features)):
        ready[t, : len(r)] = r
        mask[t, : len(r)] = True
        sel_f[t, : len(r)] = f
    return {
        "ready": torch.from_numpy(ready),
        "mask": torch.from_numpy(mask),
        "sel_features": torch.from_numpy(sel_f),
        "sel_action": torch.tensor(traj.sel_action, dtype=torch.int64),
        "node": torch.tensor(traj.node, dtype=torch.int64),
        "plc_features": torch.from_numpy(np.stack(traj.plc_features)),
        "plc_action": torch.tensor(traj.plc_action, dtype=torch.int64),
    }


def trajectory_log_probs(model: PlacementPolicy, parts, packed: dict[str, torch.Tensor], temperature: float = 1.0):
    """Per-step log-probabilities of a packed trajectory's SEL and PLC actions, and their entropies.

    Parameters
    ----------
    model : PlacementPolicy
    parts : (sel_part, plc_part)
        ``model.node_parts`` of the trajectory's problem (with gradients).
    packed : dict
        From `_pack`.
    temperature : float

    Returns
    -------
    (log_prob [T], entropy [T])
        SEL and PLC summed per step.
    """
    sel_part, plc_part = parts
    sel = model.sel_logits(sel_part[packed["ready"]], packed["sel_features"]) / temperature
    sel = sel.masked_fill(~packed["mask"], float("-inf"))
    sel_lp = torch.log_softmax(sel, dim=1)
    plc = model.plc_logits(plc_part[packed["node"]], packed["plc_features"]) / temperature
    plc_lp = torch.log_softmax(plc, dim=1)
    idx = torch.arange(len(packed["node"]))
    lp = sel_lp[idx, packed["sel_action"]] + plc_lp[idx, packed["plc_action"]]
    # Padded entries have log-probability -inf; zero them before the product, or their gradient is NaN.
    safe = sel_lp.masked_fill(~packed["mask"], 0.0)
    ent = -(safe.exp() * safe).masked_fill(~packed["mask"], 0.0).sum(1) - (plc_lp.exp() * plc_lp).sum(1)
    return lp, ent


# ---------------------------------------------------------------------- the loops


def train_placement_policy(
    config: PlacementTrainConfig = PlacementTrainConfig(),
    *,
    reward_fn: Callable[[PlacementProblem, Placement], float] | None = None,
    model: PlacementPolicy | None = None,
) -> tuple[PlacementPolicy, list[dict]]:
    """Train the placement policy: imitation of exact schedules, then REINFORCE on the simulator.

    Parameters
    ----------
    config : PlacementTrainConfig
    reward_fn : callable, optional
        ``(problem, placement) -> cost`` (lower is better) replacing the simulated makespan in
        stage 2: stage 3's hook for measured runtimes.
    model : PlacementPolicy, optional
        Start from these weights (e.g. a shipped checkpoint) instead of a fresh policy. They are
        trained in a copy built with torch_geometric's ``GINEConv`` (`PlacementPolicy.with_conv`);
        ``model`` itself is left as it was.

    Returns
    -------
    (PlacementPolicy, dict)
        The trained policy and its metrics in `incsched.train.metrics`' vocabulary: ``"epochs"``
        (one row per epoch: phase, epoch, loss, mean greedy makespan over the critical-path list
        scheduler's on training graphs ``train_ratio_to_cpl`` and validation graphs
        ``val_ratio_to_cpl``, seconds), ``"labels"``, ``"selected_epoch"``, ``"seconds"``.
    """
    t_run = time.perf_counter()
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    # Training learns with torch_geometric's GINEConv; a policy loaded for inference has the plain twin.
    if model is None:
        model = PlacementPolicy(config.policy, conv="torch_geometric")
    elif model.encoder.conv != "torch_geometric":
        model = model.with_conv("torch_geometric")
    metrics: dict = {"epochs": []}
    validation = training_problems(np.random.default_rng([config.seed, 1]), config.validation_graphs, config.rl_ops, config)

    # Stage 1: teacher-forced trajectories are fixed, so imitation is plain supervised learning.
    if config.imitation_epochs > 0 and config.imitation_graphs > 0:
        t0 = time.perf_counter()
        data = []
        sources: dict[str, int] = {}
        for problem in training_problems(rng, config.imitation_graphs, config.imitation_ops, config):
            sched, who = teacher_schedule(problem, config.label_time_limit, seed=config.seed)
            sources[who] = sources.get(who, 0) + 1
            traj = decode(problem, None, teacher=(sched.start, sched.device), record=True)
            cpl = simulate(problem, critical_path_list(problem), "ordered").makespan
            data.append((problem, placement_inputs(problem), _pack(traj), traj.makespan / cpl))
        log.info("imitation labels: %s in %.1fs", sources, time.perf_counter() - t0)
        metrics["labels"] = {"n": len(data), "sources": sources, "mean_label_over_cpl": float(np.mean([d[3] for d in data])),
                             "seconds": time.perf_counter() - t0}
        opt = adam(model.parameters(), lr=config.imitation_lr)
        for epoch in range(config.imitation_epochs):
            t0 = time.perf_counter()
            total = 0.0
            for j in rng.permutation(len(data)).tolist():
                problem, inputs, packed, _ = data[j]
                parts = model.node_parts(*inputs)
                lp, _ = trajectory_log_probs(model, parts, packed)
                loss = -lp.mean()
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                opt.step()
                total += float(loss.detach())
            measures = {"loss": total / len(data)}
            if epoch % 10 == 9 or epoch == config.imitation_epochs - 1:
                measures["train_ratio_to_cpl"] = _evaluate(model, [d[0] for d in data[:8]])
            metrics["epochs"].append(row := epoch_row("imitation", epoch, time.perf_counter() - t0, **measures))
            log_row(log, "train placement policy", row)

    # Stage 2: REINFORCE, advantage = relative improvement of a sample over the greedy decoding.
    t0 = time.perf_counter()
    best_val = _evaluate(model, validation) if validation else None
    best_state, best_epoch = {k: v.detach().clone() for k, v in model.state_dict().items()}, "start"
    metrics["epochs"].append(epoch_row("start", -1, time.perf_counter() - t0, val_ratio_to_cpl=best_val))
    if config.rl_epochs > 0:
        opt = adam(model.parameters(), lr=config.rl_lr)
        cost = reward_fn or (lambda p, pl: float(simulate(p, pl, "ordered").makespan))
        for epoch in range(config.rl_epochs):
            if config.time_budget_s is not None and time.perf_counter() - t_run > config.time_budget_s:
                log.info("RL stopped at epoch %d: time budget %.0fs spent", epoch, config.time_budget_s)
                break
            t0 = time.perf_counter()
            problems = training_problems(rng, config.rl_graphs_per_epoch, config.rl_ops, config)
            losses, gains, ratios = [], [], []
            for problem in problems:
                step = reinforce_step(model, opt, problem, cost, rng, config)
                ratios.append(step["greedy_cost"] / simulate(problem, critical_path_list(problem), "ordered").makespan)
                gains.append(step["best_sample_gain"])
                losses.append(step["loss"])
            measures = {"loss": float(np.mean(losses)), "train_ratio_to_cpl": float(np.mean(ratios)),
                        "best_sample_gain": float(np.mean(gains))}
            if validation:
                measures["val_ratio_to_cpl"] = _evaluate(model, validation)
                if measures["val_ratio_to_cpl"] < best_val:
                    best_val = measures["val_ratio_to_cpl"]
                    best_state, best_epoch = {k: v.detach().clone() for k, v in model.state_dict().items()}, f"reinforce {epoch}"
            metrics["epochs"].append(row := epoch_row("reinforce", epoch, time.perf_counter() - t0, **measures))
            log_row(log, "train placement policy", row)
        # Policy gradients are noisy: ship the epoch that decoded the validation graphs best.
        model.load_state_dict(best_state)
        metrics["selected_epoch"] = best_epoch
    metrics["seconds"] = time.perf_counter() - t_run
    return model, metrics


def reinforce_step(model: PlacementPolicy, opt: torch.optim.Optimizer, problem: PlacementProblem,
                   cost: Callable[[PlacementProblem, Placement], float], rng: np.random.Generator,
                   config: PlacementTrainConfig) -> dict[str, float]:
    """One REINFORCE update on ``problem``: ``config.rl_samples`` sampled decodings, each weighted by
    its relative improvement in ``cost`` over the greedy decoding (the baseline).

    Returns
    -------
    dict
        ``greedy_cost``, ``best_sample_gain`` (largest relative improvement of a sample) and ``loss``.
    """
    heads = model.numpy_heads(problem)
    base = cost(problem, decode(problem, heads, greedy=True).placement)
    samples = [
        decode(problem, heads, greedy=False, rng=rng, record=True, temperature=config.rl_temperature)
        for _ in range(config.rl_samples)
    ]
    adv = np.array([(base - cost(problem, s.placement)) / base for s in samples])
    parts = model.node_parts(*placement_inputs(problem))
    loss = 0.0
    for s, a in zip(samples, adv):
        lp, ent = trajectory_log_probs(model, parts, _pack(s), config.rl_temperature)
        loss = loss - float(a) * lp.mean() - config.entropy_weight * ent.mean()
    loss = loss / config.rl_samples
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
    opt.step()
    return {"greedy_cost": float(base), "best_sample_gain": float(adv.max()), "loss": float(loss.detach())}


def _evaluate(model: PlacementPolicy, problems) -> float:
    """Mean greedy makespan over the critical-path list scheduler's."""
    out = []
    for p in problems:
        ms = simulate(p, model.preschedule(p), "ordered").makespan
        out.append(ms / simulate(p, critical_path_list(p), "ordered").makespan)
    return float(np.mean(out))


def main(argv=None) -> int:
    """Train with the default config (or a JSON config) and write the checkpoint plus its metadata.

    ``python -m incsched.train.placement --out data/models/placement_policy.pt``
    """
    import argparse
    import json

    ap = argparse.ArgumentParser(description="train the placement policy (imitation + REINFORCE)")
    ap.add_argument("--out", default=str(DEFAULT_CHECKPOINT))
    ap.add_argument("--config", help="JSON file with PlacementTrainConfig fields (default: the dataclass defaults)")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--kernels", choices=list(KERNEL_SETTINGS),
                    help="train in a child process under these CPU kernels (incsched.train.kernels; default: this process's)")
    args = ap.parse_args(argv)
    if args.kernels is not None and current_kernels() != args.kernels:
        return run_in_child("incsched.train.placement", sys.argv[1:] if argv is None else list(argv), args.kernels).returncode
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)  # the reference run: reproducible and polite on a shared 2-core machine
    kernels = apply_in_process(args.kernels) if args.kernels is not None else None
    data = json.load(open(args.config)) if args.config else PlacementTrainConfig().to_dict()
    if args.seed is not None:
        data["seed"] = args.seed
    config = PlacementTrainConfig.from_dict(data)
    model, metrics = train_placement_policy(config)
    if kernels is not None:
        metrics["kernels"] = kernels
    save_placement_policy(model, args.out, train_config=config.to_dict(), metrics=metrics)
    log.info("wrote %s after %.0fs (selected %s)", args.out, metrics["seconds"], metrics.get("selected_epoch"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
