"""Benchmark: solve() methods side by side, in one run, on one machine.

Rows per instance: inc-ilp from the best heuristic, inc-ilp from the RL policy, the full model cold
(ilp), the full model hinted by the best heuristic (ilp-hinted), the RL policy alone and the
heuristics. Columns: status, objective, proven lower bound, gap, wall seconds; the summary gives
each method's total time and the ratio of cold ilp's total to inc-ilp's (the issue's speed-up).

    python benchmarks/inc_ilp.py --stage-graphs resnet50 bert_base --ks 4 8 --placement ffnn chained_matmul
    python benchmarks/inc_ilp.py --icml rand_graph_1000_1 --time-limit 10 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from incsched import load_graph  # noqa: E402
from incsched.generators import bandwidth_for_comm_ratio, chained_matmul, ffnn, transformer_block  # noqa: E402
from incsched.problems import PlacementProblem, StageProblem  # noqa: E402
from incsched.solve import solve  # noqa: E402

ICML = REPO.parent / "shared" / "benchmarks" / "icml24"
PLACEMENT_GRAPHS = {
    "transformer_block": lambda: transformer_block(),
    "ffnn": lambda: ffnn(),
    "ffnn_6x3": lambda: ffnn(n_layers=6, tiles=3),
    "chained_matmul": lambda: chained_matmul(),
}
STAGE_HEURISTICS = ("contiguous_params", "pipedream_dp", "dp_local_search")
PLACEMENT_HEURISTICS = ("critical_path_list", "heft")


def runs(kind: str):
    exact = [("inc-ilp", {}), ("inc-ilp", {"preschedule": "rl"}), ("ilp", {}), ("ilp-hinted", {})]
    heuristics = STAGE_HEURISTICS if kind == "stage" else PLACEMENT_HEURISTICS
    return exact + [("rl", {})] + [(h, {}) for h in heuristics]


def bench(name: str, problem, kind: str, args) -> list[dict]:
    rows = []
    for method, extra in runs(kind):
        label = method + ("(rl)" if extra.get("preschedule") == "rl" else "")
        t0 = time.perf_counter()
        r = solve(problem, method, time_limit=args.time_limit, deterministic=args.workers == 1, workers=args.workers, **extra)
        seconds = time.perf_counter() - t0
        rows.append(
            dict(instance=name, method=label, status=r.status, objective=r.objective, bound=r.lower_bound, gap=r.gap, seconds=seconds)
        )
        print(_row(rows[-1]), flush=True)
    return rows


def _row(r: dict) -> str:
    gap = "-" if r["gap"] is None else f"{100 * r['gap']:.3f}%"
    obj = "-" if r["objective"] is None else f"{r['objective']:,}"
    bound = "-" if r["bound"] is None else f"{r['bound']:,}"
    return f"| {r['instance']} | {r['method']} | {r['status']} | {obj} | {bound} | {gap} | {r['seconds']:.2f} |"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage-graphs", nargs="*", default=["resnet50", "bert_base", "gpt2", "inception_v3"])
    ap.add_argument("--ks", nargs="*", type=int, default=[2, 4, 8])
    ap.add_argument("--icml", nargs="*", default=[], help="ICML'24 files (K=10, alpha=100), read from ../shared")
    ap.add_argument("--placement", nargs="*", default=list(PLACEMENT_GRAPHS), help="DOPPLER-shaped graphs, 4 devices")
    ap.add_argument("--comm-ratio", type=float, default=4.0)
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=1, help="1: deterministic mode")
    ap.add_argument("--json", help="write all rows here")
    args = ap.parse_args(argv)

    solve(StageProblem.peer(load_graph(REPO / "data/graphs/resnet18.json.gz"), 2), "ilp")  # import OR-Tools once, untimed
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"time limit {args.time_limit} s, workers {args.workers} ({'deterministic' if args.workers == 1 else 'parallel'})\n")
    print("| instance | method | status | objective | bound | gap | seconds |\n|---|---|---|---|---|---|---|")
    rows = []
    for name in args.stage_graphs:
        g = load_graph(REPO / "data" / "graphs" / f"{name}.json.gz")
        for K in args.ks:
            rows += bench(f"{name} K={K}", StageProblem.peer(g, n_stages=K, alpha=100), "stage", args)
    for name in args.icml:
        path = ICML / f"{name}.gml"
        if not path.exists():
            print(f"(skipped {name}: {path} not found)")
            continue
        rows += bench(f"{name} K=10", StageProblem.peer(load_graph(path), n_stages=10, alpha=100), "stage", args)
    for name in args.placement:
        g = PLACEMENT_GRAPHS[name]()
        p = PlacementProblem.identical(g, 4, bandwidth=bandwidth_for_comm_ratio(g, args.comm_ratio))
        rows += bench(f"{name} ({g.n_nodes} ops, 4 dev)", p, "placement", args)

    print("\nTotal seconds per method over all instances, and how many it proved optimal:")
    methods = sorted({r["method"] for r in rows}, key=lambda m: [r["method"] for r in rows].index(m))
    for m in methods:
        mine = [r for r in rows if r["method"] == m]
        print(f"- {m}: {sum(r['seconds'] for r in mine):.1f} s, optimal {sum(r['status'] == 'optimal' for r in mine)}/{len(mine)}")
    cold = sum(r["seconds"] for r in rows if r["method"] == "ilp")
    inc = sum(r["seconds"] for r in rows if r["method"] == "inc-ilp")
    if inc > 0:
        print(f"\ncold ilp total / inc-ilp total = {cold / inc:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
