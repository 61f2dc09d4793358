"""The hand-off taken by the real runtimes: DeepSpeed's ``PipelineModule`` and torchtitan's splitter.

DeepSpeed (the ``handoff`` extra): two gloo processes build `PartsPipelineModule` from an exported
``partition_method``; its ``parts`` are ours and each rank holds its stage's layers. torchtitan:
its own ``_pipeline_module_split`` builds the parts of a small Llama 3 (meta device) from our
``module_fqns_per_model_part``; a nested Hugging Face GPT-2 goes through `split_module` in place
of torchtitan's ``_split_module``. Both skip when the package is not installed.
"""

from __future__ import annotations

import os
import socket
import tempfile

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

from incsched.capture import capture, zoo
from incsched.errors import ExportError
from incsched.export import deepspeed_parts, parse_partition_method, torchtitan_chunks
from incsched.export.module_split import split_module
from incsched.front_door import solve
from incsched.graph import CompGraph
from incsched.problems import StageProblem


class Stack(nn.Module):
    """A DeepSpeed-style model: a sequence of layers, each output the next one's input."""

    def __init__(self, widths=(8, 16, 24, 32, 40, 8)):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(a, b) for a, b in zip(widths, widths[1:])])

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tagged(model: nn.Module) -> nn.Module:
    """Every module remembers its path, so a part's copy tells which of the model's modules it holds."""
    for path, module in model.named_modules():
        module._incsched_path = path
    return model


def _held(part: nn.Module, names: set[str]) -> set[str]:
    return {m._incsched_path for m in part.modules() if getattr(m, "_incsched_path", None) in names}


# ---------------------------------------------------------------------- DeepSpeed


def test_parts_partition_method_round_trip_and_checks():
    assert parse_partition_method("parts:0,2,5", n_layers=5, n_stages=2) == [0, 2, 5]
    for bad, match in [("uniform", "must be 'parts:'"), ("parts:0,x,5", "whole numbers"), ("parts:0,5", "need 3"),
                       ("parts:0,4,3", "rise from 0"), ("parts:0,2,6", "layer count 5")]:
        with pytest.raises(ExportError, match=match):
            parse_partition_method(bad, n_layers=5, n_stages=2)


def test_deepspeed_tied_groups_are_empty_without_shared_weights():
    g = CompGraph(["a", "b"], ["a"], ["b"], meta={"granularity": "layer", "modules": {"a": "a", "b": "b"}})
    assert deepspeed_parts(g, [0, 1])["tied"] == []


def _deepspeed_rank(rank: int, world: int, port: int, out: dict, folder: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    import deepspeed
    import deepspeed.ops

    # Mark DeepSpeed's shared-memory allreduce kernel unavailable: it is JIT-compiled (minutes) on
    # the first init on CPU and has nothing to do with partitioning; gloo carries the rest.
    deepspeed.ops.__compatible_ops__ = {}
    deepspeed.init_distributed(dist_backend="gloo")
    from incsched.export.deepspeed_module import PartsPipelineModule

    torch.manual_seed(0)
    model = _tagged(Stack())
    layers = [model.get_submodule(path) for path in out["layers"]]
    pipe = PartsPipelineModule(layers, num_stages=world, partition_method=out["partition_method"])
    held = [m._incsched_path for m in pipe.forward_funcs]
    torch.save({"parts": list(pipe.parts), "held": held}, os.path.join(folder, f"rank{rank}.pt"))
    torch.distributed.destroy_process_group()


@pytest.mark.long
@pytest.mark.slow
def test_deepspeed_pipeline_module_takes_our_parts():
    pytest.importorskip("deepspeed")
    model = Stack().eval()
    graph = capture(model, (torch.randn(2, 8),), granularity="layer", name="stack").graph
    result = solve(StageProblem.peer(graph, n_stages=2), time_limit=20)
    out = deepspeed_parts(graph, result)
    assert out["partition_method"] == "parts:" + ",".join(map(str, out["parts"]))
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_deepspeed_rank, args=(2, _free_port(), out, folder), nprocs=2, join=True)
        ranks = [torch.load(os.path.join(folder, f"rank{r}.pt")) for r in range(2)]
    for r, seen in enumerate(ranks):
        assert seen["parts"] == out["parts"]
        assert seen["held"] == out["layers"][out["parts"][r] : out["parts"][r + 1]]


# ---------------------------------------------------------------------- torchtitan


def _llama_layer_graph(model: nn.Module) -> CompGraph:
    """The layer graph of torchtitan's Llama in call order, parameter bytes from the model (meta device)."""
    names = ["tok_embeddings", *[f"layers.{k}" for k in model.layers.keys()], "norm", "lm_head"]
    param_bytes = [sum(p.numel() * p.element_size() for p in model.get_submodule(nm).parameters()) for nm in names]
    return CompGraph(names, names[:-1], names[1:], param_bytes=param_bytes, compute_time={"cpu": [1e-3] * len(names)},
                     meta={"granularity": "layer", "modules": {nm: nm for nm in names}, "containers": ["layers"]})


@pytest.fixture
def pp_mesh():
    dist = torch.distributed
    dist.init_process_group("gloo", init_method=f"file://{tempfile.mktemp()}", rank=0, world_size=1)
    from torch.distributed.device_mesh import init_device_mesh

    yield init_device_mesh("cpu", (1,), mesh_dim_names=("pp",))
    dist.destroy_process_group()


def test_torchtitan_splits_a_llama_by_our_names(pp_mesh):
    pytest.importorskip("torchtitan")
    pipeline_parallel = pytest.importorskip("torchtitan.distributed.pipeline_parallel")
    llama3 = pytest.importorskip("torchtitan.models.llama3")
    with torch.device("meta"):
        model = _tagged(llama3.llama3_configs["debugmodel"](attn_backend="flex").build())
    graph = _llama_layer_graph(model)
    result = solve(StageProblem.peer(graph, n_stages=3), time_limit=20)
    out = torchtitan_chunks(graph, result, ranks=1)
    fqns = out["module_fqns_per_model_part"]
    assert not out["nested"] and [nm for part in fqns for nm in part] == list(graph.names)
    # torchtitan's own splitter, all three parts on the one rank (a looped schedule)
    _, parts = pipeline_parallel._pipeline_module_split(model, pp_mesh, "Interleaved1F1B", torch.device("cpu"), fqns)
    names = set(graph.names)
    assert [_held(part, names) for part in parts] == [set(part) for part in fqns]
    for part, kept in zip(parts, fqns):  # on names torchtitan keeps, split_module keeps the same
        ours = split_module(model, kept)
        assert [nm for nm, _ in ours.named_parameters()] == [nm for nm, _ in part.named_parameters()]


def test_torchtitan_splits_a_nested_gpt2_with_split_module(pp_mesh, monkeypatch):
    pipeline_parallel = pytest.importorskip("torchtitan.distributed.pipeline_parallel")
    pytest.importorskip("transformers")
    transformers = zoo.import_transformers()  # torchvision's ops made importable first
    config = transformers.GPT2Config(n_layer=4, n_embd=32, n_head=2, vocab_size=64, n_positions=16, use_cache=False,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = _tagged(transformers.GPT2LMHeadModel(config).eval())
    graph = capture(model, (torch.randint(0, 64, (1, 8)),), granularity="layer", name="gpt2").graph
    result = solve(StageProblem.peer(graph, n_stages=2), time_limit=20)
    out = torchtitan_chunks(graph, result)
    fqns = out["module_fqns_per_model_part"]
    assert out["nested"] and any(nm.startswith("transformer.h.") for part in fqns for nm in part)
    names = {nm for part in fqns for nm in part}
    # torchtitan's own _split_module keeps top-level names only: transformer.* is lost
    assert not any(nm.startswith("transformer.") for nm in _held(pipeline_parallel._split_module(model, fqns[0]), names))
    monkeypatch.setattr(pipeline_parallel, "_split_module", split_module)
    _, parts = pipeline_parallel._pipeline_module_split(model, pp_mesh, "Interleaved1F1B", torch.device("cpu"), fqns)
    assert [_held(part, names) for part in parts] == [set(part) for part in fqns]
    held_bytes = [sum(p.numel() * p.element_size() for p in part.parameters()) for part in parts]
    assert np.all(np.asarray(held_bytes) > 0)
