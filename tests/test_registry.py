"""The registry of the papers' numbered items (book/registry.yml) against the chapters that record them.

Read statically from the chapters' sources: every ``log.item(paper, item, status=..., evidence=...)`` call. The
reproduction-status page cannot drift: an item the registry lists is recorded by a chapter or marked missing
(with a reason), a recorded item is in the registry, and its evidence is a label of the recording chapter.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from bnsym.report import ITEM_STATUSES

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = yaml.safe_load((ROOT / "book" / "registry.yml").read_text())
BIB_KEYS = set(re.findall(r"^@\w+\{([^,]+),", (ROOT / "book" / "references.bib").read_text(), re.MULTILINE))
CALL = re.compile(r'log\.item\(\s*"(?P<paper>[^"]+)",\s*"(?P<item>[^"]+)",\s*status="(?P<status>[^"]+)",\s*'
                  r'evidence="(?P<evidence>[^"]+)"(?P<rest>[^\n]*)\)')


def _records() -> list[dict]:
    records = []
    for path in sorted((ROOT / "notebooks").glob("*.md")):
        text = path.read_text()
        assert text.count("log.item(") == len(CALL.findall(text)), f"{path.name}: a log.item call this test cannot read"
        records += [{**m.groupdict(), "chapter": path.stem, "text": text} for m in CALL.finditer(text)]
    return records


RECORDS = _records()
ENTRIES = {(paper, entry["item"]): entry for paper, entries in REGISTRY.items() for entry in entries}


def test_registry_is_well_formed():
    assert set(REGISTRY) <= BIB_KEYS, f"papers not in references.bib: {set(REGISTRY) - BIB_KEYS}"
    assert len(REGISTRY) == 8  # Yang, Philipp, Bjorck, Daneshmand et al.; chapter 14's four
    for paper, entries in REGISTRY.items():
        names = [entry["item"] for entry in entries]
        assert len(names) == len(set(names)), f"{paper}: an item listed twice"
        for entry in entries:
            assert set(entry) <= {"item", "title", "missing"}, entry
            assert entry["title"].strip(), entry
            assert "missing" not in entry or entry["missing"].strip(), entry


def test_every_item_is_recorded_or_marked_missing():
    recorded = {(r["paper"], r["item"]) for r in RECORDS}
    silent = [key for key, entry in ENTRIES.items() if key not in recorded and "missing" not in entry]
    assert not silent, f"items no chapter records and the registry does not mark missing: {silent}"
    both = [key for key, entry in ENTRIES.items() if key in recorded and "missing" in entry]
    assert not both, f"items a chapter records that the registry still marks missing: {both}"


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: f"{r['chapter']}:{r['paper']}:{r['item']}")
def test_a_recorded_item_is_in_the_registry_with_its_evidence(record):
    assert (record["paper"], record["item"]) in ENTRIES, "not in book/registry.yml"
    assert record["status"] in ITEM_STATUSES
    needs_why = record["status"] in ("substituted", "not reproducible", "missing")
    assert ("why=" in record["rest"]) == needs_why, "why= goes with substituted, not reproducible and missing only"
    label = re.escape(record["evidence"])
    assert re.search(rf"^\({label}\)=$|:label: {label}$|name: {label}$", record["text"], re.MULTILINE), \
        f"the chapter has no label {record['evidence']}"


def _shown() -> dict[tuple[str, str], str]:
    """The status the reproduction-status page shows for each recorded item (the book's own rule)."""
    pytest.importorskip("sphinx")
    import sys
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    from bnsym_book.pages import item_status

    from bnsym.report import Item
    by_item: dict[tuple[str, str], list[Item]] = {}
    for r in RECORDS:
        by_item.setdefault((r["paper"], r["item"]), []).append(
            Item(r["chapter"], r["paper"], r["item"], r["status"], r["evidence"]))
    return {key: item_status(records) for key, records in by_item.items()}


def test_an_item_shows_its_weakest_link():
    """A derived theory does not hide a substituted experiment (Yang Figs 5a-d: chapter 5 derives the depth
    scales, chapter 10 trains on digits; Daneshmand Claim 9: chapter 11 derives, chapter 11b trains on digits)."""
    shown = _shown()
    for item in ("Fig. 5a", "Fig. 5b", "Fig. 5c", "Fig. 5d"):
        assert shown[("yang2019meanfield", item)] == "substituted", item
    assert shown[("daneshmand2020batch", "Claim 9")] == "substituted"
    for key, status in shown.items():
        others = {r["status"] for r in RECORDS if (r["paper"], r["item"]) == key} - {"derived"}
        assert status in others or not others, (key, status)
