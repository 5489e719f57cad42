"""bnsym.scale: BNSYM_SCALE picks the Monte Carlo sizes."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest

from bnsym import scale

NAMES = ("test", "book", "paper")
CHAPTERS = [field.name for field in fields(scale.Scale) if field.name not in ("name", "width", "n_networks", "depth")]
WHOLE_SPLIT = ("n_train", "n_test")  # None: every example of the split, a size that may differ between scales
# Sizes traded for width: the paper scale's condition numbers take products of wider matrices than the book's, so
# fewer and shorter ones.
TRADED = {("products", "conditioning", "depth"), ("products", "conditioning", "n_networks")}


def experiments(chosen: scale.Scale) -> dict[tuple[str, str], scale.Sizes]:
    """(chapter, experiment) -> the experiment's sizes at this scale."""
    return {(chapter, field.name): getattr(getattr(chosen, chapter), field.name)
            for chapter in CHAPTERS for field in fields(getattr(chosen, chapter))}


def used(sizes: scale.Sizes) -> dict[str, object]:
    """The fields an experiment sets."""
    return {field.name: getattr(sizes, field.name) for field in fields(sizes) if getattr(sizes, field.name) is not None}


def largest(value: object) -> float:
    """A size to order scales by: the size itself, the largest of several, inf for a whole split (None)."""
    return math.inf if value is None else max(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize("name", NAMES)
def test_named_scales(monkeypatch, name):
    monkeypatch.setenv("BNSYM_SCALE", name)
    chosen = scale.current()
    assert chosen is scale.SCALES[name] and chosen.name == name
    assert chosen.width > 0 and chosen.n_networks > 0 and chosen.depth > 0


def test_default_is_book(monkeypatch):
    monkeypatch.delenv("BNSYM_SCALE", raising=False)
    assert scale.current().name == "book"


def test_spelling_is_forgiving(monkeypatch):
    monkeypatch.setenv("BNSYM_SCALE", " Paper ")
    assert scale.current().name == "paper"


def test_sizes_are_ordered():
    """test runs in seconds: it is the smallest in every size; paper has the most networks."""
    test, book, paper = (scale.SCALES[name] for name in NAMES)
    for field in ("width", "n_networks", "depth"):
        assert getattr(test, field) < getattr(book, field)
    assert paper.n_networks > book.n_networks and paper.depth > book.depth


def test_every_chapter_has_positive_sizes_at_every_scale():
    """Every experiment sets the same sizes at every scale (a whole split aside), each a positive whole number or an
    increasing tuple of them; learning rates are positive (None: the library's choice)."""
    chapters = {name: experiments(scale.SCALES[name]) for name in NAMES}
    assert CHAPTERS and all(chapters[name].keys() == chapters["test"].keys() for name in NAMES)
    for key in chapters["test"]:
        sets = {name: set(used(chapters[name][key])) - set(WHOLE_SPLIT) for name in NAMES}
        assert sets["test"] and sets["test"] == sets["book"] == sets["paper"], (key, sets)
        for name in NAMES:
            for field, value in used(chapters[name][key]).items():
                if field == "learning_rates":
                    assert value and all(rate is None or rate > 0 for rate in value), (name, key, value)
                elif isinstance(value, tuple):
                    assert value and all(isinstance(v, int) and v > 0 for v in value), (name, key, field, value)
                    assert list(value) == sorted(set(value)), (name, key, field, value)
                else:
                    assert isinstance(value, int) and value > 0, (name, key, field, value)


def test_chapter_sizes_grow_from_test_to_paper():
    """test <= book <= paper in every size (the largest of several; sizes traded for width aside), and each
    chapter's test run is smaller than its book run somewhere."""
    test, book, paper = (experiments(scale.SCALES[name]) for name in NAMES)
    smaller = set()
    for key, sizes in test.items():
        for field in (set(used(sizes)) | set(used(book[key]))) - {"learning_rates"}:
            low, middle, high = (largest(getattr(chosen[key], field)) for chosen in (test, book, paper))
            assert low <= middle, (key, field, low, middle)
            traded = (*key, field) in TRADED and paper[key].width > book[key].width
            assert middle <= high or traded, (key, field, middle, high)
            if low < middle:
                smaller.add(key[0])
    assert smaller == set(CHAPTERS)


@pytest.mark.parametrize("value", ["huge", "", "tests"])
def test_unknown_scale(monkeypatch, value):
    monkeypatch.setenv("BNSYM_SCALE", value)
    with pytest.raises(ValueError, match="not a known scale.*test, book, paper"):
        scale.current()
