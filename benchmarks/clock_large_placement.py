"""The user's clock on a 9,997-op placement (98 transformer blocks, 4 identical devices, a mean
transfer 4x a mean op), where the combinatorial lower bound alone takes seconds of pure Python.

Each method runs once per limit from the same process; the wall ratio is wall / (1.05 T + 1)
(at most 1 keeps the clock).

    .venv/bin/python benchmarks/clock_large_placement.py [--limits 5 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from incsched.generators import bandwidth_for_comm_ratio, transformer_block
from incsched.problems import PlacementProblem
from incsched.front_door import solve


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limits", type=float, nargs="+", default=[5.0, 20.0])
    ap.add_argument("--methods", nargs="+", default=["critical_path_list", "rl", "inc-ilp"])
    args = ap.parse_args(argv)
    print(f"Command: `{' '.join([os.path.basename(sys.executable), *sys.argv])}`  ")
    print(f"Load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores\n")
    g = transformer_block(n_blocks=98, seed=0)
    p = PlacementProblem.identical(g, 4, bandwidth=bandwidth_for_comm_ratio(g, 4.0, "cpu"))
    print(f"{g.n_nodes} ops, 4 devices\n")
    print("| method | limit s | wall s | wall ratio | status / stop | makespan | lower bound | answer from |")
    print("|---|---:|---:|---:|---|---:|---:|---|")
    worst = 0.0
    for limit in args.limits:
        for method in args.methods:
            started = time.perf_counter()
            r = solve(p, method, time_limit=limit)
            wall = time.perf_counter() - started
            ratio = wall / (1.05 * limit + 1.0)
            worst = max(worst, ratio)
            objective = "-" if r.objective is None else f"{r.objective:,}"
            print(f"| {method} | {limit:g} | {wall:.2f} | {ratio:.3f} | {r.status} / {r.stop_reason} | {objective} | "
                  f"{r.lower_bound:,} | {r.provenance.get('best_from') or '-'} |")
    print(f"\nWorst wall ratio: {worst:.3f}")
    print(f"Load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
