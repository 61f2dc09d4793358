"""Where a number came from: the code (package version and build identity: the git commit in a
checkout, else a hash of the installed package's files), the libraries, the machine (CPU model,
cores, load) and the command. Every experiment row carries `environment` once per run and a load
average of its own.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from ..train.kernels import KERNEL_ENV

__all__ = ["environment", "load_average", "git_commit", "build_identity", "build_label", "cpu_model"]

#: Environment variables that change which kernels run (vector ISA, MKL's reproducibility mode,
#: threads; every one a training kernel setting sets): on an AVX-512 machine,
#: ATEN_CPU_CAPABILITY=avx2 alone changes trained weights.
NUMERIC_ENV = (*KERNEL_ENV, "CUDA_VISIBLE_DEVICES")

#: What a checkout builds into the package (pyproject's package-dir, and the file naming it): a
#: change under any of them is a change to the code that ran.
SOURCE_PATHS = ("incsched", "solvers", "data", "pyproject.toml")

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
        "build": build_identity(),
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


def _checkout_root() -> Path | None:
    """The repository incsched runs from, or None (an installed wheel has no checkout)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / ".git").exists() and (root / "pyproject.toml").is_file() else None


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=True).stdout


@functools.lru_cache(maxsize=1)
def git_commit() -> tuple[str | None, bool | None]:
    """(commit, uncommitted changes to the package's sources?) of the checkout incsched runs from;
    (None, None) for an installed wheel, which has no checkout (`build_identity` names it)."""
    root = _checkout_root()
    if root is None:
        return None, None
    try:
        commit = _git(root, "rev-parse", "HEAD").strip()
        status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", *SOURCE_PATHS)
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())


@functools.lru_cache(maxsize=1)
def build_identity() -> dict[str, Any]:
    """What code ran, in a form that tells two builds apart.

    Always: the distribution's version and how it is installed (``wheel``, ``editable``, or
    ``source`` when no distribution is installed), and the SHA-256 of the package's files as they
    lie on disk (``files_sha256``: every file under the imported ``incsched`` package and its
    ``solvers`` and ``data`` packages, by path, byte caches left out). From a git checkout also the
    commit and, with uncommitted changes, the SHA-256 of ``git diff HEAD`` over the sources.
    ``label`` says it in one line, naming which of these identifies the build.
    """
    from .. import __version__

    dist_version, install = _distribution()
    files_sha256, n_files = _package_files_digest()
    out: dict[str, Any] = {"version": __version__, "distribution": dist_version, "install": install,
                           "files_sha256": files_sha256, "files": n_files, "git_commit": None, "git_dirty": None, "diff_sha256": None}
    commit, dirty = git_commit()
    if commit:
        out.update(git_commit=commit, git_dirty=dirty)
        if dirty:
            try:
                diff = _git(_checkout_root(), "diff", "HEAD", "--", *SOURCE_PATHS)
                out["diff_sha256"] = hashlib.sha256(diff.encode("utf-8", "surrogateescape")).hexdigest()
            except (OSError, subprocess.SubprocessError):
                pass
    out["label"] = build_label({"build": out})
    return out


def build_label(env: dict[str, Any]) -> str:
    """One line naming the build an environment (or a row's provenance) was measured with; rows
    written before builds were recorded say that they name only a version."""
    b = env.get("build")
    if not b:
        commit = env.get("git_commit")
        if commit:
            return f"git {commit[:12]}" + (" with uncommitted changes" if env.get("git_dirty") else "")
        return f"incsched {env.get('incsched')} (no git checkout; build identity not recorded by this version)"
    files = f"package files sha256 {b['files_sha256'][:16]}" if b.get("files_sha256") else "package files not hashed"
    if b.get("git_commit"):
        text = f"git {b['git_commit'][:12]}"
        if b.get("git_dirty"):
            text += " with uncommitted changes" + (f" (diff sha256 {b['diff_sha256'][:12]})" if b.get("diff_sha256") else "")
        return f"{text}; {files}"
    return f"incsched {b.get('distribution') or b.get('version')} ({b.get('install')}, no git checkout): {files}"


def _distribution() -> tuple[str | None, str]:
    """(version of the installed distribution that holds the running code, how it is installed:
    ``checkout`` (a git checkout, editable or on the path), ``editable``, ``wheel``, or ``source``
    (no installed distribution holds this code))."""
    from .. import __file__ as init_file

    running = Path(init_file).resolve()
    dists = list(metadata.distributions(name="incsched"))
    if _checkout_root() is not None:
        return (dists[0].version if dists else None), "checkout"
    for dist in dists:
        try:
            direct = json.loads(dist.read_text("direct_url.json") or "{}")
        except (OSError, ValueError):
            direct = {}
        if (direct.get("dir_info") or {}).get("editable"):
            if running.is_relative_to(Path(direct.get("url", "").removeprefix("file://") or "/nowhere").resolve()):
                return dist.version, "editable"
            continue
        # an installer's record (pip writes INSTALLER) whose incsched/__init__.py is the running one;
        # a source tree's egg-info lists its files too, but nothing installed them
        if dist.read_text("INSTALLER") and any(str(f) == "incsched/__init__.py" and Path(dist.locate_file(f)).resolve() == running
                                               for f in dist.files or ()):
            return dist.version, "wheel"
    return None, "source"


def _package_files_digest() -> tuple[str | None, int]:
    """SHA-256 over (path, SHA-256 of contents) of every file of the imported package, in path
    order; paths as installed (``incsched/solvers/...``), so a wheel and its unpacked copy agree."""
    import importlib

    roots: dict[str, Path] = {}
    for name in ("incsched", "incsched.solvers", "incsched.data"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if getattr(module, "__file__", None):
            roots[name.replace(".", "/")] = Path(module.__file__).resolve().parent
    entries: dict[str, str] = {}
    for prefix, root in roots.items():
        for path in root.rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
                continue
            rel = path.relative_to(root).as_posix()
            installed = f"{prefix}/{rel}"
            if any(rel.startswith(f"{p.split('/', 1)[1]}/") for p in roots if p != prefix and p.startswith(prefix + "/")):
                continue  # inside a sub-package hashed under its own root (a wheel nests solvers/ and data/)
            entries[installed] = hashlib.sha256(path.read_bytes()).hexdigest()
    if not entries:
        return None, 0
    digest = hashlib.sha256("".join(f"{k}\0{v}\n" for k, v in sorted(entries.items())).encode()).hexdigest()
    return digest, len(entries)


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
