"""Tests of incsched.capture on real torchvision and transformers models (small inputs, random weights).

Every expected total is computed independently of capture: parameter bytes from the model's own
``parameters()``/``buffers()``, FLOPs from one ``FlopCounterMode`` over the whole eager forward.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from incsched.capture import Capture, capture, from_module, zoo
from incsched.capture.trace import op_kind
from incsched.graph.coarsen import TRIVIAL_OPS
from incsched.errors import CaptureError

pytestmark = pytest.mark.slow


def model_state_bytes(model: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])


def eager_flops(model: torch.nn.Module, inputs) -> int:
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(*inputs)
    return counter.get_total_flops()


def tiny_bert():
    transformers = zoo.import_transformers()
    torch.manual_seed(0)
    config = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=1000
    )
    model = transformers.BertModel(config).eval()
    return model, (torch.randint(0, 1000, (2, 16)),)


@pytest.fixture(scope="module")
def resnet18():
    return zoo.build("resnet18", image_size=64)


@pytest.fixture(scope="module")
def resnet18_fine(resnet18) -> Capture:
    model, inputs = resnet18
    return capture(model, inputs, coarsen="none", measure=True, repeats=2, warmup=0, name="resnet18")


@pytest.fixture(scope="module")
def captured(resnet18, resnet18_fine):
    """Trivially coarsened captures of four real models, with the model and inputs they came from."""
    out = {"resnet18": (*resnet18, capture(*resnet18, name="resnet18"))}
    for name in ("mobilenet_v3_large", "efficientnet_b0"):
        model, inputs = zoo.build(name, image_size=64)
        out[name] = (model, inputs, capture(model, inputs, name=name))
    model, inputs = tiny_bert()
    out["bert"] = (model, inputs, capture(model, inputs, name="tiny_bert"))
    return out


MODELS = ["resnet18", "mobilenet_v3_large", "efficientnet_b0", "bert"]


@pytest.mark.parametrize("name", MODELS)
def test_param_bytes_sum_to_the_models_parameters_and_buffers(captured, name):
    model, _, cap = captured[name]
    assert int(cap.graph.param_bytes.sum()) == model_state_bytes(model)
    assert cap.graph.meta["constant_bytes"] == 0


@pytest.mark.parametrize("name", MODELS)
def test_flops_sum_to_the_whole_model_count(captured, name):
    model, inputs, cap = captured[name]
    assert cap.graph.flops.sum() == eager_flops(model, inputs)
    assert cap.graph.flops.sum() > 0


@pytest.mark.parametrize("name", MODELS)
def test_members_cover_the_fx_graph_once_with_one_node_per_real_op(captured, name):
    _, _, cap = captured[name]
    g, gm = cap.graph, cap.graph_module
    fx_nodes = [n for n in gm.graph.nodes if n.op not in ("get_attr", "output")]
    flat = [m for group in g.members for m in group]
    assert sorted(flat) == sorted(n.name for n in fx_nodes)
    by_name = {n.name: n for n in fx_nodes}
    for v, group in enumerate(g.members):
        real = [m for m in group if op_kind(by_name[m], gm) not in TRIVIAL_OPS]
        assert len(real) <= 1, group
        if not real:  # a free op left alone only when it has inputs and consumers in several nodes
            assert g.in_degree[v] != 1 and g.out_degree[v] != 1, group
    assert sum(op not in TRIVIAL_OPS for op in g.op) == sum(op_kind(n, gm) not in TRIVIAL_OPS for n in fx_nodes)
    assert nx.is_directed_acyclic_graph(g.to_networkx())


@pytest.mark.parametrize("name", MODELS)
def test_every_fx_data_dependency_is_an_edge_or_inside_a_node(captured, name):
    _, _, cap = captured[name]
    g, gm = cap.graph, cap.graph_module
    edges = {(g.names[u], g.names[v]) for u, v in zip(g.src.tolist(), g.dst.tolist())}
    for node in gm.graph.nodes:
        if node.op in ("get_attr", "output"):
            continue
        for arg in node.all_input_nodes:
            a, b = cap.node_of[arg.name], cap.node_of[node.name]
            assert a == b or (a, b) in edges
    # each weight read lands on a node that holds parameters
    for attr in (n.name for n in gm.graph.nodes if n.op == "get_attr" and n.users):
        assert cap.node_of[attr] in g.names


def test_fine_resnet18_has_a_node_per_fx_node_and_measured_times(resnet18, resnet18_fine):
    model, inputs = resnet18
    g = resnet18_fine.graph
    fx_nodes = [n for n in resnet18_fine.graph_module.graph.nodes if n.op not in ("get_attr", "output")]
    assert g.n_nodes == len(fx_nodes)
    assert g.members == tuple((n.name,) for n in fx_nodes)
    times = g.compute_time["cpu"]
    assert times.shape == (g.n_nodes,) and np.all(times >= 0)
    assert np.all(times[[i for i, op in enumerate(g.op) if op == "conv2d"]] > 0)
    assert int(g.param_bytes.sum()) == model_state_bytes(model)
    # the classifier's output: batch x 1000 float32 logits
    assert int(g.out_bytes[g.op.index("linear")]) == inputs[0].shape[0] * 1000 * 4
    assert g.out_bytes[g.op.index("input")] == inputs[0].numel() * 4
    assert g.meta["measured"]["device"] == "cpu"


def test_fx_method_agrees_with_export_on_resnet18(resnet18, captured):
    model, inputs = resnet18
    exported = captured["resnet18"][2].graph
    traced = capture(model, inputs, method="fx", name="resnet18")
    g = traced.graph
    assert g.meta["method"] == "fx"
    assert g.n_nodes == exported.n_nodes
    assert sorted(g.op) == sorted(exported.op)
    assert g.flops.sum() == exported.flops.sum()
    assert int(g.param_bytes.sum()) == model_state_bytes(model)


def test_bert_ops_and_meta(captured):
    _, inputs, cap = captured["bert"]
    g = cap.graph
    assert {"embedding", "linear", "layer_norm", "scaled_dot_product_attention", "gelu", "input"} <= set(g.op)
    assert g.op.count("scaled_dot_product_attention") == 2
    assert g.meta["input_shapes"] == [[2, 16]] and g.meta["batch_size"] == 2
    assert g.meta["coarsening"] == ["trivial"]


def test_module_coarsening_merges_blocks(resnet18):
    model, inputs = resnet18
    cap = capture(model, inputs, coarsen="module:2", name="resnet18")
    g = cap.graph
    # stem ops (conv1, bn1, relu, maxpool) stay single, as do the 8 BasicBlocks, pool, flatten, fc
    assert g.n_nodes < 30
    assert any(len(m) > 5 and all(cap.module_paths[x].startswith("layer1.0") for x in m) for m in g.members)
    assert int(g.param_bytes.sum()) == model_state_bytes(model)


def test_from_module_returns_the_graph(resnet18):
    model, inputs = resnet18
    g = from_module(model, inputs, coarsen="chains", name="resnet18")
    assert g.meta["coarsening"] == ["trivial", "chains"]
    assert g.n_nodes < 30  # a residual network is mostly chains between the skip connections


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # Python control flow on a value: symbolic tracing cannot follow it
            return x + 1
        return x - 1


def test_untraceable_model_raises_capture_error_naming_it():
    with pytest.raises(CaptureError, match="branchy.*fx"):
        capture(DataDependent(), (torch.randn(2, 2),), method="fx", name="branchy")
    with pytest.raises(CaptureError, match="unknown capture method"):
        capture(DataDependent(), (torch.randn(2, 2),), method="jit")


def test_zoo_rejects_unknown_models_listing_the_known_ones():
    with pytest.raises(CaptureError, match="resnet50.*gpt2"):
        zoo.build("alexnet9000")


def test_zoo_builds_are_reproducible():
    (m1, x1), (m2, x2) = zoo.build("resnet18", image_size=32), zoo.build("resnet18", image_size=32)
    assert torch.equal(x1[0], x2[0])
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    asset = set(zoo.MODELS)
    assert {"resnet50", "inception_v3", "bert_base", "gpt2", "vit_b_16"} <= asset


def test_bad_coarsening_is_rejected_before_tracing():
    from incsched.errors import GraphError

    with pytest.raises(GraphError, match="unknown coarsening"):
        capture(DataDependent(), (torch.randn(2, 2),), coarsen="everything")


def test_shipped_graphs_load_and_match_the_schema():
    import json
    from pathlib import Path

    import jsonschema

    from incsched.formats import graph_to_dict, load_graph

    root = Path(__file__).resolve().parents[1]
    schema = json.loads((root / "incsched" / "schemas" / "graph-v1.schema.json").read_text())
    files = sorted((root / "data" / "graphs").glob("*.json.gz"))
    assert {f.name.removesuffix(".json.gz") for f in files} >= {"resnet50", "inception_v3", "bert_base"}
    for path in files:
        g = load_graph(path)
        jsonschema.validate(graph_to_dict(g), schema)
        assert g.meta["coarsening"] == ["trivial"] and g.meta["batch_size"] == 1
        assert "cpu" in g.compute_time and np.all(g.compute_time["cpu"] >= 0)
        assert g.flops.sum() > 0 and g.param_bytes.sum() > 0
