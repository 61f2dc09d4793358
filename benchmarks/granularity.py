"""Benchmark: what a split at module boundaries costs against the op-level optimum.

For each zoo model, captures the op-level graph (``granularity="op"``, trivial ops folded) and the
layer-level graph (``granularity="layer"``: the model's layers in call order, the only cuts
``pipeline()``'s ``split_spec``, DeepSpeed and torchtitan can take), solves the peer stage problem
(``alpha * mem_peak`` + data-carrying edges crossed) on both, and prints one markdown table: peak
parameter bytes per stage of each optimum, the cost of the layer split, and its split points.

    .venv/bin/python benchmarks/granularity.py --stages 4 --time-limit 60
    .venv/bin/python benchmarks/granularity.py --models resnet50 gpt2 --stages 4 8
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import ortools
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from incsched.capture import capture, zoo  # noqa: E402
from incsched.export import split_spec_names  # noqa: E402
from incsched.problems import StageProblem  # noqa: E402
from incsched.front_door import solve  # noqa: E402

MIB = 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(zoo.MODELS), help="zoo models (default: all)")
    ap.add_argument("--stages", type=int, nargs="*", default=[4], help="stage counts K")
    ap.add_argument("--alpha", type=float, default=100)
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per solve")
    ap.add_argument("--seq-len", type=int, default=32, help="tokens for bert_base / gpt2 (parameters do not depend on it)")
    args = ap.parse_args(argv)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"<!-- {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {load:.2f}; "
          f"torch {torch.__version__}, ortools {ortools.__version__}; python benchmarks/granularity.py {' '.join(argv or sys.argv[1:])} -->")
    print("| model | K | op nodes | layer nodes | op-level peak MiB | layer-level peak MiB | layer cost | layer split points | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models:
        started = time.perf_counter()
        model, inputs = zoo.build(name, seq_len=args.seq_len)
        op = capture(model, inputs, name=name).graph
        layer = capture(model, inputs, granularity="layer", name=name).graph
        for K in args.stages:
            r_op = solve(StageProblem.peer(op, n_stages=K, alpha=args.alpha), time_limit=args.time_limit)
            r_layer = solve(StageProblem.peer(layer, n_stages=K, alpha=args.alpha), time_limit=args.time_limit)
            peak_op, peak_layer = r_op.terms["mem_peak"], r_layer.terms["mem_peak"]
            # An optimum may leave stages empty (the peak is one module); split points give one stage per run.
            used = sorted(set(r_layer.stages))
            spec = split_spec_names(layer, [used.index(s) for s in r_layer.stages])
            points = ", ".join(f"{path}{'' if marker == 'BEGINNING' else ' (end)'}" for path, marker in spec.items())
            if len(used) < K:
                points += f" ({len(used)} stages used)"
            print(
                f"| {name} | {K} | {op.n_nodes} | {layer.n_nodes} | {peak_op / MIB:.2f}{_mark(r_op)} | "
                f"{peak_layer / MIB:.2f}{_mark(r_layer)} | {100 * (peak_layer / peak_op - 1):+.1f}% | {points} | "
                f"{time.perf_counter() - started:.0f} |",
                flush=True,
            )
    print("\n<!-- * not proven optimal within the time limit (status in brackets) -->")
    return 0


def _mark(result) -> str:
    return "" if result.status == "optimal" else f"* ({result.status})"


if __name__ == "__main__":
    raise SystemExit(main())
