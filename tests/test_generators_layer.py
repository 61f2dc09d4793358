"""`transformer_layer`: a decoder layer split by tokens as well as heads and MLP tiles."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from incsched.errors import LimitError
from incsched.generators import check_arguments, transformer_block, transformer_layer
from incsched.limits import InputLimits
from incsched.problems.decompose import cut_nodes
from incsched.problems.placement import PlacementProblem


@pytest.mark.parametrize("kw", [{}, {"heads": 1, "ffn_tiles": 1, "seq_tiles": 3}, {"heads": 4, "seq_tiles": 3, "ffn_tiles": 6},
                                {"seq": 10, "seq_tiles": 3, "heads": 2, "hidden": 64}])
def test_counts_match_the_size_check(kw):
    g = transformer_layer(**kw)
    assert (g.n_nodes, g.n_edges) == check_arguments("transformer_layer", kw)
    assert nx.is_directed_acyclic_graph(g.to_networkx())
    assert g.n_edges == len(set(zip(g.src.tolist(), g.dst.tolist())))


def test_defaults_and_causal_reads():
    g = transformer_layer()
    assert g.n_nodes == 2 * (7 * 8 + 5 * 8 + 7) == 206
    pred = lambda name: sorted(g.names[u] for u in g.predecessors(g.names.index(name)))  # noqa: E731
    assert pred("T0.h3.scores") == ["T0.h3.k", "T0.h3.q"]
    assert pred("T1.h3.scores") == ["T0.h3.k", "T1.h3.k", "T1.h3.q"]
    assert pred("T1.h3.attn") == ["T0.h3.v", "T1.h3.softmax", "T1.h3.v"]
    # Token tiles meet only in attention: nothing every other op precedes or follows.
    assert cut_nodes(PlacementProblem.identical(g, 4)) == []


def test_one_token_tile_is_a_block():
    layer, block = transformer_layer(seq_tiles=1), transformer_block(n_blocks=1)
    for attr in ("flops", "out_bytes", "param_bytes", "src", "dst"):
        assert np.array_equal(getattr(layer, attr), getattr(block, attr)), attr
    assert layer.op == block.op


def test_flops_split_by_tokens():
    batch, seq, hidden, heads, dt = 2, 96, 256, 4, 2
    whole = transformer_layer(batch, seq, hidden, heads, 1, dtype_bytes=dt)
    tiled = transformer_layer(batch, seq, hidden, heads, 3, dtype_bytes=dt)
    mm = lambda g: g.flops[np.array(g.op) == "matmul"].sum()  # noqa: E731
    assert mm(tiled) == pytest.approx(mm(whole))  # projections are linear in the tokens
    # Causal attention: tile i of 32 queries sees 32 * (i + 1) keys, so 6/9 of the full score matrix.
    bmm = lambda g: g.flops[np.array(g.op) == "bmm"].sum()  # noqa: E731
    assert bmm(tiled) == pytest.approx(bmm(whole) * 6 / 9)
    # Weights: the layer's, once; each read by its op in every token tile, which needs it on its device.
    assert tiled.total_param_bytes == whole.total_param_bytes and tiled.param_bytes.sum() == 0
    assert all(len(w.readers) == 3 for w in tiled.shared_weights)
    q = [tiled.names.index(f"T{i}.h0.q") for i in range(3)]
    assert np.all(tiled.node_weight_bytes[q] == whole.node_weight_bytes[whole.names.index("T0.h0.q")])
    # Same bytes read per op, so the roofline charges a tile's projection a third of the whole's flops plus the whole weight.
    assert np.all(tiled.time("cpu")[q] < whole.time("cpu")[whole.names.index("T0.h0.q")])


def test_bad_arguments():
    with pytest.raises(ValueError, match="seq_tiles .* cannot exceed seq"):
        transformer_layer(seq=4, seq_tiles=5)
    with pytest.raises(ValueError, match="not divisible by heads"):
        transformer_layer(hidden=100, heads=8)
    with pytest.raises(ValueError, match="seq_tiles must be a positive integer"):
        transformer_layer(seq_tiles=0)
    with pytest.raises(ValueError, match="jitter"):
        transformer_layer(jitter=-1)
    with pytest.raises(LimitError):
        check_arguments("transformer_layer", {"seq_tiles": 4}, limits=InputLimits(max_nodes=100))
    noisy = transformer_layer(jitter=0.2, seed=1)
    assert noisy == transformer_layer(jitter=0.2, seed=1) and noisy != transformer_layer(jitter=0.2, seed=2)
