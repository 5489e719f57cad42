"""bnsym.meanfield.fourier: the Fourier method (Thm 3, eq. 12) as the bn_kernel route method="fourier".

References are independent of the route: the closed-form BSB1 fixed point (Thm F.8) and the Laplace route for
relu, the spherical route (Thm 4) at BSB1 inputs, randomised QMC and plain Monte Carlo of batch norm at generic
inputs, scipy's dblquad for the normalisation of the pair density, and the route itself on finer rules for
its error estimate.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from conftest import bn_monte_carlo, bsb1, random_psd
from scipy import integrate

import bnsym
from bnsym.core.activations import parse_activation
from bnsym.core.symbols import B, u
from bnsym.meanfield import fourier
from bnsym.meanfield.sphere import derive_marginals
from bnsym.sim import mc_tolerance


def _generic(batch: int, seed: int = 0) -> np.ndarray:
    """A generic (not BSB1) covariance, well conditioned on 1^perp."""
    return random_psd(batch, seed=seed) + 0.3 * np.eye(batch)


def test_bsb1_density_is_thm4s_law():
    d = fourier.derive_fourier_density()
    # Thm 4's planar density on the unit disk, from the sphere's own derivation, mapped to the pair's ellipse
    # (area factor (B-1) sin theta_0 = sqrt(B (B-2)))
    thm4 = derive_marginals().result * (1 - u) ** ((B - 5) / 2) / sp.sqrt(B * (B - 2))
    for batch in (4, 5, 8, 33):
        assert float((d.result / thm4).subs({B: batch, u: sp.Rational(1, 3)})) == pytest.approx(1, rel=1e-12)


@pytest.mark.parametrize("batch", [5, 8])
def test_pair_density_integrates_to_one(batch):
    """rho_ij of a generic Sigma, integrated over the pair's ellipse by scipy, is a probability density."""
    lam, vecs = fourier.centred_spectrum(_generic(batch, seed=batch))
    densities = fourier._PairDensities(lam, vecs, batch, 0.0625)
    uniform = densities.uniform

    def rho(v, w):  # (a, b) on the ellipse (B-1)(a^2+b^2)+2ab <= B(B-2); the first pair (0, 1)
        a, b = np.array([[w]]), np.array([[v]])
        u_ = ((batch - 1) * (w * w + v * v) + 2 * w * v) / (batch * (batch - 2))
        return float(densities.ratio(a, b)[0, 0, 0]) * uniform * max(1 - u_, 0.0) ** ((batch - 5) / 2)

    # the ellipse in (a, b): for given a, b ranges between the roots of (B-1) b^2 + 2 a b + (B-1) a^2 - B(B-2)
    def b_range(a, sign):
        disc = max(a * a - (batch - 1) * ((batch - 1) * a * a - batch * (batch - 2)), 0.0)
        return (-a + sign * np.sqrt(disc)) / (batch - 1)

    edge = np.sqrt(batch - 1)
    total, _ = integrate.dblquad(rho, -edge, edge, lambda a: b_range(a, -1), lambda a: b_range(a, 1), epsabs=1e-7)
    assert total == pytest.approx(1, abs=1e-5)


@pytest.mark.parametrize("spec", ["relu", "relu^1.5", "leaky_relu(0.2)"])
@pytest.mark.parametrize("batch", [4, 8])
def test_relu_at_a_bsb1_input_is_the_closed_form_fixed_point(spec, batch):
    estimate = bnsym.bn_kernel(spec, bsb1(batch, 2.0, 0.3), method="fourier", with_error=True)
    exact = bnsym.fixed_point(spec, batch, method="closed_form").matrix
    assert np.all(np.abs(estimate.value - exact) <= estimate.error + 1e-12)
    assert estimate.error.max() < 1e-4


@pytest.mark.parametrize("spec", ["relu", "relu^2"])
@pytest.mark.parametrize("batch", [5, 8])
def test_relu_at_a_generic_input_is_the_laplace_route(spec, batch):
    sigma = _generic(batch, seed=batch)
    estimate = bnsym.bn_kernel(spec, sigma, method="fourier", with_error=True)
    laplace = bnsym.bn_kernel(spec, sigma, method="laplace", with_error=True)
    assert np.all(np.abs(estimate.value - laplace.value) <= estimate.error + laplace.error + 1e-12)


@pytest.mark.parametrize("spec", ["tanh", "gelu", "tanh(gamma=3)"])
def test_smooth_phi_at_a_bsb1_input_is_the_spherical_route(spec):
    sigma = bsb1(8, 1.5, -0.1)
    estimate = bnsym.bn_kernel(spec, sigma, method="fourier", with_error=True)
    spherical = bnsym.bn_kernel(spec, sigma, method="spherical", with_error=True)
    assert np.all(np.abs(estimate.value - spherical.value) <= estimate.error + spherical.error + 1e-12)


@pytest.mark.parametrize("spec", ["tanh", "gelu"])
def test_smooth_phi_at_a_generic_input_is_qmc(spec):
    batch = 6
    sigma = _generic(batch, seed=3)
    estimate = bnsym.bn_kernel(spec, sigma, method="fourier", with_error=True)
    qmc = bnsym.bn_kernel(spec, sigma, method="qmc", with_error=True)
    k = mc_tolerance(16, batch * (batch + 1) // 2)  # 16 scramblings, one comparison per entry
    assert np.all(np.abs(estimate.value - qmc.value) <= estimate.error + k * qmc.error)


def test_generic_input_matches_plain_monte_carlo():
    batch, n = 6, 200_000
    sigma = _generic(batch, seed=4)
    phi = parse_activation("tanh")
    estimate = bnsym.bn_kernel(phi, sigma, method="fourier", with_error=True)
    mean, se = bn_monte_carlo(phi.numpy, sigma, n, seed=5)
    k = mc_tolerance(n, batch * (batch + 1) // 2)
    assert np.all(np.abs(estimate.value - mean) <= estimate.error + k * se)


@pytest.mark.parametrize("spec", ["tanh", "relu"])
@pytest.mark.parametrize("batch", [4, 6])
def test_error_estimate_bounds_the_distance_to_a_finer_rule(spec, batch):
    sigma = _generic(batch, seed=7)
    estimate = fourier.bn_kernel_fourier(parse_activation(spec), sigma)
    finer = fourier.bn_kernel_fourier(parse_activation(spec), sigma, n=48, step=1 / 16)
    assert np.all(np.abs(estimate.value - finer.value) <= estimate.error + 1e-12)


def test_bad_input_is_refused_naming_a_route_that_works():
    sigma = _generic(6)
    with pytest.raises(ValueError, match="eps = 0.*'qmc'"):
        bnsym.bn_kernel("tanh", sigma, eps=0.1, method="fourier")
    rank_two = random_psd(6, rank=2)  # G Sigma G of rank 2 < B - 1: the pair law is degenerate
    with pytest.raises(ValueError, match="full rank B - 1.*'qmc'"):
        bnsym.bn_kernel("tanh", rank_two, method="fourier")
    stretched = np.diag([1e4, 1.0, 1.0, 1.0, 1.0, 1.0])  # condition number about 1e4 on 1^perp
    with pytest.raises(ValueError, match="condition number"):
        bnsym.bn_kernel("tanh", stretched, method="fourier")
    for method in ("qmc", "laplace"):  # the routes the refusal names do answer there
        assert np.all(np.isfinite(bnsym.bn_kernel("relu", rank_two, method=method)))
    with pytest.raises(ValueError, match="unknown method"):
        bnsym.bn_kernel("tanh", sigma, method="Fourier")
