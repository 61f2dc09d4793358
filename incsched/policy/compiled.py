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
cache for this numba, this source and this CPU: then a first call costs about a second (loading),
not the compile (8.6 s, mostly holding the GIL). Numba keys its cache by CPU too, which its index
file does not show without importing numba, so a first call that compiled or loaded a decoder
leaves a marker beside the cache naming the CPU (`mark_cached`); `make install` compiles both
decoders once (``python -m incsched.policy.warm``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import pickle
import platform
import sys
from pathlib import Path

from ..helper_thread import run_in_helper

__all__ = ["call_compiled", "is_cached", "mark_cached", "cpu_fingerprint"]

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
        mark_cached(kernel)
        return value

    return run_in_helper(first_call, f"compile {kernel}")


def cpu_fingerprint() -> str:
    """This machine's CPU as numba compiles for it (model and feature flags), without importing numba."""
    text = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags", "Features", "CPU part")):
                    text += line
                if line.startswith(("flags", "Features")):
                    break  # the first processor's; every core reports the same
    except OSError:
        pass
    return hashlib.sha256(f"{platform.machine()}|{platform.processor()}|{text}".encode()).hexdigest()[:16]


def _cache_files(kernel: str) -> tuple[Path, str, Path] | None:
    """(source, function name, the marker beside numba's in-tree cache) of ``kernel``; None if not found."""
    module, name = kernel.split(":")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    source = Path(spec.origin)
    return source, name, source.parent / "__pycache__" / f"incsched-cached.{source.stem}.{name}.json"


def _stamp() -> dict:
    """What a cached decoder must have been compiled for: this CPU, this numba, this Python."""
    return {"cpu": cpu_fingerprint(), "numba": importlib.metadata.version("numba"), "python": list(sys.version_info[:2])}


def mark_cached(kernel: str) -> None:
    """Note beside numba's cache that ``kernel`` compiled (or loaded) for this CPU and numba; quietly
    nothing where the folder is read-only (the next process then takes the slow path)."""
    files = _cache_files(kernel)
    if files is None or os.environ.get("NUMBA_CACHE_DIR"):
        return
    try:
        files[2].write_text(json.dumps(_stamp()))
    except (OSError, importlib.metadata.PackageNotFoundError):
        pass


def is_cached(kernel: str) -> bool:
    """Whether numba's cache next to ``kernel``'s source holds it for this numba, source and CPU.

    Numba's in-tree cache: ``__pycache__/<module>.<function>-<line>.py<XY>.nbi``, an index that
    starts with numba's version and is newer than the source it was compiled from, and the marker
    `mark_cached` left naming the CPU. A cache numba keeps elsewhere (``NUMBA_CACHE_DIR``, or a user
    folder when the package's is read-only) reads as not cached: the caller then takes the slow
    path, which is the safe one.
    """
    if kernel in _ready:
        return True
    if os.environ.get("NUMBA_CACHE_DIR") or os.environ.get("NUMBA_DISABLE_JIT"):
        return False
    files = _cache_files(kernel)
    if files is None:
        return False
    source, name, marker = files
    try:
        stamp = _stamp()
        if json.loads(marker.read_text()) != stamp:
            return False  # another CPU, numba or Python compiled it (or nothing said it did)
        version = stamp["numba"]
        built = source.stat().st_mtime
        tag = f"py{sys.version_info.major}{sys.version_info.minor}"
        for index in (source.parent / "__pycache__").glob(f"{source.stem}.{name}-*.{tag}.nbi"):
            if index.stat().st_mtime >= built:
                with index.open("rb") as f:
                    if pickle.load(f) == version:
                        return True
    except (OSError, ValueError, importlib.metadata.PackageNotFoundError, pickle.UnpicklingError, EOFError):
        return False
    return False
