"""Exact placement vs. list schedulers on DOPPLER-shaped graphs (4 identical devices, transfers ~4x compute).

For each generated graph: critical-path list scheduling (DOPPLER's teacher), HEFT, and CP-SAT
hinted with the better of the two and cold (no hint). Every makespan is the simulator's
(``ordered`` mode, i.e. executed in the solved order), and the last column re-executes each
assignment first-come-first-served. Issue target: CP-SAT at least 25% shorter than the
critical-path list scheduler, with its gap to the proven bound.

    .venv/bin/python benchmarks/placement_exact.py --time-limit 45 --workers 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import time

from incsched.baselines.placement import critical_path_list, heft
from incsched.evaluate.simulate import simulate
from incsched.generators import bandwidth_for_comm_ratio, chained_matmul, ffnn, transformer_block
from incsched.problems.placement import Placement, PlacementProblem
from solvers import SolverSettings
from solvers.cpsat.placement import solve_placement

GRAPHS = {
    "transformer_block": lambda: transformer_block(),
    "transformer_2blocks": lambda: transformer_block(n_blocks=2),
    "ffnn": lambda: ffnn(),
    "ffnn_6x3": lambda: ffnn(n_layers=6, tiles=3),
    "chained_matmul": lambda: chained_matmul(),
    "chained_matmul_6x3": lambda: chained_matmul(n_matrices=6, tiles=3),
}


def placement_problem(graph, n_devices: int, comm_ratio: float) -> PlacementProblem:
    bandwidth = bandwidth_for_comm_ratio(graph, comm_ratio, "cpu")
    return PlacementProblem.identical(graph, n_devices, kind="cpu", bandwidth=bandwidth)


def run_graph(name: str, problem: PlacementProblem, settings: SolverSettings, cold: bool) -> list[dict]:
    lb = problem.lower_bound_ticks()
    rows = []

    def row(method, pl, bound, seconds, status=""):
        s = simulate(problem, pl, "ordered")
        fcfs = simulate(problem, pl, "fcfs")
        rows.append({
            "graph": name, "ops": problem.n_nodes, "method": method, "status": status,
            "makespan_s": s.makespan_seconds, "makespan_ticks": s.makespan,
            "lower_bound_s": bound * problem.time_unit, "gap": (s.makespan - bound) / s.makespan,
            "seconds": seconds, "fcfs_s": fcfs.makespan_seconds,
        })
        return s

    t = time.perf_counter()
    cpl = critical_path_list(problem)
    cpl_s = row("critical_path_list", cpl, lb, time.perf_counter() - t)
    t = time.perf_counter()
    hf = heft(problem)
    hf_s = row("heft", hf, lb, time.perf_counter() - t)
    best = cpl if cpl_s.makespan <= hf_s.makespan else hf
    runs = [("cpsat_hinted", best)] + ([("cpsat_cold", None)] if cold else [])
    for method, hint in runs:
        out = solve_placement(problem, settings, hint=hint)
        if out.assignment is None:
            rows.append({"graph": name, "ops": problem.n_nodes, "method": method, "status": out.status})
            continue
        pl = Placement(out.assignment, out.info["order"], start=out.start)
        s = row(method, pl, int(out.bound), out.wall_time, out.status)
        if s.makespan != out.objective:
            logging.warning("%s %s: simulated %d != solver %d ticks", name, method, s.makespan, out.objective)
    for r in rows:
        r["ratio_vs_cpl"] = r["makespan_s"] / rows[0]["makespan_s"] if "makespan_s" in r else None
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=45.0, help="CP-SAT seconds per run (wall clock)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--comm-ratio", type=float, default=4.0, help="mean transfer time / mean op time")
    ap.add_argument("--graphs", nargs="*", default=list(GRAPHS), choices=list(GRAPHS))
    ap.add_argument("--no-cold", action="store_true", help="skip the unhinted CP-SAT run")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    settings = SolverSettings(time_limit=args.time_limit, deterministic=False, workers=args.workers)

    rows = []
    print(f"{args.devices} identical devices, transfers {args.comm_ratio}x compute, CP-SAT {args.time_limit:g} s x {args.workers} workers")
    print(f"{'graph':<20}{'ops':>5} {'method':<19}{'status':<9}{'makespan s':>12}{'bound s':>10}{'gap':>7}{'s':>7}{'vs cpl':>8}{'fcfs s':>9}")
    for name in args.graphs:
        problem = placement_problem(GRAPHS[name](), args.devices, args.comm_ratio)
        for r in run_graph(name, problem, settings, cold=not args.no_cold):
            rows.append(r)
            if "makespan_s" not in r:
                print(f"{r['graph']:<20}{r['ops']:>5} {r['method']:<19}{r['status']:<9}  (no solution)")
                continue
            print(
                f"{r['graph']:<20}{r['ops']:>5} {r['method']:<19}{r['status']:<9}{r['makespan_s']:>12.3f}"
                f"{r['lower_bound_s']:>10.3f}{r['gap']:>7.1%}{r['seconds']:>7.1f}{r['ratio_vs_cpl']:>8.3f}{r['fcfs_s']:>9.3f}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
