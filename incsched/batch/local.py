"""The local engine: `SolveTask`s solved in this process or in a pool of worker processes.

Workers die with the driver (even on ``kill -9``) and ignore Ctrl-C, which the driver handles by
killing them: what a worker was solving is lost, nothing it half-did survives (workers write no
files; the driver writes the results). A worker that dies breaks the pool: its tasks run again in
a new one, up to ``MAX_RETRIES`` times, as on Ray.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from . import tasks as _tasks
from .tasks import MAX_RETRIES, SolveTask, TaskOutcome, failed_outcome, outcome_from_reply

__all__ = ["solve_local"]


def solve_local(tasks: Iterable[SolveTask], workers: int) -> Iterator[TaskOutcome]:
    """Outcomes of ``tasks`` as they finish, ``workers`` at a time (1: one after another, here).

    ``tasks`` is drawn as workers free up (two per worker waiting at most), so a long batch never
    holds every graph's bytes at once. Raises KeyboardInterrupt on Ctrl-C once the workers are
    stopped; closing the iterator early stops them too.
    """
    tasks = iter(tasks)
    if workers <= 1:
        for task in tasks:
            outcome = outcome_from_reply(task, _tasks.run_task(task))
            if outcome.result is not None and outcome.result.stop_reason == "interrupted":
                # Ctrl-C reached solve() in this process: its answer is cut short, not a result to keep
                raise KeyboardInterrupt
            yield outcome
        return
    first = next(tasks, None)
    if first is None:
        return
    pool = _pool(workers)
    in_flight: dict = {}  # future -> (task, tries before this one)

    def submit(task: SolveTask, tries: int = 0) -> None:
        nonlocal pool
        try:
            in_flight[pool.submit(_tasks.run_task, task)] = (task, tries)
        except BrokenProcessPool:  # a worker died and broke the pool: a new one takes the rest
            _stop_workers(pool)
            pool = _pool(workers)
            in_flight[pool.submit(_tasks.run_task, task)] = (task, tries)

    try:
        for task in itertools.chain([first], itertools.islice(tasks, 2 * workers - 1)):
            submit(task)
        while in_flight:
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for fut in done:
                task, tries = in_flight.pop(fut)
                try:
                    reply = fut.result()
                except BrokenProcessPool as exc:
                    # a worker died (killed, out of memory) and every task the pool held fails with
                    # it, whichever was the cause: each is run again, as Ray's max_retries does
                    if tries < MAX_RETRIES:
                        submit(task, tries + 1)
                        continue
                    yield failed_outcome(task, f"its worker died on each of {tries + 1} tries: {type(exc).__name__}: {exc}")
                except Exception as exc:  # noqa: BLE001 - the task could not reach its worker or come back
                    yield failed_outcome(task, f"{type(exc).__name__}: {exc}")
                else:
                    yield outcome_from_reply(task, reply)
                for more in itertools.islice(tasks, 1):
                    submit(more)
    except BaseException:  # Ctrl-C, or the caller closed the iterator
        _stop_workers(pool)
        raise
    pool.shutdown(wait=True)


def _pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, initializer=_worker_init, initargs=(os.getpid(),))


# ---------------------------------------------------------------------- workers die with the batch

_PR_SET_PDEATHSIG = 1
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _worker_init(parent_pid: int) -> None:
    """Runs first in each worker: die when the batch process dies, leave Ctrl-C to the batch.

    ``kill -9`` of the batch cannot run any clean-up, so each worker asks Linux to SIGKILL it
    when its parent dies (prctl PR_SET_PDEATHSIG), and a thread polls the parent's pid as a
    fallback where prctl is missing (it also covers a parent that died before prctl ran).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the batch handles Ctrl-C and stops the workers
    # One worker, one core, as Ray does for a one-CPU task: torch (the learned policy) and BLAS
    # would each start a thread per core in every worker, and on 2 cores two workers ran their
    # solves half as fast as on Ray (benchmarks/batch_engines.py). Read when they are imported.
    for var in _THREAD_VARS:
        os.environ.setdefault(var, "1")
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="incsched-watch-parent").start()


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(1)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    # Workers ignore SIGINT and write nothing: what they are solving is lost, nothing else.
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            proc.kill()
        except (OSError, ValueError, AttributeError):
            pass
    pool.shutdown(wait=True, cancel_futures=True)
