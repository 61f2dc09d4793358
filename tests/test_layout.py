"""The design card's layout, and the module map in docs/architecture.md kept true: every file or
folder it names exists, and every folder of the package is named in it."""

from __future__ import annotations

import re

import layout

ROOT = layout.ROOT
MAP = ROOT / "docs" / "architecture.md"


def test_the_design_cards_top_level():
    for name in ("incsched", "solvers", "data", "tests", "pyproject.toml", "README.md"):
        assert (ROOT / name).exists(), name
    assert layout.package_dirs() == {"incsched": ROOT / "incsched", "incsched.solvers": ROOT / "solvers", "incsched.data": ROOT / "data"}
    assert not (ROOT / "incsched" / "solvers").exists() and not (ROOT / "incsched" / "data").exists()


def test_every_path_the_module_map_names_exists():
    text = MAP.read_text()
    named = set(re.findall(r"`((?:incsched|solvers|data|tests|scripts|docs)/[\w./]*)`", text))
    assert len(named) > 40
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_package_folder_is_in_the_module_map():
    text = MAP.read_text()
    folders = {path.parent.relative_to(ROOT).as_posix() + "/" for name, path in layout.modules().items() if path.name == "__init__.py"}
    missing = sorted(f for f in folders if f not in text and f != "incsched/")
    assert not missing, f"package folders missing from docs/architecture.md: {missing}"
    loose = sorted(p.name for p in (ROOT / "incsched").glob("*.py") if p.name != "__init__.py")
    assert all(f"incsched/{name}" in text for name in loose), [n for n in loose if f"incsched/{n}" not in text]
