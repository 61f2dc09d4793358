"""The numbers a report shows, computed from rows alone (no solving): per instance and method,
per method, speed-ups in time to proven optimum, and executions against single devices.

"Best known" for an instance is the lowest objective any method reached on it, marked proven
when some run proved it optimal; ratios are against it.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

__all__ = ["seconds", "instance_of", "summarise", "speedups", "versus", "execution_table"]


def seconds(row: dict) -> float:
    """Wall seconds of a cell: `solve()`'s own total where it reports one, else the worker's."""
    timing = (row.get("result") or {}).get("timing") or {}
    return float(timing.get("total", row.get("seconds") or 0.0))


def instance_of(row: dict) -> tuple[str, str]:
    c = row["cell"]
    return c["graph"], c["instance"]


def summarise(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(per instance and method, per method) summaries of the solve rows."""
    solved = [r for r in rows if r.get("kind") == "solve" and r.get("result") and r["result"].get("objective") is not None]
    best: dict[tuple, float] = {}
    proven: set[tuple] = set()
    for r in solved:
        inst = instance_of(r)
        obj = r["result"]["objective"]
        best[inst] = min(best.get(inst, math.inf), obj)
    for r in solved:
        if r["result"]["status"] == "optimal" and r["result"]["objective"] == best[instance_of(r)]:
            proven.add(instance_of(r))
    groups: dict[tuple, list[dict]] = defaultdict(list)
    order: list[tuple] = []
    for r in rows:
        if r.get("kind") != "solve":
            continue
        k = (*instance_of(r), r["cell"]["method"])
        if k not in groups:
            order.append(k)
        groups[k].append(r)
    per_instance = []
    for k in order:
        rs = groups[k]
        ok = [r for r in rs if r.get("result") and r["result"].get("objective") is not None]
        objs = [r["result"]["objective"] for r in ok]
        statuses = sorted({(r.get("result") or {}).get("status") or "error" for r in rs})
        b = best.get(k[:2])
        per_instance.append({
            "graph": k[0], "instance": k[1], "method": k[2], "nodes": rs[0]["cell"].get("nodes"), "runs": len(rs),
            "errors": sum(r.get("error") is not None for r in rs),
            "status": "/".join(statuses),
            "objective": min(objs) if objs else None,
            "objective_max": max(objs) if objs else None,
            "best_known": b,
            "best_proven": k[:2] in proven,
            "ratio": (statistics.mean(o / b for o in objs) if objs and b else (1.0 if objs and b == 0 else None)),
            "gap": _median([r["result"]["gap"] for r in ok if r["result"].get("gap") is not None]),
            "seconds": _median([seconds(r) for r in rs]),
            # the pre-scheduler's own phase (a policy's inference), without the bound and the checks
            "preschedule_seconds": _median([r["result"]["timing"]["preschedule"] for r in ok if "preschedule" in (r["result"].get("timing") or {})]),
            "proven_seconds": _median([seconds(r) for r in ok if r["result"]["status"] == "optimal"]),
            "stop": "/".join(sorted({r["provenance"].get("stop_reason") or "error" for r in rs})),
            "reproducible": all((r.get("result") or {}).get("reproducible") for r in rs),
        })
    per_method = []
    methods = list(dict.fromkeys(p["method"] for p in per_instance))
    instances = list(dict.fromkeys((p["graph"], p["instance"]) for p in per_instance))
    by = {(p["graph"], p["instance"], p["method"]): p for p in per_instance}
    for m in methods:
        ps = [by[(*i, m)] for i in instances if (*i, m) in by]
        ratios = [p["ratio"] for p in ps if p["ratio"] is not None]
        per_method.append({
            "method": m, "instances": len(ps),
            "proven_optimal": sum(p["status"] == "optimal" for p in ps),
            "at_best_known": sum(p["objective"] is not None and p["objective"] == p["best_known"] for p in ps),
            "mean_excess": statistics.mean(ratios) - 1 if ratios else None,
            "worst_excess": max(ratios) - 1 if ratios else None,
            "mean_gap": statistics.mean(g) if (g := [p["gap"] for p in ps if p["gap"] is not None]) else None,
            "median_seconds": _median([p["seconds"] for p in ps]),
            "total_seconds": sum(p["seconds"] or 0.0 for p in ps),
        })
    return per_instance, per_method


def _paired(per_instance: list[dict], field: str, reference: str) -> dict[str, list[tuple[float, float]]]:
    """Per method: (``reference``'s value, its own) of ``field`` on each instance both have it for."""
    by = defaultdict(dict)
    for p in per_instance:
        if p[field] is not None:
            by[(p["graph"], p["instance"])][p["method"]] = p[field]
    out = {}
    for m in {p["method"] for p in per_instance}:
        pairs = [(t[reference], t[m]) for t in by.values() if reference in t and m in t]
        if pairs:
            out[m] = pairs
    return out


def speedups(per_instance: list[dict], reference: str) -> dict[str, tuple[float, float, int]]:
    """Per method: (total time to proven optimum of ``reference`` / its own, on the instances both
    proved; the per-instance median of that ratio; how many instances)."""
    return {m: (sum(a for a, _ in pairs) / max(sum(b for _, b in pairs), 1e-9), statistics.median(a / max(b, 1e-9) for a, b in pairs),
                len(pairs))
            for m, pairs in _paired(per_instance, "proven_seconds", reference).items()}


def versus(per_instance: list[dict], reference: str) -> dict[str, tuple[float, int]]:
    """Per method: (mean of its objective / ``reference``'s, instance by instance; how many
    instances both answered) -- DOPPLER's "makespan against critical-path list"."""
    out = {}
    for m, pairs in _paired(per_instance, "objective", reference).items():
        ratios = [b / a for a, b in pairs if a]
        if ratios:
            out[m] = (statistics.mean(ratios), len(ratios))
    return out


def execution_table(rows: list[dict]) -> list[dict]:
    """One line per execution row: predicted and measured makespan, and the speed-up over the
    fastest single-device run of the same model and devices."""
    out = []
    single: dict[tuple, float] = {}
    for r in rows:
        v = r.get("validation")
        if r.get("kind") == "execute" and v and r["cell"]["method"].startswith("only "):
            k = (r["cell"]["graph"], r["cell"]["instance"])
            single[k] = min(single.get(k, math.inf), v["measured"]["makespan_s"])
    for r in rows:
        if r.get("kind") != "execute":
            continue
        c, v = r["cell"], r.get("validation")
        line = {"model": c["graph"], "instance": c["instance"], "method": c["method"], "seed": c["seed"], "repeat": c["repeat"],
                "error": r.get("error"), "predicted_s": None, "measured_s": None, "measured_over_predicted": None,
                "speedup_vs_single_device": None, "max_abs_diff": None, "status": (r.get("result") or {}).get("status")}
        if v:
            p, m = v["predicted"]["makespan_s"], v["measured"]["makespan_s"]
            s = single.get((c["graph"], c["instance"]))
            line.update(predicted_s=p, measured_s=m, measured_over_predicted=m / p if p else None, max_abs_diff=v["max_abs_diff"],
                        speedup_vs_single_device=s / m if s and m else None)
        out.append(line)
    return out


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None
