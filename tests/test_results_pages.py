"""User documentation stays true: the README is short, for users, and links only to files that
exist; every results page under docs/results was written by the experiment report and names the
command that reproduces it, the machine and the library versions; a seed paper's page opens with
the paper's claim beside ours."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from incsched.experiment.config import shipped_experiments
from incsched.experiment.report import CLAIMS, INDEX

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results"

#: Markdown links and images: [text](target) / ![alt](target).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _local_links(path: Path) -> list[str]:
    return [t.split("#", 1)[0] for t in LINK.findall(path.read_text(encoding="utf-8"))
            if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def _pages() -> list[Path]:
    return sorted(p for p in RESULTS.glob("*.md") if p.name != INDEX)


def test_the_readme_is_at_most_350_lines():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= 350, f"README.md has {n} lines"


def test_the_readme_links_only_to_files_that_exist():
    links = _local_links(README)
    assert any(t.startswith("docs/results/") for t in links)
    missing = [t for t in links if not (ROOT / t).exists()]
    assert not missing, missing
    images = [t for t in LINK.findall(README.read_text()) if t.endswith((".png", ".svg"))]
    assert all(t.startswith("docs/results/") for t in images), images  # figures come from the results pages


def test_the_readme_is_no_lab_notebook():
    """No dates, loads, issue numbers or checkpoint hashes: those belong to docs/results."""
    text = README.read_text(encoding="utf-8")
    for pattern, what in ((r"\b20\d\d-\d\d-\d\d\b", "a date"), (r"\bload (average )?\d", "a machine load"),
                          (r"\bissue #?\d+|#\d{2,}\b", "an issue number"), (r"`[0-9a-f]{8,}(\.\.\.)?`", "a hash"),
                          (r"\b\d\d:\d\d UTC\b", "a time of day"), (r"\bsession\b", "a session note")):
        found = re.search(pattern, text, flags=re.IGNORECASE)
        assert not found, f"README.md holds {what}: {found.group(0)!r}"


def test_every_shipped_experiment_has_a_results_page():
    pages = {p.stem for p in _pages()}
    assert set(shipped_experiments()) <= pages, sorted(set(shipped_experiments()) - pages)


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.stem)
def test_a_results_page_names_its_command_machine_and_versions(page):
    text = page.read_text(encoding="utf-8")
    first = text.split("\n", 1)[0]
    meta = json.loads(re.fullmatch(r"<!-- incsched results page (\{.*\}) -->", first).group(1))  # written by the report
    assert meta["name"] == page.stem
    reproduce = text.split("## Reproduce", 1)[1].split("\n## ", 1)[0]
    assert f"incsched experiment run {page.stem}" in reproduce and "--publish docs/results" in reproduce
    machine = text.split("## Machine and versions", 1)[1]
    for needle in ("- CPU: ", " cores", "load (1-minute average) while rows were written: ", "- build", "| Python |", "| OR-Tools |",
                   "| torch |", "| numpy |"):
        assert needle in machine, f"{page.name}: no {needle!r}"
    assert "commit none" not in text
    missing = [t for t in _local_links(page) if not (page.parent / t).exists()]
    assert not missing, missing


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_a_seed_papers_page_opens_with_its_claim_beside_ours(name):
    page = RESULTS / f"{name}.md"
    text = page.read_text(encoding="utf-8")
    sections = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert sections[0] == "The paper's claim beside ours", sections
    table = text.split("## The paper's claim beside ours", 1)[1].split("\n## ", 1)[0]
    assert f"| | {CLAIMS[name].paper} | ours, this run | how the instances differ |" in table
    assert f"Source: {CLAIMS[name].citation}" in table
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| |")]
    assert rows and re.search(r"\d", rows[0].split(" | ")[2]), rows  # our headline figure, from the run's rows


def test_the_index_lists_every_page():
    index = (RESULTS / INDEX).read_text(encoding="utf-8")
    for page in _pages():
        assert f"]({page.name})" in index, page.name
    missing = [t for t in _local_links(RESULTS / INDEX) if not (RESULTS / t).exists()]
    assert not missing, missing
