"""Batch solving: many graph files, one problem recipe, one result file each.

Resumable by content: each result records the key it was solved for (the graph's content digest,
the recipe, the solve settings and incsched's version), and a stored result counts as done only
when its key matches and it re-checks against the graph with the one evaluator (assignment valid,
objective equal); ``unknown`` results are solved again. Resilient (a bad graph is reported and the
batch goes on), safe (results are written atomically) and tidy (workers die with the batch, and
Ctrl-C stops it keeping what is written).
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import inspect
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from .errors import FormatError, IncschedError
from .jsonio import json_bytes, write_json
from .result import Result

__all__ = ["ProblemRecipe", "BatchItem", "BatchInterrupted", "run_batch", "graph_files", "result_path", "batch_key"]

log = logging.getLogger(__name__)

GRAPH_SUFFIXES = (".json", ".json.gz", ".gml", ".gml.gz")
RESULT_SUFFIX = ".result.json"


@dataclass(frozen=True)
class ProblemRecipe:
    """How to turn any graph into a problem: picklable, so batch workers can rebuild it.

    ``kind`` is ``"stage"`` (``n_stages``, ``alpha`` or ``weights``, ``capacity``,
    ``spill_capacity``) or ``"placement"`` (``n_devices``, ``bandwidth``, ``latency``, or measured
    ``devices`` and ``links`` as ``incsched profile --links`` writes them); ``device_kind`` picks
    node times.
    """

    kind: str
    n_stages: int | None = None
    alpha: float = 100.0
    weights: dict[str, float] | None = None
    capacity: int | None = None
    n_devices: int | None = None
    bandwidth: float | None = None
    latency: float = 0.0
    device_kind: str = "cpu"
    devices: list[dict[str, Any]] | None = None  # measured devices and links (incsched profile --links)
    links: dict[str, Any] | None = None
    spill_capacity: int | None = None

    def build(self, graph):
        from .problems import ObjectiveWeights, PlacementProblem, StageProblem

        if self.kind == "stage":
            extra = {"spill_capacity": self.spill_capacity} if self.spill_capacity is not None else {}
            if self.weights:
                return StageProblem(graph, self.n_stages, ObjectiveWeights(**self.weights), comm="bytes", capacity=self.capacity,
                                    device_kind=self.device_kind, **extra)
            return StageProblem.peer(graph, n_stages=self.n_stages, alpha=self.alpha, capacity=self.capacity, device_kind=self.device_kind,
                                     **extra)
        if self.kind == "placement" and self.devices:
            from .problems import Device, Links

            return PlacementProblem(graph, [Device(**d) for d in self.devices], Links.from_dict(self.links or {}))
        if self.kind == "placement":
            return PlacementProblem.identical(graph, self.n_devices, kind=self.device_kind, latency=self.latency, bandwidth=self.bandwidth)
        raise ValueError(f"recipe kind must be 'stage' or 'placement', got {self.kind!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class BatchItem:
    """One graph's outcome: ``solved``, ``skipped`` (a stored result re-checked and kept),
    ``failed`` (with why) or ``interrupted`` (the batch was stopped before it)."""

    graph_file: str
    result_file: str
    outcome: str
    status: str | None = None
    objective: Any = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a batch; ``items`` are its outcomes so far (the rest ``interrupted``), and
    the summary ``batch.json`` has been written."""

    def __init__(self, items: list[BatchItem]):
        super().__init__("batch interrupted")
        self.items = items


def graph_files(folder: str | os.PathLike) -> list[Path]:
    """Graph files directly in ``folder``, sorted by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FormatError(f"{folder}: not a folder of graph files")
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(GRAPH_SUFFIXES))


def result_path(graph_file: Path, out_dir: Path) -> Path:
    """``out_dir/<file name>.result.json``: the whole name, so ``a.json``, ``a.json.gz`` and
    ``a.gml`` get results of their own."""
    return Path(out_dir) / f"{Path(graph_file).name}{RESULT_SUFFIX}"


def batch_key(graph, recipe: ProblemRecipe, solve_kwargs: dict[str, Any]) -> str:
    """The SHA-256 of what a batch result depends on: the graph's content (every node and edge
    attribute, whatever file format it came in), the recipe, the solve settings and incsched's
    version. A result stored under another key is solved again."""
    from . import __version__
    from .formats import graph_to_dict

    content = graph_to_dict(graph)
    content.pop("meta", None)  # provenance (source file name ...), not part of the problem
    settings = {**_solve_defaults(), **solve_kwargs}  # time_limit=5 and time_limit=5, seed=0 are one setting
    settings = {k: v for k, v in sorted(settings.items()) if v is None or isinstance(v, (str, int, float, bool))}
    record = {
        "graph_sha256": hashlib.sha256(json_bytes(content)).hexdigest(),
        "recipe": _canonical(recipe.to_dict()),
        "solve": _canonical(settings),
        "incsched": __version__,
    }
    return hashlib.sha256(json_bytes(record)).hexdigest()


def _canonical(x):
    # 5 and 5.0 are one setting (the CLI parses floats, the API takes ints)
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, dict):
        return {k: _canonical(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_canonical(v) for v in x]
    return x


def _solve_defaults() -> dict[str, Any]:
    from .solve import solve

    return {name: p.default for name, p in inspect.signature(solve).parameters.items() if p.default is not inspect.Parameter.empty}


# ---------------------------------------------------------------------- one graph (in a worker)


def _solve_one(graph_file: str, out_file: str, recipe: ProblemRecipe, solve_kwargs: dict) -> BatchItem:
    from .formats import load_graph
    from .solve import solve

    try:
        graph = load_graph(graph_file)
        problem = recipe.build(graph)
        key = batch_key(graph, recipe, solve_kwargs)
        stored, why_not = _stored_result(Path(out_file), problem, key)
        if stored is not None:
            return BatchItem(graph_file, out_file, "skipped", stored.status, _plain(stored.objective), extra={"key": key})
        if why_not:
            log.info("batch: %s: solving again (%s)", graph_file, why_not)
        result = solve(problem, **solve_kwargs)
        result = dataclasses.replace(result, provenance={**result.provenance, "batch_key": key, "graph_file": Path(graph_file).name})
        result.save(out_file)
        return BatchItem(graph_file, out_file, "solved", result.status, _plain(result.objective), extra={"key": key})
    except Exception as exc:  # noqa: BLE001 - one bad graph must not stop the batch; it is reported
        return BatchItem(graph_file, out_file, "failed", error=f"{type(exc).__name__}: {' '.join(str(exc).split())}")


def _stored_result(out_file: Path, problem, key: str) -> tuple[Result | None, str | None]:
    """The result at ``out_file`` if it still answers ``problem`` (same key, re-checked), else
    (None, why not)."""
    if not out_file.exists():
        return None, None
    try:
        stored = Result.load(out_file)
    except (IncschedError, OSError, TypeError, ValueError) as exc:
        return None, f"unreadable stored result: {exc}"  # atomic writes make this rare
    if not isinstance(stored.provenance, dict) or stored.provenance.get("batch_key") != key:
        return None, "stored for another graph content, recipe, solve setting or version"
    if stored.status == "unknown":
        return None, "stored status unknown: retried"
    if stored.status == "infeasible":
        return stored, None  # nothing to re-check; the same key gives the same verdict
    problem_kind = "stage" if hasattr(problem, "n_stages") else "placement"
    if stored.problem != problem_kind:
        return None, f"stored result is for a {stored.problem} problem"
    why = _recheck(stored, problem)
    return (stored, None) if why is None else (None, f"stored result does not re-check: {why}")


def _recheck(stored: Result, problem) -> str | None:
    """Why ``stored`` is not a valid answer of ``problem`` with its stated objective, or None."""
    n = problem.graph.n_nodes
    values = stored.stages if stored.problem == "stage" else stored.device
    if not isinstance(values, list) or len(values) != n or not all(type(v) is int for v in values):  # noqa: E721 - no bools
        return f"{'stages' if stored.problem == 'stage' else 'device'} is not a list of {n} whole numbers"
    try:
        if stored.problem == "stage":
            from .evaluate.stage import evaluate_stages

            ev = evaluate_stages(problem, values)
            if not ev.feasible:
                return f"infeasible assignment ({ev.violations[0] if ev.violations else 'violations'})"
            objective = ev.objective
        else:
            from .evaluate.simulate import simulate
            from .problems import Placement

            sched = simulate(problem, Placement(values, stored.order), "ordered")
            if sched.memory_violations:
                return f"device memory exceeded ({sched.memory_violations[0]})"
            objective = int(sched.makespan)
    except (IncschedError, TypeError, ValueError) as exc:
        return str(exc)
    if not _same_number(objective, stored.objective):
        return f"objective re-evaluates to {objective}, not the stored {stored.objective}"
    return None


def _same_number(exact, stored) -> bool:
    if stored is None or isinstance(stored, bool):
        return False
    try:
        if isinstance(stored, str):
            stored = Fraction(stored)
        if isinstance(stored, float) or isinstance(exact, float):
            return float(exact) == float(stored)  # a float was written for it: equal as floats
        return Fraction(exact) == Fraction(stored)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        return False


def _plain(x):
    # BatchItem goes into batch.json: an exact Fraction objective is written as its decimal text.
    return str(x) if isinstance(x, Fraction) else x


# ---------------------------------------------------------------------- workers die with the batch

_PR_SET_PDEATHSIG = 1


def _worker_init(parent_pid: int) -> None:
    """Runs first in each worker: die when the batch process dies, leave Ctrl-C to the batch.

    ``kill -9`` of the batch cannot run any clean-up, so each worker asks Linux to SIGKILL it
    when its parent dies (prctl PR_SET_PDEATHSIG), and a thread polls the parent's pid as a
    fallback where prctl is missing (it also covers a parent that died before prctl ran).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the batch handles Ctrl-C and stops the workers
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
    # Workers ignore SIGINT; what they have written is whole (atomic), what they are solving is lost.
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            proc.kill()
        except (OSError, ValueError, AttributeError):
            pass
    pool.shutdown(wait=True, cancel_futures=True)


# ---------------------------------------------------------------------- the batch


def run_batch(
    files: Iterable[str | os.PathLike],
    out_dir: str | os.PathLike,
    recipe: ProblemRecipe,
    *,
    jobs: int = 1,
    progress: Callable[[BatchItem, int, int], None] | None = None,
    **solve_kwargs: Any,
) -> list[BatchItem]:
    """Solve each graph file into ``out_dir/<file name>.result.json``; write ``out_dir/batch.json``.

    A result already there is kept (``skipped``) only if it was solved for this graph content,
    recipe, solve settings and incsched version, is not ``unknown``, and re-checks against the
    graph (valid assignment, equal objective); otherwise the graph is solved again.

    Parameters
    ----------
    files : iterable of paths
        Graph files (any format `load_graph` reads), with distinct file names.
    out_dir : path
        Where results go; created if missing.
    recipe : ProblemRecipe
        The problem every graph is turned into.
    jobs : int
        Graphs solved at once, in separate processes (1: in this process). Workers die with this
        process, even on ``kill -9``.
    progress : callable, optional
        Called as ``progress(item, done, total)`` after each graph.
    **solve_kwargs
        Passed to `incsched.solve` (method, time_limit, seed, deterministic, workers).

    Returns
    -------
    list of BatchItem
        In the order of ``files``; failures carry the error message.

    Raises
    ------
    BatchInterrupted
        On Ctrl-C (a KeyboardInterrupt): workers are stopped, written results kept, and
        ``batch.json`` written with the items not finished marked ``interrupted``.
    FormatError
        If two files share a name (their results would share a file).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = [Path(f) for f in files]
    seen: dict[str, Path] = {}
    for f in files:
        if f.name in seen:
            raise FormatError(f"{seen[f.name]} and {f}: two graph files named {f.name!r} would share one result file")
        seen[f.name] = f
    items: dict[int, BatchItem] = {}
    todo = [(i, f, result_path(f, out)) for i, f in enumerate(files)]
    total, finished = len(files), 0

    def record(i: int, item: BatchItem) -> None:
        nonlocal finished
        items[i] = item
        finished += 1
        if item.outcome == "failed":
            log.info("batch: %s failed: %s", item.graph_file, item.error)
        if progress:
            progress(item, finished, total)

    interrupted = False
    try:
        if jobs <= 1 or len(todo) <= 1:
            for i, f, target in todo:
                record(i, _solve_one(str(f), str(target), recipe, solve_kwargs))
        else:
            pool = ProcessPoolExecutor(max_workers=min(jobs, len(todo)), initializer=_worker_init, initargs=(os.getpid(),))
            try:
                futures = {pool.submit(_solve_one, str(f), str(target), recipe, solve_kwargs): (i, f, target) for i, f, target in todo}
                for fut in as_completed(futures):
                    i, f, target = futures[fut]
                    try:
                        item = fut.result()
                    except Exception as exc:  # noqa: BLE001 - a worker that died (killed, out of memory)
                        item = BatchItem(str(f), str(target), "failed", error=f"{type(exc).__name__}: {exc}")
                    record(i, item)
            except BaseException:
                _stop_workers(pool)
                raise
            pool.shutdown(wait=True)
    except KeyboardInterrupt:
        interrupted = True
        _remove_partial_writes(out, files)
    ordered = [items.get(i) or BatchItem(str(f), str(t), "interrupted") for i, f, t in todo]
    write_json(
        out / "batch.json",
        {
            "recipe": recipe.to_dict(),
            "solve": {k: v for k, v in solve_kwargs.items() if v is None or isinstance(v, (str, int, float, bool))},
            "interrupted": interrupted,
            "items": [dataclasses.asdict(it) for it in ordered],
        },
        indent=1,
    )
    if interrupted:
        raise BatchInterrupted(ordered)
    return ordered


def _remove_partial_writes(out: Path, files: list[Path]) -> None:
    # A killed worker can leave the temporary file of an atomic write (never a partial result).
    prefixes = tuple(f".{result_path(f, out).name}." for f in files)
    for tmp in out.iterdir():
        if tmp.name.startswith(prefixes) and tmp.name.endswith(".tmp"):
            try:
                tmp.unlink()
            except OSError:
                pass
