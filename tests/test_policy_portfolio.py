"""The learned policy in inc-ilp's portfolio at any time limit (issue 25): loaded in the process, it
always takes part; cold, with a limit too short for its first load by rule, it loads here on the
clock when its decoder is compiled already, or else in a child process, and joins when its answer
arrives within the clock (the run then says it may not repeat);
a work-bounded run, which promises to repeat, takes it by rule only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import incsched
from incsched.generators import bandwidth_for_comm_ratio, transformer_block
from incsched.inc_ilp.incumbent import policy_loaded


def _problem():
    g = transformer_block()
    return incsched.PlacementProblem.identical(g, 4, bandwidth=bandwidth_for_comm_ratio(g, 4.0))


def _portfolio_step(r) -> dict:
    return next(s for s in r.provenance["steps"] if s["phase"] == "incumbent" and "scores" in s)


@pytest.mark.slow
def test_once_loaded_the_policy_is_always_in_the_portfolio():
    p = _problem()
    rl = incsched.solve(p, "rl", time_limit=60)  # loads it in this process, if no test did before
    assert rl.objective is not None and policy_loaded("placement")
    # a limit below the rule's (here raised to 100 s, so that a loaded machine cannot end the run first)
    short = incsched.Tuning(policy_min_seconds=100)
    r = incsched.solve(p, time_limit=30, work_limit=0.05, tuning=short)
    assert "rl" in _portfolio_step(r)["scores"]
    assert r.objective <= rl.objective
    assert r.reproducible  # taken by rule (it is loaded), not by the clock
    again = incsched.solve(p, time_limit=30, work_limit=0.05, tuning=short)
    assert r.to_json(timing=False) == again.to_json(timing=False)


COLD = r"""
import json, sys
import incsched
from incsched.generators import bandwidth_for_comm_ratio, transformer_block
from incsched.inc_ilp.incumbent import policy_loaded
g = transformer_block()
p = incsched.PlacementProblem.identical(g, 4, bandwidth=bandwidth_for_comm_ratio(g, 4.0))
for kw in json.loads(sys.argv[1]):
    # each run starts cold: none of these runs loads the policy in this process
    assert not policy_loaded("placement"), "the policy was loaded in the process before a cold run"
    kw["tuning"] = incsched.Tuning.from_json(kw.get("tuning", {}))
    r = incsched.solve(p, **kw)
    print(json.dumps({"reproducible": r.reproducible, "objective": r.objective, "steps": r.provenance["steps"]}))
"""

#: The cold runs, in one fresh process (one start-up, not four), each checked cold before it runs;
#: "quick" loads the policy, so it comes last.
NOT_QUICK = {"policy_quick_min_seconds": 1000}  # as if its decoder were not compiled yet
COLD_RUNS = {
    # below the rule's limit, above the background limit
    "short": dict(time_limit=10, tuning={"policy_min_seconds": 100, **NOT_QUICK}),
    "work_bounded": dict(time_limit=30, work_limit=0.3, tuning={"policy_min_seconds": 100}),
    "below_background": dict(time_limit=2, tuning={"policy_background_min_seconds": 2.5, **NOT_QUICK}),
    "quick": dict(time_limit=5),
}


@pytest.fixture(scope="module")
def cold() -> dict:
    """name in `COLD_RUNS` -> what its run returned, from a process where the policy was never loaded."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    warm = subprocess.run([sys.executable, "-m", "incsched.policy.warm"], capture_output=True, text=True, timeout=300, env=env)
    assert warm.returncode == 0, warm.stdout + warm.stderr[-2000:]  # `make install` does this once
    run = subprocess.run([sys.executable, "-c", COLD, json.dumps(list(COLD_RUNS.values()))], capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    outs = [json.loads(line) for line in run.stdout.strip().splitlines()[-len(COLD_RUNS):]]
    return dict(zip(COLD_RUNS, outs))


@pytest.mark.long
@pytest.mark.slow
def test_cold_and_short_the_policy_loads_in_a_child_process_and_the_run_says_it_may_not_repeat(cold):
    out = cold["short"]
    notes = [s.get("note", "") for s in out["steps"] if s["phase"] == "incumbent"]
    assert any("loading in a child process" in n for n in notes)
    assert out["reproducible"] is False  # whether the policy arrived in time depends on the machine


class _Offer:
    """A stand-in for `PolicyProcess`: an answer that has arrived (or not yet)."""

    def __init__(self, answer, done=True):
        self.answer, self.done, self.cancelled = answer, done, False

    def wait(self, should_stop=None):
        return self.answer

    def cancel(self):
        self.cancelled = True


def test_an_answer_offered_later_is_taken_when_it_has_arrived():
    from incsched.baselines.placement import heft, round_robin
    from incsched.inc_ilp.context import Context
    from incsched.inc_ilp.placement import make_check

    p = _problem()
    ctx = Context(p, time_limit=60, work_limit=None, deterministic=True, workers=1, seed=0, check=make_check(p))
    ctx.improve(round_robin(p), make_check(p)(round_robin(p)), "preschedule:round_robin")
    late = _Offer(heft(p), done=False)
    ctx.offer_later("rl", late)
    assert ctx.wall_capped  # whether it arrives in time depends on the machine
    ctx.collect()
    assert ctx.best_phase == "preschedule:round_robin"  # not arrived yet: nothing taken
    late.done = True
    ctx.settings(1.0)  # every search first takes what has arrived
    assert ctx.best_phase == "preschedule:rl (child process)" and ctx.best_value == make_check(p)(heft(p))
    assert any(s.get("note") == "arrived from its child process within the clock" for s in ctx.steps)
    pending = _Offer(heft(p), done=False)
    ctx.offer_later("rl", pending)
    ctx.cancel_later()
    assert pending.cancelled


@pytest.mark.slow
def test_the_policy_process_decodes_what_the_policy_decodes_here():
    from incsched.inc_ilp.policy_process import PolicyProcess
    from incsched.policy.placement_policy import preschedule

    p = _problem()
    child = PolicyProcess("placement", p, 3).wait()
    here = preschedule(p, 3)
    assert child.device.tolist() == here.device.tolist() and child.order == here.order


@pytest.mark.long
@pytest.mark.slow
def test_cold_with_a_compiled_decoder_the_policy_loads_here_on_the_clock(cold):
    out = cold["quick"]
    step = next(s for s in out["steps"] if s["phase"] == "incumbent" and "scores" in s)
    assert "learned policy loading in this process" in step.get("note", "")
    assert "rl" in step["scores"]  # tried: None only if the clock cut its load (a starved machine)
    if step["scores"]["rl"] is not None:
        assert out["objective"] <= step["scores"]["rl"]


@pytest.mark.long
@pytest.mark.slow
def test_a_work_bounded_run_takes_the_policy_by_rule_only(cold):
    out = cold["work_bounded"]
    notes = [s.get("note", "") for s in out["steps"] if s["phase"] == "incumbent"]
    assert any("takes part by rule" in n for n in notes)
    assert out["reproducible"] is True


@pytest.mark.long
@pytest.mark.slow
def test_below_the_background_limit_the_cold_policy_is_left_out(cold):
    out = cold["below_background"]
    assert any("left out" in s.get("note", "") for s in out["steps"] if s["phase"] == "incumbent")


@pytest.mark.slow  # loads the policy in this process (about 4 s)
def test_the_policy_starts_before_the_list_schedulers(monkeypatch):
    """A cold load is most of a 1-s clock: the policy starts first, in its thread, and is
    collected after the list schedulers, whose answers stand if it does not arrive."""
    import incsched.inc_ilp.incumbent as incumbent

    started: list[str] = []

    def traced(name, fn):
        def run(problem, seed, **kw):
            started.append(name)
            if name == "rl":
                time.sleep(0.2)  # a load: the list schedulers run meanwhile
            return fn(problem, seed, **kw)
        return run

    table = {name: traced(name, fn) for name, fn in incumbent.PLACEMENT_PRESCHEDULERS.items()}
    monkeypatch.setattr(incumbent, "PLACEMENT_PRESCHEDULERS", table)
    monkeypatch.setattr(incumbent, "policy_loaded", lambda kind: True)
    r = incsched.solve(_problem(), time_limit=5, work_limit=0.05)
    assert started[0] == "rl" and "heft" in started
    assert "rl" in _portfolio_step(r)["scores"]
