"""Benchmark: the throughput objective's split against the published pipeline partitioners.

For each shipped graph (``data/graphs``) and K: inc-ilp on `StageProblem.pipeline` (sends
at ``--bandwidth`` bytes/s, ``--micro-batches`` in flight, ``--memory`` per stage if given) against
torchgpipe's ``balance_by_time``, DeepSpeed's ``uniform`` and ``parameters``, the PipeDream/Alpa-
style DP (``pipeline_dp``) and the default objective's optimum (``peer``): the predicted
slowest-stage time (compute plus sends) and throughput, and the largest stage memory (parameters
plus activations in flight). With ``--measure``, the named graphs' models are captured (random
weights, offline) and every split runs as a pipeline of K CPU worker processes
(`incsched.execute.validate.validate_stages`, runtime ``processes``): measured throughput beside
the predicted. ``--compare`` prints result files side by side instead (``make run``).

    .venv/bin/python benchmarks/throughput.py --stages 2 4 --time-limit 20
    .venv/bin/python benchmarks/throughput.py --graphs resnet18 --stages 2 --measure resnet18
    .venv/bin/python benchmarks/throughput.py --compare out/run/peer.json out/run/throughput.json --graph resnet50
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from incsched.baselines.stage import STAGE_BASELINES  # noqa: E402
from incsched.data import shipped_graph_path, shipped_graphs  # noqa: E402
from incsched.formats import load_graph  # noqa: E402
from incsched.evaluate.stage import evaluate_stages  # noqa: E402
from incsched.problems.stage import StageProblem  # noqa: E402
from incsched.result import Result  # noqa: E402
from incsched.front_door import solve  # noqa: E402

BASELINES = ("balance_by_time", "uniform", "parameters", "pipeline_dp")
MIB = 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", nargs="*", default=shipped_graphs(), help="shipped graphs (default: all)")
    ap.add_argument("--stages", type=int, nargs="*", default=[2, 4], help="stage counts K")
    ap.add_argument("--bandwidth", type=float, default=1e9, help="bytes/s of a stage's sends (default 1e9)")
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--memory", type=int, help="per-stage bytes for parameters plus activations in flight (default: none)")
    ap.add_argument("--memory-share", type=float, metavar="F",
                    help="per-stage memory of each instance: F times the largest stage memory of balance_by_time's split "
                         "(F < 1: a memory torchgpipe's split does not fit)")
    ap.add_argument("--time-limit", type=float, default=20.0, help="seconds per inc-ilp solve")
    ap.add_argument("--measure", nargs="*", default=[], metavar="GRAPH", help="graphs whose splits also run on CPU worker processes")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per measured split")
    ap.add_argument("--compare", nargs="+", metavar="RESULT", help="stage result files of one graph, printed side by side")
    ap.add_argument("--graph", help="--compare: the graph the results were solved on (file or shipped name)")
    args = ap.parse_args(argv)

    print(f"command: python benchmarks/throughput.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"/proc/loadavg: {_loadavg()}")
    if args.compare:
        return compare(args)
    memory = f"{args.memory_share:g} x balance_by_time's peak" if args.memory_share else args.memory or "unbounded"
    print(f"bandwidth {args.bandwidth:g} B/s, {args.micro_batches} micro-batches, memory {memory}; "
          "time = slowest stage's compute + sends (ms), thr = micro-batches/s, mem = largest stage's parameters + activations in flight (MiB)")
    print()
    methods = ("inc-ilp", "peer", *BASELINES)
    print("| graph | K | memory MiB | " + " | ".join(methods) + " | inc-ilp status | inc-ilp s |")
    print("|---|---|---|" + "---|" * len(methods) + "---|---|")
    splits = {}
    for name in args.graphs:
        g = load_graph(shipped_graph_path(name))
        for K in args.stages:
            p = StageProblem.pipeline(g, K, memory=args.memory, bandwidth=args.bandwidth, micro_batches=args.micro_batches)
            if args.memory_share:
                peak = max(evaluate_stages(p, STAGE_BASELINES["balance_by_time"](p)).stage_memory)
                p = StageProblem.pipeline(g, K, memory=int(args.memory_share * peak), bandwidth=args.bandwidth,
                                          micro_batches=args.micro_batches)
            started = time.perf_counter()
            r = solve(p, time_limit=args.time_limit)
            seconds = time.perf_counter() - started
            stages = {"inc-ilp": r.stages,  # None when infeasible
                      "peer": solve(StageProblem.peer(g, K), time_limit=args.time_limit).stages}
            stages.update({m: STAGE_BASELINES[m](p).tolist() for m in BASELINES})
            splits[name, K] = (p, stages)
            cells = [_cell(p, stages[m]) for m in methods]
            cap = "none" if p.memory is None else f"{p.memory[0] / MIB:.0f}"
            status = r.status if r.gap is None else f"{r.status} (gap {100 * r.gap:.1f} %)"
            print(f"| {name} | {K} | {cap} | " + " | ".join(cells) + f" | {status} | {seconds:.1f} |", flush=True)
    for name in args.measure:
        for K in args.stages:
            measure(name, *splits[name, K], args)
    print(f"\n/proc/loadavg at the end: {_loadavg()}")
    return 0


def _cell(p: StageProblem, stages) -> str:
    if stages is None:
        return "no split fits"
    ev = evaluate_stages(p, np.asarray(stages))
    flag = "" if ev.feasible else " **over memory**"
    return f"{1e3 * ev.stage_time_peak_s:.1f} ms, {ev.throughput:.1f}/s, {max(ev.stage_memory) / MIB:.0f} MiB{flag}"


def measure(name: str, p: StageProblem, stages: dict, args) -> None:
    """Each split as a pipeline of K CPU worker processes: predicted and measured throughput."""
    import dataclasses

    from incsched.capture import capture, zoo
    from incsched.execute.validate import validate_stages

    model, inputs = zoo.build(name)
    captured = capture(model, inputs, name=name)
    if captured.graph.structure_digest() != p.graph.structure_digest():
        print(f"\n{name}: the capture here differs from the shipped graph; not measured")
        return
    # The shipped times (the ones solved with), so that predictions are the solver's.
    captured = dataclasses.replace(captured, graph=captured.graph.replace(compute_time=p.graph.compute_time))
    K = p.n_stages
    print(f"\n{name}, K={K}: {K} CPU worker processes, {args.micro_batches} micro-batches, medians of {args.repeats} runs "
          f"(load {_loadavg()})\n")
    print("| method | predicted slowest stage ms | predicted /s (model) | validate's predicted /s | measured /s | measured / predicted |")
    print("|---|---|---|---|---|---|")
    for method, s in stages.items():
        if s is None:
            continue
        ev = evaluate_stages(p, np.asarray(s))
        v = validate_stages(captured, s, ["cpu"] * K, n_micro_batches=args.micro_batches, repeats=args.repeats, runtime="processes")
        measured = v.measured["throughput"]
        print(f"| {method} | {1e3 * ev.stage_time_peak_s:.1f} | {ev.throughput:.1f} | {v.predicted['throughput']:.1f} | "
              f"{measured:.1f} | {measured / ev.throughput:.2f} |", flush=True)


def compare(args) -> int:
    """Result files of one graph side by side, each judged as a pipeline (the problem of the flags)."""
    results = [Result.load(f) for f in args.compare]
    source = args.graph or results[0].graph
    g = load_graph(source if os.path.exists(source) else shipped_graph_path(source))
    K = len(results[0].terms["stage_mem"])
    p = StageProblem.pipeline(g, K, memory=args.memory, bandwidth=args.bandwidth, micro_batches=args.micro_batches)
    evs = [evaluate_stages(p, np.asarray(r.stages)) for r in results]
    print(f"\n{g.name}, K={K}, each split as a pipeline: sends at {args.bandwidth:g} B/s, {args.micro_batches} micro-batches (1F1B)\n")
    names = [f"{Path(f).stem} ({r.status})" for f, r in zip(args.compare, results)]
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for k in range(K):
        print(f"| stage {k}: compute + sends ms | " + " | ".join(
            f"{1e3 * e.stage_compute_s[k]:.1f} + {1e3 * (e.stage_time_s[k] - e.stage_compute_s[k]):.1f}" for e in evs) + " |")
    for k in range(K):
        print(f"| stage {k}: params + acts MiB | " + " | ".join(
            f"{e.stage_mem[k] / MIB:.1f} + {(e.stage_memory[k] - e.stage_mem[k]) / MIB:.1f}" for e in evs) + " |")
    print("| peak parameter MiB | " + " | ".join(f"{e.mem_peak / MIB:.1f}" for e in evs) + " |")
    print("| peak memory MiB (params + acts) | " + " | ".join(f"{max(e.stage_memory) / MIB:.1f}" for e in evs) + " |")
    print("| slowest stage ms | " + " | ".join(f"{1e3 * e.stage_time_peak_s:.1f}" for e in evs) + " |")
    print("| predicted throughput /s | " + " | ".join(f"{e.throughput:.1f}" for e in evs) + " |")
    return 0


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "n/a"


if __name__ == "__main__":
    sys.exit(main())
