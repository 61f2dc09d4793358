"""Old vs new global lower bounds on placement makespans, and the certified gaps they give.

For generated graphs like issue 16's (``generators.dataflow`` chained_matmul, ffnn,
transformer_block with 1-2 blocks; transfers about 4x compute; 4 and 8 identical devices) this
prints, per instance: the old bound (`PlacementProblem.lower_bound_ticks`), the new one
(`incsched.bounds.placement.placement_lower_bound`) with each family's value and compute time, the best
makespan known (the best of the placement baselines, `local_search`, and ``solve(problem, "rl",
time_limit=...)``), and the gaps (UB - LB) / UB with either bound. Upper bounds can be cached in
a JSON file (``--cache``) so the bounds can be re-measured without re-solving.

    .venv/bin/python benchmarks/placement_bounds.py --rl-seconds 20 --cpsat-seconds 10 --cache /tmp/placement_ub.json

``--compare`` prints, per instance, every bound family without and with
`incsched.bounds.placement_flow.flow_bound` (and the CP-SAT window bound each way with
``--cpsat-seconds``), and the certified gaps each gives against the same cached upper bound;
``--graphs doppler`` picks issue 25's shapes, ``--incilp-seconds`` adds inc-ilp's answer to the UB:

    .venv/bin/python benchmarks/placement_bounds.py --graphs doppler --compare --rl-seconds 0 --incilp-seconds 60 \
        --cpsat-seconds 5 --cache /tmp/placement_ub.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from incsched.baselines.placement import critical_path_list, heft  # noqa: E402
from incsched.baselines.placement_local import local_search  # noqa: E402
from incsched.evaluate.simulate import simulate  # noqa: E402
from incsched.generators import bandwidth_for_comm_ratio, chained_matmul, ffnn, transformer_block  # noqa: E402
from incsched.bounds.placement import placement_bound_details  # noqa: E402
from incsched.inc_ilp.exact_bounds import placement_bound_cpsat  # noqa: E402
from incsched.problems.placement import PlacementProblem  # noqa: E402
from incsched.solvers import SolverSettings  # noqa: E402

GRAPHS = {
    "transformer_1b": lambda: transformer_block(),
    "transformer_2b": lambda: transformer_block(n_blocks=2),
    "ffnn_8x4": lambda: ffnn(),
    "ffnn_6x3": lambda: ffnn(n_layers=6, tiles=3),
    "chained_matmul_8x2": lambda: chained_matmul(),
    "chained_matmul_6x3": lambda: chained_matmul(n_matrices=6, tiles=3),
    # Issue 25's DOPPLER shapes: jittered blocks (no two segments alike), wide MLPs, 180-400 ops.
    "transformer_2b_j1000": lambda: transformer_block(n_blocks=2, jitter=0.1, seed=1000),
    "transformer_3b_j1001": lambda: transformer_block(n_blocks=3, jitter=0.1, seed=1001),
    "transformer_2b_ffn12": lambda: transformer_block(n_blocks=2, ffn_tiles=12),
}

#: ``--graphs doppler``: the issue-25 set.
DOPPLER = ["transformer_2b_j1000", "transformer_3b_j1001", "transformer_2b_ffn12", "ffnn_8x4", "chained_matmul_6x3"]


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def upper_bound(p: PlacementProblem, rl_seconds: float, incilp_seconds: float = 0.0) -> tuple[int, str]:
    best, who = None, ""
    for name, fn in (("critical_path_list", critical_path_list), ("heft", heft), ("local_search", local_search)):
        m = simulate(p, fn(p), "ordered").makespan
        if best is None or m < best:
            best, who = int(m), name
    if rl_seconds > 0:
        from incsched.front_door import solve

        res = solve(p, "rl", time_limit=rl_seconds)
        if res.objective is not None and int(res.objective) < best:
            best, who = int(res.objective), "rl"
    if incilp_seconds > 0:
        from incsched.front_door import solve

        res = solve(p, "inc-ilp", time_limit=incilp_seconds, workers=2)
        if res.objective is not None and int(res.objective) < best:
            best, who = int(res.objective), "inc-ilp"
    return best, who


def compare(args, p: PlacementProblem, name: str, ub: int, who: str) -> dict:
    """One row of ``--compare``: each bound without and with the flow family, against the same UB."""
    row = {"instance": name, "nodes": p.n_nodes, "ub": ub, "ub_by": who}
    for label, flow in (("before", False), ("after", None)):
        t0 = time.perf_counter()
        det = placement_bound_details(p, flow=flow)
        row[f"comb_{label}"], row[f"comb_{label}_s"] = det["bound"], time.perf_counter() - t0
        assert det["bound"] <= ub, (name, label, det, ub)
        if args.cpsat_seconds > 0:
            t0 = time.perf_counter()
            strong, _ = placement_bound_cpsat(p, SolverSettings(time_limit=args.cpsat_seconds), flow=flow)
            row[f"cp_{label}"], row[f"cp_{label}_s"] = strong, time.perf_counter() - t0
            assert strong <= ub, (name, label, strong, ub)
    for k in ("comb_before", "comb_after", "cp_before", "cp_after"):
        if k in row:
            row["gap_" + k] = (ub - row[k]) / ub
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", nargs="*", default=list(GRAPHS))
    ap.add_argument("--devices", nargs="*", type=int, default=[4, 8])
    ap.add_argument("--comm-ratio", type=float, default=4.0)
    ap.add_argument("--rl-seconds", type=float, default=20.0, help="time_limit of solve(p, 'rl'); 0 skips it")
    ap.add_argument("--cpsat-seconds", type=float, default=10.0, help="budget of placement_bound_cpsat (deterministic); 0 skips it")
    ap.add_argument("--incilp-seconds", type=float, default=0.0, help="also solve(p, 'inc-ilp', time_limit=...) for the UB; 0 skips it")
    ap.add_argument("--compare", action="store_true",
                    help="before/after columns: every family without and with flow_bound (and the CP-SAT window bound each way)")
    ap.add_argument("--cache", help="JSON file of upper bounds (read if present, updated)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    if args.graphs == ["doppler"]:
        args.graphs = DOPPLER

    print("command:", " ".join([os.path.relpath(sys.executable)] + sys.argv))
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cpus, load {_load()} (start)")
    cache = {}
    if args.cache and os.path.exists(args.cache):
        with open(args.cache) as fh:
            cache = json.load(fh)
    rows = []
    if args.compare:
        print(f"{'instance':<28}{'n':>5}{'UB':>9}  {'UB by':<9}{'comb old':>9}{'comb new':>9}{'gap old':>9}{'gap new':>9}{'new s':>7}"
              + (f"{'cp old':>9}{'cp new':>9}{'gap old':>9}{'gap new':>9}{'cp s':>7}" if args.cpsat_seconds > 0 else ""))
    head = (f"{'instance':<24}{'n':>5}{'old LB':>9}{'new LB':>9}{'+cpsat':>9}{'UB':>9}  {'UB by':<13}{'gap old':>8}{'gap new':>8}"
            f"{'gap cp':>8}{'new s':>7}{'cp s':>7}  families")
    if not args.compare:
        print(head)
        print("-" * len(head))
    for gname in args.graphs:
        g = GRAPHS[gname]()
        bw = bandwidth_for_comm_ratio(g, args.comm_ratio)
        for D in args.devices:
            p = PlacementProblem.identical(g, D, bandwidth=bw)
            key = f"{gname}/D{D}/r{args.comm_ratio}/rl{args.rl_seconds}" + (f"/incilp{args.incilp_seconds}" if args.incilp_seconds else "")
            if key not in cache:
                cache[key] = upper_bound(p, args.rl_seconds, args.incilp_seconds)
                if args.cache:
                    with open(args.cache, "w") as fh:
                        json.dump(cache, fh, indent=1)
            ub, who = cache[key]
            if args.compare:
                row = compare(args, p, f"{gname}/D{D}", ub, who)
                rows.append(row)
                cp = (f"{row['cp_before']:>9}{row['cp_after']:>9}{row['gap_cp_before']:>9.1%}{row['gap_cp_after']:>9.1%}{row['cp_after_s']:>7.1f}"
                      if "cp_after" in row else "")
                print(f"{row['instance']:<28}{p.n_nodes:>5}{ub:>9}  {who:<9}{row['comb_before']:>9}{row['comb_after']:>9}"
                      f"{row['gap_comb_before']:>9.1%}{row['gap_comb_after']:>9.1%}{row['comb_after_s']:>7.2f}{cp}", flush=True)
                continue
            t0 = time.perf_counter()
            old = p.lower_bound_ticks()
            t_old = time.perf_counter() - t0
            t0 = time.perf_counter()
            det = placement_bound_details(p)
            t_new = time.perf_counter() - t0
            new = det["bound"]
            assert new <= ub, (key, new, ub)
            strong, t_cp, cpinfo = new, 0.0, {}
            if args.cpsat_seconds > 0:
                t0 = time.perf_counter()
                strong, cpinfo = placement_bound_cpsat(p, SolverSettings(time_limit=args.cpsat_seconds))
                t_cp = time.perf_counter() - t0
                assert strong <= ub, (key, strong, ub)
            fam = " ".join(f"{k}={v}" for k, v in det.items() if k not in ("bound", "trivial"))
            row = {
                "instance": f"{gname}/D{D}", "nodes": p.n_nodes, "old_lb": old, "new_lb": new, "ub": ub, "ub_by": who,
                "gap_old": (ub - old) / ub, "gap_new": (ub - new) / ub, "seconds_old": t_old, "seconds_new": t_new, "families": det,
                "cpsat_lb": strong, "gap_cpsat": (ub - strong) / ub, "seconds_cpsat": t_cp, "cpsat_info": cpinfo,
            }
            rows.append(row)
            print(f"{row['instance']:<24}{p.n_nodes:>5}{old:>9}{new:>9}{strong:>9}{ub:>9}  {who:<13}{row['gap_old']:>8.1%}{row['gap_new']:>8.1%}"
                  f"{row['gap_cpsat']:>8.1%}{t_new:>7.2f}{t_cp:>7.1f}  {fam}", flush=True)
    for D in args.devices:
        sel = [r for r in rows if r["instance"].endswith(f"/D{D}")]
        if sel and args.compare:
            gaps = {k: sum(r[k] for r in sel) / len(sel) for k in sel[0] if k.startswith("gap_")}
            print(f"mean gap, {D} devices ({len(sel)} instances): " + ", ".join(f"{k[4:]} {v:.1%}" for k, v in gaps.items())
                  + f"; worst after: {max(max(r[k] for k in r if k.startswith('gap_') and k.endswith('after')) for r in sel):.1%}")
        elif sel:
            mean = {k: sum(r[k] for r in sel) / len(sel) for k in ("gap_old", "gap_new", "gap_cpsat")}
            print(f"mean gap, {D} devices: old {mean['gap_old']:.1%}, new {mean['gap_new']:.1%}, new+cpsat {mean['gap_cpsat']:.1%}"
                  f" ({len(sel)} instances; placement_lower_bound max {max(r['seconds_new'] for r in sel):.2f} s,"
                  f" placement_bound_cpsat max {max(r['seconds_cpsat'] for r in sel):.1f} s)")
    print(f"load {_load()} (end)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
