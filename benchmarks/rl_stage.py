"""Benchmark: the learned stage pre-scheduler against the heuristics and the exact optimum.

On graphs never seen in training -- the shipped real-model graphs (data/graphs, K in 2/4/8) and a
held-out generated set (a seed the training config never draws) -- with the peer objective
(alpha * mem_peak + data-carrying edges crossed), it reports for each instance: the policy alone
(greedy), "rl+dp" (`incsched.policy.stage_policy.preschedule`: best of the greedy and up to 16
seeded sampled decodes, re-cut exactly along the policy's own order),
DeepSpeed's contiguous split, the best heuristic, and CP-SAT (hinted with the best of all of
them; its proven bound when not optimal). Then inference time of the policy on 1,000- and
10,000-node graphs. Every objective is recomputed by `evaluate_stages`.

    .venv/bin/python benchmarks/rl_stage.py                       # everything
    .venv/bin/python benchmarks/rl_stage.py --skip-heldout --skip-speed --time-limit 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from incsched.baselines.stage import best_baseline, contiguous_params  # noqa: E402
from incsched.evaluate.stage import evaluate_stages  # noqa: E402
from incsched.formats import load_graph  # noqa: E402
from incsched.generators.random_dag import icml24_like, layered_dag, respect_like  # noqa: E402
from incsched.policy.checkpoint import default_stage_checkpoint, load_stage_policy  # noqa: E402
from incsched.policy.stage_policy import graph_tensors, preschedule  # noqa: E402
from incsched.problems.stage import StageProblem  # noqa: E402
from solvers import SolverSettings  # noqa: E402
from solvers.cpsat.stage import solve_stage  # noqa: E402


def heldout_problems(n: int, seed: int = 10_007) -> list[StageProblem]:
    """Generated problems from a seed stream the training config does not use (sizes 30..300)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        size = int(rng.integers(30, 301))
        gseed = int(rng.integers(2**31)) + 1
        k = int(rng.choice([2, 4, 8]))
        if i % 3 == 0:
            g = respect_like(size, seed=gseed)
        elif i % 3 == 1:
            g = layered_dag(size, width=int(rng.integers(1, 6)), mean_in_degree=1.5, skip_prob=0.2,
                            param_bytes=(0, 1 << 22), seed=gseed)
        else:
            for attempt in range(20):
                try:
                    g = icml24_like(size, sparse=bool(i % 2), seed=gseed + attempt)
                    break
                except ValueError:
                    continue
        out.append(StageProblem.peer(g, n_stages=k, alpha=100))
    return out


def run_instance(policy, problem: StageProblem, settings: SolverSettings) -> dict:
    gt = graph_tensors(problem)
    t0 = time.perf_counter()
    d = policy.decode(problem, gt=gt)
    t_policy = time.perf_counter() - t0
    t0 = time.perf_counter()
    recut = preschedule(problem, seed=0, policy=policy)
    t_recut = time.perf_counter() - t0
    contig = contiguous_params(problem)
    name, best_h = best_baseline(problem)
    ev = {k: evaluate_stages(problem, s) for k, s in
          {"policy": d.stages, "rl+dp": recut, "contiguous": contig, "best_heuristic": best_h}.items()}
    assert all(e.feasible for e in ev.values()), "every pre-scheduler must return a feasible assignment"
    hint = min(ev, key=lambda k: ev[k].objective)
    hint_stages = {"policy": d.stages, "rl+dp": recut, "contiguous": contig, "best_heuristic": best_h}[hint]
    out = solve_stage(problem, settings, hint=hint_stages)
    exact = min(ev[hint].objective, evaluate_stages(problem, out.assignment).objective) if out.assignment is not None else ev[hint].objective
    bound = out.bound if out.bound is not None else float("nan")
    return {
        "graph": problem.graph.name,
        "n": problem.graph.n_nodes,
        "K": problem.n_stages,
        "policy": ev["policy"].objective,
        "rl+dp": ev["rl+dp"].objective,
        "contiguous": ev["contiguous"].objective,
        "best_heuristic": ev["best_heuristic"].objective,
        "heuristic_name": name,
        "exact": exact,
        "status": out.status,
        "bound": bound,
        "policy_seconds": t_policy,
        "rl+dp_seconds": t_recut,
    }


def table(rows: list[dict], title: str) -> None:
    print(f"\n### {title}\n")
    print("| graph | n | K | policy / best | rl+dp / best | contiguous / best | best heuristic / best | CP-SAT | policy <= contiguous | rl+dp <= contiguous |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|---|")
    for r in rows:
        b = r["exact"]
        print(f"| {r['graph']} | {r['n']} | {r['K']} | {r['policy'] / b:.4f} | {r['rl+dp'] / b:.4f} | {r['contiguous'] / b:.4f} | "
              f"{r['best_heuristic'] / b:.4f} ({r['heuristic_name']}) | {r['status']} | {r['policy'] <= r['contiguous']} | {r['rl+dp'] <= r['contiguous']} |")
    proven = [r for r in rows if r["status"] == "optimal"]
    for key in ("policy", "rl+dp", "contiguous", "best_heuristic"):
        ratios = [r[key] / r["exact"] for r in rows]
        line = f"\nmean {key} / best known: {statistics.mean(ratios):.4f} (max {max(ratios):.4f})"
        if proven:
            pr = [r[key] / r["exact"] for r in proven]
            line += f"; on the {len(proven)} proven optima: mean {statistics.mean(pr):.4f} (max {max(pr):.4f})"
        print(line, end="")
    gaps = [r["exact"] / r["bound"] for r in rows if r["status"] == "feasible" and r["bound"] == r["bound"] and r["bound"] > 0]
    if gaps:
        print(f"\nunproven instances: best known / CP-SAT bound mean {statistics.mean(gaps):.4f} (max {max(gaps):.4f})", end="")
    n_opt = sum(r["status"] == "optimal" for r in rows)
    worse = [f"{r['graph']} K={r['K']}" for r in rows if r["policy"] > r["contiguous"]]
    worse_dp = [f"{r['graph']} K={r['K']}" for r in rows if r["rl+dp"] > r["contiguous"]]
    print(f"\nbest known proven optimal on {n_opt}/{len(rows)}; policy worse than contiguous on: {worse or 'none'}; "
          f"rl+dp worse than contiguous on: {worse_dp or 'none'}")


def speed(policy, sizes=(1000, 10000), repeats: int = 3) -> None:
    print("\n### Inference time (features + encoder + greedy decode; and rl+dp), best of", repeats, "\n")
    print("| graph | n | edges | K | greedy policy s | rl+dp s |")
    print("|---|---:|---:|---:|---:|---:|")
    for n in sizes:
        for g in (icml24_like(n, seed=1), layered_dag(n, width=8, seed=1)):
            for k in (8, 16):
                p = StageProblem.peer(g, n_stages=k)
                best = float("inf")
                for _ in range(repeats):
                    g2 = g.replace()  # a fresh graph object: no cached levels / CSR from the last run
                    p2 = StageProblem.peer(g2, n_stages=k)
                    t0 = time.perf_counter()
                    policy.decode(p2)
                    best = min(best, time.perf_counter() - t0)
                t0 = time.perf_counter()
                preschedule(p, seed=0, policy=policy)
                t_dp = time.perf_counter() - t0
                print(f"| {g.name} | {g.n_nodes} | {g.n_edges} | {k} | {best:.3f} | {t_dp:.3f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default=str(default_stage_checkpoint()))
    ap.add_argument("--ks", type=int, nargs="*", default=[2, 4, 8])
    ap.add_argument("--time-limit", type=float, default=30.0, help="wall seconds per CP-SAT run")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--heldout", type=int, default=24, help="number of held-out generated problems")
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--skip-heldout", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    policy, meta = load_stage_policy(args.checkpoint)
    print(f"checkpoint {args.checkpoint}; torch threads 1; CP-SAT {args.workers} worker(s), {args.time_limit:g} s wall per instance")
    settings = SolverSettings(time_limit=args.time_limit, deterministic=False, workers=args.workers)
    if not args.skip_real:
        rows = []
        for path in sorted((REPO / "data" / "graphs").glob("*.json.gz")):
            g = load_graph(path)
            for k in args.ks:
                rows.append(run_instance(policy, StageProblem.peer(g, n_stages=k, alpha=100), settings))
                print(rows[-1], file=sys.stderr, flush=True)
        table(rows, "Shipped real-model graphs (peer objective, alpha=100)")
    if not args.skip_heldout:
        rows = [run_instance(policy, p, settings) for p in heldout_problems(args.heldout)]
        table(rows, f"Held-out generated graphs ({len(rows)})")
    if not args.skip_speed:
        speed(policy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
