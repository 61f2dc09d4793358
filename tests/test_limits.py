"""Input limits: oversized, over-nested and over-long inputs are refused quickly, with bounded
memory, naming the limit and the variable that raises it; the limits are settable."""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc
import zlib

import pytest

from incsched import CompGraph, load_graph, save_graph
from incsched.errors import FormatError, LimitError
from incsched.formats.csv_tables import read_csv_tables, write_csv_tables
from incsched.formats.gml import read_gml, write_gml
from incsched.jsonio import json_depth, read_json, read_limited
from incsched.limits import InputLimits, input_limits


@pytest.fixture
def chain():
    return CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], param_bytes=[1, 2, 3], out_bytes=[4, 5, 0])


def _gzip_of_zeros(path, n_bytes: int) -> None:
    """A gzip of ``n_bytes`` zero bytes, written without ever holding them in memory."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"0" * (1 << 20)
    with open(path, "wb") as fh:
        for _ in range(n_bytes >> 20):
            fh.write(comp.compress(block))
        fh.write(comp.flush())


def test_defaults_and_environment(monkeypatch):
    assert input_limits() == InputLimits()
    assert InputLimits().max_file_bytes == 256 << 20 and InputLimits().max_nodes == 2_000_000
    monkeypatch.setenv("INCSCHED_MAX_NODES", "1_000")
    monkeypatch.setenv("INCSCHED_MAX_FILE_BYTES", "4096")
    lim = input_limits()
    assert lim.max_nodes == 1000 and lim.max_file_bytes == 4096 and lim.max_edges == InputLimits().max_edges
    assert input_limits(max_nodes=7).max_nodes == 7  # keyword arguments win over the environment
    monkeypatch.setenv("INCSCHED_MAX_NODES", "lots")
    with pytest.raises(LimitError, match="INCSCHED_MAX_NODES='lots' is not a whole number"):
        input_limits()


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_limits_must_be_positive_integers(bad):
    with pytest.raises(LimitError, match="max_nodes must be a positive integer"):
        InputLimits(max_nodes=bad)
    with pytest.raises(LimitError, match="at most 900"):
        InputLimits(max_json_depth=5000)


@pytest.mark.slow  # asserts a time: refused within 2 s
def test_gzip_bomb_is_refused_quickly_with_bounded_memory(tmp_path):
    bomb = tmp_path / "bomb.json.gz"
    _gzip_of_zeros(bomb, 64 << 20)  # 64 MiB of zeros in about 64 KiB
    assert bomb.stat().st_size < 1 << 20
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(LimitError, match=r"bomb\.json\.gz: larger than the limit of 1,048,576 bytes once decompressed \(set INCSCHED_MAX_FILE_BYTES"):
        load_graph(bomb, limits=InputLimits(max_file_bytes=1 << 20))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert time.perf_counter() - started < 2.0
    assert peak < 16 << 20  # chunks of the output, never the whole expansion


def test_gml_bomb_is_refused(tmp_path, monkeypatch):
    bomb = tmp_path / "bomb.gml.gz"
    _gzip_of_zeros(bomb, 8 << 20)
    monkeypatch.setenv("INCSCHED_MAX_FILE_BYTES", str(1 << 20))
    with pytest.raises(LimitError, match="once decompressed"):
        load_graph(bomb)


def test_plain_file_over_the_limit(tmp_path, chain):
    path = tmp_path / "g.json"
    save_graph(chain, path)
    size = path.stat().st_size
    assert load_graph(path, limits=InputLimits(max_file_bytes=size)) == chain  # exactly at the limit is fine
    with pytest.raises(LimitError, match=f"larger than the limit of {size - 1:,} bytes"):
        load_graph(path, limits=InputLimits(max_file_bytes=size - 1))


def test_multi_member_gzip_and_zero_padding_read_like_gzip(tmp_path):
    data = b'{"a": [1, 2, 3], "b": "x"}'
    path = tmp_path / "m.json.gz"
    path.write_bytes(gzip.compress(data[:10]) + gzip.compress(data[10:]) + b"\0" * 16)
    assert read_limited(path, 1000) == data
    path.write_bytes(gzip.compress(data) + b"garbage")
    with pytest.raises(FormatError, match="not a readable gzip file"):
        read_limited(path, 1000)


@pytest.mark.parametrize("fmt", ["json", "gml", "csv"])
def test_node_and_edge_counts_are_limited_in_every_format(tmp_path, chain, fmt):
    if fmt == "csv":
        nodes, edges = tmp_path / "n.csv", tmp_path / "e.csv"
        write_csv_tables(chain, nodes, edges)

        def read(lim):
            return read_csv_tables(nodes, edges, limits=lim)
    else:
        path = tmp_path / f"g.{fmt}"
        (save_graph if fmt == "json" else write_gml)(chain, path)

        def read(lim):
            return load_graph(path, limits=lim)

    assert read(InputLimits(max_nodes=3, max_edges=2)).n_nodes == 3
    with pytest.raises(LimitError, match="3 nodes, more than the limit of 2 .*INCSCHED_MAX_NODES"):
        read(InputLimits(max_nodes=2))
    with pytest.raises(LimitError, match="2 edges, more than the limit of 1 .*INCSCHED_MAX_EDGES"):
        read(InputLimits(max_edges=1))


def test_gml_node_count_is_checked_before_parsing(tmp_path):
    # Strings and comments that look like nodes do not count; real ones are counted before the
    # (ten-times-the-file) parse.
    path = tmp_path / "g.gml"
    path.write_text('graph [ directed 1 # node [ id 9 ]\n node [ id 0 label "node [" ] node [ id 1 ] ]')
    assert read_gml(path, limits=InputLimits(max_nodes=2)).n_nodes == 2
    with pytest.raises(LimitError, match="2 nodes"):
        read_gml(path, limits=InputLimits(max_nodes=1))


def test_json_nesting_is_limited_before_parsing(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"meta": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(LimitError, match=r"deep\.json: JSON nested 100001 levels deep, more than the limit of 100 \(set INCSCHED_MAX_JSON_DEPTH"):
        read_json(path)
    path.write_text('{"a": [[["x"]]]}')
    assert read_json(path, limits=InputLimits(max_json_depth=4)) == {"a": [[["x"]]]}
    with pytest.raises(LimitError, match="nested 4 levels"):
        read_json(path, limits=InputLimits(max_json_depth=3))


def test_json_depth_ignores_brackets_in_strings():
    text = json.dumps({"names": ["[[[[", "{{{{", 'say "[[" \\ ]'], "x": [[1]]}).encode()
    assert json_depth(text, 1) == 3
    assert json_depth(b"[[]]", 10) == 0  # fast path: too few brackets to pass the limit


def test_json_number_of_more_than_4300_digits(tmp_path):
    path = tmp_path / "big.json"
    path.write_text('{"x": ' + "7" * 5000 + "}")
    with pytest.raises(FormatError, match=r"big\.json: a number in the file is too long .*4300 digits"):
        read_json(path)


def test_json_lone_surrogate(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"x": ["ok", "\\ud800"]}')
    with pytest.raises(FormatError, match="lone surrogate"):
        read_json(path)
    path.write_text('{"x": "\\ud83d\\ude00"}')  # a proper pair is text
    assert read_json(path) == {"x": "\U0001F600"}


def test_directory_and_missing_file_are_os_errors(tmp_path):
    (tmp_path / "sub.json").mkdir()
    with pytest.raises(IsADirectoryError):
        load_graph(tmp_path / "sub.json")
    with pytest.raises(FileNotFoundError):
        load_graph(tmp_path / "missing.json")


# ---------------------------------------------------------------------- placement transfer tables (issue 24, item 12)


def _chain(n_edges: int):
    from incsched.graph import CompGraph

    names = [f"v{i}" for i in range(n_edges + 1)]
    return CompGraph(names, names[:-1], names[1:], out_bytes=[8] * len(names), compute_time={"cpu": [1e-3] * len(names)})


def test_a_transfer_table_past_the_limit_is_refused_before_it_is_built(monkeypatch):
    # 5,197 edges on 256 devices: a 2.7 GB int64 table (and float64 temporaries) died under ulimit -v
    import resource
    import time

    from incsched.problems import PlacementProblem

    g = _chain(5197)
    before, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    with pytest.raises(LimitError) as err:
        PlacementProblem.identical(g, 256)
    assert time.perf_counter() - start < 2 and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB
    assert str(err.value) == (
        "placement problem for graph 'graph': its transfer table of 5,197 edges x 256 x 256 devices needs "
        "2,724,724,736 bytes, more than the limit of 1,073,741,824 (set INCSCHED_MAX_TRANSFER_TABLE_BYTES to raise it, "
        "or use fewer devices)"
    )
    assert PlacementProblem.identical(g, 8).transfer_ticks().shape == (5197, 8, 8)  # 2.7 MB: fine
    monkeypatch.setenv("INCSCHED_MAX_TRANSFER_TABLE_BYTES", str(8 * 5197 * 64 - 1))
    with pytest.raises(LimitError, match="5,197 edges x 8 x 8 devices"):
        PlacementProblem.identical(g, 8)
    monkeypatch.setenv("INCSCHED_MAX_TRANSFER_TABLE_BYTES", str(8 * 5197 * 64))
    assert PlacementProblem.identical(g, 8).n_devices == 8  # exactly at the limit is fine


def test_the_transfer_table_limit_applies_to_problem_files(tmp_path, monkeypatch):
    from incsched.problems import PlacementProblem

    path = tmp_path / "p.json"
    PlacementProblem.identical(_chain(10), 4).save(path)
    monkeypatch.setenv("INCSCHED_MAX_TRANSFER_TABLE_BYTES", "100")
    with pytest.raises(LimitError, match="needs 1,280 bytes, more than the limit of 100"):
        PlacementProblem.load(path)
