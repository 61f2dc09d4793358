"""Where the package's modules live: the design card's layout, read from pyproject.toml's
``package-dir`` (``incsched/``, and the top-level ``solvers/`` and ``data/`` installed as
``incsched.solvers`` and ``incsched.data``), so the tests walk the tree the way the build does."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def package_dirs() -> dict[str, Path]:
    """Dotted package -> its folder in the repository, for every mapped package."""
    return {pkg: ROOT / folder for pkg, folder in pyproject()["tool"]["setuptools"]["package-dir"].items()}


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module the wheel installs (the mapped folders, each once)."""
    dirs = package_dirs()
    out = {}
    for pkg, folder in dirs.items():
        others = [d for p, d in dirs.items() if p != pkg and d.is_relative_to(folder) and d != folder]
        for path in sorted(folder.rglob("*.py")):
            if any(path.is_relative_to(d) for d in others):
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([pkg, *parts])] = path
    return out
