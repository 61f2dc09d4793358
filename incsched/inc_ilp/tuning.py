"""`Tuning`: every constant that sizes or steers the inc-ilp pipeline, in one frozen object.

`solve()` takes one (default `Tuning()`), hands it to every phase through the run's `Context`, and
records it in the result's provenance, so a run can be repeated with the same knobs and a study can
vary one without patching module globals. Every value is a rule on sizes and budgets; the two
``*_wall_*`` ones cap phases in wall seconds only where the clock is the budget, so a work-bounded
run never reads them.

>>> from dataclasses import replace
>>> t = replace(Tuning(), stage_band_min_pairs=0)
>>> t.stage_band_min_pairs, Tuning.from_json(t.to_json()) == t
(0, True)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import SolveArgumentError

__all__ = ["Tuning"]


def _frozen(mapping: dict[str, float]):
    return field(default_factory=lambda: MappingProxyType(dict(mapping)))


@dataclass(frozen=True)
class Tuning:
    """The inc-ilp pipeline's tuning constants (shares are of the run's nominal budget: the work
    limit, else the time limit read as work).

    Each field's comment gives the measurement behind its default.
    """

    # ------------------------------------------------------------------ the run
    #: Wall seconds kept back from the clock for the final re-check and the result (the simulator
    #: and evaluator take under 50 ms on 1,000 nodes; the rest is margin for a loaded machine), at
    #: most a quarter of the time limit (a limit of 0.2 s must leave its run some time).
    closing_seconds: float = 0.25
    #: Stage models with more nodes skip CP-SAT's presolve probing: on many hundred nodes it adds
    #: about 10^5 clauses and seconds before search starts.
    probing_max_nodes: int = 500

    # ------------------------------------------------------------------ the portfolio (incumbent.py)
    #: Time limits below this leave the learned policy out of the portfolio: its first use in a
    #: process imports numba and loads its decoder (0.5-1 s), or compiles it once after install
    #: (8.6 s measured); set when that also meant torch's import (2.2-2.8 s on 2 cores, cold).
    policy_min_seconds: float = 8.0
    #: Below `policy_min_seconds`, a policy not yet loaded in the process decodes in a child process
    #: and joins if its answer arrives within the clock; below this limit it cannot arrive (the
    #: child answered in 1.7-2.3 s at load 1.5-2.5, without torch), and would only compete.
    policy_background_min_seconds: float = 3.0
    #: Below `policy_min_seconds`, a policy that loads quickly (``.npz`` weights, its decoder in
    #: numba's cache: 0.5-1 s) loads in this process from this limit up, instead of in a child:
    #: at 2 s cold the child arrived too late in 3 of 18 runs (benchmarks/never_worse.py), while
    #: ``rl`` alone, loading in-process, answered.
    policy_quick_min_seconds: float = 1.0
    #: The stage portfolio (every baseline takes milliseconds to a second on 1,000 nodes).
    stage_portfolio: tuple[str, ...] = ("contiguous_params", "contiguous_compute", "pipedream_dp", "dp_local_search", "asap", "alap")
    #: The placement portfolio: the two list schedulers ...
    placement_portfolio: tuple[str, ...] = ("heft", "critical_path_list")
    #: ... and, when the policy may run too, the local-search baseline (2,500 evaluations), so that
    #: inc-ilp is never worse than any baseline a user could have run instead.
    placement_polish: tuple[str, ...] = ("local_search",)
    #: Seconds per node a candidate may take, rounded up from measurements on a 2-core machine
    #: (stage: rand_graph_1000/5000/10000, dp_local_search 0.2 / 3.6 / 7.6 s, the policy 1.4 / 0.2 /
    #: 1.6 s warm; placement: local search 1-3 s on 100-300 ops, the policy 0.14 s on 1,021 ops and
    #: 0.55 s on 9,997 warm). A candidate whose estimate exceeds `portfolio_share` of the time
    #: limit is skipped and the log says so: pure-Python candidates cannot be stopped half-way.
    stage_seconds_per_node: Mapping[str, float] = _frozen({"pipedream_dp": 1e-4, "dp_local_search": 1e-3, "rl": 3e-4})
    placement_seconds_per_node: Mapping[str, float] = _frozen({"local_search": 1e-2, "rl": 2e-4})
    #: Node decodes per nominal second of the placement policy when it runs in the portfolio's
    #: own process (one compiled call, a few microseconds a decode): 2,000 is 612 samples on 196
    #: ops at 60 s instead of 64 (0.5-1.5 s on a loaded 2-core machine; 512 samples' best was
    #: 1.4%, 1.5% and 0.3% shorter than 64's on a transformer, an FFNN and a chained matmul), and
    #: the default pool (`sampling.default_samples`) at a few seconds, where a larger one could
    #: outlast the clock. At most `placement_policy_max_samples`.
    placement_policy_decodes_per_second: int = 2_000
    placement_policy_max_samples: int = 1024
    portfolio_share: float = 0.25
    #: Local-search assignments per nominal second, and at most (about a millisecond each on 200
    #: ops: a fifth of the budget, counted in evaluations so that it repeats).
    search_per_second: int = 200
    search_max: int = 20_000

    # ------------------------------------------------------------------ stage (stage.py)
    #: Stage models with more open node-stage pairs (after the precedence reductions) are improved
    #: by bands, not whole windows (a band of a 1,000-node, K=10 model solves in about a second;
    #: the whole model barely moves).
    stage_band_min_pairs: int = 5_000
    #: Adjacent stages opened up together in one band.
    stage_band_width: int = 2
    #: Work of one band per thousand nodes.
    stage_band_work: float = 1.0
    #: Share one relaxation-window solve may spend before the full model takes over.
    stage_window_share: float = 0.2
    #: The incumbent tried against the precedence bound before the portfolio runs.
    stage_first_incumbent: str = "pipedream_dp"
    #: Share the first, reduced full model may spend before the portfolio runs.
    stage_quick_proof_share: float = 0.02
    #: `incsched.bounds.reductions` in the reduced full model: loadless nodes placed on their
    #: latest input's / earliest reader's stage, and interchangeable branches ordered (off: it
    #: found classes only in generated inception graphs and did not pay there, 0.72 -> 0.76 s).
    stage_reductions: bool = True
    stage_place_loadless: bool = True
    stage_order_branches: bool = False
    #: Peak memory above the average stage load (bytes) that `rebalance` is tried for.
    stage_balance_slack: int = 5

    # ------------------------------------------------------------------ placement (placement.py)
    #: CP-SAT's linearization level in every solve of the placement model (the hinted full model,
    #: windows, rounds, segments; 1 is CP-SAT's default, 2 adds cuts). Its LP, over big-M
    #: disjunctions, bounded a 58-op attention segment on 8 devices at 32,093 ticks against a
    #: 103,000 optimum and slowed the search: 2 deterministic s gave 106,859 with it, 102,887
    #: without. Without it the full model proved a 31-op transformer block in 0.14 deterministic s
    #: (12.3 with), and `solve(p, time_limit=60)` ended 0.3-5.5 % shorter on 12 of 13 rows of
    #: benchmarks/placement_gaps.py than with ``Tuning(placement_search_linearization=1)``, side by
    #: side (commit 48e7c66). Our bounds come from elsewhere.
    placement_search_linearization: int = 0
    #: Share the CP-SAT window bounds may spend (they take 1-10 s on 100-400 ops).
    placement_bound_share: float = 0.1
    #: Where the clock is the budget, the window bounds may take this many times their share in
    #: wall seconds: their deterministic seconds passed 2.5-3.5 times slower than wall seconds under
    #: a load of 2-3 (chained matmul 15x2, 4 devices: 6 of them took 15-20 s), and a cap at the
    #: share itself left 3/4 of the windows unbuilt and the bound at the combinatorial families'.
    placement_bound_wall_factor: float = 2.5
    #: Exact window bounds raise heads by energy first on problems of at most this many nodes
    #: (about 2 s at 500; a 10,000-op graph would take a quarter of an hour).
    placement_energetic_max_nodes: int = 500
    #: Share one relaxation-window solve may spend, and window solves at most before the full model.
    placement_window_share: float = 0.15
    placement_max_windows: int = 8
    #: Policy-ranked windows: the probability each op's devices cover, the first start slack as a
    #: share of the incumbent's makespan, the share of one solve, and solves at most.
    placement_ranked_mass: float = 0.8
    placement_ranked_slack: float = 0.05
    placement_ranked_share: float = 0.08
    placement_max_ranked: int = 4
    #: Large-neighbourhood rounds: the share they may spend in all and per round, the rounds in a
    #: row that neither improve nor prove before the full model gets the rest (the wide FFNN, 196
    #: ops: its neighbourhoods are too large for a round's share), the ops a time slice frees, and
    #: every op's start slack as a share of the incumbent's makespan.
    placement_rounds_share: float = 0.3
    placement_round_share: float = 0.02
    placement_max_misses: int = 4
    placement_slice_nodes: int = 48
    placement_round_slack: float = 0.2
    #: ... and the start slack of the ops a round holds on their devices: small enough that they
    #: keep their order (at the freed ops' 0.2 no 24-op round on 200 ops closed in 0.3
    #: deterministic seconds; at 0.02 most closed in 0.01-0.06 and improved as much).
    placement_round_fixed_slack: float = 0.02
    #: Rounds of each cycle that free the ops the policy is least sure of (with their data
    #: partners), and the ops each frees: 24 freed, the rest held, closed in 0.00-0.03
    #: deterministic seconds on a 196-op FFNN and a 205-op transformer (they improved no more
    #: than 24-op sets around random seeds there: a start, not a measured win).
    placement_doubt_rounds: int = 3
    #: Where the clock is the budget (`Context.clock_is_budget`), a round may take this many times
    #: its share of the time limit in wall seconds: on a quiet machine most rounds close in under
    #: their share, and a cap at the share itself cut them (20-s runs ended 0.5-7% higher on 3 of 5
    #: instances); under a load of 4-7 a round's deterministic second took 25-80 wall seconds, and
    #: one round that did not close ran past the rest of a 60-s run.
    placement_round_wall_factor: float = 5.0
    #: Share of the time limit, in wall seconds, local search may take on top of its counted
    #: evaluations when the clock is the budget (or the run is not deterministic); the portfolio's
    #: local-search candidate gets half. Evaluations were sized at a millisecond each, a fifth of
    #: the budget; under a load of 3-6 on 2 cores they took 2-5 ms, and the polish alone took
    #: 45-60 s of 60-s runs, leaving the bounds and the exact search nothing.
    placement_polish_wall_share: float = 0.2
    #: The polish from the portfolio's best is the compiled moves (`baselines.placement_moves`) where
    #: they apply (no memory limits): this share of the nominal budget, at this many op-executions a
    #: nominal second (100,000-270,000 placements a second on 200-400 ops here: 2e7 / n is about the
    #: measured rate under a load of 2), cut at the wall share where the run need not repeat. From
    #: the policy's answer, 2 million moves took a 206-op transformer layer on 4 devices from 438,947
    #: to 411,198 in 11 s, where 60 s of CP-SAT rounds after local search reached 422,368.
    placement_moves_share: float = 0.15
    placement_moves_per_second: float = 2e7
    placement_moves_wall_share: float = 0.15
    #: Without the moves' kernel in numba's cache (`make install` compiles it), its first call
    #: compiles it: about 10 s, so shorter clocks keep the local search instead.
    placement_moves_compile_min_seconds: float = 30.0
    #: ... and where numba is not imported yet (the policy was left out), shorter clocks than this
    #: keep local search too.
    placement_moves_import_min_seconds: float = 3.0
    placement_doubt_nodes: int = 24
    #: Share the per-segment solves get (the rest goes to the hinted full model), and the work of
    #: each segment's transfer-aware relaxation bound (it proves in well under one second).
    placement_segment_share: float = 0.75
    placement_relaxation_work: float = 2.0
    #: Refuting short makespans of a segment gets at most this many bisection probes of two runs
    #: each; with a work budget, each run an even part of this share of the segment's work.
    placement_proof_share: float = 0.2
    placement_proof_probes: int = 4
    #: Where the clock is the budget, the probes pass's wall seconds bound them instead and the
    #: count only stops a segment whose probes keep being decided: 4 of 4 refuted on both MLP
    #: segments of a 60-s tblock2_d8 with 2 workers (bound 484,432); with 8, 6 and 5 (486,352).
    placement_proof_probes_clock: int = 12
    #: Where the clock is the budget, a segment is probed only with at least this many wall seconds
    #: per node: on a 42-op MLP on 8 devices the decision model's offsets take about a second and
    #: refuting a third of the gap 2.2-2.9 s more (60-s tblock2_d8); with 0.04 (1.7 s) every probe
    #: went undecided, with 0.1 both MLP segments refuted one (bound 461,631 -> 471,005).
    placement_probe_seconds_per_node: float = 0.1
    #: Segments of more ops are not probed: no probe of them was decided in 15-30 s a case (58-op
    #: attention on 4 and 8 devices, 62- and 82-op MLPs on tblock2_ffn12_d4, tblock2_h16_d8 and
    #: tblock1_h32_d8), while 42-op MLPs on 8 devices refute a third of their gap in 2-3.5 s.
    placement_probe_max_nodes: int = 48
    #: The probes pass may run past the segment phase's end until each segment to probe has had its
    #: least time, up to this share of the run's wall seconds then left (`_probes_end` in placement.py).
    placement_probe_wall_share: float = 0.7
    #: ... with this much more for each segment's offsets and models: sized at its least time
    #: alone, the pass gave a 60-s tblock2_d8's first MLP 4.4 s with them (one worker), which left
    #: the second 4.0 s of its 4.2 and no probe.
    placement_probe_setup_seconds: float = 0.5
    #: Where the clock is the budget: the share of the segment phase's wall seconds its search pass
    #: gets (the bounds pass has the rest); a segment's part of a pass (by size, of what the pass
    #: has left) goes to local search from the incumbent's schedule and to CP-SAT in these shares,
    #: and is never less than `placement_segment_min_seconds` (small segments prove in less).
    placement_segment_search_share: float = 0.7
    #: ... and when the bound phase ran every segment's queue models, the relaxation pass is skipped
    #: and the search gets this share (60-s runs side by side, 0.7 -> 0.85: tblock2_d4 580,889 ->
    #: 574,370, tblock3_d8 379,628 -> 378,538, tblock2_d8 equal; its probes decide little at 60 s).
    placement_segment_search_share_queued: float = 0.85
    placement_segment_wall_split: tuple[float, float] = (0.2, 0.8)
    placement_segment_min_seconds: float = 0.2
    #: Of a segment's search, the share of its whole CP-SAT model; large-neighbourhood `rounds` on
    #: the segment alone get the rest (none when the model proved the segment optimal).
    placement_segment_model_share: float = 0.4
    #: Of the segment phase's bounds pass, the share every segment's relaxation gets before the
    #: probes (they get the rest): the relaxations close in a second or two and give most of the bound.
    placement_relaxation_pass_share: float = 0.6

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Mapping):
                if not isinstance(value, MappingProxyType):
                    object.__setattr__(self, f.name, MappingProxyType(dict(value)))
                values = list(value.values())
            elif isinstance(value, (tuple, list, str)):
                if isinstance(value, list):
                    object.__setattr__(self, f.name, tuple(value))
                continue
            else:
                values = [value]
            for v in values:
                if isinstance(v, bool) and f.type == "bool":
                    continue
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                    raise SolveArgumentError(f"Tuning.{f.name} must be a finite number >= 0, got {value!r}")

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values, field by field (what provenance records)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = dict(value) if isinstance(value, Mapping) else list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Tuning":
        """The inverse of `to_json`; unknown keys are refused by name."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise SolveArgumentError(f"unknown Tuning field(s): {', '.join(unknown)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
