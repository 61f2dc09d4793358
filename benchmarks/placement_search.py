"""Benchmark: inc-ilp's placement search, one tree against another, side by side in one run (issue 25, item 4).

For DOPPLER-shaped generated graphs (transformer blocks, FFNN tiles, chained matmuls; transfers
about 4x compute; 4 and 8 identical devices) each instance is solved by ``solve(problem,
"inc-ilp", ...)`` once per source tree, each in its own subprocess with that tree first on
``PYTHONPATH`` (default: ``--base /work/main`` against this checkout), interleaved instance by
instance. Makespans are the simulator's (`solve` re-checks every answer); the table gives each
tree's makespan, certified lower bound and gap, the learned policy's portfolio score (``rl``:
inc-ilp must never end above it), what phase found the best answer, the large-neighbourhood
rounds run and improved, and the change of the makespan against the base tree.

Default mode is deterministic and bounded by ``--work-limit`` (CP-SAT deterministic seconds):
the machine's load then moves the wall time only, not the answers, so two trees compare fairly
on a shared machine; ``--time-limit`` is then only a safety cap (a run it cuts says so in the
``stop`` column). ``--wall`` compares at a wall-clock limit instead (``--time-limit``, the
product's default mode), which a loaded machine biases.

    python benchmarks/placement_search.py                        # 6 instances, work 6, both trees
    python benchmarks/placement_search.py --instances ffnn8x4_d4 --work-limit 10 --json out.json
    python benchmarks/placement_search.py --wall --time-limit 60
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: name -> (graph recipe, devices). Seeds >= 1000 on the jittered ones: never drawn in training.
INSTANCES = {
    "transformer2_j_d8": ("transformer_block(n_blocks=2, jitter=0.1, seed=1000)", 8),
    "transformer3_j_d8": ("transformer_block(n_blocks=3, jitter=0.1, seed=1001)", 8),
    "transformer2_ffn12_d4": ("transformer_block(n_blocks=2, ffn_tiles=12)", 4),
    "ffnn8x4_d4": ("ffnn(n_layers=8, tiles=4)", 4),
    "ffnn8x4_j_d8": ("ffnn(n_layers=8, tiles=4, jitter=0.1, seed=1002)", 8),
    "chained_matmul6x3_d4": ("chained_matmul(6, tiles=3)", 4),
    "chained_matmul6x3_j_d8": ("chained_matmul(6, tiles=3, jitter=0.1, seed=1003)", 8),
}
DEFAULT = ["transformer2_j_d8", "transformer2_ffn12_d4", "ffnn8x4_d4", "ffnn8x4_j_d8", "chained_matmul6x3_d4", "chained_matmul6x3_j_d8"]

ONE = r"""
import json, sys, time
t0 = time.perf_counter()
import incsched
from incsched.generators import bandwidth_for_comm_ratio, chained_matmul, ffnn, transformer_block
from incsched.problems import PlacementProblem
from incsched.front_door import solve
recipe, D, time_limit, work_limit, deterministic = json.loads(sys.argv[1])
g = eval(recipe)
p = PlacementProblem.identical(g, D, bandwidth=bandwidth_for_comm_ratio(g, 4.0))
r = solve(p, "inc-ilp", time_limit=time_limit, work_limit=work_limit, deterministic=deterministic, workers=1 if deterministic else 2)
steps = r.provenance.get("steps", [])
scores = next((s.get("scores") for s in steps if s.get("phase") == "incumbent" and s.get("winner")), {}) or {}
rounds = [s for s in steps if s.get("phase") == "rounds"]
print(json.dumps({
    "source": incsched.__file__, "ops": g.n_nodes, "objective": int(r.objective), "lower_bound": int(r.lower_bound),
    "gap": r.gap, "status": r.status, "stop": r.stop_reason, "reproducible": r.reproducible, "rl": scores.get("rl"),
    "incumbent": min((v for v in scores.values() if v is not None), default=None),
    "best_phase": r.provenance.get("best_from"), "rounds": rounds[-1]["rounds"] if rounds else 0,
    "rounds_improved": sum(1 for s in steps if s.get("phase") == "round"), "wall": time.perf_counter() - t0,
}))
"""


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def run_one(tree: Path, name: str, args) -> dict:
    recipe, D = INSTANCES[name]
    payload = json.dumps([recipe, D, args.time_limit, None if args.wall else args.work_limit, not args.wall])
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", ONE, payload], capture_output=True, text=True, env=env, cwd=str(tree))
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        return {"error": f"exit {proc.returncode}: {last}"}
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    if not row["source"].startswith(str(tree)):
        return {"error": f"imported {row['source']}, not the tree {tree}"}
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", nargs="+", default=DEFAULT, choices=sorted(INSTANCES))
    ap.add_argument("--base", type=Path, default=Path("/work/main"), help="the tree to compare against (default /work/main)")
    ap.add_argument("--tree", type=Path, default=REPO, help="the tree under test (default this checkout)")
    ap.add_argument("--work-limit", type=float, default=6.0, help="deterministic seconds per solve (default 6)")
    ap.add_argument("--time-limit", type=float, default=None, help="wall seconds per solve (default: 60 with --wall, else a 600-s cap)")
    ap.add_argument("--wall", action="store_true", help="compare at --time-limit wall seconds, 2 workers, no work limit")
    ap.add_argument("--only", choices=["base", "tree"], help="run one tree only (no comparison table)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    if args.time_limit is None:
        args.time_limit = 60.0 if args.wall else 600.0
    trees = {"base": args.base.resolve(), "tree": args.tree.resolve()}
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; load before: {_load()}")
    mode = f"wall {args.time_limit:g} s, 2 workers" if args.wall else f"deterministic, work_limit {args.work_limit:g} (time cap {args.time_limit:g} s)"
    print(f"mode: {mode}; base {trees['base']}; tree {trees['tree']}\n")
    rows = []
    for i, name in enumerate(args.instances):
        order = ["base", "tree"] if i % 2 == 0 else ["tree", "base"]  # which runs first alternates
        for label in order:
            if args.only and label != args.only:
                continue
            t0 = time.perf_counter()
            row = {"instance": name, "tree": label, **run_one(trees[label], name, args)}
            row["seconds"] = time.perf_counter() - t0
            rows.append(row)
            print(f"  {name} {label}: " + (row.get("error") or f"{row['objective']} lb {row['lower_bound']} gap {100 * row['gap']:.2f}% "
                                           f"({row['stop']}, {row['seconds']:.0f} s)"), flush=True)
    print(f"\nload after: {_load()}\n")
    if args.only:
        return 0
    print("| instance | ops | D | rl | base | base gap | tree | tree gap | change | tree best phase | rounds (improved) | never worse than rl |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    changes = []
    for name in args.instances:
        base = next(r for r in rows if r["instance"] == name and r["tree"] == "base")
        tree = next(r for r in rows if r["instance"] == name and r["tree"] == "tree")
        if "error" in base or "error" in tree:
            print(f"| {name} | | {INSTANCES[name][1]} | | {base.get('error', '')} | | {tree.get('error', '')} | | | | | |")
            continue
        change = (tree["objective"] - base["objective"]) / base["objective"]
        changes.append(change)
        rl = tree["rl"]
        ok = "n/a" if rl is None else ("yes" if tree["objective"] <= rl else "NO")
        print(f"| {name} | {tree['ops']} | {INSTANCES[name][1]} | {rl if rl is not None else '-'} | {base['objective']} | {100 * base['gap']:.2f}% "
              f"| {tree['objective']} | {100 * tree['gap']:.2f}% | {100 * change:+.2f}% | {tree['best_phase']} "
              f"| {tree['rounds']} ({tree['rounds_improved']}) | {ok} |")
    if changes:
        print(f"\nmean makespan change, tree against base: {100 * sum(changes) / len(changes):+.2f}% over {len(changes)} instances; "
              f"better on {sum(c < 0 for c in changes)}, worse on {sum(c > 0 for c in changes)}")
    if args.json:
        args.json.write_text(json.dumps({"mode": mode, "load_after": _load(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
