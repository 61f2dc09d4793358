"""Execution cells: a real model captured, profiled on its devices, solved, and each answer run on
those devices (HSDAG's measured latency, the cost model's fidelity). They run in the driver, one
after another: they time real devices, and two at once would time each other.
"""

from __future__ import annotations

import time
from typing import Any

from .config import SINGLE_DEVICE, Experiment, ExecutionSpec
from .cells import Cell, cell_key

__all__ = ["execution_cells", "run_execution", "resolve_devices"]


def resolve_devices(spec: ExecutionSpec) -> tuple[str, ...]:
    """``"auto"``: ``cuda:0`` and ``cpu`` where a GPU is present (HSDAG's CPU+GPU), else two CPU workers."""
    if spec.devices != "auto":
        return tuple(spec.devices)
    import torch

    return ("cuda:0", "cpu") if torch.cuda.is_available() else ("cpu", "cpu")


def execution_cells(exp: Experiment) -> list[Cell]:
    """One cell per execution x (method | device alone) x seed x repeat; keyed without capturing
    (the model, its input size, the devices, the method and budget, torch's and incsched's versions)."""
    if not exp.executions:
        return []
    import torch

    from .. import __version__

    cells = []
    for i, spec in enumerate(exp.executions):
        devices = resolve_devices(spec)
        runs = [(m.label, m) for m in spec.methods]
        if spec.single_device:
            runs += [(f"only {d}", d) for d in dict.fromkeys(devices)]
        for seed in exp.seeds:
            for repeat in range(exp.repeats):
                for label, what in runs:
                    labels = {"graph": spec.model, "problem": spec.kind, "instance": f"{spec.kind} on {','.join(devices)}",
                              "method": label, "seed": seed, "repeat": repeat, "devices": list(devices)}
                    parts = {"spec": _spec_json(spec), "devices": devices, "run": label,
                             "budget": what.solve_kwargs(seed) if not isinstance(what, str) else SINGLE_DEVICE,
                             "seed": seed, "repeat": repeat, "incsched": __version__, "torch": torch.__version__}
                    cells.append(Cell(cell_key("execute", parts), labels, run=(i, what)))
    return cells


def _spec_json(spec: ExecutionSpec) -> dict[str, Any]:
    from dataclasses import asdict

    return {k: v for k, v in asdict(spec).items() if k not in ("methods", "single_device")}


_captured: dict[tuple, Any] = {}  # (model, batch, devices, profile runs) -> (capture, problem): one capture per execution


def run_execution(cell: Cell, exp: Experiment) -> dict[str, Any]:
    """Run one execution cell; the row (never raises for a failing model or device: ``error``)."""
    index, what = cell.run
    spec = exp.executions[index]
    devices = list(cell.labels["devices"])
    row: dict[str, Any] = {"key": cell.key, "kind": "execute", "cell": cell.labels, "error": None, "result": None}
    start = time.perf_counter()
    try:
        captured, problem = _prepare(spec, devices)
        row["cell"] = {**cell.labels, "nodes": captured.graph.n_nodes, "edges": captured.graph.n_edges,
                       "graph_digest": captured.graph.structure_digest()}
        row.update(_execute(spec, captured, problem, devices, what, cell.labels["seed"]))
    except Exception as exc:  # noqa: BLE001 - one model or device failing is a row, not the end of the run
        row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    row["seconds"] = round(time.perf_counter() - start, 6)
    return row


def _prepare(spec: ExecutionSpec, devices: list[str]):
    import dataclasses

    from ..capture import capture, zoo
    from ..execute import measure_links, profile_devices
    from ..execute.validate import device_problem
    from ..problems import ObjectiveWeights, StageProblem

    memo = (spec.model, spec.batch_size, spec.image_size, tuple(devices), spec.profile_runs, spec.kind, repr(spec.weights))
    if memo not in _captured:
        model, inputs = zoo.build(spec.model, batch_size=spec.batch_size, image_size=spec.image_size)
        captured = capture(model, inputs, name=spec.model)
        graph, _ = profile_devices(captured, devices, repeats=spec.profile_runs, warmup=2)
        captured = dataclasses.replace(captured, graph=graph)
        # Across device kinds a copy costs what it was measured to; workers of one kind share memory.
        links = measure_links(devices).to_links() if len({d.split(":")[0] for d in devices}) > 1 else None
        if spec.kind == "placement":
            problem = device_problem(graph, devices, links)
        else:
            weights = ObjectiveWeights(**(spec.weights or {"compute_peak": 1.0}))
            problem = StageProblem(graph, len(devices), weights, comm="bytes", device_kind=devices[0].split(":")[0])
        _captured[memo] = (captured, problem, links)
    captured, problem, links = _captured[memo]
    return captured, (problem, links)


def _execute(spec: ExecutionSpec, captured, problem_links, devices: list[str], what, seed: int) -> dict[str, Any]:
    from ..execute import validate_placement, validate_stages
    from ..problems import Placement
    from ..front_door import solve

    problem, links = problem_links
    out: dict[str, Any] = {}
    if isinstance(what, str):  # the whole model on the one device ``what``
        d = devices.index(what)
        n = captured.graph.n_nodes
        order = [[] for _ in devices]
        order[d] = [int(v) for v in captured.graph.topological_order()]
        placement = Placement([d] * n, order)
    else:
        r = solve(problem, **what.solve_kwargs(seed))
        out["result"] = {"status": r.status, "objective": r.to_json()["objective"], "lower_bound": r.to_json()["lower_bound"],
                         "gap": r.gap, "stop_reason": r.stop_reason, "reproducible": r.reproducible, "terms": r.terms,
                         "timing": r.timing}
        if r.assignment is None:
            raise RuntimeError(f"{what.label} found no answer to execute ({r.status})")
        out["answer"] = {"stages": r.stages} if r.problem == "stage" else {"device": r.device, "order": r.order}
        placement = None if r.problem == "stage" else Placement(r.device, r.order)
    if placement is None:
        v = validate_stages(captured, out["answer"]["stages"], devices, n_micro_batches=spec.micro_batches, repeats=spec.timed_runs,
                            links=links, seed=seed)
    else:
        v = validate_placement(captured, placement, devices, repeats=spec.timed_runs, links=links, seed=seed)
    out["validation"] = v.to_json()
    return out
