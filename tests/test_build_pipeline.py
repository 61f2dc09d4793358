"""`build_pipeline`: the pipe ``torch.distributed.pipelining`` builds from a layer-level result holds
on each stage exactly the bytes predicted (`CompGraph.part_param_bytes`), to the byte, tied weights
once on every stage that reads them and nowhere else; run stage after stage it computes what the
unsplit model computes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from incsched.capture import capture, zoo
from incsched.export import ExportError, TiedGroup, build_pipeline, deepspeed_parts, stage_state_bytes, stage_table, torchtitan_chunks
from incsched.graph import CompGraph


def _check(make, args, graph: CompGraph, stages: list[int]):
    """Build from a fresh model (pipeline() rewires the one it is handed) and compare bytes and outputs."""
    K = max(stages) + 1
    model = make()
    with torch.no_grad():
        expected = model(*args)
    pipe = build_pipeline(model, args, graph, stages)
    built = [stage_state_bytes(pipe.get_stage_module(k)) for k in range(K)]
    assert built == graph.part_param_bytes(stages, K)
    with torch.no_grad():
        out = pipe(*args)  # the stages in sequence, each on what the one before sent
    out = out[0] if isinstance(out, tuple) and len(out) == 1 else out
    expected = getattr(expected, "logits", expected)
    assert torch.equal(out, expected)
    return pipe, built


# ---------------------------------------------------------------------- GPT-2, tied embeddings


def _gpt2():
    tf = zoo.import_transformers()
    config = tf.GPT2Config(n_layer=6, n_embd=256, vocab_size=8000, n_head=4, use_cache=False, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return tf.GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="module")
def gpt2():
    zoo.ensure_torchvision_importable()
    ids = torch.randint(0, 8000, (2, 16), generator=torch.Generator().manual_seed(1))
    graph = capture(_gpt2(), (ids,), granularity="layer").graph
    return graph, (ids,)


def test_gpt2_stages_hold_the_tied_weight_where_it_is_read_and_nowhere_else(gpt2):
    graph, args = gpt2
    assert [w.name for w in graph.shared_weights] == ["lm_head.weight"]
    # wte, wpe, drop, h.0 | h.1-h.3 | h.4, h.5 | ln_f, lm_head: pipeline() alone built
    # [16,384,000, ...] here, a stray lm_head copy on stage 0 beside wte.
    stages = [0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    pipe, built = _check(_gpt2, args, graph, stages)
    assert built == [12_399_616, 9_477_120, 6_318_080, 8_194_048]
    assert pipe.tied_groups == (
        TiedGroup(("lm_head.weight", "transformer.wte.weight"), 8_192_000, {0: ("transformer.wte.weight",), 3: ("lm_head.weight",)}),
    )
    assert pipe.tied_groups[0].replicated
    names = [{n for n, _ in pipe.get_stage_module(k).named_parameters(remove_duplicate=False)} for k in range(4)]
    assert "lm_head.weight" not in names[0] and "transformer.wte.weight" not in names[3]


def test_gpt2_one_stage_holds_one_copy_of_a_tie_it_reads_twice(gpt2):
    graph, args = gpt2
    pipe, built = _check(_gpt2, args, graph, [0] * 10 + [1])  # lm_head alone on the last stage
    assert built[1] == 8_192_000
    pipe, built = _check(_gpt2, args, graph, [0] * 11)
    assert built == [graph.total_param_bytes]
    assert pipe.tied_groups[0].stages == {0: ("lm_head.weight", "transformer.wte.weight")} and not pipe.tied_groups[0].replicated


# ---------------------------------------------------------------------- shipped-model-style models


def _resnet():
    tv = zoo.import_torchvision()
    torch.manual_seed(0)
    return tv.models.resnet.ResNet(tv.models.resnet.BasicBlock, [1, 1, 1, 1], num_classes=10).eval()


class TiedMLP(nn.Module):
    """An MLP whose output layer reuses its input layer's weight, with a LayerNorm (buffers: none; BN has them)."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.inp = nn.Linear(width, width)
        self.hidden = nn.Sequential(nn.ReLU(), nn.Linear(width, 4 * width), nn.ReLU(), nn.Linear(4 * width, width))
        self.norm = nn.LayerNorm(width)
        self.bn = nn.BatchNorm1d(width)
        self.out = nn.Linear(width, width, bias=False)
        self.out.weight = self.inp.weight

    def forward(self, x):
        return self.out(self.bn(self.norm(self.hidden(self.inp(x)))))


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).eval()


def _tied_mlp():
    torch.manual_seed(0)
    return TiedMLP().eval()


@pytest.mark.parametrize("make, shape, K", [(_resnet, (1, 3, 32, 32), 3), (_mlp, (4, 16), 3), (_tied_mlp, (4, 32), 3)],
                         ids=["resnet", "mlp", "tied_mlp"])
def test_small_models_build_the_predicted_bytes(make, shape, K):
    zoo.ensure_torchvision_importable()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(2))
    graph = capture(make(), (x,), granularity="layer").graph
    n = graph.n_nodes
    cuts = [round(n * k / K) for k in range(1, K)]
    stages = [sum(v >= c for c in cuts) for v in range(n)]
    pipe, built = _check(make, (x,), graph, stages)
    assert sum(built) >= graph.total_param_bytes > 0
    if make is _tied_mlp:
        (group,) = pipe.tied_groups
        assert group.fqns == ("inp.weight", "out.weight") and graph.shared_weights
        assert sum(built) == graph.total_param_bytes + group.nbytes * (len(group.stages) - 1)
    else:
        assert pipe.tied_groups == ()


def test_an_op_level_result_is_refused_before_anything_is_built():
    model = _mlp()
    x = torch.randn(4, 16)
    graph = capture(model, (x,)).graph
    with pytest.raises(ExportError, match="op-level result has no split points"):
        build_pipeline(model, (x,), graph, [0] * (graph.n_nodes - 1) + [1])


def test_split_point_exports_predict_shared_weights_once_per_stage_and_rank():
    names = ["emb", "h0", "h1", "head"]
    graph = CompGraph(names, names[:-1], names[1:], param_bytes=[0, 5, 5, 1],
                      shared_weights=[{"name": "wte", "bytes": 8, "read_by": ["emb", "head"]}],
                      meta={"granularity": "layer", "modules": {n: n for n in names}})
    stages = [0, 1, 2, 3]
    assert [row["param_bytes"] for row in stage_table(graph, stages)["stages"]] == [8, 5, 5, 9]
    assert deepspeed_parts(graph, stages)["param_bytes"] == [8, 5, 5, 9]
    # a V schedule puts stages 0 and 3 on rank 0: one copy of wte there
    assert torchtitan_chunks(graph, stages, ranks=2, style="v")["param_bytes_per_rank"] == [9, 10]
