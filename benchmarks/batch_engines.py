"""Benchmark (issue 13): the same 40 mixed solves on local processes and on Ray, side by side in one run.

Every number comes from `incsched.batch.solve_many`; nothing here schedules. The solves: 32
generated stage problems (layered DAGs of 40-120 nodes, K=4, inc-ilp, deterministic, bounded by a
work budget so both engines do the very same work) and 8 bad inputs (corrupt gzip, malformed JSON,
a cycle, an unknown file type) that fail in the worker in milliseconds. Rounds alternate the
engines (local, ray, local, ray ...) so a change in the machine's load hits both.

Reported per engine and round: wall seconds from the call to the last outcome, solves per second,
the sum of the solves' own seconds in their workers, and the overhead per task:
``(wall * slots - sum of solve seconds) / tasks`` (slots = CPUs given to the engine), the time a
slot spends on anything but solving. A second table times 40 tasks that do nothing but fail
(bad input), which is the engines' round trip alone. Each engine starts cold in every round, as
a batch command does: a fresh process pool; a fresh local Ray, whose start (``ray.init``) is timed
apart (a batch pays it once; on a cluster it is already up).
Target: Ray's throughput within 15% of the local engine's on one machine. The outcomes of both
engines are compared (status and objective per task): the work budget makes them equal.

    python benchmarks/batch_engines.py                       # 2 rounds, 2 slots (minutes on 2 cores)
    python benchmarks/batch_engines.py --rounds 3 --workers 4 --json engines.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time

from incsched.batch import ProblemRecipe, SolveTask, solve_many
from incsched.formats import graph_to_dict
from incsched.generators import layered_dag
from incsched.jsonio import json_bytes


def mixed_tasks(work_limit: float) -> list[SolveTask]:
    recipe = ProblemRecipe("stage", n_stages=4)
    settings = {"time_limit": 120, "work_limit": work_limit, "seed": 0}
    tasks = []
    for i in range(32):
        n = 40 + (i * 80) // 31
        g = layered_dag(n, n_layers=max(n // 10, 3), param_bytes=(0, 100_000), out_bytes=(1, 5000), seed=i, name=f"g{i}")
        tasks.append(SolveTask(f"g{i}", json_bytes(graph_to_dict(g)), f"g{i}.json", recipe, settings))
    return tasks + bad_tasks(8)


def bad_tasks(count: int) -> list[SolveTask]:
    recipe = ProblemRecipe("stage", n_stages=4)
    cyclic = graph_to_dict(layered_dag(10, n_layers=3, seed=0, name="c"))
    edges = cyclic["edges"]
    edges["src"], edges["dst"], edges["bytes"] = edges["src"] + [edges["dst"][0]], edges["dst"] + [edges["src"][0]], edges["bytes"] + [1]
    kinds = [("corrupt.json.gz", b"\x1f\x8b not gzip"), ("malformed.json", b"{ nope"), ("cyclic.json", json_bytes(cyclic)),
             ("graph.txt", b"a b c")]
    return [SolveTask(f"bad{i}", kinds[i % len(kinds)][1], kinds[i % len(kinds)][0], recipe, {"time_limit": 5}) for i in range(count)]


def run(tasks: list[SolveTask], engine: str, workers: int) -> dict:
    start = time.perf_counter()
    outcomes = list(solve_many(tasks, engine=engine, workers=workers))
    wall = time.perf_counter() - start
    solved = sum(o.result is not None for o in outcomes)
    busy = sum(o.seconds for o in outcomes)
    return {
        "engine": engine, "tasks": len(outcomes), "solved": solved, "failed": len(outcomes) - solved, "wall_s": round(wall, 3),
        "per_s": round(len(outcomes) / wall, 3), "solve_s": round(busy, 3),
        "overhead_per_task_s": round((wall * workers - busy) / len(outcomes), 4),
        "nodes": sorted({o.node for o in outcomes}),
        "answers": {o.task.key: (None, o.error.split(":")[0]) if o.result is None else (o.result.status, str(o.result.objective))
                    for o in outcomes},
    }


def with_local_ray(cpus: int, work):
    """(seconds ray.init took, work()) on a Ray of ``cpus`` CPUs started for it and stopped after:
    its workers are as cold as a fresh local pool's."""
    import ray

    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths live under it
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, _temp_dir=temp, log_to_driver=False, logging_level="WARNING")
    start = time.perf_counter() - t0
    try:
        return start, work()
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def table(rows: list[dict]) -> str:
    head = "| round | engine | tasks | solved | failed | wall s | tasks/s | sum of solve s | overhead per task s |"
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        lines.append(f"| {r['round']} | {r['engine']} | {r['tasks']} | {r['solved']} | {r['failed']} | {r['wall_s']:.2f} | {r['per_s']:.3f} "
                     f"| {r['solve_s']:.2f} | {r['overhead_per_task_s']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="rounds of (local, ray), alternating which runs first")
    ap.add_argument("--workers", type=int, default=2, help="slots: local processes, and the CPUs of the local Ray")
    ap.add_argument("--work-limit", type=float, default=0.1, help="deterministic seconds per solve")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)

    import ray

    print(f"command: python {' '.join(sys.argv)}")
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, ray {ray.__version__}")
    print(f"load average before: {load()}")
    tasks, trivial = mixed_tasks(args.work_limit), bad_tasks(40)

    rows, round_trips = [], []
    for rnd in range(args.rounds):
        order = ("local", "ray") if rnd % 2 == 0 else ("ray", "local")
        for engine in order:
            if engine == "local":
                rows.append({"round": rnd + 1, "start_s": 0.0, **run(tasks, "local", args.workers)})
                round_trips.append({"round": rnd + 1, **run(trivial, "local", args.workers)})
            else:
                start, ray_rows = with_local_ray(args.workers, lambda: [run(tasks, "ray", args.workers), run(trivial, "ray", args.workers)])
                rows.append({"round": rnd + 1, "start_s": round(start, 3), **ray_rows[0]})
                round_trips.append({"round": rnd + 1, **ray_rows[1]})
            print(f"  round {rnd + 1} {engine}: {rows[-1]['wall_s']:.1f} s (load {load()})", flush=True)

    print(f"load average after: {load()}")
    starts = [r["start_s"] for r in rows if r["engine"] == "ray"]
    print(f"\nRay start (ray.init, local, {args.workers} CPUs), timed apart, once per batch: {', '.join(f'{x:.2f}' for x in starts)} s\n")
    print(f"40 mixed tasks (32 solves, work_limit {args.work_limit} deterministic s, 8 bad inputs), {args.workers} slots:\n")
    print(table(rows))
    print("\n40 bad-input tasks (the round trip alone):\n")
    print(table(round_trips))
    local = sum(r["per_s"] for r in rows if r["engine"] == "local") / args.rounds
    on_ray = sum(r["per_s"] for r in rows if r["engine"] == "ray") / args.rounds
    same = all(r["answers"] == rows[0]["answers"] for r in rows)
    print(f"\nmean throughput: local {local:.3f} tasks/s, ray {on_ray:.3f} tasks/s, ray / local = {on_ray / local:.3f} "
          f"(target >= 0.85: {'met' if on_ray / local >= 0.85 else 'NOT met'})")
    with_start = sum(r["wall_s"] + r["start_s"] for r in rows if r["engine"] == "ray") / args.rounds
    print(f"ray counting its start once per batch: {len(tasks) / with_start:.3f} tasks/s, ray / local = {len(tasks) / with_start / local:.3f}")
    print(f"every round's answers equal (status and objective per task, both engines): {same}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mixed": rows, "round_trip": round_trips, "argv": sys.argv}, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
