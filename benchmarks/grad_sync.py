"""Benchmark: the training optimum with and without the gradient sync of tied weights in the objective.

GPT-2 from a local config (6 layers, width 256, vocabulary 8,000: ``lm_head.weight`` tied to
``transformer.wte.weight``), captured at layer (or ``--granularity op``) granularity for training (times estimated by the
cpu roofline, nothing measured, so every run sees the same graph), K stages, 1F1B, M
micro-batches, a stage-to-stage bandwidth. Two problems on that graph:

- *old*: the slowest stage alone (``stage_time_peak`` weight 1, the preset before the sync term);
- *new*: `StageProblem.pipeline`'s training preset, a step in ticks (``step_slots x
  stage_time_peak + grad_sync_peak``).

Both optima are judged by the new problem's evaluator: step time (seconds and ticks), its sync
part, which stages hold the tied weight, whether the split changed, and each solve's seconds and
status. With ``--one-stage`` the step of everything on one stage is printed too (the only split
of this chain-shaped graph in which the embedding and the head share a stage).

    .venv/bin/python benchmarks/grad_sync.py                       # K=4, M=4, 1e9 B/s
    .venv/bin/python benchmarks/grad_sync.py --bandwidth 1e8 --one-stage
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from incsched.evaluate.stage import evaluate_stages  # noqa: E402
from incsched.front_door import solve  # noqa: E402
from incsched.problems.stage import ObjectiveWeights, StageProblem  # noqa: E402


def gpt2_graph(layers: int, width: int, vocab: int, seq: int, batch: int, granularity: str):
    import torch

    from incsched.capture import capture, zoo

    tf = zoo.import_transformers()
    torch.manual_seed(0)
    config = tf.GPT2Config(n_layer=layers, n_embd=width, vocab_size=vocab, n_head=4, n_positions=max(seq, 64), use_cache=False,
                           bos_token_id=0, eos_token_id=0)
    model = tf.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, vocab, (batch, seq))
    return capture(model, (ids,), granularity=granularity, training=True, name="gpt2-tied").graph


def _split(stages, K: int) -> str:
    """The stages themselves on small graphs, else the nodes on each stage."""
    return str(list(stages)) if len(stages) <= 20 else "nodes per stage " + str(np.bincount(stages, minlength=K).tolist())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--bandwidth", type=float, default=1e9, help="bytes/s of a send and of the gradient sync (default 1e9)")
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=2, help="sequences per micro-batch")
    ap.add_argument("--granularity", choices=("layer", "op"), default="layer")
    ap.add_argument("--one-stage", action="store_true", help="also print the step of everything on one stage")
    args = ap.parse_args(argv)

    graph = gpt2_graph(args.layers, args.width, args.vocab, args.seq, args.batch, args.granularity)
    new = StageProblem.pipeline(graph, args.stages, micro_batches=args.micro_batches, bandwidth=args.bandwidth, mode="training")
    old = replace(new, weights=ObjectiveWeights(stage_time_peak=1))
    (tied,) = graph.shared_weights
    print(f"graph {graph.name} ({args.granularity}): {graph.n_nodes} nodes, tied {tied.name} {tied.nbytes:,} bytes, read by "
          f"{[graph.names[v] for v in tied.readers]}; K={args.stages}, M={args.micro_batches}, bandwidth {args.bandwidth:g} B/s, "
          f"tick {new.time_unit:g} s, one sync {int(new.grad_sync_ticks[0]):,} ticks; load {os.getloadavg()[0]:.2f}")
    print("| problem | status | solve | step | step ticks | sync | slowest stage ticks | replicated | split |\n|---|---|---|---|---|---|---|---|---|")
    rows = {}
    for label, problem in (("old (slowest stage)", old), ("new (step + sync)", new)):
        start = time.perf_counter()
        r = solve(problem, time_limit=args.time_limit, seed=0)
        seconds = time.perf_counter() - start
        ev = evaluate_stages(new, np.asarray(r.stages))
        rows[label] = (r, ev, seconds)
        print(f"| {label} | {r.status} | {seconds:.2f} s | {1e3 * ev.step_time_s:.3f} ms | {ev.step_ticks:,} | "
              f"{1e3 * ev.grad_sync_s:.3f} ms | {ev.stage_time_peak:,} | {ev.replicated} | {_split(r.stages, args.stages)} |")
    (r_old, ev_old, _), (r_new, ev_new, _) = rows.values()
    print(f"split changed: {list(r_old.stages) != list(r_new.stages)}; new step - old step: "
          f"{1e3 * (ev_new.step_time_s - ev_old.step_time_s):+.3f} ms ({ev_new.step_ticks - ev_old.step_ticks:+,} ticks)")
    if args.one_stage:
        ev = evaluate_stages(new, np.zeros(graph.n_nodes, dtype=np.int64))
        print(f"everything on stage 0: step {1e3 * ev.step_time_s:.3f} ms, sync {1e3 * ev.grad_sync_s:.3f} ms, "
              f"feasible {ev.feasible}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
