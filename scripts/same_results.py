"""Are the results of two trees the same, byte for byte? Work-bounded inc-ilp runs of benchmark
instances (shipped graphs under the peer and throughput objectives, a 1000-node ICML'24-like graph,
DOPPLER-shaped placements), each written as ``json.dumps(result.to_json(timing=False))``.

A refactoring must not change a single answer, bound or step of a run that ends on its work budget
or a proof. Run this once with the old tree first on ``PYTHONPATH`` and once with the new one, then
compare:

    git worktree add /tmp/old <commit>
    PYTHONPATH=/tmp/old python scripts/same_results.py --out old.json
    python scripts/same_results.py --out new.json
    python scripts/same_results.py --compare old.json new.json

``--drop KEY`` leaves a provenance key out of the comparison (one the new tree adds on purpose).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

CASES = (
    ("resnet50 K=4 peer", "stage", "resnet50", 4),
    ("inception_v3 K=8 peer", "stage", "inception_v3", 8),
    ("vgg16 K=2 peer", "stage", "vgg16", 2),
    ("gpt2 K=8 peer", "stage", "gpt2", 8),
    ("bert_base K=4 throughput", "throughput", "bert_base", 4),
    ("icml24_like 1000 K=10", "icml", 1000, 10),
    ("ffnn_6x3 D=4", "placement", "ffnn_6x3", 4),
    ("transformer_block D=4", "placement", "transformer_block", 4),
    ("chained_matmul D=8", "placement", "chained_matmul", 8),
    ("transformer_2blocks D=8", "placement", "transformer_2blocks", 8),
)


def problem_of(kind: str, graph, k: int):
    from incsched.formats import load_graph
    from incsched.generators import bandwidth_for_comm_ratio, chained_matmul, ffnn, icml24_like, transformer_block
    from incsched.data import shipped_graph_path
    from incsched.problems import PlacementProblem, StageProblem

    if kind == "stage":
        return StageProblem.peer(load_graph(shipped_graph_path(graph)), n_stages=k, alpha=100)
    if kind == "throughput":
        return StageProblem.pipeline(load_graph(shipped_graph_path(graph)), n_stages=k, bandwidth=1e9, micro_batches=4)
    if kind == "icml":
        return StageProblem.peer(icml24_like(graph, seed=0), n_stages=k, alpha=100)
    build = {"ffnn_6x3": lambda: ffnn(n_layers=6, tiles=3), "transformer_block": transformer_block,
             "chained_matmul": chained_matmul, "transformer_2blocks": lambda: transformer_block(n_blocks=2)}[graph]
    g = build()
    return PlacementProblem.identical(g, k, bandwidth=bandwidth_for_comm_ratio(g, 4.0))


def run(work_limit: float) -> dict:
    try:
        from incsched import solve  # the new front door
        if not callable(solve):
            raise ImportError
    except ImportError:
        from incsched.solve import solve  # the old tree
    out = {}
    for name, kind, graph, k in CASES:
        started = time.perf_counter()
        r = solve(problem_of(kind, graph, k), time_limit=600, work_limit=work_limit, seed=0)
        out[name] = json.dumps(r.to_json(timing=False), sort_keys=True)
        print(f"{name}: {r.status} {r.objective} stop {r.stop_reason} reproducible {r.reproducible} "
              f"({time.perf_counter() - started:.1f} s)", flush=True)
    return out


def compare(old_path: str, new_path: str, drop: list[str]) -> int:
    old, new = (json.load(open(p)) for p in (old_path, new_path))
    same = 0
    for name in old:
        a, b = (json.loads(d[name]) for d in (old, new))
        for key in drop:
            a["provenance"].pop(key, None)
            b["provenance"].pop(key, None)
        a["provenance"].pop("versions", None), b["provenance"].pop("versions", None)
        if json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True):
            same += 1
        else:
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            print(f"DIFFERENT {name}: {diff}")
    print(f"{same} of {len(old)} results byte-identical (provenance versions{', ' + ', '.join(drop) if drop else ''} left out)")
    return 0 if same == len(old) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the results here")
    ap.add_argument("--work-limit", type=float, default=3.0, help="CP-SAT deterministic seconds per run (default 3)")
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--drop", action="append", default=[], help="a provenance key to leave out of --compare")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare, args.drop)
    results = run(args.work_limit)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
