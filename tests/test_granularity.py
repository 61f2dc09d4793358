"""capture(granularity=...): nodes that are the model's modules, in call order (incsched/capture/granularity.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from incsched.capture import capture
from incsched.capture.granularity import parse_granularity, unit_modules
from incsched.cli import main
from incsched.errors import CaptureError


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return x + torch.tanh(self.proj(x))  # the add is the block's own op


class Body(nn.Module):
    """Holds the stack one level down, as LlamaForCausalLM.model does."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.pos = nn.Embedding(2, 8)  # reads no value embed made: only call order joins them
        self.layers = nn.ModuleList([Block(), Block(), Block()])
        self.shortcut = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))  # distinct pieces: not a stack

    def forward(self, x):
        h = self.embed(x)
        skip = self.pos(torch.arange(2))
        for layer in self.layers:
            h = layer(h)
        return self.shortcut(h) + skip * 2  # glue in Body.forward reads a skip value


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = Body()
        self.act = nn.ReLU()
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = self.act(self.body(x))
        h = self.act(h * 0.5)  # a second call of `act`, glue before it
        return self.head(h)


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(2, 4),)


@pytest.fixture(scope="module")
def layer_capture(net):
    model, inputs = net
    return capture(model, inputs, granularity="layer", name="net")


def test_layer_units_open_stacks_and_their_holders(net):
    units = unit_modules(net[0], "layer")
    assert list(units) == ["body.embed", "body.pos", "body.layers.0", "body.layers.1", "body.layers.2", "body.shortcut", "act", "head"]
    assert units["body.layers.0"] == "Block"


def test_layer_graph_nodes_are_modules_in_call_order(layer_capture):
    g = layer_capture.graph
    modules = g.meta["modules"]
    called = [modules[nm] for nm in g.names if nm in modules]
    assert called == ["body.embed", "body.pos", "body.layers.0", "body.layers.1", "body.layers.2", "body.shortcut", "act", "act", "head"]
    assert "act#2" in g.names  # the second call is its own node
    assert g.meta["granularity"] == "layer" and g.meta["containers"] == ["body.layers"]
    assert g.op[g.index("body.layers.0")] == "block"
    assert np.all(g.src < g.dst)  # index order is the call order


def test_consecutive_nodes_are_joined_so_every_stage_result_is_contiguous(layer_capture):
    g = layer_capture.graph
    edges = dict(zip(zip(g.src.tolist(), g.dst.tolist()), g.edge_bytes.tolist()))
    assert all((v, v + 1) in edges for v in range(g.n_nodes - 1))
    assert edges[(g.index("body.embed"), g.index("body.pos"))] == 0  # call order only, no data
    assert g.meta["call_order_edges"] >= 1


def test_layer_graph_keeps_every_operation_and_weight(net, layer_capture):
    model, inputs = net
    op = capture(model, inputs, coarsen="none", name="net").graph
    g = layer_capture.graph
    assert int(g.param_bytes.sum()) == int(op.param_bytes.sum()) == sum(p.numel() * 4 for p in model.parameters())
    members = sorted(m for group in g.members for m in group)
    assert members == sorted(m for group in op.members for m in group)
    assert g.flops.sum() == pytest.approx(op.flops.sum())
    block = g.index("body.layers.1")
    assert g.param_bytes[block] == sum(p.numel() * 4 for p in model.body.layers[1].parameters())


def test_module_depth_granularity(net):
    model, inputs = net
    g1 = capture(model, inputs, granularity="module:1", name="net").graph
    assert [g1.meta["modules"][nm] for nm in g1.names if nm in g1.meta["modules"]] == ["body", "act", "act", "head"]
    units = unit_modules(model, "module:2")
    assert "body.layers" in units and "act" in units and "body.layers.0" not in units


def test_glue_joins_the_module_called_after_it(net, layer_capture):
    g = layer_capture.graph
    # Body.forward's `shortcut(h) + skip * 2` runs outside every unit: it joins `act`, called next
    assert g.meta["glue_before"]["act"] == 2 and g.meta["glue_before"]["act#2"] == 1
    assert "x" in g.members[g.index("body.embed")]  # the input joins the first module
    assert g.op[g.index("act")] == "relu"


def test_a_model_without_modules_has_no_layers():
    class Bare(nn.Module):
        def forward(self, x):
            return x * 2

    with pytest.raises(CaptureError, match="no operation runs inside a module"):
        capture(Bare(), (torch.randn(2, 2),), granularity="layer")


@pytest.mark.parametrize("bad", ["ops", "module:0", "module:x", "layer:2", ""])
def test_unknown_granularity_refused(bad):
    with pytest.raises(CaptureError, match="granularity"):
        parse_granularity(bad)


def test_coarsening_only_at_op_granularity(net):
    with pytest.raises(CaptureError, match="applies to granularity 'op' only"):
        capture(*net, granularity="layer", coarsen="chains")


def test_cli_refuses_a_bad_granularity_before_building_the_model(capsys):
    assert main(["graph", "capture", "--model", "resnet18", "--granularity", "layers", "-o", "x.json"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown granularity 'layers'" in err


def test_layers_of_a_loaded_exported_program(net):
    """torch.export.load(...).module() keeps module paths but turns a ModuleList into a plain Module
    (and every class into Module: a numbered container of distinct pieces is opened too)."""
    model, inputs = net
    loaded = torch.export.export(model, inputs).module()
    g = capture(loaded, inputs, granularity="layer", name="net").graph
    assert [n for n in g.names if n.startswith("body.layers")] == ["body.layers.0", "body.layers.1", "body.layers.2"]
    assert g.meta["containers"] == ["body.layers", "body.shortcut"]
