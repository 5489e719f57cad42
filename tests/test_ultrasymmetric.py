"""Ultrasymmetric operators (bnsym.meanfield.ultrasymmetric): the symbolic eigen-decomposition against explicit
matrices.

References are independent of the symbolic pattern counting: explicit B^2-indexed matrices built entry by
entry from the class of each index quadruple, their exact characteristic polynomials over Q (B = 4..7), and
numpy eigen-decompositions for float class values.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import sympy as sp
from sympy.polys.matrices import DomainMatrix

from bnsym.core.geometry import eigen_directions
from bnsym.core.symbols import B
from bnsym.meanfield.ultrasymmetric import (
    CLASSES,
    T,
    centring_operator,
    derive_eigenvalues,
    dos_classes,
    operator_matrix,
    pattern_class,
    projected_eigenvalues,
    symmetric_restriction,
)

x = sp.Symbol("x")


def _random_rational(seed: int) -> dict[str, sp.Rational]:
    rng = random.Random(seed)
    return {name: sp.Rational(rng.randint(-9, 9), rng.randint(1, 7)) for name in CLASSES}


def test_eleven_classes_and_symmetries():
    seen = set()
    for i, j, k, l in itertools.product(range(1, 6), repeat=4):
        name = pattern_class(i, j, k, l)
        seen.add(name)
        assert name == pattern_class(j, i, l, k)  # T_{ij|kl} = T_{ji|lk}
        perm = {1: 3, 2: 5, 3: 1, 4: 2, 5: 4}
        assert name == pattern_class(perm[i], perm[j], perm[k], perm[l])  # permutation invariance
    assert seen == set(CLASSES) and len(CLASSES) == 11


@pytest.mark.parametrize("batch", [4, 5, 6, 7])
def test_characteristic_polynomials_exact(batch):
    """Raw and projected spectra with multiplicities, exactly over Q (Thm 1 / E.61 and Thm 3.6 / E.62)."""
    values = _random_rational(batch)
    at = {T[name]: values[name] for name in CLASSES} | {B: batch}
    result = derive_eigenvalues()
    matrix = DomainMatrix.from_Matrix(symmetric_restriction(values, batch)).convert_to(sp.QQ)
    g = DomainMatrix.from_Matrix(centring_operator(batch)).convert_to(sp.QQ)
    raw = sp.Poly.from_list(matrix.charpoly(), x, domain=sp.QQ)
    projected = sp.Poly.from_list((g * matrix * g).charpoly(), x, domain=sp.QQ)
    p_bsb1, p_l = ((x * sp.eye(2) - result[key].subs(at)).det() for key in ("trivial", "standard"))
    lam = {key: result[key].subs(at) for key in ("G", "L", "M")}
    n_m = batch * (batch - 3) // 2
    assert raw == sp.Poly(p_bsb1 * p_l ** (batch - 1) * (x - lam["M"]) ** n_m, x, domain=sp.QQ)
    assert projected == sp.Poly(x**batch * (x - lam["G"]) * (x - lam["L"]) ** (batch - 1) * (x - lam["M"]) ** n_m, x,
                                domain=sp.QQ)


def test_symmetric_restriction_agrees_with_full_operator():
    values = _random_rational(1)
    batch = 4
    full = np.array(operator_matrix(values, batch), dtype=float)
    lam = np.random.default_rng(0).standard_normal((batch, batch))
    lam = lam + lam.T
    image = (full @ lam.ravel()).reshape(batch, batch)
    pairs = [(k, l) for k in range(batch) for l in range(k, batch)]
    restricted = np.array(symmetric_restriction(values, batch), dtype=float) @ np.array([lam[k, l] for k, l in pairs])
    assert np.allclose(restricted, [image[k, l] for k, l in pairs], atol=1e-12)
    assert np.allclose(image, image.T, atol=1e-12)  # H_B is invariant


@pytest.mark.parametrize("batch", [5, 9])
def test_numeric_eigenvalues_and_directions(batch):
    rng = np.random.default_rng(batch)
    values = {name: float(rng.standard_normal()) for name in CLASSES}
    lam = projected_eigenvalues(values, batch)
    full = np.array(operator_matrix(values, batch), dtype=float)
    g = np.eye(batch) - 1.0 / batch
    project = np.kron(g, g)
    directions = eigen_directions(batch)
    for key, direction in directions.items():
        assert np.allclose(g @ direction @ g, direction, atol=1e-14) and np.isclose(np.linalg.norm(direction), 1)
        image = (project @ full @ direction.ravel()).reshape(batch, batch)
        assert np.allclose(image, lam[key] * direction, atol=1e-10), key
    assert (abs(np.sum(directions["L"] * directions["M"])) < 1e-14
            and abs(np.sum(directions["G"] * directions["L"])) < 1e-14)


def test_dos_reduces_to_two_eigenvalues():
    u, v, w = sp.symbols("u v w")
    result = derive_eigenvalues(dos_classes(u, v, w))
    assert result["trivial"].eigenvals() == {u: 1, w: 1} and result["standard"].eigenvals() == {u: 1, w: 1}
    assert result["M"] == w
    values = {name: float(value.subs({u: 0.7, v: 0.3, w: 1.9})) for name, value in dos_classes(u, v, w).items()}
    spectrum = np.sort(np.linalg.eigvals(np.array(symmetric_restriction(values, 6), dtype=float)).real)
    assert np.allclose(spectrum[:6], 0.7) and np.allclose(spectrum[6:], 1.9)  # u on 6 diagonal modes, w on 15 others


def test_missing_classes_are_an_error():
    with pytest.raises(ValueError, match="missing ultrasymmetric classes"):
        projected_eigenvalues({"11|11": 1.0}, 6)
