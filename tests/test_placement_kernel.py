"""Tests of incsched.policy.placement_kernel: the compiled decode takes `decode`'s actions.

`decode` (numpy) is what training records and replays; the kernel is what inference runs. If they
disagreed, RL would train one policy and `preschedule` would run another, so greedy rows must match
`decode(greedy=True)` exactly, on uniform and on heterogeneous links, for trained and untrained heads.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.evaluate.simulate import simulate
from incsched.generators import chained_matmul, ffnn, transformer_block
from incsched.graph import CompGraph
from incsched.policy.placement_policy import (
    DEFAULT_CHECKPOINT,
    PlacementPolicy,
    PolicyConfig,
    decode,
    decode_rows,
    load_placement_policy,
)
from incsched.problems import Device, Links, PlacementError, PlacementProblem
from incsched.train.placement import make_problem
from test_placement_policy import problems

torch.set_num_threads(1)


def _heterogeneous(graph: CompGraph) -> PlacementProblem:
    # Two kinds of device at different speeds, and links that differ per ordered pair: the
    # kernel's general path (transfer ticks per edge x producer's device x device).
    devices = [Device("c0", "cpu"), Device("c1", "cpu", speed=2.0), Device("g0", "cuda")]
    lat = np.array([[0, 1e-4, 5e-4], [1e-4, 0, 2e-4], [5e-4, 3e-4, 0]])
    bw = np.array([[1, 2e10, 5e9], [2e10, 1, 8e9], [4e9, 8e9, 1]])
    return PlacementProblem(graph, devices, Links(latency=lat, bandwidth=bw))


PROBLEMS = {
    "transformer_1b_d4": lambda: make_problem(transformer_block(n_blocks=1, jitter=0.1, seed=1), 4, 4.0),
    "transformer_2b_h4_d3": lambda: make_problem(transformer_block(n_blocks=2, heads=4, ffn_tiles=4, jitter=0.1, seed=2), 3, 1.0),
    "transformer_1b_d2": lambda: make_problem(transformer_block(n_blocks=1, hidden=3072, heads=6, ffn_tiles=3, jitter=0.1, seed=3), 2, 8.0),
    "ffnn_6x3_d4": lambda: make_problem(ffnn(n_layers=6, tiles=3, jitter=0.1, seed=4), 4, 4.0),
    "ffnn_4x4_d2": lambda: make_problem(ffnn(n_layers=4, tiles=4, jitter=0.1, seed=5), 2, 2.0),
    "chained_matmul_6x2_d4": lambda: make_problem(chained_matmul(n_matrices=6, tiles=2, jitter=0.1, seed=6), 4, 4.0),
    "chained_matmul_5x2_d2": lambda: make_problem(chained_matmul(n_matrices=5, tiles=2, jitter=0.1, seed=10), 2, 1.0),
    "chained_matmul_4x3_d4": lambda: make_problem(chained_matmul(n_matrices=4, tiles=3, jitter=0.1, seed=7), 4, 0.5),
    "heterogeneous_transformer": lambda: _heterogeneous(transformer_block(n_blocks=1, heads=4, ffn_tiles=2, jitter=0.1, seed=8)),
    "heterogeneous_ffnn": lambda: _heterogeneous(ffnn(n_layers=5, tiles=3, jitter=0.1, seed=9)),
}


def _random_policy(seed: int, config: PolicyConfig = PolicyConfig()) -> PlacementPolicy:
    torch.manual_seed(seed)
    return PlacementPolicy(config).eval()


def _policies():
    out = {"random_default": _random_policy(0), "random_small": _random_policy(1, PolicyConfig(hidden=16, n_layers=1, head_hidden=8))}
    if DEFAULT_CHECKPOINT.exists():
        out["shipped"] = load_placement_policy()
    return out


POLICIES = _policies()


def _differs_only_at_a_rounded_tie(problem, heads, rows, r) -> bool:
    """True when row ``r`` follows `decode` up to a step where `decode` broke an exact tie by rounding.

    Devices in the same state for the op at hand (at the start: every identical device; later
    also two devices the op's inputs reach at the same price) get identical PLC feature rows, so
    their logits tie exactly, whether or not the devices are interchangeable overall. The kernel takes the first, as ``argmax`` means;
    numpy's BLAS product, though, may round identical rows differently (seen here with 3 devices:
    OpenBLAS gives the third row a result 1 ulp off), and `decode` then picks by that artefact.
    The same holds for SEL and ready ops with identical inputs. Past such a step the two decodes
    legitimately part ways; before it, every action must agree.
    """
    tr = decode(problem, heads, greedy=True, record=True)  # the recording path takes the same actions
    seq, device = rows.seq[r], rows.device[r]
    for t, v in enumerate(tr.node):
        if seq[t] != v:
            mine = int(np.flatnonzero(tr.ready[t] == seq[t])[0])
            f = tr.sel_features[t]
            return np.array_equal(f[mine], f[tr.sel_action[t]]) and np.array_equal(heads.sel_part[seq[t]], heads.sel_part[v])
        if device[v] != tr.plc_action[t]:
            a, b = int(device[v]), tr.plc_action[t]
            return np.array_equal(tr.plc_features[t][a], tr.plc_features[t][b])
    return True  # the kernel took every recorded action


def _assert_same_decode(problem, heads, rows, r, ref, strict=True):
    pl = rows.placement(r)
    if strict or pl != ref.placement:
        assert pl == ref.placement or (not strict and _differs_only_at_a_rounded_tie(problem, heads, rows, r))
    if pl == ref.placement:  # the same device array, per-device orders and start ticks
        assert int(rows.makespan[r]) == ref.makespan


# Strict equality with `decode` holds here for 2 and 4 identical devices and for distinct ones
# (checked on 360+ generated problems); 3 identical devices hit the rounded ties described in
# `_differs_only_at_a_rounded_tie` on about a quarter of them.
STRICT = {name for name in PROBLEMS if "_d3" not in name}


@pytest.mark.slow
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_greedy_rows_equal_the_numpy_decode(name, policy):
    problem = PROBLEMS[name]()
    if name.startswith("heterogeneous"):
        assert problem.uniform_transfer_ticks() is None  # the general path is what this case is for
    heads = POLICIES[policy].numpy_heads(problem)
    ref = decode(problem, heads, greedy=True)
    rows = decode_rows(problem, heads, np.ones(2, dtype=np.bool_))
    for r in range(2):  # a second greedy row starts from a clean state
        _assert_same_decode(problem, heads, rows, r, ref, strict=name in STRICT)


def test_preschedule_greedy_is_the_numpy_decode():
    problem = PROBLEMS["ffnn_6x3_d4"]()
    model = _random_policy(2)
    ref = decode(problem, model.numpy_heads(problem), greedy=True)
    assert model.preschedule(problem, seed=11) == ref.placement


def _check_row(problem, rows, r):
    pl = rows.placement(r)
    s = simulate(problem, pl, "ordered")  # raises DeadlockError if an order contradicts precedence
    assert s.makespan == int(rows.makespan[r])
    assert np.array_equal(s.start, pl.start)
    g = problem.graph
    if g.n_edges:
        assert np.all(s.start[g.dst] >= s.start[g.src] + problem.durations()[g.src, pl.device[g.src]])


@pytest.mark.parametrize("name", ["transformer_1b_d4", "heterogeneous_transformer", "chained_matmul_4x3_d4"])
def test_sampled_rows_are_valid_seeded_and_distinct(name):
    problem = PROBLEMS[name]()
    heads = POLICIES["random_default"].numpy_heads(problem)
    greedy = np.zeros(6, dtype=np.bool_)
    greedy[0] = True
    a = decode_rows(problem, heads, greedy, rng=np.random.default_rng(3), temperature=1.0)
    for r in range(len(greedy)):
        _check_row(problem, a, r)
    b = decode_rows(problem, heads, greedy, rng=np.random.default_rng(3), temperature=1.0)
    for x, y in zip((a.device, a.start, a.seq, a.makespan), (b.device, b.start, b.seq, b.makespan)):
        assert np.array_equal(x, y)
    # Every sampled row takes its own path: no two sampled rows are the same decode.
    seqs = {tuple(a.seq[r]) + tuple(a.device[r]) for r in range(1, len(greedy))}
    assert len(seqs) == len(greedy) - 1
    c = decode_rows(problem, heads, greedy, rng=np.random.default_rng(4), temperature=1.0)
    assert not np.array_equal(a.seq[1:], c.seq[1:]) or not np.array_equal(a.device[1:], c.device[1:])


def test_a_rows_draws_do_not_depend_on_the_other_rows():
    # Row r's seed is the r-th draw of the rng whatever the rows before it are (greedy or not).
    problem = PROBLEMS["ffnn_4x4_d2"]()
    heads = POLICIES["random_small"].numpy_heads(problem)
    a = decode_rows(problem, heads, np.array([True, False, False]), rng=np.random.default_rng(9), temperature=0.5)
    b = decode_rows(problem, heads, np.array([False, True, False]), rng=np.random.default_rng(9), temperature=0.5)
    assert np.array_equal(a.seq[2], b.seq[2]) and np.array_equal(a.device[2], b.device[2])
    assert np.array_equal(a.seq[0], b.seq[1]) and np.array_equal(a.device[0], b.device[1])


def test_preschedule_keeps_the_best_row():
    problem = PROBLEMS["transformer_1b_d4"]()
    model = _random_policy(5)
    heads = model.numpy_heads(problem)
    greedy = np.zeros(9, dtype=np.bool_)
    greedy[0] = True
    rows = decode_rows(problem, heads, greedy, rng=np.random.default_rng(7), temperature=0.3)
    pl = model.preschedule(problem, seed=7, samples=8)
    assert pl == rows.placement(int(np.argmin(rows.makespan)))
    assert simulate(problem, pl, "ordered").makespan == rows.makespan.min() <= rows.makespan[0]


def test_sampled_rows_need_an_rng_and_restricted_memory_is_refused():
    problem = PROBLEMS["ffnn_4x4_d2"]()
    heads = POLICIES["random_small"].numpy_heads(problem)
    with pytest.raises(ValueError, match="rng"):
        decode_rows(problem, heads, np.array([True, False]))
    # Node "big" fits only device "a": a memory restriction the kernel cannot honour, so it refuses.
    g = CompGraph(["x", "big", "y"], ["x", "big"], ["big", "y"], param_bytes=[10, 1000, 20], out_bytes=[4, 4, 0], flops=[1e6] * 3)
    p = PlacementProblem(g, [Device("a", memory=1000), Device("b", memory=100)])
    with pytest.raises(PlacementError, match="fit only some devices"):
        decode_rows(p, POLICIES["random_small"].numpy_heads(p), np.array([True]))


@pytest.mark.slow
@given(problems(max_nodes=14, min_nodes=0, matrix_links=True), st.integers(0, 3), st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_kernel_matches_the_numpy_decode_on_random_problems(p, policy_seed, seed):
    heads = _random_policy(policy_seed, PolicyConfig(hidden=16, n_layers=1, head_hidden=8)).numpy_heads(p)
    ref = decode(p, heads, greedy=True)
    rows = decode_rows(p, heads, np.array([True, False, False]), rng=np.random.default_rng(seed), temperature=1.0)
    _assert_same_decode(p, heads, rows, 0, ref, strict=False)
    for r in range(3):
        _check_row(p, rows, r)
