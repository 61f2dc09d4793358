"""Live tensor bytes on one device, counted op by op: the peak memory of a step on any device.

CUDA has allocator statistics (``torch.cuda.max_memory_allocated``); a CPU has none, and a process's
resident size mixes in Python, the allocator's caches and pages shared with the parent. What a
stage's memory model predicts is tensor bytes: parameters, gradients, optimizer state, the
activations a schedule keeps. `LiveBytes` counts exactly those: a dispatch mode sees every tensor
an operator returns (forward, backward and the optimizer's, including the receive buffers the
pipeline schedule allocates), adds its storage's bytes once, and takes them off when the storage
is freed. Tensors that exist before the mode is entered (weights, optimizer state) are added with
`LiveBytes.hold`. The dispatch mode slows every operator, so time a step without it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["LiveBytes", "distinct_tensor_bytes"]


def distinct_tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages among ``tensors``: a tensor reached under several names (a tied
    weight) counts once, as numel times element size of the largest view of its storage, which is
    what capture charges a weight."""
    seen: dict[tuple[str, int], int] = {}
    for t in tensors:
        key = (str(t.device), t.untyped_storage().data_ptr())
        seen[key] = max(seen.get(key, 0), t.numel() * t.element_size())
    return sum(seen.values())


class LiveBytes(TorchDispatchMode):
    """Bytes of the distinct tensor storages alive on ``device``; ``peak`` is the most at once.

    Examples
    --------
    >>> w = torch.zeros(256)                      # 1 KiB held before
    >>> live = LiveBytes("cpu"); live.hold([w])
    >>> with live:
    ...     y = (w + 1) * 2                       # w + 1 is freed once y exists
    >>> live.peak, live.current
    (3072, 2048)
    """

    def __init__(self, device: str | torch.device = "cpu"):
        super().__init__()
        self.device = torch.device(device)
        self.current = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}

    def hold(self, tensors: Iterable[torch.Tensor | None]) -> None:
        """Count tensors that already exist (a module's weights, an optimizer's state)."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self._add(t)

    def reset_peak(self) -> None:
        self.peak = self.current

    def _add(self, t: torch.Tensor) -> None:
        if t.device != self.device or t.is_meta:
            return
        storage = t.untyped_storage()
        key = storage.data_ptr()
        size = storage.nbytes()
        if size == 0 or key in self._sizes:
            return
        self._sizes[key] = size
        self.current += size
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._drop, key)

    def _drop(self, key: int) -> None:
        self.current -= self._sizes.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._add(t)
        return out
