"""One solve as a unit of work that can travel: a graph file's bytes and a recipe in, JSON out.

Every engine (local processes, Ray) runs `run_task` in its worker and rebuilds the `TaskOutcome`
in the driver with `outcome_from_reply`, so a result is the same whichever engine solved it and
nothing but bytes and JSON crosses a process or machine boundary (no shared filesystem).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import tempfile
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from ..jsonio import json_bytes
from ..result import Result

__all__ = ["ProblemRecipe", "SolveTask", "TaskOutcome", "batch_key", "run_task", "outcome_from_reply", "failed_outcome", "MAX_RETRIES"]

#: Times a task is run again when its worker process dies (on every engine); bad input is never retried.
MAX_RETRIES = 3


@dataclass(frozen=True)
class ProblemRecipe:
    """How to turn any graph into a problem: picklable, so batch workers can rebuild it.

    ``kind`` is ``"stage"`` (``n_stages``, ``alpha`` or ``weights``, ``capacity``,
    ``spill_capacity``; ``objective`` ``"memory"`` for mem_peak alone, or ``"throughput"`` for
    `StageProblem.pipeline` with ``memory``, ``bandwidth``, ``micro_batches`` and ``training``, the
    keywords of its training mode: ``{"optimizer": ..., "schedule": ..., "recompute": ...}``) or
    ``"placement"`` (``n_devices``, ``bandwidth``, ``latency``, or measured ``devices`` and
    ``links`` as ``incsched profile --links`` writes them); ``device_kind`` picks node times.
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
    objective: str = "peer"  # stage: "peer" (alpha or weights), "memory" or "throughput"
    memory: int | None = None  # throughput: per-stage parameters plus the activations 1F1B keeps
    micro_batches: int = 4  # throughput: micro-batches per run
    training: dict[str, Any] | None = None  # throughput: mode="training" with these optimizer / schedule / recompute

    def build(self, graph):
        from ..problems import ObjectiveWeights, PlacementProblem, StageProblem

        if self.kind == "stage" and self.objective == "memory":
            return StageProblem(graph, self.n_stages, ObjectiveWeights(mem_peak=1), capacity=self.capacity, device_kind=self.device_kind)
        if self.kind == "stage" and self.objective == "throughput":
            mode = {"mode": "training", **self.training} if self.training is not None else {}
            return StageProblem.pipeline(graph, self.n_stages, memory=self.memory, bandwidth=self.bandwidth, micro_batches=self.micro_batches,
                                         capacity=self.capacity, device_kind=self.device_kind, **mode)
        if self.kind == "stage" and self.objective != "peer":
            raise ValueError(f"recipe objective must be 'peer', 'memory' or 'throughput', got {self.objective!r}")
        if self.kind == "stage":
            extra = {"spill_capacity": self.spill_capacity} if self.spill_capacity is not None else {}
            if self.weights:
                return StageProblem(graph, self.n_stages, ObjectiveWeights(**self.weights), comm="bytes", capacity=self.capacity,
                                    device_kind=self.device_kind, **extra)
            return StageProblem.peer(graph, n_stages=self.n_stages, alpha=self.alpha, capacity=self.capacity, device_kind=self.device_kind,
                                     **extra)
        if self.kind == "placement" and self.devices:
            from ..problems import Device, Links

            return PlacementProblem(graph, [Device(**d) for d in self.devices], Links.from_dict(self.links or {}))
        if self.kind == "placement":
            return PlacementProblem.identical(graph, self.n_devices, kind=self.device_kind, latency=self.latency, bandwidth=self.bandwidth)
        raise ValueError(f"recipe kind must be 'stage' or 'placement', got {self.kind!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: Recipe fields added after batches were first keyed, with their defaults: left out of the key
#: at those defaults, so that results stored before (every peer-objective batch) are not solved again.
_LATER_FIELDS = {"objective": "peer", "memory": None, "micro_batches": 4, "training": None}


def batch_key(graph, recipe: ProblemRecipe, solve_kwargs: dict[str, Any], *, untimed: bool = False) -> str:
    """The SHA-256 of what a batch result depends on: the graph's content (every node and edge
    attribute, whatever file format it came in), the recipe, the solve settings and incsched's
    version. A result stored under another key is solved again.

    ``untimed=True`` leaves the time limit out of the settings: the key under which a proven
    result (``optimal``, or ``infeasible`` with a finished proof) is kept whatever the time limit.
    The work limit, seed, method and the rest stay in, so a kept result is still the one a rerun
    with the settings in its provenance (its own time limit among them) repeats.
    """
    from .. import __version__
    from ..formats import graph_to_dict

    content = graph_to_dict(graph)
    content.pop("meta", None)  # provenance (source file name ...), not part of the problem
    settings = {**_solve_defaults(), **solve_kwargs}  # time_limit=5 and time_limit=5, seed=0 are one setting
    if untimed:
        settings.pop("time_limit")
    settings = {k: v for k, v in sorted(settings.items()) if v is None or isinstance(v, (str, int, float, bool))}
    record = {
        "graph_sha256": hashlib.sha256(json_bytes(content)).hexdigest(),
        "recipe": _canonical({k: v for k, v in recipe.to_dict().items() if k not in _LATER_FIELDS or v != _LATER_FIELDS[k]}),
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
    from ..front_door import solve

    return {name: p.default for name, p in inspect.signature(solve).parameters.items() if p.default is not inspect.Parameter.empty}


@dataclass(frozen=True)
class SolveTask:
    """One solve, self-contained: it carries the graph file's bytes, so no shared filesystem is needed.

    Attributes
    ----------
    key : str
        The caller's identity for the task (e.g. digest + recipe + method + seed); outcomes carry it back.
    graph : bytes
        The graph file's bytes (.json, .json.gz, .gml).
    graph_name : str
        File name used for type detection and messages, e.g. ``"resnet50.json.gz"``.
    recipe : ProblemRecipe
    solve_kwargs : dict
        Passed to `incsched.front_door` (method, time_limit, work_limit, seed, workers, deterministic ...).
    record_progress : bool
        Collect every ``on_progress`` event of the solve.
    """

    key: str
    graph: bytes
    graph_name: str
    recipe: ProblemRecipe
    solve_kwargs: dict = field(default_factory=dict)
    record_progress: bool = False

    @property
    def cpus(self) -> int:
        """CPU cores the solve keeps busy: its CP-SAT workers (one when deterministic)."""
        kw = {**_solve_defaults(), **self.solve_kwargs}
        return 1 if kw.get("deterministic", True) else max(int(kw.get("workers") or 1), 1)


@dataclass
class TaskOutcome:
    """What became of a `SolveTask`.

    ``result`` is None when the task failed, and ``error`` then says why in one line (bad input, or
    a worker that kept dying); ``progress`` holds the ``on_progress`` events (phase, objective,
    lower_bound, gap, elapsed) when the task asked for them; ``seconds`` is the solve's wall time
    in the worker; ``node`` is where it ran ("local" for local processes, the Ray node id on Ray).
    The solved result's provenance carries ``batch_key`` (graph content, recipe, settings, version)
    and ``batch_key_untimed`` (the same without the time limit).
    """

    task: SolveTask
    result: Result | None
    error: str | None
    progress: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    node: str = "local"


def run_task(task: SolveTask, node: str = "local") -> dict[str, Any]:
    """Solve ``task`` in this process; the reply is plain JSON data (see `outcome_from_reply`).

    Never raises for bad input: a graph that does not load, a recipe that does not fit it, or a
    solve that fails is the reply's ``error``, so that an engine does not retry it.
    """
    from ..front_door import solve

    start = time.perf_counter()
    progress: list[dict] = []
    try:
        graph = _load_graph_bytes(task.graph, task.graph_name)
        problem = task.recipe.build(graph)
        keys = {"batch_key": batch_key(graph, task.recipe, task.solve_kwargs),
                "batch_key_untimed": batch_key(graph, task.recipe, task.solve_kwargs, untimed=True)}
        on_progress = (lambda p: progress.append(_progress_event(p))) if task.record_progress else None
        result = solve(problem, **task.solve_kwargs, on_progress=on_progress)
        result = dataclasses.replace(result, provenance={**result.provenance, **keys, "graph_file": task.graph_name})
        reply = {"result": result.to_json(), "error": None}
    except Exception as exc:  # noqa: BLE001 - one bad item must not stop the batch; it is reported
        reply = {"result": None, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}
    return {**reply, "progress": progress, "seconds": time.perf_counter() - start, "node": node}


def outcome_from_reply(task: SolveTask, reply: dict[str, Any]) -> TaskOutcome:
    """The driver's side of `run_task`: the reply's JSON made a `TaskOutcome` again."""
    result = None if reply["result"] is None else Result.from_json(reply["result"], source=f"result of {task.graph_name}")
    return TaskOutcome(task, result, reply["error"], reply["progress"], reply["seconds"], reply["node"])


def failed_outcome(task: SolveTask, error: str, node: str = "local") -> TaskOutcome:
    """A task that never produced a reply (its worker died for good)."""
    return TaskOutcome(task, None, " ".join(error.split()), [], 0.0, node)


def _load_graph_bytes(data: bytes, name: str):
    """`load_graph` on bytes: written under ``name`` in a private folder, so the reader, its
    limits and its checks are the file path's own; messages name ``name``, not the folder."""
    from ..formats import load_graph

    if Path(name).name != name or name in ("", ".", ".."):
        raise ValueError(f"graph_name must be a plain file name, got {name!r}")
    with tempfile.TemporaryDirectory(prefix="incsched-task-") as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        try:
            return load_graph(path)
        except Exception as exc:
            exc.args = tuple(a.replace(str(path), name) if isinstance(a, str) else a for a in exc.args)
            if isinstance(exc, OSError) and exc.filename:
                exc.filename = name
            raise


def _progress_event(p) -> dict[str, Any]:
    return {"phase": p.phase, "objective": _json_exact(p.objective), "lower_bound": _json_exact(p.lower_bound), "gap": p.gap,
            "elapsed": p.elapsed}


def _json_exact(x):
    return str(x) if isinstance(x, Fraction) else x

