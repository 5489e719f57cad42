"""Batch norm with epsilon, the tanh gain gamma and the relu shift beta (Yang et al. 2019, R16, R19, Fig 5).

References are independent of bnsym's radial tables: adaptive chi^2 quadrature with a root finder, the eps = 0
routes, closed forms derived by hand (Taylor expansion at 0, orthant probabilities), and plain Monte Carlo of the
batch-norm Jacobian by torch autograd.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch
from scipy import integrate, optimize, stats

import bnsym
from bnsym.core.activations import parse_activation
from bnsym.meanfield.backward import MAX_TRAINABLE_DEPTH_FACTOR
from bnsym.meanfield.epsilon import (
    derive_jacobian,
    derive_premises,
    rate_crossing_eps,
    rate_trajectory,
)
from bnsym.meanfield.forward import bsb1_image

K_SE = 5  # plain Monte Carlo with 2e4 draws: (mean - truth)/SE is close to normal; 5 SE


def test_max_trainable_depth_at_eps_zero():
    """16 xi, vectorised over B on the closed form, equal to 16 / log of the spherical quadrature's rate."""
    batch = np.array([8, 32])
    depth = bnsym.max_trainable_depth("relu", batch)
    assert isinstance(depth, np.ndarray) and depth.shape == batch.shape
    spherical = [bnsym.gradient_rate("relu", int(b), method="spherical") for b in batch]
    np.testing.assert_allclose(depth, MAX_TRAINABLE_DEPTH_FACTOR / np.log(spherical), rtol=1e-9)
    value, error = bnsym.max_trainable_depth("tanh(gamma=0.5)", 16, with_error=True)
    rate = bnsym.gradient_rate("tanh(gamma=0.5)", 16, method="gegenbauer")
    assert isinstance(value, float) and error >= 0
    np.testing.assert_allclose(value, MAX_TRAINABLE_DEPTH_FACTOR / np.log(rate), rtol=1e-8)


def test_derivations():
    assert derive_premises()["scale_gap"] == 0
    assert derive_jacobian(3)["residual"] == sp.zeros(3, 3)


def _relu_q_by_adaptive_quadrature(batch: int, eps: float) -> float:
    """q*(eps) for relu: mu = mu_0 E[tau], q = E[tau]/2, tau = mu s/(mu s + B eps), s ~ chi^2_{B-1}, by scipy.quad."""
    mu0 = bnsym.fixed_point("relu", batch).mu  # eps = 0, closed form (Thm F.8)
    pdf = stats.chi2(batch - 1).pdf

    def mean_tau(mu):
        return integrate.quad(lambda s: mu * s / (mu * s + batch * eps) * pdf(s), 0, np.inf,
                              epsabs=1e-15, epsrel=1e-13, limit=200)[0]
    mu = optimize.brentq(lambda m: mu0 * mean_tau(m) - m, 1e-14, 1.0, xtol=1e-16, rtol=1e-15)
    return 0.5 * mean_tau(mu)


@pytest.mark.parametrize("eps", [1e-4, 1e-2, 0.3])
def test_relu_fixed_point_matches_chi2_quadrature(eps):
    point = bnsym.fixed_point("relu", 32, eps=eps)
    assert point.method == "radial" and not point.collapsed
    assert abs(point.q - _relu_q_by_adaptive_quadrature(32, eps)) < 1e-8
    assert point.error < 1e-8


def test_collapse_thresholds_have_their_closed_forms():
    """Degree 1: eps* = sigma_w^2 mu_0 (B-1)/B; tanh(gamma z): eps* = sigma_w^2 gamma^2 (phi'(0)^2, H largest at 0)."""
    for batch in (8, 32):
        expected = 2.0 * bnsym.fixed_point("relu", batch).mu * (batch - 1) / batch
        assert bnsym.collapse_eps("relu", batch, sigma_w2=2.0) == pytest.approx(expected, rel=1e-12)
    assert bnsym.collapse_eps("tanh(gamma=0.5)", 16) == pytest.approx(0.25, rel=1e-9)
    assert bnsym.collapse_eps("relu^0.75", 16) == np.inf
    below, above = (bnsym.fixed_point("relu", 8, eps=f * bnsym.collapse_eps("relu", 8)) for f in (0.99, 1.01))
    assert not below.collapsed and below.mu > 0 and above.collapsed and above.mu == 0


def test_collapsed_fixed_point_is_phi0_squared():
    point = bnsym.fixed_point("relu(beta=2)", 8, eps=10.0)
    assert point.collapsed and point.q == 4.0 and point.c == 1.0
    np.testing.assert_array_equal(point.matrix, np.full((8, 8), 4.0))


def test_rate_tends_to_the_eps_zero_routes():
    for spec in ("relu", "tanh", "relu(beta=2)"):
        radial, error = bnsym.gradient_rate(spec, 16, eps=1e-12, with_error=True)
        spherical, spherical_error = bnsym.gradient_rate(spec, 16, method="spherical", with_error=True)
        assert abs(radial - spherical) <= error + spherical_error + 1e-10
    eigen = bnsym.forward_eigenvalues("tanh", 16, eps=1e-12)
    spherical = bnsym.forward_eigenvalues("tanh", 16)
    for key in ("L", "M"):
        assert eigen[key] == pytest.approx(spherical[key], rel=1e-8)
    assert abs(eigen["G"]) < 1e-8


@pytest.mark.parametrize("eps", [1e-30, 1e-300])
def test_tiny_eps_is_the_eps_zero_fixed_point_below_one_degree(eps):
    """Degree < 1 never collapses (collapse_eps = inf); a tiny eps once gave w = NaN, reported as collapsed."""
    assert bnsym.collapse_eps("relu^0.75", 8) == np.inf
    point, exact = bnsym.fixed_point("relu^0.75", 8, eps=eps), bnsym.fixed_point("relu^0.75", 8)
    assert not point.collapsed
    assert abs(point.c - exact.c) <= point.error and abs(point.q - exact.q) <= point.error


def test_forward_eigenvalues_at_the_collapse_threshold_are_continuous():
    """identity, B = 4: eps* = 1 up to rounding, where the coarse rule already collapsed (ZeroDivisionError)."""
    threshold = bnsym.collapse_eps("identity", 4)
    below = bnsym.forward_eigenvalues("identity", 4, eps=threshold * (1 - 1e-6))
    for eps in (1.0, threshold):
        at = bnsym.forward_eigenvalues("identity", 4, eps=eps, with_error=True)
        for key, estimate in at.items():
            assert abs(estimate.value - below[key]) <= estimate.error + 1e-5


def test_collapsed_rates_have_their_closed_forms():
    """Past the collapse BN is linear: tanh(gamma z) gives gamma^2 sigma_w^2 / eps; relu gives
    sigma_w^2 ((B-1)/2 + P(x_1 > 0, x_2 > 0)) / (B eps), the orthant probability 1/4 + arcsin(rho)/(2 pi)."""
    assert bnsym.gradient_rate("tanh(gamma=0.5)", 16, eps=10.0, sigma_w2=2.0) == pytest.approx(0.05, rel=1e-7)
    batch, eps = 32, 5.0
    orthant = 0.25 + np.arcsin(-1 / (batch - 1)) / (2 * np.pi)
    expected = ((batch - 1) / 2 + orthant) / (batch * eps)
    assert bnsym.gradient_rate("relu", batch, eps=eps) == pytest.approx(expected, rel=1e-12)
    relu = rate_crossing_eps(parse_activation("relu"), batch, with_error=True)
    assert abs(relu.value - expected * eps) <= relu.error  # transversal: the root finder's bracket
    assert relu.error <= 1e-9 * relu.value
    # tanh: lambda_G = 1/eps past its collapse eps* = 1 and touches 1 from above before it, so the crossing is
    # ill-conditioned: the bound is eps* sqrt(e / c), not the root finder's bracket
    tanh = rate_crossing_eps(parse_activation("tanh"), batch, with_error=True)
    assert abs(tanh.value - 1.0) <= tanh.error < 0.01


def _autograd_rate(spec: str, batch: int, eps: float, n: int, seed: int) -> tuple[float, float]:
    """tr E[J^T G J]/(B-1), J = d phi(BN_eps(h))/dh by torch autograd, h ~ N(0, Sigma*(eps)): mean and SE."""
    phi = parse_activation(spec)
    sigma = torch.as_tensor(bnsym.fixed_point(spec, batch, eps=eps).matrix)
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(n, batch, generator=gen, dtype=torch.float64) @ torch.linalg.cholesky(sigma).T
    g = torch.eye(batch, dtype=torch.float64) - 1.0 / batch

    def layer(x):
        centred = x - x.mean()
        return phi.torch(centred / torch.sqrt(centred.square().mean() + eps))

    jac = torch.func.vmap(torch.func.jacrev(layer))(h)  # (n, B, B)
    values = torch.einsum("nab,ac,ncb->n", jac, g, jac).numpy() / (batch - 1)
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(n))


@pytest.mark.parametrize("spec, eps", [("tanh", 0.1), ("relu", 0.2), ("relu(beta=2)", 0.5), ("relu", 2.0)])
def test_rate_matches_autograd_monte_carlo(spec, eps):
    """The derived rate against back-propagation through BN with eps, h drawn at the fixed point (or, past the
    collapse, at a tiny mu where the rate has reached its limit)."""
    torch.set_num_threads(1)  # many tiny Jacobians: threads only add overhead on a shared CPU
    if bnsym.fixed_point(spec, 8, eps=eps).collapsed:
        rate = bnsym.gradient_rate(spec, 8, eps=eps)
        trajectory = rate_trajectory(parse_activation(spec), 8, eps, mu_start=1e-7, depth=1)
        assert trajectory["rate"][0] == pytest.approx(rate, rel=1e-5)
        return
    mean, se = _autograd_rate(spec, 8, eps, 20_000, seed=3)
    assert abs(mean - bnsym.gradient_rate(spec, 8, eps=eps)) < K_SE * se


def test_forward_g_eigenvalue_is_the_slope_of_the_scalar_map():
    """lambda_G (moment formula) vs a central difference of mu -> mu' = q(mu) - qc(mu) (the BSB1 image)."""
    phi, batch, eps = parse_activation("tanh"), 8, 0.3
    point = bnsym.fixed_point(phi, batch, eps=eps)
    step = 1e-5 * point.mu

    def image_mu(mu):
        image = bsb1_image(phi, batch, mu=mu, eps=eps)
        return image["q"].value - image["qc"].value
    slope = (image_mu(point.mu + step) - image_mu(point.mu - step)) / (2 * step)
    assert bnsym.forward_eigenvalues(phi, batch, eps=eps)["G"] == pytest.approx(slope, abs=1e-6)


def test_rates_are_vectorised_over_eps():
    eps = np.array([0.0, 1e-3, 0.1, 1.0, 10.0])
    rates = bnsym.gradient_rate("tanh", 8, eps=eps)
    singles = [bnsym.gradient_rate("tanh", 8, eps=float(e), method="radial") for e in eps]
    np.testing.assert_allclose(rates, singles, rtol=1e-12)

def test_the_depth_is_inf_where_the_rate_is_within_its_error_of_one():
    """eps = 1 is the collapse of tanh, where lambda_G = sigma_w2 phi'(0)^2 / eps = 1 exactly: 16/abs(log lambda_G)
    is rounding noise there (1.4e16 on one CPU, 1.8e16 or inf on others), so the library must say inf, and why.
    Elsewhere the depth is compared through the well-conditioned rate: exp(16 / depth) = lambda_G^(+-1) to the
    rounding of exp and log at these sizes."""
    eps = np.array([0.0, 1e-3, 0.1, 1.0, 10.0])
    rate = bnsym.gradient_rate("tanh", 8, eps=eps, with_error=True)
    depth = bnsym.max_trainable_depth("tanh", 8, eps=eps, with_error=True)
    unresolved = np.abs(rate.value - 1) <= rate.error
    assert unresolved.tolist() == [False, False, False, True, False]
    assert np.all(np.isinf(depth.value[unresolved])) and "entries [3]" in depth.note
    growth = np.exp(MAX_TRAINABLE_DEPTH_FACTOR / depth.value[~unresolved])
    np.testing.assert_allclose(growth, np.maximum(rate.value, 1 / rate.value)[~unresolved], rtol=1e-12)
    assert np.isinf(bnsym.depth_scale("tanh", 8, eps=1.0))


def test_sigma_b2_drops_out():
    base = bnsym.fixed_point("tanh", 8, eps=0.1)
    assert bnsym.fixed_point("tanh", 8, eps=0.1, sigma_b2=5.0).q == base.q


@pytest.mark.parametrize("kwargs, match", [
    ({"eps": -1.0}, "eps"), ({"eps": float("nan")}, "eps"), ({"eps": float("inf")}, "eps"),
    ({"sigma_w2": 0.0}, "sigma_w2"), ({"sigma_w2": -1.0}, "sigma_w2"), ({"sigma_w2": float("nan")}, "sigma_w2"),
    ({"sigma_b2": -1.0}, "sigma_b2"), ({"eps": 1e300, "sigma_w2": 1e-300}, "overflows")])
def test_bad_input_says_why(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bnsym.fixed_point("relu", 8, **kwargs)
    if "sigma_b2" not in kwargs:
        with pytest.raises(ValueError, match=match):
            bnsym.gradient_rate("relu", 8, **kwargs)


def test_huge_eps_is_finite():
    for spec in ("relu", "tanh"):
        assert bnsym.fixed_point(spec, 8, eps=1e300).collapsed
        rate = bnsym.gradient_rate(spec, 8, eps=np.array([1e6, 1e300]))
        assert np.all(np.isfinite(rate)) and np.all(rate >= 0) and rate[0] > rate[1]
        eigen = bnsym.forward_eigenvalues(spec, 8, eps=1e300)
        assert all(np.isfinite(v) for v in eigen.values())
