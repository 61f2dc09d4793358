"""GPU validation: calibrate, solve, execute and compare, for resnet50, bert-base and gpt2.

For each model and batch size: capture (random weights, offline), measure per-node kernel time and
launch overhead on the GPU and on the CPU (`incsched.execute.calibrate`, profiler ranges, no
per-node synchronisation) and the CPU<->GPU copy latency and bandwidth; then
- solve the stage problem (throughput objective: the slowest stage's compute) for K = 2..4 and run
  it as a GPipe pipeline of micro-batches with every stage on the GPU (stages share it, which the
  prediction accounts for);
- solve the placement over ``cuda:0`` + ``cpu`` with inc-ilp and with the baselines (HEFT,
  critical-path list, everything on the GPU), add random placements, and execute each in its
  solved order;
- write JSON and a markdown table: predicted vs measured, the optimal placement's measured
  speed-up over each baseline's, and the rank correlation of predicted and measured makespans.
  The pipelines and inc-ilp's placement are also timed with CUDA events instead of a
  synchronisation after each part (`execute(..., cuda_timing="events")`), in their own column.
Outputs of every run are checked against the unsplit model before anything is timed.

Needs PyTorch and the project's pure-Python dependencies (OR-Tools from wheels: `scripts/gpu_check.sh`
prepares and runs it on the device machine); meant to finish in under 5 minutes on one H200:

    python benchmarks/gpu_validate.py --out gpu_validate
    python benchmarks/gpu_validate.py --device cpu --models resnet18 --batch-sizes 1 --stages 2 \
        --image-size 64 --time-limit 2 --repeats 1 --out /tmp/smoke     # CPU smoke run (tests)

With ``--device cpu`` the "GPU" is a second CPU worker (two threads sharing the cores): it checks
the whole path, not GPU performance.
"""

from __future__ import annotations

import argparse
import logging
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from incsched.capture import capture
from incsched.capture.zoo import build
from incsched.evaluate.simulate import simulate
from incsched.execute import ExecutionError, OutputMismatch, rank_placements, validate_placement, validate_stages
from incsched.execute.calibrate import calibrated_devices, measure_links, profile_devices
from incsched.jsonio import write_json
from incsched.problems import PlacementProblem, StageProblem
from incsched.problems import Placement
from incsched.front_door import solve

log = logging.getLogger("gpu_validate")

PLACEMENT_BASELINES = ("heft", "critical_path_list", "single_device")


def calibrated_capture(model_name: str, batch: int, devices: list[str], args):
    model, inputs = build(model_name, batch_size=batch, seq_len=args.seq_len, image_size=args.image_size)
    cap = capture(model, inputs, coarsen="trivial", name=f"{model_name}_b{batch}")
    # the CPU with the threads the placement's CPU worker gets (all cores beside a GPU)
    graph, times = profile_devices(cap, devices, repeats=args.repeats_profile, warmup=2)
    return _with_graph(cap, graph), {str(t.device): t.summary() for t in times.values()}


def _with_graph(cap, graph):
    import dataclasses

    return dataclasses.replace(cap, graph=graph)


def stage_rows(cap, gpu: str, args) -> list[dict]:
    rows = []
    for K in args.stages:
        problem = StageProblem(cap.graph, K, weights={"compute_peak": 1}, device_kind=torch.device(gpu).type)
        result = solve(problem, "inc-ilp", time_limit=args.time_limit, deterministic=False, workers=args.workers)
        row = {"kind": "stage", "K": K, "status": result.status, "objective": result.objective}
        try:
            v = validate_stages(cap, result.stages, [gpu] * K, n_micro_batches=args.micro_batches, repeats=args.repeats)
        except (ExecutionError, OutputMismatch) as err:
            row["error"] = str(err)
        else:
            row.update(_figures(v))
            row["measured_events_s"] = _events_makespan(lambda: validate_stages(
                cap, result.stages, [gpu] * K, n_micro_batches=args.micro_batches, repeats=args.repeats, cuda_timing="events"))
        rows.append(row)
    return rows


def _events_makespan(run) -> float | str:
    """The same run timed by CUDA events instead of a synchronisation after each part (workers queue
    ahead); the error text instead if that path fails, so the main table still stands."""
    try:
        return run().measured["makespan_s"]
    except Exception as err:  # noqa: BLE001 - a first run on a GPU: record, do not abort the check
        return f"error: {type(err).__name__}: {err}"[:200]


def placement_rows(cap, devices: list[str], links, args) -> tuple[list[dict], float]:
    problem = PlacementProblem(cap.graph, calibrated_devices(devices), links)
    placements, rows = {}, []
    for method in ("inc-ilp",) + PLACEMENT_BASELINES:
        result = solve(problem, method, time_limit=args.time_limit, deterministic=False, workers=args.workers)
        placements[method] = Placement(result.device, result.order)
        rows.append({"kind": "placement", "method": method, "status": result.status, "predicted_s": result.terms["makespan_s"], "gap": result.gap})
    # random placements widen the range the rank correlation is judged over
    rng = np.random.default_rng(0)
    position = np.argsort(cap.graph.topological_order())
    for k in range(args.random_placements):
        name = f"random_{k}"
        placements[name] = Placement.from_assignment(rng.integers(0, len(devices), cap.graph.n_nodes), len(devices), priority=position)
        rows.append({"kind": "placement", "method": name, "status": "", "predicted_s": simulate(problem, placements[name]).makespan_seconds, "gap": None})
    try:
        ranked, rho = rank_placements(cap, placements, devices, repeats=args.repeats, links=links)
    except (ExecutionError, OutputMismatch) as err:
        for row in rows:
            row["error"] = str(err)
        return rows, math.nan
    rows[0]["measured_events_s"] = _events_makespan(lambda: validate_placement(
        cap, placements["inc-ilp"], devices, repeats=args.repeats, links=links, cuda_timing="events"))
    best = next(r["measured_s"] for r in ranked if r["placement"] == "inc-ilp")
    for row, r in zip(rows, ranked):
        row["measured_s"] = r["measured_s"]
        row["parts"] = r["parts"]
        row["speedup_of_inc_ilp"] = r["measured_s"] / best if best > 0 else math.nan
        row["on_gpu"] = float((placements[row["method"]].device == 0).mean())
    return rows, rho


def _figures(v) -> dict:
    rel = v.relative_error()
    return {
        "parts": v.parts,
        "max_abs_diff": v.max_abs_diff,
        "predicted_makespan_s": v.predicted["makespan_s"],
        "measured_makespan_s": v.measured["makespan_s"],
        "makespan_rel_error": rel.get("makespan_s"),
        "predicted_throughput": v.predicted["throughput"],
        "measured_throughput": v.measured["throughput"],
        "peak_bytes": v.measured["peak_bytes"],
        "notes": v.notes,
    }


def _ms(seconds) -> str:
    """A table cell: milliseconds, an error's text, or empty."""
    if seconds is None:
        return ""
    return seconds if isinstance(seconds, str) else f"{seconds * 1e3:.2f}"


def markdown(report: dict) -> str:
    out = [f"# GPU validation ({report['machine']['device_name']}, torch {report['machine']['torch']})", ""]
    out += [f"Command: `{report['command']}`", ""]
    for entry in report["models"]:
        if "nodes" not in entry:  # skipped for time, or failed before its first row
            out += [f"## {entry['graph']}: {entry.get('skipped') or 'error: ' + entry['error']}", ""]
            continue
        out.append(f"## {entry['graph']} ({entry['nodes']} nodes)")
        for dev, s in entry["regimes"].items():
            out.append(f"- {dev}: forward {s['wall_s'] * 1e3:.2f} ms, kernels {s['kernel_sum_s'] * 1e3:.2f} ms, launch {s['launch_per_op_s'] * 1e6:.1f} us/op, {s['regime']}, {s.get('threads', '?')} thread(s)")
        out.append(f"- link {entry['link']}")
        out += ["", "| stage K | status | parts | predicted ms | measured ms | rel. error | pred. mb/s | meas. mb/s | measured ms, CUDA events |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in entry["stage"]:
            if "error" in r:
                out.append(f"| {r['K']} | {r['status']} | error: {r['error'][:80]} | | | | | | |")
                continue
            out.append(
                f"| {r['K']} | {r['status']} | {r['parts']} | {r['predicted_makespan_s'] * 1e3:.2f} | {r['measured_makespan_s'] * 1e3:.2f} | "
                f"{r['makespan_rel_error']:+.1%} | {r['predicted_throughput']:.1f} | {r['measured_throughput']:.1f} | {_ms(r.get('measured_events_s'))} |"
            )
        out += [f"- note (K={r['K']}): {note}" for r in entry["stage"] for note in r.get("notes", [])]
        out += ["", "| placement | status | on GPU | predicted ms | measured ms | measured / inc-ilp's | measured ms, CUDA events |", "|---|---|---|---|---|---|---|"]
        for r in entry["placement"]:
            if "error" in r:
                out.append(f"| {r['method']} | {r['status']} | error: {r['error'][:80]} | | | | |")
                continue
            out.append(f"| {r['method']} | {r['status']} | {r['on_gpu']:.0%} | {r['predicted_s'] * 1e3:.2f} | {r['measured_s'] * 1e3:.2f} | "
                       f"{r['speedup_of_inc_ilp']:.2f}x | {_ms(r.get('measured_events_s'))} |")
        rho = entry["spearman"]
        out += ["", f"Spearman rank correlation, predicted vs measured placement makespan: {'n/a' if rho is None or math.isnan(rho) else f'{rho:.2f}'}", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cuda (default) or cpu for a smoke run")
    p.add_argument("--models", nargs="+", default=["resnet50", "bert_base", "gpt2"])
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 32])
    p.add_argument("--stages", nargs="+", type=int, default=[2, 3, 4])
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--image-size", type=int, default=None)
    p.add_argument("--time-limit", type=float, default=5.0, help="seconds per solve (parallel, wall clock)")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3, help="timed executions per answer (median)")
    p.add_argument("--repeats-profile", type=int, default=5)
    p.add_argument("--random-placements", type=int, default=2, help="random placements added to the rank correlation")
    p.add_argument("--out", default="gpu_validate", help="folder for report.json and report.md (rewritten after every model)")
    p.add_argument("--budget-s", type=float, default=420.0, help="start no further model after this many seconds (default 420)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here; use --device cpu for the smoke run", file=sys.stderr)
        return 2
    # Strict fp32 on the GPU (no TF32), so that its outputs can be checked against the CPU's to
    # float rounding; calibration and execution both run under it, so predictions stay comparable.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gpu = "cuda:0" if args.device == "cuda" else "cpu"
    devices = [gpu, "cpu"]
    started = time.perf_counter()
    link = measure_links(devices)
    links = link.to_links()
    report = {
        "command": "python benchmarks/gpu_validate.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {
            "device_name": torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__,
            "cpu_threads": torch.get_num_threads(),
        },
        "links": link.to_dict(),
        "models": [],
        "seconds": 0.0,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # batch-major: every model gets its small-batch rows before any large batch eats the budget
    for batch in args.batch_sizes:
        for name in args.models:
            t = time.perf_counter()
            if t - started > args.budget_s:  # a late start would be cut off by the caller's timeout
                report["models"].append({"graph": f"{name}_b{batch}", "skipped": f"time budget of {args.budget_s:.0f} s spent"})
                continue
            try:
                report["models"].append(model_entry(name, batch, gpu, devices, links, args))
            except Exception as err:  # noqa: BLE001 - one model failing must not lose the others' rows
                log.exception("%s batch %d failed", name, batch)
                report["models"].append({"graph": f"{name}_b{batch}", "error": f"{type(err).__name__}: {err}"[:500]})
            report["models"][-1]["seconds"] = time.perf_counter() - t
            report["seconds"] = time.perf_counter() - started
            write_report(report, out)  # after every model: a run cut short still leaves its rows
            log.info("%s batch %d done in %.1f s", name, batch, report["models"][-1]["seconds"])
    text = write_report(report, out)
    print(text)
    print(f"\ntotal {report['seconds']:.1f} s -> {out}/report.json, {out}/report.md")
    return 0


def model_entry(name: str, batch: int, gpu: str, devices: list[str], links, args) -> dict:
    """Calibrate one model at one batch size, then its stage and placement rows."""
    cap, regimes = calibrated_capture(name, batch, devices, args)
    entry = {"graph": cap.graph.name, "nodes": cap.graph.n_nodes, "regimes": regimes}
    lat, bw = links.matrices(2)
    entry["link"] = f"{devices[0]} -> {devices[1]}: {lat[0, 1] * 1e6:.1f} us + {bw[0, 1] / 1e9:.1f} GB/s"
    entry["stage"] = stage_rows(cap, gpu, args)
    entry["placement"], entry["spearman"] = placement_rows(cap, devices, links, args)
    return entry


def write_report(report: dict, out: Path) -> str:
    """report.json (non-finite numbers as null: JSON has none) and report.md, each written atomically."""
    write_json(out / "report.json", _finite(report), indent=1)
    text = markdown(report)
    (out / "report.md.tmp").write_text(text + "\n")
    (out / "report.md.tmp").replace(out / "report.md")
    return text


def _finite(value):
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


if __name__ == "__main__":
    sys.exit(main())
