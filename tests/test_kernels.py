"""bnsym.meanfield.kernels: arccosine kernels J_alpha, J_phi and the Gaussian kernel V_phi.

References are independent of bnsym's routes (Price's ladder in SymPy, the hypergeometric series):
the polar-coordinate quadrature of conftest.gaussian_pair_moment, c_alpha by quadrature of the
Gaussian density, exact rank-one algebra, and Monte Carlo. The Gauss-Hermite V_phi is checked against
closed forms: erf's arcsine kernel, Isserlis' theorem for the cubic, e^(-(s_ii + s_jj)/2) sinh(s_ij) for
sin, Sigma itself for the identity, and Price's theorem for E[phi'(h_i) phi'(h_j)].
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from conftest import HOMOGENEOUS, gaussian_pair_moment, homogeneous, random_psd, rho_second_moment
from scipy.special import gamma, hyp2f1

from bnsym.core.activations import parse_activation
from bnsym.core.symbols import c
from bnsym.meanfield.kernels import (
    arccos_kernel,
    arccos_kernel_derivative,
    arccos_kernel_symbolic,
    c_alpha,
    c_alpha_symbolic,
    derive_arccos_kernel,
    gauss_hermite_kernel,
    gauss_hermite_pair,
    gauss_hypergeometric,
    gaussian_kernel,
    phi_kernel,
    phi_kernel_derivative,
)

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


@pytest.mark.parametrize("a, b, c_", [(-0.75, -0.75, 0.5), (-0.25, -0.25, 1.5), (0.3, 1.2, 0.5), (-2.5, 0.5, 1.5)])
def test_gauss_hypergeometric_is_scipys(a, b, c_):
    """The Horner series (|x| <= 1/4) and SciPy (elsewhere) give 2F1 to rounding, on both sides of the switch."""
    x = np.concatenate([np.linspace(-0.25, 0.25, 101), [-0.9, -0.3, 0.26, 0.6, 0.99], [0.0]])
    np.testing.assert_allclose(gauss_hypergeometric(a, b, c_, x), hyp2f1(a, b, c_, x), rtol=1e-14, atol=1e-15)
    assert gauss_hypergeometric(a, b, c_, np.zeros(3)).tolist() == [1.0, 1.0, 1.0]


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

    For Sigma = v v^T, h = v g with one g ~ N(0, 1), so
    E[phi(v_i g) phi(v_j g)] = (phi(v_i) phi(v_j) + phi(-v_i) phi(-v_j)) / 2 * E|g|^(2 alpha)
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


def _covariances(batch_size: int = 5) -> np.ndarray:
    """Generic covariances at two scales, one rank-deficient, one with a zero-variance coordinate."""
    low_rank = random_psd(batch_size, 2, seed=3) / 3
    zero_variance = random_psd(batch_size, seed=4)
    zero_variance[1, :] = zero_variance[:, 1] = 0.0
    return np.stack([0.3 * random_psd(batch_size, seed=0), random_psd(batch_size, seed=1), low_rank, zero_variance])


def _erf_kernel(sigma: np.ndarray) -> np.ndarray:
    """E[erf(h_i) erf(h_j)] = (2/pi) arcsin(2 S_ij / sqrt((1 + 2 S_ii)(1 + 2 S_jj))) (Williams 1997)."""
    d = 1 + 2 * np.diagonal(sigma, axis1=-2, axis2=-1)
    return 2 / np.pi * np.arcsin(2 * sigma / np.sqrt(d[..., :, None] * d[..., None, :]))


@pytest.mark.parametrize("spec, closed_form, degree", [
    ("erf", _erf_kernel, 160),
    ("identity", lambda s: s, 8),
    ("cubic", lambda s: (9 * np.diagonal(s, axis1=-2, axis2=-1)[..., :, None] * np.diagonal(s, axis1=-2, axis2=-1)[
        ..., None, :] * s + 6 * s**3), 4),  # Isserlis; exact with 4 nodes (degree 3 + 3 < 8)
    ("sin", lambda s: np.exp(-(np.diagonal(s, axis1=-2, axis2=-1)[..., :, None]
                               + np.diagonal(s, axis1=-2, axis2=-1)[..., None, :]) / 2) * np.sinh(s), 96),
])
def test_gauss_hermite_kernel_matches_closed_forms(spec, closed_form, degree):
    sigma = _covariances()
    value, error = gauss_hermite_kernel(parse_activation(spec), sigma, degree)
    exact = closed_form(sigma)
    assert value.shape == error.shape == sigma.shape
    np.testing.assert_allclose(value, exact, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(value, np.swapaxes(value, -1, -2))
    assert np.all(np.abs(value - exact) <= error + 1e-12)  # the estimate covers the true error


def test_gauss_hermite_error_estimate_shrinks_with_degree():
    """For smooth phi the halving estimate bounds the true error, which falls geometrically (faster for smaller
    Sigma: erf(h) is steeper on the scale of h when Sigma is larger)."""
    sigma = np.stack([random_psd(5, seed=1), 3 * random_psd(5, seed=2)])
    exact = _erf_kernel(sigma)
    errors = []
    for degree in (16, 32, 64):
        value, estimate = gauss_hermite_kernel(parse_activation("erf"), sigma, degree)
        true_error = np.abs(value - exact)
        assert np.all(true_error <= estimate + 1e-15)
        errors.append(true_error.max(axis=(-2, -1)))
    small, large = np.transpose(errors)
    assert small[0] > 10 * small[1] > 100 * small[2]
    assert np.all(large > small) and large[0] > 10 * large[2]


def test_gauss_hermite_relu_converges_slowly_to_the_arccosine_kernel():
    """Kinked phi: the error decays only like 1 / degree (hence the docstring's advice)."""
    sigma = random_psd(4, seed=5)
    phi = parse_activation("relu")
    exact = gaussian_kernel(phi, sigma)
    errors = [np.abs(gauss_hermite_kernel(phi, sigma, degree).value - exact).max() for degree in (32, 64, 128)]
    assert all(e < 1 / degree for e, degree in zip(errors, (32, 64, 128)))
    assert 1.5 < errors[0] / errors[1] < 3 and 1.5 < errors[1] / errors[2] < 3


def test_gauss_hermite_pair_price_theorem():
    """E[phi'(h_1) phi'(h_2)] = d/ds12 E[phi(h_1) phi(h_2)] (Price), with phi = erf and psi given apart."""
    s11, s22, s12 = sp.symbols("s11 s22 s12", positive=True)
    kernel = 2 / sp.pi * sp.asin(2 * s12 / sp.sqrt((1 + 2 * s11) * (1 + 2 * s22)))
    slope = sp.lambdify((s11, s22, s12), sp.diff(kernel, s12))
    v11, v22, v12 = np.array([0.5, 1.0, 2.0]), np.array([1.0, 0.3, 2.5]), np.array([0.2, -0.4, 2.1])
    erf_slope = parse_activation("erf").numpy_derivative
    value, error = gauss_hermite_pair(erf_slope, v11, v22, v12, degree=160)
    np.testing.assert_allclose(value, slope(v11, v22, v12), rtol=1e-12)
    assert np.all(np.abs(value - slope(v11, v22, v12)) <= error + 1e-15)
    # psi apart from phi: E[erf(h_1) h_2] = s12 E[erf'(h_1)] (Stein), E[erf'(h_1)] = 2 / sqrt(pi (1 + 2 s11))
    value, _ = gauss_hermite_pair(parse_activation("erf"), v11, v22, v12, degree=160, psi=lambda x: x)
    np.testing.assert_allclose(value, v12 * 2 / np.sqrt(np.pi * (1 + 2 * v11)), rtol=1e-12)


def test_gauss_hermite_kernel_broadcasts_and_takes_a_function():
    stack = _covariances(4)
    value, error = gauss_hermite_kernel(np.tanh, stack, 48)
    for one, v, e in zip(stack, value, error):
        alone = gauss_hermite_kernel(parse_activation("tanh"), one, 48)
        assert alone.method == "gauss_hermite"
        np.testing.assert_allclose(alone.value, v, rtol=1e-14, atol=1e-16)
        np.testing.assert_allclose(alone.error, e, rtol=1e-10, atol=1e-16)


@pytest.mark.parametrize("sigma, degree, match", [
    (np.ones(3), 16, "square"), (np.ones((2, 3)), 16, "square"),
    (np.array([[1.0, 0.5], [0.4, 1.0]]), 16, "symmetric"), (np.array([[-1.0, 0.0], [0.0, 1.0]]), 16, ">= 0"),
    (np.array([[1.0, 2.0], [2.0, 1.0]]), 16, "positive semidefinite"),
    (np.array([[np.nan, 0.0], [0.0, 1.0]]), 16, "finite"), (np.eye(2), 1, "degree"), (np.eye(2), 2.5, "degree"),
])
def test_gauss_hermite_kernel_bad_input(sigma, degree, match):
    with pytest.raises(ValueError, match=match):
        gauss_hermite_kernel(parse_activation("tanh"), sigma, degree)
