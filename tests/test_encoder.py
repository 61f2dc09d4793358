"""The encoder's two ``GINEConv`` implementations: torch_geometric's (training) and the plain-torch twin
(inference). Same weights give bitwise-equal embeddings, checkpoints load into either, and a loaded
policy pre-schedules in a fresh process without importing torch_geometric."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.nn import GINEConv

from incsched.formats import load_graph
from incsched.generators import chained_matmul, ffnn, transformer_block
from incsched.generators.random_dag import icml24_like, layered_dag, respect_like
from incsched.graph import CompGraph
from incsched.policy.encoder import GraphEncoder
from incsched.policy.features import (
    N_EDGE_FEATURES,
    N_NODE_FEATURES,
    edge_features,
    edge_index,
    node_features,
)
from incsched.policy.gine import PlainGINEConv
from incsched.policy.placement_policy import (
    DEFAULT_CHECKPOINT,
    PlacementPolicy,
    PolicyConfig,
    load_placement_policy,
)
from incsched.policy.stage_policy import StagePolicy, default_stage_checkpoint, graph_tensors, load_stage_policy
from incsched.problems.placement import PlacementProblem
from incsched.problems.stage import StageProblem

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = pytest.mark.skipif(not (default_stage_checkpoint().exists() and DEFAULT_CHECKPOINT.exists()),
                             reason="shipped checkpoints absent")


def twins(seed: int, **kw) -> tuple[GraphEncoder, GraphEncoder]:
    """A torch_geometric-built encoder with seeded weights and a plain-built one loaded with its state dict."""
    torch.manual_seed(seed)
    pyg = GraphEncoder(conv="torch_geometric", **kw).eval()
    torch.manual_seed(seed + 1)  # other weights, overwritten by the load
    plain = GraphEncoder(conv="plain", **kw).eval()
    plain.load_state_dict(pyg.state_dict(), strict=True)
    return pyg, plain


def assert_same_embeddings(pyg: GraphEncoder, plain: GraphEncoder, x, ei, e) -> None:
    with torch.no_grad():
        a, b = pyg(x, ei, e), plain(x, ei, e)
    assert a.shape == b.shape and torch.equal(a, b)


def graph_inputs(g: CompGraph, K: int = 4):
    return node_features(g, n_slots=K), edge_index(g), edge_features(g)


def test_each_conv_builds_its_layer_and_names_are_checked():
    pyg, plain = twins(0, hidden=8, n_layers=2)
    assert all(isinstance(m.conv_fwd, GINEConv) and isinstance(m.conv_bwd, GINEConv) for m in pyg.layers)
    assert all(isinstance(m.conv_fwd, PlainGINEConv) and isinstance(m.conv_bwd, PlainGINEConv) for m in plain.layers)
    assert GraphEncoder(hidden=8, n_layers=1).conv == "plain"
    with pytest.raises(ValueError, match="conv must be one of"):
        GraphEncoder(hidden=8, n_layers=1, conv="pyg")


@pytest.mark.parametrize("kw", [{"hidden": 16, "n_layers": 2}, {}, {"in_dim": 5, "edge_dim": 3, "hidden": 8, "n_layers": 1}])
def test_same_seed_same_state_dict_in_the_same_order(kw):
    # The plain layer draws its initial weights as GINEConv does, so a seeded fresh policy is the
    # same whichever layer builds it (tests that seed random policies rely on this).
    torch.manual_seed(11)
    a = GraphEncoder(conv="torch_geometric", **kw).state_dict()
    after_a = torch.rand(3)
    torch.manual_seed(11)
    b = GraphEncoder(conv="plain", **kw).state_dict()
    after_b = torch.rand(3)
    assert list(a) == list(b)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(after_a, after_b)  # and consumes the same random numbers


def test_same_seed_same_policies():
    for build in (lambda conv: PlacementPolicy(PolicyConfig(hidden=16, n_layers=1, head_hidden=8), conv=conv),
                  lambda conv: StagePolicy(8, 1, 8, conv=conv)):
        torch.manual_seed(4)
        a = build("torch_geometric").state_dict()
        torch.manual_seed(4)
        b = build("plain").state_dict()
        assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("make", [
    lambda: layered_dag(60, mean_in_degree=1.8, skip_prob=0.3, param_bytes=(0, 1000), out_bytes=(0, 500),
                        flops=(0.0, 1e6), ops=("conv2d", "relu", "add", "linear"), seed=1),
    lambda: respect_like(60, seed=2),
    lambda: icml24_like(300, seed=3),
    lambda: icml24_like(200, sparse=True, seed=4),
    lambda: transformer_block(n_blocks=2, heads=4, ffn_tiles=2, jitter=0.1, seed=5),
    lambda: chained_matmul(n_matrices=5, tiles=2, jitter=0.1, seed=6),
    lambda: ffnn(n_layers=4, tiles=3, jitter=0.1, seed=7),
])
def test_bitwise_equal_on_generated_graphs(make):
    g = make()
    for seed, kw in [(0, {"hidden": 16, "n_layers": 2}), (1, {})]:
        pyg, plain = twins(seed, **kw)
        assert_same_embeddings(pyg, plain, *graph_inputs(g))


def test_bitwise_equal_with_sources_isolated_nodes_and_multi_edges():
    # CompGraph forbids duplicate edges, so the multi-edges go in as raw tensors: 0 and 5 have no
    # in-edges, 6 and 7 no edges at all, 1 -> 2 appears three times, 3 -> 3 is a self-loop.
    ei = torch.tensor([[0, 1, 1, 1, 0, 2, 5, 3], [1, 2, 2, 2, 2, 4, 4, 3]])
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, N_NODE_FEATURES, generator=g)
    e = torch.rand(ei.size(1), N_EDGE_FEATURES, generator=g)
    pyg, plain = twins(3, hidden=16, n_layers=3)
    assert_same_embeddings(pyg, plain, x, ei, e)
    # No edges at all, and a single node.
    assert_same_embeddings(pyg, plain, x, ei[:, :0], e[:0])
    assert_same_embeddings(pyg, plain, x[:1], ei[:, :0], e[:0])
    # A graph with isolated nodes built the usual way.
    cg = CompGraph(["a", "b", "c", "lone", "alone"], ["a", "a", "b"], ["b", "c", "c"], param_bytes=[1, 2, 3, 4, 5],
                   out_bytes=[4, 4, 0, 1, 1])
    assert_same_embeddings(pyg, plain, *graph_inputs(cg))


@pytest.mark.slow
@given(n=st.integers(1, 30), m=st.integers(0, 90), seed=st.integers(0, 2**31 - 1),
       hidden=st.sampled_from([4, 8, 32]), n_layers=st.integers(1, 3), scale=st.sampled_from([1e-3, 1.0, 1e3]))
@settings(max_examples=60, deadline=None)
def test_bitwise_equal_on_arbitrary_edge_lists(n, m, seed, hidden, n_layers, scale):
    # Any multigraph (duplicates, self-loops, cycles, unreached nodes) and any feature scale.
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, m), generator=g)
    x = torch.randn(n, N_NODE_FEATURES, generator=g) * scale
    e = torch.randn(m, N_EDGE_FEATURES, generator=g) * scale
    pyg, plain = twins(seed % 1000, hidden=hidden, n_layers=n_layers)
    assert_same_embeddings(pyg, plain, x, ei, e)


def test_bitwise_equal_with_gradients_enabled_and_in_train_mode():
    g = respect_like(40, seed=9)
    pyg, plain = twins(5, hidden=16, n_layers=2)
    pyg.train(), plain.train()
    a, b = pyg(*graph_inputs(g)), plain(*graph_inputs(g))
    assert torch.equal(a, b)
    a.square().sum().backward()
    b.square().sum().backward()
    grads = dict(plain.named_parameters())
    for name, p in pyg.named_parameters():
        assert torch.equal(p.grad, grads[name].grad), name


@pytest.mark.slow
def test_embeddings_do_not_depend_on_the_intra_op_thread_count():
    """Deterministic mode must not hang on the caller's ``torch.set_num_threads``: the shipped
    encoder gives the same bits with one thread and with two (a 5,000-node graph, so that the
    products are large enough to be split between threads)."""
    policy, _ = load_stage_policy()
    gt = graph_tensors(StageProblem(icml24_like(5000, seed=3), 8))
    saved, out = torch.get_num_threads(), []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with torch.no_grad():
                out.append(policy.encoder(gt.x, gt.edge_index, gt.edge_attr))
    finally:
        torch.set_num_threads(saved)
    assert torch.equal(out[0], out[1])


@SHIPPED
@pytest.mark.parametrize("graph", ["resnet50", "gpt2"])
def test_shipped_stage_policy_is_bitwise_the_same_with_either_layer(graph):
    plain, _ = load_stage_policy()
    pyg, _ = load_stage_policy(conv="torch_geometric")
    assert isinstance(plain.encoder.layers[0].conv_fwd, PlainGINEConv)
    assert isinstance(pyg.encoder.layers[0].conv_fwd, GINEConv)
    p = StageProblem(load_graph(ROOT / "data" / "graphs" / f"{graph}.json.gz"), 4)
    gt = graph_tensors(p)
    assert_same_embeddings(pyg.encoder, plain.encoder, gt.x, gt.edge_index, gt.edge_attr)
    assert np.array_equal(plain.decode(p).stages, pyg.decode(p).stages)
    a = plain.decode_samples(p, 4, np.random.default_rng(0), temperature=0.5)
    b = pyg.decode_samples(p, 4, np.random.default_rng(0), temperature=0.5)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))


@SHIPPED
@pytest.mark.parametrize("graph", ["resnet18", "bert_base"])
def test_shipped_placement_policy_is_bitwise_the_same_with_either_layer(graph):
    plain = load_placement_policy()
    pyg = load_placement_policy(conv="torch_geometric")
    assert isinstance(plain.encoder.layers[0].conv_fwd, PlainGINEConv)
    assert isinstance(pyg.encoder.layers[0].conv_fwd, GINEConv)
    p = PlacementProblem.identical(load_graph(ROOT / "data" / "graphs" / f"{graph}.json.gz"), 4, kind="cpu", bandwidth=1e10)
    ha, hb = plain.numpy_heads(p), pyg.numpy_heads(p)
    for name in ("sel_part", "plc_part", "sel_dyn", "sel_out", "plc_dyn", "plc_out"):
        assert np.array_equal(getattr(ha, name), getattr(hb, name)), name
    a, b = plain.preschedule(p, 0, samples=4), pyg.preschedule(p, 0, samples=4)
    assert np.array_equal(np.asarray(a.device), np.asarray(b.device)) and a.order == b.order


def test_with_conv_copies_weights_and_leaves_the_random_stream_alone():
    torch.manual_seed(0)
    plain = PlacementPolicy(PolicyConfig(hidden=8, n_layers=1, head_hidden=8)).eval()
    torch.manual_seed(7)
    twin = plain.with_conv("torch_geometric")
    after = torch.rand(2)
    torch.manual_seed(7)
    assert torch.equal(after, torch.rand(2))
    assert isinstance(twin.encoder.layers[0].conv_fwd, GINEConv) and not twin.training
    a, b = plain.state_dict(), twin.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_training_learns_with_torch_geometric_layers():
    from incsched.train.placement import PlacementTrainConfig, train_placement_policy

    tiny = PlacementTrainConfig(seed=3, policy=PolicyConfig(hidden=8, n_layers=1, head_hidden=8), imitation_graphs=1,
                                imitation_ops=(15, 25), label_time_limit=0.0, imitation_epochs=1, rl_epochs=0,
                                validation_graphs=1, time_budget_s=None)
    fresh, _ = train_placement_policy(tiny)
    assert isinstance(fresh.encoder.layers[0].conv_fwd, GINEConv)
    torch.manual_seed(0)
    start = PlacementPolicy(tiny.policy)  # as loaded for inference: plain layers
    tuned, _ = train_placement_policy(tiny, model=start)
    assert isinstance(tuned.encoder.layers[0].conv_fwd, GINEConv)
    assert isinstance(start.encoder.layers[0].conv_fwd, PlainGINEConv)


# A fresh interpreter that does what `incsched solve --preschedule rl` and `solve(..., preschedule="rl")`
# do, for both policies, then reports whether torch_geometric got imported along the way.
INFERENCE_SCRIPT = """
import sys
import numpy as np
from incsched.cli import main
from incsched.generators import transformer_block
from incsched.policy.placement_policy import load_placement_policy, preschedule as place
from incsched.policy.stage_policy import load_stage_policy, preschedule_sampled
from incsched.problems.placement import PlacementProblem
from incsched.problems.stage import StageProblem
from incsched.front_door import solve

g = transformer_block(n_blocks=1, heads=4, ffn_tiles=2, jitter=0.1, seed=0)
stage_policy, _ = load_stage_policy()
placement_policy = load_placement_policy()
sp = StageProblem(g, 3)
pp = PlacementProblem.identical(g, 2, kind="cpu", bandwidth=1e10)
stages = preschedule_sampled(sp, 0)
placement = place(pp, 0)
assert len(stages) == g.n_nodes and len(placement.device) == g.n_nodes
r1 = solve(sp, preschedule="rl", time_limit=0.2)
r2 = solve(pp, preschedule="rl", time_limit=0.2)
r3 = solve(sp, "rl", time_limit=0.2)
rc = main(["solve", sys.argv[1], "--stages", "2", "--preschedule", "rl", "--time-limit", "0.2"])
assert rc == 0, rc
loaded = sorted(m for m in sys.modules if m == "torch_geometric" or m.startswith("torch_geometric."))
assert not loaded, "inference imported " + ", ".join(loaded[:5])
print("RL_INFERENCE_WITHOUT_TORCH_GEOMETRIC", type(stage_policy.encoder.layers[0].conv_fwd).__name__,
      type(placement_policy.encoder.layers[0].conv_fwd).__name__, r1.method, r2.method, r3.method)
"""


@pytest.mark.slow
@SHIPPED
def test_inference_in_a_fresh_process_does_not_import_torch_geometric():
    run = subprocess.run([sys.executable, "-c", INFERENCE_SCRIPT, str(ROOT / "data" / "graphs" / "resnet18.json.gz")],
                         check=False, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "RL_INFERENCE_WITHOUT_TORCH_GEOMETRIC PlainGINEConv PlainGINEConv inc-ilp inc-ilp rl" in run.stdout, run.stdout[-2000:]
