"""`GraphEncoder`'s forward pass in numpy float32: how inference embeds a graph without importing torch.

A shipped policy decodes in milliseconds, but importing torch costs seconds in a fresh process
(the policy child of inc-ilp, a cold ``solve(p, "rl")``). The encoder is small dense algebra, so
inference runs this twin over the state dict's arrays (`checkpoint.load_weight_arrays`): the same
operations in the same order as `encoder.GraphEncoder` with `gine.PlainGINEConv`, float32
throughout. Matrix products are BLAS's, not torch's, so embeddings agree to float32 rounding, not
bitwise (tests/test_numpy_inference.py states the tolerance).
"""

from __future__ import annotations

import numpy as np

__all__ = ["linear", "layer_norm", "encode", "encoder_shapes", "check_config_keys"]

Weights = dict[str, np.ndarray]

#: ``nn.LayerNorm``'s default epsilon, which `BidirectionalConv` uses.
LAYER_NORM_EPS = 1e-5


def linear(w: Weights, name: str, x: np.ndarray) -> np.ndarray:
    """``nn.Linear`` named ``name``: ``x @ weight.T + bias`` (no bias when the state dict has none)."""
    y = x @ w[f"{name}.weight"].T
    bias = w.get(f"{name}.bias")
    return y if bias is None else y + bias


def layer_norm(w: Weights, name: str, x: np.ndarray) -> np.ndarray:
    """``nn.LayerNorm`` over the last axis: biased variance, epsilon inside the square root."""
    mean = x.mean(axis=-1, keepdims=True, dtype=np.float32)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True, dtype=np.float32)
    return centred / np.sqrt(var + np.float32(LAYER_NORM_EPS)) * w[f"{name}.weight"] + w[f"{name}.bias"]


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.float32(0))


def _gine(w: Weights, name: str, x: np.ndarray, src: np.ndarray, dst: np.ndarray, edge_attr: np.ndarray) -> np.ndarray:
    """`PlainGINEConv`: ``nn(mean_{j->i} relu(x_j + lin(e_ji)) + (1 + eps) x_i)``, a mean over no edges being 0."""
    messages = _relu(x[src] + linear(w, f"{name}.lin", edge_attr))
    n = x.shape[0]
    # Summed in edge order, as torch's scatter_add_ does; in-degrees clamped to 1 as its mean does.
    total = np.zeros((n, messages.shape[1]), dtype=np.float32)
    np.add.at(total, dst, messages)
    count = np.maximum(np.bincount(dst, minlength=n), 1).astype(np.float32)
    h = total / count[:, None] + (np.float32(1) + w[f"{name}.eps"]) * x
    return linear(w, f"{name}.nn.2", _relu(linear(w, f"{name}.nn.0", h)))


def encode(w: Weights, x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray, *, n_layers: int,
           prefix: str = "encoder") -> np.ndarray:
    """Node embeddings ``[n, hidden]`` (float32): `GraphEncoder.forward` over the arrays of state dict ``w``.

    Parameters
    ----------
    w : dict of str to float32 array
        A policy's state dict as arrays; the encoder's entries start with ``prefix``.
    x, edge_index, edge_attr : numpy arrays
        As `features.node_feature_array`, `features.edge_index_array`, `features.edge_feature_array`.
    n_layers : int
        Rounds of message passing (the checkpoint's model config).
    prefix : str
        The encoder's name in the state dict.
    """
    x = np.asarray(x, dtype=np.float32)
    edge_attr = np.asarray(edge_attr, dtype=np.float32)
    src, dst = np.asarray(edge_index[0], dtype=np.int64), np.asarray(edge_index[1], dtype=np.int64)
    h = linear(w, f"{prefix}.embed.2", _relu(linear(w, f"{prefix}.embed.0", x)))
    for i in range(n_layers):
        layer = f"{prefix}.layers.{i}"
        # BidirectionalConv: x + relu(norm(root(x) + conv_fwd(x, E) + conv_bwd(x, reversed E))).
        s = linear(w, f"{layer}.root", h) + _gine(w, f"{layer}.conv_fwd", h, src, dst, edge_attr)
        s = s + _gine(w, f"{layer}.conv_bwd", h, dst, src, edge_attr)
        h = h + _relu(layer_norm(w, f"{layer}.norm", s))
    return h


def encoder_shapes(in_dim: int, edge_dim: int, hidden: int, n_layers: int, *, prefix: str = "encoder") -> dict[str, tuple[int, ...]]:
    """Every state-dict entry of a `GraphEncoder` of these sizes, with its shape (what a file must hold)."""
    shapes: dict[str, tuple[int, ...]] = {}

    def lin(name: str, n_in: int, n_out: int) -> None:
        shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (n_out, n_in), (n_out,)

    lin(f"{prefix}.embed.0", in_dim, hidden)
    lin(f"{prefix}.embed.2", hidden, hidden)
    for i in range(n_layers):
        layer = f"{prefix}.layers.{i}"
        for conv in ("conv_fwd", "conv_bwd"):
            shapes[f"{layer}.{conv}.eps"] = (1,)
            lin(f"{layer}.{conv}.nn.0", hidden, hidden)
            lin(f"{layer}.{conv}.nn.2", hidden, hidden)
            lin(f"{layer}.{conv}.lin", edge_dim, hidden)
        lin(f"{layer}.root", hidden, hidden)
        shapes[f"{layer}.norm.weight"], shapes[f"{layer}.norm.bias"] = (hidden,), (hidden,)
    return shapes


def check_config_keys(model_config: dict[str, int], expected: tuple[str, ...]) -> None:
    """Raise ValueError unless ``model_config`` names exactly ``expected`` (as the policy's constructor would)."""
    if set(model_config) != set(expected):
        raise ValueError(f"model config keys {sorted(model_config)}, expected {sorted(expected)}")
