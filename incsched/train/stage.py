"""Training of the stage policy: imitation of exact optima, then policy-gradient RL on the evaluator.

Produces the checkpoint that `incsched.policy.stage_policy.StagePolicy` pre-schedules with. Read it
top to bottom: `StageTrainConfig` holds every hyper-parameter; `training_problems` draws the seeded
graphs (never the shipped real-model graphs, which are the held-out test set); `exact_labels` solves
them with the CP-SAT back end (cached on disk, regenerated when missing); `train_stage_policy` runs
stage 1 (imitation, teacher-forced cross-entropy) and stage 2 (REINFORCE with a greedy-rollout
baseline, reward from `evaluate_stages`) and logs every metric by name each epoch. Stage 3
(fine-tuning on measured runtimes) is the ``finetune_hook`` argument, for a later issue.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..baselines.stage import best_baseline, contiguous_params
from ..errors import GraphError
from ..evaluate.stage import evaluate_stages
from ..generators.random_dag import icml24_like, layered_dag, respect_like
from ..jsonio import read_json, write_json
from ..problems.stage import StageProblem
from . import fields
from .kernels import KERNEL_SETTINGS, adam, apply_in_process, current_kernels, run_in_child
from .metrics import epoch_row, log_row

__all__ = ["StageTrainConfig", "training_problems", "exact_labels", "train_stage_policy"]

log = logging.getLogger(__name__)

# torch comes with incsched.policy, imported inside the functions that train: generating the
# problems and their CP-SAT labels needs none.

LABEL_FORMAT = "incsched.stage_labels"
LABEL_VERSION = 1


@dataclass(frozen=True)
class StageTrainConfig:
    """Every hyper-parameter of a stage-policy training run; the run is a function of this and nothing else.

    Graphs and labels: ``n_graphs`` generated graphs of ``min_nodes``..``max_nodes`` nodes (three
    families: RESPECT-like DNN chains, layered DAGs with skip edges, ICML'24-like random DAGs),
    each paired with a K drawn from ``ks`` and the peer objective with weight ``alpha``; labelled by
    CP-SAT (one worker, deterministic, ``label_time_limit`` deterministic seconds -- on this
    machine about 10-30 wall seconds per deterministic second -- hinted with the
    best heuristic). ``label_cache`` is where labels are kept between runs (regenerated if absent,
    made under other settings, or made by other versions of the label code). The first ``n_validation`` graphs are held out of training.
    """

    seed: int = 0
    n_graphs: int = 160
    n_validation: int = 16
    min_nodes: int = 20
    max_nodes: int = 120
    ks: tuple[int, ...] = (2, 3, 4, 6, 8, 12, 16)
    alpha: float = 100.0
    label_time_limit: float = 0.1
    label_cache: str | None = "/tmp/incsched_stage_labels.json.gz"
    # model
    hidden: int = 32
    n_layers: int = 3
    decoder_hidden: int = 32
    # stage 1: imitation
    imitation_epochs: int = 15
    lr: float = 3e-3
    weight_decay: float = 1e-5
    # stage 2: REINFORCE
    rl_epochs: int = 8
    rl_samples: int = 8
    rl_lr: float = 5e-4
    entropy_weight: float = 1e-3
    rl_imitation_weight: float = 1.0
    grad_clip: float = 1.0  # gradient-norm clip of the REINFORCE updates (imitation is not clipped)
    threads: int = 1

    def __post_init__(self):
        """Every field's type and range (`incsched.train.fields`); some K of ``ks`` must fit the
        smallest graph (``K <= max(2, min_nodes // 4)``), as every drawn graph needs one."""
        fields.whole("seed", self.seed, 0, 2**63 - 1)
        fields.whole("n_graphs", self.n_graphs, 1)
        fields.whole("n_validation", self.n_validation, 0)
        fields.whole("min_nodes", self.min_nodes, 2)
        fields.whole("max_nodes", self.max_nodes, self.min_nodes if isinstance(self.min_nodes, int) else 2)
        if isinstance(self.ks, (str, bytes)) or not isinstance(self.ks, (tuple, list)) or not self.ks:
            raise ValueError(f"ks must be a non-empty list of stage counts, got {self.ks!r:.80}")
        for k in self.ks:
            fields.whole("ks", k, 1, 1024)
        if min(self.ks) > max(2, self.min_nodes // 4):
            raise ValueError(f"ks must hold a K of at most {max(2, self.min_nodes // 4)} (max(2, min_nodes // 4)) "
                             f"so that graphs of {self.min_nodes} nodes have one, got {list(self.ks)}")
        for name in ("hidden", "n_layers", "decoder_hidden"):
            fields.whole(name, getattr(self, name), 1, 4096)
        for name in ("imitation_epochs", "rl_epochs"):
            fields.whole(name, getattr(self, name), 0)
        fields.whole("rl_samples", self.rl_samples, 1)
        fields.whole("threads", self.threads, 1, 1024)
        for name in ("lr", "rl_lr"):
            fields.real(name, getattr(self, name), 0.0, above=True)
        for name in ("alpha", "label_time_limit", "weight_decay", "entropy_weight", "rl_imitation_weight", "grad_clip"):
            fields.real(name, getattr(self, name), 0.0)
        if self.label_cache is not None and not isinstance(self.label_cache, str):
            raise ValueError(f"label_cache must be a path or none, got {self.label_cache!r:.80}")

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dictionary of the config (tuples become lists)."""
        d = asdict(self)
        d["ks"] = list(self.ks)
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StageTrainConfig:
        """Rebuild a config from `to_json`'s form (unknown keys are a TypeError; a field out of
        its range or of the wrong type a ValueError starting with its name)."""
        d = dict(data)
        if "ks" in d:
            d["ks"] = tuple(d["ks"])
        return cls(**d)


# ---------------------------------------------------------------------- data


def training_problems(config: StageTrainConfig) -> list[StageProblem]:
    """The seeded generated stage problems of a training run (validation ones first).

    Parameters
    ----------
    config : StageTrainConfig

    Returns
    -------
    list of StageProblem
        ``config.n_graphs`` peer-objective problems; graph names carry family, size and seed.
    """
    rng = np.random.default_rng(config.seed)
    problems = []
    for i in range(config.n_graphs):
        n = int(rng.integers(config.min_nodes, config.max_nodes + 1))
        gseed = int(rng.integers(2**31))
        family = i % 3
        if family == 0:
            g = respect_like(n, seed=gseed)
        elif family == 1:
            width = int(rng.integers(1, 6))
            # DNN-like costs: about half the ops weightless, the rest log-uniform over three decades.
            g = layered_dag(
                n,
                width=width,
                mean_in_degree=float(rng.uniform(1.0, 2.0)),
                skip_prob=float(rng.uniform(0.0, 0.3)),
                param_bytes=_dnn_params,
                ops=("conv2d", "linear", "relu", "add", "batch_norm", "concat"),
                seed=gseed,
            )
        else:
            g = _icml24_graph(n, sparse=bool(rng.random() < 0.5), seed=gseed)
        ks = [k for k in config.ks if k <= max(2, n // 4)]
        k = int(ks[int(rng.integers(len(ks)))])
        problems.append(StageProblem.peer(g, n_stages=k, alpha=config.alpha))
    return problems


def _icml24_graph(n: int, sparse: bool, seed: int):
    # icml24_like can draw a duplicate edge on small graphs (GraphError); the next seed is taken then.
    for attempt in range(20):
        try:
            return icml24_like(n, sparse=sparse, seed=seed + attempt)
        except GraphError:
            continue
    raise GraphError(f"icml24_like({n}, sparse={sparse}) failed for seeds {seed}..{seed + 19}")


def _dnn_params(rng: np.random.Generator, size: int) -> np.ndarray:
    weighted = rng.random(size) < 0.5
    return np.where(weighted, np.rint(np.exp(rng.uniform(math.log(1e3), math.log(4e6), size=size))), 0)


def exact_labels(problems: list[StageProblem], config: StageTrainConfig) -> list[dict[str, Any]]:
    """CP-SAT labels of ``problems``, from ``config.label_cache`` when it matches, else solved now.

    Each label holds ``stages`` (the best assignment found), ``status`` (``optimal`` or
    ``feasible``), ``objective`` and ``bound`` (the solver's, re-checked with `evaluate_stages`),
    ``heuristic`` (best baseline's objective) and ``seconds``. Where CP-SAT finds nothing better
    than the best heuristic within the limit, the heuristic's assignment is the label.

    Parameters
    ----------
    problems : list of StageProblem
    config : StageTrainConfig

    Returns
    -------
    list of dict
    """
    from incsched.solvers import SolverSettings
    from incsched.solvers.cpsat.stage import solve_stage

    key = {
        "graphs": [p.graph.name for p in problems],
        "ks": [p.n_stages for p in problems],
        "alpha": config.alpha,
        "time_limit": config.label_time_limit,
        "code": _label_code_digest(),
    }
    cache = Path(config.label_cache) if config.label_cache else None
    if cache is not None and cache.exists():
        data = read_json(cache)
        if data.get("format") == LABEL_FORMAT and data.get("version") == LABEL_VERSION and data.get("key") == key:
            log.info("stage labels: %d read from %s", len(data["labels"]), cache)
            return data["labels"]
        log.info("stage labels: cache %s was made for other settings; solving again", cache)
    # A generous wall cap: a label cut short by a loaded machine would make the weights depend on load.
    settings = SolverSettings(time_limit=config.label_time_limit, deterministic=True, seed=config.seed, wall_cap_s=600.0)
    labels = []
    for i, problem in enumerate(problems):
        t0 = time.perf_counter()
        name, hint = best_baseline(problem)
        heuristic = evaluate_stages(problem, hint).objective
        out = solve_stage(problem, settings, hint=hint)
        stages, status, bound = hint, "feasible", None
        if out.assignment is not None:
            ev = evaluate_stages(problem, out.assignment)
            if ev.feasible and ev.objective <= heuristic:
                stages, status, bound = out.assignment, out.status, out.bound
        labels.append(
            {
                "stages": [int(s) for s in stages],
                "status": status,
                "objective": evaluate_stages(problem, stages).objective,
                "bound": bound,
                "heuristic": heuristic,
                "heuristic_name": name,
                "seconds": time.perf_counter() - t0,
            }
        )
        log.info(
            "label %d/%d %s K=%d: %s %s (heuristic %s %s) %.1fs",
            i + 1,
            len(problems),
            problem.graph.name,
            problem.n_stages,
            status,
            labels[-1]["objective"],
            name,
            heuristic,
            labels[-1]["seconds"],
        )
    if cache is not None:
        write_json(cache, {"format": LABEL_FORMAT, "version": LABEL_VERSION, "key": key, "labels": labels})
    return labels


def _label_code_digest() -> str:
    """SHA-256 of the sources that make a label (hint heuristics, CP-SAT model, evaluator).

    Part of the label cache's key: labels cached before any of these changed are solved again
    rather than silently reused, so a cached run and a fresh one train on the same labels.
    """
    import hashlib
    import importlib

    digest = hashlib.sha256()
    for name in ("incsched.baselines.stage", "incsched.baselines.stage_local", "incsched.evaluate.stage", "incsched.solvers.cpsat.stage"):
        digest.update(Path(importlib.import_module(name).__file__).read_bytes())
    return digest.hexdigest()


# ---------------------------------------------------------------------- training


@dataclass
class _Example:
    problem: StageProblem
    gt: Any  # GraphTensors
    label: np.ndarray
    label_objective: float
    contiguous_objective: float


def _examples(problems: list[StageProblem], labels: list[dict[str, Any]]) -> list[_Example]:
    from ..policy.stage_policy import graph_tensors

    out = []
    for p, lab in zip(problems, labels):
        out.append(
            _Example(
                p,
                graph_tensors(p),
                np.asarray(lab["stages"], dtype=np.int64),
                float(lab["objective"]),
                float(evaluate_stages(p, contiguous_params(p)).objective),
            )
        )
    return out


def _validate(policy, examples: list[_Example]) -> dict[str, float]:
    """The policy on held-out examples: mean objective / label of its greedy decode (which selects
    the shipped epoch), of that decode re-cut, and of "rl" (`preschedule_sampled`: the best of the
    greedy decode and seeded samples); plus greedy / contiguous split."""
    from ..policy.stage_policy import preschedule_sampled, recut_along_order

    to_label, to_contig, recut_to_label, sampled_to_label, worse = [], [], [], [], 0
    for i, ex in enumerate(examples):
        d = policy.decode(ex.problem, gt=ex.gt)
        obj = float(evaluate_stages(ex.problem, d.stages).objective)
        to_label.append(obj / ex.label_objective)
        to_contig.append(obj / ex.contiguous_objective)
        worse += obj > ex.contiguous_objective
        recut = float(evaluate_stages(ex.problem, recut_along_order(ex.problem, d.stages)).objective)
        recut_to_label.append(recut / ex.label_objective)
        # Seeded per example, apart from the training stream, so validating changes no training step.
        sampled = float(evaluate_stages(ex.problem, preschedule_sampled(ex.problem, seed=i, policy=policy)).objective)
        sampled_to_label.append(sampled / ex.label_objective)
    return {
        "val_ratio_to_label": float(np.mean(to_label)) if to_label else math.nan,
        "val_ratio_to_contiguous": float(np.mean(to_contig)) if to_contig else math.nan,
        "val_worse_than_contiguous": int(worse),
        "val_recut_ratio_to_label": float(np.mean(recut_to_label)) if recut_to_label else math.nan,
        "val_sampled_ratio_to_label": float(np.mean(sampled_to_label)) if sampled_to_label else math.nan,
    }


def train_stage_policy(
    config: StageTrainConfig,
    *,
    problems: list[StageProblem] | None = None,
    labels: list[dict[str, Any]] | None = None,
    finetune_hook: Callable[[Any, dict], None] | None = None,
):
    """Train a `StagePolicy`: imitation of exact labels, then REINFORCE on the evaluator's objective.

    Parameters
    ----------
    config : StageTrainConfig
        Every hyper-parameter; with the same config (and label cache) the run is repeatable.
    problems, labels : optional
        Override the generated problems and their CP-SAT labels (tests use tiny sets). Labels are
        dicts with ``stages`` and ``objective`` as `exact_labels` returns them.
    finetune_hook : callable, optional
        Stage 3 (fine-tuning on measured runtimes, a later issue): called as
        ``finetune_hook(policy, metrics)`` after stage 2.

    Returns
    -------
    policy : StagePolicy
        In eval mode.
    metrics : dict
        In `incsched.train.metrics`' vocabulary: ``"epochs"``, one row per epoch (phase, epoch,
        loss, validation ratios, seconds); ``"labels"``: label statistics; ``"selected_epoch"``;
        ``"seconds"``: total wall time.
    """
    import torch

    from ..policy.stage_policy import StagePolicy, trajectory_states

    t_start = time.perf_counter()
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    rng = np.random.default_rng(config.seed)
    if problems is None:
        problems = training_problems(config)
    if labels is None:
        labels = exact_labels(problems, config)
    examples = _examples(problems, labels)
    n_val = min(config.n_validation, max(len(examples) - 1, 0))
    val, train = examples[:n_val], examples[n_val:]
    policy = StagePolicy(config.hidden, config.n_layers, config.decoder_hidden, conv="torch_geometric")  # the learning layer
    metrics: dict[str, Any] = {
        "epochs": [],
        "labels": {
            "n": len(labels),
            "optimal": sum(lab.get("status") == "optimal" for lab in labels),
            "mean_label_over_contiguous": float(np.mean([e.label_objective / e.contiguous_objective for e in examples])),
        },
    }

    best: dict[str, Any] = {"key": None}

    def log_epoch(row: dict) -> None:
        metrics["epochs"].append(row)
        # Keep the weights of the epoch with the best greedy objective on the validation graphs.
        # (Selecting by the sampled "rl" ratio instead was tried on 2026-11-30: on 16 validation
        # graphs it picked an epoch no better on the held-out benchmark, so the rule stayed.)
        key = (row["val_ratio_to_label"], row["val_worse_than_contiguous"])
        if best["key"] is None or key < best["key"]:
            best.update(key=key, state={k: v.detach().clone() for k, v in policy.state_dict().items()},
                        epoch=f"{row['phase']} {row['epoch']}")
        log_row(log, "train stage policy", row)

    # Stage 1: imitation. Teacher forcing: the running state along the label's own trajectory.
    label_states = [trajectory_states(ex.gt, ex.label, ex.problem.graph.src, ex.problem.graph.dst) for ex in train]
    opt = adam(policy.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    for epoch in range(config.imitation_epochs):
        t0 = time.perf_counter()
        policy.train()
        losses = []
        for i in rng.permutation(len(train)).tolist():
            ex = train[i]
            states, lo = label_states[i]
            logp = policy.log_probs(ex.gt, states, lo)
            loss = -logp[torch.arange(len(ex.label)), torch.from_numpy(ex.label)].mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        policy.eval()
        log_epoch(epoch_row("imitation", epoch, time.perf_counter() - t0, loss=float(np.mean(losses)), **_validate(policy, val)))

    # Stage 2: REINFORCE with the greedy decode's reward as baseline (reward = -objective / label
    # objective), plus self-imitation: a sample better than a graph's label becomes its label.
    opt = adam(policy.parameters(), lr=config.rl_lr)
    src_dst = [(ex.problem.graph.src, ex.problem.graph.dst) for ex in train]
    for epoch in range(config.rl_epochs):
        t0 = time.perf_counter()
        losses, gains, relabelled = [], [], 0
        for i in rng.permutation(len(train)).tolist():
            ex = train[i]
            policy.eval()
            greedy = policy.decode(ex.problem, gt=ex.gt)
            base = -evaluate_stages(ex.problem, greedy.stages).objective / ex.label_objective
            samples = list(policy.decode_samples(ex.problem, config.rl_samples, rng, gt=ex.gt)[0])
            objectives = np.array([evaluate_stages(ex.problem, s).objective for s in samples], dtype=np.float64)
            rewards = -objectives / ex.label_objective
            adv = rewards - base
            gains.append(float(rewards.max() - base))
            best_i = int(np.argmin(objectives))
            if objectives[best_i] < ex.label_objective:
                relabelled += 1
                ex.label, ex.label_objective = samples[best_i], float(objectives[best_i])
                label_states[i] = trajectory_states(ex.gt, ex.label, *src_dst[i])
            policy.train()
            node_terms = policy.node_terms(ex.gt)
            states, lo = zip(*(trajectory_states(ex.gt, s, *src_dst[i]) for s in samples))
            logp = policy.log_probs(ex.gt, np.stack(states), np.stack(lo), node_terms)
            chosen = torch.gather(logp, 2, torch.from_numpy(np.stack(samples))[..., None]).squeeze(-1)
            pg = -(torch.from_numpy(adv.astype(np.float32)) * chosen.sum(dim=1)).mean()
            entropy = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(dim=-1).mean()
            states_l, lo_l = label_states[i]
            logp_label = policy.log_probs(ex.gt, states_l, lo_l, node_terms)
            imitation = -logp_label[torch.arange(len(ex.label)), torch.from_numpy(ex.label)].mean()
            loss = pg + config.rl_imitation_weight * imitation - config.entropy_weight * entropy
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), config.grad_clip)
            opt.step()
            losses.append(float(loss.detach()))
        policy.eval()
        log_epoch(epoch_row("reinforce", epoch, time.perf_counter() - t0, loss=float(np.mean(losses)),
                            best_sample_gain=float(np.mean(gains)), relabelled=relabelled, **_validate(policy, val)))

    if best["key"] is not None:
        policy.load_state_dict(best["state"])
        metrics["selected_epoch"] = best["epoch"]
    if finetune_hook is not None:
        finetune_hook(policy, metrics)
    policy.eval()
    metrics["seconds"] = time.perf_counter() - t_start
    return policy, metrics


def main(argv: list[str] | None = None) -> int:
    """``python -m incsched.train.stage --out data/models/stage_policy.pt``: train with the default config and save.

    Until the CLI's ``incsched train`` exists this is the command that reproduces the shipped
    checkpoint. ``--set key=value`` overrides a config field (JSON values).
    """
    import argparse
    import json

    from ..policy.stage_policy import save_stage_policy

    ap = argparse.ArgumentParser(description="train the stage policy")
    ap.add_argument("--out", required=True, help="checkpoint path (.pt; metadata goes beside it as .json)")
    ap.add_argument("--config", help="JSON file with StageTrainConfig fields (the rest: the defaults)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a StageTrainConfig field")
    ap.add_argument("--kernels", choices=list(KERNEL_SETTINGS),
                    help="train in a child process under these CPU kernels (incsched.train.kernels; default: this process's)")
    args = ap.parse_args(argv)
    if args.kernels is not None and current_kernels() != args.kernels:
        return run_in_child("incsched.train.stage", sys.argv[1:] if argv is None else list(argv), args.kernels).returncode
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    kernels = apply_in_process(args.kernels) if args.kernels is not None else None
    overrides = dict(read_json(args.config)) if args.config else {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = json.loads(value)
    config = StageTrainConfig.from_json({**StageTrainConfig().to_json(), **overrides})
    policy, metrics = train_stage_policy(config)
    if kernels is not None:
        metrics["kernels"] = kernels
    save_stage_policy(args.out, policy, train_config=config.to_json(), metrics=metrics)
    log.info("saved %s after %.0f s (selected %s)", args.out, metrics["seconds"], metrics.get("selected_epoch"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
