"""Every layer kind of :mod:`bnsym.core.layers` is complete: declared once (spec name, options, summary, example)
in ``KINDS``, with a line in the spec grammar, a parse/describe round trip, an infinite-width map in
``bnsym.arch.network.theory_map`` (or a reason in ``NO_LIMIT``), a twin module in ``bnsym.sim.arch.twin_module``
and a torch reader in ``bnsym.sim.arch.READERS`` (or a reason in ``NOT_READABLE``). A kind declared without the
rest is named with its missing parts.

A new kind touches four files: ``core/layers.py`` (the value and its declaration), ``core/grammar.py`` (its help
line: the help must not import SciPy), ``arch/network.py`` (its theory map) and ``sim/arch.py`` (its twin and
reader).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from bnsym import arch
from bnsym.arch.network import NO_LIMIT, theory_map
from bnsym.core.grammar import SPEC_GRAMMAR
from bnsym.core.layers import KINDS, Activation, Residual, describe, layer_kind, parse_architecture
from bnsym.sim.arch import NOT_READABLE, READERS, torch_network, twin_module

SIGMA0 = 0.6 * np.eye(4) + 0.4


def _round_trips(cls: type) -> bool:
    """The kind's example spec reads as one layer of this kind and describes back to itself."""
    example = KINDS[cls].example
    try:
        (layer,) = parse_architecture(example).layers
    except (ValueError, AttributeError, TypeError):  # a kind without from_spec / spec_options
        return False
    return type(layer) is cls and describe(layer) == example and parse_architecture(describe(layer)).layers == (layer,)


def missing_parts(cls: type) -> list[str]:
    """The parts of a layer kind that are not declared (empty: complete)."""
    name = KINDS[cls].name
    checks = {
        "grammar entry": any(line.lstrip().startswith(name) for line in SPEC_GRAMMAR.splitlines()),
        "parse/describe round trip": _round_trips(cls),
        "theory map (or NO_LIMIT reason)": cls in theory_map.registry or bool(NO_LIMIT.get(cls)),
        "twin module": cls in twin_module.registry,
        "torch reader (or NOT_READABLE reason)": cls in READERS or bool(NOT_READABLE.get(cls)),
    }
    return [part for part, present in checks.items() if not present]


def incomplete() -> dict[str, list[str]]:
    """Every declared kind with missing parts, by spec name."""
    return {KINDS[cls].name: parts for cls in KINDS if (parts := missing_parts(cls))}


def test_every_kind_is_complete():
    assert len(KINDS) >= 5
    assert incomplete() == {}


@pytest.mark.parametrize("cls", list(KINDS), ids=lambda cls: cls.__name__)
def test_every_kind_runs_in_the_theory_and_the_twin(cls):
    """The example of each kind after a Dense: the theory gives a finite kernel (or refuses with the stated
    reason), and the twin's layers give finite outputs of the declared width."""
    net = parse_architecture("dense," + KINDS[cls].example)
    if cls in NO_LIMIT:
        with pytest.raises(ValueError, match="no infinite-width limit"):
            arch.kernel(net, SIGMA0)
    else:
        assert np.all(np.isfinite(arch.kernel(net, SIGMA0, points=2**10, replicates=4)))
    model = torch_network(net, 16, 2, in_features=6, seed=0, device="cpu")
    out = model(torch.randn(2, 4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    assert out.shape == (2, 4, 16) and bool(torch.isfinite(out).all())


@layer_kind("scaleby", ("factor",), "x times a factor", "scaleby(2)")
@dataclass(frozen=True)
class _Declared:
    """A kind declared in core.layers' table only, as a contributor's first step would leave it."""

    factor: float = 1.0


_DECLARATION = KINDS.pop(_Declared)  # declared above; in KINDS only during the tests that ask for it


@pytest.fixture
def declared_only():
    KINDS[_Declared] = _DECLARATION
    try:
        yield _Declared
    finally:
        KINDS.pop(_Declared, None)


def test_a_kind_without_its_parts_is_named_with_what_is_missing(declared_only):
    assert incomplete() == {"scaleby": ["grammar entry", "parse/describe round trip",
                                        "theory map (or NO_LIMIT reason)", "twin module",
                                        "torch reader (or NOT_READABLE reason)"]}
    with pytest.raises(AssertionError):
        test_every_kind_is_complete()
    with pytest.raises(ValueError, match="_Declared has no infinite-width limit in bnsym.arch: no infinite-width map"):
        theory_map(_Declared(2.0), None, None, None)
    with pytest.raises(ValueError, match="_Declared has no torch twin"):
        twin_module(_Declared(2.0), 4, 4, 1, None, None, None)


def test_a_kind_with_stated_reasons_needs_no_map_or_reader(declared_only, monkeypatch):
    monkeypatch.setitem(NO_LIMIT, _Declared, "its law depends on pairs of neurons")
    monkeypatch.setitem(NOT_READABLE, _Declared, "torch has no such module")
    assert incomplete() == {"scaleby": ["grammar entry", "parse/describe round trip", "twin module"]}
    with pytest.raises(ValueError, match="no infinite-width limit in bnsym.arch: its law depends on pairs"):
        theory_map(_Declared(2.0), None, None, None)


def test_activations_and_residuals_have_their_own_syntax():
    """The two kinds outside the name(options) pattern: an activation by its phi, a residual by its branch."""
    net = parse_architecture("dense,res(alpha=0.5,bn,tanh(gamma=0.5),dense)")
    assert isinstance(net.layers[1], Residual) and isinstance(net.layers[1].branch.layers[1], Activation)
