"""Batch solving: many graph files, one problem recipe, one result file each.

Resumable (a result already written and readable is kept), resilient (a bad graph is reported and
the batch goes on) and safe (results are written atomically, so an interrupted batch leaves either a
whole result or none).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import FormatError
from .jsonio import write_json
from .result import Result

__all__ = ["ProblemRecipe", "BatchItem", "run_batch", "graph_files", "result_path"]

log = logging.getLogger(__name__)

GRAPH_SUFFIXES = (".json", ".json.gz", ".gml", ".gml.gz")


@dataclass(frozen=True)
class ProblemRecipe:
    """How to turn any graph into a problem: picklable, so batch workers can rebuild it.

    ``kind`` is ``"stage"`` (``n_stages``, ``alpha`` or ``weights``, ``capacity``) or
    ``"placement"`` (``n_devices``, ``bandwidth``, ``latency``, or measured ``devices`` and ``links``
    as ``incsched profile --links`` writes them); ``device_kind`` picks node times.
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

    def build(self, graph):
        from .problems import ObjectiveWeights, PlacementProblem, StageProblem

        if self.kind == "stage":
            if self.weights:
                return StageProblem(graph, self.n_stages, ObjectiveWeights(**self.weights), comm="bytes", capacity=self.capacity, device_kind=self.device_kind)
            return StageProblem.peer(graph, n_stages=self.n_stages, alpha=self.alpha, capacity=self.capacity, device_kind=self.device_kind)
        if self.kind == "placement" and self.devices:
            from .problems.placement import Device, Links

            return PlacementProblem(graph, [Device(**d) for d in self.devices], Links.from_dict(self.links or {}))
        if self.kind == "placement":
            return PlacementProblem.identical(graph, self.n_devices, kind=self.device_kind, latency=self.latency, bandwidth=self.bandwidth)
        raise ValueError(f"recipe kind must be 'stage' or 'placement', got {self.kind!r}")


@dataclass
class BatchItem:
    """One graph's outcome: ``solved``, ``skipped`` (result already there) or ``failed`` (with why)."""

    graph_file: str
    result_file: str
    outcome: str
    status: str | None = None
    objective: float | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def graph_files(folder: str | os.PathLike) -> list[Path]:
    """Graph files directly in ``folder``, sorted by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FormatError(f"{folder}: not a folder of graph files")
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(GRAPH_SUFFIXES))


def result_path(graph_file: Path, out_dir: Path) -> Path:
    stem = graph_file.name
    for suffix in GRAPH_SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return out_dir / f"{stem}.result.json"


def _solve_one(graph_file: str, out_file: str, recipe: ProblemRecipe, solve_kwargs: dict) -> BatchItem:
    from .formats import load_graph
    from .solve import solve

    try:
        problem = recipe.build(load_graph(graph_file))
        result = solve(problem, **solve_kwargs)
        result.save(out_file)
        return BatchItem(graph_file, out_file, "solved", result.status, result.objective)
    except Exception as exc:  # noqa: BLE001 - one bad graph must not stop the batch; it is reported
        return BatchItem(graph_file, out_file, "failed", error=f"{type(exc).__name__}: {exc}")


def _already_done(out_file: Path) -> Result | None:
    if not out_file.exists():
        return None
    try:
        return Result.load(out_file)
    except (FormatError, OSError, TypeError, ValueError):
        return None  # unreadable: solve again (atomic writes make this rare)


def run_batch(
    files: Iterable[str | os.PathLike],
    out_dir: str | os.PathLike,
    recipe: ProblemRecipe,
    *,
    jobs: int = 1,
    progress: Callable[[BatchItem, int, int], None] | None = None,
    **solve_kwargs: Any,
) -> list[BatchItem]:
    """Solve each graph file into ``out_dir/<name>.result.json``; write ``out_dir/batch.json``.

    Parameters
    ----------
    files : iterable of paths
        Graph files (any format `load_graph` reads).
    out_dir : path
        Where results go; created if missing.
    recipe : ProblemRecipe
        The problem every graph is turned into.
    jobs : int
        Graphs solved at once, in separate processes (1: in this process).
    progress : callable, optional
        Called as ``progress(item, done, total)`` after each graph.
    **solve_kwargs
        Passed to `incsched.solve` (method, time_limit, seed, deterministic, workers).

    Returns
    -------
    list of BatchItem
        In the order of ``files``; failures carry the error message.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = [Path(f) for f in files]
    items: dict[int, BatchItem] = {}
    todo = []
    for i, f in enumerate(files):
        target = result_path(f, out)
        done = _already_done(target)
        if done is not None:
            items[i] = BatchItem(str(f), str(target), "skipped", done.status, done.objective)
        else:
            todo.append((i, f, target))
    total, finished = len(files), 0
    for i in sorted(items):
        finished += 1
        if progress:
            progress(items[i], finished, total)

    def record(i: int, item: BatchItem) -> None:
        nonlocal finished
        items[i] = item
        finished += 1
        if item.outcome == "failed":
            log.info("batch: %s failed: %s", item.graph_file, item.error)
        if progress:
            progress(item, finished, total)

    if jobs <= 1 or len(todo) <= 1:
        for i, f, target in todo:
            record(i, _solve_one(str(f), str(target), recipe, solve_kwargs))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(_solve_one, str(f), str(target), recipe, solve_kwargs): i for i, f, target in todo}
            for fut in as_completed(futures):
                record(futures[fut], fut.result())
    ordered = [items[i] for i in range(len(files))]
    write_json(
        out / "batch.json",
        {"recipe": recipe.__dict__, "solve": solve_kwargs, "items": [it.__dict__ for it in ordered]},
        indent=1,
    )
    return ordered
