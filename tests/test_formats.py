"""GML (the ICML'24 peer form) and CSV tables: reading, writing, round trips, errors that say where."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incsched.errors import CycleError, FormatError, GraphError
from incsched.formats import load_graph
from incsched.formats.csv_tables import read_csv_tables, write_csv_tables
from incsched.formats.gml import parse_gml, read_gml, write_gml
from incsched.graph import CompGraph

ICML24 = Path(__file__).resolve().parents[2] / "shared/benchmarks/icml24"

SMALL_GML = """\
# a comment line
graph [
  directed 1
  comment "written by hand"
  node [
    id 10
    label "conv"
    parameter 4096
    graphics [ x 1.5 y -2.0 ]
  ]
  node [
    id 11
    parameter 0
  ]
  node [ id 12 label "out&amp;put" parameter 12 ]
  edge [
    source 10
    target 11
    name "0"
    parameter 300
  ]
  edge [ source 10 target 12 parameter 700 ]
  edge [ source 11 target 12 parameter 0 ]
]
"""


def write(tmp_path, text, name="g.gml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture
def sample_graph():
    return CompGraph(
        ["x", "conv 1", 'say "hi"', "naïve,op", "fc"],
        ["x", "x", "conv 1", 'say "hi"', "naïve,op"],
        ["conv 1", 'say "hi"', "naïve,op", "naïve,op", "fc"],
        op=["input", "conv2d", "relu", "add", "linear"],
        flops=[0.0, 2.5e9, 1e20, 1.0 / 3.0, 7.0],
        param_bytes=[0, 4096, 0, 0, 8192],
        out_bytes=[600, 800, 800, 800, 40],
        edge_bytes=[600, 600, 800, 0, 800],
        compute_time={"cpu": [1e-6, 0.25, 0.1, 0.0, 3.0], "cuda": [0.0, 1e-5, 1e-6, 1e-6, 2e-5]},
        name="sample",
    )


# ---------------------------------------------------------------------- GML


def test_small_gml(tmp_path):
    g = read_gml(write(tmp_path, SMALL_GML, "tiny.gml"))
    assert g.names == ("conv", "11", "out&put")  # label, else the id; entities unescaped
    assert g.param_bytes.tolist() == [4096, 0, 12]
    assert [(g.names[u], g.names[v]) for u, v in zip(g.src, g.dst)] == [
        ("conv", "11"),
        ("conv", "out&put"),
        ("11", "out&put"),
    ]
    assert g.edge_bytes.tolist() == [300, 700, 0]
    assert g.out_bytes.tolist() == [700, 0, 0]  # the largest outgoing edge
    assert g.name == "tiny" and g.meta["source_file"] == "tiny.gml"
    # networkx, an independent GML reader, agrees
    h = nx.read_gml(tmp_path / "tiny.gml", label="id")
    name_of = {10: "conv", 11: "11", 12: "out&put"}
    assert sorted((name_of[u], name_of[v], d["parameter"]) for u, v, d in h.edges(data=True)) == sorted(
        (g.names[u], g.names[v], int(b)) for u, v, b in zip(g.src, g.dst, g.edge_bytes)
    )
    assert h.nodes[12]["label"] == "out&put"


def test_gml_gz_through_load_graph(tmp_path):
    path = tmp_path / "tiny.gml.gz"
    path.write_bytes(gzip.compress(SMALL_GML.encode()))
    g = load_graph(path)
    assert g.n_nodes == 3 and g.name == "tiny"


def test_gml_edge_before_its_nodes(tmp_path):
    text = 'graph [ directed 1 edge [ source 2 target 1 parameter 5 ] node [ id 1 ] node [ id 2 ] ]'
    g = read_gml(write(tmp_path, text))
    assert g.names == ("1", "2") and g.src.tolist() == [1] and g.dst.tolist() == [0]


def test_gml_write_read_round_trip(tmp_path, sample_graph):
    path = tmp_path / "sample.gml"
    write_gml(sample_graph, path)
    back = read_gml(path)
    # GML carries no compute times, members or meta; everything else comes back
    assert back == sample_graph.replace(compute_time={}, meta=back.meta)
    h = nx.read_gml(path)  # networkx reads what we write
    assert list(h.nodes) == list(sample_graph.names)
    assert h.nodes["conv 1"]["parameter"] == 4096 and h.nodes["fc"]["op"] == "linear"
    assert h.edges['say "hi"', "naïve,op"]["parameter"] == 0
    assert h.nodes['say "hi"']["flops"] == 1e20


def test_gml_peer_form(tmp_path, sample_graph):
    path = tmp_path / "peer.gml.gz"
    write_gml(sample_graph, path, peer=True)
    h = nx.read_gml(gzip.open(path))
    # what the peer's scripts do: labels -> int, nodes indexed 0..n-1, read 'parameter'
    h = nx.relabel_nodes(h, {v: int(v) for v in h.nodes})
    assert sorted(h.nodes) == list(range(5))
    assert [h.nodes[i]["parameter"] for i in range(5)] == sample_graph.param_bytes.tolist()
    assert set(h.nodes[0]) == {"parameter"}
    back = read_gml(path)
    assert back.names == tuple(str(i) for i in range(5))
    assert np.array_equal(back.edge_bytes, sample_graph.edge_bytes)


def test_gml_write_is_deterministic(tmp_path, sample_graph):
    write_gml(sample_graph, tmp_path / "a.gml.gz")
    write_gml(sample_graph.replace(), tmp_path / "b.gml.gz")
    assert (tmp_path / "a.gml.gz").read_bytes() == (tmp_path / "b.gml.gz").read_bytes()


@pytest.mark.slow
@given(st.lists(st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), min_size=1, max_size=6), min_size=1, max_size=6, unique=True), st.data())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_gml_round_trip_any_names(tmp_path, names, data):
    n = len(names)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    chosen = data.draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs))) if pairs else []
    g = CompGraph(
        names,
        [names[i] for i, _ in chosen],
        [names[j] for _, j in chosen],
        op=data.draw(st.lists(st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=4), min_size=n, max_size=n)),
        flops=data.draw(st.lists(st.floats(0, 1e300, allow_nan=False), min_size=n, max_size=n)),
        param_bytes=data.draw(st.lists(st.integers(0, 2**40), min_size=n, max_size=n)),
        edge_bytes=data.draw(st.lists(st.integers(0, 2**40), min_size=len(chosen), max_size=len(chosen))),
        out_bytes=data.draw(st.lists(st.integers(0, 2**40), min_size=n, max_size=n)),
        name="any",
    )
    path = tmp_path / "any.gml"
    write_gml(g, path)
    back = read_gml(path)
    assert back == g.replace(meta=back.meta)


@pytest.mark.parametrize(
    "text, message",
    [
        ("graph [ directed 1 node [ id 0 ]", r"line 1: '\[' is never closed"),
        ("graph [ directed 1 ]\n]", r"line 2: unmatched '\]'"),
        ("graph [ directed 1\n  node [ id 0 label \"open ] ]", r"line 2: unterminated string"),
        ("graph [ directed 1\n\n  node [ id 0 parameter 12x ] ]", r"line 3: expected a number or a quoted string, found '12x'"),
        ("graph [ directed 1\n  1node [ id 0 ] ]", r"line 2: expected a key, found '1node'"),
        ("graph [ directed 1\n  node [ id 0 label ] ]", r"line 2: key 'label' has no value"),
        ("graph [ directed 1\n  node [ label \"a\" ] ]", r"line 2: node has no integer 'id'"),
        ("graph [ directed 1\n node [ id 0 ]\n node [ id 0 ] ]", r"line 3: duplicate node id 0"),
        ("graph [ directed 1\n node [ id 0 ]\n edge [ source 0 target 9 ] ]", r"line 3: edge target 9 is not the id of any node"),
        ("graph [ directed 1\n node [ id 0 ]\n edge [ target 0 ] ]", r"line 3: edge has no integer 'source'"),
        ("graph [ directed 1\n node [ id 0 parameter -4 ] ]", r"line 2: node '0': 'parameter' must be a non-negative integer"),
        ("graph [ directed 1\n node [ id 0 parameter 1.5 ] ]", r"line 2: node '0': 'parameter' must be a non-negative integer"),
        ("graph [ directed 1\n node [ id 0 id 1 ] ]", r"line 2: node has 'id' twice"),
        ("graph [ node [ id 0 ] ]", r"not marked 'directed 1'"),
        ("graph [ directed 0 node [ id 0 ] ]", r"not marked 'directed 1'"),
        ("node [ id 0 ]", r"expected exactly one 'graph \[ ... \]' list, found 0"),
        ("graph [ directed 1\n node [ id 0 parameter 9223372036854775808 ] ]", r"line 2: node '0': 'parameter' is 9223372036854775808, beyond a 64-bit"),
        ("graph [ directed 1\n node [ id 0 ] node [ id 1 ]\n edge [ source 0 target 1 parameter 99999999999999999999 ] ]", r"line 3: edge: 'parameter' is 9+, beyond"),
        ("graph [ directed 1\n node [ id 0 out_bytes 18446744073709551616 ] ]", r"line 2: node '0': 'out_bytes' is 18446744073709551616, beyond"),
        ("graph [ directed 1\n node [ id 0 parameter " + "9" * 5000 + " ] ]", r"line 2: a number of 5,000 characters, more than the 4300 digits"),
        ("graph [ directed 1\n node [ id 0 label [ a 1 ] ] ]", r"line 2: node 0: 'label' must be a string or a number, got a list"),
        ("graph [ directed 1\n node [ id 0 op [ a 1 ] ] ]", r"line 2: node '0': 'op' must be a string or a number, got a list"),
        ("graph [ directed 1\n node [ id 0 flops [ a 1 ] ] ]", r"line 2: node '0': 'flops' must be a number, got a list"),
        ("graph [ directed 1\n node [ id 0 flops \"many\" ] ]", r"line 2: node '0': 'flops' must be a number, got str"),
        ("graph [ directed 1\n node [ id 0 flops " + "9" * 400 + " ] ]", r"line 2: node '0': 'flops' is an integer of 400 digits, too large for a float64"),
        ("graph [ directed 1\n node [ id 0 label \"a&#0;b\" ] ]", r"line 2: node 0: 'label' 'a\\x00b' contains a NUL character"),
        ("graph [ directed 1\n node [ id 0 label \"&#xD800;\" ] ]", r"line 2: node 0: 'label' '\\ud800' contains a lone surrogate"),
        ("", r"expected exactly one 'graph"),
    ],
)
def test_gml_errors_name_file_and_line(tmp_path, text, message):
    with pytest.raises(FormatError, match=r"bad\.gml.*" + message):
        read_gml(write(tmp_path, text, "bad.gml"))


def test_gml_graph_errors_name_the_file(tmp_path):
    text = "graph [ directed 1 node [ id 0 ] node [ id 1 ] edge [ source 0 target 1 ] edge [ source 1 target 0 ] ]"
    with pytest.raises(CycleError, match=r"cyc\.gml: graph has a cycle") as err:
        read_gml(write(tmp_path, text, "cyc.gml"))
    assert sorted(err.value.cycle) == ["0", "1"]
    text = 'graph [ directed 1 node [ id 0 label "a" ] node [ id 1 label "a" ] ]'
    with pytest.raises(GraphError, match=r"dup\.gml: duplicate node name 'a'"):
        read_gml(write(tmp_path, text, "dup.gml"))
    text = "graph [ directed 1 node [ id 0 ] node [ id 1 ] edge [ source 0 target 1 ] edge [ source 0 target 1 ] ]"
    with pytest.raises(GraphError, match=r"multi\.gml: duplicate edge"):
        read_gml(write(tmp_path, text, "multi.gml"))


def test_gml_numeric_labels_are_text(tmp_path):
    # The peer's files label nodes with numbers; they become names, lists do not (above).
    g = read_gml(write(tmp_path, "graph [ directed 1 node [ id 0 label 7 ] node [ id 1 label 2.5 ] ]"))
    assert g.names == ("7", "2.5")


def test_gml_zero_nodes_is_an_empty_graph(tmp_path):
    assert read_gml(write(tmp_path, "graph [ directed 1 ]")).n_nodes == 0


def test_csv_long_numbers_and_nul_are_named(tmp_path):
    nodes, edges = tmp_path / "n.csv", tmp_path / "e.csv"
    edges.write_text("src,dst\n")
    nodes.write_text("name,param_bytes\na," + "9" * 5000 + "\n")
    with pytest.raises(FormatError, match=r"n\.csv, line 2, column 2 \(param_bytes\)"):
        read_csv_tables(nodes, edges)
    nodes.write_bytes(b"name\na\x00b\n")
    with pytest.raises(FormatError, match=r"n\.csv, line 2: contains a NUL character"):
        read_csv_tables(nodes, edges)
    nodes.write_text("name\n")
    assert read_csv_tables(nodes, edges).n_nodes == 0


def test_parse_gml_values():
    items = parse_gml('a 1 b -2 c 3.5 d 1.0E-3 e "x" f [ g 1 ] h .5')
    assert [(k, v) for k, v, _ in items[:5]] == [("a", 1), ("b", -2), ("c", 3.5), ("d", 1e-3), ("e", "x")]
    assert items[5][0] == "f" and [(k, v) for k, v, _ in items[5][1]] == [("g", 1)]
    assert items[6][1] == 0.5


# The README's table (independent of this code): node and edge counts per family, and the longest
# path (in edges) for the first file of each family where it gives one.
README_TABLE = {
    "rand_graph_1000": ((929, 949), (2730, 2790), 14),
    "rand_graph_sparse_1000": ((810, 829), (946, 1070), 8),
    "rand_graph_5000": ((4713, 4741), (13872, 14050), 17),
    "rand_graph_sparse_5000": ((4063, 4087), (4973, 5083), None),
    "rand_graph_10000": ((9396, 9447), (27363, 27786), 19),
    "rand_graph_sparse_10000": ((8058, 8193), (9805, 10079), None),
}
ICML24_FILES = sorted(ICML24.glob("*.gml")) if ICML24.is_dir() else []


@pytest.mark.slow
@pytest.mark.skipif(not ICML24_FILES, reason=f"ICML'24 peer files not found at {ICML24}")
@pytest.mark.parametrize("path", ICML24_FILES, ids=lambda p: p.stem)
def test_icml24_files_match_readme_table(path):
    family, number = re.fullmatch(r"(.*)_(\d+)", path.stem).groups()
    (n_lo, n_hi), (m_lo, m_hi), longest = README_TABLE[family]
    g = read_gml(path)
    assert n_lo <= g.n_nodes <= n_hi
    assert m_lo <= g.n_edges <= m_hi
    if longest is not None and number == "1":
        assert g.longest_path()[0] == longest == g.depth - 1
    assert g.name == path.stem and g.meta["source_file"] == path.name
    # out_bytes is the largest outgoing edge's bytes, and every edge byte count is the peer's 0..50000
    largest = np.zeros(g.n_nodes, dtype=np.int64)
    np.maximum.at(largest, g.src, g.edge_bytes)
    assert np.array_equal(g.out_bytes, largest)
    assert g.edge_bytes.max() <= 50000


@pytest.mark.slow
@pytest.mark.skipif(not ICML24_FILES, reason=f"ICML'24 peer files not found at {ICML24}")
@pytest.mark.parametrize("stem", ["rand_graph_1000_1", "rand_graph_sparse_1000_2"])
def test_icml24_agrees_with_networkx(stem):
    path = ICML24 / f"{stem}.gml"
    g = read_gml(path)
    h = nx.read_gml(path)
    assert list(g.names) == list(h.nodes)
    assert g.param_bytes.tolist() == [h.nodes[v]["parameter"] for v in h.nodes]
    mine = sorted((g.names[u], g.names[v], int(b)) for u, v, b in zip(g.src, g.dst, g.edge_bytes))
    assert mine == sorted((u, v, d["parameter"]) for u, v, d in h.edges(data=True))


# ---------------------------------------------------------------------- CSV tables


def test_csv_round_trip(tmp_path, sample_graph):
    nodes, edges = tmp_path / "sample_nodes.csv", tmp_path / "sample_edges.csv"
    write_csv_tables(sample_graph, nodes, edges)
    back = read_csv_tables(nodes, edges)
    assert back.name == "sample"
    assert back == sample_graph.replace(meta=back.meta)
    assert back.meta["source_file"] == "sample_nodes.csv" and back.meta["edges_file"] == "sample_edges.csv"
    assert nodes.read_bytes().split(b"\r\n")[0] == b"name,op,flops,param_bytes,out_bytes,time_cpu,time_cuda"


# Names are any text the readers accept: no NUL, no lone surrogates (both refused as names).
_NAME_TEXT = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), min_size=1, max_size=6)


@pytest.mark.slow
@given(st.lists(_NAME_TEXT.map(str.strip).filter(bool), min_size=1, max_size=6, unique=True), st.data())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_csv_round_trip_any_values(tmp_path, names, data):
    n = len(names)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    chosen = data.draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs))) if pairs else []
    reals = st.floats(0, 1e300, allow_nan=False)
    g = CompGraph(
        names,
        [names[i] for i, _ in chosen],
        [names[j] for _, j in chosen],
        op=data.draw(st.lists(_NAME_TEXT.map(str.strip).filter(bool), min_size=n, max_size=n)),
        flops=data.draw(st.lists(reals, min_size=n, max_size=n)),
        param_bytes=data.draw(st.lists(st.integers(0, 2**53), min_size=n, max_size=n)),
        out_bytes=data.draw(st.lists(st.integers(0, 2**53), min_size=n, max_size=n)),
        edge_bytes=data.draw(st.lists(st.integers(0, 2**53), min_size=len(chosen), max_size=len(chosen))),
        compute_time={"cpu": data.draw(st.lists(reals, min_size=n, max_size=n))},
        name="t",
    )
    write_csv_tables(g, tmp_path / "n.csv", tmp_path / "e.csv")
    back = read_csv_tables(tmp_path / "n.csv", tmp_path / "e.csv", name="t")
    assert back == g.replace(meta=back.meta)


def test_csv_minimal_tables_use_defaults(tmp_path):
    (tmp_path / "n.csv").write_text("\ufeffname\na\nb\n\nc\n")  # BOM and a blank line
    (tmp_path / "e.csv").write_text("dst,src\nb,a\nc,b\n")  # columns in any order
    g = read_csv_tables(tmp_path / "n.csv", tmp_path / "e.csv")
    assert g.names == ("a", "b", "c") and g.op == ("op",) * 3
    assert g.src.tolist() == [0, 1] and g.dst.tolist() == [1, 2]
    assert g.flops.tolist() == [0, 0, 0] and g.compute_time == {}


def test_csv_edge_bytes_default_to_out_bytes(tmp_path):
    (tmp_path / "n.csv").write_text("name,out_bytes\na,1e3\nb,5\n")
    (tmp_path / "e.csv").write_text("src,dst\na,b\n")
    g = read_csv_tables(tmp_path / "n.csv", tmp_path / "e.csv")
    assert g.out_bytes.tolist() == [1000, 5] and g.edge_bytes.tolist() == [1000]


NODES_OK = "name,flops\na,1\nb,2\n"
EDGES_OK = "src,dst\na,b\n"


@pytest.mark.parametrize(
    "nodes, edges, where, message",
    [
        ("", EDGES_OK, "n.csv", r"empty file"),
        ("\n\n", EDGES_OK, "n.csv", r"empty file"),
        (NODES_OK, "", "e.csv", r"empty file"),
        ("op,flops\nx,1\n", EDGES_OK, "n.csv", r"line 1: missing header column 'name'"),
        (NODES_OK, "src,bytes\na,1\n", "e.csv", r"line 1: missing header column 'dst'"),
        ("name,flops,colour\na,1,red\n", EDGES_OK, "n.csv", r"line 1, column 3: unknown column 'colour'"),
        ("name,time_\na,1\n", EDGES_OK, "n.csv", r"line 1, column 2: unknown column 'time_'"),
        ("name,flops,flops\na,1,2\n", EDGES_OK, "n.csv", r"line 1, column 3: column 'flops' appears twice"),
        ("name,flops\na,1\nb,lots\n", EDGES_OK, "n.csv", r"line 3, column 2 \(flops\): 'lots' is not a number"),
        ("name,flops\na,1\nb,-2\n", EDGES_OK, "n.csv", r"line 3, column 2 \(flops\): '-2' must be finite and non-negative"),
        ("name,flops\na,nan\nb,1\n", EDGES_OK, "n.csv", r"line 2, column 2 \(flops\): 'nan' must be finite"),
        ("name,time_cpu\na,inf\nb,1\n", EDGES_OK, "n.csv", r"line 2, column 2 \(time_cpu\): 'inf' must be finite"),
        ("name,param_bytes\na,1.5\nb,1\n", EDGES_OK, "n.csv", r"line 2, column 2 \(param_bytes\): '1.5' is not a whole number"),
        ("name,param_bytes\na,1\nb,1e30\n", EDGES_OK, "n.csv", r"line 3, column 2 \(param_bytes\): '1e30' is too large"),
        ("name,flops\na,1\nb\n", EDGES_OK, "n.csv", r"line 3: 1 cells, but the header has 2 columns"),
        ("name,op\na,\nb,x\n", EDGES_OK, "n.csv", r"line 2, column 2 \(op\): empty value"),
        ("name\na\nb\na\n", EDGES_OK, "n.csv", r"line 4, column 1 \(name\): duplicate node name 'a' \(first on line 2\)"),
        (NODES_OK, "src,dst\na,b\nb,zz\n", "e.csv", r"line 3, column 2 \(dst\): unknown node 'zz'"),
        (NODES_OK, "src,dst,bytes\na,b,-1\n", "e.csv", r"line 2, column 3 \(bytes\): '-1' must be finite and non-negative"),
        (NODES_OK, 'src,dst\na,"b\n', "e.csv", r"malformed CSV"),
    ],
)
def test_csv_errors_name_file_line_and_column(tmp_path, nodes, edges, where, message):
    (tmp_path / "n.csv").write_text(nodes)
    (tmp_path / "e.csv").write_text(edges)
    with pytest.raises(FormatError, match=re.escape(str(tmp_path / where)) + ".*" + message):
        read_csv_tables(tmp_path / "n.csv", tmp_path / "e.csv")


def test_csv_structural_errors_name_the_edge_file(tmp_path):
    (tmp_path / "n.csv").write_text("name\na\nb\nc\n")
    (tmp_path / "e.csv").write_text("src,dst\na,b\nb,c\nc,a\n")
    with pytest.raises(CycleError, match=r"e\.csv: graph has a cycle through 3 nodes") as err:
        read_csv_tables(tmp_path / "n.csv", tmp_path / "e.csv")
    assert sorted(err.value.cycle) == ["a", "b", "c"]
    (tmp_path / "e.csv").write_text("src,dst\na,a\n")
    with pytest.raises(GraphError, match=r"e\.csv: self-loop on node 'a'"):
        read_csv_tables(tmp_path / "n.csv", tmp_path / "e.csv")
    (tmp_path / "e.csv").write_text("src,dst\na,b\na,b\n")
    with pytest.raises(GraphError, match=r"e\.csv: duplicate edge 'a' -> 'b'"):
        read_csv_tables(tmp_path / "n.csv", tmp_path / "e.csv")


def test_csv_not_utf8(tmp_path):
    (tmp_path / "n.csv").write_bytes(b"name\n\xff\xfe\n")
    (tmp_path / "e.csv").write_text(EDGES_OK)
    with pytest.raises(FormatError, match=r"n\.csv: not a UTF-8 text file"):
        read_csv_tables(tmp_path / "n.csv", tmp_path / "e.csv")
