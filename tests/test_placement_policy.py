"""Tests of incsched.policy.placement_policy: decoding yields executable placements, checkpoints round-trip."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.baselines.placement import critical_path_list, heft
from incsched.errors import FormatError
from incsched.evaluate.simulate import simulate
from incsched.generators import ffnn, transformer_block
from incsched.graph import CompGraph
from incsched.policy.placement_policy import (
    DEFAULT_CHECKPOINT,
    N_PLACEMENT_FEATURES,
    PLC_FEATURES,
    SEL_FEATURES,
    PlacementPolicy,
    PolicyConfig,
    decode,
    load_placement_policy,
    placement_inputs,
    preschedule,
    save_placement_policy,
)
from incsched.policy.sampling import default_samples
from incsched.policy.stage_policy import StagePolicy, save_stage_policy
from incsched.problems import Device, Links, PlacementProblem

torch.set_num_threads(1)


@st.composite
def problems(draw, max_nodes=16, min_nodes=1, matrix_links=False):
    """Small random placement problems; ``matrix_links`` also draws per-pair bandwidths."""
    n = draw(st.integers(min_nodes, max_nodes))
    edges = [(u, v) for v in range(n) for u in range(v) if draw(st.integers(0, 3)) == 0]
    secs = draw(st.lists(st.integers(1, 9), min_size=n, max_size=n))
    out = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    g = CompGraph([f"n{i}" for i in range(n)], [u for u, _ in edges], [v for _, v in edges],
                  out_bytes=out, compute_time={"cpu": [float(s) for s in secs]})
    D = draw(st.integers(1, 4))
    speeds = draw(st.lists(st.sampled_from([1.0, 2.0]), min_size=D, max_size=D))
    devices = [Device(f"d{i}", speed=speeds[i]) for i in range(D)]
    if matrix_links and draw(st.booleans()):
        bw = np.array(draw(st.lists(st.sampled_from([5.0, 10.0, 40.0]), min_size=D * D, max_size=D * D))).reshape(D, D)
        links = Links(latency=draw(st.sampled_from([0.0, 1.0])), bandwidth=bw)
    else:
        links = Links(latency=draw(st.sampled_from([0.0, 2.0])), bandwidth=10.0)
    return PlacementProblem(g, devices, links, time_unit=1.0)


def _policy(seed=0):
    torch.manual_seed(seed)
    return PlacementPolicy(PolicyConfig(hidden=16, n_layers=1, head_hidden=8))


@pytest.mark.slow
@given(problems(), st.booleans(), st.integers(0, 3))
@settings(max_examples=25, deadline=None)
def test_decoding_is_executable_and_matches_the_simulator(p, greedy, seed):
    heads = _policy(seed).numpy_heads(p)
    traj = decode(p, heads, greedy=greedy, rng=np.random.default_rng(seed), record=True)
    s = simulate(p, traj.placement, "ordered")  # raises DeadlockError if an order contradicts precedence
    assert s.makespan == traj.makespan
    assert np.array_equal(s.start, traj.placement.start)
    assert len(traj.node) == p.n_nodes and sorted(traj.node) == list(range(p.n_nodes))
    for ready, f, a, v in zip(traj.ready, traj.sel_features, traj.sel_action, traj.node):
        assert ready[a] == v and f.shape == (len(ready), len(SEL_FEATURES)) and np.all(np.isfinite(f))
    for f in traj.plc_features:
        assert f.shape == (p.n_devices, len(PLC_FEATURES)) and np.all(np.isfinite(f))


@pytest.mark.slow
@given(problems(), st.booleans(), st.integers(0, 3))
@settings(max_examples=25, deadline=None)
def test_fast_inference_path_decodes_like_the_recording_path(p, greedy, seed):
    # Inference folds part of SEL's features into per-row constants; training records them all.
    # Both must take the same actions, or RL trains one policy and inference runs another.
    heads = _policy(seed).numpy_heads(p)
    fast = decode(p, heads, greedy=greedy, rng=np.random.default_rng(seed))
    slow = decode(p, heads, greedy=greedy, rng=np.random.default_rng(seed), record=True)
    assert fast.placement == slow.placement and fast.makespan == slow.makespan
    assert simulate(p, fast.placement, "ordered").makespan == fast.makespan


@pytest.mark.slow
@given(problems(), st.sampled_from([critical_path_list, heft]))
@settings(max_examples=25, deadline=None)
def test_teacher_forcing_replays_a_schedule_no_later(p, teacher):
    # Taking ops in the teacher's start order, each at its device's tail, can only start earlier.
    sched = simulate(p, teacher(p), "ordered")
    traj = decode(p, None, teacher=(sched.start, sched.device), record=True)
    assert traj.makespan <= sched.makespan
    assert simulate(p, traj.placement, "ordered").makespan == traj.makespan
    if len(p.identical_devices) > 1:
        return
    # Identical devices are relabelled by first use: the first op goes to device 0.
    assert traj.plc_action[0] == 0


def test_teacher_relabelling_is_consistent():
    g = ffnn(n_layers=2, tiles=2)
    p = PlacementProblem.identical(g, 3, bandwidth=1e12)
    sched = simulate(p, critical_path_list(p), "ordered")
    swapped = simulate(p, critical_path_list(p).relabel([2, 0, 1]), "ordered")
    a = decode(p, None, teacher=(sched.start, sched.device), record=True)
    b = decode(p, None, teacher=(swapped.start, swapped.device), record=True)
    assert a.plc_action == b.plc_action and a.makespan == b.makespan


def test_greedy_decoding_is_deterministic():
    p = PlacementProblem.identical(transformer_block(n_blocks=1, heads=2, ffn_tiles=2), 4, bandwidth=1e9)
    model = _policy(3)
    assert model.preschedule(p) == model.preschedule(p, seed=7)


def test_inputs_have_the_declared_width():
    p = PlacementProblem.identical(ffnn(n_layers=2, tiles=2), 2)
    x, ei, ea = placement_inputs(p)
    assert x.shape == (p.n_nodes, N_PLACEMENT_FEATURES) and torch.isfinite(x).all()
    assert ei.shape == (2, p.graph.n_edges)


def test_checkpoint_round_trip(tmp_path):
    p = PlacementProblem.identical(ffnn(n_layers=3, tiles=2), 4, bandwidth=1e10)
    model = _policy(1)
    path = tmp_path / "m.pt"
    save_placement_policy(model, path, train_config={"seed": 1}, metrics=[{"epoch": 0}])
    # The weights file must load with weights_only=True: a state dict of tensors and nothing else.
    state = torch.load(path, weights_only=True)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    meta = json.loads((tmp_path / "m.json").read_text())
    assert meta["kind"] == "placement" and meta["model_config"] == model.config.to_dict()
    assert meta["train_config"] == {"seed": 1} and meta["metrics"] == [{"epoch": 0}]
    loaded = load_placement_policy(path)
    assert loaded.preschedule(p) == model.preschedule(p)
    assert preschedule(p, checkpoint=path, samples=0) == model.preschedule(p)
    assert preschedule(p, 3, checkpoint=path) == model.preschedule(p, 3, samples=default_samples(p.n_nodes))
    assert (tmp_path / "m.json").exists()


def test_bad_checkpoints_raise_format_errors(tmp_path):
    with pytest.raises(FormatError, match="does not exist"):
        load_placement_policy(tmp_path / "missing.pt")
    path = tmp_path / "m.pt"
    save_placement_policy(_policy(1), path)
    stage = tmp_path / "stage.pt"
    save_stage_policy(stage, StagePolicy(hidden=8, n_layers=1, decoder_hidden=8))
    with pytest.raises(FormatError, match="holds a 'stage' policy, not a 'placement' policy"):
        load_placement_policy(stage)
    path.write_bytes(b"not a zip")
    with pytest.raises(FormatError, match="corrupt or was replaced"):
        load_placement_policy(path)


@pytest.mark.skipif(not DEFAULT_CHECKPOINT.exists(), reason="no shipped placement checkpoint")
def test_shipped_checkpoint_is_in_the_shared_format_with_its_training_record():
    meta = json.loads(DEFAULT_CHECKPOINT.with_suffix(".json").read_text())
    assert meta["format"] == "incsched.policy_checkpoint" and meta["kind"] == "placement"
    assert meta["train_config"]["grad_clip"] == 1.0 and meta["metrics"]["selected_epoch"].startswith("reinforce")
    assert {r["phase"] for r in meta["metrics"]["epochs"]} == {"imitation", "start", "reinforce"}
    assert not load_placement_policy().training


@pytest.mark.skipif(not DEFAULT_CHECKPOINT.exists(), reason="no shipped placement checkpoint")
def test_shipped_policy_beats_the_teacher_on_an_unseen_graph():
    # A 163-op graph with a jitter seed training never draws (training uses seeds < 1000).
    g = transformer_block(n_blocks=3, heads=4, ffn_tiles=4, jitter=0.1, seed=4242)
    from incsched.generators import bandwidth_for_comm_ratio

    p = PlacementProblem.identical(g, 4, bandwidth=bandwidth_for_comm_ratio(g, 4.0))
    pl = preschedule(p)
    assert pl.method == "rl_policy"
    rl = simulate(p, pl, "ordered").makespan
    assert rl < simulate(p, critical_path_list(p), "ordered").makespan


def test_sampling_keeps_the_best_and_is_seeded():
    g = transformer_block(n_blocks=1, heads=4, ffn_tiles=3)
    p = PlacementProblem.identical(g, 4, bandwidth=1e9)
    model = _policy(2)
    greedy = simulate(p, model.preschedule(p), "ordered").makespan
    a = model.preschedule(p, seed=5, samples=4)
    assert simulate(p, a, "ordered").makespan <= greedy
    assert a == model.preschedule(p, seed=5, samples=4)
