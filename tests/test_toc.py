"""The book's table of contents and the notebooks on disk agree."""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
TOC = ROOT / "_toc.yml"


def _toc_files(node):
    """Every `file:` entry of a (jb-book) table of contents, in order."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("file", "root") and isinstance(value, str):
                yield value
            else:
                yield from _toc_files(value)
    elif isinstance(node, list):
        for item in node:
            yield from _toc_files(item)


def _strip_suffix(entry: str) -> str:
    for suffix in (".md", ".ipynb"):
        if entry.endswith(suffix):
            return entry[: -len(suffix)]
    return entry


@pytest.fixture(scope="module")
def toc_entries():
    toc = yaml.safe_load(TOC.read_text())
    assert toc.get("format") == "jb-book", "_toc.yml must use the jb-book format"
    return [_strip_suffix(entry) for entry in _toc_files(toc)]


def test_toc_has_root_and_chapters(toc_entries):
    assert toc_entries, "_toc.yml lists no files"
    assert toc_entries[0] == "book/intro"


def test_every_toc_entry_exists(toc_entries):
    missing = [
        entry
        for entry in toc_entries
        if not (ROOT / f"{entry}.md").is_file() and not (ROOT / f"{entry}.ipynb").is_file()
    ]
    assert not missing, f"_toc.yml names files that do not exist: {missing}"


def test_toc_entries_unique(toc_entries):
    duplicates = sorted({e for e in toc_entries if toc_entries.count(e) > 1})
    assert not duplicates, f"_toc.yml lists these files more than once: {duplicates}"


def test_every_notebook_is_in_toc(toc_entries):
    notebooks = sorted(p.relative_to(ROOT).with_suffix("").as_posix() for p in (ROOT / "notebooks").glob("*.md"))
    assert notebooks, "no notebooks/*.md found"
    absent = [nb for nb in notebooks if nb not in toc_entries]
    assert not absent, f"notebooks missing from _toc.yml (the book would not show them): {absent}"
