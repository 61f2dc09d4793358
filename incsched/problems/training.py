"""Training mode of the stage problem: what a pipeline stage holds and spends when it trains.

`StageProblem` (``mode="training"``) routes its memory coefficients, node times, sends and step
time through this module, so every back end keeps reading the same accessors
(`StageProblem.stage_memory_coef`, `node_ticks`, `send_ticks`, `in_flight`) and the evaluator
recomputes the same rules from the graph. Exact Python ints throughout; seconds only for times.

The model, stage k of K (0-based), M micro-batches:

- *Weights.* ``param_factor(optimizer) * params_k``: parameters, their gradients and the
  optimizer's state, as bytes per byte of parameter (`OPTIMIZERS`; a shared weight held on a stage
  is multiplied by the same factor).
- *Activations.* Each schedule stashes, for the backward pass, the activations of
  `stashed_micro_batches` micro-batches (``in_flight(k)``): ``in_flight(k) * acts_k``, ``acts_k``
  the `stash_bytes` of the stage's nodes: what autograd saves for their backward
  (``CompGraph.saved_bytes``, measured by ``capture(..., training=True)``), else their
  ``out_bytes``, an estimate (a layer saves several times its output: `activation_source`). With ``recompute`` (activation checkpointing at the stage
  boundary) the stage keeps per micro-batch in flight only its inputs, that is the values it
  receives (`stage_input_coef`: every value crossing the boundary before it) and the outputs of
  the graph's source nodes on it (the model's inputs), plus one micro-batch's other activations,
  rebuilt for the backward pass being run: ``(acts_k - sources_k) + in_flight(k) * (received_k +
  sources_k)``. What a stage receives is kept as it arrives (``torch.distributed.pipelining``'s
  stages cache their inputs per micro-batch), values only passing through included.
- *Working set and optimizer step.* Stage memory peaks at one of two moments. While a node v's
  forward or backward runs, the stage holds, beyond the weights and its activations, v's working
  set (`work_bytes`: the gradients of activations in flight, a weight's gradient before it is
  accumulated, temporaries); but by then the backward of the micro-batch being run has already
  freed what the stage's nodes after v saved (`release_bytes`: their stash, or under recompute
  their rebuilt activations; "after" in the graph's node order, the order capture ran them in).
  While the optimizer steps, the stash is gone and the step's temporaries for one weight tensor
  are live (`step_bytes`: the preset's ``step_factor`` times the largest weight tensor, for
  torch's one-tensor-at-a-time ``foreach=False`` step). So stage k holds

      factor * params_k + max(acts_k + max(0, max_v (work_v - released_k after v)), max_v step_v)

  over its nodes v (every max 0 on an empty stage; the stage's last node gives a term >= 0, so
  the inner 0 only matters there; `training_peak`). Each term is linear in a model's placement
  variables: ``mem >= base + work_v x[v, k] - sum_{u > v} release_u x[u, k]`` holds for every v
  whether or not v sits on k (without v it is weaker than ``base <= mem``), and
  ``mem >= own + step_v x[v, k]``. Merging a run of consecutive nodes keeps the figure when the
  merged node's working set is its members' largest with the release after each counted, which
  `incsched.graph.coarsen.quotient`'s plain maximum over-counts at most (a safe merge).
- *The loss.* It enters as part of the graph, measured: capture the model called with its labels
  (as ``benchmarks/fidelity.py`` does), and the loss joins the last layer's node, whose stash
  (log-probabilities) and working set (the logits' gradient, softmax temporaries) then include
  it. A graph captured without its loss leaves the loss's bytes out (about 3-4 times one
  micro-batch's logits, on the last stage); estimated working sets do not add them either.
- *The kept output.* ``torch.distributed.pipelining`` runs the loss outside the last stage (the
  schedule's ``loss_fn``) and its stages keep each micro-batch's output in ``fwd_cache`` from the
  forward until that micro-batch's backward has run (``stage.py``: ``forward_one_chunk`` stores
  ``(output, inputs)``, ``backward_one_chunk`` pops them). The last stage's output, the logits
  here, is read by no node of the stage after the loss, so autograd saves none of it: the stage
  holding a graph output keeps ``in_flight(k)`` times its bytes (`kept_output_bytes`; GPipe M,
  1F1B 1 on the last stage), with or without recompute. The outputs an earlier stage sends on are
  kept the same way (for their gradients' backward) but not charged: one boundary's traffic per
  micro-batch in flight, small beside a transformer stage's stash (0.125 MiB a micro-batch on
  gpt2-tiny's stage 0, whose peak the model already over-predicts by 5 %). With
  ``return_outputs=True`` the schedule also appends every micro-batch's output to
  ``output_chunks`` for the step's merged result (M outputs held to the step's end):
  `incsched.execute.training_step` passes False, as a training loop does. Not modelled either:
  1F1B's loop keeps the previous micro-batch's output referenced (its ``output`` variable) during
  the next forward, one more output at that moment on the last stage.
- *Time.* Forward plus backward seconds per node (`training_seconds`): backward measured where
  capture measured it (``CompGraph.backward_time``), else estimated as twice the forward (the
  standard rule: a backward pass computes the gradients of the inputs and of the weights, each
  about the forward's FLOPs; Kaplan et al. 2020, Narayanan et al. 2021), and labelled so
  (`backward_source`).
- *Sends.* A value crossing a boundary moves forward as an activation and back as its gradient, the
  same bytes: both are charged to the stage before the boundary (`SEND_DIRECTIONS`), as the
  inference model charges the forward send, so one stage per boundary link carries its traffic.
- *Step time.* 1F1B and GPipe run M + K - 1 slots of the slowest stage's forward-and-backward time
  (K - 1 of them the fill and drain bubble); interleaved 1F1B with v chunks per stage shrinks the
  bubble to (K - 1) / v (Narayanan et al. 2021, section 2.2.2): `step_slots`. Then the copies of a
  shared weight held on several stages all-reduce their gradients before the optimizer steps:
  each holder sends the weight's bytes once (`StageProblem.grad_sync_ticks`), and the step adds
  the busiest stage's sync. ``StageProblem.pipeline`` minimises that step,
  ``step_slots * stage_time_peak + grad_sync_peak`` (`incsched.problems.stage`'s notes).
- *Every stage holds a node.* The model is of the K-stage pipeline that is built: split points
  (`incsched.export.build_pipeline`, DeepSpeed, torchtitan) make one stage per run of modules and
  refuse an empty stage, and the K - 1 bubble slots, the stash counts (1F1B's K - k) and the
  ranks are those of K stages. So training mode forbids empty stages (the evaluator flags one; the
  exact models add ``sum_v [s_v == k] >= 1`` per stage; the pipeline DP cuts non-empty runs) and
  refuses K above the node count. Counting only the used stages instead would make the slots
  ``M + U - 1`` with U a variable, a product with ``stage_time_peak`` in the objective, and each
  stage's stash count depend on how many later stages are used: far heavier exact models, for
  answers no split-point export could build as solved. Solve with fewer stages to get fewer.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..errors import ProblemError
from ..graph import CompGraph

__all__ = [
    "OptimizerPreset",
    "OPTIMIZERS",
    "SCHEDULES",
    "MODES",
    "SEND_DIRECTIONS",
    "BACKWARD_ESTIMATE_FACTOR",
    "check_training",
    "param_factor",
    "parse_schedule",
    "stashed_micro_batches",
    "memory_coefficients",
    "stash_bytes",
    "activation_source",
    "kept_output_bytes",
    "kept_output_source",
    "stage_input_coef",
    "backward_seconds",
    "backward_source",
    "training_seconds",
    "step_slots",
    "work_bytes",
    "work_source",
    "largest_weight_bytes",
    "step_bytes",
    "release_bytes",
    "peak_work",
    "training_peak",
]

#: How a stage problem runs: forward only, or forward, backward and an optimizer step.
MODES = ("inference", "training")

#: Pipeline schedules by name; ``interleaved:v`` takes the chunks per stage, v >= 2.
SCHEDULES = ("gpipe", "1f1b", "interleaved:v")

#: A crossed boundary carries the activation forward and its gradient back (same bytes).
SEND_DIRECTIONS = 2

#: Backward seconds per forward second when nothing was measured (backward ~ 2x forward FLOPs).
BACKWARD_ESTIMATE_FACTOR = 2


@dataclass(frozen=True)
class OptimizerPreset:
    """Training bytes per byte of parameter, and the rule they come from.

    ``param_factor`` = (parameter + gradient + optimizer-state bytes per parameter) / (bytes per
    parameter as the graph counts it). The graph's ``param_bytes`` are the weights in the preset's
    ``param_dtype`` (capture the model in that dtype): a bf16 model's 2 bytes per parameter under
    ``adam-mixed`` become 16.
    """

    name: str
    param_factor: int
    param_dtype: str
    rule: str
    step_factor: int = 0
    step_rule: str = ""


#: The named presets (ZeRO, Rajbhandari et al. 2020, section 3.1, counts mixed-precision Adam as 16 bytes per parameter).
OPTIMIZERS: dict[str, OptimizerPreset] = {
    p.name: p
    for p in (
        OptimizerPreset("adam-fp32", 4, "fp32", "fp32 params 4 + grads 4 + Adam m 4 + v 4 = 16 bytes per 4-byte param",
                        2, "measured: torch Adam(foreach=False) holds sqrt(v) and its quotient, 2 tensors' bytes"),
        OptimizerPreset("adam-mixed", 8, "bf16", "bf16 params 2 + grads 2 + fp32 master 4 + m 4 + v 4 = 16 bytes per 2-byte param",
                        6, "estimated: an fp32 copy of the gradient and Adam's 2 fp32 temporaries, 12 bytes per 2-byte param"),
        OptimizerPreset("sgd-momentum-fp32", 3, "fp32", "fp32 params 4 + grads 4 + momentum 4 = 12 bytes per 4-byte param",
                        0, "measured: torch SGD(momentum, foreach=False) updates in place"),
        OptimizerPreset("sgd-fp32", 2, "fp32", "fp32 params 4 + grads 4 = 8 bytes per 4-byte param",
                        0, "measured: torch SGD(foreach=False) updates in place"),
    )
}

DEFAULT_OPTIMIZER = "adam-fp32"
DEFAULT_SCHEDULE = "1f1b"


def check_training(mode, optimizer, schedule, recompute) -> tuple[str, str | None, str | None, bool]:
    """The training fields of a `StageProblem`, checked and normalised.

    Inference takes none of them (``optimizer``, ``schedule`` None, ``recompute`` False); training
    fills the defaults (``adam-fp32``, ``1f1b``).

    Raises
    ------
    ProblemError
        One line naming the bad value and the choices.

    Examples
    --------
    >>> check_training("training", None, "interleaved:2", False)
    ('training', 'adam-fp32', 'interleaved:2', False)
    """
    if mode not in MODES:
        raise ProblemError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    if not isinstance(recompute, (bool, np.bool_)):
        raise ProblemError(f"recompute must be True or False, got {recompute!r}")
    if mode == "inference":
        if optimizer is not None or schedule is not None or recompute:
            raise ProblemError("optimizer, schedule and recompute belong to mode='training'")
        return mode, None, None, False
    optimizer = DEFAULT_OPTIMIZER if optimizer is None else optimizer
    if optimizer not in OPTIMIZERS:
        raise ProblemError(f"optimizer must be one of {', '.join(OPTIMIZERS)}; got {optimizer!r}")
    schedule = DEFAULT_SCHEDULE if schedule is None else schedule
    parse_schedule(schedule)
    return mode, optimizer, schedule, bool(recompute)


def param_factor(optimizer: str) -> int:
    """Bytes a trained weight costs per byte of parameter under ``optimizer`` (`OPTIMIZERS`)."""
    return OPTIMIZERS[optimizer].param_factor


def parse_schedule(schedule: str) -> tuple[str, int]:
    """``(kind, chunks)``: ``("gpipe", 1)``, ``("1f1b", 1)`` or ``("interleaved", v)``.

    Raises
    ------
    ProblemError
        For another name, or chunks that are not a whole number >= 2.
    """
    if schedule in ("gpipe", "1f1b"):
        return schedule, 1
    if isinstance(schedule, str) and schedule.startswith("interleaved:"):
        text = schedule.split(":", 1)[1]
        if text.isdigit() and int(text) >= 2:
            return "interleaved", int(text)
        raise ProblemError(f"schedule {schedule!r}: interleaved:v needs v, the chunks per stage, a whole number >= 2")
    raise ProblemError(f"schedule must be one of {', '.join(SCHEDULES)}; got {schedule!r}")


def stashed_micro_batches(schedule: str, n_stages: int, micro_batches: int) -> list[int]:
    """Micro-batches whose activations stage k keeps for backward at the schedule's peak.

    - GPipe: all M forwards run before any backward: M on every stage.
    - 1F1B: stage k runs K - k - 1 warm-up forwards and one more before its first backward:
      ``min(K - k, M)``.
    - Interleaved 1F1B, v chunks per stage (each 1/v of its layers): rank k runs
      ``2 (K - k - 1) + (v - 1) K`` warm-up chunk-forwards, at most the ``M v`` there are
      (Megatron-LM ``forward_backward_pipelining_with_interleaving``; torch.distributed.pipelining
      ``ScheduleInterleaved1F1B`` counts the same warm-up), one more before its first backward.
      Those c = ``min(2 (K - k - 1) + (v - 1) K + 1, M v)`` chunk-activations are held as
      ``ceil(c / v)`` whole micro-batches of the stage's activations: a safe count whatever the
      chunks' sizes (some chunk holds ``ceil(c / v)`` of them at most), within one micro-batch of
      the equal-chunk figure ``c / v``, whose stage 0 value K (1 + (K - 1) / (K v)) is Korthikanti
      et al. 2022's (section 4.2.3).

    >>> stashed_micro_batches("1f1b", 4, 8), stashed_micro_batches("gpipe", 4, 8)
    ([4, 3, 2, 1], [8, 8, 8, 8])
    >>> stashed_micro_batches("interleaved:2", 4, 8)
    [6, 5, 4, 3]
    """
    kind, v = parse_schedule(schedule)
    K, M = n_stages, micro_batches
    if kind == "gpipe":
        return [M] * K
    if kind == "1f1b":
        return [min(K - k, M) for k in range(K)]
    chunks = [min(2 * (K - k - 1) + (v - 1) * K + 1, M * v) for k in range(K)]
    return [-(-c // v) for c in chunks]


def stash_bytes(graph: CompGraph) -> np.ndarray:
    """Bytes node v's forward keeps for its backward, per micro-batch: ``saved_bytes`` where
    capture measured them, else ``out_bytes`` (an estimate; `activation_source` says which)."""
    return graph.saved_bytes if graph.saved_bytes is not None else graph.out_bytes


def activation_source(graph: CompGraph) -> str:
    """Where the stashed activations come from, for reports."""
    return "measured (saved for backward)" if graph.saved_bytes is not None else "estimated (output bytes)"


#: ``CompGraph.meta`` key capture fills when code runs after the last layer (the loss of a model
#: called with its labels): ``{node name: bytes}``, what that layer hands to the loss.
LOSS_INPUT_KEY = "loss_input_bytes"


def kept_output_bytes(graph: CompGraph) -> np.ndarray:
    """Bytes of the pipeline's output node v's stage keeps per micro-batch in flight (int64, the
    module notes): a sink's (a graph output's) ``out_bytes``, but for the node capture recorded in
    ``meta["loss_input_bytes"]`` (the last layer, its loss joined to it) the bytes that layer hands
    to the loss, since the pipeline runs the loss outside the stage and keeps its input (the
    logits); 0 for every other node. `kept_output_source` says which."""
    kept = np.where(graph.out_degree == 0, graph.out_bytes.astype(np.int64), 0)
    for name, nbytes in (graph.meta.get(LOSS_INPUT_KEY) or {}).items():
        if name in graph.names and graph.out_degree[graph.index(name)] == 0:
            kept[graph.index(name)] = int(nbytes)
    return kept


def kept_output_source(graph: CompGraph) -> str:
    """Where `kept_output_bytes` come from, for reports."""
    if graph.meta.get(LOSS_INPUT_KEY):
        return "measured at capture (what the last layer hands to the loss, which the schedule runs outside the stage)"
    return "the graph outputs' out_bytes"


def memory_coefficients(graph: CompGraph, optimizer: str, in_flight: list[int], recompute: bool) -> np.ndarray:
    """Bytes node v adds to stage k's training memory wherever its neighbours sit, shape (n_nodes, K).

    ``param_factor * param_bytes[v] + in_flight(k) * (stash_bytes[v] + kept_output_bytes[v])``;
    with ``recompute``, one micro-batch's ``stash_bytes[v]``, and for a source node (a model input
    the stage keeps per micro-batch) ``in_flight(k)`` times its ``out_bytes``; the kept output
    ``in_flight(k)`` times either way. The values a stage receives are `stage_input_coef`'s.
    int64; the caller checks the range.
    """
    f = np.asarray(in_flight, dtype=np.int64)[None, :]
    stash = stash_bytes(graph).astype(np.int64)[:, None]
    if recompute:
        source = (graph.in_degree == 0)[:, None]
        acts = np.where(source, f * graph.out_bytes.astype(np.int64)[:, None], stash)
    else:
        acts = f * stash
    kept = f * kept_output_bytes(graph)[:, None]
    return param_factor(optimizer) * graph.param_bytes.astype(np.int64)[:, None] + acts + kept


def stage_input_coef(in_flight: list[int], recompute: bool) -> list[int]:
    """Per stage, how many times it keeps each value it receives (the bytes crossing the boundary
    before it): ``in_flight(k)`` under ``recompute`` (stage 0 receives nothing), else 0 (the
    values are among some stage's own activations already)."""
    if not recompute:
        return [0] * len(in_flight)
    return [0] + [int(f) for f in in_flight[1:]]


def backward_seconds(graph: CompGraph, kind: str) -> np.ndarray:
    """Backward seconds per node on ``kind``: measured (``graph.backward_time[kind]``), else
    `BACKWARD_ESTIMATE_FACTOR` times the forward (`CompGraph.time`)."""
    if kind in graph.backward_time:
        return graph.backward_time[kind]
    return BACKWARD_ESTIMATE_FACTOR * np.asarray(graph.time(kind), dtype=np.float64)


def backward_source(graph: CompGraph, kind: str) -> str:
    """Where `backward_seconds` come from, for reports: ``"measured"`` or ``"estimated (2x forward)"``."""
    return "measured" if kind in graph.backward_time else f"estimated ({BACKWARD_ESTIMATE_FACTOR}x forward)"


def training_seconds(graph: CompGraph, kind: str) -> np.ndarray:
    """Forward plus backward seconds per node on ``kind`` (float64)."""
    return np.asarray(graph.time(kind), dtype=np.float64) + np.asarray(backward_seconds(graph, kind), dtype=np.float64)


def step_slots(schedule: str, n_stages: int, micro_batches: int) -> int | Fraction:
    """Slowest-stage times one training step takes: ``M + K - 1``, or ``M + (K - 1) / v`` interleaved.

    >>> step_slots("1f1b", 4, 8), step_slots("interleaved:2", 4, 8)
    (11, Fraction(19, 2))
    """
    kind, v = parse_schedule(schedule)
    slots = Fraction(micro_batches) + Fraction(n_stages - 1, v)
    return int(slots) if slots.denominator == 1 else slots


def work_bytes(graph: CompGraph) -> np.ndarray:
    """Bytes node v's forward or backward holds beyond the weights, their gradients and the stash
    (int64): ``CompGraph.work_bytes`` where capture measured them, else an estimate: the gradients
    of its output and of its inputs (the bytes of its incoming edges) and of the weights it reads
    (one gradient before it is accumulated): ``out_bytes + in_bytes + node_weight_bytes``.
    `work_source` says which."""
    if graph.work_bytes is not None:
        return graph.work_bytes.astype(np.int64)
    incoming = np.zeros(graph.n_nodes, dtype=np.int64)
    np.add.at(incoming, graph.dst, graph.edge_bytes.astype(np.int64))
    return graph.out_bytes.astype(np.int64) + incoming + graph.node_weight_bytes.astype(np.int64)


def work_source(graph: CompGraph) -> str:
    """Where `work_bytes` come from, for reports."""
    if graph.work_bytes is not None:
        return "measured (live bytes in each node's forward and backward)"
    return "estimated (output, input and weight gradients)"


def largest_weight_bytes(graph: CompGraph) -> np.ndarray:
    """Bytes of the largest weight tensor node v reads, shared ones included (int64): measured
    (``CompGraph.largest_weight_bytes``), else all the weights it reads (`CompGraph.node_weight_bytes`),
    an upper bound."""
    if graph.largest_weight_bytes is not None:
        return graph.largest_weight_bytes.astype(np.int64)
    return graph.node_weight_bytes.astype(np.int64)


def step_bytes(graph: CompGraph, optimizer: str) -> np.ndarray:
    """Temporaries of the optimizer's step on node v's largest weight tensor: ``step_factor * largest_weight_bytes`` (int64)."""
    return OPTIMIZERS[optimizer].step_factor * largest_weight_bytes(graph)


def release_bytes(graph: CompGraph, recompute: bool) -> np.ndarray:
    """Bytes node v's backward frees of the micro-batch it runs on (int64): its `stash_bytes`, and
    under recompute 0 for a source node (a model input, kept per micro-batch in flight)."""
    out = stash_bytes(graph).astype(np.int64)
    if recompute:
        out = np.where(graph.in_degree == 0, 0, out)
    return out


def peak_work(nodes: list[int], work: list[int], release: list[int]) -> int:
    """``max(0, max_v (work[v] - release of the nodes after v))`` over one stage's ``nodes`` in the
    graph's node order (Python ints; 0 for an empty stage): what the working set adds to a stage's
    activations at its peak (the module notes)."""
    best, after = 0, 0
    for v in sorted(nodes, reverse=True):
        best = max(best, work[v] - after)
        after += release[v]
    return best


def training_peak(params: int, acts: int, work: int, step: int, factor: int) -> int:
    """A stage's training bytes from its parts (Python ints): ``factor * params + max(acts + work, step)``,
    ``work`` from `peak_work` and ``step`` the largest of the stage's nodes' (the module notes)."""
    return factor * params + max(acts + work, step)
