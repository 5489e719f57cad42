"""bnsym.meanfield.sphere: integration over two coordinates of the batch-norm output (uniform on its sphere).

bnsym projects onto the plane of the two coordinates (polar R, psi); the references are the 1-D
marginal density (1 - t^2)^((B-4)/2) by scipy quad and the catalogue's angular (theta_1, theta_2)
parametrisation by split Gauss-Legendre (conftest.sphere_single, conftest.sphere_pair).
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from conftest import homogeneous, relu, sphere_pair, sphere_single

from bnsym.core.symbols import B
from bnsym.meanfield.sphere import derive_marginals, expect_pair, expect_pair_with_error, pair_angle

BATCH_SIZES = [4, 5, 8, 64]


def test_derived_marginals():
    derivation = derive_marginals()
    assert sp.simplify(derivation.result - (B - 3) / (2 * sp.pi)) == 0
    assert sp.simplify(derivation["E[x_a^2]"] - 1) == 0
    assert sp.simplify(derivation["E[x_a x_b]"] + 1 / (B - 1)) == 0
    assert sp.simplify(derivation["E[t^2]"] - 1 / (B - 1)) == 0


@pytest.mark.parametrize("batch", BATCH_SIZES)
def test_pair_angle(batch):
    assert np.cos(pair_angle(batch)) == pytest.approx(-1 / (batch - 1), rel=1e-14)


@pytest.mark.parametrize("batch", BATCH_SIZES)
def test_moments(batch):
    """E 1 = 1, E x_a = 0, E x_a^2 = 1, E x_a x_b = -1/(B-1); E x_a^4 and E x_a^2 x_b^2 against independent
    quadratures."""
    def moment(f):
        return expect_pair(f, batch)

    assert moment(lambda u, v: np.ones_like(u)) == pytest.approx(1, abs=1e-13)
    assert moment(lambda u, v: u) == pytest.approx(0, abs=1e-13)
    assert moment(lambda u, v: v**3) == pytest.approx(0, abs=1e-12)
    assert moment(lambda u, v: u * u) == pytest.approx(1, abs=1e-13)
    assert moment(lambda u, v: v * v) == pytest.approx(1, abs=1e-13)
    assert moment(lambda u, v: u * v) == pytest.approx(-1 / (batch - 1), abs=1e-13)
    assert moment(lambda u, v: u**4) == pytest.approx(sphere_single(lambda x: x**4, batch), rel=1e-12)
    assert moment(lambda u, v: u * u * v * v) == pytest.approx(sphere_pair(lambda u, v: u * u * v * v, batch),
                                                               rel=1e-12)


def test_fourth_moment_reference_is_right():
    """The 1-D reference itself: E t^4 = 3 / ((B-1)(B+1)) on S^(B-2), so E x^4 = 3 (B-1)/(B+1)."""
    for batch in BATCH_SIZES:
        assert sphere_single(lambda x: x**4, batch) == pytest.approx(3 * (batch - 1) / (batch + 1), rel=1e-12)


@pytest.mark.parametrize("batch", BATCH_SIZES)
@pytest.mark.parametrize("scale", [1.0, 0.4])
def test_relu_and_tanh_against_angular_quadrature(batch, scale):
    pairs = {
        "relu": (lambda u, v: relu(u) * relu(v), (0.0,)),
        "relu^2 diagonal": (lambda u, v: relu(u) ** 4, (0.0,)),
        "tanh": (lambda u, v: np.tanh(u) * np.tanh(v), ()),
        "tanh diagonal": (lambda u, v: np.tanh(u) ** 2, ()),
    }
    for name, (f, kinks) in pairs.items():
        value = expect_pair(f, batch, kinks, scale=scale)
        reference = sphere_pair(lambda u, v: f(scale * u, scale * v), batch, tuple(k / scale for k in kinks))
        assert value == pytest.approx(reference, abs=1e-10), name


@pytest.mark.parametrize("batch", [5, 8, 16])
def test_shifted_kink(batch):
    """relu(z + 2): the kink at z = -2 lies inside the support only for B - 1 > 4 (|x| < sqrt(B-1))."""
    def f(u, v):
        return relu(u + 2) * relu(v + 2)

    value = expect_pair(f, batch, (-2.0,))
    assert value == pytest.approx(sphere_pair(f, batch, (-2.0,)), abs=1e-9)


@pytest.mark.parametrize("batch", BATCH_SIZES)
def test_error_estimate_is_honest(batch):
    """relu^1.5 has an algebraic kink: the n-vs-2n difference must still bound the true error."""
    rho = homogeneous(1.5)

    def f(u, v):
        return rho(u) * rho(v)

    value, error = expect_pair_with_error(f, batch, (0.0,))
    reference = sphere_pair(f, batch, (0.0,), n=400)
    assert abs(value - reference) <= error + 1e-13
    assert error < 1e-6
