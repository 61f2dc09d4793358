"""The ``>>>`` examples in the docstrings run as doctests (issue 12): an example that no longer
matches the code fails here, naming the module and the example.

Modules are found by scanning the sources for ``>>>``, so a new example is tested without being
listed; a module whose optional dependency is missing is skipped, naming it.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

import layout

PACKAGES = ("incsched",)


def _modules_with_examples() -> list[str]:
    return [name for name, path in layout.modules().items() if ">>>" in path.read_text(encoding="utf-8")]


MODULES = _modules_with_examples()


def test_examples_are_found():
    assert {"incsched", "incsched.front_door", "incsched.bounds.stage", "incsched.data"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in PACKAGES:
            raise
        pytest.skip(f"{name} needs {exc.name}, not installed")
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    ran = 0
    for test in finder.find(module, name):
        if test.examples:
            report: list[str] = []
            runner.run(test, out=report.append)
            ran += len(test.examples)
            assert runner.failures == 0, f"{test.name}:\n" + "".join(report)
    assert ran > 0, f"{name} contains '>>>' but no doctest was found in it"
