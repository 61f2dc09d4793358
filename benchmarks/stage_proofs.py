"""Benchmark (issue 18): stage proofs by inc-ilp against a plain compact CP-SAT model, side by side.

The plain model is the reference the issue names, written here because it is the yardstick, not a
second solver: one integer stage and one Boolean per node and stage, precedence ``s_u <= s_v``,
each stage's parameters ``<= mem_peak``, ``comm_total`` linear in the stages, minimise
``alpha * mem_peak + comm_total``, CP-SAT with 2 workers and no hint. inc-ilp is `solve()` as a
user calls it (``method="inc-ilp"``, the default settings unless ``--workers``/``--parallel``).

Instances: the shipped graphs (data/graphs) with K in {2, 4, 6, 8}, plus generated deep
residual and inception-like graphs of 200-800 nodes (deterministic, parameter bytes of 3x3 / 1x1
convolutions), peer objective (``alpha`` 1 by default, one unit per data-carrying edge and
boundary). Interleaved instance by instance (which runs first alternates); an instance both sides
settle in under 0.1 s is run 7 times each, interleaved, and the median walls compared (one run of a
few milliseconds is noise on a shared machine). Every answer of both is priced by the independent
evaluator and the objectives compared.

    python benchmarks/stage_proofs.py --time-limit 120   # all 48 instances (about 5 min at load 4-6)
    python benchmarks/stage_proofs.py --quick            # a 10-instance subset
    python benchmarks/stage_proofs.py --only resnet50 --ks 6 --profile   # inc-ilp's phases per instance

Prints the command, the machine's load before and after, a markdown table (per-instance ratio
plain / inc-ilp), the totals and their ratio; ``--json OUT`` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from ortools.sat.python import cp_model

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from incsched.evaluate.stage import evaluate_stages  # noqa: E402
from incsched.formats import load_graph  # noqa: E402
from incsched.graph import CompGraph  # noqa: E402
from incsched.problems import StageProblem  # noqa: E402
from incsched.front_door import solve  # noqa: E402

SHIPPED = REPO / "data" / "graphs"
SHIPPED_NAMES = ("bert_base", "densenet121", "efficientnet_b0", "gpt2", "inception_v3", "mobilenet_v3_large",
                 "resnet18", "resnet50", "vgg16", "vit_b_16")
KS = (2, 4, 6, 8)
#: The `--quick` subset.
QUICK = ("resnet18 K=4", "resnet50 K=6", "inception_v3 K=6", "densenet121 K=4", "vgg16 K=8", "gpt2 K=6",
         "efficientnet_b0 K=8", "deep_resnet_300 K=6", "inception_like_400 K=6", "mobilenet_v3_large K=6")


# ------------------------------------------------------------------------------ generated graphs


class _Net:
    """A tiny builder of CNN-shaped graphs: convolutions carry weights, joins and activations none."""

    def __init__(self, name: str):
        self.name, self.names, self.src, self.dst, self.params, self.out = name, [], [], [], [], []

    def node(self, kind: str, inputs, params: int, out: int) -> int:
        v = len(self.names)
        self.names.append(f"{kind}_{v}")
        self.params.append(params)
        self.out.append(out)
        for u in inputs:
            self.src.append(u)
            self.dst.append(v)
        return v

    def conv(self, u: int, c_in: int, c_out: int, k: int, hw: int) -> int:
        c = self.node("conv", [u], 4 * c_in * c_out * k * k, 4 * c_out * hw * hw)
        return self.node("relu", [c], 0, 4 * c_out * hw * hw)

    def graph(self) -> CompGraph:
        return CompGraph(self.names, self.src, self.dst, param_bytes=self.params, out_bytes=self.out,
                         flops=[float(max(p, 1)) for p in self.params], name=self.name)


def deep_resnet(n_nodes: int) -> CompGraph:
    """A ResNet of bottleneck blocks (1x1, 3x3, 1x1 and a skip) in four widening groups, ~n_nodes."""
    net = _Net(f"deep_resnet_{n_nodes}")
    x = net.conv(net.node("input", [], 0, 4 * 3 * 224 * 224), 3, 64, 7, 112)
    blocks = max(4, (n_nodes - 4) // 6)
    width, hw = 64, 56
    for b in range(blocks):
        group = 4 * b // blocks
        w = 64 * 2**group
        if w != width:
            width, hw = w, max(hw // 2, 7)
        y = net.conv(x, 4 * width, width, 1, hw)
        y = net.conv(y, width, width, 3, hw)
        y = net.node("conv", [y], 4 * width * 4 * width, 4 * 4 * width * hw * hw)
        x = net.node("add", [y, x], 0, 4 * 4 * width * hw * hw)
    net.node("fc", [x], 4 * 4 * width * 1000, 4000)
    return net.graph()


def inception_like(n_nodes: int) -> CompGraph:
    """Inception modules (four branches of 1, 2, 3 and 1 convolutions joined by a concat), ~n_nodes."""
    net = _Net(f"inception_like_{n_nodes}")
    x = net.conv(net.node("input", [], 0, 4 * 3 * 299 * 299), 3, 64, 3, 149)
    modules = max(2, (n_nodes - 4) // 16)
    c, hw = 192, 35
    for m in range(modules):
        if m and m % max(1, modules // 3) == 0:
            c, hw = c + 64, max(hw // 2, 8)
        q = c // 4
        b1 = net.conv(x, c, q, 1, hw)
        b2 = net.conv(net.conv(x, c, q, 1, hw), q, q, 5, hw)
        b3 = net.conv(net.conv(net.conv(x, c, q, 1, hw), q, q, 3, hw), q, q, 3, hw)
        b4 = net.conv(net.node("pool", [x], 0, 4 * c * hw * hw), c, q, 1, hw)
        x = net.node("concat", [b1, b2, b3, b4], 0, 4 * c * hw * hw)
    net.node("fc", [x], 4 * c * 1000, 4000)
    return net.graph()


#: Generated graphs: name -> (builder, K values).
GENERATED = {
    "deep_resnet_300": (lambda: deep_resnet(300), (4, 6)),
    "deep_resnet_800": (lambda: deep_resnet(800), (4, 6)),
    "inception_like_400": (lambda: inception_like(400), (4, 6)),
    "inception_like_800": (lambda: inception_like(800), (6, 8)),
}


def instances(args) -> list[tuple[str, StageProblem]]:
    out = []
    for name in SHIPPED_NAMES:
        g = load_graph(SHIPPED / f"{name}.json.gz")
        out += [(f"{name} K={K}", StageProblem.peer(g, n_stages=K, alpha=args.alpha)) for K in args.ks]
    for name, (build, ks) in GENERATED.items():
        g = build()
        out += [(f"{name} K={K}", StageProblem.peer(g, n_stages=K, alpha=args.alpha)) for K in ks]
    if args.quick:
        out = [(n, p) for n, p in out if n in QUICK]
    if args.only:
        out = [(n, p) for n, p in out if any(n.startswith(o + " ") or n == o for o in args.only)]
    return out


# ------------------------------------------------------------------------------ the plain model


def plain_model(problem: StageProblem, workers: int, time_limit: float, seed: int = 0) -> dict:
    """The issue's yardstick: one stage integer and one Boolean per node and stage, cold, ``workers``."""
    g, K = problem.graph, problem.n_stages
    w, unit = problem.weights.scaled()
    assert w["comm_peak"] == w["compute_peak"] == w["spill"] == 0 and problem.capacity is None
    m = cp_model.CpModel()
    stage = [m.NewIntVar(0, K - 1, f"s{v}") for v in range(g.n_nodes)]
    total = int(g.param_bytes.sum())
    peak = m.NewIntVar(0, total, "mem_peak")
    on = [[m.NewBoolVar(f"x{v},{k}") for k in range(K)] for v in range(g.n_nodes)]
    for v in range(g.n_nodes):
        m.AddExactlyOne(on[v])
        m.Add(stage[v] == sum(k * on[v][k] for k in range(K)))
    for u, v in zip(g.src.tolist(), g.dst.tolist()):
        m.Add(stage[u] <= stage[v])
    p = g.param_bytes.tolist()
    for k in range(K):
        m.Add(sum(p[v] * on[v][k] for v in range(g.n_nodes) if p[v]) <= peak)
    comm = problem.edge_comm.tolist()
    crossings = sum(c * (stage[v] - stage[u]) for u, v, c in zip(g.src.tolist(), g.dst.tolist(), comm) if c)
    m.Minimize(w["mem_peak"] * peak + w["comm_total"] * crossings)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.random_seed = seed
    solver.parameters.absolute_gap_limit = 0.0
    solver.parameters.relative_gap_limit = 0.0
    started = time.perf_counter()
    code = solver.Solve(m)
    wall = time.perf_counter() - started
    status = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible"}.get(code, "unknown")
    objective = None
    if status in ("optimal", "feasible"):
        stages = np.asarray([solver.Value(s) for s in stage])
        ev = evaluate_stages(problem, stages)
        assert ev.feasible
        objective = ev.objective
    return {"status": status, "objective": objective, "wall_s": wall, "deterministic_time": solver.deterministic_time}


def inc_ilp(problem: StageProblem, args) -> dict:
    kwargs = {"time_limit": args.time_limit, "seed": args.seed}
    if args.workers > 1:
        kwargs.update(deterministic=False, workers=args.workers)
    started = time.perf_counter()
    r = solve(problem, "inc-ilp", **kwargs)
    wall = time.perf_counter() - started
    prov = r.provenance
    return {"status": r.status, "objective": r.objective, "wall_s": wall, "timing": dict(r.timing),
            "steps": prov.get("steps", []), "bound_source": getattr(r, "bound_source", None), "best_from": prov.get("best_from")}


def _median_run(runs: list[dict]) -> dict:
    """The run of median wall time (the upper median of an even count: never flattering)."""
    return sorted(runs, key=lambda x: x["wall_s"])[len(runs) // 2]


def _secs(s: float) -> str:
    return f"{s:.3f}" if s < 0.1 else f"{s:.2f}"


def _num(x):
    return x if x is None or isinstance(x, int) else float(x)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the 10-instance subset")
    ap.add_argument("--only", nargs="*", help="instances whose name starts with one of these (e.g. resnet50 'gpt2 K=6')")
    ap.add_argument("--ks", type=int, nargs="*", default=list(KS), help="K of the shipped graphs")
    ap.add_argument("--alpha", type=float, default=1, help="weight of mem_peak (peer objective)")
    ap.add_argument("--time-limit", type=float, default=120.0, help="per run and method (s)")
    ap.add_argument("--workers", type=int, default=1, help="inc-ilp's CP-SAT workers (1: deterministic mode)")
    ap.add_argument("--plain-workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=7, help="runs of each side, interleaved, for instances under --repeat-below")
    ap.add_argument("--repeat-below", type=float, default=0.1, help="repeat an instance whose first runs both took less (s)")
    ap.add_argument("--profile", action="store_true", help="print inc-ilp's phase times and steps per instance")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    args.alpha = int(args.alpha) if float(args.alpha).is_integer() else args.alpha

    cmd = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"Command: `{cmd}`  \nLoad average before: {load_before}; {os.cpu_count()} cores  ")
    print(f"peer objective alpha={args.alpha}; plain model {args.plain_workers} workers; inc-ilp "
          f"{'deterministic, 1 worker' if args.workers == 1 else f'{args.workers} workers'}; limit {args.time_limit:g} s\n")
    solve(StageProblem.peer(load_graph(SHIPPED / "resnet18.json.gz"), 2), "inc-ilp", time_limit=10)  # warm-up, untimed
    print("| instance | nodes | K | inc-ilp | inc-ilp s | plain | plain s | runs | same objective | ratio |")
    print("|---|---:|---:|---|---:|---|---:|---:|---|---:|", flush=True)
    rows = []
    for i, (name, p) in enumerate(instances(args)):
        runs = {"inc-ilp": [], "plain": []}
        for r in range(args.repeats):
            # Which side runs first alternates, instance by instance and repeat by repeat; an
            # instance is repeated only while both sides take milliseconds, where one run is noise.
            for method in (("inc-ilp", "plain") if (i + r) % 2 == 0 else ("plain", "inc-ilp")):
                runs[method].append(inc_ilp(p, args) if method == "inc-ilp" else plain_model(p, args.plain_workers, args.time_limit, args.seed))
            if max(runs["inc-ilp"][0]["wall_s"], runs["plain"][0]["wall_s"]) >= args.repeat_below:
                break
        a, b = _median_run(runs["inc-ilp"]), _median_run(runs["plain"])
        ratio = b["wall_s"] / a["wall_s"]
        same = all(x["objective"] == runs["plain"][0]["objective"] for x in runs["inc-ilp"] + runs["plain"])
        row = {"instance": name, "nodes": p.graph.n_nodes, "K": p.n_stages, "ratio": ratio, "runs": len(runs["plain"]),
               "same_objective": same, "inc_ilp": {**a, "objective": _num(a["objective"]), "walls": [x["wall_s"] for x in runs["inc-ilp"]]},
               "plain": {**b, "objective": _num(b["objective"]), "walls": [x["wall_s"] for x in runs["plain"]]}}
        rows.append(row)
        print(f"| {name} | {p.graph.n_nodes} | {p.n_stages} | {a['status']} | {_secs(a['wall_s'])} | {b['status']} | "
              f"{_secs(b['wall_s'])} | {row['runs']} | {'yes' if row['same_objective'] else 'NO'} | {ratio:.1f}x |", flush=True)
        if args.profile:
            print(f"|   timing {json.dumps({k: round(v, 3) for k, v in a['timing'].items()})} bound {a['bound_source']} "
                  f"best {a['best_from']} steps {json.dumps(a['steps'])} |", flush=True)
    inc_total = sum(r["inc_ilp"]["wall_s"] for r in rows)
    plain_total = sum(r["plain"]["wall_s"] for r in rows)
    ratios = sorted(r["ratio"] for r in rows)
    n_opt = sum(r["inc_ilp"]["status"] == "optimal" for r in rows)
    n_plain = sum(r["plain"]["status"] == "optimal" for r in rows)
    print(f"\n- inc-ilp proved {n_opt}/{len(rows)} optimal; the plain model {n_plain}/{len(rows)}")
    print(f"- total: inc-ilp {inc_total:.2f} s, plain {plain_total:.2f} s: {plain_total / inc_total:.1f}x")
    worst = min(rows, key=lambda r: r["ratio"])
    print(f"- per instance: min {ratios[0]:.2f}x ({worst['instance']}), median {statistics.median(ratios):.1f}x, "
          f"max {ratios[-1]:.1f}x; slower than the plain model on {sum(r < 1 for r in ratios)}")
    print(f"- instances under {args.repeat_below:g} s on both sides: median of {args.repeats} interleaved runs each "
          f"({sum(r['runs'] > 1 for r in rows)} instances); totals add those medians")
    mismatches = [r["instance"] for r in rows if not r["same_objective"]]
    if mismatches:
        print(f"- objectives differ on: {', '.join(mismatches)}")
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nLoad average after: {load_after}")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": cmd, "load_before": load_before, "load_after": load_after,
                                               "rows": rows, "inc_ilp_total_s": inc_total, "plain_total_s": plain_total},
                                              indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
