"""bnsym.arch.kernelmaps: the Hermite moments against independent references (closed forms written here, polar
quadrature of conftest, plain Monte Carlo), the derived maps against the definitions, the cases, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from conftest import HOMOGENEOUS, gaussian_pair_moment
from scipy import integrate

from bnsym import arch
from bnsym.arch import kernelmaps
from bnsym.core.symbols import rho


def _gaussian_mean(f) -> float:
    """E[f(X)], X ~ N(0, 1), by scipy's adaptive quadrature split at 0 (not the panels of kernelmaps)."""
    density = lambda x: f(x) * math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    return integrate.quad(density, -np.inf, 0)[0] + integrate.quad(density, 0, np.inf)[0]


def test_relu_moments_are_the_closed_forms():
    """c_0 = 1/sqrt(2 pi), c_1 = 1/2, c_2 = 1/(2 sqrt(pi)) (E[relu(X) (X^2 - 1)] / sqrt 2 = 1/sqrt(2 pi) / sqrt 2),
    q = E[relu'^2] = 1/2: kappa(0) = 1/pi, kappa'(1) = 1."""
    m = kernelmaps.hermite_moments("relu")
    expected = [1 / math.sqrt(2 * math.pi), 0.5, 1 / (2 * math.sqrt(math.pi))]
    assert np.abs(m.c.value[:3] - expected).max() <= 1e-13
    assert abs(m.second.value - 0.5) <= 1e-14 and abs(m.slope_second.value - 0.5) <= 1e-14
    assert abs(m.kappa_0.value - 1 / math.pi) <= 1e-13 and abs(m.slope_1.value - 1) <= 1e-13
    odd = m.c.value[3::2]
    assert np.abs(odd).max() <= 1e-13  # relu(x) - x/2 = |x|/2 is even: no odd coefficient beyond c_1


@pytest.mark.parametrize("corr", [-0.8, 0.0, 0.3, 0.9])
def test_kappa_of_relu_is_the_polar_quadrature(corr):
    """The series with its tail bound against conftest's polar-coordinate E[relu(h1) relu(h2)] / E[relu^2]."""
    _, a, b = HOMOGENEOUS["relu"]
    reference = gaussian_pair_moment(1.0, a, b, np.array([[1.0, corr], [corr, 1.0]])) / 0.5
    got = kernelmaps.hermite_moments("relu").kappa(corr)
    assert abs(got.value - reference) <= got.error + 1e-10
    assert got.error <= 1e-4  # the tail bound is informative: 200 terms at |rho| <= 0.9


def test_exp_kappa_and_the_derivation_agree():
    """exp: kappa(rho) = exp(rho - 1) (the derivation's symbolic sum) against the numeric series."""
    m = kernelmaps.hermite_moments("exp(x)")
    exact = sp.lambdify(rho, kernelmaps.derive_examples()["exp_kappa"])
    grid = np.linspace(-1, 1, 9)
    assert np.abs(m.kappa(grid).value - exact(grid)).max() <= 1e-12
    assert kernelmaps.derive_examples()["relu_slope_1"] == 1


def test_tanh_moments_against_scipy_quadrature_and_monte_carlo():
    """E[tanh^2], E[tanh'^2] and c_1 = E[X tanh X] by scipy.integrate.quad; kappa(0.6) against plain Monte Carlo
    of 4e6 pairs within 5 standard errors (a single comparison: P(|z| > 5) < 1e-6)."""
    m = kernelmaps.hermite_moments("tanh")
    assert abs(m.second.value - _gaussian_mean(lambda x: math.tanh(x) ** 2)) <= 1e-10
    assert abs(m.slope_second.value - _gaussian_mean(lambda x: (1 - math.tanh(x) ** 2) ** 2)) <= 1e-10
    assert abs(m.c.value[1] - _gaussian_mean(lambda x: x * math.tanh(x))) <= 1e-10
    assert abs(m.c.value[0]) <= 1e-15 and m.kappa_0.value <= kernelmaps.ZERO
    rng = np.random.default_rng(0)
    x, z = rng.standard_normal((2, 4_000_000))
    y = 0.6 * x + math.sqrt(1 - 0.36) * z
    samples = np.tanh(x) * np.tanh(y) / m.second.value
    assert abs(samples.mean() - m.kappa(0.6).value) <= 5 * samples.std() / math.sqrt(samples.size)


def test_the_gap_map_has_no_cancellation():
    """1 - kappa(1 - g) for tiny g equals kappa'(1) g to first order (sigmoid), where 1 - kappa(1 - g) computed
    directly would be rounding."""
    m = kernelmaps.hermite_moments("sigmoid(x)")
    g = 1e-14
    assert abs(m.gap(g).value / g - m.slope_1.value) <= 1e-6
    assert abs(m.gap(0.3).value - (1 - m.kappa(0.7).value)) <= 1e-14


@pytest.mark.parametrize("phi, case", [("tanh", "zero"), ("relu", "one, power law"), ("exp(x)", "one, power law"),
                                       ("sigmoid(x)", "one"), ("gelu", "interior"), ("leaky_relu(0.2)",
                                                                                     "one, power law")])
def test_the_four_cases(phi, case):
    """Each case, and its fixed point is one: kappa(rho*) = rho*."""
    m = kernelmaps.hermite_moments(phi)
    found = kernelmaps.convergence_case(m.kappa_0.value, m.slope_1.value, lambda r: m.kappa(r).value, m.slope)
    assert found.case == case
    image = m.kappa(found.fixed_point)  # at rho* = 1 the series' tail bound holds what 200 terms leave out
    assert abs(image.value - found.fixed_point) <= image.error + 1e-12


def test_the_interior_fixed_point_matches_bnsym_arch():
    """GELU's rho* is a fixed point of bnsym.arch's own kernel of one block [gelu, RMSNorm, Dense] (Gauss-Hermite,
    not the series)."""
    m = kernelmaps.hermite_moments("gelu")
    point = kernelmaps.convergence_case(m.kappa_0.value, m.slope_1.value, lambda r: m.kappa(r).value, m.slope)
    sigma = np.array([[1.0, point.fixed_point], [point.fixed_point, 1.0]])
    out = arch.kernel([arch.Dense(), arch.Activation("gelu"), arch.RMSNorm()], sigma)
    assert abs(out[0, 1] - point.fixed_point) <= 1e-10


def test_the_derived_maps_are_the_definitions():
    """LayerNorm after phi: the correlation of phi(X) - c_0 (definition); the residual map at r = 0 is kappa."""
    m = kernelmaps.hermite_moments("gelu")
    c0, q = m.c.value[0], m.second.value
    weights = m.c.value[1:] ** 2
    centred = (weights * 0.4 ** np.arange(1, len(m.c.value))).sum() / weights.sum()  # kappa without c_0
    assert abs(kernelmaps.lambdified("layer_norm")(m.kappa(0.4).value, m.kappa_0.value) - centred) <= 1e-12
    assert kernelmaps.lambdified("residual")(0.7, 0.4, 0.0) == pytest.approx(0.7, abs=1e-15)
    assert abs(kernelmaps.lambdified("beta_0")(c0, m.c.value[1], q) - (2 - m.c.value[1] ** 2 / (q - c0**2))) \
        <= 1e-15


@pytest.mark.parametrize("bad, match", [("exp(x**2)", "not finite"), ("relu", "terms")])
def test_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        kernelmaps.hermite_moments(bad, terms=10**6 if bad == "relu" else 50)
    with pytest.raises(ValueError, match="correlation"):
        kernelmaps.hermite_moments("tanh").kappa(1.5)


def test_isometry_gap_against_closed_forms_and_bad_grams():
    """Identity: 0; two inputs at correlation e: -log(1 - e^2) / 2 (det of [[1, e], [e, 1]]), at any scale; an
    equicorrelated Gram: -((n - 1) log(1 - r) + log(1 + (n - 1) r)) / n; singular: inf; indefinite or asymmetric:
    ValueError."""
    assert kernelmaps.isometry_gap(np.eye(4)) == pytest.approx(0.0, abs=1e-15)
    e = np.array([0.1, 0.5, 0.9])
    pairs = np.array([[[1.0, x], [x, 1.0]] for x in e])
    assert np.allclose(kernelmaps.isometry_gap(7.0 * pairs), -np.log1p(-e**2) / 2, rtol=1e-12)
    n, r = 6, 0.3
    equal = (1 - r) * np.eye(n) + r
    assert kernelmaps.isometry_gap(equal) == pytest.approx(-((n - 1) * np.log1p(-r) + np.log1p((n - 1) * r)) / n,
                                                           rel=1e-12)
    assert kernelmaps.isometry_gap(np.ones((3, 3))) == np.inf
    for bad, message in ((np.array([[1.0, 2.0], [2.0, 1.0]]), "semi-definite"),
                         (np.array([[1.0, 0.5], [0.0, 1.0]]), "symmetric"), (np.ones(3), "square")):
        with pytest.raises(ValueError, match=message):
            kernelmaps.isometry_gap(bad)


def test_isometry_ratio_of_relu_is_the_closed_form():
    """ReLU: c_0 = 1/sqrt(2 pi), c_1 = 1/2, q = 1/2, so alpha = c_1^2 / (q - c_0^2) = pi / (2 pi - 2), written here;
    and alpha = 2 - beta_0."""
    m = kernelmaps.hermite_moments("relu")
    alpha = np.pi / (2 * np.pi - 2)
    assert m.isometry_ratio.value == pytest.approx(alpha**2, abs=10 * m.isometry_ratio.error + 1e-13)
    assert m.isometry_ratio.value == pytest.approx((2 - m.beta_0.value) ** 2, rel=1e-12)
