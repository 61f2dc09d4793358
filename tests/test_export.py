"""incsched.export: split_spec, DeepSpeed parts, torchtitan chunks, PipelineStage modules, the CLI."""

from __future__ import annotations

import copy
import json
import runpy

import pytest
import torch
from torch import nn
from torch.distributed.pipelining import SplitPoint, pipeline

from incsched.capture import capture
from incsched.cli import main
from incsched.export import (
    ExportError,
    deepspeed_parts,
    export_result,
    pipeline_stages,
    split_spec,
    stage_runs,
    stage_table,
    torchtitan_chunks,
)
from incsched.formats import save_graph
from incsched.graph import CompGraph
from incsched.problems import StageProblem
from incsched.result import Result
from incsched.front_door import solve


class Block(nn.Module):
    def __init__(self, width: int = 8):
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, h):
        return h + self.down(torch.relu(self.up(h)))


class Titan(nn.Module):
    """torchtitan's layout: top-level embeddings, a ModuleDict of layers, norm, output."""

    def __init__(self, n_layers: int = 3, vocab: int = 32, width: int = 8):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, width)
        self.layers = nn.ModuleDict({str(i): Block(width) for i in range(n_layers)})
        self.norm = nn.LayerNorm(width)
        self.output = nn.Linear(width, vocab)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens) * 2.0  # glue between the embedding and the first layer
        for layer in self.layers.values():
            h = layer(h)
        return self.output(self.norm(h * 0.5) + 1.0)  # glue on both sides of the norm


# the layer graph in call order; the glue (input, `* 2.0`, `* 0.5`, `+ 1.0`) joins the module after it
NODES = ["tok_embeddings", "layers.0", "layers.1", "layers.2", "norm", "output"]


@pytest.fixture(scope="module")
def titan():
    torch.manual_seed(0)
    return Titan().eval(), (torch.randint(0, 32, (2, 5)),)


@pytest.fixture(scope="module")
def layer_graph(titan):
    return capture(*titan, granularity="layer", name="titan").graph


@pytest.fixture(scope="module")
def op_capture(titan):
    return capture(*titan, name="titan")


def _param_bytes(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in module.parameters())


def _run_pipeline(model, inputs, spec, runs):
    """pipeline() on the spec, in one process: its stages are the result's, its output the model's."""
    pipe = pipeline(copy.deepcopy(model), inputs, split_spec=spec)  # pipeline() wraps forwards in place
    assert pipe.num_stages == runs.n_stages
    for k in range(runs.n_stages):
        assert _param_bytes(pipe.get_stage_module(k)) == runs.param_bytes[k]
    out = pipe(*inputs)
    torch.testing.assert_close(out[0] if isinstance(out, tuple) else out, model(*inputs))


def test_layer_graph_is_in_call_order(layer_graph):
    assert list(layer_graph.names) == NODES
    assert layer_graph.meta["containers"] == ["layers"]
    assert layer_graph.meta["glue_before"] == {"tok_embeddings": 2, "layers.0": 1, "norm": 1, "output": 1}


def test_split_before_a_module(titan, layer_graph):
    stages = [0, 0, 1, 1, 1, 1]
    spec = split_spec(layer_graph, stages)
    assert spec == {"layers.1": SplitPoint.BEGINNING}
    _run_pipeline(*titan, spec, stage_runs(layer_graph, stages))


def test_split_after_a_module_when_glue_runs_before_the_next(titan, layer_graph):
    stages = [0, 1, 1, 1, 2, 2]
    spec = split_spec(layer_graph, stages)
    assert spec == {"tok_embeddings": SplitPoint.END, "layers.2": SplitPoint.END}
    _run_pipeline(*titan, spec, stage_runs(layer_graph, stages))


@pytest.mark.slow
def test_solved_layer_results_always_export(titan, layer_graph):
    for K in (2, 3, 4):
        result = solve(StageProblem.peer(layer_graph, n_stages=K), "ilp", time_limit=20)
        spec = split_spec(layer_graph, result)
        assert len(spec) == K - 1
        _run_pipeline(*titan, spec, stage_runs(layer_graph, result))


def test_a_module_called_twice_cannot_mark_a_split():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return self.a(self.b(self.b(x) * 2))

    g = capture(Twice().eval(), (torch.randn(2, 4),), granularity="layer", name="twice").graph
    assert list(g.names) == ["b", "b#2", "a"]
    assert split_spec(g, [0, 0, 1]) == {"a": SplitPoint.BEGINNING}
    with pytest.raises(ExportError, match="module 'b' is called 2 times"):
        split_spec(g, [0, 1, 1])


def test_a_split_that_is_not_contiguous_names_the_modules(layer_graph):
    with pytest.raises(ExportError, match=r"module 'layers.2' \(stage 0\) runs after module 'layers.1' \(stage 1\)"):
        split_spec(layer_graph, [0, 0, 1, 0, 1, 1])


def test_an_empty_stage_is_refused(layer_graph):
    with pytest.raises(ExportError, match="stage 1 is empty; .* maps onto 2 stages"):
        split_spec(layer_graph, [0, 0, 0, 2, 2, 2])


def test_an_op_level_result_has_no_split_spec(op_capture):
    result = solve(StageProblem.peer(op_capture.graph, n_stages=2), "ilp", time_limit=20)
    with pytest.raises(ExportError, match=r"an op-level result has no split points .*inside module '") as err:
        split_spec(op_capture.graph, result)  # the graph names its nodes' modules (meta["module_of"])
    assert "\n" not in str(err.value)


def test_deepspeed_parts_are_the_first_layer_of_every_stage(layer_graph):
    out = deepspeed_parts(layer_graph, [0, 0, 1, 1, 1, 1])
    assert out["layers"] == ["tok_embeddings", "layers.0", "layers.1", "layers.2", "norm", "output"]
    assert out["parts"] == [0, 2, 6]
    runs = stage_runs(layer_graph, [0, 0, 1, 1, 1, 1])
    for k in range(2):  # DeepSpeed's reading: stage k holds layers[parts[k]:parts[k + 1]]
        assert out["layers"][out["parts"][k] : out["parts"][k + 1]] == runs.modules[k]


def test_torchtitan_chunks_and_virtual_stages(titan, layer_graph):
    stages = [0, 0, 1, 2, 3, 3]
    one = torchtitan_chunks(layer_graph, stages)
    assert not one["nested"]
    assert one["module_fqns_per_model_part"] == [["tok_embeddings", "layers.0"], ["layers.1"], ["layers.2"], ["norm", "output"]]
    assert one["stages_of_rank"] == [[0], [1], [2], [3]]
    looped = torchtitan_chunks(layer_graph, stages, ranks=2)
    assert looped["stages_per_rank"] == 2 and looped["stages_of_rank"] == [[0, 2], [1, 3]]
    model = titan[0]
    chunk_bytes = [_param_bytes(model.tok_embeddings) + _param_bytes(model.layers["0"]), _param_bytes(model.layers["1"]),
                   _param_bytes(model.layers["2"]), _param_bytes(model.norm) + _param_bytes(model.output)]
    assert looped["param_bytes_per_rank"] == [chunk_bytes[0] + chunk_bytes[2], chunk_bytes[1] + chunk_bytes[3]]
    assert torchtitan_chunks(layer_graph, stages, ranks=2, style="v")["stages_of_rank"] == [[0, 3], [1, 2]]
    with pytest.raises(ExportError, match="4 stages cannot be spread over 3 ranks"):
        torchtitan_chunks(layer_graph, stages, ranks=3)


def test_torchtitan_marks_names_its_splitter_does_not_keep():
    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Titan()

        def forward(self, tokens):
            return self.model(tokens)

    g = capture(Wrapped().eval(), (torch.randint(0, 32, (2, 5)),), granularity="layer", name="wrapped").graph
    out = torchtitan_chunks(g, [0] * 4 + [1] * (g.n_nodes - 4))
    assert out["nested"] and out["module_fqns_per_model_part"][0][0] == "model.tok_embeddings"


def test_stage_table_at_both_granularities(layer_graph, op_capture):
    table = stage_table(layer_graph, [0, 0, 1, 1, 1, 1])
    assert table["format"] == "incsched.export.json" and table["granularity"] == "layer" and table["stages"][1]["modules"] == ["layers.1", "layers.2", "norm", "output"]
    assert sum(row["param_bytes"] for row in table["stages"]) == int(layer_graph.param_bytes.sum())
    g = op_capture.graph
    op_table = stage_table(g, [0] * g.n_nodes, n_stages=2)
    assert op_table["granularity"] == "op" and "modules" not in op_table["stages"][0] and op_table["stages"][1]["nodes"] == []


@pytest.mark.slow
def test_pipeline_stages_of_an_op_level_result(titan, op_capture, tmp_path):
    model, inputs = titan
    result = solve(StageProblem.peer(op_capture.graph, n_stages=3), "ilp", time_limit=20)
    stages = pipeline_stages(op_capture, result)
    assert stages.n_stages == 3
    values = inputs
    for module in stages.modules:
        values = module(*values)
    torch.testing.assert_close(values[0], model(*inputs))
    written = stages.save(tmp_path)
    assert sorted(p.name for p in written) == ["stage_0.pt2", "stage_1.pt2", "stage_2.pt2", "stages.json"]
    values = inputs
    for k in range(3):  # what a user without incsched loads
        values = torch.export.load(tmp_path / f"stage_{k}.pt2").module()(*values)
    torch.testing.assert_close(values[0], model(*inputs))
    manifest = json.loads((tmp_path / "stages.json").read_text())
    assert [s["input_args"][0]["shape"] for s in manifest["stages"]][0] == list(inputs[0].shape)


def test_results_that_do_not_fit_are_refused(layer_graph, op_capture):
    placement = Result("placement", "titan", "feasible", 1, 0, 1.0, {}, "heft", 0, True, device=[0] * layer_graph.n_nodes)
    with pytest.raises(ExportError, match="a placement result has no stages"):
        split_spec(layer_graph, placement)
    other = solve(StageProblem.peer(op_capture.graph, n_stages=2), "ilp", time_limit=20)
    with pytest.raises(ExportError, match="stages entries for the 6 nodes"):
        split_spec(layer_graph, other.stages)
    with pytest.raises(ExportError, match="unknown export format"):
        export_result(other, layer_graph, "megatron")


def test_cli_export(layer_graph, op_capture, tmp_path, capsys):
    graph_file, result_file, out = tmp_path / "g.json.gz", tmp_path / "r.json", tmp_path / "parts.json"
    save_graph(layer_graph, graph_file)
    solve(StageProblem.peer(layer_graph, n_stages=2), "ilp", time_limit=20).save(result_file)
    assert main(["export", str(result_file), "--format", "deepspeed", "--graph", str(graph_file), "-o", str(out)]) == 0
    parts = json.loads(out.read_text())
    assert parts["format"] == "incsched.export.deepspeed" and parts["parts"][0] == 0 and parts["parts"][-1] == 6
    assert main(["export", str(result_file), "--format", "pipelining", "--graph", str(graph_file)]) == 0
    assert list(json.loads(capsys.readouterr().out)["split_spec"].values())[0] in ("BEGINNING", "END")

    for argv, message in [
        (["--format", "torchtitan", "--graph", str(graph_file), "--ranks", "3"], "2 stages cannot be spread over 3 ranks"),
        (["--format", "deepspeed"], "--format deepspeed needs --graph"),
    ]:
        assert main(["export", str(result_file), *argv]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err

    op_graph, op_result = tmp_path / "op.json.gz", tmp_path / "op.json"
    save_graph(op_capture.graph, op_graph)
    solve(StageProblem.peer(op_capture.graph, n_stages=2), "ilp", time_limit=20).save(op_result)
    assert main(["export", str(op_result), "--format", "pipelining", "--graph", str(op_graph)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "an op-level result has no split points" in err and "inside module '" in err


@pytest.mark.slow
def test_cli_exports_pipeline_stages_of_an_op_level_result(tmp_path, capsys):
    factory = tmp_path / "tiny.py"
    factory.write_text(
        "import torch\nfrom torch import nn\n\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2)).eval(), (torch.randn(2, 4),)\n"
    )
    model_arg, graph_file, result_file, folder = f"{factory}:make", tmp_path / "g.json.gz", tmp_path / "r.json", tmp_path / "stages"
    assert main(["graph", "capture", "--model", model_arg, "-o", str(graph_file)]) == 0
    solve(StageProblem.peer(CompGraph.load(graph_file), n_stages=2), "ilp", time_limit=20).save(result_file)
    assert main(["export", str(result_file), "--format", "pipelining", "--model", model_arg, "-o", str(folder)]) == 0
    assert "2 PipelineStage modules" in capsys.readouterr().out
    model, inputs = runpy.run_path(str(factory))["make"]()
    values = inputs
    for k in range(2):
        values = torch.export.load(folder / f"stage_{k}.pt2").module()(*values)
    torch.testing.assert_close(values[0], model(*inputs))


def test_pipeline_stages_refuse_a_back_edge(op_capture):
    g = op_capture.graph
    stages = [1] + [0] * (g.n_nodes - 1)  # the input on stage 1, its readers on stage 0
    with pytest.raises(ExportError, match=r"edge tokens -> .* goes from stage 1 back to stage 0"):
        pipeline_stages(op_capture, stages)
