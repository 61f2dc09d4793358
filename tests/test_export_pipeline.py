"""Exports run by torch.distributed.pipelining under gloo, two spawned processes.

The issue's case: a Llama built from a config. Captured at layer granularity and solved into two
stages, its split_spec goes to ``pipeline()``; captured op by op, its optimum (which cuts inside
modules) goes over as `PipelineStages`. In each process a GPipe schedule runs the micro-batches;
the last stage's outputs equal the unsplit model's, both ways.
"""

from __future__ import annotations

import copy
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.pipelining import pipeline

from incsched.capture import capture, zoo
from incsched.export import PipelineStages, pipeline_stages, split_spec, split_spec_names, stage_runs
from incsched.problems import StageProblem
from incsched.front_door import solve

pytestmark = pytest.mark.slow

N_MICRO = 2


class Logits(nn.Module):
    """The causal LM's logits as a plain tensor (the pipeline's last stage returns it)."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids):
        return self.lm(input_ids).logits


def _tiny_llama() -> nn.Module:
    tf = zoo.import_transformers()
    config = tf.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                            num_key_value_heads=2, max_position_embeddings=32, use_cache=False)
    torch.manual_seed(0)
    return Logits(tf.LlamaForCausalLM(config)).eval()


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, port: int, tokens: torch.Tensor, spec_names: dict, folder: str, examples, out_path: str) -> None:
    from torch.distributed.pipelining import ScheduleGPipe, SplitPoint

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        spec = {path: SplitPoint[marker] for path, marker in spec_names.items()}
        model = _tiny_llama()  # seeded: the parent's weights (unpickling one would import transformers unprepared)
        pipe = pipeline(model, (tokens.chunk(N_MICRO)[0],), split_spec=spec)
        assert pipe.num_stages == world, pipe.num_stages
        schedule = ScheduleGPipe(pipe.build_stage(rank, torch.device("cpu")), n_microbatches=N_MICRO)
        # the op-level stages as a user loads them: the saved programs, without the parent's objects
        modules = [torch.export.load(os.path.join(folder, f"stage_{k}.pt2")).module() for k in range(world)]
        stages = PipelineStages(modules, *examples)
        op_schedule = ScheduleGPipe(stages.stage(rank, "cpu"), n_microbatches=N_MICRO)
        with torch.no_grad():
            out = schedule.eval(tokens) if rank == 0 else schedule.eval()
            op_out = op_schedule.eval(tokens) if rank == 0 else op_schedule.eval()
        if rank == world - 1:
            torch.save((out, op_out[0]), out_path)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.long
def test_pipeline_runs_an_exported_split_spec(tmp_path):
    model = _tiny_llama()
    tokens = torch.randint(0, 128, (2 * N_MICRO, 8))
    graph = capture(model, (tokens.chunk(N_MICRO)[0],), granularity="layer", name="llama").graph
    result = solve(StageProblem.peer(graph, n_stages=2), "ilp", time_limit=30)
    assert result.status == "optimal"
    spec = split_spec(graph, result)
    assert len(spec) == 1 and all(path.startswith("lm.model.layers.") for path in spec)  # a cut between layers

    # In one process first: each stage holds the parameters of the modules the result put there.
    pipe = pipeline(copy.deepcopy(model), (tokens[:2],), split_spec=spec)  # it wraps forwards in place
    runs = stage_runs(graph, result)
    for k, paths in enumerate(runs.modules):
        expected = sum(_bytes(model.get_submodule(path).parameters()) for path in paths)
        assert _bytes(pipe.get_stage_module(k).parameters()) == expected

    ops = capture(model, (tokens.chunk(N_MICRO)[0],), name="llama")
    op_result = solve(StageProblem.peer(ops.graph, n_stages=2), "ilp", time_limit=30)
    stages = pipeline_stages(ops, op_result)
    stages.save(tmp_path / "stages")

    out_path = str(tmp_path / "out.pt")
    args = (2, _free_port(), tokens, split_spec_names(graph, result), str(tmp_path / "stages"), (stages.inputs, stages.outputs), out_path)
    mp.spawn(_rank, args=args, nprocs=2, join=True)
    with torch.no_grad():
        expected = model(tokens)
    out, op_out = torch.load(out_path)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(op_out, expected)
