"""Calling a compiled (numba) decoder so that a Ctrl-C during its first call is safe.

A decoder's first call in a process imports numba and compiles the decoder, or loads it from
numba's cache: one to a few seconds. A Ctrl-C in that time used to break the process's numba: a
KeyboardInterrupt inside numba's import leaves it half-imported, and one inside llvmlite's ctypes
callbacks is ignored and leaves a half-built library ("no compiled object yet"), so the solve
failed instead of returning its best answer, and later solves failed too. The first call
therefore runs in a helper thread (`run_in_helper`); an interrupted one finishes in the
background, and a later call waits for it on the import lock or numba's compiler lock. Every later
call runs directly.
"""

from __future__ import annotations

import importlib

from ..helper_thread import run_in_helper

__all__ = ["call_compiled"]

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
