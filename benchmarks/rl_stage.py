"""Benchmark: the learned stage pre-scheduler against the heuristics and the exact optimum.

On graphs never seen in training -- the shipped real-model graphs (incsched/data/graphs, K in 2/4/8) and a
held-out generated set (a seed the training config never draws) -- with the peer objective
(alpha * mem_peak + data-carrying edges crossed), it reports for each instance: the policy's greedy
decode; "rl" (`preschedule_sampled`: the policy alone, best of its greedy and 16-64 seeded
samples at temperature 0.5, picked by the evaluator -- no heuristic, no exact step); "rl_min"
(the same with 16 samples, what "rl" draws from 1,000 nodes up); "rl+dp"
(`preschedule`: those candidates re-cut by an exact DP along the policy's own order); DeepSpeed's
contiguous split; the best heuristic; and CP-SAT (hinted with the best of all of them; its proven
bound when not optimal). Then inference time on 1,000- and 10,000-node graphs, as process CPU
seconds (what the machine's load inflates least) and wall seconds, with the load average, and
the first call's time in a fresh process.
Every objective is recomputed by `evaluate_stages`.

    .venv/bin/python benchmarks/rl_stage.py                       # everything
    .venv/bin/python benchmarks/rl_stage.py --skip-heldout --skip-speed --time-limit 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
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
from incsched.policy.sampling import MIN_SAMPLES, default_samples  # noqa: E402
from incsched.policy.stage_policy import (  # noqa: E402
    default_stage_checkpoint,
    graph_tensors,
    load_stage_policy,
    preschedule,
    preschedule_sampled,
)
from incsched.problems.stage import StageProblem  # noqa: E402
from incsched.solvers import SolverSettings  # noqa: E402
from incsched.solvers.cpsat.stage import solve_stage  # noqa: E402


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
    sampled = preschedule_sampled(problem, seed=0, policy=policy)
    t_sampled = time.perf_counter() - t0
    # The fewest samples "rl" ever draws (its count from 1,000 nodes up), to show the quality
    # does not rest on the larger budgets small graphs get.
    rl_min = preschedule_sampled(problem, seed=0, policy=policy, n_samples=MIN_SAMPLES)
    t0 = time.perf_counter()
    recut = preschedule(problem, seed=0, policy=policy)
    t_recut = time.perf_counter() - t0
    contig = contiguous_params(problem)
    name, best_h = best_baseline(problem)
    candidates = {"policy": d.stages, "rl": sampled, "rl_min": rl_min, "rl+dp": recut, "contiguous": contig, "best_heuristic": best_h}
    ev = {k: evaluate_stages(problem, s) for k, s in candidates.items()}
    assert all(e.feasible for e in ev.values()), "every pre-scheduler must return a feasible assignment"
    hint = min(ev, key=lambda k: ev[k].objective)
    hint_stages = candidates[hint]
    out = solve_stage(problem, settings, hint=hint_stages)
    exact = min(ev[hint].objective, evaluate_stages(problem, out.assignment).objective) if out.assignment is not None else ev[hint].objective
    bound = out.bound if out.bound is not None else float("nan")
    return {
        "graph": problem.graph.name,
        "n": problem.graph.n_nodes,
        "K": problem.n_stages,
        "policy": ev["policy"].objective,
        "rl": ev["rl"].objective,
        "rl_min": ev["rl_min"].objective,
        "rl+dp": ev["rl+dp"].objective,
        "contiguous": ev["contiguous"].objective,
        "best_heuristic": ev["best_heuristic"].objective,
        "heuristic_name": name,
        "exact": exact,
        "status": out.status,
        "bound": bound,
        "policy_seconds": t_policy,
        "rl_seconds": t_sampled,
        "rl+dp_seconds": t_recut,
    }


def table(rows: list[dict], title: str) -> None:
    print(f"\n### {title}\n")
    # Ratios hide differences of a few crossed edges next to alpha * mem_peak, so the last columns
    # give rl's objective minus the best heuristic's and the contiguous split's, in objective units.
    print("| graph | n | K | policy / best | rl / best | rl+dp / best | contiguous / best | best heuristic / best | CP-SAT | "
          "rl vs best heuristic | rl - best heuristic | rl - contiguous |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|")
    for r in rows:
        b = r["exact"]
        vs = "better" if r["rl"] < r["best_heuristic"] else ("equal" if r["rl"] == r["best_heuristic"] else "worse")
        print(f"| {r['graph']} | {r['n']} | {r['K']} | {r['policy'] / b:.4f} | {r['rl'] / b:.4f} | {r['rl+dp'] / b:.4f} | "
              f"{r['contiguous'] / b:.4f} | {r['best_heuristic'] / b:.4f} ({r['heuristic_name']}) | {r['status']} | {vs} | "
              f"{r['rl'] - r['best_heuristic']:,.0f} | {r['rl'] - r['contiguous']:,.0f} |")
    proven = [r for r in rows if r["status"] == "optimal"]
    for key in ("policy", "rl", "rl_min", "rl+dp", "contiguous", "best_heuristic"):
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
    print(f"\nbest known proven optimal on {n_opt}/{len(rows)}")
    for key in ("policy", "rl", "rl_min", "rl+dp"):
        worse = [f"{r['graph']} K={r['K']}" for r in rows if r[key] > r["contiguous"]]
        print(f"{key} worse than contiguous on: {worse or 'none'}")
    tally = {w: sum((r["rl"] < r["best_heuristic"], r["rl"] == r["best_heuristic"], r["rl"] > r["best_heuristic"])[i] for r in rows)
             for i, w in enumerate(("better", "equal", "worse"))}
    print(f"rl vs the best heuristic, instance by instance: {tally}")


def _best_time(fn, make_problem, repeats: int) -> tuple[float, float]:
    """Best process-CPU and wall seconds of ``fn(problem)`` over ``repeats`` fresh problems."""
    best_cpu = best_wall = float("inf")
    for _ in range(repeats):
        p = make_problem()  # a fresh graph object: no cached levels / CSR
        c0, t0 = time.process_time(), time.perf_counter()
        fn(p)
        best_cpu = min(best_cpu, time.process_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - t0)
    return best_cpu, best_wall


def cold_start_seconds(checkpoint: str) -> tuple[float, float]:
    """Wall seconds, in a fresh process, of (imports + loading the checkpoint, the first "rl" call
    on a 1,000-node graph); the first call includes importing numba and loading the compiled
    decoder from its cache."""
    code = (
        "import time; t0 = time.perf_counter()\n"
        "import torch; torch.set_num_threads(1)\n"
        "from incsched.generators.random_dag import icml24_like\n"
        "from incsched.policy.stage_policy import load_stage_policy, preschedule_sampled\n"
        "from incsched.problems.stage import StageProblem\n"
        f"policy, _ = load_stage_policy({checkpoint!r})\n"
        "p = StageProblem.peer(icml24_like(1000, seed=1), n_stages=8)\n"
        "t1 = time.perf_counter(); preschedule_sampled(p, seed=0, policy=policy); print(t1 - t0, time.perf_counter() - t1)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=REPO)
    load, first = (float(x) for x in out.stdout.split()[-2:])
    return load, first


def speed(policy, checkpoint: str, sizes=(1000, 10000), repeats: int = 3) -> None:
    load = os.getloadavg()
    print(f"\n### Inference time, best of {repeats} (load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"torch threads {torch.get_num_threads()})\n")
    print("Greedy: features + encoder + decode on a fresh graph object; rl: greedy and `default_samples(n)` samples, "
          "the best picked by the evaluator (what `preschedule_sampled` does); rl+dp: + the exact re-cut. "
          "CPU = process CPU seconds.\n")
    print("| graph | n | edges | K | greedy CPU s | greedy wall s | rl samples | rl CPU s | rl wall s | rl+dp CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    preschedule_sampled(StageProblem.peer(icml24_like(50, seed=1), n_stages=2), policy=policy)  # load the compiled decoder
    for n in sizes:
        for g in (icml24_like(n, seed=1), layered_dag(n, width=8, seed=1)):
            for k in (8, 16):
                def fresh():
                    return StageProblem.peer(g.replace(), n_stages=k)

                g_cpu, g_wall = _best_time(lambda p: policy.decode(p), fresh, repeats)
                rl_cpu, rl_wall = _best_time(lambda p: preschedule_sampled(p, seed=0, policy=policy), fresh, repeats)
                dp_cpu, _ = _best_time(lambda p: preschedule(p, seed=0, policy=policy), fresh, 1)
                print(f"| {g.name} | {g.n_nodes} | {g.n_edges} | {k} | {g_cpu:.3f} | {g_wall:.3f} | "
                      f"{default_samples(g.n_nodes)} | {rl_cpu:.3f} | {rl_wall:.3f} | {dp_cpu:.3f} |")
    load, first = cold_start_seconds(checkpoint)
    print(f"\nfresh process: imports (torch ...; not torch_geometric, which only training imports) and the "
          f"checkpoint {load:.2f} s wall, then the first rl "
          f"call (1,000 nodes, K=8; numba and the compiled decoder's cache load included) {first:.2f} s")


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
    ap.add_argument("--speed-sizes", type=int, nargs="*", default=[1000, 10000])
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    policy, meta = load_stage_policy(args.checkpoint)
    print(f"checkpoint {args.checkpoint}; torch threads 1; CP-SAT {args.workers} worker(s), {args.time_limit:g} s wall per instance")
    settings = SolverSettings(time_limit=args.time_limit, deterministic=False, workers=args.workers)
    if not args.skip_real:
        rows = []
        for path in sorted((REPO / "incsched" / "data" / "graphs").glob("*.json.gz")):
            g = load_graph(path)
            for k in args.ks:
                rows.append(run_instance(policy, StageProblem.peer(g, n_stages=k, alpha=100), settings))
                print(rows[-1], file=sys.stderr, flush=True)
        table(rows, "Shipped real-model graphs (peer objective, alpha=100)")
    if not args.skip_heldout:
        rows = []
        for p in heldout_problems(args.heldout):
            rows.append(run_instance(policy, p, settings))
            print(rows[-1], file=sys.stderr, flush=True)
        table(rows, f"Held-out generated graphs ({len(rows)})")
    if not args.skip_speed:
        speed(policy, args.checkpoint, tuple(args.speed_sizes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
