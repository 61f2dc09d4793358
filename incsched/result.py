"""`Result`: what `solve()` returns and what batch jobs write, with its provenance.

A result states only what was proven: ``optimal`` (objective equals a global lower bound),
``window_optimal`` (proven inside the relaxation window only), ``feasible`` (with a lower bound and
gap), ``infeasible`` (with the reason) or ``unknown``. Timing lives in its own field so that two
deterministic runs give byte-identical JSON once it is left out.
"""

from __future__ import annotations

import functools
import os
import platform
from fractions import Fraction
from dataclasses import dataclass, field
from typing import Any

from .errors import FormatError
from .jsonio import read_json, write_json

__all__ = ["Result", "RESULT_STATUSES", "library_versions"]

FORMAT = "incsched.result"
#: 2: ``reproducible`` (was ``deterministic``) and ``stop_reason``; exact objective and bound.
VERSION = 2

RESULT_STATUSES = ("optimal", "window_optimal", "feasible", "infeasible", "unknown")


@dataclass(frozen=True)
class Result:
    """A solved stage or placement problem.

    Attributes
    ----------
    problem : {"stage", "placement"}
        Which problem was solved.
    graph : str
        The graph's name.
    status : str
        One of `RESULT_STATUSES`.
    objective : int, Fraction or None
        Stage: the weighted objective in the problem's integer units (bytes / edges / ticks),
        exact (a Fraction when fractional weights make it one). Placement: the makespan in ticks
        of ``time_unit``. JSON holds it as a number, plus an exact ``"p/q"`` string when fractional.
    lower_bound : int, Fraction or None
        A proven global lower bound in the same units, as exact.
    gap : float or None
        ``(objective - lower_bound) / objective`` (0 when proven optimal).
    terms : dict
        The objective's terms as the independent evaluator computed them (stage: mem_peak,
        comm_total, comm_peak, compute_peak, spill; placement: makespan and makespan_s).
    stages : list of int, optional
        Stage of each node (stage problem).
    replicated_weights : dict, optional
        Stage problem on a graph with shared weights (`CompGraph.shared_weights`): each shared
        weight held on more than one stage, by name, with those stages (sorted); each holds a copy
        and is charged its bytes. Empty when none is replicated; absent (None) without shared weights.
    device, order, start : lists, optional
        Device per node, per-device execution order, start tick per node (placement problem).
    method : str
        ``inc-ilp``, ``ilp``, ``ilp-hinted``, ``rl`` or a baseline's name.
    seed : int
        The seed every randomised step used.
    reproducible : bool
        Whether a rerun with the same input, seed and library versions gives the same bytes
        (timing aside): deterministic mode, and the run ended on a proof, its work budget or, for
        a heuristic, by itself -- never on the clock, Ctrl-C or a progress callback.
    stop_reason : str
        What ended the run: ``optimal`` (a finished proof, of optimality or infeasibility),
        ``time`` (the clock), ``work`` (the work budget), ``interrupted`` (Ctrl-C), ``callback``
        (``on_progress`` returned False) or ``done`` (a heuristic, which has no search).
    bound_source : str
        Where ``lower_bound`` comes from (``combinatorial``, ``cpsat-full``, ``cpsat-window`` ...).
    reason : str, optional
        Why a problem is infeasible or a status is weaker than hoped.
    provenance : dict
        Units (``time_unit``), the graph's digest, ``steps`` (every phase of the run, in order,
        with what it found), library versions, time and work limits, ``costs`` (where the node
        times and bytes come from: measured where and how, or estimated by which roofline).
    timing : dict
        Seconds per phase (``preschedule``, ``window``, ``proof``, ``check``, ``total``); left out
        of deterministic comparisons.
    """

    problem: str
    graph: str
    status: str
    objective: float | None
    lower_bound: float | None
    gap: float | None
    terms: dict[str, Any]
    method: str
    seed: int
    reproducible: bool
    bound_source: str = ""
    stop_reason: str = "done"
    reason: str | None = None
    stages: list[int] | None = None
    replicated_weights: dict[str, list[int]] | None = None
    device: list[int] | None = None
    order: list[list[int]] | None = None
    start: list[int] | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        if self.status not in RESULT_STATUSES:
            raise ValueError(f"status must be one of {RESULT_STATUSES}, got {self.status!r}")
        if self.problem not in ("stage", "placement"):
            raise ValueError(f"problem must be 'stage' or 'placement', got {self.problem!r}")

    @property
    def deterministic(self) -> bool:
        """Former name of `reproducible`."""
        return self.reproducible

    @property
    def assignment(self) -> list[int] | None:
        """Stage or device per node, whichever this problem assigns."""
        return self.stages if self.problem == "stage" else self.device

    def to_json(self, *, timing: bool = True) -> dict[str, Any]:
        """The versioned JSON form; ``timing=False`` leaves out the only run-dependent field."""
        data = {
            "format": FORMAT,
            "version": VERSION,
            "problem": self.problem,
            "graph": self.graph,
            "status": self.status,
            "objective": _json_number(self.objective),
            "lower_bound": _json_number(self.lower_bound),
            "gap": self.gap,
            "terms": self.terms,
            "method": self.method,
            "seed": self.seed,
            "reproducible": self.reproducible,
            "stop_reason": self.stop_reason,
            "bound_source": self.bound_source,
            "reason": self.reason,
            "stages": self.stages,
            "device": self.device,
            "order": self.order,
            "start": self.start,
            "provenance": _json_safe(self.provenance),
        }
        if self.replicated_weights is not None:  # only for graphs with shared weights: other results read as before
            data["replicated_weights"] = self.replicated_weights
        exact = {k: _exact_text(v) for k, v in (("objective", self.objective), ("lower_bound", self.lower_bound))}
        exact = {k: v for k, v in exact.items() if v is not None}
        if exact:
            data["exact"] = exact
        if timing:
            data["timing"] = self.timing
        return data

    @classmethod
    def from_json(cls, data: Any, *, source: str = "result") -> Result:
        """Rebuild a `Result` from `to_json`'s form.

        Raises
        ------
        FormatError
            If ``data`` is not an incsched result of a supported version.
        """
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise FormatError(f"{source}: not an incsched result (expected format {FORMAT!r})")
        version = data.get("version")
        if type(version) is not int or version not in (1, VERSION):
            raise FormatError(f"{source}: result version {version!r} is not supported (expected {VERSION})")
        kwargs = {k: v for k, v in data.items() if k not in ("format", "version", "exact")}
        if version == 1:
            kwargs["reproducible"] = kwargs.pop("deterministic", False)
        exact = data.get("exact") or {}
        if not isinstance(exact, dict):
            raise FormatError(f"{source}: 'exact' must be an object")
        for key, text in exact.items():
            if key not in ("objective", "lower_bound") or not isinstance(text, str):
                raise FormatError(f"{source}: exact {key!r} must be a 'p/q' string")
            try:
                kwargs[key] = Fraction(text)
            except (ValueError, ZeroDivisionError):
                raise FormatError(f"{source}: exact {key} {text!r} is not a fraction") from None
        for key, kind in (("terms", dict), ("provenance", dict), ("timing", dict), ("stages", list), ("device", list),
                          ("order", list), ("start", list), ("replicated_weights", dict)):
            if kwargs.get(key) is not None and not isinstance(kwargs[key], kind):
                raise FormatError(f"{source}: {key!r} must be {'an object' if kind is dict else 'a list'}, got {type(kwargs[key]).__name__}")
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise FormatError(f"{source}: {exc}") from None

    def check_assignment(self, graph: Any = None, *, n_parts: int | None = None, source: str = "result") -> Result:
        """Refuse an assignment that does not fit ``graph``: the one check before a result is
        exported, executed or drawn, so that no node is dropped or moved without a word.

        Stages and devices must be whole numbers (not booleans, floats, strings or lists), one per
        node of ``graph``, in ``0 .. K-1``: K is the result's own stage count (``terms.stage_mem``)
        or device count (``order``), below ``n_parts`` when given, and never more than the nodes
        (an empty stage or device is not a part of a split). A placement's ``order`` must list every
        node once, on its device; ``start`` one whole tick per node. A result whose provenance
        names another graph's digest is refused.

        Parameters
        ----------
        graph : CompGraph, optional
            The graph the result is for; without it, lengths and names are not checked.
        n_parts : int, optional
            Stages or devices available (e.g. the devices given to run it on).

        Returns
        -------
        Result
            ``self``, checked.

        Raises
        ------
        FormatError
            Naming the field, the node and the value.
        """
        field_name = "stages" if self.problem == "stage" else "device"
        values = self.assignment
        if values is None:
            return self
        names = list(graph.names) if graph is not None else None
        if names is not None:
            digest = (self.provenance or {}).get("graph_digest")
            if digest and digest != graph.structure_digest():
                raise FormatError(f"{source}: solved for another graph than {graph.name!r} (nodes or edges differ)")
            if len(values) != len(names):
                raise FormatError(f"{source}: {len(values)} {field_name} entries for the {len(names)} nodes of graph {graph.name!r}")
        if self.problem == "stage":
            stage_mem = (self.terms or {}).get("stage_mem")
            limit = len(stage_mem) if isinstance(stage_mem, list) and stage_mem else None
            what = "stages"
        else:
            limit = len(self.order) if self.order else None
            what = "devices"
        for bound in (n_parts, len(values) if values else None):
            if bound is not None:
                limit = bound if limit is None else min(limit, bound)
        for i, v in enumerate(values):
            node = f"node {names[i]!r}" if names is not None else f"node {i}"
            if type(v) is not int:  # bool is an int subclass and must not pass
                raise FormatError(f"{source}: {field_name} of {node} is {v!r}; {what} are whole numbers")
            if v < 0 or (limit is not None and v >= limit):
                span = f"0 .. {limit - 1}" if limit is not None else "non-negative"
                raise FormatError(f"{source}: {field_name} of {node} is {v}, out of range ({what} {span})")
        if self.problem == "placement":
            self._check_order(source)
        return self

    def _check_order(self, source: str) -> None:
        n = len(self.device)
        if self.order is not None:
            seen = [False] * n
            for d, seq in enumerate(self.order):
                if not isinstance(seq, list):
                    raise FormatError(f"{source}: 'order' must be a list of lists of node indices, one list per device")
                for v in seq:
                    if type(v) is not int or not 0 <= v < n or seen[v] or self.device[v] != d:
                        raise FormatError(f"{source}: order of device {d} lists {v!r}, which is not a node of that device listed once")
                    seen[v] = True
            if not all(seen):
                raise FormatError(f"{source}: order leaves out node {seen.index(False)}")
        if self.start is not None:
            if len(self.start) != n:
                raise FormatError(f"{source}: {len(self.start)} start ticks for {n} nodes")
            bad = next((t for t in self.start if type(t) is not int or t < 0), None)
            if bad is not None:
                raise FormatError(f"{source}: start tick {bad!r} is not a whole number >= 0")

    def save(self, path: str | os.PathLike) -> None:
        """Write the JSON form atomically (gzip when the name ends in ``.gz``)."""
        write_json(path, self.to_json(), indent=1)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Result:
        return cls.from_json(read_json(path), source=str(path))


def _json_number(x):
    """An exact int as itself; a Fraction as its nearest float (the exact value goes in ``exact``)."""
    if isinstance(x, Fraction):
        return x.numerator if x.denominator == 1 else float(x)
    return x


def _json_safe(x):
    """``x`` with every Fraction inside (the portfolio's scores, each step's objective) as
    `_json_number` writes it: provenance is a record, its exact values are the result's own."""
    if isinstance(x, Fraction):
        return _json_number(x)
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def _exact_text(x) -> str | None:
    if isinstance(x, Fraction) and x.denominator != 1:
        return f"{x.numerator}/{x.denominator}"
    return None


@functools.lru_cache(maxsize=1)
def library_versions() -> dict[str, str]:
    """Versions that determine a deterministic result: same versions, same bytes."""
    import numpy
    import ortools

    from . import __version__

    return {"python": platform.python_version(), "incsched": __version__, "ortools": ortools.__version__, "numpy": numpy.__version__}
