"""One symbol table: every module of bnsym uses the SymPy symbols of bnsym.core.symbols, never its own copies.

Two symbols with the same name but different assumptions are different objects to SymPy, so a derivation
that substitutes one module's B into another's expression silently does nothing. The walk imports every
module under bnsym and collects its module-level Symbols.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections import defaultdict

import sympy as sp

import bnsym
from bnsym.core import symbols


def _module_symbols() -> dict[str, list[tuple[str, sp.Symbol]]]:
    """Symbol name -> [(module, symbol)] for every module-level Symbol of every bnsym module."""
    found = defaultdict(list)
    for info in pkgutil.walk_packages(bnsym.__path__, prefix="bnsym."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, sp.Symbol):
                found[value.name].append((info.name, value))
    return found


def test_every_module_shares_one_object_per_symbol():
    for name, occurrences in _module_symbols().items():
        objects = {id(symbol) for _, symbol in occurrences}
        assert len(objects) == 1, f"{name!r} is declared with different assumptions in {[m for m, _ in occurrences]}"


def test_every_module_level_symbol_comes_from_the_table():
    table = {symbol for symbol in vars(symbols).values() if isinstance(symbol, sp.Symbol)}
    strays = [(module, name) for name, occurrences in _module_symbols().items() for module, symbol in occurrences
              if symbol not in table]
    assert strays == []


def test_the_theory_assumptions():
    assert symbols.B.is_integer and symbols.B.is_positive
    assert symbols.alpha.is_positive
    assert all(x.is_real for x in (symbols.c, symbols.rho, symbols.z, symbols.t, symbols.J1, symbols.Jrho,
                                   symbols.dJrho))
