"""The Ray engine: each `SolveTask` one Ray task, on a local Ray or a running cluster.

A task reserves as many CPUs as its CP-SAT workers, so Ray never runs more solves on a node than
it has cores for. Its graph travels as bytes in the task's arguments and its result comes back
as JSON (no shared filesystem). A worker that dies (killed, out of memory, node lost) is retried
by Ray up to ``MAX_RETRIES`` times; bad input is a reply, never an exception, so it is not retried.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterable, Iterator

from ..errors import IncschedError
from .tasks import MAX_RETRIES, SolveTask, TaskOutcome, failed_outcome, outcome_from_reply, run_task

__all__ = ["solve_ray", "MAX_RETRIES", "INSTALL_HINT"]

INSTALL_HINT = "pip install 'incsched[distributed]'"


def import_ray():
    """The ``ray`` module, or an error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise IncschedError(f"the ray engine needs Ray, an optional extra: {INSTALL_HINT}") from None
    return ray


def solve_ray(tasks: Iterable[SolveTask], *, workers: int | None, address: str | None) -> Iterator[TaskOutcome]:
    """Submit ``tasks`` to Ray; see `solve_many`. Ray is imported here, so a missing Ray fails
    before anything is read; it is started or joined when the first task comes."""
    ray = import_ray()
    return _outcomes(ray, iter(tasks), workers, address)


def _outcomes(ray, tasks: Iterator[SolveTask], workers: int | None, address: str | None) -> Iterator[TaskOutcome]:
    first = next(tasks, None)
    if first is None:
        return  # nothing to solve: no Ray to start
    started = _connect(ray, workers, address)
    in_flight: dict = {}
    try:
        alive = [n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]]
        # a task asking for more CPUs than any node has would wait forever: it gets a whole node
        largest = max(alive, default=0)
        # tasks are drawn as others finish, enough to keep every CPU busy (and an autoscaler told
        # of the demand): a long batch never holds every graph's bytes at once
        window = max(2 * int(sum(alive)), 64)
        remote = ray.remote(_solve_remote)

        def submit(task: SolveTask) -> None:
            cpus = min(task.cpus, largest) if largest >= 1 else task.cpus
            ref = remote.options(num_cpus=cpus, max_retries=MAX_RETRIES, retry_exceptions=False,
                                 name=f"incsched solve {task.graph_name}").remote(task)
            in_flight[ref] = task

        for task in itertools.chain([first], itertools.islice(tasks, window - 1)):
            submit(task)
        while in_flight:
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in ready:
                yield _outcome(ray, ref, in_flight.pop(ref))
                for more in itertools.islice(tasks, 1):
                    submit(more)
    except BaseException:  # Ctrl-C, or the caller closed the iterator: no solve may run on
        for ref in in_flight:
            ray.cancel(ref, force=True)  # force: kill the worker process, not just ask it to stop
        raise
    finally:
        if started:
            ray.shutdown()  # stops a Ray this call started; on a cluster it only disconnects


def _outcome(ray, ref, task: SolveTask) -> TaskOutcome:
    """The finished task's outcome; a failure of the task itself (not of its input) in one line."""
    try:
        reply = ray.get(ref)
    except ray.exceptions.RayTaskError as exc:  # raised outside run_task (e.g. incsched missing on the node)
        return failed_outcome(task, f"failed in its Ray worker: {_first_line(getattr(exc, 'cause', None) or exc)}", "unknown")
    except ray.exceptions.RayError as exc:  # retries used up: the worker kept dying, or its node went away
        tries = MAX_RETRIES + 1
        return failed_outcome(task, f"its Ray worker died on each of {tries} tries: {type(exc).__name__}: {_first_line(exc)}", "unknown")
    outcome = outcome_from_reply(task, reply)
    if outcome.result is not None and outcome.result.stop_reason == "interrupted":
        # SIGINT reached the worker (a Ctrl-C to its process group, a polite cancel): an answer
        # cut short is not the task's result
        return failed_outcome(task, "the solve was interrupted in its worker", outcome.node)
    return outcome


def _connect(ray, workers: int | None, address: str | None) -> bool:
    """Start or join Ray unless this process already did; True if this call must shut it down."""
    if ray.is_initialized():
        return False
    quiet = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    try:
        if address is not None:
            ray.init(address=address, **quiet)
        else:
            # "local": a new Ray of our own, even where `ray start` left one this machine would join
            ray.init(address="local", num_cpus=workers or os.cpu_count() or 1, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise IncschedError(f"could not start or join {where}: {_first_line(exc)}") from None
    return True


def _solve_remote(task: SolveTask) -> dict:
    import ray

    return run_task(task, node=ray.get_runtime_context().get_node_id())


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
