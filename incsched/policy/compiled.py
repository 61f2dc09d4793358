"""Calling a compiled (numba) decoder so that a Ctrl-C during its first call is safe.

A decoder's first call in a process imports numba and compiles the decoder, or loads it from
numba's cache: one to a few seconds. A Ctrl-C in that time used to break the process's numba: a
KeyboardInterrupt inside numba's import leaves it half-imported, and one inside llvmlite's ctypes
callbacks is ignored and leaves a half-built library ("no compiled object yet"), so the solve
failed instead of returning its best answer, and later solves failed too. The first call
therefore runs in a helper thread (`run_in_helper`); an interrupted one finishes in the
background, and a later call waits for it on the import lock or numba's compiler lock. Every later
call runs directly.

`is_cached` says, without importing numba, whether a decoder's compiled code waits in numba's
cache: then a first call costs about a second (loading), not the compile (8.6 s, mostly holding
the GIL). `make install` compiles both decoders once (``python -m incsched.policy.warm``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import pickle
import sys
from pathlib import Path

from ..helper_thread import run_in_helper

__all__ = ["call_compiled", "is_cached"]

_ready: dict[str, object] = {}  # "module:function" -> its dispatcher, once it has run


def call_compiled(kernel: str, *args):
    """``kernel(*args)`` for a numba function named ``"package.module:function"``.

    Its first call in the process (the import and the compile) runs in a helper thread.
    """
    ready = _ready.get(kernel)
    if ready is not None:
        return ready(*args)

    def first_call():
        module, name = kernel.split(":")
        function = getattr(importlib.import_module(module), name)
        value = function(*args)
        _ready[kernel] = function
        return value

    return run_in_helper(first_call, f"compile {kernel}")


def is_cached(kernel: str) -> bool:
    """Whether numba's cache next to ``kernel``'s source holds it for this numba and this source.

    Numba's in-tree cache: ``__pycache__/<module>.<function>-<line>.py<XY>.nbi``, an index that
    starts with numba's version and is newer than the source it was compiled from. A cache numba
    keeps elsewhere (``NUMBA_CACHE_DIR``, or a user folder when the package's is read-only) reads as
    not cached: the caller then takes the slow path, which is the safe one.
    """
    if kernel in _ready:
        return True
    if os.environ.get("NUMBA_CACHE_DIR") or os.environ.get("NUMBA_DISABLE_JIT"):
        return False
    module, name = kernel.split(":")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return False
    source = Path(spec.origin)
    try:
        version = importlib.metadata.version("numba")
        built = source.stat().st_mtime
        tag = f"py{sys.version_info.major}{sys.version_info.minor}"
        for index in (source.parent / "__pycache__").glob(f"{source.stem}.{name}-*.{tag}.nbi"):
            if index.stat().st_mtime >= built:
                with index.open("rb") as f:
                    if pickle.load(f) == version:
                        return True
    except (OSError, importlib.metadata.PackageNotFoundError, pickle.UnpicklingError, EOFError):
        return False
    return False
