"""Benchmark: what the stage model predicts against what a real pipeline builds and spends.

For each model (random weights, built offline): capture at layer granularity on one micro-batch,
called with its labels so that the loss (glue after the last layer, which joins it) is part of the
last stage's time and memory,
with measured forward times, solve the training-throughput problem (`StageProblem.pipeline`,
``mode="training"``, 1F1B, Adam in fp32) with inc-ilp, build the pipeline from the result with
`incsched.export.build_pipeline` (``torch.distributed.pipelining.pipeline()`` with each stage
holding exactly the weights it reads), and run real training
steps on K forked gloo CPU ranks (`incsched.execute.training_step.train_step`). One row per stage:

- parameter bytes: predicted (`CompGraph.part_param_bytes`, tied weights once per stage that reads
  them) against the bytes the built stage module holds (distinct storages);
- training memory: predicted (the evaluator's ``stage_memory``: parameters x the optimizer's
  factor + the larger of the activations 1F1B stashes plus the stage's largest working set, and
  Adam's step temporaries for its largest weight; every term measured at capture, the loss's
  working set with the last node since capture runs the loss) against the stage's measured peak
  of live tensor bytes;
- the step: predicted ``step_time_s`` (M + K - 1 slowest stages, forward measured, backward
  measured or estimated as twice the forward) against the measured median step.

The even layer split (torchtitan's default: the same number of layers per stage) runs beside ours,
predicted and measured, on the same ranks.

    .venv/bin/python benchmarks/fidelity.py                      # tiny GPT-2 (tied) and ResNet-18
    .venv/bin/python benchmarks/fidelity.py --models gpt2-small --stages 4 --steps 2
    .venv/bin/python benchmarks/fidelity.py --zoo --stages 4    # parameter bytes, every zoo model
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from incsched.capture import capture, zoo  # noqa: E402
from incsched.evaluate.stage import evaluate_stages  # noqa: E402
from incsched.execute.training_step import train_step  # noqa: E402
from incsched.errors import ExportError  # noqa: E402
from incsched.export.pipeline_build import build_pipeline, stage_state_bytes  # noqa: E402
from incsched.front_door import solve  # noqa: E402
from incsched.problems.stage import StageProblem  # noqa: E402

MIB = 2**20


def _gpt2(size: str):
    tf = zoo.import_transformers()
    shapes = {"gpt2-tiny": dict(n_layer=4, n_embd=128, n_head=4, vocab_size=2000, n_positions=64),
              "gpt2-small": dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=128)}[size]
    config = tf.GPT2Config(**shapes, use_cache=False, bos_token_id=0, eos_token_id=0, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = tf.GPT2LMHeadModel(config)

        def forward(self, ids, labels=None):
            logits = self.lm(ids).logits
            return logits if labels is None else _gpt2_loss(logits, labels)

    vocab, seq = shapes["vocab_size"], shapes["n_positions"]

    def batch(n):
        ids = torch.randint(0, vocab, (n, seq))
        return (ids, ids)

    return LM, batch, _gpt2_loss


def _gpt2_loss(logits, labels):
    return nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


def _resnet18():
    tv = zoo.import_torchvision()

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = tv.models.resnet18(weights=None, num_classes=10)

        def forward(self, x, labels=None):
            logits = self.net(x)
            return logits if labels is None else nn.functional.cross_entropy(logits, labels)

    def batch(n):
        return (torch.randn(n, 3, 64, 64), torch.randint(0, 10, (n,)))

    return Classifier, batch, nn.functional.cross_entropy


MODELS = {"gpt2-tiny": lambda: _gpt2("gpt2-tiny"), "gpt2-small": lambda: _gpt2("gpt2-small"), "resnet18": _resnet18}


def even_layers(n_nodes: int, K: int) -> list[int]:
    """The same number of graph nodes (layers) per stage, in call order: torchtitan's default split."""
    return [min(K - 1, v * K // n_nodes) for v in range(n_nodes)]


def _stage_modules(build, mb_args, graph, stages):
    torch.manual_seed(0)
    pipe = build_pipeline(build(), mb_args, graph, stages)
    return [pipe.get_stage_module(k) for k in range(pipe.num_stages)]


def run_model(name: str, K: int, M: int, mb_size: int, time_limit: float, steps: int) -> list[dict]:
    build, batch, loss = MODELS[name]()
    torch.manual_seed(0)
    mb_args = batch(mb_size)
    cap = capture(build().eval(), mb_args, granularity="layer", measure=True, training=True, name=name)
    graph = cap.graph
    problem = StageProblem.pipeline(graph, K, micro_batches=M, mode="training", optimizer="adam-fp32", schedule="1f1b")
    result = solve(problem, time_limit=time_limit)
    inputs, target = batch(mb_size * M)
    rows = []
    for split, stages in (("inc-ilp", np.asarray(result.stages)), ("even layers", np.asarray(even_layers(graph.n_nodes, K)))):
        predicted = evaluate_stages(problem, stages)
        modules = _stage_modules(build, mb_args[:1], graph, stages)  # logits out: the schedule computes the loss
        measured = train_step(modules, (inputs,), target, loss, n_micro=M, timed_steps=steps)
        params = graph.part_param_bytes(stages, K)
        for k in range(K):
            rows.append({
                "model": name, "split": split, "stage": k,
                "param_pred": params[k], "param_built": stage_state_bytes(modules[k]),
                "mem_pred": predicted.stage_memory[k], "mem_meas": measured.stages[k].peak_bytes,
                "step_pred": predicted.step_time_s, "step_meas": measured.median_step_seconds,
                "step_min": min(measured.step_seconds), "step_max": max(measured.step_seconds),
                "status": result.status if split == "inc-ilp" else "-",
            })
    return rows


def zoo_parameter_bytes(names, K: int, time_limit: float) -> list[dict]:
    """For zoo models at layer granularity: each stage's parameter bytes as predicted and as built,
    for the inference optimum (peer objective) and the training-throughput optimum."""
    rows = []
    for name in names:
        size = dict(batch_size=1, seq_len=32, image_size=None if name in ("vit_b_16", "inception_v3") else 64)  # their fixed sizes
        model, args = zoo.build(name, **size)
        graph = capture(model, args, granularity="layer", name=name).graph
        for mode, problem in (("inference", StageProblem.peer(graph, K, alpha=1)),
                              ("training", StageProblem.pipeline(graph, K, micro_batches=4, mode="training"))):
            stages = np.asarray(solve(problem, time_limit=time_limit).stages)
            torch.manual_seed(0)
            fresh, _ = zoo.build(name, **size)  # pipeline() rewraps the modules it cuts: a fresh model each time
            try:
                pipe = build_pipeline(fresh, args, graph, stages)
                built = [stage_state_bytes(pipe.get_stage_module(k)) for k in range(pipe.num_stages)]
            except ExportError as err:  # an optimum with an empty stage maps onto fewer stages
                built = f"not built: {err}"
            rows.append({"model": name, "mode": mode, "predicted": graph.part_param_bytes(stages, K), "built": built,
                         "tied": len(graph.shared_weights)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["gpt2-tiny", "resnet18"], choices=sorted(MODELS))
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--micro-batch-size", type=int, default=4)
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--steps", type=int, default=3, help="timed training steps per split")
    ap.add_argument("--zoo", nargs="*", metavar="MODEL", help="instead: per-stage parameter bytes predicted against built, "
                    "for these zoo models (none named: all) under the inference and the training optimum")
    ap.add_argument("--page", help="also write the table to this Markdown file (a results page)")
    args = ap.parse_args(argv)
    lines: list[str] = []

    def out(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    try:
        _run(args, argv, out)
    finally:
        if args.page and lines:
            # the comment lines (command, machine) as quotes: "# " would be a Markdown heading
            page = ["> " + line[2:] + "  " if line.startswith("# ") else line for line in lines]
            Path(args.page).write_text("\n".join(page) + "\n", encoding="utf-8")
    return 0


def _run(args, argv, out) -> None:
    zoo.ensure_torchvision_importable()
    torch.set_num_threads(1)
    out(f"# {' '.join(['python', 'benchmarks/fidelity.py', *(argv if argv is not None else sys.argv[1:])])}")
    out(f"# {platform.node()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, torch {torch.__version__}, "
          f"K={args.stages}, M={args.micro_batches}, micro-batch {args.micro_batch_size}, 1F1B, adam-fp32, gloo CPU ranks")
    if args.zoo is not None:
        out("| model | mode | tied weights | parameter bytes per stage, predicted | built | equal |")
        out("|---|---|---|---|---|---|")
        for r in zoo_parameter_bytes(args.zoo or list(zoo.MODELS), args.stages, args.time_limit):
            out(f"| {r['model']} | {r['mode']} | {r['tied']} | {r['predicted']} | {r['built']} | {r['predicted'] == r['built']} |")
        return
    out("| model | split | stage | params predicted | params built | memory predicted (MiB) | peak measured (MiB) | ratio | step predicted (s) | step measured, median (min-max) (s) |")
    out("|---|---|---|---|---|---|---|---|---|---|")
    started = time.perf_counter()
    for name in args.models:
        for r in run_model(name, args.stages, args.micro_batches, args.micro_batch_size, args.time_limit, args.steps):
            ok = "=" if r["param_pred"] == r["param_built"] else "!="
            out(f"| {r['model']} | {r['split']} | {r['stage']} | {r['param_pred']:,} | {r['param_built']:,} {ok} | "
                  f"{r['mem_pred'] / MIB:.2f} | {r['mem_meas'] / MIB:.2f} | {r['mem_meas'] / r['mem_pred']:.3f} | "
                  f"{r['step_pred']:.3f} | {r['step_meas']:.3f} ({r['step_min']:.3f}-{r['step_max']:.3f}) |")
    out(f"# {time.perf_counter() - started:.0f} s in all; load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    raise SystemExit(main())
