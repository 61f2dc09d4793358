"""The one evaluator of stage assignments: feasibility and every objective term, from scratch.

Tests, the RL reward, the solve pipeline's self-check and the benchmarks all judge a stage
assignment here. It recomputes everything from the graph's raw arrays with numpy and shares no code
with any solver model, so a bug in a model shows up as a disagreement instead of being repeated.

Exact arithmetic: every term is a Python int (per-stage loads are int64 sums, which cannot wrap
because `CompGraph` limits each byte column's total to 2**62 and `StageProblem` the ticks to
2**61; ``comm_total`` is summed over boundaries in Python ints because (K-1) times the edges'
bytes can pass int64). The objective is ``sum(weight_t * term_t)`` with each weight read as the
exact decimal it denotes (`ObjectiveWeights.exact`): a Python int when whole, else a
`fractions.Fraction`, never a float, so it catches whatever a solver rounds.

Shared weights (`CompGraph.shared_weights`) are charged here from the readers' stages: a weight
costs its bytes once on every stage that holds at least one of its readers (a Boolean table of
weights by stages, filled from the assignment), on top of the nodes' own ``param_bytes``.

The pipeline figures (``stage_time_peak``, per-stage sends and memory in flight) follow the model in
`incsched.problems.stage`'s notes, recomputed here from the edges: each value's last reader's stage,
and a difference array over the stages it is sent from. Training mode (``problem.training``) follows
`incsched.problems.training`'s rules, recomputed here from the per-stage sums: parameters times the
optimizer's factor, the schedule's stashed activations (or, with recompute, the bytes each stage
receives, counted from the edges), forward plus backward seconds, sends both ways, the gradient
sync of replicated shared weights (``grad_sync_peak``, from the weights-by-stages table), and
``step_time_s`` / ``step_ticks``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..problems import training
from ..problems.stage import ProblemError, StageProblem, exact_number

__all__ = ["StageEvaluation", "evaluate_stages"]

#: Violations listed one by one; beyond this many only a count is added (random RL assignments).
_MAX_LISTED = 50


@dataclass(frozen=True, eq=False)
class StageEvaluation:
    """Feasibility and objective of one stage assignment, in the problem's integer units.

    ``mem_peak`` and ``spill`` are bytes; ``comm_total`` and ``comm_peak`` bytes or edges (the
    problem's ``comm`` mode); ``compute_peak`` is in ticks of ``problem.time_unit`` and
    ``compute_peak_s`` in seconds (unrounded). ``stage_mem`` counts each shared weight once on
    every stage holding one of its readers; ``replicated`` names the shared weights held on more
    than one stage, with those stages. ``objective`` is the weighted sum of the integer
    terms: a Python int when whole, else a `fractions.Fraction` (see the module notes). When some
    stage is outside 0..K-1 the terms cannot be computed and are None.

    Pipeline figures: ``stage_send`` (ticks of the values each stage sends), ``stage_time`` (compute
    plus sends, ticks), ``stage_time_peak`` (their maximum) and ``stage_time_s`` /
    ``stage_time_peak_s`` in unrounded seconds; ``throughput`` is micro-batches per second at the
    slowest stage (inf when every stage takes no time); ``stage_memory`` (Python ints) is each
    stage's parameters plus its activations in flight, which the problem's ``memory`` bounds (in
    training mode parameters, gradients, optimizer state and stashed activations); ``step_time_s``
    is a training step's seconds (`StageProblem.step_slots` times the slowest stage, plus
    ``grad_sync_s``), None otherwise. ``grad_sync_s``: once per step, every stage holding a
    replicated shared weight sends its gradient at ``bandwidth`` to keep the copies equal; the
    busiest stage's sends in unrounded seconds (0 without a bandwidth). In ticks it is the
    ``grad_sync_peak`` term (each weight's sync rounded once, `StageProblem.grad_sync_ticks`;
    ``stage_sync`` per stage), and ``step_ticks`` = ``step_slots * stage_time_peak +
    grad_sync_peak`` is the step the training preset minimises (exact: an int, or a Fraction
    under interleaved slots).
    """

    feasible: bool
    violations: tuple[str, ...]
    n_violations: int
    objective: int | Fraction | None
    mem_peak: int | None
    comm_total: int | None
    comm_peak: int | None
    compute_peak: int | None
    compute_peak_s: float | None
    spill: int | None
    stage_mem: np.ndarray | None  # (K,) parameter bytes per stage
    stage_compute: np.ndarray | None  # (K,) ticks per stage
    stage_compute_s: np.ndarray | None  # (K,) seconds per stage
    boundary_comm: np.ndarray | None  # (K-1,) units crossing the boundary after stage k
    stage_time_peak: int | None = None
    stage_time_peak_s: float | None = None
    throughput: float | None = None
    stage_send: np.ndarray | None = None  # (K,) ticks of the values stage k sends on
    stage_time: np.ndarray | None = None  # (K,) compute plus send ticks
    stage_time_s: np.ndarray | None = None  # (K,) seconds, unrounded
    stage_memory: tuple[int, ...] | None = None  # (K,) parameters plus activations in flight
    step_time_s: float | None = None  # training: one step, (M + K - 1) slowest stages (interleaved: M + (K - 1) / v) + grad_sync_s
    grad_sync_s: float | None = None  # training: the busiest stage's gradient sends for its replicated weights, once per step
    pipelined: bool = False
    replicated: dict[str, list[int]] | None = None  # shared weight -> the stages (>= 2) holding it
    grad_sync_peak: int | None = None  # ticks: the busiest stage's sync of its replicated weights (0 outside training)
    stage_sync: np.ndarray | None = None  # (K,) sync ticks per stage
    step_ticks: int | Fraction | None = None  # training: step_slots * stage_time_peak + grad_sync_peak
    training: bool = False

    @property
    def terms(self) -> dict[str, int | None]:
        """The objective terms by name: the first five, ``stage_time_peak`` for pipeline problems
        (`StageProblem.pipelined`) and ``grad_sync_peak`` in training, so that other problems'
        terms read as they always have."""
        out = {
            "mem_peak": self.mem_peak,
            "comm_total": self.comm_total,
            "comm_peak": self.comm_peak,
            "compute_peak": self.compute_peak,
            "spill": self.spill,
        }
        if self.pipelined:
            out["stage_time_peak"] = self.stage_time_peak
        if self.training:
            out["grad_sync_peak"] = self.grad_sync_peak
        return out


def evaluate_stages(problem: StageProblem, stages) -> StageEvaluation:
    """Check a stage assignment against ``problem`` and compute its objective.

    Parameters
    ----------
    problem : StageProblem
        The problem.
    stages : array-like of int, shape (n_nodes,)
        Stage of each node, in the graph's node order.

    Returns
    -------
    StageEvaluation
        ``feasible`` is True when every stage is in 0..K-1, every edge satisfies s_u <= s_v, no
        stage exceeds its hard capacity and, in training mode, no stage is empty; ``violations``
        names the offending nodes, edges and stages.

    Raises
    ------
    ProblemError
        If ``stages`` is not a one-dimensional integer array with one entry per node.

    Examples
    --------
    >>> from incsched.graph import CompGraph
    >>> g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[10, 30], out_bytes=[5, 0])
    >>> evaluate_stages(StageProblem.peer(g, n_stages=2), [0, 1]).objective
    3001
    """
    g = problem.graph
    s = _as_stage_array(stages, g.n_nodes)
    K = problem.n_stages
    violations: list[str] = []
    count = 0

    def note(msgs: list[str]) -> None:
        nonlocal count
        count += len(msgs)
        room = _MAX_LISTED - len(violations)
        violations.extend(msgs[: max(room, 0)])

    out_of_range = np.flatnonzero((s < 0) | (s >= K))
    note([f"node {g.names[v]!r} is on stage {int(s[v])}, outside 0..{K - 1}" for v in out_of_range.tolist()])
    su, sv = s[g.src], s[g.dst]
    backwards = np.flatnonzero(su > sv)
    note(
        [
            f"edge {g.names[g.src[e]]!r} -> {g.names[g.dst[e]]!r} goes backwards: stage {int(su[e])} -> {int(sv[e])}"
            for e in backwards.tolist()
        ]
    )
    if out_of_range.size:
        return _finish(violations, count, None, problem.pipelined, problem.training)
    if problem.training:  # a training pipeline runs every stage (`incsched.problems.training`'s notes)
        empty = np.flatnonzero(np.bincount(s, minlength=K) == 0)
        note([f"stage {k} is empty: training mode puts a node on every stage" for k in empty.tolist()])

    # np.add.at keeps integer sums exact (a float bincount would round above 2**53 bytes).
    stage_mem = np.zeros(K, dtype=np.int64)
    np.add.at(stage_mem, s, g.param_bytes)
    replicated = {}
    for weight in g.shared_weights:
        held = np.zeros(K, dtype=bool)
        held[s[np.asarray(weight.readers, dtype=np.int64)]] = True
        stage_mem[held] += weight.nbytes  # with the own bytes, at most the graph's 2**62: no wrap
        if held.sum() > 1:
            replicated[weight.name] = np.flatnonzero(held).tolist()
    if problem.capacity is not None:
        # The capacities as given, compared as Python ints: they may exceed int64.
        over = [k for k, (load, cap) in enumerate(zip(stage_mem.tolist(), problem.capacity)) if load > cap]
        note([f"stage {k} holds {int(stage_mem[k])} parameter bytes, over its capacity {problem.capacity[k]}" for k in over])

    seconds = np.asarray(g.time(problem.device_kind), dtype=np.float64)
    if problem.training:  # forward plus backward (measured, else the documented estimate)
        seconds = seconds + np.asarray(training.backward_seconds(g, problem.device_kind), dtype=np.float64)
    speed = np.ones(K) if problem.stage_speed is None else np.asarray(problem.stage_speed, dtype=np.float64)
    # The problem's own tick table (it checks the range); the stage each node sits on picks the column.
    node_ticks = problem.node_ticks[np.arange(g.n_nodes), s] if g.n_nodes else np.zeros(0, dtype=np.int64)
    stage_compute = np.zeros(K, dtype=np.int64)
    np.add.at(stage_compute, s, node_ticks)
    stage_compute_s = np.bincount(s, weights=seconds, minlength=K) / speed

    units = (g.edge_bytes > 0).astype(np.int64) if problem.comm == "edges" else g.edge_bytes.astype(np.int64)
    # An edge crossing boundaries b with s_u <= b < s_v adds its units to each; a difference array
    # over boundaries counts them all at once.
    diff = np.zeros(K + 1, dtype=np.int64)
    forward = su < sv
    np.add.at(diff, su[forward], units[forward])
    np.add.at(diff, sv[forward], -units[forward])
    boundary_comm = np.cumsum(diff)[: K - 1]  # each entry <= all edges' units <= 2**62: no wrap
    # A backwards edge (already a violation) counts no crossings rather than negative ones. Each
    # product fits int64 only while units * (K-1) does, so the sum is taken in Python ints.
    crossings = np.maximum(sv - su, 0)
    if int(units.sum()) * max(K - 1, 0) < 2**62:
        comm_total = int(np.sum(units * crossings))
    else:
        comm_total = sum(u * c for u, c in zip(units.tolist(), crossings.tolist()))

    spill = 0
    if problem.spill_capacity is not None:
        spill = sum(max(load - cap, 0) for load, cap in zip(stage_mem.tolist(), problem.spill_capacity))

    # Sends: a value goes from its stage through every boundary before its last reader's stage, once.
    # Without a bandwidth they are free (and the edges are not walked: every other problem's case).
    stage_send, send_s = np.zeros(K, dtype=np.int64), np.zeros(K + 1)
    sends, last = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if problem.bandwidth is not None or problem.recompute:  # recompute: a stage keeps what it receives
        data = g.edge_bytes > 0
        last = np.full(g.n_nodes, -1, dtype=np.int64)
        np.maximum.at(last, g.src[data], sv[data])
        sends = np.flatnonzero(last > s)
    if problem.bandwidth is not None:
        directions = training.SEND_DIRECTIONS if problem.training else 1  # activation forward, gradient back
        send_diff = np.zeros(K + 1, dtype=np.int64)
        np.add.at(send_diff, s[sends], problem.send_ticks[sends])
        np.add.at(send_diff, last[sends], -problem.send_ticks[sends])
        stage_send = np.cumsum(send_diff)[:K]  # each entry <= all sends' ticks <= 2**61: no wrap
        np.add.at(send_s, s[sends], directions * g.out_bytes[sends] / problem.bandwidth)
        np.add.at(send_s, last[sends], -directions * g.out_bytes[sends] / problem.bandwidth)
    stage_time = stage_compute + stage_send
    stage_time_s = stage_compute_s + np.maximum(np.cumsum(send_s)[:K], 0.0)
    acts = np.zeros(K, dtype=np.int64)
    np.add.at(acts, s, g.out_bytes)
    # Python ints: in-flight counts times activations are not bounded by the byte columns' limit.
    grad_sync_s = _grad_sync_s(problem, replicated) if problem.training else None
    stage_sync = _stage_sync(problem, replicated)
    if problem.training:
        stage_memory = _training_memory(problem, s, sends, last, stage_mem.tolist())
    else:
        stage_memory = tuple(int(m) + f * int(a) for m, f, a in zip(stage_mem.tolist(), problem.in_flight(), acts.tolist()))
    if problem.memory is not None:
        over = [k for k, (load, cap) in enumerate(zip(stage_memory, problem.memory)) if load > cap]
        note([f"stage {k} holds {stage_memory[k]} bytes of parameters and activations in flight, over its memory {problem.memory[k]}"
              for k in over])
    slowest_s = float(stage_time_s.max())

    values = dict(
        mem_peak=int(stage_mem.max()),
        comm_total=comm_total,
        comm_peak=int(boundary_comm.max()) if K > 1 else 0,
        compute_peak=int(stage_compute.max()),
        spill=spill,
        stage_time_peak=int(stage_time.max()),
        grad_sync_peak=int(stage_sync.max()),
    )
    # Exact: each weight as the decimal it denotes (0.1 is 1/10), times an int term.
    w = problem.weights.exact()
    objective = exact_number(sum((w[t] * values[t] for t in values), Fraction(0)))
    return _finish(
        violations,
        count,
        dict(
            objective=objective,
            compute_peak_s=float(stage_compute_s.max()),
            stage_mem=stage_mem,
            stage_compute=stage_compute,
            stage_compute_s=stage_compute_s,
            boundary_comm=boundary_comm,
            stage_time_peak_s=slowest_s,
            throughput=1.0 / slowest_s if slowest_s > 0 else float("inf"),
            stage_send=stage_send,
            stage_time=stage_time,
            stage_time_s=stage_time_s,
            stage_memory=stage_memory,
            step_time_s=float(problem.step_slots() * slowest_s) + grad_sync_s if problem.training else None,
            grad_sync_s=grad_sync_s,
            replicated=replicated,
            stage_sync=stage_sync,
            step_ticks=exact_number(problem.step_slots() * values["stage_time_peak"] + values["grad_sync_peak"]) if problem.training else None,
            **values,
        ),
        problem.pipelined,
        problem.training,
    )


def _grad_sync_s(problem: StageProblem, replicated: dict[str, list[int]]) -> float:
    """Seconds of the busiest stage's gradient sends for the replicated weights it holds."""
    if problem.bandwidth is None or not replicated:
        return 0.0
    nbytes = [w.nbytes for w in problem.graph.shared_weights]
    return int(_per_holding_stage(problem, replicated, nbytes).max()) / problem.bandwidth


def _stage_sync(problem: StageProblem, replicated: dict[str, list[int]]) -> np.ndarray:
    """Sync ticks per stage: each replicated weight's `StageProblem.grad_sync_ticks` on every stage
    holding it (all 0 outside training or without a bandwidth)."""
    return _per_holding_stage(problem, replicated, problem.grad_sync_ticks.tolist())


def _per_holding_stage(problem: StageProblem, replicated: dict[str, list[int]], per_weight: list[int]) -> np.ndarray:
    """Per stage, the sum of ``per_weight`` (in `CompGraph.shared_weights` order) over the
    replicated weights it holds; at most every shared weight's bytes (<= 2**62) or sync ticks
    (<= 2**61): no int64 wrap."""
    per_stage = np.zeros(problem.n_stages, dtype=np.int64)
    for weight, value in zip(problem.graph.shared_weights, per_weight):
        if value and weight.name in replicated:
            per_stage[replicated[weight.name]] += int(value)
    return per_stage


def _training_memory(problem: StageProblem, s: np.ndarray, sends: np.ndarray, last: np.ndarray, params: list) -> tuple[int, ...]:
    """Each stage's training bytes (`incsched.problems.training`'s notes), in Python ints:
    ``factor * params_k + max(acts_k + work_k, step_k)``, work the largest working set of the
    stage's nodes less what the micro-batch's backward freed before it (`training.peak_work`) and
    step the largest optimizer-step temporaries (0 on an empty stage).

    ``acts_k`` without recompute: ``stashed_k * stash_k``, the stage's stash bytes (saved for
    backward where measured, else output bytes). With it: ``rebuilt_k + stashed_k * (inputs_k +
    received_k)``: rebuilt the stash bytes of the stage's nodes but its sources, inputs the source
    nodes' outputs on k (the model's inputs, kept, not rebuilt) and received the values crossing
    the boundary before k (a difference array over boundaries). Either way plus ``stashed_k *
    kept_k``: the graph outputs on k, which the pipeline keeps per micro-batch until its backward
    (`training.kept_output_bytes`: the loss's input where capture ran the loss in the last layer).
    """
    g, K = problem.graph, problem.n_stages
    factor = training.param_factor(problem.optimizer)
    stashed = training.stashed_micro_batches(problem.schedule, K, problem.micro_batches)
    stash = training.stash_bytes(g).tolist()
    source = (g.in_degree == 0).tolist()
    acts, kept = [0] * K, [0] * K
    work, step = [0] * K, [0] * K
    for v, (k, out) in enumerate(zip(s.tolist(), training.kept_output_bytes(g).tolist())):
        if not (problem.recompute and source[v]):
            acts[k] += int(stash[v])
        kept[k] += out
    on: list[list[int]] = [[] for _ in range(K)]
    for v, (k, t) in enumerate(zip(s.tolist(), problem.step_coef.tolist())):
        on[k].append(v)
        step[k] = max(step[k], t)
    w_all, release = problem.work_coef.tolist(), training.release_bytes(g, problem.recompute).tolist()
    work = [training.peak_work(nodes, w_all, release) for nodes in on]
    if not problem.recompute:
        held = [f * a for f, a in zip(stashed, acts)]
    else:
        inputs = [0] * K
        for v in np.flatnonzero(source).tolist():
            inputs[int(s[v])] += int(g.out_bytes[v])
        crossing = [0] * (K + 1)  # crossing[b]: bytes of the values sent over boundary b (stage b to b + 1)
        for u in sends.tolist():
            crossing[int(s[u])] += int(g.out_bytes[u])
            crossing[int(last[u])] -= int(g.out_bytes[u])
        received, running = [0] * K, 0
        for k in range(1, K):
            running += crossing[k - 1]
            received[k] = running
        held = [a + f * (i + r) for a, f, i, r in zip(acts, stashed, inputs, received)]
    held = [h + f * o for h, f, o in zip(held, stashed, kept)]
    return tuple(training.training_peak(int(m), h, w, t, factor) for m, h, w, t in zip(params, held, work, step))


def _as_stage_array(stages, n: int) -> np.ndarray:
    arr = np.asarray(stages)
    if arr.shape != (n,):
        raise ProblemError(f"a stage assignment needs one stage per node: got shape {arr.shape}, expected ({n},)")
    if arr.size and arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.floor(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ProblemError(f"stages must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _finish(violations: list[str], count: int, values: dict | None, pipelined: bool, training: bool) -> StageEvaluation:
    if count > len(violations):
        violations = violations + [f"... and {count - len(violations)} more violations"]
    empty = dict.fromkeys(
        (
            "objective",
            "mem_peak",
            "comm_total",
            "comm_peak",
            "compute_peak",
            "compute_peak_s",
            "spill",
            "stage_mem",
            "stage_compute",
            "stage_compute_s",
            "boundary_comm",
        )
    )
    for arr_name in ("stage_mem", "stage_compute", "stage_compute_s", "boundary_comm", "stage_send", "stage_time", "stage_time_s", "stage_sync"):
        if values is not None:
            values[arr_name].setflags(write=False)
    return StageEvaluation(feasible=count == 0, violations=tuple(violations), n_violations=count, pipelined=pipelined,
                           training=training, **(values or empty))
