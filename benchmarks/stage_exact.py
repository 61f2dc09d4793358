"""Benchmark: stage pre-schedulers and the exact CP-SAT model on real and peer graphs.

For each shipped graph (incsched/data/graphs/*.json.gz, K in 2/4/8) and each ICML'24 1000-node file
(../shared/benchmarks/icml24, K=10; skipped politely when absent), with the peer objective
(alpha * mem_peak + data-carrying edges crossed), runs every baseline, then CP-SAT cold and
CP-SAT hinted with the best baseline, and prints one markdown table. Every objective shown is
recomputed by `evaluate_stages`.

    .venv/bin/python benchmarks/stage_exact.py --time-limit 10 --workers 2
    .venv/bin/python benchmarks/stage_exact.py --graphs resnet50 --ks 4 --deterministic
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import ortools

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from incsched.baselines.stage import STAGE_BASELINES  # noqa: E402
from incsched.evaluate.stage import evaluate_stages  # noqa: E402
from incsched.formats import load_graph  # noqa: E402
from incsched.problems.stage import StageProblem  # noqa: E402
from incsched.solvers import SolverSettings  # noqa: E402
from incsched.solvers.cpsat.stage import solve_stage  # noqa: E402

ICML_DIR = REPO.parent / "shared" / "benchmarks" / "icml24"
ICML_FILES = ["rand_graph_1000_1", "rand_graph_1000_2", "rand_graph_1000_3"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", nargs="*", help="shipped graph names to run (default: all in incsched/data/graphs)")
    ap.add_argument("--ks", type=int, nargs="*", default=[2, 4, 8], help="stage counts for shipped graphs")
    ap.add_argument("--icml", nargs="*", default=ICML_FILES, help="ICML'24 files (K=10); pass none to skip")
    ap.add_argument("--icml-k", type=int, default=10)
    ap.add_argument("--alpha", type=float, default=100)
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds per CP-SAT run")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--deterministic", action="store_true", help="one worker, deterministic time limit")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold (unhinted) CP-SAT run")
    args = ap.parse_args(argv)

    cases = []
    for path in sorted((REPO / "incsched" / "data" / "graphs").glob("*.json.gz")):
        name = path.name[: -len(".json.gz")]
        if args.graphs is None or name in args.graphs:
            cases += [(path, k) for k in args.ks]
    for name in args.icml or []:
        path = ICML_DIR / f"{name}.gml"
        if path.exists():
            cases.append((path, args.icml_k))
        else:
            print(f"<!-- skipped {path}: not present -->")

    settings = SolverSettings(time_limit=args.time_limit, deterministic=args.deterministic, workers=args.workers)
    mode = "deterministic, 1 worker" if args.deterministic else f"{args.workers} workers (not reproducible)"
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"OR-Tools {ortools.__version__}; CP-SAT {mode}, time limit {args.time_limit:g} s; "
        f"peer objective alpha={args.alpha:g}\n"
    )
    print("| method | graph | K | objective | bound | gap | seconds |")
    print("|---|---|---|---|---|---|---|")
    for path, K in cases:
        graph = load_graph(path)
        problem = StageProblem.peer(graph, n_stages=K, alpha=args.alpha)
        trivial = args.alpha * max(math.ceil(int(graph.param_bytes.sum()) / K), int(graph.param_bytes.max(initial=0)))
        best = None
        for name, fn in STAGE_BASELINES.items():
            t0 = time.perf_counter()
            stages = fn(problem, 0)
            seconds = time.perf_counter() - t0
            ev = evaluate_stages(problem, stages)
            row(name, graph.name, K, ev.objective, trivial, seconds)
            if ev.feasible and (best is None or ev.objective < best[0]):
                best = (ev.objective, name, stages)
        runs = [] if args.no_cold else [("cpsat cold", None)]
        runs.append((f"cpsat hint={best[1]}", best[2]))
        for label, hint in runs:
            out = solve_stage(problem, settings, hint=hint)
            if out.assignment is None:
                row(f"{label} ({out.status})", graph.name, K, None, out.bound, out.wall_time)
                continue
            ev = evaluate_stages(problem, out.assignment)
            assert ev.feasible and abs(ev.objective - out.objective) < 1e-6, (ev.violations, ev.objective, out.objective)
            row(f"{label} ({out.status})", graph.name, K, ev.objective, out.bound, out.wall_time)
        sys.stdout.flush()
    return 0


def row(method: str, graph: str, K: int, objective, bound, seconds: float) -> None:
    gap = "" if objective in (None, 0) or bound is None else f"{(objective - bound) / objective:.2%}"
    fmt = lambda x: "" if x is None else f"{x:,.0f}"  # noqa: E731
    print(f"| {method} | {graph} | {K} | {fmt(objective)} | {fmt(bound)} | {gap} | {seconds:.2f} |")


if __name__ == "__main__":
    raise SystemExit(main())
