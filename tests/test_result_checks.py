"""One check of a result against its graph (`Result.check_assignment`), shared by export, validate
and show (issue 24): no node is dropped, moved or truncated without a word, and no malformed field
ends in a traceback."""

from __future__ import annotations

import json

import pytest

from incsched.cli import main
from incsched.errors import ExportError, FormatError
from incsched.export import deepspeed_parts, split_spec_names, stage_table
from incsched.graph import CompGraph
from incsched.result import Result

G = CompGraph(["embed", "b0", "b1", "b2", "head"], ["embed", "b0", "b1", "b2"], ["b0", "b1", "b2", "head"],
              param_bytes=[40, 10, 10, 10, 40], out_bytes=[8, 8, 8, 8, 4], name="chain")


def _stage_result(stages, **extra) -> dict:
    r = Result("stage", "chain", "feasible", 1, 0, 1.0, {"stage_mem": [50, 60]}, "given", 0, False, stages=[0, 0, 0, 1, 1])
    data = r.to_json()
    data["stages"] = stages
    data.update(extra)
    return data


BAD_STAGES = [
    ([0, 0, 0, 0, 2**40], "stages of node 'head' is 1099511627776, out of range"),
    ([0, 0, 0.5, 1, 1], "stages of node 'b1' is 0.5; stages are whole numbers"),
    ([0, 0, 0, 1.9, 1], "is 1.9; stages are whole numbers"),
    ([0, 0, 0, "1", 1], "is '1'; stages are whole numbers"),
    ([0, 0, 0, True, 1], "is True; stages are whole numbers"),
    ([0, 0, None, 1, 1], "is None; stages are whole numbers"),
    ([0, 0, [1], 1, 1], "is [1]; stages are whole numbers"),
    ([0, 0, 0, 1e309, 1], "is inf; stages are whole numbers"),
    ([0, 0, 0, 1], "4 stages entries for the 5 nodes"),
    ([0, -1, 0, 1, 1], "stages of node 'b0' is -1, out of range"),
]


@pytest.mark.parametrize("stages,message", BAD_STAGES)
def test_a_bad_stage_is_refused_by_name(stages, message):
    r = Result.from_json(_stage_result(stages))
    with pytest.raises(FormatError, match=message.replace("[", r"\[").replace("(", r"\(")):
        r.check_assignment(G)


@pytest.mark.parametrize("stages,message", BAD_STAGES[:1] + BAD_STAGES[2:4])
def test_the_export_api_refuses_them_too(stages, message):
    for fn in (stage_table, split_spec_names, deepspeed_parts):
        with pytest.raises(ExportError, match="whole numbers|out of range"):
            fn(G, stages)
    with pytest.raises(ExportError, match="one whole number per node, got NoneType"):
        stage_table(G, None)


@pytest.mark.parametrize("stages,message", BAD_STAGES)
def test_the_cli_export_says_one_line(stages, message, tmp_path, capsys):
    (tmp_path / "r.json").write_text(json.dumps(_stage_result(stages)))
    G.save(tmp_path / "g.json")
    assert main(["export", str(tmp_path / "r.json"), "--graph", str(tmp_path / "g.json"), "--format", "json", "-o", str(tmp_path / "out.json")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("field,value,message", [
    ("provenance", [1, 2], "'provenance' must be an object, got list"),
    ("terms", 5, "'terms' must be an object, got int"),
    ("order", {"0": [1]}, "'order' must be a list, got dict"),
])
def test_malformed_fields_are_format_errors(field, value, message):
    data = _stage_result([0, 0, 0, 1, 1], **{field: value})
    with pytest.raises(FormatError, match=message):
        Result.from_json(data)


def test_a_placement_order_must_cover_every_node_on_its_device():
    base = dict(problem="placement", graph="chain", status="feasible", objective=1, lower_bound=0, gap=1.0, terms={},
                method="heft", seed=0, reproducible=False, device=[0, 0, 1, 1, 1], start=[0, 1, 2, 3, 4])
    Result(**base, order=[[0, 1], [2, 3, 4]]).check_assignment(G)
    for order, message in (([[0, 1], [2, 3]], "order leaves out node 4"), ([[0, 1, 2], [3, 4]], "lists 2, which is not a node of that device"),
                           ([[0, 1], [2, 3, 4, 4]], "lists 4")):
        with pytest.raises(FormatError, match=message):
            Result(**base, order=order).check_assignment(G)
    with pytest.raises(FormatError, match="start tick -1"):
        Result(**{**base, "start": [0, 1, 2, 3, -1]}, order=[[0, 1], [2, 3, 4]]).check_assignment(G)


def test_a_good_result_passes():
    r = Result.from_json(_stage_result([0, 0, 0, 1, 1]))
    assert r.check_assignment(G) is r
    assert stage_table(G, r)["stages"][1]["nodes"] == ["b2", "head"]
