"""Run an experiment: expand its config into cells (graph x problem x method x seed x repeat), solve
them through the batch engine (executions and trainings run in the driver: `execution`,
`training`), and write one row per cell to ``DIR/rows.jsonl``.

Each row carries its provenance (code, libraries, machine, load, command, config hash, seed, what
stopped the solve) and is written atomically, so a killed run leaves whole rows only. A rerun
keeps a row only when its key still matches: the graph's content digest, the problem recipe, the
method and its budget, the seed, the repeat and incsched's version; anything else is run again.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..batch import ENGINES, ProblemRecipe, SolveTask, batch_key, graph_files, not_a_file, solve_many
from ..errors import IncschedError
from ..jsonio import atomic_write_bytes, json_bytes, read_json, write_json
from .cells import Cell, cell_key
from .config import Experiment, GraphSpec, ProblemSpec, check_grid_size, method_kinds
from .provenance import environment, load_average, utc_now

__all__ = ["plan", "run_experiment", "read_rows", "row_problem", "RowLog", "ROWS_FILE", "EXPERIMENT_FILE"]

log = logging.getLogger(__name__)

ROWS_FILE = "rows.jsonl"
EXPERIMENT_FILE = "experiment.json"

#: Rows keep the answer (stages, or devices, orders and starts) of graphs up to this size: the
#: report draws splits and Gantt charts from them; a 10,000-node answer would only bloat the file.
ANSWER_MAX_NODES = 2000


@dataclass
class Plan:
    cells: list[Cell]
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------- graphs and cells


def _graphs(spec: GraphSpec, base_dir: Path, notes: list[str]) -> Iterator[tuple[str, Any]]:
    """(source, CompGraph) for each graph a spec names."""
    from ..formats import load_graph

    if spec.source == "shipped":
        from ..data import shipped_graph_path

        for name in spec.names:
            yield f"shipped:{name}", load_graph(shipped_graph_path(name))
    elif spec.source == "generated":
        from .. import generators

        make = getattr(generators, spec.generator)
        for seed in spec.seeds:
            g = make(**spec.args, seed=seed)
            args = ",".join(f"{k}={v}" for k, v in sorted(spec.args.items()))
            yield f"{spec.generator}({args}{',' if args else ''}seed={seed})", g
    else:
        folder = Path(spec.folder).expanduser()
        folder = folder if folder.is_absolute() else base_dir / folder
        if not folder.is_dir():
            if spec.optional:
                notes.append(f"skipped {spec.folder}: no such folder (optional)")
                return
            raise IncschedError(f"{spec.folder}: no such folder of graph files (resolved to {folder})")
        files = [f for f in graph_files(folder) if f.match(spec.pattern)]
        if not files:
            notes.append(f"no graph file in {spec.folder} matches {spec.pattern!r}")
        for f in files:
            why = not_a_file(f)
            if why is not None:  # named in the run's notes (experiment.json, the report), never left out silently
                notes.append(f"skipped {spec.folder}/{f.name}: {why}")
                log.warning("%s: %s; skipped", f, why)
                continue
            yield f"{spec.folder}/{f.name}", load_graph(f)


def _recipes(spec: ProblemSpec, graph) -> Iterator[tuple[str, ProblemRecipe]]:
    if spec.kind == "stage":
        for k in spec.stages:
            label = f"K={k}" if spec.objective == "peer" else f"K={k} {spec.objective}"  # two objectives, two rows per graph
            yield label, ProblemRecipe("stage", n_stages=k, alpha=spec.alpha, weights=spec.weights, capacity=spec.capacity,
                                          objective=spec.objective, memory=spec.memory, bandwidth=spec.bandwidth,
                                          micro_batches=spec.micro_batches)
    else:
        from ..generators import bandwidth_for_comm_ratio

        for d in spec.devices:
            bandwidth = spec.bandwidth
            if spec.comm_ratio is not None:  # per graph: a mean transfer costs comm_ratio mean ops
                bandwidth = bandwidth_for_comm_ratio(graph, spec.comm_ratio, "cpu", latency=spec.latency)
            yield f"D={d}", ProblemRecipe("placement", n_devices=d, bandwidth=bandwidth, latency=spec.latency)


def plan(exp: Experiment) -> Plan:
    """Every solve cell of ``exp``, keyed; graphs are loaded (or generated) here, in the driver.

    Raises
    ------
    ConfigError
        If the files of its folders make the grid larger than ``INCSCHED_MAX_EXPERIMENT_CELLS``
        (`check_grid_size`; the rest of the grid was counted when the config was loaded).
    """
    from ..formats import graph_to_dict

    notes: list[str] = []
    cells: list[Cell] = []
    seen: set[str] = set()
    folder_graphs = 0
    for spec in exp.graphs:
        for source, graph in _graphs(spec, Path(exp.base_dir), notes):
            if spec.source == "folder":  # the config counted none of a folder's files: count them now, before expanding
                folder_graphs += 1
                check_grid_size(exp, folder_graphs=0, extra_graphs=folder_graphs)
            data = json_bytes(graph_to_dict(graph))
            digest = graph.structure_digest()
            for problem in exp.problems:
                for problem_label, recipe in _recipes(problem, graph):
                    for method in exp.methods:
                        if problem.kind not in method_kinds(method.name):
                            continue
                        for seed in exp.seeds:
                            kwargs = method.solve_kwargs(seed)
                            base = batch_key(graph, recipe, kwargs)
                            for repeat in range(exp.repeats):
                                key = cell_key("solve", {"batch_key": base, "repeat": repeat, "progress": method.record_progress})
                                if key in seen:
                                    continue  # the same graph named twice
                                seen.add(key)
                                labels = {"graph": graph.name, "graph_source": source, "graph_digest": digest, "nodes": graph.n_nodes,
                                          "edges": graph.n_edges, "problem": problem.kind, "instance": problem_label,
                                          "method": method.label, "method_name": method.name, "seed": seed, "repeat": repeat,
                                          "budget": {k: v for k, v in kwargs.items() if k not in ("method", "seed")}}
                                task = SolveTask(key, data, f"{_file_stem(graph.name)}.json", recipe, kwargs, method.record_progress)
                                cells.append(Cell(key, labels, task, graph))
    return Plan(cells, notes)


def _file_stem(name: str) -> str:
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".")
    return stem or "graph"


# ---------------------------------------------------------------------------- rows on disk


class RowLog:
    """``rows.jsonl``: one JSON object per line. Every append rewrites the file through a temporary
    file and a rename, so a reader or a killed run never sees half a row. A line that is not a row
    (`row_problem`) is kept in the file as it was, and left out of ``rows``."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lines: list[dict | bytes] = _read_lines(self.path) if self.path.exists() else []
        self.rows: list[dict] = [x for x in self._lines if isinstance(x, dict)]

    def append(self, row: dict) -> None:
        self.rows.append(row)
        self._lines.append(row)
        atomic_write_bytes(self.path, b"".join((json_bytes(x) if isinstance(x, dict) else x) + b"\n" for x in self._lines))

    def done(self) -> dict[str, dict]:
        """Rows that count as done, by key: solved without error and not ``unknown``."""
        out = {}
        for r in self.rows:
            status = (r.get("result") or {}).get("status")
            if r.get("error") is None and status != "unknown":
                out[r["key"]] = r
        return out


#: What the run, the summaries and the report read of a row, by type: (field, kinds allowed;
#: None where the field may be absent or null).
_NUMBER = (int, float)
_ROW_FIELDS = (("kind", (str,)), ("error", (str,)), ("seconds", _NUMBER), ("provenance", (dict,)), ("progress", (list,)),
               ("schedule", (dict,)), ("validation", (dict,)), ("answer", (dict,)), ("result", (dict,)))
_CELL_FIELDS = (("graph", (str,), True), ("instance", (str,), True), ("method", (str,), True), ("problem", (str,), False),
                ("seed", (int,), False), ("repeat", (int,), False), ("nodes", (int,), False))
_RESULT_FIELDS = (("status", (str,)), ("objective", _NUMBER), ("lower_bound", _NUMBER), ("gap", _NUMBER), ("timing", (dict,)),
                  ("terms", (dict,)))


def row_problem(row) -> str | None:
    """Why a parsed ``rows.jsonl`` line is not a row the run and the report can read; None if it is.

    A row is a JSON object with a string ``key``; what the run, `summarise` and the report read of
    it has its type (`_ROW_FIELDS`: ``result`` and ``provenance`` objects, a ``cell`` naming its
    ``graph``, ``instance`` and ``method`` in strings, numbers where numbers are summed ...), or is
    null or absent.
    """
    if not isinstance(row, dict):
        return f"is {json.dumps(row)[:40]}, not a JSON object"
    if not isinstance(row.get("key"), str):
        return "has no string 'key'"

    def wrong(value, kinds) -> bool:
        return value is not None and (isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds))

    for name, kinds in _ROW_FIELDS:
        if wrong(row.get(name), kinds):
            return f"has a {name!r} that is not {_kind_words(kinds)}"
    cell = row.get("cell")
    if cell is not None:
        if not isinstance(cell, dict):
            return "has a 'cell' that is not an object"
        for name, kinds, required in _CELL_FIELDS:
            if (required and name not in cell) or wrong(cell.get(name), kinds):
                return f"has a cell whose {name!r} is not {_kind_words(kinds)}"
    result = row.get("result")
    for name, kinds in _RESULT_FIELDS if result else ():
        if wrong(result.get(name), kinds):
            return f"has a result whose {name!r} is not {_kind_words(kinds)}"
    return None


def _kind_words(kinds: tuple) -> str:
    return {(str,): "a string", (dict,): "an object", (list,): "a list", (int,): "a whole number"}.get(kinds, "a number")


def _read_lines(path: Path) -> list[dict | bytes]:
    """Each non-blank line of ``path``: its row, or its bytes (with a warning) when it is not one."""
    out: list[dict | bytes] = []
    for i, line in enumerate(Path(path).read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, a 5,000-digit number, nested too deep
            why = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else "not JSON" if isinstance(exc, ValueError) else "JSON nested too deeply"
            log.warning("%s: line %d is %s; left out (kept in the file)", path, i, why)
            out.append(line)
            continue
        problem = row_problem(row)
        if problem:
            log.warning("%s: line %d %s; left out (kept in the file)", path, i, problem)
            out.append(line)
        else:
            out.append(row)
    return out


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a ``rows.jsonl`` file. A line that is not JSON, or not a row (`row_problem`:
    ``null``, ``[1, 2]``, an object without a string ``key`` ...), is left out with a warning that
    names its line."""
    return [x for x in _read_lines(Path(path)) if isinstance(x, dict)]


# ---------------------------------------------------------------------------- the run


def run_experiment(
    exp: Experiment,
    out_dir: str | Path,
    *,
    engine: str = "local",
    workers: int | None = None,
    address: str | None = None,
    argv: list[str] | None = None,
    on_row: Callable[[dict, int, int], None] | None = None,
) -> dict[str, Any]:
    """Run every cell of ``exp`` not already done in ``out_dir``; return a summary.

    Parameters
    ----------
    exp : Experiment
        A checked config (`load_experiment`).
    out_dir : path
        Gets ``experiment.json`` (the config, its hash, the plan's keys, the environment),
        ``rows.jsonl`` (one row per cell) and, for trainings, ``checkpoints/``.
    engine, workers, address
        Passed to `incsched.batch.solve_many` (``"local"`` processes, or ``"ray"``).
    argv : list of str, optional
        The command line to record (default ``sys.argv``).
    on_row : callable, optional
        ``on_row(row, done, total)`` after each row is written.

    Returns
    -------
    dict
        ``planned``, ``reused``, ``solved``, ``failed`` counts and ``notes``.
    """
    from .execution import execution_cells, run_execution
    from .training import run_training, training_cells

    if engine not in ENGINES:  # before anything is written
        raise IncschedError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(argv)
    the_plan = plan(exp)
    exec_cells = execution_cells(exp)
    train_cells = training_cells(exp)
    rows = RowLog(out / ROWS_FILE)
    done = rows.done()
    keys = [c.key for c in the_plan.cells + exec_cells + train_cells]
    write_json(out / EXPERIMENT_FILE, {"format": "incsched.experiment", "version": 1, "config": exp.to_json(), "config_hash": exp.digest,
                                       "keys": keys, "notes": the_plan.notes, "environment": env, "started": utc_now()}, indent=1)
    todo = [c for c in the_plan.cells if c.key not in done]
    warm_up_s = warm_up(_needs_policy(exp)) if todo and engine == "local" and (workers or 1) == 1 else None
    total = len(keys)
    counts = {"planned": total, "reused": sum(k in done for k in keys), "solved": 0, "failed": 0}
    # warm_up_s: None when cells ran in fresh worker processes, whose first solve pays the imports;
    # cells_at_once: solve cells run together disturb each other's timings
    at_once = workers if workers is not None else (os.cpu_count() if engine == "local" else None)
    context = {"experiment": exp.name, "profile": exp.profile, "config_hash": exp.digest, "warm_up_s": warm_up_s, "cells_at_once": at_once}

    def record(row: dict) -> None:
        rows.append(row)
        counts["failed" if row.get("error") else "solved"] += 1
        if on_row:
            on_row(row, counts["reused"] + counts["solved"] + counts["failed"], total)

    by_key = {c.key: c for c in todo}
    for outcome in solve_many([c.task for c in todo], engine=engine, workers=workers, address=address):
        cell = by_key[outcome.task.key]
        record(_solve_row(cell, outcome, env, engine, context))
    # executions and trainings run in the driver, one at a time: they time or load the machine themselves
    executions = {c.key for c in exec_cells}
    for cell in exec_cells + train_cells:
        if cell.key in done:
            continue
        row = {**(run_execution(cell, exp) if cell.key in executions else run_training(cell, exp, out)), **context}
        row["provenance"] = _provenance(env, cell.labels["seed"], (row["result"] or {}).get("stop_reason"), "driver", "driver")
        record(row)
    return {**counts, "notes": the_plan.notes}


def warm_up(policy: bool) -> float:
    """Untimed tiny solves in this process (the local engine's one worker): OR-Tools imported and,
    with ``policy``, the learned policies loaded (torch, the compiled decoders: 3-5 s here), so
    that no cell's wall time pays them. Returns the seconds spent."""
    import time

    from ..generators import bandwidth_for_comm_ratio, chained_matmul, respect_like
    from ..problems import PlacementProblem, StageProblem
    from ..front_door import solve

    started = time.perf_counter()
    g = chained_matmul(n_matrices=2, tiles=1)
    placement = PlacementProblem.identical(g, 2, bandwidth=bandwidth_for_comm_ratio(g, 4.0))
    stage = StageProblem.peer(respect_like(30, seed=1), n_stages=2)
    for problem in (placement, stage):
        if policy:
            solve(problem, "rl", time_limit=30)
        solve(problem, "inc-ilp", time_limit=5)
    return round(time.perf_counter() - started, 3)


def _needs_policy(exp: Experiment) -> bool:
    """Whether some cell may load a learned policy: "rl" itself, or inc-ilp's portfolio, which
    takes the policy in when the time limit allows it."""
    from ..inc_ilp.tuning import Tuning

    return any(m.name == "rl" or m.preschedule == "rl" or (m.name == "inc-ilp" and m.preschedule is None and m.time_limit >= Tuning().policy_min_seconds)
               for m in exp.methods)


def _provenance(env: dict, seed: int, stop_reason: str | None, node: str, engine: str) -> dict[str, Any]:
    return {**env, "seed": seed, "stop_reason": stop_reason, "node": node, "engine": engine, "load_average": load_average(),
            "written_at": utc_now()}


def _solve_row(cell: Cell, outcome, env: dict, engine: str, context: dict) -> dict[str, Any]:
    r = outcome.result
    row: dict[str, Any] = {"key": cell.key, "kind": "solve", **context, "cell": cell.labels, "seconds": round(outcome.seconds, 6),
                           "error": outcome.error, "result": None, "progress": [_plain_event(e) for e in outcome.progress]}
    if r is not None:
        data = r.to_json()
        row["result"] = {k: data.get(k) for k in ("status", "objective", "lower_bound", "gap", "stop_reason", "reproducible",
                                                  "bound_source", "reason", "terms", "timing", "exact")}
        row["result"]["best_from"] = r.provenance.get("best_from")
        row["result"]["time_unit"] = r.provenance.get("time_unit")
        if cell.graph.n_nodes <= ANSWER_MAX_NODES and r.assignment is not None:
            row["answer"] = {"stages": r.stages} if r.problem == "stage" else {"device": r.device, "order": r.order, "start": r.start}
            if r.problem == "placement":
                row["schedule"] = _schedule(cell, r)
    row["provenance"] = _provenance(env, cell.labels["seed"], r.stop_reason if r else None, outcome.node, engine)
    return row


def _plain_event(e: dict) -> dict:
    # Exact Fractions travel as "p/q" text; plots want numbers.
    from fractions import Fraction

    return {k: float(Fraction(v)) if isinstance(v, str) and k in ("objective", "lower_bound") else v for k, v in e.items()}


def _schedule(cell: Cell, r) -> dict[str, Any]:
    """The executed schedule in seconds, transfers included, for a Gantt chart; recomputed by the
    simulator from the answer (no solving)."""
    from ..evaluate.simulate import simulate
    from ..problems import Placement

    problem = cell.task.recipe.build(cell.graph)
    sched = simulate(problem, Placement(r.device, r.order), "ordered")
    unit = problem.time_unit
    ticks = problem.transfer_ticks()
    transfers = []
    for e, (u, v) in enumerate(zip(cell.graph.src.tolist(), cell.graph.dst.tolist())):
        du, dv = int(sched.device[u]), int(sched.device[v])
        if du != dv:
            t0 = int(sched.end[u])
            transfers.append([u, v, du, dv, t0 * unit, (t0 + int(ticks[e, du, dv])) * unit])
    return {"device": sched.device.tolist(), "start_s": (sched.start * unit).tolist(), "end_s": (sched.end * unit).tolist(),
            "op": list(cell.graph.op), "transfers": transfers,
            "makespan_s": float(sched.makespan_seconds)}


def load_run(out_dir: str | Path) -> tuple[dict, list[dict], int]:
    """(experiment.json, the rows of its current plan, rows left out as stale) of a run folder."""
    out = Path(out_dir)
    meta_path = out / EXPERIMENT_FILE
    if not meta_path.is_file():
        raise IncschedError(f"{out}: not an experiment folder (no {EXPERIMENT_FILE}; run `incsched experiment run` first)")
    meta = read_json(meta_path)
    rows = read_rows(out / ROWS_FILE) if (out / ROWS_FILE).exists() else []
    keys = set(meta.get("keys", []))
    latest: dict[str, dict] = {}
    for r in rows:  # a cell solved again (after a failure or an unknown) counts by its last row
        if r.get("key") in keys:
            latest[r["key"]] = r
    return meta, list(latest.values()), sum(r.get("key") not in keys for r in rows)
