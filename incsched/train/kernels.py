"""Kernel settings for training: which CPU code paths torch, MKL, oneDNN, numpy, OpenBLAS, numba and
libm may take. A trained checkpoint's bytes depend on them (on one AVX-512 machine the default
kernels and AVX2-pinned ones gave different weights from the same seed and labels), so a training
run names its setting, and the libraries read it from the environment when they load: a run under
a setting is a child process started with that environment (`run_in_child`).

- ``native``: what each library picks for this CPU (AVX-512 and AMX here).
- ``avx2``: torch's ATen, MKL and oneDNN pinned to AVX2 (what an AVX2 machine picks by itself).
- ``portable``: every float kernel on the x86-64 baseline: ATen's scalar build, MKL's conditional
  numerical reproducibility branch COMPATIBLE (Intel documents it as giving the same results on
  any Intel or compatible CPU, given the MKL version and thread count), oneDNN at its lowest ISA,
  numpy's and OpenBLAS's baseline paths, numba compiled for a generic x86-64, glibc's libm
  without its FMA/AVX variants; one thread everywhere; torch's deterministic algorithms; and Adam's
  fused CPU kernel (`adam`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

__all__ = ["KERNEL_SETTINGS", "KERNEL_ENV", "child_environment", "run_in_child", "apply_in_process", "current_kernels", "adam"]

#: The environment variable a child reads its setting's name from.
SETTING_VAR = "INCSCHED_KERNELS"

#: glibc features masked in ``portable``: libm's exp, log, pow, sin... have FMA and AVX2 variants
#: picked at load time; masked, every CPU runs the SSE2 one.
_GLIBC_MASK = ("AVX", "AVX2", "FMA", "FMA4", "AVX512F", "AVX512DQ", "AVX512BW", "AVX512VL", "AVX512CD", "AVX512ER", "AVX512PF",
               "AVX512_VNNI", "AVX512_BF16", "AVX512_FP16", "AVX_VNNI")

KERNEL_SETTINGS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "portable": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        # numpy 2.4 dispatches to these groups above its x86-64-v2 baseline
        "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
        "OPENBLAS_CORETYPE": "Prescott",
        "NUMBA_CPU_NAME": "generic",
        "GLIBC_TUNABLES": "glibc.cpu.hwcaps=" + ",".join(f"-{f}" for f in _GLIBC_MASK),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "NUMBA_NUM_THREADS": "1",
    },
}

#: Every variable some setting sets: a child gets exactly its setting's, none inherited.
KERNEL_ENV: tuple[str, ...] = tuple(sorted({k for env in KERNEL_SETTINGS.values() for k in env}))


def child_environment(setting: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) with every kernel-picking variable removed, then
    ``setting``'s set, and `SETTING_VAR` naming it.

    Raises
    ------
    ValueError
        For an unknown setting.
    """
    if setting not in KERNEL_SETTINGS:
        raise ValueError(f"kernels must be one of {', '.join(KERNEL_SETTINGS)}, got {setting!r}")
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in KERNEL_ENV}
    env.update(KERNEL_SETTINGS[setting])
    env[SETTING_VAR] = setting
    return env


def current_kernels() -> str | None:
    """The setting this process was started under (`run_in_child`), or None."""
    name = os.environ.get(SETTING_VAR)
    if name in KERNEL_SETTINGS and all(os.environ.get(k) == v for k, v in KERNEL_SETTINGS[name].items()):
        return name
    return None


def run_in_child(module: str, argv: Sequence[str], setting: str, *, capture: bool = False) -> subprocess.CompletedProcess:
    """``python -m module *argv`` in a fresh process under ``setting``: the variables must be in
    place before torch, numpy and numba load, so they cannot change in a running process."""
    return subprocess.run([sys.executable, "-m", module, *argv], env=child_environment(setting), check=False,
                          capture_output=capture, text=True)


def apply_in_process(setting: str) -> dict[str, str]:
    """In a child started by `run_in_child`: the settings that live in torch rather than in the
    environment (one thread; deterministic algorithms for ``portable``); returns what the process
    really runs with, for the checkpoint's metrics.

    Raises
    ------
    RuntimeError
        When the process was not started under ``setting`` (torch would already have picked its kernels).
    """
    import torch

    if current_kernels() != setting:
        raise RuntimeError(f"kernels {setting!r} must be set before torch loads: start the run with run_in_child "
                           f"(this process has {SETTING_VAR}={os.environ.get(SETTING_VAR)!r})")
    torch.set_num_threads(1)
    if setting == "portable":
        torch.use_deterministic_algorithms(True)
    return {"setting": setting, "aten_capability": torch.backends.cpu.get_cpu_capability(),
            "deterministic_algorithms": str(torch.are_deterministic_algorithms_enabled()),
            "adam": "fused" if setting == "portable" else "foreach",
            **{k: os.environ[k] for k in KERNEL_ENV if k in os.environ}}


def adam(params, lr: float, **kwargs):
    """``torch.optim.Adam``; under ``portable``, its fused CPU kernel.

    Adam's usual updates (foreach and per tensor) take ``torch.sqrt``, which torch computes with
    MKL's vector math, and that gave other bits on emulated Haswell and EPYC CPUs than on this
    Xeon even under ``MKL_CBWR=COMPATIBLE`` (qemu-x86_64 -cpu Haswell-noTSX / EPYC-Rome, 2026-12-01);
    the fused kernel's square root is the IEEE one, the same on every CPU. The other settings keep
    the usual update, so their checkpoints stay what they were.
    """
    import torch

    if current_kernels() == "portable":
        kwargs["fused"] = True
    return torch.optim.Adam(params, lr=lr, **kwargs)
