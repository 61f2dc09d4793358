"""`solve_many`: many `SolveTask`s on one engine, outcomes yielded as they finish.

``local`` runs them in this machine's processes; ``ray`` runs each as a Ray task, on a Ray this
call starts and stops, or on a running cluster it joins (``address``). Both run the same
`run_task` in the worker and return JSON, so their results are the same.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from ..errors import IncschedError
from .local import solve_local
from .tasks import SolveTask, TaskOutcome

__all__ = ["ENGINES", "solve_many"]

ENGINES = ("local", "ray")


def solve_many(tasks: Iterable[SolveTask], *, engine: str = "local", workers: int | None = None,
               address: str | None = None) -> Iterator[TaskOutcome]:
    """Solve ``tasks``; yield each one's `TaskOutcome` as it finishes (not in the given order).

    A task with bad input (a graph that does not load, a recipe that does not fit it) yields an
    outcome with ``error`` set and is not retried; the others go on.

    Parameters
    ----------
    tasks : iterable of SolveTask
        Drawn as the engine has room for more (a generator may make them as it goes).
    engine : {"local", "ray"}
        ``local``: ``workers`` processes of this machine (1: one after another in this process).
        ``ray``: one Ray task per solve, reserving as many CPUs as its CP-SAT workers. On both, a
        task whose worker process dies is run again (up to ``MAX_RETRIES`` times; Ray's
        ``max_retries``) and yields one outcome.
    workers : int, optional
        ``local``: processes (default: this machine's cores). ``ray`` without ``address``: the CPUs
        of the Ray it starts (default: this machine's cores); ignored on a cluster.
    address : str, optional
        ``ray`` only: a running cluster to join (``"auto"``, ``"HOST:6379"``, ``"ray://HOST:10001"``);
        without one a local Ray is started for the call and shut down after. A Ray this process
        already initialised is used as it is.

    Returns
    -------
    iterator of TaskOutcome
        Close it (or stop with Ctrl-C, a KeyboardInterrupt) to cancel the tasks not finished:
        their workers are stopped.

    Raises
    ------
    IncschedError
        Unknown engine, ``address`` without Ray, a bad ``workers``, or Ray not installed (the
        message says how to install it).
    """
    if engine not in ENGINES:
        raise IncschedError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise IncschedError(f"workers must be a whole number of at least 1, got {workers!r}")
    if address is not None and engine != "ray":
        raise IncschedError("an address names a Ray cluster: it needs engine 'ray'")
    if engine == "ray":
        from .ray_engine import solve_ray  # imports ray (an optional extra), so only when asked for

        return solve_ray(_checked(tasks), workers=workers, address=address)
    return solve_local(_checked(tasks), workers or os.cpu_count() or 1)


def _checked(tasks: Iterable[SolveTask]) -> Iterator[SolveTask]:
    # drawn one at a time by the engines (a batch's tasks may be produced as it goes)
    for task in tasks:
        if not isinstance(task, SolveTask):
            raise IncschedError(f"solve_many takes SolveTask items, got {type(task).__name__}")
        yield task
