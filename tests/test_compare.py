"""incsched.compare and ``incsched compare``: our split beside the usual splitters, on a shipped
graph, a graph file and a captured model; torchtitan's even layers against its own function."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from incsched.baselines.stage import even_layers
from incsched.cli import main
from incsched.compare import OURS, SPLITTERS, compare_splits
from incsched.errors import ProblemError
from incsched.formats import load_graph, save_graph
from incsched.graph import CompGraph
from incsched.problems import StageProblem


def _layer_chain(n_blocks: int, around=("emb", "pos"), after=("norm", "head")) -> CompGraph:
    names = [*around, *[f"h.{k}" for k in range(n_blocks)], *after]
    return CompGraph(names, names[:-1], names[1:], meta={"granularity": "layer", "modules": {n: n for n in names}, "containers": ["h"]})


def _torchtitan_even(K: int, L: int) -> list[list[str]]:
    """torchtitan 0.3.0's ``_generate_llm_fqn_per_model_part(K, L, 1, 1)``, as written there (the oracle)."""
    units = L + 2
    per, extra = units // K, units % K
    out, layer = [], 0
    for s in range(K):
        n = per + (1 if s < extra else 0)
        names = []
        if s == 0 or K == 1:
            names.append("tok_embeddings")
            n -= 1
        if s == K - 1:
            n -= 1
        for _ in range(n):
            if layer < L:
                names.append(f"layers.{layer}")
                layer += 1
        if s == K - 1:
            names += ["norm", "lm_head"]
        out.append(names)
    return out


@pytest.mark.parametrize("L,K", [(4, 1), (4, 2), (4, 3), (4, 6), (6, 4), (12, 4), (7, 3)])
def test_even_layers_is_torchtitans_default(L, K):
    g = _layer_chain(L, around=("emb",), after=("head",))
    stages = even_layers(StageProblem.peer(g, n_stages=K)).tolist()
    parts = _torchtitan_even(K, L)
    expected = {f"h.{k}": s for s, part in enumerate(parts) for nm in part if nm.startswith("layers.") for k in [int(nm.split(".")[1])]}
    assert [stages[g.index(f"h.{k}")] for k in range(L)] == [expected[f"h.{k}"] for k in range(L)]
    assert stages[0] == 0 and stages[-1] == K - 1 and all(a <= b for a, b in zip(stages, stages[1:]))


def test_even_layers_needs_blocks_and_enough_of_them():
    with pytest.raises(ProblemError, match="no repeated blocks"):
        even_layers(StageProblem.peer(load_graph("resnet18"), n_stages=2))
    with pytest.raises(ProblemError, match="5 stages cannot share 2 blocks"):
        even_layers(StageProblem.peer(_layer_chain(2), n_stages=5))


def test_compare_splits_on_a_shipped_graph():
    c = compare_splits(load_graph("resnet18"), 4, time_limit=10)
    assert [r.method for r in c.rows] == [OURS, *SPLITTERS]
    ours = c.row(OURS)
    assert c.status == "optimal" and ours.slower_than_ours is None
    assert c.row("even layers (torchtitan)").stages is None and "granularity 'layer'" in c.row("even layers (torchtitan)").note
    for r in c.rows[1:]:
        if r.stages is not None:  # ours is optimal: nobody's slowest stage is faster
            assert r.slowest_stage_s >= ours.slowest_stage_s * (1 - 1e-9) and r.slower_than_ours >= -1e-9
    assert "| incsched |" in c.table() and json.loads(json.dumps(c.to_json()))["graph"] == "resnet18"


class Blocks(nn.Module):
    def __init__(self, width: int = 16, n_blocks: int = 4):
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.blocks = nn.ModuleList([nn.Linear(width, width) for _ in range(n_blocks)])
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = x + torch.relu(block(x))
        return self.head(x)


def make_blocks():
    torch.manual_seed(0)
    return Blocks().eval(), (torch.randn(8, 16),)


def test_cli_compare_a_graph_file_with_figure_and_json(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "chain.json"
    g = _layer_chain(6)
    save_graph(g.replace(compute_time={"cpu": np.linspace(1e-3, 2e-3, g.n_nodes)}, param_bytes=np.full(g.n_nodes, 1000)), path)
    assert main(["compare", str(path), "--stages", "3", "--time-limit", "5", "--png", str(tmp_path / "c.png"), "--json", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert "| even layers (torchtitan) |" in out and "ours is optimal" in out
    assert (tmp_path / "c.png").stat().st_size > 1000
    assert json.loads((tmp_path / "c.json").read_text())["rows"][0]["method"] == OURS


@pytest.mark.slow
def test_cli_compare_a_model_measured(tmp_path, capsys):
    factory = f"{__file__}:make_blocks"
    assert main(["compare", "--model", factory, "--stages", "2", "--time-limit", "5", "--measure", "--repeats", "1", "--json", str(tmp_path / "m.json")]) == 0
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["measured_on"].startswith("2 CPU worker processes")
    assert all(r["measured_throughput"] > 0 for r in data["rows"] if r["stages"] is not None)
    assert data["rows"][1]["stages"] is not None  # the layer capture has blocks: even layers applies


def test_cli_compare_needs_a_graph_or_a_model(capsys):
    assert main(["compare", "--stages", "2"]) != 0
    assert "name what to compare" in capsys.readouterr().err
    assert main(["compare", "vgg16", "--stages", "2", "--measure", "--model", "nope_not_a_model"]) != 0


def test_the_oracle_is_torchtitans_own_function():
    pipeline_parallel = pytest.importorskip("torchtitan.distributed.pipeline_parallel")
    for L, K in [(4, 1), (4, 2), (4, 3), (4, 6), (6, 4), (12, 4), (7, 3)]:
        assert _torchtitan_even(K, L) == pipeline_parallel._generate_llm_fqn_per_model_part(K, L, 1, 1)
