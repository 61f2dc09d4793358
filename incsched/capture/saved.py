"""What training keeps for backward: the bytes of the tensors autograd saves, per fx node.

A layer's output is a small part of what training holds between its forward and its backward: the
tensors its operations save for their gradients (a linear's input, attention's probabilities, a
GELU's input ...) are what a pipeline schedule stashes per micro-batch in flight. One forward pass
with gradients on, under ``torch.autograd.graph.saved_tensors_hooks``, sees every saved tensor; each
distinct storage counts once, for the first node that saves it. Weights (parameters and buffers)
are not activations and are left out: the memory model counts them as parameters.

The same pass, followed by one backward pass, measures what the stash leaves out (`training_bytes`):

- *working set* (``work``): the most bytes alive at once while a node's forward or backward runs,
  beyond the weights, their gradients and the saved activations: the values and gradients in
  flight, a weight's gradient before it is accumulated (the weights' ``.grad`` exist already, as
  from the second micro-batch on; counted while the op that makes it runs, then held as the
  weight's), temporaries, and the gradient of the graph's outputs, seeded
  fresh as a pipeline stage receives it. A dispatch mode counts every storage an operator makes
  and takes it off when freed or saved; autograd pre-hooks say whose backward runs. Measured on
  the whole graph, so a node's working set includes what other branches keep pending then;
- *largest weight* (``largest_weight``): the bytes of the largest weight storage a node reads,
  what an optimizer stepping one tensor at a time needs temporaries for.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["saved_tensor_bytes", "training_bytes"]


class _Ledger(TorchDispatchMode):
    """Bytes of the storages operators make that are alive and not saved for backward (``loose``),
    and per node the most of them while that node's forward or backward ran (``work``)."""

    def __init__(self):
        super().__init__()
        self.held: set[int] = set()  # storages from before (weights, their gradients, inputs): never counted
        self.sizes: dict[int, int] = {}
        self.saved: set[int] = set()
        self.loose = 0
        self.current: str | None = None
        self.work: dict[str, int] = {}

    def enter(self, name: str | None) -> None:
        self.current = name
        if name is not None:
            self.work[name] = max(self.work.get(name, 0), self.loose)

    def mark_grad(self, param: torch.Tensor) -> None:
        """A weight's accumulated gradient is held as the optimizer's (the memory model's
        parameters), not working set, whichever storage autograd left it in."""
        if param.grad is not None:
            self.mark_saved(param.grad.untyped_storage().data_ptr())

    def mark_saved(self, key: int) -> None:
        if key in self.sizes and key not in self.saved:
            self.saved.add(key)
            self.loose -= self.sizes[key]

    def _drop(self, key: int) -> None:
        size = self.sizes.pop(key, 0)
        if key in self.saved:
            self.saved.discard(key)
        else:
            self.loose -= size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and not t.is_meta:
                storage = t.untyped_storage()
                key, size = storage.data_ptr(), storage.nbytes()
                if size and key not in self.sizes and key not in self.held:
                    self.sizes[key] = size
                    self.loose += size
                    weakref.finalize(storage, self._drop, key)
        if self.current is not None:
            self.work[self.current] = max(self.work.get(self.current, 0), self.loose)
        return out


class _SeedGrad(torch.autograd.Function):
    """Identity whose backward hands on a fresh gradient of the output's size: what a stage receives."""

    @staticmethod
    def forward(ctx, x):
        ctx.shape, ctx.dtype, ctx.device = x.shape, x.dtype, x.device
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return torch.ones(ctx.shape, dtype=ctx.dtype, device=ctx.device)


class _SavingInterpreter(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule, weights: dict[int, int], ledger: _Ledger | None = None):
        super().__init__(gm, garbage_collect_values=True)
        self.weights = weights
        self.seen: set[int] = set()
        self.saved: dict[str, int] = {}
        self.current: str | None = None
        self.ledger = ledger
        self.largest: dict[str, int] = {}
        self.hooked: set[torch.autograd.graph.Node] = set()
        self.handles: list[Any] = []

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if self.current is not None and key not in self.weights and key not in self.seen:
            self.seen.add(key)
            self.saved[self.current] = self.saved.get(self.current, 0) + storage.nbytes()
        if self.ledger is not None:
            self.ledger.mark_saved(key)
        return t

    def run_node(self, n: torch.fx.Node) -> Any:
        self.current = n.name if n.op not in ("placeholder", "get_attr", "output") else None
        if self.ledger is None:
            return super().run_node(n)
        if self.current is not None:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            if n.op == "call_module":  # a leaf module reads its own weights
                tensors += [*self.module.get_submodule(n.target).parameters(), *self.module.get_submodule(n.target).buffers()]
            read = [self.weights.get(t.untyped_storage().data_ptr(), 0) for t in tensors]
            self.largest[n.name] = max(read, default=0)
        self.ledger.enter(self.current)
        out = super().run_node(n)
        if self.current is not None:
            self._hook_backward(out, n.name)
        return out

    def _weight_grads(self, grads: tuple, at: tuple[int, ...]) -> None:
        """A weight's gradient, once its op's backward has made it (and counted it), is held as the
        weight's: a tied weight's first gradient waits in autograd until its other reader's
        backward adds to it, which in a pipeline that holds each reader's copy on its own stage
        does not happen, and which on one stage is the weight's gradient, counted with the weights."""
        for i in at:
            if i < len(grads) and isinstance(grads[i], torch.Tensor):
                self.ledger.mark_saved(grads[i].untyped_storage().data_ptr())

    def _hook_backward(self, out: Any, name: str) -> None:
        """Tell the ledger that ``name``'s backward runs when autograd reaches the nodes its forward made."""
        todo = [t.grad_fn for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        while todo:
            fn = todo.pop()
            if fn is None or fn in self.hooked or type(fn).__name__ == "AccumulateGrad":
                continue
            self.hooked.add(fn)
            self.handles.append(fn.register_prehook(lambda grads, name=name: self.ledger.enter(name)))
            weights = [i for i, (f, _) in enumerate(fn.next_functions) if f is not None and type(f).__name__ == "AccumulateGrad"]
            if weights:
                self.handles.append(fn.register_hook(lambda grads, _, at=tuple(weights): self._weight_grads(grads, at)))
            todo.extend(f for f, _ in fn.next_functions)


def saved_tensor_bytes(gm: torch.fx.GraphModule, flat_inputs: Sequence[Any]) -> dict[str, int]:
    """Bytes of the activations each fx node of ``gm`` saves for backward, on ``flat_inputs``.

    Floating-point inputs are made to require gradients (so the first layer saves what it would
    inside a pipeline stage, whose input arrives with a gradient to send back), as are the weights.

    >>> gm = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()))
    >>> saved_tensor_bytes(gm, [torch.zeros(2, 4)])  # the linear keeps its input, relu its output
    {'_0': 32, '_1': 64}
    """
    return training_bytes(gm, flat_inputs, work=False)["saved"]


def training_bytes(gm: torch.fx.GraphModule, flat_inputs: Sequence[Any], *, work: bool = True) -> dict[str, dict[str, int]]:
    """What training holds per fx node of ``gm`` on ``flat_inputs``, by node name: ``saved`` (bytes
    saved for backward, as `saved_tensor_bytes`), and with ``work`` also ``work`` (the working set
    of its forward and backward beyond weights, their gradients and saved activations) and
    ``largest_weight`` (its largest weight storage's bytes); see the module notes.

    >>> gm = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()))
    >>> b = training_bytes(gm, [torch.zeros(2, 4)])
    >>> b["saved"], b["largest_weight"]  # the linear's weight is 8 x 4 floats
    ({'_0': 32, '_1': 64}, {'_0': 128, '_1': 0})
    """
    weights: dict[int, int] = {}
    for t in [*gm.parameters(), *gm.buffers()]:
        storage = t.untyped_storage()
        weights[storage.data_ptr()] = storage.nbytes()
    state = {p: (p.requires_grad, p.grad) for p in gm.parameters()}
    inputs = [
        x.detach().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in flat_inputs
    ]
    ledger = _Ledger() if work else None
    interp = _SavingInterpreter(gm, weights, ledger)
    if ledger is not None:
        ledger.held.update(weights)
        ledger.held.update(x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor))
    try:
        for p in state:
            if p.is_floating_point():
                p.requires_grad_(True)
                if work:  # held already, as from the second micro-batch on: a new gradient is a temporary
                    p.grad = torch.zeros_like(p)
                    ledger.held.add(p.grad.untyped_storage().data_ptr())
                    interp.handles.append(p.register_post_accumulate_grad_hook(ledger.mark_grad))
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(interp.pack, lambda t: t):
            if ledger is None:
                interp.run(*inputs)
            else:
                with ledger:
                    _forward_backward(interp, ledger, inputs)
    finally:
        for h in interp.handles:
            h.remove()
        for p, (flag, grad) in state.items():
            p.requires_grad_(flag)
            p.grad = grad
    out = {"saved": interp.saved}
    if ledger is not None:
        out["work"] = ledger.work
        out["largest_weight"] = interp.largest
    return out


def _forward_backward(interp: _SavingInterpreter, ledger: _Ledger, inputs: list) -> None:
    outputs = [t for t in tree_leaves(interp.run(*inputs)) if isinstance(t, torch.Tensor) and t.requires_grad]
    ledger.enter(None)
    if outputs:
        # One scalar over seeded outputs: each output's gradient is made fresh, full size, when its
        # backward starts, and freed once used, as a stage's received gradient is.
        total = sum(_SeedGrad.apply(t).sum() if t.is_floating_point() else 0 for t in outputs)
        del outputs
        if isinstance(total, torch.Tensor):
            total.backward()
    ledger.enter(None)
