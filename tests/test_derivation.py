"""bnsym.core.derivation: named results are read by name, never by the position of a step."""

from __future__ import annotations

import pytest
import sympy as sp

from bnsym.core.derivation import Derivation
from bnsym.core.symbols import B, alpha


def test_named_steps_are_read_by_name():
    d = Derivation("example")
    d.step("a display step", sp.Eq(sp.Symbol("x"), B))
    d.step("a named step", sp.Eq(sp.Symbol("y"), B - 1), name="y")
    d.step("two at once", sp.Tuple(sp.Eq(sp.Symbol("p"), alpha), sp.Eq(sp.Symbol("q"), 2 * alpha)), name=("p", "q"))
    assert (d["y"], d["p"], d["q"]) == (B - 1, alpha, 2 * alpha)
    assert len(d.steps) == 3


def test_unknown_and_repeated_names_are_refused():
    d = Derivation("example")
    d.step("named", sp.Eq(sp.Symbol("y"), B), name="y")
    with pytest.raises(KeyError, match="has no result 'z'.*'y'"):
        d["z"]
    with pytest.raises(KeyError, match="names two results"):
        d.step("again", sp.Eq(sp.Symbol("y"), B), name="y")
    with pytest.raises(TypeError, match="as many equations"):
        d.step("two names, one equation", sp.Eq(sp.Symbol("y"), B), name=("a", "b"))
