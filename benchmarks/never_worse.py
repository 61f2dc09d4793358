"""Benchmark: inc-ilp is never worse than the learned policy alone at the same time limit, in a cold
process and in a warm one (issue 25, item 1). A thin caller of `incsched.solve`.

For each DOPPLER-shaped graph (generated: transformer blocks, FFNN, chained matmul; transfers 4x
compute) and each limit, in fresh subprocesses:

- cold: ``rl`` alone in one new process, inc-ilp alone in another (each pays torch's import and the
  decoder's compile inside its own clock);
- warm: one new process loads the policy first (an untimed ``rl`` solve), then runs ``rl`` and
  inc-ilp at the limit.

Makespans are re-checked by the simulator inside `solve`; "never worse" compares inc-ilp with ``rl``
of the same row (a missing answer counts as infinitely long). Wall ratio is
``wall / (1.05 * limit + 1)``: above 1 the clock broke.

    python benchmarks/never_worse.py                         # limits 1 2 5 10 60 (about 25 minutes)
    python benchmarks/never_worse.py --limits 1 2 5 --graphs transformer_2blocks
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

GRAPHS = {
    "transformer_2blocks": ("lambda: transformer_block(n_blocks=2)", 8),
    "ffnn": ("ffnn", 4),
    "chained_matmul": ("chained_matmul", 4),
}

ONE = r"""
import json, sys, time
import incsched
from incsched.generators import bandwidth_for_comm_ratio, chained_matmul, ffnn, transformer_block
build, devices, limit, warm, methods = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "warm", sys.argv[5].split(",")
g = eval(build)()
p = incsched.PlacementProblem.identical(g, devices, bandwidth=bandwidth_for_comm_ratio(g, 4.0))
if warm:
    incsched.solve(p, "rl", time_limit=120)
rows = []
solve = incsched.solve  # its lazy import is not part of the call the clock promises
for m in methods:
    t = time.perf_counter()
    r = solve(p, m, time_limit=limit, deterministic=False, workers=2)
    rows.append({"method": m, "makespan": r.objective, "wall": time.perf_counter() - t, "n_ops": p.n_nodes})
print(json.dumps(rows))
"""


def run(build: str, devices: int, limit: float, warm: bool, methods: list[str]) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", ONE, build, str(devices), repr(limit), "warm" if warm else "cold", ",".join(methods)],
                         capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limits", type=float, nargs="+", default=[1, 2, 5, 10, 60])
    ap.add_argument("--graphs", nargs="+", default=list(GRAPHS), choices=list(GRAPHS))
    args = ap.parse_args()
    print(f"command: python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} before")
    print("\n| graph | ops | D | limit s | process | rl makespan | inc-ilp makespan | never worse | rl wall ratio | inc-ilp wall ratio |")
    print("|---|---:|---:|---:|---|---:|---:|---|---:|---:|", flush=True)
    worse = broken = 0
    for name in args.graphs:
        build, devices = GRAPHS[name]
        for limit in args.limits:
            for warm in (False, True):
                if warm:
                    rl, inc = run(build, devices, limit, True, ["rl", "inc-ilp"])
                else:
                    rl, inc = run(build, devices, limit, False, ["rl"])[0], run(build, devices, limit, False, ["inc-ilp"])[0]
                ok = inc["makespan"] is not None and (rl["makespan"] is None or inc["makespan"] <= rl["makespan"])
                ratios = [r["wall"] / (1.05 * limit + 1) for r in (rl, inc)]
                worse += not ok
                broken += any(x > 1 for x in ratios)
                print(f"| {name} | {rl['n_ops']} | {devices} | {limit:g} | {'warm' if warm else 'cold'} | {rl['makespan'] or '-'} | "
                      f"{inc['makespan'] or '-'} | {'yes' if ok else 'NO'} | {ratios[0]:.2f} | {ratios[1]:.2f} |", flush=True)
    print(f"\ninc-ilp worse than rl: {worse}; clock broken: {broken}; load {os.getloadavg()[0]:.1f} after")
    return 0 if worse == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
