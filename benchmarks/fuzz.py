"""Fuzz benchmark (issues 12 and 24): at least 10,000 generated cases through the CLI and the API, counted.

The cases come from the hypothesis strategies of tests/test_fuzz.py (malformed JSON / GML / CSV
graph files, extreme numbers, command lines, API calls, small instances with huge values checked
against the brute-force oracle; and issue 24's surfaces: ONNX files with extreme dimensions and
``read_onnx(dims=...)``, experiment TOML loaded and planned, generator arguments, placement
transfer tables, batches over folders with broken links, link loops and folders named ``*.json``,
exports of layer-level results with fuzzed graph meta, each with its oracle) and are judged by its `judge`. Each case runs in a worker process
with a timeout, so a hang is counted, not waited for; every ``--subprocess-every``-th command line
also runs as a real ``python -m incsched.cli`` process, to catch what only a whole interpreter shows.

    nice .venv/bin/python benchmarks/fuzz.py --cases 10000 --jobs 2
    .venv/bin/python benchmarks/fuzz.py --cases 200 --seed 3 --failures /tmp/fuzz-failures
    .venv/bin/python benchmarks/fuzz.py --cases 2000 --surfaces onnx,toml,generators,table,batch,export

Prints the command line and the machine's load first, then one count per verdict; every
traceback, wrong result, hang and memory blow-up (a worker's peak memory past ``--max-rss-mb``)
is written to ``--failures`` (its files and command line).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from multiprocessing.connection import wait as mp_wait
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402

from hypothesis import strategies as st  # noqa: E402
from test_fuzz import SURFACES, Case, Outcome, _read_cli_result, all_cases, judge, run_case, write_case_files  # noqa: E402

FAILURES = ("traceback", "wrong", "hang", "memory")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000, help="generated cases (default 10,000)")
    ap.add_argument("--seed", type=int, default=0, help="hypothesis seed: the same seed draws the same cases")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a case may take before it counts as a hang")
    ap.add_argument("--max-rss-mb", type=float, default=2048.0,
                    help="a worker whose peak memory passes this after a case counts it as a memory blow-up (and is replaced)")
    ap.add_argument("--subprocess-every", type=int, default=40, help="every N-th command line also runs as a real process")
    ap.add_argument("--failures", default="fuzz-failures", help="folder for the reproducers of failures")
    ap.add_argument("--surfaces", default="all",
                    help=f"'all' (every strategy, the default) or a comma list of issue 24's surfaces: {', '.join(SURFACES)}")
    args = ap.parse_args(argv)
    if args.surfaces == "all":
        strategy = all_cases
    else:
        chosen = [x.strip() for x in args.surfaces.split(",") if x.strip()]
        unknown = [x for x in chosen if x not in SURFACES]
        if unknown or not chosen:
            ap.error(f"--surfaces: unknown {', '.join(unknown) or 'empty list'} (known: all, {', '.join(SURFACES)})")
        strategy = st.one_of(*(SURFACES[x] for x in chosen))

    print(f"command: {' '.join(shlex.quote(a) for a in [sys.executable, *sys.argv])}")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, load average {load} (1/5/15 min); "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M:%S')}")
    print(f"cases: {args.cases}, seed {args.seed}, jobs {args.jobs}, timeout {args.timeout:g} s, "
          f"a real process every {args.subprocess_every} command lines, surfaces {args.surfaces}", flush=True)

    pool = [Worker(args.timeout, args.max_rss_mb) for _ in range(max(1, args.jobs))]
    counts: Counter = Counter()
    by_label: Counter = Counter()
    started = time.perf_counter()
    failures = Path(args.failures)
    state = {"n": 0, "cli": 0}

    def record(case: Case, mode: str, verdict: str, why: str) -> None:
        counts[verdict] += 1
        counts[f"mode:{mode}"] += 1
        by_label[(case.label or case.kind, verdict)] += 1
        if verdict in FAILURES:
            save_failure(failures / f"{sum(counts[v] for v in FAILURES):04d}-{verdict}", case, mode, why)
            print(f"  {verdict} ({mode}): {why[:200]}\n    {case.command_line()[:300]}", flush=True)

    def submit(case: Case, mode: str) -> None:
        while True:
            free = [w for w in pool if w.busy is None]
            if free:
                free[0].send(case, mode)
                return
            # all busy: wait for the first answer, or the first case past its timeout (a hang)
            now = time.monotonic()
            first_deadline = min(w.busy[2] + args.timeout for w in pool)
            ready = mp_wait([w.conn for w in pool], timeout=max(first_deadline - now, 0.0))
            for w in pool:
                if w.conn in ready or time.monotonic() >= w.busy[2] + args.timeout:
                    record(*w.collect())

    @hypothesis_seed(args.seed)
    @settings(max_examples=args.cases, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one(case: Case) -> None:
        state["n"] += 1
        submit(case, "in-process")
        if case.kind == "cli":
            state["cli"] += 1
            if state["cli"] % args.subprocess_every == 0 and _encodable(case):
                submit(case, "subprocess")
        if state["n"] % 500 == 0:
            done = sum(counts[v] for v in ("success", "clear_error", *FAILURES))
            print(f"  ... {state['n']} cases drawn, {done} judged, {time.perf_counter() - started:.0f} s: "
                  + ", ".join(f"{v} {counts[v]}" for v in ("success", "clear_error", *FAILURES)), flush=True)

    try:
        one()
        for worker in pool:
            if worker.busy:
                record(*worker.collect())
    finally:  # the workers are not daemons (a case may start processes): always end them
        for worker in pool:
            worker.stop()

    elapsed = time.perf_counter() - started
    print()
    print(f"cases            {state['n']:>7}  ({counts['mode:in-process']} in-process, {counts['mode:subprocess']} as real processes;"
          f" {elapsed:.0f} s)")
    for verdict, name in (("traceback", "tracebacks"), ("wrong", "wrong results"), ("hang", "hangs"), ("memory", "memory blow-ups"),
                          ("clear_error", "clear errors"), ("success", "successes")):
        print(f"{name:<16} {counts[verdict]:>7}")
    print("\nby kind of case (label: verdict count ...)")
    for label in sorted({label for label, _ in by_label}):
        print(f"  {label:<24} " + "  ".join(f"{v} {by_label[(label, v)]}" for v in ("success", "clear_error", *FAILURES) if by_label[(label, v)]))
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 1 if any(counts[v] for v in FAILURES) else 0


def _encodable(case: Case) -> bool:
    """A real process takes only arguments without NUL that encode to the file system's bytes."""
    try:
        for a in case.argv:
            if "\0" in a:
                return False
            os.fsencode(a)
    except UnicodeError:
        return False
    return True


# ---------------------------------------------------------------------- one worker process


class Worker:
    """A process that runs cases one at a time; the parent kills and replaces it on a timeout, and
    after a case that took its peak memory past ``max_rss_mb`` (the peak only grows, so it starts afresh)."""

    def __init__(self, timeout: float, max_rss_mb: float = 2048.0):
        self.timeout = timeout
        self.max_rss_mb = max_rss_mb
        self.busy = None
        self._start()

    def _start(self) -> None:
        parent, child = mp.get_context("fork").Pipe()
        self.conn = parent
        # not a daemon: a case may start processes of its own (batch --jobs 2 runs a process pool);
        # the worker ends when the parent closes its pipe, or is killed by it
        self.process = mp.get_context("fork").Process(target=_serve, args=(child, self.max_rss_mb), daemon=False)
        self.process.start()
        child.close()

    def send(self, case: Case, mode: str) -> None:
        self.busy = (case, mode, time.monotonic())
        self.conn.send((case, mode))

    def collect(self) -> tuple[Case, str, str, str]:
        case, mode, since = self.busy
        self.busy = None
        left = max(self.timeout - (time.monotonic() - since), 0.0)
        if self.conn.poll(left):
            try:
                verdict, why = self.conn.recv()
                if verdict == "memory":
                    self._restart()
                return case, mode, verdict, why
            except EOFError:
                pass
            self._restart()
            return case, mode, "traceback", f"the worker process died (exit code {self.process.exitcode})"
        self._restart()
        return case, mode, "hang", f"no answer within {self.timeout:g} s"

    def _restart(self) -> None:
        self.process.kill()  # only this worker, started above
        self.process.join()
        self.conn.close()
        self._start()

    def stop(self) -> None:
        if self.busy is not None:  # interrupted mid-case: nothing to wait for
            self.process.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _serve(conn, max_rss_mb: float = 2048.0) -> None:
    import logging
    import resource

    class CurrentStderr(logging.Handler):  # logging to whatever stderr the case has now
        def emit(self, record):
            sys.stderr.write(self.format(record) + "\n")

    logging.basicConfig(level=logging.WARNING, handlers=[CurrentStderr()], format="%(levelname)s %(name)s: %(message)s")
    import warnings

    warnings.simplefilter("ignore")  # numpy's RuntimeWarnings are the judge's business only if they end in an error
    while True:
        try:
            job = conn.recv()
        except EOFError:  # the parent is gone
            return
        if job is None:
            return
        case, mode = job
        with tempfile.TemporaryDirectory(prefix="incsched-fuzz-") as folder:
            try:
                out = run_case(case, folder) if mode == "in-process" else _run_subprocess(case, folder)
                verdict, why = judge(case, out)
            except Exception as exc:  # noqa: BLE001 - a fault of the harness is reported as one
                verdict, why = "traceback", f"fuzz harness: {type(exc).__name__}: {exc}"
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        if peak_mb > max_rss_mb and verdict not in ("traceback", "wrong"):
            verdict, why = "memory", f"the worker's peak memory reached {peak_mb:.0f} MB (limit {max_rss_mb:.0f} MB; {verdict} otherwise)"
        conn.send((verdict, why))


def _run_subprocess(case: Case, folder: str) -> Outcome:
    write_case_files(case, folder)
    argv = [a.replace("{dir}", folder) for a in case.argv]
    env = {**os.environ, **dict(case.env), "PYTHONPATH": str(REPO)}
    try:
        done = subprocess.run([sys.executable, "-m", "incsched.cli", *argv], env=env, cwd=folder, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=100)
    except subprocess.TimeoutExpired:
        return Outcome(escaped="subprocess: no exit within 100 s\nTimeoutExpired")
    out = Outcome(status=done.returncode, stdout=done.stdout.decode("utf-8", "replace"), stderr=done.stderr.decode("utf-8", "replace"))
    if done.returncode < 0:
        out.escaped = f"killed by signal {-done.returncode}\n{out.stderr[-500:]}"
    if out.status in (0, 1, 3) and case.oracle is not None:
        out.result = _read_cli_result(argv, out.stdout, case.oracle, folder)
    return out


def save_failure(folder: Path, case: Case, mode: str, why: str) -> None:
    """The case's files, its command line (``{dir}`` = this folder) and why it failed."""
    folder.mkdir(parents=True, exist_ok=True)
    write_case_files(case, str(folder))
    (folder / "case.txt").write_text(
        f"{mode}: {why}\n\n{case.command_line(str(folder))}\n\napi: {case.api!r}\n\noracle: {json.dumps(case.oracle, default=repr)[:4000]}\n",
        encoding="utf-8", errors="backslashreplace")


if __name__ == "__main__":
    sys.exit(main())
