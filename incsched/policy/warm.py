"""Compile both policy decoders and the placement moves into numba's cache, once after install: ``python -m incsched.policy.warm``.

A decoder's first call compiles it (8.6 s measured, mostly holding the GIL) unless numba's cache
holds it; from the cache it loads in about a second. `make install` runs this, so that the
portfolio (`inc_ilp.incumbent`) can load the policy in-process even under a clock of 1-2 s.
"""

from __future__ import annotations

import os
import sys
import time

from .checkpoint import MODELS_DIR, NO_NPZ_ENV, numpy_weights_path
from .compiled import call_compiled, is_cached

__all__ = ["KERNELS", "loads_quickly", "warm"]

#: The compiled decoders, as `compiled.call_compiled` names them.
KERNELS = ("incsched.policy.stage_kernel:decode_rows", "incsched.policy.placement_kernel:decode_rows",
           "incsched.baselines.placement_moves_kernel:search_chunk")
_SHIPPED = {"stage": (KERNELS[0], "stage_policy.pt"), "placement": (KERNELS[1], "placement_policy.pt")}


def loads_quickly(kind: str) -> bool:
    """Whether the shipped ``"stage"`` or ``"placement"`` policy loads in about a second here: its
    weights as ``.npz`` (no torch) and its decoder in numba's cache (no compile)."""
    kernel, checkpoint = _SHIPPED[kind]
    npz = os.environ.get(NO_NPZ_ENV, "") in ("", "0") and numpy_weights_path(MODELS_DIR / checkpoint).is_file()
    return npz and is_cached(kernel)


def warm() -> dict[str, float | None]:
    """Decode a small generated graph with each policy, and search it with the placement moves;
    seconds per kernel (None where cached already)."""
    from ..baselines.list_scheduling import heft
    from ..baselines.placement_moves import move_search
    from ..generators import ffnn
    from ..problems import PlacementProblem
    from ..problems.stage import StageProblem
    from . import placement_decoder, stage_decoder

    g = ffnn()
    placement = PlacementProblem.identical(g, 2, bandwidth=1e9)
    spent = {}
    for kernel, decode in zip(KERNELS, (lambda: stage_decoder.preschedule(StageProblem.pipeline(g, 2), 0),
                                        lambda: placement_decoder.preschedule(placement, 0),
                                        lambda: move_search(placement, heft(placement), evaluations=1, call=call_compiled))):
        start, cached = time.perf_counter(), is_cached(kernel)
        if not cached:
            decode()  # compiles, or loads numba's cache if it holds this CPU's code; either way marks it
        spent[kernel] = None if cached else time.perf_counter() - start
    return spent


if __name__ == "__main__":
    for kernel, seconds in warm().items():
        print(f"{kernel}: {'cached already' if seconds is None else f'compiled in {seconds:.1f} s'}; cached now: {is_cached(kernel)}")
    sys.exit(0 if all(is_cached(k) for k in KERNELS) else 1)
