"""The stage problem: put every node of a `CompGraph` on one of K ordered pipeline stages.

Sits between the graph and everything that schedules it: pre-schedulers, the relaxation step, the
CP-SAT and MILP back ends and the evaluator all read a `StageProblem`, never loose arguments.

Integer units. Bytes are already integers. Compute times (seconds) are scaled once, here, to
integer *ticks* of ``time_unit`` seconds: a node's ticks on stage k are
``round(time_v / stage_speed[k] / time_unit)``. Unless given, ``time_unit`` comes from the rule
both problems share (`incsched.problems.units.auto_time_unit`): the coarsest 1/2/5 x 10^k seconds
at which the whole graph's compute time on the slowest stage spans at least 10**6 ticks, so the
graph holds under 2.5 x 10**6 ticks and rounding moves a stage's time by at most 5 x 10**-7 of the
total per node. Every objective term is an integer in these units; the weighted objective is
``sum(weight * term)``.

Infeasibility that can be seen before any solver runs (a node whose parameters exceed every
stage's hard capacity, more parameters than all stages hold together) is reported by
`StageProblem.infeasibility` as a reason string and raised by `StageProblem.check_feasible` as
`InfeasibleProblem`; malformed problems (K < 1, NaN weights, wrong lengths) raise `ProblemError` at
construction.

Exact numbers (the contract every back end and the evaluator keep):

- Terms are Python ints: bytes, edges or ticks. The graph's byte columns each total at most
  2**62 (`incsched.graph.MAX_TOTAL_BYTES`) and the compute ticks at most `MAX_TOTAL_TICKS` (2**61), so
  every per-stage load also fits numpy's int64 without wrap-around.
- Weights are read as the decimal number they print as (``repr``): ``0.1`` means 1/10 exactly,
  not the binary float nearest to it. `ObjectiveWeights.scaled` turns them into integers by one
  exact rule: multiply every weight by 10**d, d the most decimal places any weight has, and divide
  by the greatest common divisor, giving integers ``c_t`` and a `fractions.Fraction` unit with
  ``weight_t == unit * c_t`` for every term. A weight with more than `MAX_WEIGHT_DECIMALS` decimal
  places or above `MAX_WEIGHT` is refused at construction with a `ProblemError` naming it.
- The objective ``sum(weight_t * term_t)`` is therefore exact: a Python int when whole, else a
  `fractions.Fraction` (`exact_number`). Never a float.
- Capacities are Python ints of any size (a float only when whole and at most 2**53); a capacity
  above the graph's total parameters constrains nothing, and `effective_capacity` clamps it there
  for solvers that need int64.

Shared weights (`CompGraph.shared_weights`: a tied embedding read by the embedding and the output
head). A stage's parameters are its nodes' own ``param_bytes`` plus, once, every shared weight that
at least one of its nodes reads (`CompGraph.part_param_bytes`): a weight read on two stages costs its
bytes on both, read twice on one stage once. This is the stage's parameter memory everywhere:
``mem_peak``, ``spill``, ``capacity`` and the ``params_k`` of ``memory``. So a stage's parameters
are not a sum over its nodes; what one node alone needs is `CompGraph.node_weight_bytes` (own plus
every shared weight it reads), and all parameters once are `CompGraph.total_param_bytes`. A graph
without shared weights reads exactly as before.

The pipeline model (`StageProblem.pipeline`, the ``stage_time_peak`` term and the ``memory``
capacity), the throughput objective of torchgpipe's ``balance_by_time`` and PipeDream's planner:

- *Sends.* Stages form a chain; a value (node u's output, ``out_bytes[u]``) read on a later stage
  (by an edge of positive bytes) is sent once across every boundary between u's stage and its last
  reader's: stage k sends every value with ``s_u <= k < max(s_v for readers v)``, each once
  however many readers it has. Its ticks are ``round(out_bytes[u] / bandwidth / time_unit)``
  (`StageProblem.send_ticks`: both floats read as the decimals they print as, like the weights,
  and the quotient rounded half to even once per value, in exact rationals), charged to the
  sender; no bandwidth means free sends.
- *Stage time* = its compute ticks + its send ticks; ``stage_time_peak`` is the largest, and a
  pipeline's steady-state throughput is one micro-batch per ``stage_time_peak`` (seconds).
- *Memory.* Under 1F1B, stage k (0-based) of K keeps the stored activations of up to
  ``in_flight(k) = min(K - k, micro_batches)`` micro-batches (stage 0 runs K forwards before its
  first backward). A stage's activations per micro-batch are its nodes' ``out_bytes``, so stage k
  holds ``params_k + in_flight(k) * activations_k`` bytes (`StageProblem.stage_memory_coef`),
  which the hard ``memory`` capacity bounds (``params_k`` with its shared weights once each, see
  above; a weight is stored, not stashed per micro-batch). Exact Python ints; solvers clamp it like
  ``capacity``.

Training mode (``mode="training"``: `incsched.problems.training` holds its rules) keeps these
accessors and changes what they hold: ``stage_memory_coef`` charges parameters times the
optimizer's ``param_factor`` (gradients and optimizer state; a shared weight held on a stage is
multiplied by the same factor) and the activations the ``schedule`` stashes for backward
(``in_flight``) and the graph outputs it keeps per micro-batch for the loss outside it
(`incsched.problems.training.kept_output_bytes`), ``stage_input_coef`` the inputs kept under ``recompute``;
a stage also holds a node's working set (`work_coef`) on top of its stash less what the nodes after
it released (`release_coef`), or, when the optimizer steps, the largest step temporaries
(`step_coef`), whichever is more;
``node_ticks`` are forward plus backward; ``send_ticks`` carry each crossed value forward and its
gradient back.

*The training step* (the objective `StageProblem.pipeline` weighs in training mode). A step is
``step_slots * stage_time_peak + grad_sync_peak`` ticks: the schedule's slots of the slowest stage,
then the gradient all-reduce of every *replicated* shared weight (one read on two or more stages:
each copy trains on its own stage's gradients, so the copies exchange them once per step).
``grad_sync_peak`` is the busiest stage's sync: max over stages k of the sum, over the shared
weights held on k and on at least one other stage, of ``grad_sync_ticks[w]`` =
``round(nbytes(w) / bandwidth / time_unit)``, rounded once per weight exactly as `send_ticks`
(0 without a bandwidth). Each holder is charged the weight's bytes once: a 2-holder all-reduce
moves nbytes each way (each sends its gradient, receives the other's); a ring over r holders moves
2 (r - 1) / r nbytes per holder, between 1 and 2 times this figure, so for r > 2 the term is a
lower estimate of the bandwidth-optimal ring by at most 2x. The preset's weights are
``stage_time_peak = step_slots``, ``grad_sync_peak = 1``; interleaved 1F1B's slots ``M + (K - 1) / v``
are not whole, so both are multiplied by v (the objective is then v x the step's ticks), keeping
the weights integers. Inference problems cannot weigh the term (there is no gradient).
"""

from __future__ import annotations

import math
import os
from decimal import Decimal
from fractions import Fraction
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any

import numpy as np

from ..graph.cost_model import DEFAULT_KIND
from ..errors import FormatError, InfeasibleProblem, ProblemError
from ..formats.json_graph import graph_from_dict, graph_to_dict
from ..graph import MAX_EXACT_FLOAT_INT, MAX_TOTAL_BYTES, CompGraph
from ..jsonio import read_json, write_json
from . import training
from .documents import check_document
from .units import FINEST_TIME_UNIT, MIN_WORK_TICKS, auto_time_unit

__all__ = [
    "ObjectiveWeights",
    "StageProblem",
    "ProblemError",
    "InfeasibleProblem",
    "COMM_MODES",
    "MAX_WEIGHT_DECIMALS",
    "MAX_WEIGHT",
    "MAX_TOTAL_TICKS",
    "MAX_STAGES",
    "exact_number",
]

FORMAT = "incsched.stage_problem"
VERSION = 1

#: How an edge's communication is counted: its bytes, or one unit if it carries any data (peer form).
COMM_MODES = ("bytes", "edges")

#: Most decimal places a weight may have (1e-12 is fine, 1e-13 is refused): the exact integer
#: scaling multiplies every weight by 10**d, which must leave room in CP-SAT's int64 objective.
MAX_WEIGHT_DECIMALS = 12

#: Largest weight accepted (1e300 is refused): a bigger one leaves no room in CP-SAT's int64
#: objective even for single-digit terms once scaled.
MAX_WEIGHT = 10**15

#: Most compute ticks a graph may span (the sum over nodes of each node's slowest ticks), so that
#: per-stage tick sums fit int64 with room to spare (checked in float64, hence 2**61, not 2**62).
MAX_TOTAL_TICKS = 2**61

#: Most stages a problem may have. Every model and evaluator holds arrays of nodes x stages, and
#: more stages than nodes change no optimum (the extra stages stay empty); 10**7 stages on a
#: 4-node graph ran for minutes past a 5 s time limit before this check.
MAX_STAGES = 1024


def exact_number(x: int | Fraction) -> int | Fraction:
    """``x`` as a Python int when it is whole, else as a `fractions.Fraction` (never a float)."""
    if isinstance(x, Fraction):
        return int(x.numerator) if x.denominator == 1 else x
    return int(x)


def _decimal_weight(name: str, w) -> Fraction:
    """The exact value a weight denotes: an int as is, a float as its shortest decimal repr."""
    if isinstance(w, (int, np.integer)):
        return Fraction(int(w))
    return Fraction(Decimal(repr(float(w))))


@dataclass(frozen=True)
class ObjectiveWeights:
    """Non-negative weights of the stage objective's terms (0 leaves a term out).

    ``mem_peak`` and ``spill`` multiply bytes, ``comm_total`` and ``comm_peak`` bytes or edges (see
    `StageProblem.comm`), ``compute_peak``, ``stage_time_peak`` (compute plus sends, the
    pipeline's slowest stage: see the module notes) and ``grad_sync_peak`` (training: the busiest
    stage's gradient all-reduce of its replicated shared weights, once per step) ticks of
    `StageProblem.time_unit`. A document without ``grad_sync_peak`` reads it as 0.
    """

    mem_peak: float = 0.0
    comm_total: float = 0.0
    comm_peak: float = 0.0
    compute_peak: float = 0.0
    spill: float = 0.0
    stage_time_peak: float = 0.0
    grad_sync_peak: float = 0.0

    def __post_init__(self):
        for f in fields(self):
            w = getattr(self, f.name)
            if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)):
                raise ProblemError(f"objective weight {f.name} must be a number, got {type(w).__name__} ({w!r})")
            if isinstance(w, (int, np.integer)):
                if w < 0:
                    raise ProblemError(f"objective weight {f.name} is {w}; weights must be finite and non-negative")
            elif not math.isfinite(w) or w < 0:
                raise ProblemError(f"objective weight {f.name} is {w}; weights must be finite and non-negative")
            exact = _decimal_weight(f.name, w)
            if exact > MAX_WEIGHT:
                shown = w if exact < 10**30 else f"{float(w):.3g}"
                raise ProblemError(
                    f"objective weight {f.name} is {shown}, above the largest supported weight 1e15 "
                    "(weights are scaled to exact integers for CP-SAT's 64-bit objective); scale the weights down"
                )
            places = _places(exact)
            if places > MAX_WEIGHT_DECIMALS:
                raise ProblemError(
                    f"objective weight {f.name} is {w!r}, which needs {places} decimal places; weights are scaled "
                    f"to exact integers with at most {MAX_WEIGHT_DECIMALS} (round it, or scale every weight up)"
                )
            # Keep whole weights as ints so that JSON round trips and integer objectives stay exact.
            object.__setattr__(self, f.name, int(exact) if exact.denominator == 1 else float(w))

    def as_dict(self) -> dict[str, float]:
        """The weights by term name, in the order of the objective's definition."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def exact(self) -> dict[str, Fraction]:
        """Each weight as the exact decimal it denotes (``0.1`` is 1/10), by term name."""
        return {name: _decimal_weight(name, w) for name, w in self.as_dict().items()}

    def scaled(self) -> tuple[dict[str, int], Fraction]:
        """The weights as integers ``c`` and one exact ``unit`` with ``weight_t == unit * c[t]``.

        The rule (see the module notes): scale by 10**d for the most decimal places d of any
        weight, then divide by the integers' greatest common divisor, so ``c`` is as small as the
        weights allow (``mem_peak=1e9`` alone gives ``c == 1``, unit 1e9).

        Examples
        --------
        >>> ObjectiveWeights(mem_peak=1, comm_total=1e-7).scaled()
        ({'mem_peak': 10000000, 'comm_total': 1, 'comm_peak': 0, 'compute_peak': 0, 'spill': 0, 'stage_time_peak': 0, 'grad_sync_peak': 0}, Fraction(1, 10000000))
        """
        exact = self.exact()
        d = max((_places(x) for x in exact.values()), default=0)
        ints = {name: int(x * 10**d) for name, x in exact.items()}
        g = math.gcd(*ints.values()) or 1
        return {name: c // g for name, c in ints.items()}, Fraction(g, 10**d)


def _places(x: Fraction) -> int:
    """Decimal places of a terminating decimal fraction (its denominator is 2**a 5**b)."""
    den, d = x.denominator, 0
    while 10**d % den:
        d += 1
    return d


@dataclass(frozen=True)
class StageProblem:
    """Assign each node a stage 0..K-1 with s_u <= s_v on every edge; minimise a weighted objective.

    Parameters
    ----------
    graph : CompGraph
        The computation graph.
    n_stages : int
        K, the number of pipeline stages (>= 1).
    weights : ObjectiveWeights
        Weights of ``mem_peak``, ``comm_total``, ``comm_peak``, ``compute_peak`` and ``spill``.
    comm : {"bytes", "edges"}
        Communication unit of an edge: its bytes, or 1 if its bytes are positive (the peer form).
    capacity : int or sequence of int, optional
        Hard per-stage parameter memory in bytes (one value for all stages, or one per stage).
    spill_capacity : int or sequence of int, optional
        Per-stage memory beyond which parameters spill (the ``spill`` term); required when the
        ``spill`` weight is positive.
    stage_speed : sequence of float, optional
        Relative speed of each stage's device (default all 1): stage k's compute time is the sum of
        its nodes' times divided by ``stage_speed[k]``.
    device_kind : str
        Which of the graph's time columns gives node times: measured, else estimated by the
        roofline preset of that name (``cpu``, ``a100``, ``h100``, ``h200`` ...:
        `incsched.graph.cost_model.ROOFLINES`).
    time_unit : float, optional
        Seconds per integer tick; chosen automatically when omitted (see the module notes).
    memory : int or sequence of int, optional
        Hard per-stage memory in bytes for parameters plus the activations in flight under 1F1B
        (see the module notes); needs ``micro_batches``.
    bandwidth : float, optional
        Bytes per second of a send between stages (the ``stage_time_peak`` term); None: free.
    micro_batches : int, optional
        Micro-batches per pipeline run (>= 1): how many activations stage k keeps in flight.
    mode : {"inference", "training"}
        Training adds gradients, optimizer state, the schedule's stashed activations, the output
        kept for the loss and the backward pass, and puts a node on every stage (the module notes;
        `incsched.problems.training`); needs ``micro_batches`` and K <= the graph's nodes.
    optimizer : str, optional
        Training: a preset of `incsched.problems.training.OPTIMIZERS` (default ``"adam-fp32"``).
    schedule : str, optional
        Training: ``"gpipe"``, ``"1f1b"`` (default) or ``"interleaved:v"``.
    recompute : bool
        Training: activation recomputation (a stage keeps its inputs per micro-batch in flight).

    Raises
    ------
    ProblemError
        If K < 1, a weight is NaN / negative, ``comm`` is unknown, a capacity or speed has the
        wrong length or an invalid value, the spill term lacks a ``spill_capacity``, the bandwidth
        is not a positive finite number, ``micro_batches`` is not a whole number >= 1, or
        ``memory`` comes without ``micro_batches``, or a training field is unknown or set in
        inference mode (one line naming the choices), or training has more stages than nodes.
    GraphError
        If the graph has no times for ``device_kind`` and no roofline preset is named so.

    Examples
    --------
    >>> g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[10, 30], out_bytes=[5, 0])
    >>> p = StageProblem.peer(g, n_stages=2, alpha=100)
    >>> p.weights.mem_peak, p.comm
    (100, 'edges')
    """

    graph: CompGraph
    n_stages: int
    weights: ObjectiveWeights = field(default_factory=ObjectiveWeights)
    comm: str = "bytes"
    capacity: tuple[int, ...] | None = None
    spill_capacity: tuple[int, ...] | None = None
    stage_speed: tuple[float, ...] | None = None
    device_kind: str = DEFAULT_KIND
    time_unit: float | None = None
    memory: tuple[int, ...] | None = None
    bandwidth: float | None = None
    micro_batches: int | None = None
    mode: str = "inference"
    optimizer: str | None = None
    schedule: str | None = None
    recompute: bool = False

    def __post_init__(self):
        if not isinstance(self.graph, CompGraph):
            raise ProblemError(f"graph must be a CompGraph, got {type(self.graph).__name__}")
        k = self.n_stages
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ProblemError(f"n_stages must be an integer >= 1, got {k!r}")
        if k > MAX_STAGES:
            raise ProblemError(f"n_stages is {k}, above the supported {MAX_STAGES} stages")
        object.__setattr__(self, "n_stages", int(k))
        if isinstance(self.weights, dict):
            object.__setattr__(self, "weights", ObjectiveWeights(**self.weights))
        if not isinstance(self.weights, ObjectiveWeights):
            raise ProblemError(f"weights must be ObjectiveWeights, got {type(self.weights).__name__}")
        if self.comm not in COMM_MODES:
            raise ProblemError(f"comm must be one of {COMM_MODES}, got {self.comm!r}")
        object.__setattr__(self, "capacity", self._per_stage_bytes("capacity", self.capacity))
        object.__setattr__(self, "spill_capacity", self._per_stage_bytes("spill_capacity", self.spill_capacity))
        if self.weights.spill > 0 and self.spill_capacity is None:
            raise ProblemError("the spill term has a positive weight but no spill_capacity is given")
        self._check_pipeline_fields()
        self._check_training_fields()
        if self.stage_speed is not None:
            speed = tuple(float(s) for s in self.stage_speed)
            if len(speed) != self.n_stages:
                raise ProblemError(f"stage_speed has {len(speed)} entries for {self.n_stages} stages")
            bad = [i for i, s in enumerate(speed) if not (math.isfinite(s) and s > 0)]
            if bad:
                raise ProblemError(f"stage_speed of stage {bad[0]} is {speed[bad[0]]}; speeds must be finite and positive")
            object.__setattr__(self, "stage_speed", speed)
        if not isinstance(self.device_kind, str) or not self.device_kind:
            raise ProblemError(f"device_kind must be a non-empty string, got {self.device_kind!r}")
        self.graph.time_source(self.device_kind)  # a kind with no times and no preset fails here, naming the known ones
        if self.time_unit is None:
            object.__setattr__(self, "time_unit", self._auto_time_unit())
        else:
            tu = float(self.time_unit)
            if not (math.isfinite(tu) and tu > 0):
                raise ProblemError(f"time_unit must be finite and positive, got {self.time_unit!r}")
            object.__setattr__(self, "time_unit", tu)

    def _check_pipeline_fields(self) -> None:
        m = self.micro_batches
        if m is not None:
            if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
                raise ProblemError(f"micro_batches must be a whole number >= 1, got {m!r}")
            object.__setattr__(self, "micro_batches", int(m))
        bw = self.bandwidth
        if bw is not None:
            if isinstance(bw, bool) or not isinstance(bw, (int, float, np.integer, np.floating)) or not (math.isfinite(bw) and bw > 0):
                raise ProblemError(f"bandwidth must be a positive, finite number of bytes per second, got {bw!r}")
            object.__setattr__(self, "bandwidth", float(bw))
        object.__setattr__(self, "memory", self._per_stage_bytes("memory", self.memory))
        if self.memory is not None and self.micro_batches is None:
            raise ProblemError("memory (parameters plus activations in flight) needs micro_batches to count the activations")

    def _check_training_fields(self) -> None:
        checked = training.check_training(self.mode, self.optimizer, self.schedule, self.recompute)
        for name, value in zip(("mode", "optimizer", "schedule", "recompute"), checked):
            object.__setattr__(self, name, value)
        if self.training and self.micro_batches is None:
            raise ProblemError("mode='training' needs micro_batches: the schedule's stashed activations and the step time count them")
        if self.training and self.n_stages > self.graph.n_nodes:
            raise ProblemError(
                f"mode='training' puts a node on every stage (a pipeline runs each one), but graph {self.graph.name!r} "
                f"has {self.graph.n_nodes} nodes for {self.n_stages} stages: solve with n_stages <= {self.graph.n_nodes}")
        if self.weights.grad_sync_peak > 0 and not self.training:
            raise ProblemError("the grad_sync_peak term weighs training's gradient all-reduce; it needs mode='training'")

    def _per_stage_bytes(self, name: str, value) -> tuple[int, ...] | None:
        if value is None:
            return None
        values = [value] * self.n_stages if np.isscalar(value) else list(value)
        if len(values) != self.n_stages:
            raise ProblemError(f"{name} has {len(values)} entries for {self.n_stages} stages")
        out = []
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise ProblemError(f"{name} of stage {i} must be a number of bytes, got {v!r:.80}")
            if isinstance(v, (int, np.integer)):
                # Integers are exact at any size: no float() on the way (2**63 - 1 is whole).
                if v < 0:
                    raise ProblemError(f"{name} of stage {i} is {v}; capacities are whole, non-negative byte counts")
                out.append(int(v))
                continue
            if not math.isfinite(v) or v < 0 or v != math.floor(v):
                raise ProblemError(f"{name} of stage {i} is {v}; capacities are whole, non-negative byte counts")
            if v > MAX_EXACT_FLOAT_INT:
                raise ProblemError(
                    f"{name} of stage {i} is the float {float(v):.17g}, too large to be an exact byte count "
                    "(floats are exact only up to 2**53); give it as an integer"
                )
            out.append(int(v))
        return tuple(out)

    def _auto_time_unit(self) -> float:
        slowest = min(self.stage_speed) if self.stage_speed else 1.0
        total = float(self.node_seconds().sum()) / slowest
        if not math.isfinite(total):
            raise ProblemError(
                f"the compute times of graph {self.graph.name!r} add up to more than a float64 holds "
                f"(on the slowest stage, speed {slowest:g}); they cannot be expressed in ticks"
            )
        unit = auto_time_unit(total, span_seconds=total, max_ticks=MAX_TOTAL_TICKS)
        if 0 < total / unit < MIN_WORK_TICKS:
            # The documented precision (at least 10**6 ticks) would need a tick below 1e-300 s.
            raise ProblemError(
                f"the compute times of graph {self.graph.name!r} total {total:g} s, too small to express in ticks "
                f"(at least {MIN_WORK_TICKS:.0e} ticks would need a tick below {FINEST_TIME_UNIT:g} s)"
            )
        return unit

    # ------------------------------------------------------------------ constructors

    @classmethod
    def peer(cls, graph: CompGraph, n_stages: int = 10, alpha: float = 100, **kwargs: Any) -> StageProblem:
        """The RESPECT / ICML'24 objective: ``alpha * mem_peak + comm_total`` counted in edges.

        Parameters
        ----------
        graph : CompGraph
            The graph (node ``param_bytes`` are the peer's node ``parameter``).
        n_stages : int
            K (the peer's "depth"; 10 in its README example).
        alpha : float
            Weight of the peak stage memory against one crossed boundary of one data-carrying edge.
        **kwargs
            Further `StageProblem` fields (capacity, device_kind ...).
        """
        return cls(graph, n_stages, ObjectiveWeights(mem_peak=alpha, comm_total=1), comm="edges", **kwargs)

    @classmethod
    def pipeline(cls, graph: CompGraph, n_stages: int = 4, *, memory=None, bandwidth: float | None = None,
                 micro_batches: int = 4, mode: str = "inference", optimizer: str | None = None, schedule: str | None = None,
                 recompute: bool = False, **kwargs: Any) -> StageProblem:
        """The throughput objective: minimise ``stage_time_peak``, the slowest stage's compute plus sends
        (in training mode, the step it makes with the gradient sync).

        What torchgpipe's ``balance_by_time`` and PipeDream's and Alpa's planners optimise: a
        pipeline delivers one micro-batch per slowest stage's time. See the module notes for the
        exact send and memory model.

        Parameters
        ----------
        graph : CompGraph
        n_stages : int
            K, the pipeline's stages.
        memory : int or sequence of int, optional
            Hard per-stage bytes for parameters plus the activations 1F1B keeps in flight.
        bandwidth : float, optional
            Bytes per second of a stage-to-stage send; None: sends are free.
        micro_batches : int
            Micro-batches per run (sets the activations in flight; default 4).
        mode, optimizer, schedule, recompute
            ``mode="training"``: the slowest stage's forward plus backward and sends both ways,
            under memory for parameters, gradients, optimizer state (the ``optimizer`` preset) and
            the activations the ``schedule`` stashes (see `incsched.problems.training`). The
            objective is then a training step in ticks, ``step_slots * stage_time_peak +
            grad_sync_peak`` (interleaved: v times that, so the weights stay whole; the module notes).
        **kwargs
            Further `StageProblem` fields (capacity, device_kind, stage_speed ...).

        Examples
        --------
        >>> g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[10, 30], out_bytes=[5, 0])
        >>> p = StageProblem.pipeline(g, 2, memory=60, micro_batches=4)
        >>> p.weights.stage_time_peak, p.stage_memory_coef.tolist()
        (1, [[20, 15], [30, 30]])
        >>> t = StageProblem.pipeline(g, 2, micro_batches=4, mode="training", optimizer="adam-fp32")
        >>> t.param_factor, t.in_flight(), t.stage_memory_coef.tolist()
        (4, [2, 1], [[50, 45], [120, 120]])
        >>> t.weights.stage_time_peak, t.weights.grad_sync_peak  # a step: (M + K - 1) slots + the sync
        (5, 1)
        """
        problem = cls(graph, n_stages, ObjectiveWeights(stage_time_peak=1), comm="bytes", memory=memory, bandwidth=bandwidth,
                      micro_batches=micro_batches, mode=mode, optimizer=optimizer, schedule=schedule, recompute=recompute, **kwargs)
        if not problem.training:
            return problem
        # A step: slots x slowest stage + the gradient sync; interleaved slots M + (K - 1) / v are
        # not whole, so both weights are v times theirs (the module notes). Fields checked above.
        v = training.parse_schedule(problem.schedule)[1]
        return replace(problem, weights=ObjectiveWeights(stage_time_peak=int(v * problem.step_slots()), grad_sync_peak=v))

    @property
    def pipelined(self) -> bool:
        """Whether the pipeline model is in play (its term weighed, or memory, bandwidth or micro-batches set)."""
        return (self.weights.stage_time_peak > 0 or self.memory is not None or self.bandwidth is not None or self.micro_batches is not None
                or self.training)

    # ------------------------------------------------------------------ training mode (incsched.problems.training)

    @property
    def training(self) -> bool:
        """Whether the problem is in training mode."""
        return self.mode == "training"

    @property
    def param_factor(self) -> int:
        """Bytes a weight costs per parameter byte on a stage: 1, or the optimizer preset's factor in training."""
        return training.param_factor(self.optimizer) if self.training else 1

    def node_seconds(self) -> np.ndarray:
        """Seconds per node that ``node_ticks`` round: forward, plus backward in training mode."""
        if self.training:
            return training.training_seconds(self.graph, self.device_kind)
        return np.asarray(self.graph.time(self.device_kind), dtype=np.float64)

    def step_slots(self) -> int | Fraction:
        """Slowest-stage times per training step (``M + K - 1``; interleaved ``M + (K - 1) / v``)."""
        if not self.training:
            raise ProblemError("step_slots is a training-mode figure (mode='training')")
        return training.step_slots(self.schedule, self.n_stages, self.micro_batches)

    @cached_property
    def stage_input_coef(self) -> tuple[int, ...]:
        """Times stage k keeps each value it receives (crossing the boundary before it): ``in_flight(k)``
        under ``recompute``, else 0. Solvers add ``coef[k] * (bytes crossing boundary k - 1)`` to
        stage k's memory."""
        return tuple(training.stage_input_coef(self.in_flight(), self.recompute)) if self.training else (0,) * self.n_stages

    def in_flight(self) -> list[int]:
        """Micro-batches whose activations stage k keeps: ``min(K - k, micro_batches)`` under 1F1B (1 without micro_batches),
        the training ``schedule``'s count in training mode (`incsched.problems.training.stashed_micro_batches`)."""
        m = 1 if self.micro_batches is None else self.micro_batches
        if self.training:
            return training.stashed_micro_batches(self.schedule, self.n_stages, m)
        return [min(self.n_stages - k, m) for k in range(self.n_stages)]

    @cached_property
    def stage_memory_coef(self) -> np.ndarray:
        """Bytes node v adds to stage k's memory, shape (n_nodes, K): ``param_bytes[v] + in_flight(k) * out_bytes[v]``.

        Shared weights are not in it: stage k's memory is this column summed over its nodes plus
        each shared weight read on k, once (the module notes); `node_memory_coef` is a node alone.
        int64 (checked: a sum that could pass 2**62 raises `ProblemError`), read-only.
        """
        g = self.graph
        f = self.in_flight()
        stash = int(self._stash().sum())
        worst = self.param_factor * g.total_param_bytes + (max(f) + max(self.stage_input_coef)) * max(stash, int(g.out_bytes.sum()))
        if self.training:  # the working set or the optimizer step on top, and the kept outputs
            worst += int(self.work_coef.max(initial=0)) + int(self.step_coef.max(initial=0))
            worst += max(f) * int(training.kept_output_bytes(g).sum())
        if worst > MAX_TOTAL_BYTES:
            raise ProblemError(
                f"stage problem on graph {self.graph.name!r}: parameters plus {max(f)} micro-batches of activations "
                f"come to {worst} bytes, beyond the supported 2**62; scale the byte counts down"
            )
        if self.training:
            out = training.memory_coefficients(g, self.optimizer, f, self.recompute)
        else:
            out = g.param_bytes.astype(np.int64)[:, None] + np.asarray(f, dtype=np.int64)[None, :] * g.out_bytes.astype(np.int64)[:, None]
        out.setflags(write=False)
        return out

    @cached_property
    def node_memory_coef(self) -> np.ndarray:
        """Memory of node v alone on stage k: `stage_memory_coef` plus the shared weights v reads
        (times `param_factor` in training: their gradients and optimizer state too), and in
        training its working set or its optimizer step, whichever is more
        (``factor * weights_v + max(acts_v + work_coef[v], step_coef[v])``).

        The least stage k holds when v sits on it (int64, read-only); without shared weights, in
        inference, it is `stage_memory_coef`.
        """
        if not self.graph.shared_weights and not self.training:
            return self.stage_memory_coef
        out = self.stage_memory_coef + self.param_factor * (self.graph.node_weight_bytes - self.graph.param_bytes)[:, None]
        if self.training:
            own = self.param_factor * self.graph.node_weight_bytes.astype(np.int64)[:, None]
            out = np.maximum(out + self.work_coef[:, None], own + self.step_coef[:, None])
        out.setflags(write=False)
        return out

    @cached_property
    def work_coef(self) -> np.ndarray:
        """Training: bytes node v's forward or backward holds beyond weights and stash
        (`incsched.problems.training.work_bytes`); a stage adds the largest of its nodes' on top of
        its stash. All 0 in inference. int64, read-only."""
        out = training.work_bytes(self.graph) if self.training else np.zeros(self.graph.n_nodes, dtype=np.int64)
        out.setflags(write=False)
        return out

    @cached_property
    def release_coef(self) -> np.ndarray:
        """Training: bytes node v's backward frees of the micro-batch it runs on
        (`incsched.problems.training.release_bytes`): a stage's working set at v comes on top of its
        activations less what its nodes after v released. All 0 in inference. int64, read-only."""
        out = training.release_bytes(self.graph, self.recompute) if self.training else np.zeros(self.graph.n_nodes, dtype=np.int64)
        out.setflags(write=False)
        return out

    @cached_property
    def step_coef(self) -> np.ndarray:
        """Training: bytes the optimizer's step holds for node v's largest weight tensor
        (`incsched.problems.training.step_bytes`); a stage's step peak is its parameters' bytes plus
        the largest of its nodes'. All 0 in inference. int64, read-only."""
        out = training.step_bytes(self.graph, self.optimizer) if self.training else np.zeros(self.graph.n_nodes, dtype=np.int64)
        out.setflags(write=False)
        return out

    @cached_property
    def send_ticks(self) -> np.ndarray:
        """Ticks of one send of each node's output at ``bandwidth`` (all 0 without one), int64, read-only.

        ``round(out_bytes / bandwidth / time_unit)`` in exact rationals, the two floats read as the
        decimals they print as (1e-3 is 1/1000), half to even, once per value (the module notes).

        Raises
        ------
        ProblemError
            If the sends of the whole graph pass `MAX_TOTAL_TICKS` with the compute ticks.
        """
        g = self.graph
        out = np.zeros(g.n_nodes, dtype=np.int64)
        if self.bandwidth is not None and g.n_nodes:
            # Training: each crossed value goes forward and its gradient comes back (the module notes).
            directions = training.SEND_DIRECTIONS if self.training else 1
            ticks = self._transfer_ticks([directions * int(b) for b in g.out_bytes.tolist()])
            total = sum(ticks) + int(self.node_ticks.max(axis=1).sum())
            if total > MAX_TOTAL_TICKS:
                v = int(np.argmax(g.out_bytes))
                raise ProblemError(
                    f"sends of graph {g.name!r} at {self.bandwidth:g} bytes/s come to about 2**{total.bit_length() - 1} ticks of {self.time_unit:g} s with "
                    f"the compute (node {g.names[v]!r} alone about 2**{max(ticks[v].bit_length() - 1, 0)}), beyond the supported 2**61; use a larger bandwidth or time_unit"
                )
            out[:] = ticks
        out.setflags(write=False)
        return out

    def _transfer_ticks(self, nbytes: list[int]) -> list[int]:
        """``round(b / bandwidth / time_unit)`` for each byte count: both floats read as the decimals
        they print as, the quotient in exact rationals rounded half to even, once (the module notes)."""
        per_tick = Fraction(repr(self.bandwidth)) * Fraction(repr(self.time_unit))  # bytes one tick carries
        return [round(Fraction(int(b)) / per_tick) for b in nbytes]

    @cached_property
    def grad_sync_ticks(self) -> np.ndarray:
        """Ticks of one stage's gradient sync of each shared weight, in `CompGraph.shared_weights`
        order: ``round(nbytes / bandwidth / time_unit)``, rounded like `send_ticks`; all 0 without
        a bandwidth or outside training (no gradients). int64, read-only.

        Raises
        ------
        ProblemError
            If the syncs of all shared weights pass `MAX_TOTAL_TICKS` with the compute and sends.
        """
        weights = self.graph.shared_weights
        out = np.zeros(len(weights), dtype=np.int64)
        if self.bandwidth is not None and self.training and weights:
            ticks = self._transfer_ticks([w.nbytes for w in weights])
            total = sum(ticks) + int(self.send_ticks.sum()) + int(self.node_ticks.max(axis=1).sum())
            if total > MAX_TOTAL_TICKS:
                raise ProblemError(
                    f"gradient syncs of graph {self.graph.name!r}'s shared weights at {self.bandwidth:g} bytes/s come to about "
                    f"2**{total.bit_length() - 1} ticks of {self.time_unit:g} s with the compute and sends, beyond the supported 2**61; "
                    "use a larger bandwidth or time_unit"
                )
            out[:] = ticks
        out.setflags(write=False)
        return out

    @cached_property
    def readers(self) -> np.ndarray:
        """Edges that carry data (positive bytes): a producer whose reader sits on a later stage sends its value."""
        out = self.graph.edge_bytes > 0
        out.setflags(write=False)
        return out

    @cached_property
    def effective_memory(self) -> tuple[int, ...] | None:
        """``memory`` with every value above the most any stage can hold clamped to it (int64-safe, same answers)."""
        if self.memory is None:
            return None
        acts = int(self.graph.out_bytes.sum())
        peak = int(self.work_coef.max(initial=0)) + int(self.step_coef.max(initial=0))  # training's max terms, at most both
        most = [int(m) + c * acts + self.param_factor * self.shared_bytes + peak
                for m, c in zip(self.stage_memory_coef.sum(axis=0).tolist(), self.stage_input_coef)]
        return tuple(min(int(c), most[k]) for k, c in enumerate(self.memory))

    @property
    def shared_bytes(self) -> int:
        """Bytes of all shared weights, each once (0 without any): what sums over nodes leave out."""
        return sum(w.nbytes for w in self.graph.shared_weights)

    # ------------------------------------------------------------------ integer data for solvers

    @cached_property
    def edge_comm(self) -> np.ndarray:
        """Communication units of each edge per boundary crossed (bytes, or 0/1 in "edges" mode)."""
        b = self.graph.edge_bytes
        out = (b > 0).astype(np.int64) if self.comm == "edges" else b.astype(np.int64)
        out.setflags(write=False)
        return out

    @cached_property
    def node_ticks(self) -> np.ndarray:
        """Integer compute ticks of each node on each stage, shape (n_nodes, K).

        Raises
        ------
        ProblemError
            If the ticks of the whole graph (each node at its slowest) exceed `MAX_TOTAL_TICKS`:
            the time unit is too fine for these times; the message names the node that dominates.
        """
        t = self.node_seconds()
        speed = np.asarray(self.stage_speed if self.stage_speed else [1.0] * self.n_stages)
        with np.errstate(over="ignore"):
            raw = np.rint(t[:, None] / speed[None, :] / self.time_unit)
        slowest = raw.max(axis=1) if raw.size else np.zeros(len(t))
        # Checked in float before any int64 cast: a cast of 1e30 or inf gives garbage, not an error.
        if slowest.size and not (np.all(np.isfinite(slowest)) and float(slowest.sum()) <= MAX_TOTAL_TICKS):
            v = int(np.argmax(np.where(np.isfinite(slowest), slowest, np.inf)))
            raise ProblemError(
                f"compute times of graph {self.graph.name!r} come to {float(slowest.sum()):.3g} ticks of "
                f"{self.time_unit:g} s (node {self.graph.names[v]!r} alone {float(slowest[v]):.3g}), beyond the "
                "supported 2**61; use a larger time_unit or faster stage speeds"
            )
        out = raw.astype(np.int64)
        out.setflags(write=False)
        return out

    @cached_property
    def effective_capacity(self) -> tuple[int, ...] | None:
        """The hard capacity with every value above the graph's total parameters clamped to it.

        A stage can never hold more than all parameters (shared weights once each), so the clamp
        changes no answer; it keeps capacities such as 5e18 or 2**70 inside int64 (and CP-SAT's domains).
        """
        if self.capacity is None:
            return None
        total = self.graph.total_param_bytes  # <= 2**62 by CompGraph's limit
        return tuple(min(int(c), total) for c in self.capacity)

    def capacity_array(self) -> np.ndarray | None:
        """Hard capacity per stage (bytes) as an int64 array (`effective_capacity`), or None without one."""
        return None if self.capacity is None else np.asarray(self.effective_capacity, dtype=np.int64)

    def term_upper_bounds(self) -> dict[str, int]:
        """An upper bound on each objective term over all assignments, as Python ints.

        What the solvers check their integer ranges with: ``mem_peak`` and ``spill`` at most all
        parameters (shared weights once: no stage holds one twice), ``comm_total`` every edge across all K-1 boundaries, ``comm_peak`` every edge,
        ``compute_peak`` every node at its slowest, ``stage_time_peak`` that plus every send,
        ``grad_sync_peak`` every shared weight's sync.
        """
        params = self.graph.total_param_bytes
        comm = int(self.edge_comm.sum())
        ticks = int(self.node_ticks.max(axis=1).sum()) if self.graph.n_nodes and self.n_stages else 0
        return {
            "mem_peak": params,
            "comm_total": comm * (self.n_stages - 1),
            "comm_peak": comm,
            "compute_peak": ticks,
            "spill": params,
            "stage_time_peak": ticks + int(self.send_ticks.sum()),
            "grad_sync_peak": int(self.grad_sync_ticks.sum()),
        }

    # ------------------------------------------------------------------ feasibility

    def infeasibility(self) -> str | None:
        """Why no assignment can meet the hard capacity, or None if no such reason is visible.

        Checks (in order): a node whose parameters (its own and every shared weight it reads,
        `CompGraph.node_weight_bytes`) exceed every stage's capacity; more parameters in total
        (shared weights once) than all stages hold; the same two for ``memory`` (parameters plus
        activations in flight: a node alone on a stage, and everything at the least in-flight count, 1).
        Passing these does not prove feasibility (bin packing with precedence remains); a solver
        may still answer ``infeasible``.
        """
        reason = self._memory_infeasibility()
        if reason is not None or self.capacity is None:
            return reason
        # Python ints throughout: capacities may exceed int64, and their sum must not wrap.
        largest, room = max(self.capacity), sum(self.capacity)
        p = self.graph.node_weight_bytes
        biggest = int(np.argmax(p)) if p.size else -1
        if biggest >= 0 and int(p[biggest]) > largest:
            shared = int(p[biggest]) - int(self.graph.param_bytes[biggest])
            return (
                f"node {self.graph.names[biggest]!r} has {int(p[biggest])} parameter bytes"
                + (f" ({shared} of them in shared weights it reads)" if shared else "")
                + f", more than any stage's capacity (largest {largest} bytes)"
            )
        total = self.graph.total_param_bytes
        if total > room:
            return (
                f"the graph's {total} parameter bytes exceed the {self.n_stages} stages' total capacity "
                f"of {room} bytes"
            )
        return None

    def _memory_infeasibility(self) -> str | None:
        if self.memory is None:
            return None
        g = self.graph
        room = np.asarray([min(int(c), 2**62) for c in self.memory], dtype=np.int64)
        alone = self.node_memory_coef
        fits = (alone <= room[None, :]).any(axis=1)
        if not fits.all():
            v = int(np.flatnonzero(~fits)[0])
            return (
                f"node {g.names[v]!r} needs {int(alone[v].min())} bytes of memory on any stage "
                f"({int(g.node_weight_bytes[v])} parameter bytes{self._factor_note()} plus its activations of {int(self._stash()[v])} bytes times the "
                f"micro-batches in flight{self._peak_note(v)}), more than any stage's memory (largest {max(self.memory)} bytes)"
            )
        # Every stage keeps at least one micro-batch and every shared weight is held somewhere;
        # in training each node at its cheapest stage.
        if self.training:
            least = int(self.stage_memory_coef.min(axis=1).sum()) + self.param_factor * self.shared_bytes
        else:
            least = g.total_param_bytes + int(g.out_bytes.sum())
        if least > sum(self.memory):
            return (
                f"the graph's parameters{self._factor_note()} plus one micro-batch of activations ({least} bytes) exceed the "
                f"{self.n_stages} stages' total memory of {sum(self.memory)} bytes"
            )
        return None

    def _stash(self) -> np.ndarray:
        """Activation bytes per node and micro-batch: what training stashes, else the outputs in flight."""
        return training.stash_bytes(self.graph) if self.training else self.graph.out_bytes

    def _peak_note(self, v: int) -> str:
        if not self.training:
            return ""
        return f", then its working set of {int(self.work_coef[v])} bytes, or the optimizer step's {int(self.step_coef[v])}"

    def _factor_note(self) -> str:
        return f" times {self.param_factor} for gradients and {self.optimizer} state" if self.training else ""

    def check_feasible(self) -> None:
        """Raise `InfeasibleProblem` if `infeasibility` finds a reason.

        Raises
        ------
        InfeasibleProblem
            With the reason, naming the offending node where there is one.
        """
        reason = self.infeasibility()
        if reason is not None:
            raise InfeasibleProblem(f"stage problem on graph {self.graph.name!r} is infeasible: {reason}")

    def allowed_or_reason(self, window: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray | None, str | None]:
        """`allowed_stages`, or the reason there is nothing to solve: every back end's first step.

        Returns ``(allowed, None)``, or ``(None, reason)`` when `infeasibility` finds a reason or
        the window leaves some node no stage.
        """
        reason = self.infeasibility()
        if reason is not None:
            return None, reason
        try:
            return self.allowed_stages(window), None
        except InfeasibleProblem as exc:
            return None, str(exc)

    def allowed_stages(self, window: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """Which stages each node may take, shape (n_nodes, K), after every cheap deduction.

        Starts from the window (per-node inclusive stage range) and the hard capacities (a node never
        sits on a stage too small for its parameters, shared weights it reads included, or for them
        plus its activations in flight under ``memory``), then propagates precedence: a node's
        earliest stage is at least each predecessor's earliest, its latest at most each successor's
        latest. Solvers build their domains from this; the relaxation step may call it to check a
        window before solving.

        Parameters
        ----------
        window : (lo, hi) pair of int arrays, optional
            Inclusive per-node stage bounds.

        Returns
        -------
        numpy.ndarray of bool

        Raises
        ------
        InfeasibleProblem
            If some node is left with no stage; the message names it.
        ProblemError
            If the window has the wrong shape.
        """
        g, K = self.graph, self.n_stages
        n = g.n_nodes
        stage_ids = np.arange(K)
        allowed = np.ones((n, K), dtype=bool)
        if window is not None:
            lo, hi = (np.asarray(a, dtype=np.int64) for a in window)
            if lo.shape != (n,) or hi.shape != (n,):
                raise ProblemError(f"a window needs (lo, hi) arrays of shape ({n},), got {lo.shape} and {hi.shape}")
            allowed &= (stage_ids[None, :] >= lo[:, None]) & (stage_ids[None, :] <= hi[:, None])
        if self.capacity is not None:
            allowed &= g.node_weight_bytes[:, None] <= self.capacity_array()[None, :]
        if self.memory is not None:
            allowed &= self.node_memory_coef <= np.asarray(self.effective_memory, dtype=np.int64)[None, :]
        self._raise_if_empty(allowed, "its window and the stages' capacities leave it no stage")
        first = np.where(allowed.any(axis=1), allowed.argmax(axis=1), K).tolist()
        last = np.where(allowed.any(axis=1), K - 1 - allowed[:, ::-1].argmax(axis=1), -1).tolist()
        pred_ptr, pred_idx = g.pred_ptr.tolist(), g.pred_idx.tolist()
        succ_ptr, succ_idx = g.succ_ptr.tolist(), g.succ_idx.tolist()
        order = g.topological_order().tolist()
        row = allowed.tolist()
        for v in order:
            preds = [pred_idx[k] for k in range(pred_ptr[v], pred_ptr[v + 1])]
            lo_v = max([first[u] for u in preds], default=0)
            first[v] = next((s for s in range(max(lo_v, first[v]), K) if row[v][s]), K)
            if first[v] == K:
                u = max(preds, key=lambda x: first[x])
                self._raise_forced(v, f"predecessor {g.names[u]!r} is on stage {first[u]} or later")
        for v in reversed(order):
            succs = [succ_idx[k] for k in range(succ_ptr[v], succ_ptr[v + 1])]
            hi_v = min([last[x] for x in succs], default=K - 1)
            last[v] = next((s for s in range(min(hi_v, last[v]), -1, -1) if row[v][s]), -1)
            if last[v] < first[v]:
                x = min(succs, key=lambda y: last[y])
                self._raise_forced(v, f"successor {g.names[x]!r} is on stage {last[x]} or earlier")
        first_a, last_a = np.asarray(first), np.asarray(last)
        allowed &= (stage_ids[None, :] >= first_a[:, None]) & (stage_ids[None, :] <= last_a[:, None])
        return allowed

    def _raise_forced(self, v: int, why: str) -> None:
        raise InfeasibleProblem(
            f"node {self.graph.names[v]!r} of graph {self.graph.name!r} has no possible stage: {why}, "
            "and its window and capacity allow none of those"
        )

    def _raise_if_empty(self, allowed: np.ndarray, why: str) -> None:
        empty = np.flatnonzero(~allowed.any(axis=1))
        if empty.size:
            raise InfeasibleProblem(
                f"node {self.graph.names[int(empty[0])]!r} of graph {self.graph.name!r} has no possible stage: {why}"
                + (f" ({empty.size} such nodes)" if empty.size > 1 else "")
            )

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        """The versioned JSON-ready dictionary (the graph embedded as `graph_to_dict`)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "graph": graph_to_dict(self.graph),
            "n_stages": self.n_stages,
            # The sync term only when weighed: documents of every other problem stay as they were.
            "weights": {t: x for t, x in self.weights.as_dict().items() if t != "grad_sync_peak" or x},
            "comm": self.comm,
            "capacity": None if self.capacity is None else list(self.capacity),
            "spill_capacity": None if self.spill_capacity is None else list(self.spill_capacity),
            "stage_speed": None if self.stage_speed is None else list(self.stage_speed),
            "device_kind": self.device_kind,
            "time_unit": self.time_unit,
            "memory": None if self.memory is None else list(self.memory),
            "bandwidth": self.bandwidth,
            "micro_batches": self.micro_batches,
            **({"mode": self.mode, "optimizer": self.optimizer, "schedule": self.schedule, "recompute": self.recompute}
               if self.training else {}),
        }

    @classmethod
    def from_json(cls, data: Any, *, source: str = "stage problem") -> StageProblem:
        """Rebuild a problem from `to_json`'s form.

        Raises
        ------
        FormatError
            Not a stage problem, unsupported version, or a missing / mistyped field.
        ProblemError, GraphError
            The file is well-formed but describes an invalid problem or graph.
        """
        check_document(data, format=FORMAT, version=VERSION, fields=("graph", "n_stages", "weights"), noun="stage problem", source=source)
        if not isinstance(data["weights"], dict):
            raise FormatError(f"{source}: field 'weights' must be an object")
        try:
            weights = ObjectiveWeights(**data["weights"])
        except TypeError as exc:
            raise FormatError(f"{source}: bad field 'weights': {exc}") from None
        return cls(
            graph_from_dict(data["graph"], source=f"{source} (graph)"),
            data["n_stages"],
            weights,
            comm=data.get("comm", "bytes"),
            capacity=data.get("capacity"),
            spill_capacity=data.get("spill_capacity"),
            stage_speed=data.get("stage_speed"),
            device_kind=data.get("device_kind", DEFAULT_KIND),
            time_unit=data.get("time_unit"),
            memory=data.get("memory"),
            bandwidth=data.get("bandwidth"),
            micro_batches=data.get("micro_batches"),
            mode=data.get("mode", "inference"),
            optimizer=data.get("optimizer"),
            schedule=data.get("schedule"),
            recompute=data.get("recompute", False),
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write the problem as JSON (gzipped for ``.gz``), atomically."""
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> StageProblem:
        """Read a problem written by `save`; errors name the file."""
        return cls.from_json(read_json(path), source=str(path))
