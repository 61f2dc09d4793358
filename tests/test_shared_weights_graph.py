"""Shared (tied) weights in the graph model: a weight read by several nodes costs its bytes once on
every stage or device that holds a reader; capture records them; files keep or refuse them."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import numpy as np
import pytest

from incsched.errors import FormatError, GraphError
from incsched.formats.csv_tables import write_csv_tables
from incsched.formats.gml import write_gml
from incsched.graph import CompGraph, SharedWeight
from incsched.graph.coarsen import quotient


def _chain(shared=({"name": "wte", "bytes": 100, "read_by": ["a", "d"]},)):
    return CompGraph(["a", "b", "c", "d"], ["a", "b", "c"], ["b", "c", "d"], param_bytes=[1, 2, 4, 8],
                     out_bytes=[1, 1, 1, 0], shared_weights=list(shared))


def test_a_shared_weight_costs_its_bytes_on_every_part_that_reads_it():
    g = _chain()
    assert g.shared_weights == (SharedWeight("wte", 100, (0, 3)),)
    assert g.part_param_bytes([0, 0, 1, 1], 2) == [103, 112]  # on both stages
    assert g.part_param_bytes([0, 1, 1, 0], 2) == [109, 6]  # once where both readers sit
    assert g.replicated_weights([0, 0, 1, 1]) == {"wte": [0, 1]}
    assert g.replicated_weights([0, 1, 1, 0]) == {}
    assert g.total_param_bytes == 115 and g.summary()["total_param_bytes"] == 115
    assert g.node_weight_bytes.tolist() == [101, 2, 4, 108]


def test_brute_force_part_bytes_match_a_direct_count():
    rng = np.random.default_rng(0)
    n = 7
    names = [f"v{i}" for i in range(n)]
    params = rng.integers(0, 50, n)
    shared = [{"name": f"w{j}", "bytes": int(rng.integers(1, 100)), "read_by": sorted(rng.choice(names, 3, replace=False).tolist())} for j in range(3)]
    g = CompGraph(names, names[:-1], names[1:], param_bytes=params, shared_weights=shared)
    for _ in range(50):
        part = rng.integers(0, 3, n)
        want = [int(params[part == k].sum()) + sum(w["bytes"] for w in shared if any(part[names.index(r)] == k for r in w["read_by"])) for k in range(3)]
        assert g.part_param_bytes(part, 3) == want


def test_json_round_trip_and_schema():
    g = _chain()
    doc = g.to_json()
    schema = json.loads(resources.files("incsched").joinpath("schemas/graph-v1.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert doc["shared_weights"] == [{"name": "wte", "bytes": 100, "read_by": ["a", "d"]}]
    assert CompGraph.from_json(json.loads(json.dumps(doc))) == g
    assert CompGraph.from_json(_chain(()).to_json()).shared_weights == ()
    assert "shared_weights" not in _chain(()).to_json()  # graphs without them: files as before
    assert g != _chain(())
    assert CompGraph.from_networkx(g.to_networkx()) == g
    assert g.replace(name="x").shared_weights == g.shared_weights


def test_merging_all_readers_makes_the_weight_that_node_s_own():
    g = _chain()
    whole = quotient(g, [0, 0, 0, 0])
    assert whole.shared_weights == () and whole.param_bytes.tolist() == [115]
    halves = quotient(g, [0, 0, 1, 1])
    assert halves.shared_weights == (SharedWeight("wte", 100, (0, 1)),) and halves.param_bytes.tolist() == [3, 12]


@pytest.mark.parametrize("bad, message", [
    ([{"name": "w", "bytes": 1, "read_by": ["a"]}], "read by 1 node"),
    ([{"name": "w", "bytes": -1, "read_by": ["a", "b"]}], "has -1 bytes"),
    ([{"name": "w", "bytes": 1.5, "read_by": ["a", "b"]}], "has 1.5 bytes"),
    ([{"name": "w", "bytes": 2**63, "read_by": ["a", "b"]}], "byte counts are whole numbers from 0 to 2\\*\\*62"),
    ([{"name": "w", "bytes": 1, "read_by": ["a", "zz"]}], "unknown node 'zz'"),
    ([{"name": "w", "bytes": 1, "read_by": ["a", 7]}], "read by 7, not a node"),
    ([{"name": "w", "bytes": 1, "read_by": ["a", "b"]}] * 2, "duplicate shared weight 'w'"),
    ([{"name": "", "bytes": 1, "read_by": ["a", "b"]}], "non-empty string name"),
    ([{"name": "w", "bytes": 1}], "exactly the keys name, bytes, read_by"),
    ("w", "must be a list of weights"),
    ([{"name": "w", "bytes": 2**62, "read_by": ["a", "b"]}, {"name": "v", "bytes": 2**62, "read_by": ["a", "b"]}], "beyond the supported 2\\*\\*62"),
])
def test_bad_shared_weights_are_one_line_errors(bad, message):
    with pytest.raises(GraphError, match=message):
        CompGraph(["a", "b"], ["a"], ["b"], shared_weights=bad)


def test_a_file_with_a_bad_shared_weight_names_the_file():
    doc = _chain().to_json()
    doc["shared_weights"] = [3]
    with pytest.raises(FormatError, match="g.json: entry 0 of field 'shared_weights' must be an object"):
        CompGraph.from_json(doc, source="g.json")
    doc["shared_weights"] = [{"name": "wte", "bytes": 100, "read_by": ["a", "nope"]}]
    with pytest.raises(GraphError, match="g.json: shared weight 'wte' is read by unknown node 'nope'"):
        CompGraph.from_json(doc, source="g.json")


def test_formats_without_a_place_for_shared_weights_refuse_them(tmp_path):
    g = _chain()
    with pytest.raises(FormatError, match="no place in GML; save the graph as .json"):
        write_gml(g, tmp_path / "g.gml")
    with pytest.raises(FormatError, match="no place in CSV tables"):
        write_csv_tables(g, tmp_path / "n.csv", tmp_path / "e.csv")


def test_capture_records_gpt2_s_tied_embedding_as_shared():
    torch = pytest.importorskip("torch")
    from incsched.capture import capture, zoo

    tf = zoo.import_transformers()
    torch.manual_seed(0)
    config = tf.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=500, n_positions=32, use_cache=False,
                           bos_token_id=0, eos_token_id=0)
    model = tf.GPT2LMHeadModel(config).eval()
    g = capture(model, (torch.randint(0, 500, (1, 8)),), granularity="layer").graph
    (tied,) = g.shared_weights
    assert tied.nbytes == 500 * 32 * 4
    assert [g.names[v] for v in tied.readers] == ["transformer.wte", "lm_head"]
    assert g.total_param_bytes == sum(p.numel() * 4 for p in model.parameters())  # each weight once
    stages = [0 if nm != "lm_head" else 1 for nm in g.names]
    per_stage = g.part_param_bytes(stages, 2)
    assert per_stage[1] == tied.nbytes  # the head alone on its stage holds the tied weight
    assert per_stage[0] == g.total_param_bytes  # everything, the tied weight included, once

    from incsched.export import deepspeed_parts

    parts = deepspeed_parts(g, [0] * (g.n_nodes - 1) + [1])
    (group,) = parts["tied"]  # the layers to build as TiedLayerSpec(key, ...): embedding and head
    assert group["key"] == tied.name and group["bytes"] == tied.nbytes
    assert [parts["layers"][i] for i in group["layers"]] == ["transformer.wte", "lm_head"]
