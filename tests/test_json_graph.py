"""The incsched JSON graph format: round trips, byte-identical output, the schema, clear errors."""

from __future__ import annotations

import gzip
import json
from importlib import resources

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incsched.errors import CycleError, FormatError, GraphError
from incsched.formats import graph_from_dict, graph_to_dict, load_graph, save_graph
from incsched.graph import CompGraph


@pytest.fixture(scope="module")
def schema():
    text = resources.files("incsched").joinpath("schemas/graph-v1.schema.json").read_text()
    data = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(data)
    return data


def validate(obj, schema):
    jsonschema.Draft202012Validator(schema).validate(obj)


# Any text but NUL (which the readers refuse in names), incl. quotes, newlines and astral characters.
text_st = st.characters(exclude_characters="\x00", exclude_categories=("Cs",))
names_st = st.text(text_st, min_size=1, max_size=8)
costs_st = st.floats(0, 1e15, allow_nan=False, allow_infinity=False)
bytes_st = st.integers(0, 2**53)  # CompGraph checks bytes through float64, exact up to 2**53


@st.composite
def graphs(draw):
    names = draw(st.lists(names_st, min_size=1, max_size=10, unique=True))
    n = len(names)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs))) if pairs else []
    m = len(chosen)
    kinds = draw(st.lists(st.sampled_from(["cpu", "cuda", "tpu"]), unique=True, max_size=2))
    return CompGraph(
        names,
        [names[i] for i, _ in chosen],
        [names[j] for _, j in chosen],
        op=draw(st.lists(st.text(text_st, max_size=5), min_size=n, max_size=n)),
        flops=draw(st.lists(costs_st, min_size=n, max_size=n)),
        param_bytes=draw(st.lists(bytes_st, min_size=n, max_size=n)),
        out_bytes=draw(st.lists(bytes_st, min_size=n, max_size=n)),
        edge_bytes=draw(st.lists(bytes_st, min_size=m, max_size=m)),
        compute_time={k: draw(st.lists(costs_st, min_size=n, max_size=n)) for k in kinds},
        members=draw(st.none() | st.lists(st.lists(st.text(max_size=4), max_size=3), min_size=n, max_size=n)),
        name=draw(st.text(text_st, max_size=10)),
        meta=draw(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5) | st.booleans(), max_size=3)),
    )


@pytest.mark.slow
@given(graphs(), st.sampled_from([".json", ".json.gz"]))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_round_trip_through_files(tmp_path, schema, g, suffix):
    path = tmp_path / f"g{suffix}"
    save_graph(g, path)
    back = load_graph(path)
    assert back == g
    assert back.flops.dtype == np.float64 and back.param_bytes.dtype == np.int64
    validate(json.loads(gzip.decompress(path.read_bytes()) if suffix.endswith(".gz") else path.read_bytes()), schema)


@pytest.mark.slow
@given(graphs())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_equal_graphs_give_identical_bytes(tmp_path, g):
    twin = graph_from_dict(json.loads(json.dumps(graph_to_dict(g))))  # an equal but separate object
    assert twin == g
    for suffix in (".json", ".json.gz"):
        a, b = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
        save_graph(g, a)
        save_graph(twin, b)
        assert a.read_bytes() == b.read_bytes()


def test_gzip_detected_by_content_and_no_leftover_temp_files(tmp_path):
    g = CompGraph(["a", "b"], ["a"], ["b"], out_bytes=[3, 0])
    save_graph(g, tmp_path / "g.json.gz")
    assert (tmp_path / "g.json.gz").read_bytes()[:2] == b"\x1f\x8b"
    (tmp_path / "renamed.json").write_bytes((tmp_path / "g.json.gz").read_bytes())
    assert load_graph(tmp_path / "renamed.json") == g
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.json.gz", "renamed.json"]


def test_schema_rejects_what_the_writer_never_writes(schema):
    good = graph_to_dict(CompGraph(["a", "b"], ["a"], ["b"], out_bytes=[3, 0], compute_time={"cpu": [1.0, 2.0]}))
    validate(good, schema)
    bad_cases = [
        {**good, "version": 2},
        {**good, "format": "networkx"},
        {**good, "extra": 1},
        {k: v for k, v in good.items() if k != "edges"},
        {**good, "nodes": {**good["nodes"], "param_bytes": [1.5, 0]}},
        {**good, "nodes": {**good["nodes"], "flops": [-1, 0]}},
        {**good, "nodes": {**good["nodes"], "name": ["a", ""]}},
        {**good, "nodes": {**good["nodes"], "name": ["a", "b\x00"]}},
        {**good, "version": True},
        {**good, "nodes": {**good["nodes"], "colour": ["red", "blue"]}},
        {**good, "nodes": {k: v for k, v in good["nodes"].items() if k != "op"}},
        {**good, "nodes": {**good["nodes"], "compute_time": {"cpu": ["fast", 1]}}},
        {**good, "edges": {**good["edges"], "bytes": [-1]}},
    ]
    for bad in bad_cases:
        with pytest.raises(jsonschema.ValidationError):
            validate(bad, schema)


# ---------------------------------------------------------------------- errors


def test_malformed_json_names_file_and_position(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"format": "incsched.graph",\n "version": 1,\n "nodes": [}')
    with pytest.raises(FormatError, match=r"broken\.json: malformed JSON at line 3, column"):
        load_graph(path)


def test_corrupt_gzip(tmp_path):
    path = tmp_path / "broken.json.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}')[:-6])
    with pytest.raises(FormatError, match=r"broken\.json\.gz: not a readable gzip file"):
        load_graph(path)


def _write(tmp_path, obj, name="g.json"):
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return path


def _valid():
    return graph_to_dict(CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"]))


def test_wrong_format(tmp_path):
    with pytest.raises(FormatError, match=r"g\.json: not an incsched graph \(format is 'something', expected 'incsched.graph'\)"):
        load_graph(_write(tmp_path, {**_valid(), "format": "something"}))
    with pytest.raises(FormatError, match="format is 'list'"):
        load_graph(_write(tmp_path, [1, 2]))


def test_wrong_version(tmp_path):
    with pytest.raises(FormatError, match=r"g\.json: graph format version 7 is not supported \(expected 1\)"):
        load_graph(_write(tmp_path, {**_valid(), "version": 7}))
    with pytest.raises(FormatError, match="version None"):
        load_graph(_write(tmp_path, {k: v for k, v in _valid().items() if k != "version"}))


@pytest.mark.parametrize(
    "drop, message",
    [
        (("nodes",), "missing field 'nodes'"),
        (("edges",), "missing field 'edges'"),
        (("nodes", "name"), "missing field 'nodes.name'"),
        (("edges", "src"), "missing field 'edges.src'"),
        (("edges", "dst"), "missing field 'edges.dst'"),
    ],
)
def test_missing_fields(tmp_path, drop, message):
    data = _valid()
    if len(drop) == 1:
        del data[drop[0]]
    else:
        del data[drop[0]][drop[1]]
    with pytest.raises(FormatError, match=r"g\.json: " + message.replace(".", r"\.").replace("'", "'")):
        load_graph(_write(tmp_path, data))


def test_field_of_wrong_type(tmp_path):
    data = _valid()
    data["nodes"]["name"] = "abc"
    with pytest.raises(FormatError, match="field 'nodes.name' must be a list, got a string"):
        load_graph(_write(tmp_path, data))


def test_invalid_graph_errors_name_the_file(tmp_path):
    data = _valid()
    data["edges"] = {"src": ["a", "b", "c"], "dst": ["b", "c", "a"], "bytes": [0, 0, 0]}
    with pytest.raises(CycleError, match=r"g\.json: graph has a cycle through 3 nodes") as err:
        load_graph(_write(tmp_path, data))
    assert sorted(err.value.cycle) == ["a", "b", "c"]
    data = _valid()
    data["edges"]["dst"] = ["b", "nowhere"]
    with pytest.raises(GraphError, match=r"g\.json: .*unknown target node 'nowhere'"):
        load_graph(_write(tmp_path, data))


def test_save_refuses_other_extensions(tmp_path):
    with pytest.raises(FormatError, match=r"saved as \.json or \.json\.gz"):
        save_graph(CompGraph(["a"], [], []), tmp_path / "g.txt")
    with pytest.raises(FormatError, match="unknown graph file type"):
        load_graph(tmp_path / "g.txt")


# ---------------------------------------------------------------------- every wrong type is named


def _with(path: tuple, value):
    data = _valid()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("nodes", "compute_time"), [1, 2, 3], "field 'nodes.compute_time' must be an object, got a list"),
        (("nodes", "compute_time"), "fast", "field 'nodes.compute_time' must be an object, got a string"),
        (("nodes", "compute_time"), {"cpu": "fast"}, r"field nodes.compute_time\['cpu'\] must be a list, got str"),
        (("nodes", "flops"), 5, "field 'nodes.flops' must be a list, got a number"),
        (("nodes", "op"), "conv", "field 'nodes.op' must be a list, got a string"),
        (("nodes", "members"), 5, "field 'nodes.members' must be a list, got a number"),
        (("nodes", "members"), [["x"], "y", ["z"]], "field nodes.members of node 'b' must be a list of names, got str"),
        (("nodes", "param_bytes"), {"a": 1}, "field 'nodes.param_bytes' must be a list, got an object"),
        (("nodes", "name"), None, "field 'nodes.name' must be a list, got null"),
        (("edges", "bytes"), 4, "field 'edges.bytes' must be a list, got a number"),
        (("edges", "src"), "ab", "field 'edges.src' must be a list, got a string"),
        (("meta",), [1, 2], "field 'meta' must be an object, got a list"),
        (("name",), 5, "field 'name' must be a string, got a number"),
        (("name",), ["g"], "field 'name' must be a string, got a list"),
        (("version",), True, "graph format version True is not supported"),
        (("version",), 1.0, "graph format version 1.0 is not supported"),
        (("version",), "1", "graph format version '1' is not supported"),
        (("nodes", "name"), ["a\x00", "b", "c"], r"node name 'a\\x00' contains a NUL character"),
        (("nodes", "op"), ["x", "\ud800", "z"], "op kind '\\\\ud800' contains a lone surrogate"),
        (("name",), "g\x00", "graph name .* contains a NUL character"),
        (("nodes", "compute_time"), {"c\x00pu": [1, 2, 3]}, "compute_time device kind .* contains a NUL"),
        (("nodes", "param_bytes"), [1, 2.5, 3], r"nodes.param_bytes of node 'b' is 2.5; byte counts must be whole numbers"),
        (("nodes", "out_bytes"), [1, 2.0**60, 3], "nodes.out_bytes of node 'b' is 1.15.*e\\+18; byte counts must be whole"),
        (("edges", "bytes"), [1, 0.5], r"edges.bytes of entry 1 is 0.5"),
    ],
)
def test_wrong_field_types_are_named(tmp_path, path, value, message):
    # graph_from_dict on the parsed dict (a lone surrogate cannot be written to a file as UTF-8)
    with pytest.raises(FormatError, match=r"g\.json: " + message):
        graph_from_dict(_with(path, value), source="g.json")


def test_wrong_types_through_a_file_are_format_errors(tmp_path):
    for path, value in [(("nodes", "flops"), 5), (("meta",), [1]), (("nodes", "members"), 5), (("version",), True)]:
        with pytest.raises(FormatError, match=r"g\.json: "):
            load_graph(_write(tmp_path, _with(path, value)))


def test_whole_float_byte_counts_stay_exact(tmp_path):
    # One float in an integer column must not send the column through float64.
    big = 2**60 + 1
    g = load_graph(_write(tmp_path, _with(("nodes", "param_bytes"), [big, 1.0, 2])))
    assert g.param_bytes.dtype == np.int64 and int(g.param_bytes[0]) == big and g.param_bytes.tolist() == [big, 1, 2]


def test_zero_node_graph_round_trips(tmp_path):
    empty = CompGraph([], [], [])
    save_graph(empty, tmp_path / "e.json")
    assert load_graph(tmp_path / "e.json") == empty
