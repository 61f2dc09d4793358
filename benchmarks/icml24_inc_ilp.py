"""Benchmark: inc-ilp on the ICML'24 peer graphs (K=10, alpha=100), one row per file.

Reads the GML files from ../shared/benchmarks/icml24 (never copied into this tree) and skips
politely when they are absent. Prints nodes, objective, the proven lower bound, the gap, the
status and wall seconds, and, in ``--check`` mode, whether issue #5's target is met:

- (a) rand_graph_1000_1 in 10 s: objective <= 11,343,444;
- (b) the six 1000-node files in 60 s: gap <= 0.02%;
- (c) the twelve 5000- and 10000-node files in 120 s: gap <= 0.1%.

    python benchmarks/icml24_inc_ilp.py --check a b c --workers 2        # the targets, as stated
    python benchmarks/icml24_inc_ilp.py --check c --workers 2 rand_graph_5000_1 rand_graph_10000_1   # a subset
    python benchmarks/icml24_inc_ilp.py --time-limit 60 --workers 2 rand_graph_1000_1 rand_graph_1000_2

``--workers 1`` runs deterministic mode (the limit then counts CP-SAT's deterministic seconds);
more workers search in parallel against the wall clock and are not reproducible.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from incsched import load_graph  # noqa: E402
from incsched.problems import StageProblem  # noqa: E402
from incsched.solve import solve  # noqa: E402

ICML = REPO.parent / "shared" / "benchmarks" / "icml24"

_THOUSAND = [f"rand_graph_1000_{i}" for i in (1, 2, 3)] + [f"rand_graph_sparse_1000_{i}" for i in (1, 2, 3)]
_LARGE = [f"rand_graph_{kind}{n}_{i}" for n in (5000, 10000) for kind in ("", "sparse_") for i in (1, 2, 3)]

#: Issue #5's targets: (files, time limit in seconds, test on a result, the test in words).
TARGETS = {
    "a": (["rand_graph_1000_1"], 10.0, lambda r: r.objective <= 11_343_444, "objective <= 11,343,444"),
    "b": (_THOUSAND, 60.0, lambda r: r.gap is not None and r.gap <= 0.0002, "gap <= 0.02%"),
    "c": (_LARGE, 120.0, lambda r: r.gap is not None and r.gap <= 0.001, "gap <= 0.1%"),
}


def run_one(name: str, time_limit: float, workers: int, method: str):
    g = load_graph(ICML / f"{name}.gml")
    problem = StageProblem.peer(g, n_stages=10, alpha=100)
    started = time.perf_counter()
    result = solve(problem, method, time_limit=time_limit, deterministic=workers == 1, workers=workers)
    return g.n_nodes, result, time.perf_counter() - started


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", default=None, help="file names without .gml (with --check: only these of the targets' files)")
    ap.add_argument("--check", nargs="+", choices=sorted(TARGETS), help="run issue #5's target checks instead")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=2, help="1: deterministic mode")
    ap.add_argument("--method", default="inc-ilp")
    args = ap.parse_args(argv)
    if not ICML.is_dir():
        print(f"skipped: {ICML} not found")
        return 0
    jobs = []
    if args.check:
        for key in args.check:
            files, limit, test, words = TARGETS[key]
            jobs += [(name, limit, f"({key}) {words}", test) for name in files if not args.files or name in args.files]
    else:
        jobs = [(name, args.time_limit, "", None) for name in args.files or _THOUSAND]
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, load average {load[0]:.2f}; {args.method}, workers {args.workers}")
    print("Command: python " + " ".join(sys.argv) + "\n")
    print("| graph | nodes | objective | lower bound | gap | status | seconds | limit | target | met |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---|---|")
    met_all = True
    for name, limit, words, test in jobs:
        if not (ICML / f"{name}.gml").is_file():
            print(f"| {name} | - | - | - | - | missing | - | {limit:g} | {words} | - |", flush=True)
            continue
        nodes, r, seconds = run_one(name, limit, args.workers, args.method)
        gap = "-" if r.gap is None else f"{100 * r.gap:.4f}%"
        met = "-" if test is None or r.objective is None else ("yes" if test(r) else "no")
        met_all &= met != "no"
        objective = "-" if r.objective is None else f"{r.objective:,}"
        bound = "-" if r.lower_bound is None else f"{r.lower_bound:,}"
        print(f"| {name} | {nodes} | {objective} | {bound} | {gap} | {r.status} | {seconds:.1f} | {limit:g} | {words} | {met} |", flush=True)
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    print(f"\nLoad average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0 if met_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
