"""bnsym.scale: BNSYM_SCALE picks the Monte Carlo sizes."""

from __future__ import annotations

import pytest

from bnsym import scale


@pytest.mark.parametrize("name", ["test", "book", "paper"])
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
    test, book, paper = (scale.SCALES[name] for name in ("test", "book", "paper"))
    for field in ("width", "n_networks", "depth"):
        assert getattr(test, field) < getattr(book, field)
    assert paper.n_networks > book.n_networks and paper.depth > book.depth


@pytest.mark.parametrize("value", ["huge", "", "tests"])
def test_unknown_scale(monkeypatch, value):
    monkeypatch.setenv("BNSYM_SCALE", value)
    with pytest.raises(ValueError, match="not a known scale.*test, book, paper"):
        scale.current()
