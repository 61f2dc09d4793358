"""Benchmark: inc-ilp on the ICML'24 peer graphs (K=10, alpha=100), one row per file.

Reads the GML files from ../shared/benchmarks/icml24 (never copied into this tree) and skips
politely when they are absent. Prints objective, the proven lower bound, the gap and wall seconds.

    python benchmarks/icml24_inc_ilp.py --time-limit 60 --workers 2 rand_graph_1000_1 rand_graph_1000_2
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", default=[f"rand_graph_1000_{i}" for i in (1, 2, 3)] + [f"rand_graph_sparse_1000_{i}" for i in (1, 2, 3)])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=2, help="1: deterministic mode")
    ap.add_argument("--method", default="inc-ilp")
    args = ap.parse_args(argv)
    if not ICML.is_dir():
        print(f"skipped: {ICML} not found")
        return 0
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores; {args.method}, time limit {args.time_limit} s, workers {args.workers}\n")
    print("| file | status | objective | lower bound | gap | seconds |\n|---|---|---|---|---|---|")
    for name in args.files:
        g = load_graph(ICML / f"{name}.gml")
        p = StageProblem.peer(g, n_stages=10, alpha=100)
        t0 = time.perf_counter()
        r = solve(p, args.method, time_limit=args.time_limit, deterministic=args.workers == 1, workers=args.workers)
        gap = "-" if r.gap is None else f"{100 * r.gap:.4f}%"
        print(f"| {name} | {r.status} | {r.objective:,} | {r.lower_bound:,} | {gap} | {time.perf_counter() - t0:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
