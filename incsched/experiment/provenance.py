"""Where a number came from: the code (package version, git commit), the libraries, the machine
(CPU model, cores, load) and the command. Every experiment row carries `environment` once per run
and a load average of its own.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from ..train.kernels import KERNEL_ENV

__all__ = ["environment", "load_average", "git_commit", "cpu_model"]

#: Environment variables that change which kernels run (vector ISA, MKL's reproducibility mode,
#: threads; every one a training kernel setting sets): on an AVX-512 machine,
#: ATEN_CPU_CAPABILITY=avx2 alone changes trained weights.
NUMERIC_ENV = (*KERNEL_ENV, "CUDA_VISIBLE_DEVICES")

#: Libraries whose versions can change a number (solver, numerics, learning, plots).
LIBRARIES = ("ortools", "numpy", "scipy", "torch", "torch-geometric", "numba", "pulp", "networkx", "matplotlib", "ray")


def environment(argv: list[str] | None = None) -> dict[str, Any]:
    """The run's provenance: incsched version and git commit, library versions, Python, CPU, cores,
    command line. Gathered in the driver; rows solved elsewhere also name their ``node``."""
    from .. import __version__

    commit, dirty = git_commit()
    return {
        "incsched": __version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "libraries": _library_versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "environment_variables": {k: os.environ[k] for k in NUMERIC_ENV if k in os.environ},
        "command_line": list(sys.argv if argv is None else argv),
    }


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages now (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@functools.lru_cache(maxsize=1)
def git_commit() -> tuple[str | None, bool | None]:
    """(commit, uncommitted changes?) of the checkout incsched runs from; (None, None) for an
    installed wheel, which has no checkout."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None, None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "incsched"], cwd=root,
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), with its vector extensions: AVX-512 and
    AVX2 machines train to different weights."""
    name, flags = platform.processor() or platform.machine(), ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and name == (platform.processor() or platform.machine()):
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                have = set(value.split())
                flags = ",".join(f for f in ("avx512f", "avx2", "fma") if f in have)
    except OSError:
        pass
    return f"{name} [{flags}]" if flags else name


@functools.lru_cache(maxsize=1)
def _library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = None
    return out
