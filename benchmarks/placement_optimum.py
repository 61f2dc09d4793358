"""How short can a transformer placement be? Proven segment optima against the 25%-shorter-than-CPL target.

Issue #3's target: on 4 identical devices with transfers about 4x compute, the exact placement is
at least 25% shorter than the critical-path list scheduler (CPL). For each transformer graph this
prints CPL, the product (``solve(problem, "inc-ilp", time_limit=60)``), and a bracket on the true
optimum proven segment by segment:

* Cut nodes (norms, head/tile sums, residual adds) are preceded or followed by every other node,
  so in any schedule nothing runs beside them and the makespan is the sum, over the segments
  between consecutive cut nodes, of the time from one cut node's end to the next one's end. That
  time is at least the optimum of the segment's own problem (its nodes only, the entry cut node
  made one tick long and on any device: devices are interchangeable), minus the entry's tick:
  restricting a schedule to a segment and shifting it gives a schedule of the segment's problem,
  and edges that skip a cut node (residual inputs) only add constraints. So
  ``optimum >= sum(segment lower bounds) - (segments with an entry)``.
* Each segment's lower bound is the largest makespan ``incsched.solvers.cpsat.placement_segments.segment_proof_bound``
  refutes: CP-SAT proves the strengthened decision model (`segment_decision`) infeasible for
  every makespan below it, for the exit on the entry's device and elsewhere. Segments of one or two
  nodes are chains solved exactly. Identical segments (repeated blocks) are proven once.
* The upper end is the best schedule known: the product's, or the segment schedules glued by
  ``compose`` (executed by the simulator, so residual transfers are priced).

``target`` is 75% of CPL; ``verdict`` says whether the proven bound already exceeds it (then no
placement reaches 25% shorter on that graph: the target is unattainable, not just unmet).

    .venv/bin/python benchmarks/placement_optimum.py --time-limit 60 --probe-seconds 15 --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from dataclasses import replace

from incsched.baselines.placement import critical_path_list
from incsched.baselines.placement_local import local_search
from incsched.evaluate.simulate import simulate
from incsched.generators import bandwidth_for_comm_ratio, transformer_block
from incsched.inc_ilp.placement import solve_cpsat
from incsched.problems.decompose import compose, segments, subproblem
from incsched.problems import Placement, PlacementProblem
from incsched.front_door import solve
from incsched.solvers import SolverSettings
from incsched.solvers.cpsat.placement_segments import segment_bound, segment_proof_bound

GRAPHS = {
    "transformer_block": lambda: transformer_block(),
    "transformer_2blocks": lambda: transformer_block(n_blocks=2),
    "transformer_2b_ffn12": lambda: transformer_block(n_blocks=2, ffn_tiles=12),
}


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"


def prove_segments(problem: PlacementProblem, args, cache: dict) -> dict:
    """Lower and upper bound (ticks) of the whole graph from per-segment proofs; cache shared across graphs."""
    settings = SolverSettings(time_limit=args.probe_seconds, deterministic=False, workers=args.workers)
    parts, lower, details = [], 0, []
    for i, nodes in enumerate(segments(problem)):
        entry = 1 if i > 0 else 0
        sub = subproblem(problem, nodes, instant=(nodes[0],) if entry else ())
        key = sub.signature()  # what the segment is up to node names: equal blocks are proven once
        if key not in cache:
            started = time.perf_counter()
            hint = local_search(sub, 0)
            if len(nodes) <= 2:
                pl, lo, probes, relaxed = hint, simulate(sub, hint, "ordered").makespan, [], None
            else:
                out = solve_cpsat(sub, replace(settings, time_limit=args.segment_seconds), hint=hint)
                pl = hint
                if out.assignment is not None and out.objective <= simulate(sub, hint, "ordered").makespan:
                    pl = Placement(out.assignment, tuple(tuple(o) for o in out.info["order"]), start=out.start)
                relaxed, _ = segment_bound(sub, replace(settings, time_limit=2.0))
                upper = simulate(sub, pl, "ordered").makespan
                lo, probes = segment_proof_bound(sub, upper, settings, lower=max(relaxed, int(out.bound or 0)), probes=args.probes)
            up = simulate(sub, pl, "ordered").makespan
            cache[key] = (pl, lo, up, probes, relaxed, time.perf_counter() - started)
            if len(nodes) > 2:
                print(f"  segment {sub.name} ({len(nodes)} ops): relaxation {relaxed}, proven >= {lo}, best {up} ticks;"
                      f" {len(probes)} probes in {cache[key][5]:.0f} s, load {_load()}", flush=True)
                for pr in probes:
                    print(f"    makespan <= {pr['makespan']}: {pr['verdict']} ({pr['seconds']:.1f} s)", flush=True)
        pl, lo, up, probes, relaxed, secs = cache[key]
        parts.append((nodes, pl))
        lower += lo - entry
        details.append({"segment": sub.name, "ops": len(nodes), "lower": lo, "upper": up, "relaxation": relaxed, "probes": probes})
    glued = simulate(problem, compose(problem, parts), "ordered").makespan
    return {"lower": lower, "glued": glued, "segments": details}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds for the product's inc-ilp run")
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT workers (wall clock)")
    ap.add_argument("--probe-seconds", type=float, default=15.0, help="CP-SAT seconds per decision run (two per probe)")
    ap.add_argument("--segment-seconds", type=float, default=30.0, help="CP-SAT seconds for each segment's incumbent")
    ap.add_argument("--probes", type=int, default=8, help="bisection probes per distinct segment")
    ap.add_argument("--comm-ratio", type=float, default=4.0, help="mean edge transfer time / mean op time (the generator's setting)")
    ap.add_argument("--graphs", nargs="*", default=list(GRAPHS), choices=list(GRAPHS))
    ap.add_argument("--skip-product", action="store_true", help="do not run inc-ilp (proofs only)")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    print(f"# {platform.node()} {os.cpu_count()} cores, load {_load()}; {' '.join(sys.argv)}")
    rows, cache = [], {}
    for name in args.graphs:
        g = GRAPHS[name]()
        p = PlacementProblem.identical(g, 4, kind="cpu", bandwidth=bandwidth_for_comm_ratio(g, args.comm_ratio, "cpu"))
        print(f"{name}: {p.n_nodes} ops, 4 identical devices, mean transfer {args.comm_ratio:g}x mean op time, tick {p.time_unit:g} s", flush=True)
        cpl = simulate(p, critical_path_list(p), "ordered").makespan
        row = {"graph": name, "ops": p.n_nodes, "tick_s": p.time_unit, "cpl": cpl}
        if not args.skip_product:
            started = time.perf_counter()
            r = solve(p, "inc-ilp", time_limit=args.time_limit, deterministic=False, workers=args.workers)
            row.update(inc_ilp=int(r.objective), inc_ilp_bound=int(r.lower_bound), inc_ilp_status=r.status,
                       inc_ilp_seconds=time.perf_counter() - started, inc_ilp_load=_load())
        started = time.perf_counter()
        seg = prove_segments(p, args, cache)
        row.update(lower=seg["lower"], glued=seg["glued"], segments=seg["segments"], proof_seconds=time.perf_counter() - started, load=_load())
        row["upper"] = min(seg["glued"], row.get("inc_ilp", seg["glued"]))
        row["target"] = 0.75 * cpl
        rows.append(row)
    print()
    print(f"{'graph':<22}{'ops':>4}{'CPL s':>9}{'inc-ilp s':>10}{'vs CPL':>8}{'s':>6}{'optimum in [s, s]':>20}{'best vs CPL':>12}"
          f"{'bound vs CPL':>13}{'target s':>9}  verdict")
    for r in rows:
        s = lambda ticks, unit=r["tick_s"]: f"{ticks * unit:8.3f}"  # noqa: E731
        inc = f"{s(r['inc_ilp']):>10}{1 - r['inc_ilp'] / r['cpl']:>8.1%}{r['inc_ilp_seconds']:>6.0f}" if "inc_ilp" in r else f"{'-':>10}{'-':>8}{'-':>6}"
        verdict = "unattainable (proven)" if r["lower"] > r["target"] else ("met" if r["upper"] <= r["target"] else "open")
        print(f"{r['graph']:<22}{r['ops']:>4}{s(r['cpl']):>9}{inc}   [{s(r['lower'])},{s(r['upper'])}]"
              f"{1 - r['upper'] / r['cpl']:>12.1%}{1 - r['lower'] / r['cpl']:>13.1%}{s(r['target']):>9}  {verdict}")
    print(f"load average now {_load()}; 'bound vs CPL' is the most any placement can be shorter than CPL.")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
