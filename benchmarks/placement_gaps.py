"""Certified placement gaps on DOPPLER-shaped graphs, and where they come from (issue 25, items 2 and 5).

A fixed, named list of instances of DOPPLER's shapes (`INSTANCES`): transformer blocks (attention
and MLP), full transformer layers tiled by tokens too (`transformer_layer`), FFNN tiles and chained matmuls, 180-400 ops, on 4 and 8 identical devices with a mean
transfer about 4x a mean op, jittered times with seeds >= 1000 (never drawn in training); and
HSDAG-like heterogeneous instances: GPUs and CPUs with per-kind op times (matmuls 10x faster on a
GPU, other ops 4x) and links that differ by pair (GPU-GPU 8x faster than any link touching a CPU).

Measurement (default): per instance, the critical-path list scheduler, ``solve(p, "rl")`` and
``solve(p, "inc-ilp")`` at ``--time-limit``, each makespan re-executed by the simulator
(`incsched.evaluate.simulate`) before it is reported; inc-ilp's certified lower bound and gap,
whether it is proven, whether the clock held (wall <= 1.05 x limit + 1 s), and -- where the
offline file has the instance -- its best makespan and bound and a verdict on which side is weak:

* ``closed``: inc-ilp's gap is 0 (proven optimal);
* ``search weak``: the offline runs found a makespan more than 0.5 % below inc-ilp's;
* ``bound weak``: the offline runs proved a bound more than 0.5 % (of the offline makespan) above inc-ilp's;
* ``both``: both; ``neither``: the offline runs improve neither side by more than 0.5 %.

Offline (``--offline --seconds-per-instance N``): long solves that look for the optimum and a proof,
merged into ``benchmarks/optima/placement.json`` (written atomically; per instance the better
makespan and the better bound are kept). Each entry holds the recipe, a content hash of the problem
(a changed generator invalidates the entry), the best makespan in ticks with its schedule (device
and order per node: re-simulate it), the best lower bound with its proof, solver versions and
parameters, wall seconds, date, machine and load. What runs, within N seconds:
the baselines and ``rl``; inc-ilp (non-deterministic, ``--workers``); the strengthened combinatorial
bound (`placement_bound_cpsat`); without cut nodes, the level chunks' bound (`level_bound`, at
growing strides while they raise it); on identical devices with cut nodes, per segment a CP-SAT
incumbent and `segment_proof_bound` (the makespan is at least the sum of the segments' refuted
makespans, see benchmarks/placement_optimum.py); last, the full CP-SAT model hinted with the best
schedule for the time left (its bound, or OPTIMAL). A measurement with ``--record`` merges its own inc-ilp
schedules and certified bounds too (a deterministic run proves bounds the offline step does not always reach).

    nice -n 15 .venv/bin/python benchmarks/placement_gaps.py --offline --seconds-per-instance 200
    nice -n 10 .venv/bin/python benchmarks/placement_gaps.py --time-limit 60 --json gaps.json --page docs/benchmarks/placement-gaps.md
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import logging
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from incsched.baselines.placement import critical_path_list, heft  # noqa: E402
from incsched.evaluate.simulate import simulate  # noqa: E402
from incsched.generators import bandwidth_for_comm_ratio, chained_matmul, ffnn, transformer_block, transformer_layer  # noqa: E402
from incsched.jsonio import read_json, write_json  # noqa: E402
from incsched.problems import Device, Links, Placement, PlacementProblem  # noqa: E402

OPTIMA = Path(__file__).resolve().parent / "optima" / "placement.json"

GENERATORS = {"transformer_block": transformer_block, "transformer_layer": transformer_layer, "ffnn": ffnn,
              "chained_matmul": chained_matmul}

#: HSDAG-like device kinds: a GPU runs matmuls this many times faster than a CPU, other ops ``other`` times.
GPU_SPEEDUP = {"matmul": 10.0, "bmm": 10.0, "other": 4.0}
#: Links touching a CPU are this many times slower than GPU-GPU links.
CPU_LINK_SLOWDOWN = 8.0
#: Verdict threshold: a side is weak when the offline runs beat it by more than this share of the offline makespan.
WEAK = 0.005


def _identical(generator: str, args: dict, seed: int, devices: int) -> dict:
    return {"generator": generator, "args": {**args, "jitter": 0.1}, "seed": seed,
            "devices": {"identical": devices, "kind": "cpu"}, "links": {"comm_ratio": 4.0}}


def _hetero(generator: str, args: dict, seed: int, gpus: int, cpus: int) -> dict:
    return {"generator": generator, "args": {**args, "jitter": 0.1}, "seed": seed,
            "devices": {"gpus": gpus, "cpus": cpus, "gpu_speedup": GPU_SPEEDUP},
            "links": {"comm_ratio": 4.0, "ratio_kind": "gpu", "cpu_link_slowdown": CPU_LINK_SLOWDOWN}}


#: The benchmark: name -> recipe. Seeds >= 1000 (training draws below). Never change a recipe in place:
#: the offline file is keyed by name and checked by content hash; add a new name instead.
INSTANCES: dict[str, dict] = {
    "tblock2_d4": _identical("transformer_block", {"n_blocks": 2}, 1001, 4),  # 205 ops
    "tblock2_d8": _identical("transformer_block", {"n_blocks": 2}, 1001, 8),
    "tblock2_ffn12_d4": _identical("transformer_block", {"n_blocks": 2, "ffn_tiles": 12}, 1003, 4),  # 245
    "tblock3_d4": _identical("transformer_block", {"n_blocks": 3}, 1002, 4),  # 307
    "tblock3_d8": _identical("transformer_block", {"n_blocks": 3}, 1002, 8),
    "tblock1_h32_d8": _identical("transformer_block", {"n_blocks": 1, "heads": 32, "ffn_tiles": 16}, 1005, 8),  # 311
    "tblock2_h16_d8": _identical("transformer_block", {"n_blocks": 2, "heads": 16}, 1006, 8),  # 397
    "tlayer_st2_d4": _identical("transformer_layer", {"seq_tiles": 2}, 1013, 4),  # 206, no cut node
    "tlayer_st3_d8": _identical("transformer_layer", {"seq_tiles": 3}, 1014, 8),  # 309
    "ffnn8x4_d4": _identical("ffnn", {"n_layers": 8, "tiles": 4}, 1004, 4),  # 196
    "ffnn8x4_d8": _identical("ffnn", {"n_layers": 8, "tiles": 4}, 1004, 8),
    "ffnn6x5_d4": _identical("ffnn", {"n_layers": 6, "tiles": 5}, 1007, 4),  # 215
    "chain6x3_d4": _identical("chained_matmul", {"n_matrices": 6, "tiles": 3}, 1011, 4),  # 234
    "chain6x3_d8": _identical("chained_matmul", {"n_matrices": 6, "tiles": 3}, 1011, 8),
    "chain8x3_d8": _identical("chained_matmul", {"n_matrices": 8, "tiles": 3}, 1012, 8),  # 324
    "chain15x2_d4": _identical("chained_matmul", {"n_matrices": 15, "tiles": 2}, 1008, 4),  # 228
    "hetero_tblock2_2g2c": _hetero("transformer_block", {"n_blocks": 2}, 1021, 2, 2),  # 205
    "hetero_ffnn8x4_2g2c": _hetero("ffnn", {"n_layers": 8, "tiles": 4}, 1022, 2, 2),  # 196
    "hetero_chain6x3_2g2c": _hetero("chained_matmul", {"n_matrices": 6, "tiles": 3}, 1023, 2, 2),  # 234
    "hetero_tblock3_4g4c": _hetero("transformer_block", {"n_blocks": 3}, 1024, 4, 4),  # 307
}


def build(recipe: dict) -> PlacementProblem:
    """The placement problem a recipe describes (the same recipe always gives an equal problem)."""
    gen = GENERATORS[recipe["generator"]]
    dev, links = recipe["devices"], recipe["links"]
    if "identical" in dev:
        g = gen(**recipe["args"], kinds=(dev["kind"],), seed=recipe["seed"])
        bw = bandwidth_for_comm_ratio(g, links["comm_ratio"], dev["kind"])
        return PlacementProblem.identical(g, dev["identical"], kind=dev["kind"], bandwidth=bw)
    g = gen(**recipe["args"], kinds=("cpu",), seed=recipe["seed"])
    cpu = np.asarray(g.time("cpu"), dtype=np.float64)
    speed = np.array([dev["gpu_speedup"].get(op, dev["gpu_speedup"]["other"]) for op in g.op], dtype=np.float64)
    # The GPU's own noise, independent of the CPU's, so the two kinds do not differ by a constant per op type.
    gpu = cpu / speed * np.random.default_rng(recipe["seed"] + 1).lognormal(0.0, recipe["args"]["jitter"], size=g.n_nodes)
    g = g.replace(compute_time={"cpu": cpu, "gpu": gpu})
    devices = [Device(f"gpu{i}", kind="gpu") for i in range(dev["gpus"])] + [Device(f"cpu{i}", kind="cpu") for i in range(dev["cpus"])]
    fast = bandwidth_for_comm_ratio(g, links["comm_ratio"], links["ratio_kind"])
    is_gpu = np.array([d.kind == "gpu" for d in devices])
    bw = np.where(is_gpu[:, None] & is_gpu[None, :], fast, fast / links["cpu_link_slowdown"])
    return PlacementProblem(g, devices, Links(bandwidth=bw))


def content_hash(problem: PlacementProblem) -> str:
    """What the problem is in ticks (durations, edges, transfers, memories) and the tick: a changed generator changes it."""
    return hashlib.sha256(problem.signature() + repr(float(problem.time_unit)).encode()).hexdigest()


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _machine() -> str:
    return f"{platform.node()} {platform.machine()}, {os.cpu_count()} cpus"


def _versions() -> dict:
    import ortools

    return {"ortools": ortools.__version__, "python": platform.python_version(), "numpy": np.__version__}


def executed(problem: PlacementProblem, device, order) -> int:
    """The makespan of a placement as the simulator runs it in its order (the only figure this script reports)."""
    return int(simulate(problem, Placement(device, [list(o) for o in order]), "ordered").makespan)


def _schedule(pl: Placement) -> dict:
    return {"device": [int(d) for d in pl.device], "order": [[int(v) for v in o] for o in pl.order]}


# ---------------------------------------------------------------------- the offline file


def read_optima(path: Path = OPTIMA) -> dict:
    if not Path(path).exists():
        return {"format": "incsched-placement-optima", "version": 1, "instances": {}}
    return read_json(path)


def merge_entry(old: dict | None, new: dict) -> dict:
    """One instance's entry: the better upper bound and the better lower bound of ``old`` and ``new``.

    An old entry whose content hash differs (the generator or a cost changed) is dropped whole.
    Runs (seconds, load, machine) accumulate.
    """
    if old is None or old.get("hash") != new["hash"]:
        return new
    out = dict(old)
    if new["upper"]["ticks"] < old["upper"]["ticks"]:
        out["upper"] = new["upper"]
    if new["lower"]["ticks"] > old["lower"]["ticks"]:
        out["lower"] = new["lower"]
    out["runs"] = list(old.get("runs", [])) + list(new.get("runs", []))
    out["seconds_total"] = sum(r["seconds"] for r in out["runs"])
    return out


def write_optima(entries: dict[str, dict], path: Path = OPTIMA) -> dict:
    """Merge ``entries`` into the file at ``path`` (re-read just before writing) and write it atomically."""
    data = read_optima(path)
    for name, entry in entries.items():
        data["instances"][name] = merge_entry(data["instances"].get(name), entry)
    write_json(path, data, indent=1)
    return data


class _Best:
    """The best schedule and the best proven bound found so far for one problem, each with where it came from."""

    def __init__(self, problem: PlacementProblem):
        self.problem = problem
        self.ub, self.pl, self.ub_how = None, None, None
        self.lb, self.lb_proof = problem.lower_bound_ticks(), {"method": "critical path / total work over devices"}

    def offer(self, pl: Placement | None, how: str) -> None:
        if pl is None:
            return
        m = int(simulate(self.problem, pl, "ordered").makespan)
        if self.ub is None or m < self.ub:
            self.ub, self.pl, self.ub_how = m, Placement(pl.device, pl.order), how

    def bound(self, value, proof: dict) -> None:
        if value is not None and int(value) > self.lb:
            self.lb, self.lb_proof = int(value), proof


def _time_left(deadline: float) -> float:
    return deadline - time.perf_counter()


def offline_instance(name: str, recipe: dict, seconds: float, workers: int, previous: dict | None, log) -> dict:
    """Long solves for one instance within about ``seconds`` wall seconds; the entry to merge."""
    from incsched.baselines.placement_local import local_search
    from incsched.bounds.placement import placement_lower_bound
    from incsched.front_door import solve
    from incsched.inc_ilp.exact_bounds import placement_bound_cpsat
    from incsched.inc_ilp.placement import solve_cpsat
    from incsched.problems.decompose import decomposable
    from incsched.solvers import SolverSettings

    started = time.perf_counter()
    deadline = started + seconds
    load_start = _load()
    p = build(recipe)
    h = content_hash(p)
    best = _Best(p)
    if previous is not None and previous.get("hash") == h:
        s = previous["upper"]["schedule"]
        best.offer(Placement(s["device"], s["order"]), f"previous file ({previous['upper']['found_by']})")
    for how, fn in (("critical_path_list", critical_path_list), ("heft", heft), ("local_search", local_search)):
        best.offer(fn(p), how)
    best.bound(placement_lower_bound(p), {"method": "placement_lower_bound (combinatorial families)"})
    steps = []

    def note(step: str, t0: float, **info) -> None:
        steps.append({"step": step, "seconds": round(time.perf_counter() - t0, 1), **info})
        log(f"  {name}: {step} {json.dumps(info, default=str)[:160]}; best {best.ub} / bound {best.lb} ticks,"
            f" {time.perf_counter() - started:.0f} s, load {_load()}")

    t0 = time.perf_counter()
    r = solve(p, "rl", time_limit=15.0)  # a cold process loads the policy first
    if r.device is not None:
        best.offer(Placement(r.device, r.order), "rl")
    note("rl", t0, makespan=r.objective)

    t0 = time.perf_counter()
    inc_limit = max(10.0, 0.3 * seconds)
    r = solve(p, "inc-ilp", time_limit=inc_limit, deterministic=False, workers=workers)
    best.offer(Placement(r.device, r.order), "inc-ilp")
    best.bound(r.lower_bound, {"method": f"inc-ilp certified bound ({r.bound_source})", "status": r.status,
                               "parameters": {"time_limit": inc_limit, "deterministic": False, "workers": workers}})
    note("inc-ilp", t0, makespan=r.objective, bound=r.lower_bound, status=r.status)

    if best.lb < best.ub and _time_left(deadline) > 20:
        t0 = time.perf_counter()
        limit = min(0.15 * seconds, _time_left(deadline) / 3)
        cp_bound, info = placement_bound_cpsat(p, SolverSettings(time_limit=limit, deterministic=False, workers=workers),
                                               combinatorial=best.lb)
        best.bound(cp_bound, {"method": "placement_bound_cpsat (families on CP-SAT window heads and tails, per segment)",
                              "families": info.get("families"), "parameters": {"time_limit": limit, "workers": workers}})
        note("placement_bound_cpsat", t0, bound=cp_bound)

    if best.lb < best.ub and not decomposable(p) and _time_left(deadline) > 30:
        t0 = time.perf_counter()
        lv = prove_levels(p, min(0.3 * seconds, 0.5 * _time_left(deadline)), workers)
        if lv is not None:
            best.bound(lv["ticks"], {"method": "level chunks (sum of CP-SAT chunk bounds between hop-depth levels)", **lv})
            note("level chunks", t0, bound=lv["ticks"], stride=lv["stride"], proven=lv["proven"])

    if best.lb < best.ub and decomposable(p) and _time_left(deadline) > 30:
        t0 = time.perf_counter()
        seg = prove_segments(p, best.ub, min(0.5 * _time_left(deadline), 0.4 * seconds), workers)
        best.offer(seg["glued"], "segment schedules glued")
        best.bound(seg["lower"], {"method": "segment sum of refuted makespans", "segments": seg["segments"],
                                  "parameters": seg["parameters"]})
        note("segment proofs", t0, bound=seg["lower"], glued=best.ub)

    if best.lb < best.ub and _time_left(deadline) > 10:
        t0 = time.perf_counter()
        limit = _time_left(deadline)
        out = solve_cpsat(p, SolverSettings(time_limit=limit, deterministic=False, workers=workers), hint=best.pl)
        if out.assignment is not None:
            best.offer(Placement(out.assignment, out.info["order"]), "CP-SAT full model (hinted)")
        if out.status == "optimal" and out.assignment is not None:
            best.bound(out.objective, {"method": "CP-SAT OPTIMAL", "parameters": {"time_limit": limit, "workers": workers}})
        else:
            best.bound(None if out.bound is None else int(np.ceil(out.bound - 1e-9)),
                       {"method": "CP-SAT bound (full model)", "status": out.status,
                        "parameters": {"time_limit": limit, "workers": workers}})
        note("CP-SAT full model", t0, status=out.status, objective=out.objective, bound=out.bound)

    if best.lb > best.ub:
        raise AssertionError(f"{name}: bound {best.lb} above the executed makespan {best.ub}: a bound or the simulator is wrong")
    return _entry(recipe, best, _run(started, load_start, seconds, workers, steps))


def prove_levels(problem: PlacementProblem, seconds: float, workers: int) -> dict | None:
    """`level_bound` at growing multiples of `level_period` within ``seconds`` (each chunk up to a tenth of them); the best.

    A longer stride bounds more per chunk but proves slower (an unproven chunk gives CP-SAT's
    bound, which still counts): the strides stop growing after two that did not beat the best.
    """
    from incsched.solvers import SolverSettings
    from incsched.solvers.cpsat.placement_levels import level_bound, level_period

    deadline = time.perf_counter() + seconds
    settings = SolverSettings(time_limit=max(1.0, seconds / 10), deterministic=False, workers=workers)
    best, worse = None, 0
    period = level_period(problem)
    for stride in range(max(2, period), int(problem.graph.asap_level.max()) // 2 + 1, period):
        left = _time_left(deadline)
        if left <= 1 or worse == 2:
            break
        ticks, info = level_bound(problem, settings, stride, seconds=left)
        if best is None or ticks > best["ticks"]:
            best, worse = {"ticks": int(ticks), "stride": stride, "proven": info["proven"], "steps": info["steps"],
                           "parameters": {"chunk_time_limit": settings.time_limit, "workers": workers}}, 0
        else:
            worse += 1
    return best


def _run(started: float, load_start: str, budget: float, workers: int, steps: list[dict]) -> dict:
    """What one run that adds to the offline file records about itself."""
    return {"seconds": round(time.perf_counter() - started, 1), "date": _now(), "machine": _machine(), "load_start": load_start,
            "load_end": _load(), "budget_s": budget, "workers": workers, "steps": steps, "versions": _versions()}


def _entry(recipe: dict, best: _Best, run: dict) -> dict:
    """An offline-file entry of one run: its best schedule and its best bound, each stamped with the run."""
    p = best.problem
    stamp = {"date": run["date"], "machine": run["machine"], "seconds": run["seconds"], "load": run["load_end"],
             "versions": run["versions"]}
    return {
        "recipe": recipe, "hash": content_hash(p), "ops": p.n_nodes, "devices": [d.to_dict() for d in p.devices],
        "time_unit": p.time_unit,
        "upper": {"ticks": best.ub, "found_by": best.ub_how, "schedule": _schedule(best.pl), **stamp},
        "lower": {"ticks": best.lb, "proof": best.lb_proof, **stamp},
        "runs": [run], "seconds_total": run["seconds"],
    }


def prove_segments(problem: PlacementProblem, upper: int, budget: float, workers: int) -> dict:
    """Per segment between cut nodes: a CP-SAT incumbent and `segment_proof_bound`; their sum bounds the whole.

    As in benchmarks/placement_optimum.py: the makespan is at least the sum over segments of each
    segment's optimum with its entry cut node one tick long, minus those ticks.
    """
    from incsched.baselines.placement_local import local_search
    from incsched.inc_ilp.placement import solve_cpsat
    from incsched.problems.decompose import compose, segments, subproblem
    from incsched.solvers import SolverSettings
    from incsched.solvers.cpsat.placement_segments import segment_bound, segment_proof_bound

    parts_nodes = segments(problem)
    big = [i for i, nodes in enumerate(parts_nodes) if len(nodes) > 2]
    probes = 6
    # Per big segment: an incumbent solve, then up to `probes` decisions of two CP-SAT runs each.
    per_segment = budget / max(1, len(big))
    inc_s, probe_s = 0.25 * per_segment, max(2.0, 0.75 * per_segment / (2 * probes))
    settings = SolverSettings(time_limit=probe_s, deterministic=False, workers=workers)
    parts, lower, details = [], 0, []
    for i, nodes in enumerate(parts_nodes):
        entry = 1 if i > 0 else 0
        sub = subproblem(problem, nodes, instant=(nodes[0],) if entry else ())
        hint = local_search(sub, 0)
        pl, up = hint, int(simulate(sub, hint, "ordered").makespan)
        if len(nodes) <= 2:
            lo, probes_log, relaxed = up, [], None  # a chain of one or two nodes: the list schedule is exact
        else:
            out = solve_cpsat(sub, replace(settings, time_limit=inc_s), hint=hint)
            if out.assignment is not None:
                cand = Placement(out.assignment, out.info["order"])
                m = int(simulate(sub, cand, "ordered").makespan)
                if m < up:
                    pl, up = cand, m
            relaxed, _ = segment_bound(sub, replace(settings, time_limit=2.0))
            lo, probes_log = segment_proof_bound(sub, up, settings, lower=max(int(relaxed), int(np.ceil(out.bound or 0))), probes=probes)
        parts.append((nodes, pl))
        lower += lo - entry
        details.append({"segment": sub.name, "ops": len(nodes), "refuted_below": int(lo), "entry_tick": entry, "best": up,
                        "relaxation": None if relaxed is None else int(relaxed),
                        "probes": [{"makespan": int(q["makespan"]), "verdict": q["verdict"]} for q in probes_log]})
    glued = compose(problem, parts)
    return {"lower": int(lower), "glued": glued, "segments": details,
            "parameters": {"probe_seconds": probe_s, "incumbent_seconds": inc_s, "probes": probes, "workers": workers}}


def offline_windows(name: str, recipe: dict, max_nodes: int, work: float, previous: dict, log) -> dict:
    """A bound-only offline step: exact CP-SAT windows of up to ``max_nodes`` nodes around every node, then
    every combinatorial family on the heads and tails they raise; the entry to merge (its schedule is the file's).

    On layered graphs a window must hold the producers of its sources to see that a tile's inputs
    meet on one device: ffnn8x4_d8 gained nothing from 12 to 28 nodes and 3.1 % at 32 (12 minutes
    on one core), far too slow for a 60-s run, so it is an offline step. Deterministic: ``work``
    deterministic CP-SAT seconds in all, 4 per window.
    """
    from incsched.bounds.placement import placement_bound_details, transfer_heads, transfer_tails
    from incsched.solvers import SolverSettings
    from incsched.solvers.cpsat.placement_bounds import window_bound

    started, load_start = time.perf_counter(), _load()
    p = build(recipe)
    if previous is None or previous.get("hash") != content_hash(p):
        raise SystemExit(f"{name}: no offline entry for this problem to add a bound to (run --offline first)")
    settings = SolverSettings(time_limit=work, deterministic=True, workers=1)
    wb, info = window_bound(p, settings, head=transfer_heads(p), tail=transfer_tails(p), max_nodes=max_nodes, per_window=4.0)
    det = placement_bound_details(p, segments=False, head=info["head"], tail=info["tail"])
    bound = max(int(wb), int(det["bound"]))
    if bound > previous["upper"]["ticks"]:
        raise AssertionError(f"{name}: bound {bound} above the file's makespan {previous['upper']['ticks']}: a bound is wrong")
    spent = time.perf_counter() - started
    log(f"  {name}: windows of {max_nodes} nodes: bound {bound} (windows {wb}, families {det['bound']}),"
        f" {info['work']:.0f} deterministic s, {spent:.0f} s, load {_load()}")
    run = {"seconds": round(spent, 1), "date": _now(), "machine": _machine(), "load_start": load_start, "load_end": _load(),
           "budget_s": work, "workers": 1, "versions": _versions(),
           "steps": [{"step": f"windows of {max_nodes} nodes", "seconds": round(spent, 1), "bound": bound}]}
    proof = {"method": f"window_bound (exact CP-SAT windows of up to {max_nodes} nodes), then placement_bound_details on their heads and tails",
             "families": {k: int(v) for k, v in det.items()}, "windows": {k: dict(info[k]) for k in ("heads", "tails")},
             "parameters": {"max_nodes": max_nodes, "per_window": 4.0, "deterministic_seconds": work, "workers": 1}}
    stamp = {"date": run["date"], "machine": run["machine"], "seconds": run["seconds"], "load": run["load_end"], "versions": run["versions"]}
    return {**previous, "lower": {"ticks": bound, "proof": proof, **stamp}, "runs": [run], "seconds_total": run["seconds"]}


def run_offline(args) -> int:
    names = args.instances or list(INSTANCES)
    print(f"# offline: {_machine()}, load {_load()}, {args.seconds_per_instance} s per instance, {args.workers} workers;"
          f" {' '.join(sys.argv)}", flush=True)
    path = Path(args.optima)
    for name in names:
        previous = read_optima(path)["instances"].get(name)
        if args.window_nodes:
            entry = offline_windows(name, INSTANCES[name], args.window_nodes, args.seconds_per_instance, previous,
                                    lambda s: print(s, flush=True))
        else:
            entry = offline_instance(name, INSTANCES[name], args.seconds_per_instance, args.workers, previous,
                                     lambda s: print(s, flush=True))
        data = write_optima({name: entry}, path)
        e = data["instances"][name]
        ub, lb = e["upper"]["ticks"], e["lower"]["ticks"]
        print(f"{name}: best {ub} ticks ({e['upper']['found_by']}), bound {lb} ({e['lower']['proof']['method']}),"
              f" gap {(ub - lb) / ub:.2%}; file {path}", flush=True)
    return 0


def optima_table(data: dict) -> list[str]:
    """The offline file in a markdown table: per instance the best schedule, the best bound, and what proved it."""
    lines = ["| instance | ops | D | best makespan | found by | best bound | proof | gap | seconds spent |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in [n for n in INSTANCES if n in data["instances"]]:
        e = data["instances"][name]
        ub, lb = e["upper"]["ticks"], e["lower"]["ticks"]
        lines.append(f"| {name} | {e['ops']} | {len(e['devices'])} | {ub} | {e['upper']['found_by']} | {lb} |"
                     f" {e['lower']['proof']['method']} | {(ub - lb) / ub:.1%} | {e['seconds_total']:.0f} |")
    return lines


# ---------------------------------------------------------------------- the measurement


def verdict(inc_ub: int, inc_lb: int, off_ub: int | None, off_lb: int | None) -> str:
    if inc_ub == inc_lb:
        return "closed"
    if off_ub is None:
        return ""
    ref = max(off_ub, 1)
    search = (inc_ub - off_ub) / ref > WEAK
    bound = (off_lb - inc_lb) / ref > WEAK
    return {(True, True): "both", (True, False): "search weak", (False, True): "bound weak"}.get((search, bound), "neither")


def measure(name: str, recipe: dict, args, optima: dict) -> dict:
    from incsched.front_door import solve

    p = build(recipe)
    row = {"instance": name, "ops": p.n_nodes, "devices": p.n_devices,
           "kinds": "+".join(sorted({d.kind for d in p.devices})), "tick_s": p.time_unit}
    row["cpl"] = int(simulate(p, critical_path_list(p), "ordered").makespan)
    kw = {} if args.workers is None else {"deterministic": False, "workers": args.workers}
    for method in ("rl", "inc-ilp"):
        t0, load0 = time.perf_counter(), _load()
        r = solve(p, method, time_limit=args.time_limit, **kw)
        wall = time.perf_counter() - t0
        key = "rl" if method == "rl" else "inc"
        if r.device is None:  # rl with no answer inside the clock (a cold policy load): reported, not hidden
            row[key], row[f"{key}_seconds"], row[f"{key}_clock_kept"] = None, round(wall, 2), wall <= 1.05 * args.time_limit + 1.0
            row[f"{key}_note"] = f"no answer ({r.status}, stop {r.stop_reason})"
            continue
        m = executed(p, r.device, r.order)
        if m != int(r.objective):
            raise SystemExit(f"{name}: {method} reports makespan {r.objective} but the simulator runs it in {m} ticks")
        row[key] = m
        row[f"{key}_seconds"] = round(wall, 2)
        row[f"{key}_clock_kept"] = wall <= 1.05 * args.time_limit + 1.0
        if method == "inc-ilp":
            row.update(inc_lb=int(r.lower_bound), inc_status=r.status, inc_bound_source=r.bound_source, inc_stop=r.stop_reason)
            if args.record:
                record_measurement(name, recipe, p, r, args, t0, wall, load0)
    row["gap"] = (row["inc"] - row["inc_lb"]) / row["inc"]
    row["proven"] = row["inc"] == row["inc_lb"]
    row["below_cpl"] = 1 - row["inc"] / row["cpl"]
    row["hash"] = content_hash(p)
    compare_offline(row, optima)
    row["load"] = _load()
    return row


def record_measurement(name: str, recipe: dict, p: PlacementProblem, r, args, started: float, wall: float, load0: str) -> None:
    """``--record``: merge a measured inc-ilp answer into the offline file (schedule and certified bound, each kept
    only where better). The bound is inc-ilp's own, re-checked before `solve` returned it; a deterministic run
    proves bounds the offline step (non-deterministic, 2 workers) does not always reach."""
    mode = "deterministic" if args.workers is None else f"{args.workers} workers"
    best = _Best(p)
    best.offer(Placement(r.device, r.order), f"inc-ilp at {args.time_limit:g} s ({mode})")
    best.bound(r.lower_bound, {"method": f"inc-ilp certified bound ({r.bound_source}), {mode} at {args.time_limit:g} s",
                               "status": r.status, "parameters": {"time_limit": args.time_limit, "workers": args.workers or 1,
                                                                  "deterministic": args.workers is None}})
    step = {"step": f"measurement at {args.time_limit:g} s ({mode})", "seconds": round(wall, 1),
            "makespan": best.ub, "bound": int(r.lower_bound), "status": r.status}
    write_optima({name: _entry(recipe, best, _run(started, load0, args.time_limit, args.workers or 1, [step]))},
                 Path(args.optima))


def compare_offline(row: dict, optima: dict) -> None:
    """Fill the offline columns and the verdict of a measured row from the offline file."""
    for key in ("off_ub", "off_lb", "off_proof", "off_note"):
        row.pop(key, None)
    e = optima.get("instances", {}).get(row["instance"])
    if e is not None and e.get("hash") == row["hash"]:
        row["off_ub"], row["off_lb"] = int(e["upper"]["ticks"]), int(e["lower"]["ticks"])
        row["off_proof"] = e["lower"]["proof"]["method"]
    elif e is not None:
        row["off_note"] = "offline entry is for another problem (hash differs): ignored"
    row["verdict"] = verdict(row["inc"], row["inc_lb"], row.get("off_ub"), row.get("off_lb"))


HEAD = (f"{'instance':<22}{'ops':>4}{'D':>3}  {'CPL':>9}{'rl':>9}{'inc-ilp':>9}{'LB':>9}{'gap':>7}{'vs CPL':>8}  {'prov':<5}{'clock':<11}"
        f"{'off UB':>9}{'off LB':>9}{'off gap':>8}  verdict")


def _cell(x) -> str:
    return "-" if x is None else str(x)


def _clock(r: dict) -> str:
    late = [m for m, key in (("rl", "rl"), ("inc-ilp", "inc")) if not r[f"{key}_clock_kept"]]
    return "yes" if not late else "NO " + ",".join(late)


def format_row(r: dict) -> str:
    off = (f"{r['off_ub']:>9}{r['off_lb']:>9}{(r['off_ub'] - r['off_lb']) / r['off_ub']:>8.1%}" if "off_ub" in r
           else f"{'-':>9}{'-':>9}{'-':>8}")
    clock = _clock(r)
    return (f"{r['instance']:<22}{r['ops']:>4}{r['devices']:>3}  {r['cpl']:>9}{_cell(r['rl']):>9}{r['inc']:>9}{r['inc_lb']:>9}{r['gap']:>7.1%}"
            f"{r['below_cpl']:>8.1%}  {'yes' if r['proven'] else 'no':<5}{clock:<11}{off}  {r['verdict']}")


def summary(rows: list[dict]) -> list[str]:
    ok = sum(r["gap"] <= 0.05 for r in rows)
    proven = sum(r["proven"] for r in rows)
    worst = max(rows, key=lambda r: r["gap"])
    never_worse = sum(r["rl"] is None or r["inc"] <= r["rl"] for r in rows)
    clock = sum(r["inc_clock_kept"] and r["rl_clock_kept"] for r in rows)
    return [
        f"{ok}/{len(rows)} instances proven or within 5 % ({proven} proven); mean {np.mean([r['below_cpl'] for r in rows]):.1%} below"
        f" the critical-path list; worst gap {worst['gap']:.1%} ({worst['instance']}); inc-ilp <= rl on {never_worse}/{len(rows)};"
        f" clock kept on {clock}/{len(rows)}",
        "verdicts against the offline file: " + ", ".join(f"{v} {sum(r['verdict'] == v for r in rows)}" for v in
                                                           ("closed", "search weak", "bound weak", "both", "neither"))
        + f", no offline entry {sum(r['verdict'] == '' for r in rows)}",
    ]


def page(rows: list[dict], args, command: str, load_start: str, load_end: str, machine: str | None = None) -> str:
    lines = [
        "# Placement gaps on DOPPLER-shaped graphs",
        "",
        "Generated by `benchmarks/placement_gaps.py --page`; do not edit by hand. Makespans in ticks of each problem's",
        "time unit, every one re-executed by the simulator. `off UB` / `off LB`: the offline file",
        "(`benchmarks/optima/placement.json`), the best schedule and the best proven bound of long runs;",
        "verdict: which side the offline runs beat by more than 0.5 % (see the script's docstring).",
        "",
        f"- command: `{command}`",
        f"- machine: {machine or _machine()}; load average {load_start} at the start, {load_end} at the end",
        f"- inc-ilp: `solve(p, time_limit={args.time_limit:g}"
        + ("" if args.workers is None else f", deterministic=False, workers={args.workers}") + ")`, `rl` at the same limit",
        "",
        "| instance | ops | D | CPL | rl | inc-ilp | LB | gap | vs CPL | proven | clock | off UB | off LB | off gap | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        off = (f"{r['off_ub']} | {r['off_lb']} | {(r['off_ub'] - r['off_lb']) / r['off_ub']:.1%}" if "off_ub" in r else "- | - | -")
        clock = _clock(r)
        lines.append(f"| {r['instance']} | {r['ops']} | {r['devices']} {r['kinds']} | {r['cpl']} | {_cell(r['rl'])} | {r['inc']} | {r['inc_lb']} |"
                     f" {r['gap']:.1%} | {r['below_cpl']:.1%} | {'yes' if r['proven'] else 'no'} | {clock} | {off} | {r['verdict']} |")
    lines += ["", *summary(rows), "", "## Instances", "",
              "Jitter 0.1 (log-normal) on every op time; a mean transfer 4x a mean op. Identical devices: `cpu` times, uniform",
              f"links. Heterogeneous (HSDAG-like): `gpu` times are the `cpu` ones divided by {GPU_SPEEDUP['matmul']:g} for",
              f"matmuls and {GPU_SPEEDUP['other']:g} for other ops (each with its own noise); a mean transfer over a GPU-GPU link takes",
              f"4x a mean GPU op, links touching a CPU are {CPU_LINK_SLOWDOWN:g}x slower.", ""]
    for name, rec in INSTANCES.items():
        if any(r["instance"] == name for r in rows):
            args_ = ", ".join(f"{k}={v}" for k, v in rec["args"].items())
            dev = rec["devices"]
            where = (f"{dev['identical']} identical" if "identical" in dev else f"{dev['gpus']} GPUs + {dev['cpus']} CPUs")
            lines.append(f"- `{name}`: `{rec['generator']}({args_})`, seed {rec['seed']}, {where}")
    lines.append("")
    optima = read_optima(Path(args.optima))
    if optima["instances"]:
        runs = [r for e in optima["instances"].values() for r in e["runs"]]
        lines += ["## The offline file", "",
                  f"`benchmarks/optima/placement.json`: {sum(r['seconds'] for r in runs):.0f} wall seconds over {len(runs)} runs"
                  f" ({', '.join(sorted({r['machine'] for r in runs}))}; load averages at the end of each run from"
                  f" {min(float(r['load_end'].split()[0]) for r in runs):.1f} to {max(float(r['load_end'].split()[0]) for r in runs):.1f}).",
                  "Re-simulate any schedule in it; `tests/test_placement_optima_file.py` does for all.", "",
                  *optima_table(optima), ""]
    return "\n".join(lines)


def rewrite_page(args) -> int:
    """The page of a saved measurement (``--json``), its verdicts against the offline file as it stands now."""
    saved = read_json(args.from_json)
    rows = saved["rows"]
    optima = read_optima(Path(args.optima))
    for row in rows:
        compare_offline(row, optima)
    for line in [HEAD, *map(format_row, rows), *summary(rows)]:
        print(line)
    if args.page:
        args.time_limit, args.workers = saved["time_limit"], saved["workers"]
        Path(args.page).write_text(page(rows, args, saved["command"], saved["load_start"], saved["load_end"], saved["machine"]))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--instances", nargs="*", choices=list(INSTANCES), help="a subset (default: all)")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds for rl and inc-ilp each")
    ap.add_argument("--workers", type=int, default=None,
                    help="measurement: CP-SAT workers, non-deterministic (default: solve's default, deterministic); offline: default 2")
    ap.add_argument("--json", help="write the rows (or, offline, nothing more) here")
    ap.add_argument("--page", help="write the markdown page here")
    ap.add_argument("--offline", action="store_true", help="run the long solves and merge them into the offline file")
    ap.add_argument("--seconds-per-instance", type=float, default=300.0,
                    help="offline: wall seconds per instance (with --window-nodes: deterministic CP-SAT seconds)")
    ap.add_argument("--window-nodes", type=int, default=None,
                    help="offline, bounds only: exact windows of up to this many nodes (e.g. 32) instead of the long solves")
    ap.add_argument("--record", action="store_true",
                    help="measurement: also merge each inc-ilp schedule and certified bound into the offline file where better")
    ap.add_argument("--optima", default=str(OPTIMA), help="the offline file")
    ap.add_argument("--optima-table", action="store_true", help="print the offline file as a table and stop")
    ap.add_argument("--from-json", help="no solving: reprint a saved measurement (and --page) against the offline file as it is now")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.offline:
        args.workers = args.workers or 2
        return run_offline(args)
    if args.optima_table:
        print("\n".join(optima_table(read_optima(Path(args.optima)))))
        return 0
    if args.from_json:
        return rewrite_page(args)
    command = " ".join(["python"] + [os.path.relpath(sys.argv[0])] + sys.argv[1:])
    load_start = _load()
    print(f"# {_machine()}, load {load_start}; {command}", flush=True)
    optima = read_optima(Path(args.optima))
    print(HEAD)
    print("-" * len(HEAD))
    rows = []
    for name in args.instances or list(INSTANCES):
        rows.append(measure(name, INSTANCES[name], args, optima))
        print(format_row(rows[-1]), flush=True)
    # The offline file as it stands now (an offline run may have added to it meanwhile).
    optima = read_optima(Path(args.optima))
    for row in rows:
        compare_offline(row, optima)
    for line in summary(rows):
        print(line)
    load_end = _load()
    print(f"load {load_end} (end)")
    if args.json:
        write_json(args.json, {"command": command, "machine": _machine(), "load_start": load_start, "load_end": load_end,
                               "time_limit": args.time_limit, "workers": args.workers, "rows": rows}, indent=1)
    if args.page:
        Path(args.page).parent.mkdir(parents=True, exist_ok=True)
        Path(args.page).write_text(page(rows, args, command, load_start, load_end))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
