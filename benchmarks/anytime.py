"""Benchmark: issue 16's "Done when", side by side in one run, as a thin caller of `solve()`.

Every number comes from `incsched.front_door.solve` (or the `incsched solve` CLI); nothing here schedules.
Each part prints the exact command line, the machine (CPU model, cores, load average before and
after), the library versions and markdown tables; ``--json OUT`` writes the same rows. Wall ratio is
``wall / (1.05 * time_limit + 1)``: above 1 the run broke the user's clock.

(a) Placement: generated dataflow graphs of 84-324 ops (chained matmul, FFNN, 1- and 2-block
    transformers), transfers about 4x compute, 4 and 8 identical devices (14 instances). Per
    instance, in one process: inc-ilp (2 workers, or ``--deterministic``), the learned policy
    ``rl`` alone, ``heft``, ``critical_path_list`` and ``local_search``; makespans re-executed by the
    simulator in their solved order, gains over critical_path_list, inc-ilp's certified gap and
    bound, whether inc-ilp is at most every other method ("never worse"). Targets: never worse on
    any instance; mean certified gap <= 10% on 4 devices, <= 20% on 8 devices.

        python benchmarks/anytime.py placement --time-limit 60 --json placement.json
        python benchmarks/anytime.py placement --time-limit 60 --deterministic      # 1 worker

(b) Stage, shipped graphs (data/graphs, peer objective alpha=100, K in {2, 4, 8}): inc-ilp against
    the cold full model ``ilp``, interleaved instance by instance (which runs first alternates).
    Targets: inc-ilp optimal on all; cold ilp's total wall / inc-ilp's total wall >= 5.

        python benchmarks/anytime.py stage-shipped --time-limit 120 --json stage.json

(c) ICML'24 peer graphs (K=10, alpha=100), read in place from ../shared/benchmarks/icml24
    (skipped when absent). Targets, by letter: (a) rand_graph_1000_1 in 10 s, objective <=
    11,343,444 (the peer's own CP-SAT model reaches 11,343,865 in 120 s); (b) issue 5's six
    1000-node files in 60 s, gap <= 0.02% (not a target of issue 16; off by default); (c) the
    twelve 5000- and 10000-node files in 120 s, gap <= 0.1%. This replaces the former
    benchmarks/icml24_inc_ilp.py (same targets, same file list; names filter the targets' files).

        python benchmarks/anytime.py icml24                           # targets a and c (~25 min)
        python benchmarks/anytime.py icml24 --targets a b c
        python benchmarks/anytime.py icml24 rand_graph_5000_1 rand_graph_10000_1 --targets c   # a subset

(d) Reproducibility: the same deterministic, work-bounded run (default resnet50 K=4 and a
    1000-node `icml24_like` graph K=10, work_limit 5 deterministic seconds each), each run in its
    own subprocess: twice, under ``taskset -c 0``, and with every core busy (one busy-loop process
    per core). ``json.dumps(result.to_json(timing=False), sort_keys=True)`` must be byte-identical.

        python benchmarks/anytime.py reproduce --json reproduce.json
        python benchmarks/anytime.py reproduce --cases resnet50_k4 icml24_like_1000 ffnn_d4 --work-limit 5

(e) The clock: limits 1, 5, 10 s in each mode (deterministic; 2 workers) on a large stage problem
    (rand_graph_10000_1 K=10 from ../shared, else `icml24_like(10000)`) and a large placement
    problem (chained matmul, 3x3 tiles, 324 ops, 8 devices): wall from process start around the CLI
    ``incsched solve ... --time-limit T`` (a subprocess), and in-process around `solve()`.
    Target: every ratio <= 1.

        python benchmarks/anytime.py clock --json clock.json

Everything at once (about an hour and a half at the defaults on 2 cores):

    python benchmarks/anytime.py all --json all.json

Notes. The machine's load moves the wall-clock figures (b, c, e); the parallel modes are never
reproducible. inc-ilp's portfolio loads the learned policy only when ``time_limit >= 8`` s
(`incsched.Tuning.policy_min_seconds`); the first load in a process imports torch
(2-3 s), counted in that run's wall time. (a)-(c) first warm the process up (OR-Tools and the policy
imported by one untimed tiny solve; ``--cold`` skips it); (e) never does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from incsched.evaluate.simulate import simulate  # noqa: E402
from incsched.formats import load_graph, save_graph  # noqa: E402
from incsched.generators import (  # noqa: E402
    bandwidth_for_comm_ratio,
    chained_matmul,
    ffnn,
    icml24_like,
    transformer_block,
)
from incsched.problems import PlacementProblem, StageProblem  # noqa: E402
from incsched.problems import Placement  # noqa: E402
from incsched.result import library_versions  # noqa: E402
from incsched.front_door import solve  # noqa: E402

ICML = REPO.parent / "shared" / "benchmarks" / "icml24"
SHIPPED = REPO / "data" / "graphs"

#: (a) DOPPLER-shaped graphs, 84-324 ops (the issue's were 76-367).
PLACEMENT_GRAPHS = {
    "chained_matmul_6": lambda: chained_matmul(n_matrices=6),  # 84 ops
    "chained_matmul": lambda: chained_matmul(),  # 116
    "chained_matmul_3x3": lambda: chained_matmul(tiles=3),  # 324
    "ffnn_6x3": lambda: ffnn(n_layers=6, tiles=3),  # 93
    "ffnn": lambda: ffnn(),  # 196
    "transformer_block": lambda: transformer_block(),  # 103
    "transformer_2blocks": lambda: transformer_block(n_blocks=2),  # 205
}
#: (a) The methods run on every instance, inc-ilp first; the reference for gains is critical_path_list.
PLACEMENT_METHODS = ("inc-ilp", "rl", "heft", "critical_path_list", "local_search")
REFERENCE = "critical_path_list"
#: (a) Mean certified gap targets by device count.
GAP_TARGETS = {4: 0.10, 8: 0.20}

_ICML_1000 = [f"rand_graph_1000_{i}" for i in (1, 2, 3)] + [f"rand_graph_sparse_1000_{i}" for i in (1, 2, 3)]
_ICML_LARGE = [f"rand_graph_{kind}{n}_{i}" for n in (5000, 10000) for kind in ("", "sparse_") for i in (1, 2, 3)]
#: (c) targets: files, time limit, test on a result, the test in words.
ICML_TARGETS = {
    "a": (["rand_graph_1000_1"], 10.0, lambda r: r.objective is not None and r.objective <= 11_343_444, "objective <= 11,343,444"),
    "b": (_ICML_1000, 60.0, lambda r: r.gap is not None and r.gap <= 0.0002, "gap <= 0.02%"),
    "c": (_ICML_LARGE, 120.0, lambda r: r.gap is not None and r.gap <= 0.001, "gap <= 0.1%"),
}


# ----------------------------------------------------------------------------------------- helpers


def wall_ratio(wall: float, limit: float) -> float:
    """The clock contract's measure: at most 1 when ``wall <= 1.05 * limit + 1``."""
    return wall / (1.05 * limit + 1.0)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    out = dict(library_versions())
    for dist in ("torch", "torch_geometric", "pulp"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


def header(part: str) -> dict:
    """Print and return the run's context: command, machine, load, versions."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info = {
        "part": part,
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": affinity,
        "load_before": load_average(),
        "versions": versions(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    print(f"## {part}\n")
    print(f"Command: `{info['command']}`  ")
    print(f"Machine: {info['cpu']}, {info['cores']} cores ({affinity} usable), {platform.system()} {platform.release()}; "
          f"load average before {info['load_before']}  ")
    print("Versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()) + "\n", flush=True)
    return info


def footer(info: dict) -> None:
    info["load_after"] = load_average()
    print(f"\nLoad average after: {info['load_after']}\n", flush=True)


def warm_up(args) -> float:
    """One untimed tiny solve per problem kind (imports OR-Tools, loads the learned policy)."""
    if getattr(args, "cold", False):
        return 0.0
    started = time.perf_counter()
    g = chained_matmul(n_matrices=2, tiles=1)
    p = PlacementProblem.identical(g, 2, bandwidth=bandwidth_for_comm_ratio(g, 4.0))
    solve(p, "rl", time_limit=30)
    solve(p, "inc-ilp", time_limit=10, deterministic=False, workers=2)
    solve(StageProblem.peer(load_graph(SHIPPED / "resnet18.json.gz"), 2), "inc-ilp", time_limit=10)
    seconds = time.perf_counter() - started
    print(f"(warm-up, untimed: {seconds:.1f} s)\n", flush=True)
    return seconds


def timed_solve(problem, method: str, *, progress: bool = False, **kwargs):
    """`solve()` and its wall seconds; with ``progress``, the reports it made (elapsed, objective, bound)."""
    seen: list = []
    if progress:
        kwargs["on_progress"] = lambda p: seen.append((round(p.elapsed, 3), p.phase, _num(p.objective), _num(p.lower_bound)))
    started = time.perf_counter()
    result = solve(problem, method, **kwargs)
    return result, time.perf_counter() - started, seen


def _num(x):
    """Exact objective for JSON: ints stay ints, Fractions become floats (rows only, not checks)."""
    if x is None or isinstance(x, int):
        return x
    return float(x)


def mode_kwargs(args) -> dict:
    if args.deterministic:
        return {"deterministic": True, "workers": 1, **({"work_limit": args.work_limit} if args.work_limit else {})}
    return {"deterministic": False, "workers": args.workers, **({"work_limit": args.work_limit} if args.work_limit else {})}


def mode_words(args) -> str:
    words = "deterministic (1 worker)" if args.deterministic else f"parallel ({args.workers} workers, not reproducible)"
    return words + (f", work_limit {args.work_limit:g}" if args.work_limit else "")


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def write_json(path: str | None, data) -> None:
    if path:
        Path(path).write_text(json.dumps(data, indent=1, default=str))
        print(f"JSON written to {path}")


# ------------------------------------------------------------------------------------- (a) placement


def placement_problem(name: str, n_devices: int, comm_ratio: float):
    g = PLACEMENT_GRAPHS[name]()
    return PlacementProblem.identical(g, n_devices, bandwidth=bandwidth_for_comm_ratio(g, comm_ratio))


def run_placement(args) -> dict:
    info = header("(a) placement: inc-ilp vs the learned policy and the baselines")
    info["warm_up_s"] = warm_up(args)
    print(f"time_limit {args.time_limit:g} s for every method; inc-ilp {mode_words(args)}; transfers {args.comm_ratio:g}x compute; "
          "makespans in ms, re-executed in solved order; in brackets: shorter than critical_path_list by\n")
    methods = list(PLACEMENT_METHODS)
    print("| instance | ops | D | " + " | ".join(methods) + " | inc-ilp bound | certified gap | status / stop / best from | never worse | inc-ilp wall s | wall ratio | worst other wall s |")
    print("|---|---:|---:|" + "---:|" * len(methods) + "---:|---:|---|---|---:|---:|---:|", flush=True)
    rows = []
    for D in args.devices:
        for name in args.graphs:
            p = placement_problem(name, D, args.comm_ratio)
            row = {"instance": f"{name} D={D}", "graph": name, "ops": p.n_nodes, "devices": D, "tick_s": p.time_unit, "methods": {}}
            for method in methods:
                kw = mode_kwargs(args) if method == "inc-ilp" else {"deterministic": args.deterministic, "workers": args.workers}
                r, wall, seen = timed_solve(p, method, progress=args.progress, time_limit=args.time_limit, seed=args.seed, **kw)
                rerun = None
                if r.device is not None:  # the makespan re-executed by the simulator in the solved order
                    rerun = int(simulate(p, Placement(r.device, tuple(tuple(o) for o in r.order)), "ordered").makespan)
                row["methods"][method] = {
                    "status": r.status, "stop_reason": r.stop_reason, "objective": _num(r.objective), "simulated": rerun,
                    "lower_bound": _num(r.lower_bound), "gap": r.gap, "wall_s": wall, "wall_ratio": wall_ratio(wall, args.time_limit),
                    "best_from": r.provenance.get("best_from"), "bound_source": r.bound_source, "progress": seen,
                }
            m = row["methods"]
            ref = m[REFERENCE]["simulated"]
            for method in methods:
                v = m[method]["simulated"]
                m[method]["gain_vs_cpl"] = None if v is None or not ref else (ref - v) / ref
            inc = m["inc-ilp"]
            others = [m[k]["simulated"] for k in methods if k != "inc-ilp" and m[k]["simulated"] is not None]
            row["never_worse"] = inc["simulated"] is not None and all(inc["simulated"] <= v for v in others)
            row["worse_than"] = [k for k in methods if k != "inc-ilp" and m[k]["simulated"] is not None
                                 and (inc["simulated"] is None or inc["simulated"] > m[k]["simulated"])]
            row["simulator_agrees"] = all(m[k]["simulated"] == m[k]["objective"] for k in methods)
            rows.append(row)
            ms = lambda ticks: "-" if ticks is None else f"{ticks * p.time_unit * 1e3:.2f}"  # noqa: E731
            cells = [f"{ms(m[k]['simulated'])} ({pct(m[k]['gain_vs_cpl'])})" for k in methods]
            worst_other = max(m[k]["wall_s"] for k in methods if k != "inc-ilp")
            flag = "yes" if row["never_worse"] else "NO: worse than " + ", ".join(row["worse_than"])
            print(f"| {row['instance']} | {p.n_nodes} | {D} | " + " | ".join(cells)
                  + f" | {ms(inc['lower_bound'])} | {pct(inc['gap'])} | {inc['status']} / {inc['stop_reason']} / {inc['best_from']} | {flag}"
                  + f" | {inc['wall_s']:.1f} | {inc['wall_ratio']:.3f} | {worst_other:.1f} |"
                  + ("" if row["simulator_agrees"] else " (simulator disagrees!)"), flush=True)
    summary = {"instances": len(rows)}
    print("\nSummary:\n")
    for D in sorted(set(args.devices)):
        gaps = [r["methods"]["inc-ilp"]["gap"] for r in rows if r["devices"] == D]
        known = [g for g in gaps if g is not None]
        mean = statistics.mean(known) if known else None
        target = GAP_TARGETS.get(D)
        met = None if mean is None or target is None or len(known) < len(gaps) else mean <= target
        summary[f"mean_gap_d{D}"] = mean
        print(f"- mean certified gap on {D} devices: {pct(mean)} over {len(known)}/{len(gaps)} instances"
              + (f" (target <= {target:.0%}: {'met' if met else 'NOT met'})" if target is not None else ""))
    for method in methods:
        gains = [r["methods"][method]["gain_vs_cpl"] for r in rows if r["methods"][method]["gain_vs_cpl"] is not None]
        if gains:
            summary[f"mean_gain_{method}"] = statistics.mean(gains)
            print(f"- {method}: mean {pct(statistics.mean(gains))} shorter than {REFERENCE}, "
                  f"mean wall {statistics.mean(r['methods'][method]['wall_s'] for r in rows):.2f} s")
    worse = [r["instance"] for r in rows if not r["never_worse"]]
    summary["inc_ilp_worse_count"] = len(worse)
    print(f"- instances where inc-ilp is worse than another method: {len(worse)}/{len(rows)}" + (f" ({', '.join(worse)})" if worse else ""))
    ratios = [(r["methods"][k]["wall_ratio"], r["instance"], k) for r in rows for k in methods]
    if ratios:
        worst = max(ratios)
        summary["worst_wall_ratio"] = worst[0]
        summary["worst_wall_ratio_inc_ilp"] = max(r["methods"]["inc-ilp"]["wall_ratio"] for r in rows)
        print(f"- worst wall ratio: {worst[0]:.3f} ({worst[2]} on {worst[1]}); inc-ilp's worst {summary['worst_wall_ratio_inc_ilp']:.3f}"
              f" (limit: 1.05 x {args.time_limit:g} + 1 = {1.05 * args.time_limit + 1:.1f} s)")
    summary["optimal"] = sum(r["methods"]["inc-ilp"]["status"] == "optimal" for r in rows)
    print(f"- inc-ilp proven optimal on {summary['optimal']}/{len(rows)}")
    footer(info)
    return {**info, "settings": vars_of(args), "rows": rows, "summary": summary}


# --------------------------------------------------------------------------------- (b) stage-shipped


def run_stage_shipped(args) -> dict:
    info = header("(b) stage, shipped graphs: inc-ilp vs cold ilp")
    info["warm_up_s"] = warm_up(args)
    print(f"peer objective (alpha 100); time_limit {args.time_limit:g} s each; {mode_words(args)}; interleaved, the first method alternating\n")
    print("| instance | nodes | K | inc-ilp status / stop | inc-ilp s | ilp status / stop | ilp s | same objective | speed-up | worst wall ratio |")
    print("|---|---:|---:|---|---:|---|---:|---|---:|---:|", flush=True)
    rows, i = [], 0
    for name in args.graphs:
        g = load_graph(SHIPPED / f"{name}.json.gz")
        for K in args.ks:
            p = StageProblem.peer(g, n_stages=K, alpha=100)
            order = ("inc-ilp", "ilp") if i % 2 == 0 else ("ilp", "inc-ilp")
            i += 1
            runs = {}
            for method in order:
                r, wall, seen = timed_solve(p, method, progress=args.progress, time_limit=args.time_limit, seed=args.seed, **mode_kwargs(args))
                runs[method] = {"status": r.status, "stop_reason": r.stop_reason, "objective": _num(r.objective),
                                "lower_bound": _num(r.lower_bound), "gap": r.gap, "wall_s": wall,
                                "wall_ratio": wall_ratio(wall, args.time_limit), "best_from": r.provenance.get("best_from"),
                                "progress": seen, "first": method == order[0]}
            inc, ilp = runs["inc-ilp"], runs["ilp"]
            speedup = ilp["wall_s"] / inc["wall_s"] if inc["wall_s"] > 0 else None
            row = {"instance": f"{name} K={K}", "graph": name, "nodes": g.n_nodes, "K": K, "methods": runs, "speedup": speedup,
                   "same_objective": inc["objective"] == ilp["objective"]}
            rows.append(row)
            sec = lambda run: f"{run['wall_s']:.2f}" if run["status"] == "optimal" else f"{run['wall_s']:.2f} (not proven, gap {pct(run['gap'])})"  # noqa: E731
            lower = "" if ilp["status"] == "optimal" else ">= "
            print(f"| {row['instance']} | {g.n_nodes} | {K} | {inc['status']} / {inc['stop_reason']} | {sec(inc)} | "
                  f"{ilp['status']} / {ilp['stop_reason']} | {sec(ilp)} | {'yes' if row['same_objective'] else 'NO'} | "
                  f"{lower}{speedup:.2f}x | {max(inc['wall_ratio'], ilp['wall_ratio']):.3f} |", flush=True)
    inc_total = sum(r["methods"]["inc-ilp"]["wall_s"] for r in rows)
    ilp_total = sum(r["methods"]["ilp"]["wall_s"] for r in rows)
    n_opt = sum(r["methods"]["inc-ilp"]["status"] == "optimal" for r in rows)
    n_opt_ilp = sum(r["methods"]["ilp"]["status"] == "optimal" for r in rows)
    worst = max((max(r["methods"][k]["wall_ratio"] for k in r["methods"]), r["instance"]) for r in rows)
    summary = {"instances": len(rows), "inc_ilp_optimal": n_opt, "ilp_optimal": n_opt_ilp, "inc_ilp_total_s": inc_total,
               "ilp_total_s": ilp_total, "total_speedup": ilp_total / inc_total if inc_total else None, "worst_wall_ratio": worst[0],
               "objective_mismatches": [r["instance"] for r in rows if not r["same_objective"]]}
    print("\nSummary:\n")
    print(f"- inc-ilp optimal on {n_opt}/{len(rows)} (target: all); cold ilp optimal on {n_opt_ilp}/{len(rows)}")
    print(f"- total wall: inc-ilp {inc_total:.1f} s, cold ilp {ilp_total:.1f} s: speed-up {summary['total_speedup']:.2f}x "
          f"(target >= 5x: {'met' if summary['total_speedup'] >= 5 and n_opt == len(rows) else 'NOT met'})"
          + ("" if n_opt_ilp == len(rows) else "; cold ilp's unproven runs count their full wall, so the ratio is a lower bound"))
    speedups = sorted(r["speedup"] for r in rows if r["speedup"])
    if speedups:
        print(f"- per instance speed-up: min {speedups[0]:.2f}x, median {statistics.median(speedups):.2f}x, max {speedups[-1]:.2f}x")
    print(f"- worst wall ratio: {worst[0]:.3f} ({worst[1]})")
    if summary["objective_mismatches"]:
        print(f"- objectives differ on: {', '.join(summary['objective_mismatches'])} (expected only where one run is unproven)")
    footer(info)
    return {**info, "settings": vars_of(args), "rows": rows, "summary": summary}


# ---------------------------------------------------------------------------------------- (c) icml24


def run_icml24(args) -> dict:
    info = header("(c) ICML'24 peer graphs, K=10, alpha=100")
    if not ICML.is_dir():
        print(f"skipped: {ICML} not found (the peer's files are read in place, never copied)")
        footer(info)
        return {**info, "skipped": str(ICML), "rows": []}
    info["warm_up_s"] = warm_up(args)
    jobs = []
    for key in args.targets:
        files, limit, test, words = ICML_TARGETS[key]
        limit = args.time_limit or limit
        jobs += [(name, limit, key, words, test) for name in files if not args.files or name in args.files]
    print(f"inc-ilp, {mode_words(args)}\n")
    print("| graph | nodes | edges | objective | lower bound | gap | status / stop | wall s | limit | wall ratio | target | met |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---|", flush=True)
    rows = []
    for name, limit, key, words, test in jobs:
        path = ICML / f"{name}.gml"
        if not path.is_file():
            print(f"| {name} | - | - | - | - | - | missing | - | {limit:g} | - | ({key}) {words} | - |", flush=True)
            continue
        g = load_graph(path)
        p = StageProblem.peer(g, n_stages=10, alpha=100)
        r, wall, seen = timed_solve(p, args.method, progress=args.progress, time_limit=limit, seed=args.seed, **mode_kwargs(args))
        met = test(r)
        row = {"graph": name, "nodes": g.n_nodes, "edges": g.n_edges, "target": key, "target_words": words, "time_limit": limit,
               "status": r.status, "stop_reason": r.stop_reason, "objective": _num(r.objective), "lower_bound": _num(r.lower_bound),
               "gap": r.gap, "wall_s": wall, "wall_ratio": wall_ratio(wall, limit), "met": met,
               "best_from": r.provenance.get("best_from"), "progress": seen}
        rows.append(row)
        obj = "-" if r.objective is None else f"{r.objective:,}"
        lb = "-" if r.lower_bound is None else f"{r.lower_bound:,}"
        print(f"| {name} | {g.n_nodes} | {g.n_edges} | {obj} | {lb} | {'-' if r.gap is None else f'{100 * r.gap:.4f}%'} | "
              f"{r.status} / {r.stop_reason} | {wall:.1f} | {limit:g} | {row['wall_ratio']:.3f} | ({key}) {words} | {'yes' if met else 'NO'} |",
              flush=True)
    summary = {}
    if rows:
        for key in args.targets:
            mine = [r for r in rows if r["target"] == key]
            if mine:
                summary[f"target_{key}_met"] = sum(r["met"] for r in mine)
                summary[f"target_{key}_of"] = len(mine)
        worst = max((r["wall_ratio"], r["graph"]) for r in rows)
        summary["worst_wall_ratio"] = worst[0]
        print("\nSummary:\n")
        for key in args.targets:
            if f"target_{key}_of" in summary:
                limit = args.time_limit or ICML_TARGETS[key][1]
                print(f"- ({key}) {ICML_TARGETS[key][3]} within {limit:g} s: met on {summary[f'target_{key}_met']}/{summary[f'target_{key}_of']}")
        print(f"- worst wall ratio: {worst[0]:.3f} ({worst[1]})")
    footer(info)
    return {**info, "settings": vars_of(args), "rows": rows, "summary": summary}


# ------------------------------------------------------------------------------------- (d) reproduce


def repro_problem(case: str):
    """The problems of (d), built the same way in every subprocess."""
    if case == "resnet50_k4":
        return StageProblem.peer(load_graph(SHIPPED / "resnet50.json.gz"), n_stages=4, alpha=100)
    if case == "icml24_like_1000":
        return StageProblem.peer(icml24_like(1000, seed=0), n_stages=10, alpha=100)
    if case == "ffnn_d4":
        g = ffnn()
        return PlacementProblem.identical(g, 4, bandwidth=bandwidth_for_comm_ratio(g, 4.0))
    raise SystemExit(f"unknown case {case!r}")


REPRO_CASES = ("resnet50_k4", "icml24_like_1000", "ffnn_d4")


def run_one(args) -> int:
    """Internal (d): one deterministic run in this process; one JSON line on stdout."""
    p = repro_problem(args.case)
    r, wall, _ = timed_solve(p, "inc-ilp", time_limit=args.time_limit, work_limit=args.work_limit, seed=args.seed,
                             deterministic=True, workers=1)
    dump = json.dumps(r.to_json(timing=False), sort_keys=True)
    print(json.dumps({"dump": dump, "wall_s": wall, "status": r.status, "stop_reason": r.stop_reason,
                      "reproducible": r.reproducible, "objective": _num(r.objective), "gap": r.gap,
                      "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}))
    return 0


def _first_difference(a: dict, b: dict, path: str = "") -> str:
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if x != y:
            if isinstance(x, dict) and isinstance(y, dict):
                return _first_difference(x, y, f"{path}{key}.")
            return f"{path}{key}: {str(x)[:80]} != {str(y)[:80]}"
    return ""


def run_reproduce(args) -> dict:
    info = header("(d) reproducibility: deterministic, work-bounded runs, each in its own process")
    taskset = shutil.which("taskset")
    conditions = [("run 1", [], False), ("run 2", [], False)]
    conditions.append(("taskset -c 0", [taskset, "-c", "0"], False) if taskset else ("taskset -c 0 (taskset not found)", None, False))
    conditions.append((f"{os.cpu_count()} cores busy", [], True))
    print(f"inc-ilp, deterministic, work_limit {args.work_limit:g}, time_limit {args.time_limit:g} (the work budget must end each run); "
          "sha256 of json.dumps(result.to_json(timing=False), sort_keys=True)\n")
    print("| case | condition | status / stop | reproducible | objective | gap | wall s | sha256 (12) | identical to run 1 |")
    print("|---|---|---|---|---:|---:|---:|---|---|", flush=True)
    rows = []
    for case in args.cases:
        first = None
        for label, prefix, busy in conditions:
            if prefix is None:
                print(f"| {case} | {label} | - | - | - | - | - | - | skipped |", flush=True)
                continue
            cmd = [*prefix, sys.executable, str(Path(__file__).resolve()), "_one", "--case", case, "--work-limit", repr(args.work_limit),
                   "--time-limit", repr(args.time_limit), "--seed", str(args.seed)]
            hogs = []
            if busy:
                hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
            try:
                started = time.perf_counter()
                out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
                outer = time.perf_counter() - started
            finally:
                for h in hogs:  # only the processes started here, by their own handles
                    h.kill()
                    h.wait()
            if out.returncode != 0:
                print(f"| {case} | {label} | failed (exit {out.returncode}) | - | - | - | {outer:.1f} | - | - |", flush=True)
                rows.append({"case": case, "condition": label, "failed": out.returncode, "stderr": out.stderr[-2000:]})
                sys.stderr.write(out.stderr[-2000:])
                continue
            one = json.loads(out.stdout.strip().splitlines()[-1])
            digest = hashlib.sha256(one["dump"].encode()).hexdigest()
            if first is None:
                first = one
            same = one["dump"] == first["dump"]
            diff = "" if same else _first_difference(json.loads(first["dump"]), json.loads(one["dump"]))
            rows.append({"case": case, "condition": label, "sha256": digest, "identical": same, "difference": diff,
                         "process_wall_s": outer, **{k: v for k, v in one.items() if k != "dump"}})
            print(f"| {case} | {label} | {one['status']} / {one['stop_reason']} | {one['reproducible']} | {one['objective']} | "
                  f"{pct(one['gap'])} | {one['wall_s']:.1f} | {digest[:12]} | {'yes' if same else 'NO: ' + diff} |", flush=True)
    ok = [r for r in rows if "identical" in r]
    summary = {"runs": len(ok), "identical": sum(r["identical"] for r in ok), "failed": len(rows) - len(ok),
               "all_reproducible_flag": all(r["reproducible"] for r in ok)}
    print(f"\nSummary: {summary['identical']}/{summary['runs']} runs byte-identical to their case's first run"
          + (f"; {summary['failed']} failed" if summary["failed"] else "")
          + ("" if summary["all_reproducible_flag"] else "; some results say reproducible=False (the work budget did not end them?)"))
    footer(info)
    return {**info, "settings": vars_of(args), "rows": rows, "summary": summary}


# ----------------------------------------------------------------------------------------- (e) clock


def clock_problems(args, tmp: Path) -> list[tuple[str, object, list[str]]]:
    """(label, problem, CLI arguments after the graph file) for the large stage and placement problems."""
    out = []
    if "stage" in args.problems:
        path = ICML / "rand_graph_10000_1.gml"
        if path.is_file():
            label = "rand_graph_10000_1 K=10"
        else:
            path = tmp / "icml24_like_10000.json.gz"
            save_graph(icml24_like(10000, seed=0), path)
            label = "icml24_like(10000) K=10"
        out.append((label, StageProblem.peer(load_graph(path), n_stages=10, alpha=100), [str(path), "--stages", "10", "--alpha", "100"]))
    if "placement" in args.problems:
        g = chained_matmul(tiles=3)
        bw = bandwidth_for_comm_ratio(g, 4.0)
        path = tmp / "chained_matmul_3x3.json.gz"
        save_graph(g, path)
        p = PlacementProblem.identical(load_graph(path), 8, bandwidth=bw)
        out.append((f"chained_matmul 3x3 tiles ({g.n_nodes} ops) D=8", p, [str(path), "--devices", "8", "--bandwidth", repr(bw)]))
    return out


def cli_command() -> list[str]:
    script = Path(sys.executable).parent / "incsched"
    return [str(script)] if script.is_file() else [sys.executable, "-c", "import sys; from incsched.cli import main; sys.exit(main())"]


def run_clock(args) -> dict:
    info = header("(e) the clock: wall seconds against time_limit, CLI (from process start) and API")
    print(f"limits {', '.join(f'{t:g}' for t in args.limits)} s; modes {', '.join(args.modes)}; no warm-up\n")
    print("| problem | mode | limit s | via | status / stop | objective | gap | wall s | wall ratio |")
    print("|---|---|---:|---|---|---:|---:|---:|---:|", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for label, problem, cli_args in clock_problems(args, tmp):
            for T in args.limits:
                for mode in args.modes:
                    det = mode == "deterministic"
                    for via in args.via:
                        if via == "cli":
                            out_json = tmp / "result.json"
                            cmd = [*cli_command(), "solve", *cli_args, "--time-limit", repr(float(T)), "--seed", str(args.seed),
                                   "--quiet", "--json", str(out_json)] + ([] if det else ["--workers", str(args.workers), "--no-deterministic"])
                            started = time.perf_counter()
                            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
                            wall = time.perf_counter() - started
                            if proc.returncode not in (0, 3) or not out_json.is_file():
                                status, stop, objective, gap_ = f"exit {proc.returncode}", "-", None, None
                                sys.stderr.write(proc.stderr[-2000:])
                            else:
                                data = json.loads(out_json.read_text())
                                status, stop, objective, gap_ = data["status"], data["stop_reason"], data["objective"], data["gap"]
                                out_json.unlink()
                        else:
                            r, wall, _ = timed_solve(problem, "inc-ilp", time_limit=float(T), seed=args.seed, deterministic=det,
                                                     workers=1 if det else args.workers)
                            status, stop, objective, gap_ = r.status, r.stop_reason, _num(r.objective), r.gap
                        row = {"problem": label, "mode": mode, "time_limit": T, "via": via, "status": status, "stop_reason": stop,
                               "objective": objective, "gap": gap_, "wall_s": wall, "wall_ratio": wall_ratio(wall, T)}
                        rows.append(row)
                        obj = "-" if objective is None else f"{objective:,}" if isinstance(objective, int) else f"{objective:,.6g}"
                        print(f"| {label} | {mode} | {T:g} | {via} | {status} / {stop} | {obj} | {pct(gap_)} | {wall:.2f} | "
                              f"{row['wall_ratio']:.3f}{' OVER' if row['wall_ratio'] > 1 else ''} |", flush=True)
    summary = {}
    if rows:
        worst = max(rows, key=lambda r: r["wall_ratio"])
        summary = {"runs": len(rows), "worst_wall_ratio": worst["wall_ratio"], "over": sum(r["wall_ratio"] > 1 for r in rows)}
        print(f"\nSummary: worst wall ratio {worst['wall_ratio']:.3f} ({worst['problem']}, {worst['mode']}, {worst['time_limit']:g} s, "
              f"{worst['via']}); {summary['over']}/{len(rows)} runs over 1.05 x limit + 1 s")
    footer(info)
    return {**info, "settings": vars_of(args), "rows": rows, "summary": summary}


# ------------------------------------------------------------------------------------------ the CLI


def vars_of(args) -> dict:
    return {k: v for k, v in vars(args).items() if k != "func"}


def run_all(args) -> dict:
    out = {}
    for part, func in (("placement", run_placement), ("stage-shipped", run_stage_shipped), ("icml24", run_icml24),
                       ("reproduce", run_reproduce), ("clock", run_clock)):
        part_args = build_parser().parse_args([part, *(["--cold"] if args.cold and part not in ("reproduce", "clock") else [])])
        out[part] = func(part_args)
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Each subcommand: --help for its options.")
    sub = ap.add_subparsers(dest="part", required=True)

    def common(p, time_limit: float | None, *, modes: bool = True):
        if time_limit is not None:
            p.add_argument("--time-limit", type=float, default=time_limit, help=f"wall seconds per solve (default {time_limit:g})")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--json", metavar="OUT", help="write the rows and the run's context here")
        if modes:
            p.add_argument("--deterministic", action="store_true", help="1 worker, reproducible search (default: parallel)")
            p.add_argument("--workers", type=int, default=2, help="CP-SAT workers when not deterministic (default 2)")
            p.add_argument("--work-limit", type=float, default=None, help="also a deterministic work budget (CP-SAT deterministic s)")
            p.add_argument("--progress", action="store_true", help="record every progress report (elapsed, objective, bound) in the JSON")
            p.add_argument("--cold", action="store_true", help="no untimed warm-up: the first runs pay OR-Tools' and torch's imports")

    p = sub.add_parser("placement", help="(a) inc-ilp vs rl and the baselines on generated dataflow graphs")
    common(p, 60.0)
    p.add_argument("--graphs", nargs="+", default=list(PLACEMENT_GRAPHS), choices=list(PLACEMENT_GRAPHS))
    p.add_argument("--devices", nargs="+", type=int, default=[4, 8])
    p.add_argument("--comm-ratio", type=float, default=4.0, help="mean transfer time / mean op time (default 4)")
    p.set_defaults(func=run_placement)

    p = sub.add_parser("stage-shipped", help="(b) inc-ilp vs cold ilp on the shipped graphs, K in {2, 4, 8}")
    common(p, 120.0)
    p.add_argument("--graphs", nargs="+", default=sorted(f.name[: -len(".json.gz")] for f in SHIPPED.glob("*.json.gz")))
    p.add_argument("--ks", nargs="+", type=int, default=[2, 4, 8])
    p.set_defaults(func=run_stage_shipped)

    p = sub.add_parser("icml24", help="(c) inc-ilp on the ICML'24 peer's graphs (K=10, alpha=100)")
    common(p, None)
    p.add_argument("--time-limit", type=float, default=None, help="override the targets' limits (10, 60, 120 s)")
    p.add_argument("files", nargs="*", help="file names without .gml: only these of the targets' files")
    p.add_argument("--targets", nargs="+", default=["a", "c"], choices=sorted(ICML_TARGETS), help="default a c (issue 16's)")
    p.add_argument("--method", default="inc-ilp")
    p.set_defaults(func=run_icml24)

    p = sub.add_parser("reproduce", help="(d) byte-identical deterministic runs: twice, taskset -c 0, cores busy")
    common(p, 600.0, modes=False)
    p.add_argument("--cases", nargs="+", default=["resnet50_k4", "icml24_like_1000"], choices=REPRO_CASES)
    p.add_argument("--work-limit", type=float, default=5.0, help="CP-SAT deterministic seconds per run (default 5)")
    p.set_defaults(func=run_reproduce)

    p = sub.add_parser("clock", help="(e) wall time against short limits, CLI and API, both modes")
    common(p, None, modes=False)
    p.add_argument("--limits", nargs="+", type=float, default=[1.0, 5.0, 10.0])
    p.add_argument("--modes", nargs="+", default=["deterministic", "parallel"], choices=["deterministic", "parallel"])
    p.add_argument("--workers", type=int, default=2, help="CP-SAT workers in parallel mode (default 2)")
    p.add_argument("--problems", nargs="+", default=["stage", "placement"], choices=["stage", "placement"])
    p.add_argument("--via", nargs="+", default=["cli", "api"], choices=["cli", "api"])
    p.set_defaults(func=run_clock)

    p = sub.add_parser("all", help="(a)-(e) at their defaults, one after the other")
    p.add_argument("--json", metavar="OUT")
    p.add_argument("--cold", action="store_true")
    p.set_defaults(func=run_all)

    p = sub.add_parser("_one", help=argparse.SUPPRESS)  # internal: one run of (d) in a fresh process
    p.add_argument("--case", required=True, choices=REPRO_CASES)
    p.add_argument("--work-limit", type=float, required=True)
    p.add_argument("--time-limit", type=float, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run_one)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.part == "_one":
        return run_one(args)
    data = args.func(args)
    write_json(getattr(args, "json", None), data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
