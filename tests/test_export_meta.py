"""incsched.export reads a graph's meta (modules, glue_before, containers, module_of, granularity)
through one check, `export_meta`: a graph file whose meta is not what capture writes is refused
in one line naming the entry (issue 24, items 8-10: unhashable list values in ``modules``,
``glue_before`` as a list, ``containers = 5`` raised TypeError or AttributeError)."""

from __future__ import annotations

import json

import pytest

from incsched.cli import main
from incsched.export import (
    ExportError,
    deepspeed_parts,
    export_meta,
    export_result,
    split_spec_names,
    stage_runs,
    stage_table,
    torchtitan_chunks,
)
from incsched.formats import save_graph
from incsched.graph import CompGraph
from incsched.result import Result

NAMES = ["embed", "layers.0", "layers.1", "head"]


def layer_graph(**meta) -> CompGraph:
    """A 4-module chain with the meta capture(granularity="layer") writes, ``meta`` on top (None deletes)."""
    base = {
        "granularity": "layer",
        "modules": {nm: nm for nm in NAMES},
        "glue_before": {"embed": 1, "head": 2},
        "containers": ["layers"],
    }
    base.update(meta)
    base = {k: v for k, v in base.items() if v is not None}
    return CompGraph(NAMES, NAMES[:-1], NAMES[1:], param_bytes=[4, 8, 8, 2], name="chain", meta=base)


STAGES = [0, 0, 1, 1]


def test_capture_like_meta_exports_in_every_format():
    g = layer_graph()
    meta = export_meta(g)
    assert meta.modules == {nm: nm for nm in NAMES} and meta.containers == frozenset({"layers"})
    assert split_spec_names(g, STAGES) == {"layers.1": "BEGINNING"}
    assert deepspeed_parts(g, STAGES)["parts"] == [0, 2, 4]
    assert torchtitan_chunks(g, STAGES)["module_fqns_per_model_part"] == [["embed", "layers.0"], ["layers.1", "head"]]
    assert [row["modules"] for row in stage_table(g, STAGES)["stages"]] == [["embed", "layers.0"], ["layers.1", "head"]]
    plain = layer_graph(glue_before=None, containers=None)  # both optional
    assert split_spec_names(plain, STAGES) == {"layers.1": "BEGINNING"}


BAD_META = [
    # item 8: list values in meta.modules made `calls[path]` raise "unhashable type: 'list'"
    ({"modules": {**{nm: nm for nm in NAMES}, "layers.1": ["layers", "1"]}},
     "meta['modules'] must map node names to module paths (non-empty strings); node 'layers.1' has ['layers', '1']"),
    ({"modules": ["embed", "layers.0", "layers.1", "head"]}, "meta['modules'] must map node names to module paths"),
    ({"modules": {**{nm: nm for nm in NAMES}, "head": ""}}, "node 'head' has ''"),
    ({"modules": None}, "granularity 'layer' but meta['modules'] (the module path of every node) is missing"),
    # item 9: glue_before as a list raised AttributeError ('list' object has no attribute 'get')
    ({"glue_before": [1, 0, 0, 2]}, "meta['glue_before'] must map node names to counts (whole numbers >= 0), got list"),
    ({"glue_before": {"head": -1}}, "node 'head' has -1"),
    ({"glue_before": {"head": "2"}}, "node 'head' has '2'"),
    # item 10: containers = 5 raised TypeError in set(); a string was read as its letters
    ({"containers": 5}, "meta['containers'] must be a list of module names, got 5"),
    ({"containers": "layers"}, "meta['containers'] must be a list of module names, got 'layers'"),
    ({"containers": ["layers", 3]}, "got ['layers', 3]"),
    ({"module_of": [1, 2]}, "meta['module_of'] must map node names to module paths"),
    ({"granularity": ["layer"]}, "meta['granularity'] must be 'op', 'layer' or 'module:<depth>', got ['layer']"),
]


@pytest.mark.parametrize("meta, message", BAD_META)
@pytest.mark.parametrize("fmt", ["pipelining", "deepspeed", "torchtitan", "json"])
def test_bad_meta_is_one_line_naming_the_entry(meta, message, fmt):
    g = layer_graph(**meta)
    result = Result("stage", g.name, "unknown", None, None, None, {}, "given", 0, False, stages=STAGES)
    with pytest.raises(ExportError) as err:
        export_result(result, g, fmt)
    assert str(err.value) == f"graph 'chain': {message}" or message in str(err.value)
    assert str(err.value).startswith("graph 'chain': meta[") or "is missing" in str(err.value)
    assert "\n" not in str(err.value)


def test_op_level_graphs_have_their_meta_checked_too():
    g = CompGraph(["a", "b"], ["a"], ["b"], name="ops", meta={"module_of": {"a": "m", "b": ["m"]}})
    with pytest.raises(ExportError, match=r"graph 'ops': meta\['module_of'\] .* node 'b' has \['m'\]"):
        stage_table(g, [0, 1])
    assert stage_runs  # the op-level refusal itself is in test_export.py


@pytest.mark.parametrize("n_stages, message", [
    (1, "n_stages is 1, but the stages used need a whole number of at least 2"),
    (0, "n_stages is 0"),
    ("2", "n_stages is '2'"),
    (True, "n_stages is True"),
])
def test_a_stage_count_that_leaves_a_used_stage_out_is_refused(n_stages, message):
    # stage_table(n_stages=1) silently dropped the nodes of stage 1
    with pytest.raises(ExportError, match=message):
        stage_table(layer_graph(), STAGES, n_stages=n_stages)
    with pytest.raises(ExportError, match=message):
        deepspeed_parts(layer_graph(), STAGES, n_stages=n_stages)


def test_a_result_with_empty_stage_terms_keeps_every_node():
    g = layer_graph()
    result = Result("stage", g.name, "unknown", None, None, None, {"stage_mem": []}, "given", 0, False, stages=STAGES)
    table = export_result(result, g, "json")
    assert [nm for row in table["stages"] for nm in row["nodes"]] == NAMES


def test_module_paths_must_be_a_mapping():
    with pytest.raises(ExportError, match="module_paths must map fx node names to module paths, got list"):
        stage_runs(layer_graph(), STAGES, module_paths=["x"])


@pytest.mark.parametrize("meta, fmt, message", [
    ({"modules": {**{nm: nm for nm in NAMES}, "layers.1": ["layers", "1"]}}, "pipelining", "meta['modules']"),
    ({"glue_before": [1, 0, 0, 2]}, "pipelining", "meta['glue_before']"),
    ({"containers": 5}, "torchtitan", "meta['containers']"),
])
def test_cli_export_with_bad_meta_is_one_line(tmp_path, capsys, meta, fmt, message):
    g = layer_graph(**meta)
    save_graph(g, tmp_path / "g.json")
    Result("stage", g.name, "unknown", None, None, None, {}, "given", 0, False, stages=STAGES).save(tmp_path / "r.json")
    assert main(["export", str(tmp_path / "r.json"), "--format", fmt, "--graph", str(tmp_path / "g.json")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err, err
    good = layer_graph()
    save_graph(good, tmp_path / "good.json")
    assert main(["export", str(tmp_path / "r.json"), "--format", fmt, "--graph", str(tmp_path / "good.json")]) == 0
    assert json.loads(capsys.readouterr().out)["n_stages"] == 2
