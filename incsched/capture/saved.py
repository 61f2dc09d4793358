"""What training keeps for backward: the bytes of the tensors autograd saves, per fx node.

A layer's output is a small part of what training holds between its forward and its backward: the
tensors its operations save for their gradients (a linear's input, attention's probabilities, a
GELU's input ...) are what a pipeline schedule stashes per micro-batch in flight. One forward pass
with gradients on, under ``torch.autograd.graph.saved_tensors_hooks``, sees every saved tensor; each
distinct storage counts once, for the first node that saves it. Weights (parameters and buffers)
are not activations and are left out: the memory model counts them as parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

__all__ = ["saved_tensor_bytes"]


class _SavingInterpreter(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule, weights: set[int]):
        super().__init__(gm, garbage_collect_values=True)
        self.weights = weights
        self.seen: set[int] = set()
        self.saved: dict[str, int] = {}
        self.current: str | None = None

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if self.current is not None and key not in self.weights and key not in self.seen:
            self.seen.add(key)
            self.saved[self.current] = self.saved.get(self.current, 0) + storage.nbytes()
        return t

    def run_node(self, n: torch.fx.Node) -> Any:
        self.current = n.name if n.op not in ("placeholder", "get_attr", "output") else None
        return super().run_node(n)


def saved_tensor_bytes(gm: torch.fx.GraphModule, flat_inputs: Sequence[Any]) -> dict[str, int]:
    """Bytes of the activations each fx node of ``gm`` saves for backward, on ``flat_inputs``.

    Floating-point inputs are made to require gradients (so the first layer saves what it would
    inside a pipeline stage, whose input arrives with a gradient to send back), as are the weights.

    >>> gm = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()))
    >>> saved_tensor_bytes(gm, [torch.zeros(2, 4)])  # the linear keeps its input, relu its output
    {'_0': 32, '_1': 64}
    """
    weights = {t.untyped_storage().data_ptr() for t in [*gm.parameters(), *gm.buffers()]}
    state = {p: p.requires_grad for p in gm.parameters()}
    inputs = [
        x.detach().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in flat_inputs
    ]
    interp = _SavingInterpreter(gm, weights)
    try:
        for p in state:
            if p.is_floating_point():
                p.requires_grad_(True)
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(interp.pack, lambda t: t):
            interp.run(*inputs)
    finally:
        for p, flag in state.items():
            p.requires_grad_(flag)
    return interp.saved
