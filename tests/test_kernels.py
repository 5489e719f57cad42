"""bnsym.meanfield.kernels: arccosine kernels J_alpha, J_phi and the Gaussian kernel V_phi.

References are independent of bnsym's routes (Price's ladder in SymPy, the hypergeometric series):
the polar-coordinate quadrature of conftest.gaussian_pair_moment, c_alpha by quadrature of the
Gaussian density, exact rank-one algebra, and Monte Carlo.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from scipy.special import gamma

from bnsym.core.activations import parse_activation
from bnsym.meanfield.kernels import (
    arccos_kernel,
    arccos_kernel_derivative,
    arccos_kernel_symbolic,
    c,
    c_alpha,
    c_alpha_symbolic,
    derive_arccos_kernel,
    gaussian_kernel,
    phi_kernel,
    phi_kernel_derivative,
)
from conftest import HOMOGENEOUS, gaussian_pair_moment, homogeneous, random_psd, rho_second_moment

CORRELATIONS = [-0.999999, -0.9, -0.5, -0.1, 0.0, 0.3, 0.7, 0.95, 0.999999]


def _reference_kernel(alpha: float, corr: float) -> float:
    """J_alpha(c) = E[rho_alpha(u) rho_alpha(v)] / c_alpha, both by quadrature."""
    return gaussian_pair_moment(alpha, 1.0, 0.0, [[1.0, corr], [corr, 1.0]]) / rho_second_moment(alpha)


@pytest.mark.parametrize("order", [0, 1, 2, 3])
def test_derived_integer_kernels_match_quadrature(order):
    derivation = derive_arccos_kernel(order)
    assert derivation.steps and derivation.result.free_symbols == {c}
    kernel = sp.lambdify(c, derivation.result, "numpy")
    for corr in CORRELATIONS:
        assert kernel(corr) == pytest.approx(_reference_kernel(order, corr), abs=1e-8)
    # and the numeric kernel is that derivation
    np.testing.assert_allclose(arccos_kernel(order, np.array(CORRELATIONS)), kernel(np.array(CORRELATIONS)),
                               rtol=1e-13, atol=1e-14)  # bnsym clips into [0, 1]


def test_derived_kernels_are_the_catalogue_closed_forms():
    """J_0 = (pi - theta)/pi, J_1 = (sin theta + (pi - theta) cos theta)/pi, J_2 of Sec. 2.1, theta = arccos c."""
    theta = sp.acos(c)
    closed = {
        0: (sp.pi - theta) / sp.pi,
        1: (sp.sin(theta) + (sp.pi - theta) * sp.cos(theta)) / sp.pi,
        2: (3 * sp.sin(theta) * sp.cos(theta) + (sp.pi - theta) * (1 + 2 * sp.cos(theta) ** 2)) / (3 * sp.pi),
    }
    for order, expected in closed.items():
        assert sp.simplify(derive_arccos_kernel(order).result - expected) == 0


def test_negative_order_is_refused():
    with pytest.raises(ValueError, match="order"):
        derive_arccos_kernel(-1)


@pytest.mark.parametrize("alpha", [0.3, 0.75, 1.5, 2.5, 4.0, 5.5])
def test_real_order_kernel_matches_quadrature(alpha):
    values = arccos_kernel(alpha, np.array(CORRELATIONS))
    reference = [_reference_kernel(alpha, corr) for corr in CORRELATIONS]
    np.testing.assert_allclose(values, reference, rtol=0, atol=1e-7)


@pytest.mark.parametrize("alpha", [0.75, 1.5, 2.5])
def test_symbolic_real_order_kernel(alpha):
    a = sp.nsimplify(alpha)
    for corr in (-0.6, 0.2, 0.8):
        assert float(arccos_kernel_symbolic(a).subs(c, corr).evalf(30)) == pytest.approx(
            float(arccos_kernel(alpha, corr)), abs=1e-13)
    assert float(c_alpha_symbolic(a)) == pytest.approx(float(c_alpha(alpha)), rel=1e-14)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 5.5])
def test_c_alpha_is_the_second_moment(alpha):
    assert float(c_alpha(alpha)) == pytest.approx(rho_second_moment(alpha), rel=1e-12)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_continuity_across_integer_orders(order):
    """Integer orders <= 3 use the derived closed form, others the hypergeometric series: no seam."""
    corr = np.linspace(-1, 1, 41)
    for nearby in (order - 1e-9, order + 1e-9):
        np.testing.assert_allclose(arccos_kernel(nearby, corr), arccos_kernel(order, corr), rtol=0, atol=1e-8)


@pytest.mark.parametrize("alpha", [-0.25, 0.0, 0.3, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0])
def test_endpoints_and_special_values(alpha):
    """J(1) = 1, J(-1) = 0, J(0) = Gamma((a+1)/2)^2 / (2 sqrt(pi) Gamma(a + 1/2)) (catalogue Sec. 2.3)."""
    assert arccos_kernel(alpha, 1.0) == pytest.approx(1.0, abs=1e-14)
    assert arccos_kernel(alpha, -1.0) == pytest.approx(0.0, abs=1e-14)
    assert arccos_kernel(alpha, 0.0) == pytest.approx(
        gamma((alpha + 1) / 2) ** 2 / (2 * np.sqrt(np.pi) * gamma(alpha + 0.5)), rel=1e-12)
    values = arccos_kernel(alpha, np.linspace(-1, 1, 201))
    assert np.all(np.isfinite(values)) and np.all(np.diff(values) >= -1e-15)  # increasing (Prop E.11)


@pytest.mark.parametrize("alpha", [0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5])
def test_derivative_ladder_matches_finite_differences(alpha):
    corr = np.linspace(-0.95, 0.95, 23)
    h = 1e-5
    central = (arccos_kernel(alpha, corr + h) - arccos_kernel(alpha, corr - h)) / (2 * h)
    np.testing.assert_allclose(arccos_kernel_derivative(alpha, corr), central, rtol=0, atol=1e-8)
    # J'(1) = alpha^2 / (2 alpha - 1) (catalogue Sec. 2.3)
    assert arccos_kernel_derivative(alpha, 1.0) == pytest.approx(alpha**2 / (2 * alpha - 1), rel=1e-13)


def test_orders_outside_the_domain_are_refused():
    with pytest.raises(ValueError, match="alpha > -1/2"):
        arccos_kernel(-0.5, 0.3)
    with pytest.raises(ValueError, match="alpha > 1/2"):
        arccos_kernel_derivative(0.5, 0.3)


@pytest.mark.parametrize("spec", sorted(HOMOGENEOUS))
def test_phi_kernel_matches_quadrature(spec):
    """c_alpha J_phi(c) = E[phi(u) phi(v)] and J_phi' by finite differences; J_identity(c) = 2c."""
    phi = parse_activation(spec)
    alpha, a, b = HOMOGENEOUS[spec]
    corr = np.array([-0.99, -0.4, 0.0, 0.5, 0.97])
    expected = [gaussian_pair_moment(alpha, a, b, [[1, r], [r, 1]]) for r in corr]
    np.testing.assert_allclose(c_alpha(alpha) * phi_kernel(phi, corr), expected, rtol=0, atol=1e-10)
    assert phi_kernel(phi, 1.0) == pytest.approx(a * a + b * b, rel=1e-14)
    h = 1e-5
    central = (phi_kernel(phi, corr + h) - phi_kernel(phi, corr - h)) / (2 * h)
    np.testing.assert_allclose(phi_kernel_derivative(phi, corr), central, rtol=0, atol=1e-7)
    if spec == "identity":
        np.testing.assert_allclose(phi_kernel(phi, corr), 2 * corr, atol=1e-14)


def test_gaussian_kernel_identity_is_sigma():
    for seed in range(3):
        sigma = random_psd(5, 7, seed)  # generic, with negative correlations
        assert sigma.min() < 0
        np.testing.assert_allclose(gaussian_kernel(parse_activation("identity"), sigma), sigma, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("spec", sorted(HOMOGENEOUS))
def test_gaussian_kernel_matches_pairwise_quadrature(spec):
    sigma = random_psd(3, 3, seed=11)
    alpha, a, b = HOMOGENEOUS[spec]
    expected = np.array([[gaussian_pair_moment(alpha, a, b, sigma[np.ix_([i, j], [i, j])]) for j in range(3)]
                         for i in range(3)])
    np.testing.assert_allclose(gaussian_kernel(parse_activation(spec), sigma), expected, rtol=1e-10, atol=1e-12)


def test_gaussian_kernel_relu_monte_carlo():
    """Plain Monte Carlo, 10^6 samples; SE of each entry = std of relu(h_i) relu(h_j) / sqrt(n); k = 5."""
    sigma = random_psd(3, 3, seed=11)
    n = 1_000_000
    h = np.random.default_rng(7).multivariate_normal(np.zeros(3), sigma, size=n)
    x = np.maximum(h, 0)
    products = x[:, :, None] * x[:, None, :]
    mean, se = products.mean(0), products.std(0, ddof=1) / np.sqrt(n)
    assert np.all(np.abs(gaussian_kernel(parse_activation("relu"), sigma) - mean) < 5 * se)


def test_gaussian_kernel_broadcasts():
    stack = np.stack([random_psd(4, 4, seed) for seed in range(3)])
    phi = parse_activation("relu^1.5")
    together = gaussian_kernel(phi, stack)
    assert together.shape == (3, 4, 4)
    for one, many in zip(stack, together):
        np.testing.assert_array_equal(gaussian_kernel(phi, one), many)


@pytest.mark.parametrize("spec", sorted(HOMOGENEOUS))
def test_gaussian_kernel_degenerate_inputs(spec):
    """Rank one (c = +-1) and zero variance: exact values, no NaN.

    For Sigma = v v^T, h = v g with one g ~ N(0, 1), so E[phi(v_i g) phi(v_j g)] = (phi(v_i) phi(v_j) + phi(-v_i) phi(-v_j)) / 2 * E|g|^(2 alpha)
    by homogeneity, with E|g|^(2 alpha) = 2 c_alpha.
    """
    alpha, a, b = HOMOGENEOUS[spec]
    f = homogeneous(alpha, a, b)
    v = np.array([1.5, -0.5, 0.0, 2.0, -1.0])
    moment = 2 * rho_second_moment(alpha)
    exact = 0.5 * (np.outer(f(v), f(v)) + np.outer(f(-v), f(-v))) * moment
    value = gaussian_kernel(parse_activation(spec), np.outer(v, v))
    assert np.all(np.isfinite(value))
    np.testing.assert_allclose(value, exact, rtol=1e-12, atol=1e-14)
    assert np.all(value[2] == 0) and np.all(value[:, 2] == 0)  # the zero-variance coordinate
    assert np.all(gaussian_kernel(parse_activation(spec), np.zeros((3, 3))) == 0)


def test_gaussian_kernel_needs_homogeneous_phi():
    with pytest.raises(ValueError, match="positive-homogeneous"):
        gaussian_kernel(parse_activation("tanh"), np.eye(3))
    with pytest.raises(ValueError, match="positive-homogeneous"):
        phi_kernel(parse_activation("relu(beta=1)"), 0.5)


def test_gaussian_kernel_extreme_scales():
    sigma = random_psd(3, 3, seed=11)
    phi = parse_activation("relu")
    for t in (1e-170, 1e170):
        np.testing.assert_allclose(gaussian_kernel(phi, t * sigma) / t, gaussian_kernel(phi, sigma), rtol=1e-12)
