"""Exact placement vs. list schedulers on DOPPLER-shaped graphs (4 identical devices, transfers ~4x compute).

For each generated graph (transformer blocks, FFNN, chained matmuls; about 100-300 ops):
critical-path list scheduling (DOPPLER's teacher), HEFT, the local-search pre-scheduler, the
product (``incsched.solve(problem, "inc-ilp")``: local search, per-segment CP-SAT between cut
nodes, the hinted full model) and cold CP-SAT (the full model, no hint, same time). Every makespan
is the simulator's (``ordered`` mode: executed in the solved order); ``fcfs s`` re-executes each
assignment first-come-first-served. ``bound s`` is the best lower bound proven for the graph by
any run (inc-ilp's segment relaxation, CP-SAT's bound, or max(critical path, work / devices)), and
``gap`` is measured against it. Issue target: inc-ilp at least 25% shorter than critical-path list.

    .venv/bin/python benchmarks/placement_exact.py --time-limit 60 --workers 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time

from incsched.baselines.placement import critical_path_list, heft
from incsched.baselines.placement_local import local_search
from incsched.evaluate.simulate import simulate
from incsched.generators import bandwidth_for_comm_ratio, chained_matmul, ffnn, transformer_block
from incsched.inc_ilp.placement import solve_cpsat
from incsched.problems import Placement, PlacementProblem
from incsched.solve import solve
from solvers import SolverSettings

GRAPHS = {
    "transformer_block": lambda: transformer_block(),
    "transformer_2blocks": lambda: transformer_block(n_blocks=2),
    "transformer_2b_ffn12": lambda: transformer_block(n_blocks=2, ffn_tiles=12),
    "ffnn": lambda: ffnn(),
    "ffnn_6x3": lambda: ffnn(n_layers=6, tiles=3),
    "chained_matmul": lambda: chained_matmul(),
    "chained_matmul_6x3": lambda: chained_matmul(n_matrices=6, tiles=3),
}

METHODS = ("critical_path_list", "heft", "local_search", "inc-ilp", "cpsat_cold")


def placement_problem(graph, n_devices: int, comm_ratio: float) -> PlacementProblem:
    bandwidth = bandwidth_for_comm_ratio(graph, comm_ratio, "cpu")
    return PlacementProblem.identical(graph, n_devices, kind="cpu", bandwidth=bandwidth)


def run_graph(name: str, problem: PlacementProblem, args, methods) -> list[dict]:
    bounds = [problem.lower_bound_ticks()]
    rows = []

    def row(method, pl, seconds, status="", bound=None):
        s = simulate(problem, pl, "ordered")
        fcfs = simulate(problem, pl, "fcfs")
        if bound is not None:
            bounds.append(int(bound))
        rows.append({
            "graph": name, "ops": problem.n_nodes, "method": method, "status": status,
            "makespan_s": s.makespan_seconds, "makespan_ticks": s.makespan,
            "seconds": seconds, "fcfs_s": fcfs.makespan_seconds,
        })

    heuristics = {"critical_path_list": critical_path_list, "heft": heft, "local_search": local_search}
    for method in methods:
        t = time.perf_counter()
        if method in heuristics:
            row(method, heuristics[method](problem), time.perf_counter() - t)
        elif method == "inc-ilp":
            r = solve(problem, "inc-ilp", time_limit=args.time_limit, deterministic=args.workers == 0, workers=max(args.workers, 1))
            pl = Placement(r.device, tuple(tuple(o) for o in r.order), start=r.start)
            row(method, pl, time.perf_counter() - t, r.status, r.lower_bound)
            rows[-1]["bound_source"] = r.bound_source
        else:
            settings = SolverSettings(time_limit=args.time_limit, deterministic=args.workers == 0, workers=max(args.workers, 1))
            out = solve_cpsat(problem, settings)
            if out.assignment is None:
                rows.append({"graph": name, "ops": problem.n_nodes, "method": method, "status": out.status})
                continue
            row(method, Placement(out.assignment, out.info["order"], start=out.start), time.perf_counter() - t, out.status, out.bound)
    best_bound = max(bounds)
    cpl = next((r["makespan_ticks"] for r in rows if r["method"] == "critical_path_list"), None)
    for r in rows:
        if "makespan_ticks" not in r:
            continue
        r["lower_bound_s"] = best_bound * problem.time_unit
        r["gap"] = (r["makespan_ticks"] - best_bound) / r["makespan_ticks"]
        r["shorter_than_cpl"] = None if cpl is None else 1 - r["makespan_ticks"] / cpl
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per inc-ilp / cold CP-SAT run")
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT workers (wall clock); 0: deterministic, one worker")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--comm-ratio", type=float, default=4.0, help="mean transfer time / mean op time")
    ap.add_argument("--graphs", nargs="*", default=list(GRAPHS), choices=list(GRAPHS))
    ap.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    rows = []
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# {platform.node()} {os.cpu_count()} cores, load {load:.2f}; {' '.join(sys.argv)}")
    mode = "deterministic, 1 worker" if args.workers == 0 else f"{args.workers} workers, wall clock"
    print(f"{args.devices} identical devices, transfers {args.comm_ratio}x compute, CP-SAT {args.time_limit:g} s ({mode})")
    print(f"{'method':<19}{'graph':<22}{'ops':>5} {'status':<15}{'makespan s':>11}{'bound s':>10}{'gap':>7}{'s':>7}{'fcfs s':>9}{'vs cpl':>8}")
    for name in args.graphs:
        problem = placement_problem(GRAPHS[name](), args.devices, args.comm_ratio)
        for r in run_graph(name, problem, args, args.methods):
            rows.append(r)
            if "makespan_s" not in r:
                print(f"{r['method']:<19}{r['graph']:<22}{r['ops']:>5} {r['status']:<15}  (no solution)")
                continue
            shorter = "" if r["shorter_than_cpl"] is None else f"{r['shorter_than_cpl']:>8.1%}"
            print(
                f"{r['method']:<19}{r['graph']:<22}{r['ops']:>5} {r['status']:<15}{r['makespan_s']:>11.3f}"
                f"{r['lower_bound_s']:>10.3f}{r['gap']:>7.1%}{r['seconds']:>7.1f}{r['fcfs_s']:>9.3f}{shorter}",
                flush=True,
            )
    print("average over graphs (% shorter than critical-path list, gap to the best bound):")
    for method in args.methods:
        got = [r for r in rows if r["method"] == method and r.get("shorter_than_cpl") is not None]
        if got:
            shorter = sum(r["shorter_than_cpl"] for r in got) / len(got)
            gap = sum(r["gap"] for r in got) / len(got)
            print(f"  {method:<19}{shorter:>7.1%} shorter, gap {gap:.1%} ({len(got)} graphs)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
