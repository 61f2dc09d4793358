"""Batch solving: many graph files, one problem recipe, one result file each.

Resumable by content: each result records the key it was solved for (the graph's content digest,
the recipe, the solve settings and incsched's version), and a stored result counts as done only
when its key matches and it re-checks against the graph with the one evaluator (assignment valid,
objective equal); ``unknown`` results are solved again. A proven result (optimal, or proven
infeasible) also counts as done when only the time limit changed: its key without the time limit
matches. Resilient (a bad graph is reported and the batch goes on), safe (results are written
atomically, by this process only: workers send them back as JSON) and tidy (workers die with the
batch, and Ctrl-C stops it keeping what is written).
The solving itself is `solve_many`'s, on local processes or on Ray.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from ..errors import FormatError, IncschedError
from ..formats import GRAPH_SUFFIXES
from ..jsonio import write_json
from ..result import Result
from .engines import solve_many
from .tasks import ProblemRecipe, SolveTask, TaskOutcome, batch_key

__all__ = ["BatchItem", "BatchInterrupted", "run_batch", "graph_files", "left_out", "not_a_file", "result_path"]

log = logging.getLogger(__name__)

RESULT_SUFFIX = ".result.json"


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
    """Entries directly in ``folder`` named like graph files (`incsched.formats.GRAPH_SUFFIXES`:
    ``.json``, ``.gml``, ``.onnx``, each also gzipped), sorted by name.

    Those that are not readable files (a folder named ``x.json``, a broken symbolic link, a link
    loop: `not_a_file`) are listed too, so that a batch reports each as failed, with why, instead
    of leaving it out without a word. The other entries are `left_out`'s.
    """
    return sorted(p for p in _entries(folder) if p.name.endswith(GRAPH_SUFFIXES))


def left_out(folder: str | os.PathLike) -> list[tuple[Path, str]]:
    """The entries directly in ``folder`` that `graph_files` leaves out, each with why, sorted by name.

    >>> import tempfile; from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as d:
    ...     (Path(d) / "notes.txt").write_text("")
    ...     [why for _, why in left_out(d)]
    0
    ['unknown extension .txt (graph files end in .json, .json.gz, .gml, .gml.gz, .onnx, .onnx.gz)']
    """
    out = []
    for path in sorted(p for p in _entries(folder) if not p.name.endswith(GRAPH_SUFFIXES)):
        if path.is_dir():
            why = "a folder (a batch reads the files directly in its folder)"
        else:
            ending = f"unknown extension {path.suffix}" if path.suffix and path.suffix != path.name else "no extension"
            why = f"{ending} (graph files end in {', '.join(GRAPH_SUFFIXES)})"
        out.append((path, why))
    return out


def _entries(folder: str | os.PathLike) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise FormatError(f"{folder}: not a folder of graph files")
    return list(folder.iterdir())


def not_a_file(path: Path) -> str | None:
    """Why ``path`` is not a file a graph can be read from (a folder, a broken symbolic link, a
    link loop, a device or pipe), or None when it is one."""
    path = Path(path)
    try:
        path.stat()
    except FileNotFoundError:
        return "a broken symbolic link" if path.is_symlink() else "gone (removed while the batch ran)"
    except OSError as exc:  # ELOOP and friends
        return "a symbolic link loop" if path.is_symlink() else f"unreadable ({exc.strerror or exc})"
    if path.is_dir():
        return "a folder, not a graph file"
    if not path.is_file():
        return "not a regular file (a device, pipe or socket)"
    return None


def result_path(graph_file: Path, out_dir: Path) -> Path:
    """``out_dir/<file name>.result.json``: the whole name, so ``a.json``, ``a.json.gz`` and
    ``a.gml`` get results of their own."""
    return Path(out_dir) / f"{Path(graph_file).name}{RESULT_SUFFIX}"


# ---------------------------------------------------------------------- stored results (in the driver)


def _stored_result(out_file: Path, problem, key: str, untimed_key: str) -> tuple[Result | None, str | None]:
    """The result at ``out_file`` if it still answers ``problem`` (same key, or same key but the
    time limit when it is proven; re-checked), else (None, why not)."""
    if not out_file.exists():
        return None, None
    try:
        stored = Result.load(out_file)
    except (IncschedError, OSError, TypeError, ValueError) as exc:
        return None, f"unreadable stored result: {exc}"  # atomic writes make this rare
    provenance = stored.provenance if isinstance(stored.provenance, dict) else {}
    if provenance.get("batch_key") != key:
        if provenance.get("batch_key_untimed") != untimed_key:
            return None, "stored for another graph content, recipe, solve setting or version"
        if not _proven(stored):
            return None, f"stored {stored.status} under another time limit: solved again"
    if stored.status == "unknown":
        return None, "stored status unknown: retried"
    if stored.status == "infeasible":
        return stored, None  # nothing to re-check; the same key gives the same verdict
    problem_kind = "stage" if hasattr(problem, "n_stages") else "placement"
    if stored.problem != problem_kind:
        return None, f"stored result is for a {stored.problem} problem"
    why = _recheck(stored, problem)
    return (stored, None) if why is None else (None, f"stored result does not re-check: {why}")


def _proven(stored: Result) -> bool:
    """Whether ``stored`` holds under any time limit: optimal, or infeasible with a finished proof."""
    return stored.status == "optimal" or (stored.status == "infeasible" and stored.stop_reason == "optimal")


def _recheck(stored: Result, problem) -> str | None:
    """Why ``stored`` is not a valid answer of ``problem`` with its stated objective, or None."""
    n = problem.graph.n_nodes
    values = stored.stages if stored.problem == "stage" else stored.device
    if not isinstance(values, list) or len(values) != n or not all(type(v) is int for v in values):  # noqa: E721 - no bools
        return f"{'stages' if stored.problem == 'stage' else 'device'} is not a list of {n} whole numbers"
    try:
        if stored.problem == "stage":
            from ..evaluate.stage import evaluate_stages

            ev = evaluate_stages(problem, values)
            if not ev.feasible:
                return f"infeasible assignment ({ev.violations[0] if ev.violations else 'violations'})"
            objective = ev.objective
        else:
            from ..evaluate.simulate import simulate
            from ..problems import Placement

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


# ---------------------------------------------------------------------- the batch


def run_batch(
    files: Iterable[str | os.PathLike],
    out_dir: str | os.PathLike,
    recipe: ProblemRecipe,
    *,
    jobs: int | None = 1,
    engine: str = "local",
    address: str | None = None,
    progress: Callable[[BatchItem, int, int], None] | None = None,
    **solve_kwargs: Any,
) -> list[BatchItem]:
    """Solve each graph file into ``out_dir/<file name>.result.json``; write ``out_dir/batch.json``.

    A result already there is kept (``skipped``) only if it was solved for this graph content,
    recipe, solve settings and incsched version, is not ``unknown``, and re-checks against the
    graph (valid assignment, equal objective); otherwise the graph is solved again. A proven
    result (``optimal``, or ``infeasible`` with a finished proof) is kept under another time limit
    too; its provenance keeps the time limit it was solved under. The keys are the same on every
    engine, so a batch begun on one resumes on the other.

    Parameters
    ----------
    files : iterable of paths
        Graph files (any format `load_graph` reads), with distinct file names.
    out_dir : path
        Where results go; created if missing. Only this process writes there (atomically), so
        workers need no shared filesystem.
    recipe : ProblemRecipe
        The problem every graph is turned into.
    jobs : int, optional
        ``local``: graphs solved at once, in separate processes (1: in this process); workers die
        with this process, even on ``kill -9``. ``ray``: see `solve_many`'s ``workers``.
    engine : {"local", "ray"}
    address : str, optional
        A running Ray cluster to join (``engine="ray"``).
    progress : callable, optional
        Called as ``progress(item, done, total)`` after each graph.
    **solve_kwargs
        Passed to `incsched.front_door` (method, time_limit, seed, deterministic, workers).

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
    IncschedError
        A bad engine, address or jobs (before anything is solved).
    """
    out = Path(out_dir)
    files = [Path(f) for f in files]
    seen: dict[str, Path] = {}
    for f in files:
        if f.name in seen:
            raise FormatError(f"{seen[f.name]} and {f}: two graph files named {f.name!r} would share one result file")
        seen[f.name] = f
    out.mkdir(parents=True, exist_ok=True)
    items: dict[int, BatchItem] = {}
    total = len(files)

    def record(i: int, item: BatchItem) -> None:
        items[i] = item
        if item.outcome == "failed":
            log.info("batch: %s failed: %s", item.graph_file, item.error)
        if progress:
            progress(item, len(items), total)

    def tasks():
        # made as the engine asks for more: stored results are re-checked while workers solve
        for i, f in enumerate(files):
            task_or_item = _task_unless_done(i, f, result_path(f, out), recipe, solve_kwargs)
            if isinstance(task_or_item, BatchItem):
                record(i, task_or_item)
            else:
                yield task_or_item

    interrupted = False
    try:
        workers = jobs if engine == "ray" else jobs or 1
        with contextlib.closing(solve_many(tasks(), engine=engine, workers=workers, address=address)) as outcomes:
            for outcome in outcomes:
                i = int(outcome.task.key)
                record(i, _written(outcome, files[i], result_path(files[i], out)))
    except KeyboardInterrupt:
        interrupted = True
    ordered = [items.get(i) or BatchItem(str(f), str(result_path(f, out)), "interrupted") for i, f in enumerate(files)]
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


def _task_unless_done(i: int, graph_file: Path, out_file: Path, recipe: ProblemRecipe, solve_kwargs: dict) -> SolveTask | BatchItem:
    """The task that solves ``graph_file``, or its item when a stored result still answers it
    (``skipped``) or the file cannot be read (``failed``)."""
    why = not_a_file(graph_file)
    if why is not None:
        log.warning("batch: %s: %s; reported as failed", graph_file, why)
        return BatchItem(str(graph_file), str(out_file), "failed", error=why)
    try:
        data = graph_file.read_bytes()
        if out_file.exists():  # only then is the graph parsed here: to key and re-check what is stored
            from ..formats import load_graph

            graph = load_graph(graph_file)
            problem = recipe.build(graph)
            key = batch_key(graph, recipe, solve_kwargs)
            stored, why_not = _stored_result(out_file, problem, key, batch_key(graph, recipe, solve_kwargs, untimed=True))
            if stored is not None:
                extra = {"key": key}
                if stored.provenance.get("batch_key") != key:  # proven under another time limit
                    extra = {"key": stored.provenance.get("batch_key"), "time_limit": stored.provenance.get("time_limit")}
                return BatchItem(str(graph_file), str(out_file), "skipped", stored.status, _plain(stored.objective), extra=extra)
            log.info("batch: %s: solving again (%s)", graph_file, why_not)
    except Exception as exc:  # noqa: BLE001 - one bad graph must not stop the batch; it is reported
        return BatchItem(str(graph_file), str(out_file), "failed", error=f"{type(exc).__name__}: {' '.join(str(exc).split())}")
    return SolveTask(str(i), data, graph_file.name, recipe, dict(solve_kwargs))


def _written(outcome: TaskOutcome, graph_file: Path, out_file: Path) -> BatchItem:
    """``outcome`` written to ``out_file`` (by this process, atomically) and summed up as an item."""
    where = {"node": outcome.node, "seconds": round(outcome.seconds, 3)}
    if outcome.result is None:
        return BatchItem(str(graph_file), str(out_file), "failed", error=outcome.error, extra=where)
    result = outcome.result
    try:
        result.save(out_file)
    except OSError as exc:
        return BatchItem(str(graph_file), str(out_file), "failed", error=f"cannot write the result: {exc}", extra=where)
    return BatchItem(str(graph_file), str(out_file), "solved", result.status, _plain(result.objective),
                     extra={"key": result.provenance["batch_key"], **where})
