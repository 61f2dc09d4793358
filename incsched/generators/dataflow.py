"""Tiled dataflow graphs of the shapes DOPPLER evaluates placement on: chained matmuls, FFNNs,
Llama-style transformer blocks, and a transformer layer tiled along the tokens as well.

Each large operation is split into tiles (as DOPPLER's einsum decomposition does), which gives
graphs of about 100-300 ops with real parallelism. Flops, output bytes and parameter bytes follow
from the tensor shapes; compute times per device kind come from the roofline in
`incsched.graph.cost_model` (optionally jittered, to look measured). `bandwidth_for_comm_ratio` picks the
link bandwidth that makes transfers cost a given multiple of compute, e.g. DOPPLER's "4x".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from numbers import Integral

import numpy as np

from ..errors import GraphError
from ..graph import CompGraph, SharedWeight
from .arguments import MAX_DIMENSION, check_size, names, real, whole

__all__ = ["chained_matmul", "ffnn", "transformer_block", "transformer_layer", "bandwidth_for_comm_ratio"]


@dataclass
class _Builder:
    """Accumulates ops and their data dependencies; edges carry the producer's output bytes."""

    names: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    flops: list[float] = field(default_factory=list)
    params: list[int] = field(default_factory=list)
    outs: list[int] = field(default_factory=list)
    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    shared: list[SharedWeight] = field(default_factory=list)

    def add(self, name: str, op: str, inputs: Sequence[int], *, flops: float, out: int, params: int = 0) -> int:
        v = len(self.names)
        self.names.append(name)
        self.ops.append(op)
        self.flops.append(float(flops))
        self.params.append(int(params))
        self.outs.append(int(out))
        for u in inputs:
            self.src.append(u)
            self.dst.append(v)
        return v

    def build(self, name: str, meta: dict, kinds: Sequence[str], jitter: float, seed: int) -> CompGraph:
        g = CompGraph(
            self.names,
            np.asarray(self.src, dtype=np.int64),
            np.asarray(self.dst, dtype=np.int64),
            op=self.ops,
            flops=self.flops,
            param_bytes=self.params,
            out_bytes=self.outs,
            shared_weights=self.shared,
            name=name,
            meta={**meta, "compute_time": "roofline" + (f" x lognormal(0, {jitter})" if jitter else ""), "seed": seed,
                  "costs": _synthetic_costs(kinds, jitter)},
        )
        return _with_times(g, kinds, jitter, seed)


def _synthetic_costs(kinds: Sequence[str], jitter: float) -> dict:
    """``meta["costs"]`` (`incsched.graph.cost_model`): bytes from the tile shapes, times from the roofline."""
    spread = f" x lognormal(0, {jitter})" if jitter else ""
    return {"bytes": "synthetic (tile shapes of the dataflow generator)",
            "times": {kind: {"source": "synthetic", "how": f"{kind} roofline{spread}"} for kind in kinds}}


def _with_times(g: CompGraph, kinds: Sequence[str], jitter: float, seed: int) -> CompGraph:
    rng = np.random.default_rng(seed)
    times = {}
    for kind in kinds:
        t = g.time(kind)  # no measured column yet, so this is the roofline estimate
        if jitter:
            t = t * rng.lognormal(0.0, jitter, size=g.n_nodes)
        times[kind] = t
    return g.replace(compute_time=times) if times else g


def _check_positive(**values: int) -> None:
    for key, v in values.items():
        if isinstance(v, bool) or not isinstance(v, Integral) or not 1 <= v <= MAX_DIMENSION:
            raise ValueError(f"{key} must be a positive integer (at most 2**62), got {v!r:.80}")


def _check_common(kinds, jitter, seed) -> None:
    """The arguments every dataflow generator takes: device kinds, noise, seed."""
    names("kinds", kinds)
    real("jitter", jitter, 0.0)
    whole("seed", seed, low=0, high=2**128)


def _chained_matmul_size(n_matrices, size, tiles, dtype_bytes, kinds, jitter, seed) -> tuple[int, int]:
    _check_positive(n_matrices=n_matrices, size=size, tiles=tiles, dtype_bytes=dtype_bytes)
    _check_common(kinds, jitter, seed)
    if n_matrices < 2:
        raise ValueError(f"a chain needs at least 2 matrices, got {n_matrices}")
    if tiles > size:
        raise ValueError(f"tiles ({tiles}) cannot exceed size ({size})")
    t = tiles
    sums = t * t if t > 1 else 0  # a reduction per output tile, when the inner dimension is split
    return n_matrices * t * t + (n_matrices - 1) * (t**3 + sums), (n_matrices - 1) * (2 * t**3 + sums * t)


def _ffnn_size(n_layers, batch, hidden, tiles, dtype_bytes, kinds, jitter, seed) -> tuple[int, int]:
    _check_positive(n_layers=n_layers, batch=batch, hidden=hidden, tiles=tiles, dtype_bytes=dtype_bytes)
    _check_common(kinds, jitter, seed)
    if tiles > hidden:
        raise ValueError(f"tiles ({tiles}) cannot exceed hidden ({hidden})")
    t = tiles
    sums = t if t > 1 else 0
    return t + n_layers * (t * t + sums + t), n_layers * (t * t + sums * t + t)


def _transformer_block_size(n_blocks, batch, seq, hidden, heads, ffn_hidden, ffn_tiles, dtype_bytes, kinds, jitter,
                            seed) -> tuple[int, int]:
    ffn_tiles = heads if ffn_tiles is None else ffn_tiles
    _check_positive(n_blocks=n_blocks, batch=batch, seq=seq, hidden=hidden, heads=heads, ffn_tiles=ffn_tiles,
                    dtype_bytes=dtype_bytes, **({} if ffn_hidden is None else {"ffn_hidden": ffn_hidden}))
    _check_common(kinds, jitter, seed)
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not divisible by heads {heads}")
    h, t = heads, ffn_tiles
    nodes = 1 + n_blocks * (7 * h + 5 * t + 6 - (h == 1) - (t == 1))
    edges = n_blocks * (9 * h + (h if h > 1 else 0) + 6 * t + (t if t > 1 else 0) + 6)
    return nodes, edges


def _transformer_layer_size(batch, seq, hidden, heads, seq_tiles, ffn_hidden, ffn_tiles, dtype_bytes, kinds, jitter,
                            seed) -> tuple[int, int]:
    ffn_tiles = heads if ffn_tiles is None else ffn_tiles
    _check_positive(batch=batch, seq=seq, hidden=hidden, heads=heads, seq_tiles=seq_tiles, ffn_tiles=ffn_tiles,
                    dtype_bytes=dtype_bytes, **({} if ffn_hidden is None else {"ffn_hidden": ffn_hidden}))
    _check_common(kinds, jitter, seed)
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not divisible by heads {heads}")
    if seq_tiles > seq:
        raise ValueError(f"seq_tiles ({seq_tiles}) cannot exceed seq ({seq})")
    h, t, s = heads, ffn_tiles, seq_tiles
    nodes = s * (1 + 7 * h + 5 * t + 6 - (h == 1) - (t == 1))
    # Token tile i's scores and attention read the keys and values of tiles 0..i (causal).
    edges = sum(h * (2 * i + 9) + (h if h > 1 else 0) + 6 * t + (t if t > 1 else 0) + 6 for i in range(s))
    return nodes, edges


def _split(n: int, parts: int) -> list[int]:
    """Extents of ``parts`` tiles covering ``n`` (larger tiles first when ``n`` does not divide)."""
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def _block_matmul(b: _Builder, tag: str, a_tiles, b_tiles, m: int, k: int, n: int, dtype_bytes: int, weight: bool):
    """C = A @ B on a tile grid: one tile product per (i, kk, j) and one reduction per (i, j).

    ``a_tiles[i][kk]`` are node ids of A's tiles. ``b_tiles[kk][j]`` are node ids of B's tiles,
    or with ``weight`` (``b_tiles`` None) B is a weight split like A's columns on both sides,
    whose tile (kk, j) lives on product (i, kk, j) as ``param_bytes`` (only valid with one row
    block, where each weight tile has one consumer).
    """
    t_rows, t_k = len(a_tiles), len(a_tiles[0])
    t_cols = t_k if weight else len(b_tiles[0])
    ms, ks, ns = _split(m, t_rows), _split(k, t_k), _split(n, t_cols)
    out = [[0] * t_cols for _ in range(t_rows)]
    for i in range(t_rows):
        for j in range(t_cols):
            partial = []
            for kk in range(t_k):
                inputs = [a_tiles[i][kk]] if weight else [a_tiles[i][kk], b_tiles[kk][j]]
                partial.append(
                    b.add(
                        f"{tag}.mm[{i},{kk},{j}]",
                        "matmul",
                        inputs,
                        flops=2.0 * ms[i] * ks[kk] * ns[j],
                        out=ms[i] * ns[j] * dtype_bytes,
                        params=ks[kk] * ns[j] * dtype_bytes if weight else 0,
                    )
                )
            if t_k == 1:
                out[i][j] = partial[0]
            else:
                out[i][j] = b.add(
                    f"{tag}.sum[{i},{j}]", "add", partial, flops=(t_k - 1) * ms[i] * ns[j], out=ms[i] * ns[j] * dtype_bytes
                )
    return out


def chained_matmul(
    n_matrices: int = 8,
    size: int = 4096,
    tiles: int = 2,
    *,
    dtype_bytes: int = 4,
    kinds: Sequence[str] = ("cpu", "cuda"),
    jitter: float = 0.0,
    seed: int = 0,
) -> CompGraph:
    """``M1 @ M2 @ ... @ Mk`` of square matrices, left to right, each matmul on a tile grid.

    Each matrix is ``tiles**2`` input ops (op ``"input"``, its tile's bytes as ``param_bytes``:
    the data must sit on the device holding it); each product is ``tiles**3`` tile matmuls and
    ``tiles**2`` reductions. Ops: ``n_matrices * t**2 + (n_matrices - 1) * (t**3 + t**2)`` for
    ``t > 1``: 116 with the defaults, 324 with ``tiles=3``.

    Parameters
    ----------
    n_matrices : int
        Matrices in the chain (>= 2).
    size : int
        Rows and columns of every matrix; tiles differ by at most one row where it does not divide.
    tiles : int
        Tile grid per side.
    dtype_bytes : int
        Bytes per element (4: fp32).
    kinds : sequence of str
        Device kinds to fill ``compute_time`` for from the roofline (empty: none).
    jitter : float
        Sigma of a multiplicative log-normal noise on those times, so they look measured.
    seed : int
        Seeds the noise only; the graph's shape is fixed by the other arguments.

    Returns
    -------
    CompGraph

    Raises
    ------
    ValueError
        On a non-positive or non-integer argument, fewer than two matrices, or more tiles than rows.
    LimitError
        More ops or edges than ``INCSCHED_MAX_NODES`` / ``INCSCHED_MAX_EDGES`` allow.
    """
    check_size(f"chained_matmul(n_matrices={n_matrices}, tiles={tiles})",
               *_chained_matmul_size(n_matrices, size, tiles, dtype_bytes, kinds, jitter, seed))
    b = _Builder()
    extent = _split(size, tiles)

    def matrix(idx: int):
        return [
            [
                b.add(f"M{idx}[{i},{j}]", "input", [], flops=0, out=ri * cj * dtype_bytes, params=ri * cj * dtype_bytes)
                for j, cj in enumerate(extent)
            ]
            for i, ri in enumerate(extent)
        ]

    acc = matrix(0)
    for idx in range(1, n_matrices):
        acc = _block_matmul(b, f"P{idx}", acc, matrix(idx), size, size, size, dtype_bytes, weight=False)
    return b.build(
        f"chained_matmul_{n_matrices}x{size}_t{tiles}",
        {"generator": "chained_matmul", "n_matrices": n_matrices, "size": size, "tiles": tiles, "dtype_bytes": dtype_bytes},
        kinds,
        jitter,
        seed,
    )


def ffnn(
    n_layers: int = 8,
    batch: int = 1024,
    hidden: int = 4096,
    tiles: int = 4,
    *,
    dtype_bytes: int = 4,
    kinds: Sequence[str] = ("cpu", "cuda"),
    jitter: float = 0.0,
    seed: int = 0,
) -> CompGraph:
    """A feed-forward network ``x -> (Linear, ReLU) * n_layers``, each layer split by hidden tiles.

    The activation (``batch x hidden``) is split into ``tiles`` column blocks; layer weights
    (``hidden x hidden``) into ``tiles x tiles`` blocks, each held by the one tile matmul that uses
    it (``param_bytes``). Per layer: ``tiles**2`` matmuls, ``tiles`` reductions (when tiles > 1)
    and ``tiles`` ReLUs; plus ``tiles`` input ops. Defaults: 196 ops.

    Parameters
    ----------
    n_layers : int
    batch, hidden : int
        Activation shape.
    tiles : int
    dtype_bytes : int
    kinds, jitter, seed :
        As in `chained_matmul`.

    Returns
    -------
    CompGraph

    Raises
    ------
    ValueError
        On a non-positive or non-integer argument or more tiles than ``hidden``.
    LimitError
        More ops or edges than ``INCSCHED_MAX_NODES`` / ``INCSCHED_MAX_EDGES`` allow.
    """
    check_size(f"ffnn(n_layers={n_layers}, tiles={tiles})", *_ffnn_size(n_layers, batch, hidden, tiles, dtype_bytes, kinds, jitter, seed))
    b = _Builder()
    extent = _split(hidden, tiles)
    x = [[b.add(f"x[{j}]", "input", [], flops=0, out=batch * hj * dtype_bytes) for j, hj in enumerate(extent)]]
    for layer in range(n_layers):
        y = _block_matmul(b, f"L{layer}", x, None, batch, hidden, hidden, dtype_bytes, weight=True)
        x = [
            [
                b.add(f"L{layer}.relu[{j}]", "relu", [y[0][j]], flops=batch * hj, out=batch * hj * dtype_bytes)
                for j, hj in enumerate(extent)
            ]
        ]
    return b.build(
        f"ffnn_{n_layers}x{hidden}_b{batch}_t{tiles}",
        {"generator": "ffnn", "n_layers": n_layers, "batch": batch, "hidden": hidden, "tiles": tiles, "dtype_bytes": dtype_bytes},
        kinds,
        jitter,
        seed,
    )


def transformer_block(
    n_blocks: int = 1,
    batch: int = 8,
    seq: int = 1024,
    hidden: int = 4096,
    heads: int = 8,
    *,
    ffn_hidden: int | None = None,
    ffn_tiles: int | None = None,
    dtype_bytes: int = 2,
    kinds: Sequence[str] = ("cpu", "cuda"),
    jitter: float = 0.0,
    seed: int = 0,
) -> CompGraph:
    """Llama-style decoder blocks, attention split by head and the MLP by hidden tiles.

    Per block: RMSNorm; per head q/k/v projections, scores ``q k^T``, softmax, ``scores v`` and
    its slice of the output projection; a reduction over heads and the residual add; RMSNorm;
    per MLP tile gate and up projections, SiLU, the gated product and the down projection; a
    reduction and the residual add. Ops per block: ``7 * heads + 5 * ffn_tiles + 6``; plus one
    input op. Defaults (8 heads, 8 tiles): 102 per block.

    Parameters
    ----------
    n_blocks : int
        Blocks in sequence (DOPPLER's "Llama-layer" is a few blocks).
    batch, seq, hidden, heads : int
        Activation ``batch x seq x hidden``; ``hidden`` a multiple of ``heads``.
    ffn_hidden : int, optional
        MLP inner width; default ``8/3 * hidden`` rounded up to a multiple of 256 (Llama).
    ffn_tiles : int, optional
        MLP split; default ``heads``. ``ffn_hidden`` is rounded up to a multiple of it.
    dtype_bytes : int
        2: bf16.
    kinds, jitter, seed :
        As in `chained_matmul`.

    Returns
    -------
    CompGraph

    Raises
    ------
    ValueError
        On a non-positive or non-integer argument or ``hidden`` not divisible by ``heads``.
    LimitError
        More ops or edges than ``INCSCHED_MAX_NODES`` / ``INCSCHED_MAX_EDGES`` allow.
    """
    check_size(f"transformer_block(n_blocks={n_blocks}, heads={heads}, ffn_tiles={ffn_tiles})",
               *_transformer_block_size(n_blocks, batch, seq, hidden, heads, ffn_hidden, ffn_tiles, dtype_bytes, kinds, jitter, seed))
    ffn_tiles = heads if ffn_tiles is None else ffn_tiles
    if ffn_hidden is None:
        ffn_hidden = -(-(8 * hidden // 3) // 256) * 256
    ffn_hidden = -(-ffn_hidden // ffn_tiles) * ffn_tiles
    tokens = batch * seq
    hd = hidden // heads
    ft = ffn_hidden // ffn_tiles
    act = tokens * hidden * dtype_bytes
    b = _Builder()
    x = b.add("x", "input", [], flops=0, out=act)
    for blk in range(n_blocks):
        p = f"B{blk}"
        h = b.add(f"{p}.attn_norm", "rmsnorm", [x], flops=4 * tokens * hidden, out=act, params=hidden * dtype_bytes)
        head_out = []
        for hh in range(heads):
            proj_flops = 2.0 * tokens * hidden * hd
            proj_out = tokens * hd * dtype_bytes
            w = hidden * hd * dtype_bytes
            q = b.add(f"{p}.h{hh}.q", "matmul", [h], flops=proj_flops, out=proj_out, params=w)
            k = b.add(f"{p}.h{hh}.k", "matmul", [h], flops=proj_flops, out=proj_out, params=w)
            v = b.add(f"{p}.h{hh}.v", "matmul", [h], flops=proj_flops, out=proj_out, params=w)
            score_bytes = batch * seq * seq * dtype_bytes
            s = b.add(f"{p}.h{hh}.scores", "bmm", [q, k], flops=2.0 * batch * seq * seq * hd, out=score_bytes)
            a = b.add(f"{p}.h{hh}.softmax", "softmax", [s], flops=5.0 * batch * seq * seq, out=score_bytes)
            o = b.add(f"{p}.h{hh}.attn", "bmm", [a, v], flops=2.0 * batch * seq * seq * hd, out=proj_out)
            head_out.append(
                b.add(f"{p}.h{hh}.out_proj", "matmul", [o], flops=2.0 * tokens * hd * hidden, out=act, params=hd * hidden * dtype_bytes)
            )
        attn = b.add(f"{p}.attn_sum", "add", head_out, flops=(heads - 1) * tokens * hidden, out=act) if heads > 1 else head_out[0]
        x = b.add(f"{p}.attn_residual", "add", [x, attn], flops=tokens * hidden, out=act)
        h = b.add(f"{p}.mlp_norm", "rmsnorm", [x], flops=4 * tokens * hidden, out=act, params=hidden * dtype_bytes)
        tile_out = []
        for tt in range(ffn_tiles):
            up_flops = 2.0 * tokens * hidden * ft
            up_out = tokens * ft * dtype_bytes
            w = hidden * ft * dtype_bytes
            gate = b.add(f"{p}.mlp{tt}.gate", "matmul", [h], flops=up_flops, out=up_out, params=w)
            up = b.add(f"{p}.mlp{tt}.up", "matmul", [h], flops=up_flops, out=up_out, params=w)
            act_fn = b.add(f"{p}.mlp{tt}.silu", "silu", [gate], flops=4.0 * tokens * ft, out=up_out)
            prod = b.add(f"{p}.mlp{tt}.mul", "mul", [act_fn, up], flops=tokens * ft, out=up_out)
            tile_out.append(b.add(f"{p}.mlp{tt}.down", "matmul", [prod], flops=up_flops, out=act, params=w))
        mlp = b.add(f"{p}.mlp_sum", "add", tile_out, flops=(ffn_tiles - 1) * tokens * hidden, out=act) if ffn_tiles > 1 else tile_out[0]
        x = b.add(f"{p}.mlp_residual", "add", [x, mlp], flops=tokens * hidden, out=act)
    return b.build(
        f"transformer_{n_blocks}b_h{hidden}_s{seq}_b{batch}",
        {
            "generator": "transformer_block",
            "n_blocks": n_blocks,
            "batch": batch,
            "seq": seq,
            "hidden": hidden,
            "heads": heads,
            "ffn_hidden": ffn_hidden,
            "ffn_tiles": ffn_tiles,
            "dtype_bytes": dtype_bytes,
        },
        kinds,
        jitter,
        seed,
    )


def transformer_layer(
    batch: int = 8,
    seq: int = 1024,
    hidden: int = 4096,
    heads: int = 8,
    seq_tiles: int = 2,
    *,
    ffn_hidden: int | None = None,
    ffn_tiles: int | None = None,
    dtype_bytes: int = 2,
    kinds: Sequence[str] = ("cpu", "cuda"),
    jitter: float = 0.0,
    seed: int = 0,
) -> CompGraph:
    """One Llama-style decoder layer split by tokens as well as by heads and MLP tiles.

    Where `transformer_block` keeps every token in one tile (its norms, sums and residual adds are
    cut nodes that every other op precedes or follows), here the sequence is split into
    ``seq_tiles`` causal token tiles, as DOPPLER's einsum decomposition splits every dimension:
    each token tile has its own input, norms, per-head q/k/v projections, scores, softmax,
    attention and output projection, head sum and residual add, then its MLP tiles (gate, up,
    SiLU, product, down), MLP sum and residual add. Token tile i's scores read the keys of tiles
    0..i and its attention their values, so the tiles depend on each other through attention only,
    and no op but a lone tile's is a cut node. A weight (a head's projections, an MLP tile's, a
norm's) is read by that op in every token tile: a `SharedWeight`, held once on each device that
runs one of its readers (with one token tile, the op's own ``param_bytes``). Ops: ``seq_tiles * (7 * heads + 5 * ffn_tiles + 7)``:
    206 with the defaults.

    Parameters
    ----------
    batch, seq, hidden, heads : int
        Activation ``batch x seq x hidden``; ``hidden`` a multiple of ``heads``.
    seq_tiles : int
        Token tiles along the sequence (at most ``seq``; uneven tiles differ by one token).
    ffn_hidden, ffn_tiles, dtype_bytes, kinds, jitter, seed :
        As in `transformer_block`.

    Returns
    -------
    CompGraph

    Raises
    ------
    ValueError
        On a non-positive or non-integer argument, ``hidden`` not divisible by ``heads``, or more
        token tiles than tokens in the sequence.
    LimitError
        More ops or edges than ``INCSCHED_MAX_NODES`` / ``INCSCHED_MAX_EDGES`` allow.

    Examples
    --------
    >>> g = transformer_layer(heads=2, seq_tiles=2, ffn_tiles=2)
    >>> g.n_nodes, len(g.predecessors(g.names.index("T1.h0.scores")))
    (62, 3)
    """
    check_size(f"transformer_layer(heads={heads}, seq_tiles={seq_tiles}, ffn_tiles={ffn_tiles})",
               *_transformer_layer_size(batch, seq, hidden, heads, seq_tiles, ffn_hidden, ffn_tiles, dtype_bytes, kinds, jitter, seed))
    ffn_tiles = heads if ffn_tiles is None else ffn_tiles
    if ffn_hidden is None:
        ffn_hidden = -(-(8 * hidden // 3) // 256) * 256
    ffn_hidden = -(-ffn_hidden // ffn_tiles) * ffn_tiles
    hd = hidden // heads
    ft = ffn_hidden // ffn_tiles
    lengths = _split(seq, seq_tiles)
    b = _Builder()
    readers: dict[str, tuple[int, list[int]]] = {}  # weight -> (bytes, the op reading it in each token tile)

    def reads(weight: str, nbytes: int, v: int) -> int:
        readers.setdefault(weight, (nbytes, []))[1].append(v)
        return v

    keys: list[list[int]] = [[] for _ in range(heads)]  # per head, the k projection of each token tile so far
    values: list[list[int]] = [[] for _ in range(heads)]
    for i, length in enumerate(lengths):
        p = f"T{i}"
        tokens = batch * length
        seen = sum(lengths[: i + 1])  # keys a causal query of this tile attends to
        act = tokens * hidden * dtype_bytes
        x = b.add(f"{p}.x", "input", [], flops=0, out=act)
        h = reads("attn_norm", hidden * dtype_bytes, b.add(f"{p}.attn_norm", "rmsnorm", [x], flops=4 * tokens * hidden, out=act))
        head_out = []
        for hh in range(heads):
            proj_flops = 2.0 * tokens * hidden * hd
            proj_out = tokens * hd * dtype_bytes
            w = hidden * hd * dtype_bytes
            q = reads(f"h{hh}.q", w, b.add(f"{p}.h{hh}.q", "matmul", [h], flops=proj_flops, out=proj_out))
            keys[hh].append(reads(f"h{hh}.k", w, b.add(f"{p}.h{hh}.k", "matmul", [h], flops=proj_flops, out=proj_out)))
            values[hh].append(reads(f"h{hh}.v", w, b.add(f"{p}.h{hh}.v", "matmul", [h], flops=proj_flops, out=proj_out)))
            score_bytes = batch * length * seen * dtype_bytes
            s = b.add(f"{p}.h{hh}.scores", "bmm", [q, *keys[hh]], flops=2.0 * batch * length * seen * hd, out=score_bytes)
            a = b.add(f"{p}.h{hh}.softmax", "softmax", [s], flops=5.0 * batch * length * seen, out=score_bytes)
            o = b.add(f"{p}.h{hh}.attn", "bmm", [a, *values[hh]], flops=2.0 * batch * length * seen * hd, out=proj_out)
            head_out.append(reads(f"h{hh}.out_proj", hd * hidden * dtype_bytes,
                                  b.add(f"{p}.h{hh}.out_proj", "matmul", [o], flops=2.0 * tokens * hd * hidden, out=act)))
        attn = b.add(f"{p}.attn_sum", "add", head_out, flops=(heads - 1) * tokens * hidden, out=act) if heads > 1 else head_out[0]
        x = b.add(f"{p}.attn_residual", "add", [x, attn], flops=tokens * hidden, out=act)
        h = reads("mlp_norm", hidden * dtype_bytes, b.add(f"{p}.mlp_norm", "rmsnorm", [x], flops=4 * tokens * hidden, out=act))
        tile_out = []
        for tt in range(ffn_tiles):
            up_flops = 2.0 * tokens * hidden * ft
            up_out = tokens * ft * dtype_bytes
            w = hidden * ft * dtype_bytes
            gate = reads(f"mlp{tt}.gate", w, b.add(f"{p}.mlp{tt}.gate", "matmul", [h], flops=up_flops, out=up_out))
            up = reads(f"mlp{tt}.up", w, b.add(f"{p}.mlp{tt}.up", "matmul", [h], flops=up_flops, out=up_out))
            act_fn = b.add(f"{p}.mlp{tt}.silu", "silu", [gate], flops=4.0 * tokens * ft, out=up_out)
            prod = b.add(f"{p}.mlp{tt}.mul", "mul", [act_fn, up], flops=tokens * ft, out=up_out)
            tile_out.append(reads(f"mlp{tt}.down", w, b.add(f"{p}.mlp{tt}.down", "matmul", [prod], flops=up_flops, out=act)))
        mlp = b.add(f"{p}.mlp_sum", "add", tile_out, flops=(ffn_tiles - 1) * tokens * hidden, out=act) if ffn_tiles > 1 else tile_out[0]
        b.add(f"{p}.mlp_residual", "add", [x, mlp], flops=tokens * hidden, out=act)
    for weight, (nbytes, ops) in readers.items():
        if len(ops) == 1:
            b.params[ops[0]] += nbytes
        else:
            b.shared.append(SharedWeight(weight, nbytes, tuple(ops)))
    return b.build(
        f"transformer_layer_h{hidden}_s{seq}_b{batch}_st{seq_tiles}",
        {
            "generator": "transformer_layer",
            "batch": batch,
            "seq": seq,
            "hidden": hidden,
            "heads": heads,
            "seq_tiles": seq_tiles,
            "ffn_hidden": ffn_hidden,
            "ffn_tiles": ffn_tiles,
            "dtype_bytes": dtype_bytes,
        },
        kinds,
        jitter,
        seed,
    )


def bandwidth_for_comm_ratio(graph: CompGraph, ratio: float, kind: str = "cpu", *, latency: float = 0.0) -> float:
    """Link bandwidth (bytes/s) at which the mean edge transfer takes ``ratio`` x the mean op time.

    Mean transfer time is ``latency + mean(edge_bytes) / bandwidth`` over all edges; mean op time
    is ``mean(graph.time(kind))`` (measured, else the roofline). DOPPLER's setting "communication
    costs about 4x compute" is ``bandwidth_for_comm_ratio(g, 4.0)``; pass the result as the links'
    bandwidth (with the same ``latency``) when building the placement problem.

    Parameters
    ----------
    graph : CompGraph
    ratio : float
        Wanted mean transfer time over mean compute time (> 0).
    kind : str
        Device kind whose op times are the reference.
    latency : float
        Per-transfer latency in seconds, part of every transfer's time.

    Returns
    -------
    float
        Bytes per second.

    Raises
    ------
    GraphError
        If the graph has no edge carrying data or no compute time, or if ``latency`` alone already
        exceeds the wanted transfer time.
    ValueError
        If ``ratio`` is not positive.

    Examples
    --------
    >>> g = ffnn(n_layers=2, tiles=2)
    >>> bw = bandwidth_for_comm_ratio(g, 4.0)
    >>> round(float(g.edge_bytes.mean() / bw / g.time("cpu").mean()), 6)
    4.0
    """
    if not ratio > 0:
        raise ValueError(f"ratio must be positive, got {ratio}")
    mean_bytes = float(graph.edge_bytes.mean()) if graph.n_edges else 0.0
    if mean_bytes <= 0:
        raise GraphError(f"graph {graph.name!r} has no edge carrying data; no bandwidth gives a transfer cost")
    mean_time = float(np.mean(graph.time(kind)))
    if mean_time <= 0:
        raise GraphError(f"graph {graph.name!r} has zero compute time on {kind!r}; no ratio to it is defined")
    budget = ratio * mean_time - latency
    if budget <= 0:
        raise GraphError(
            f"latency {latency} s alone exceeds {ratio} x the mean op time ({mean_time:.3g} s) of graph {graph.name!r}"
        )
    return mean_bytes / budget
