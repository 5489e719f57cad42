"""bnsym.meanfield.laplace: the Laplace method (eq. 11) for positive-homogeneous phi.

References: scipy quad of the original s-integrals with the catalogue's closed-form kernels (not
bnsym's), plain Monte Carlo of batch norm (conftest.bn_monte_carlo), randomised QMC, and exact algebra
(identity: trace and zero row sums; rank one: two-point law).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from conftest import HOMOGENEOUS, bn_monte_carlo, bsb1, gaussian_pair_moment, homogeneous, random_psd, rho_second_moment
from scipy import integrate

from bnsym.core.activations import parse_activation
from bnsym.core.geometry import centring
from bnsym.core.symbols import B, alpha, mu
from bnsym.meanfield.forward import bsb1_constant
from bnsym.meanfield.laplace import bn_kernel_laplace, derive_bsb1_scale
from bnsym.meanfield.qmc import bn_kernel_qmc

K_SE = 5  # Monte Carlo / QMC tolerance in standard errors (QMC: t-distribution with 15 dof, P(|t| > 5) ~ 2e-4)


def _j1(corr):
    """Catalogue closed form of J_1 (Thm 5), typed in independently of bnsym's SymPy derivation."""
    return (np.sqrt(1 - corr**2) + (np.pi - np.arccos(corr)) * corr) / np.pi


def _j2(corr):
    theta = np.arccos(corr)
    return (3 * np.sin(theta) * np.cos(theta) + (np.pi - theta) * (1 + 2 * np.cos(theta) ** 2)) / (3 * np.pi)


def _v_phi(spec: str, sigma: np.ndarray) -> np.ndarray:
    """V_phi(Sigma) from the catalogue's closed forms (Prop E.10, Cor E.19)."""
    if spec == "identity":
        return sigma
    d = np.sqrt(np.diag(sigma))
    scale = np.outer(d, d)
    corr = np.clip(sigma / scale, -1, 1)
    if spec == "relu":
        return 0.5 * scale * _j1(corr)
    if spec == "leaky_relu(0.2)":
        return 0.5 * scale * ((1 + 0.2**2) * _j1(corr) - 2 * 0.2 * _j1(-corr))
    if spec == "relu^2":
        return 1.5 * scale**2 * _j2(corr)
    raise KeyError(spec)


def _laplace_by_quad(spec: str, sigma: np.ndarray) -> np.ndarray:
    """Eq. (11) integrated over the original s in [0, oo) by scipy quad_vec."""
    batch = sigma.shape[0]
    a = HOMOGENEOUS[spec][0]
    projected = centring(batch) @ sigma @ centring(batch)

    def integrand(s):
        m = np.eye(batch) + 2 * s * projected
        return s ** (a - 1) * np.linalg.det(m) ** -0.5 * _v_phi(spec, projected @ np.linalg.inv(m))

    options = dict(epsabs=0, epsrel=1e-12)
    total = integrate.quad_vec(integrand, 0, 1, **options)[0] + integrate.quad_vec(integrand, 1, np.inf, **options)[0]
    return batch**a / math.gamma(a) * total


LAPLACE_CASES = [(spec, batch) for spec in ("relu", "identity", "relu^2", "leaky_relu(0.2)") for batch in (4, 6, 10)]


def test_bsb1_scale_derivation():
    """K = B^alpha/Gamma(alpha) int s^(alpha-1) (mu/(1+2 s mu))^alpha (1+2 s mu)^(-(B-1)/2) ds, independent of mu."""
    derivation = derive_bsb1_scale()
    assert len(derivation.steps) >= 3
    assert derivation.result.free_symbols == {alpha, B}  # mu has dropped out
    for a, b in [(1.0, 4), (1.5, 5), (2.0, 8), (0.75, 64), (2.5, 6), (1.0, 1000)]:
        value = float(derivation.result.subs({alpha: a, B: b}))
        # the catalogue's kappa_{alpha,B} = (B/2)^alpha Gamma((B-1)/2) / Gamma((B-1)/2 + alpha) (Sec. 2.7)
        kappa = math.exp(a * math.log(b / 2) + math.lgamma((b - 1) / 2) - math.lgamma((b - 1) / 2 + a))
        assert value == pytest.approx(kappa, rel=1e-12)
        for mu_value in (0.3, 7.0):
            def integrand(s):
                return b**a / math.gamma(a) * s ** (a - 1) * (mu_value / (1 + 2 * s * mu_value)) ** a * (
                    1 + 2 * s * mu_value) ** (-(b - 1) / 2)
            reference = integrate.quad(integrand, 0, np.inf, epsabs=0, epsrel=1e-12, limit=200)[0]
            assert value == pytest.approx(reference, rel=1e-9)


def test_bsb1_scale_derivation_is_exact_for_relu():
    """For alpha = 1 the scale is B/(B-1) exactly: (B/2) Gamma((B-1)/2) / Gamma((B+1)/2)."""
    result = derive_bsb1_scale().result
    assert sp.simplify(sp.expand_func(result.subs(alpha, 1)) - B / (B - 1)) == 0
    assert not result.has(mu)


@pytest.mark.parametrize("a", [0.75, 1.0, 1.5, 2.0])
def test_bsb1_constant(a):
    """K_{alpha,B} = c_alpha ((B-1)/2)^alpha Gamma((B-1)/2) / Gamma((B-1)/2 + alpha) (catalogue Sec. 2.7),
    c_alpha by quadrature."""
    phi = parse_activation(f"relu^{a}")
    batch = np.array([4, 5, 8, 16, 64, 1000])
    expected = [rho_second_moment(a) * math.exp(a * math.log((b - 1) / 2) + math.lgamma((b - 1) / 2)
                                                - math.lgamma((b - 1) / 2 + a)) for b in batch]
    np.testing.assert_allclose(bsb1_constant(phi, batch), expected, rtol=1e-11)


@pytest.mark.parametrize("spec, batch", LAPLACE_CASES)
def test_laplace_kernel_matches_s_quadrature(spec, batch):
    sigma = random_psd(batch, batch + 2, seed=batch)
    value, error = bn_kernel_laplace(parse_activation(spec), sigma)
    reference = _laplace_by_quad(spec, sigma)
    np.testing.assert_allclose(value, reference, rtol=0, atol=1e-10 * np.abs(reference).max())
    assert error.shape == value.shape and error.max() < 1e-9


@pytest.mark.parametrize("spec, batch", LAPLACE_CASES)
def test_laplace_kernel_matches_monte_carlo(spec, batch):
    """400k plain Monte Carlo samples of batch norm; SE per entry from conftest.bn_monte_carlo; k = 5."""
    sigma = random_psd(batch, batch + 2, seed=batch)
    value, _ = bn_kernel_laplace(parse_activation(spec), sigma)
    mean, se = bn_monte_carlo(homogeneous(*HOMOGENEOUS[spec]), sigma, n=400_000, seed=batch)
    assert np.all(np.abs(value - mean) < K_SE * se)


@pytest.mark.parametrize("spec, batch", LAPLACE_CASES)
def test_laplace_kernel_matches_qmc(spec, batch):
    """bnsym's own QMC route: SE = std over 16 scramblings / 4; k = 5."""
    sigma = random_psd(batch, batch + 2, seed=batch)
    phi = parse_activation(spec)
    value, _ = bn_kernel_laplace(phi, sigma)
    estimate, se = bn_kernel_qmc(phi, sigma, seed=1)
    assert np.all(np.abs(value - estimate) < K_SE * se + 1e-13)


@pytest.mark.parametrize("batch", [4, 6, 10])
def test_identity_exact_identities(batch):
    """phi = id: x = sqrt(B) y/|y| has |x|^2 = B and sum x = 0, so tr V = B and V 1 = 0 exactly.

    V also commutes with G Sigma G (it is a spectral function of it: V = B E[y y^T / |y|^2]) and, among
    the eigenvectors of G Sigma G, a larger eigenvalue gets a larger weight.
    """
    sigma = random_psd(batch, batch + 2, seed=batch)
    value, _ = bn_kernel_laplace(parse_activation("identity"), sigma)
    assert np.trace(value) == pytest.approx(batch, rel=1e-12)
    np.testing.assert_allclose(value @ np.ones(batch), 0, atol=1e-12)
    projected = centring(batch) @ sigma @ centring(batch)
    np.testing.assert_allclose(value @ projected, projected @ value, atol=1e-12)
    lam, vecs = np.linalg.eigh(projected)
    weights = np.einsum("ik,ij,jk->k", vecs, value, vecs)[1:]  # drop the null direction 1
    assert np.all(np.diff(weights) > 0) and np.all(weights > 0)


@pytest.mark.parametrize("spec", sorted(HOMOGENEOUS))
def test_invariances(spec):
    """V depends on Sigma only through G Sigma G, is scale invariant and permutation equivariant."""
    phi = parse_activation(spec)
    sigma = random_psd(6, 8, seed=2)
    value, _ = bn_kernel_laplace(phi, sigma)
    v = np.random.default_rng(0).standard_normal(6)
    shifted = sigma + 3 * np.ones((6, 6)) + np.outer(v, np.ones(6)) + np.outer(np.ones(6), v)
    np.testing.assert_allclose(bn_kernel_laplace(phi, shifted).value, value, rtol=1e-10, atol=1e-12)
    for t in (1e-6, 1e6):
        np.testing.assert_allclose(bn_kernel_laplace(phi, t * sigma).value, value, rtol=1e-10, atol=1e-12)
    perm = np.array([3, 0, 5, 1, 4, 2])
    np.testing.assert_allclose(bn_kernel_laplace(phi, sigma[np.ix_(perm, perm)]).value, value[np.ix_(perm, perm)],
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("spec", sorted(HOMOGENEOUS))
def test_bsb1_inputs_give_the_fixed_point(spec):
    """Every BSB1 input maps to K_{alpha,B} BSB1(J_phi(1), J_phi(-1/(B-1))), whatever mu (Thm F.8).

    Reference: V_phi(G) from the polar quadrature, times the catalogue's kappa_{alpha,B}.
    """
    a, pa, pb = HOMOGENEOUS[spec]
    batch = 7
    g = (batch - 1) / batch
    kappa = math.exp(a * math.log(batch / 2) + math.lgamma((batch - 1) / 2) - math.lgamma((batch - 1) / 2 + a))
    diag = gaussian_pair_moment(a, pa, pb, [[g, g], [g, g]])
    off = gaussian_pair_moment(a, pa, pb, [[g, -1 / batch], [-1 / batch, g]])
    expected = kappa * bsb1(batch, diag, off / diag)
    for q, c in [(1.0, 0.0), (2.5, 0.4), (0.1, -0.1)]:
        value, _ = bn_kernel_laplace(parse_activation(spec), bsb1(batch, q, c))
        np.testing.assert_allclose(value, expected, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("spec", sorted(HOMOGENEOUS))
def test_rank_one_is_a_two_point_law(spec):
    """rank G Sigma G = 1: y = g w (w in 1^perp), x = +-sqrt(B) w/|w| with probability 1/2 each."""
    batch = 6
    v = np.random.default_rng(4).standard_normal(batch)
    sigma = np.outer(v, v) + 2.0  # the constant adds nothing after centring
    w = v - v.mean()
    x = np.sqrt(batch) * w / np.linalg.norm(w)
    f = homogeneous(*HOMOGENEOUS[spec])
    exact = 0.5 * (np.outer(f(x), f(x)) + np.outer(f(-x), f(-x)))
    value, error = bn_kernel_laplace(parse_activation(spec), sigma)
    np.testing.assert_allclose(value, exact, rtol=1e-12, atol=1e-13)
    assert np.all(np.isfinite(error))


@pytest.mark.parametrize("spec", sorted(HOMOGENEOUS))
def test_rank_two(spec):
    """rank G Sigma G = 2 (a rank-2 Sigma plus a constant); 200k Monte Carlo samples, k = 5."""
    batch = 6
    factor = np.random.default_rng(5).standard_normal((batch, 2))
    sigma = factor @ factor.T + 0.7
    assert np.linalg.matrix_rank(centring(batch) @ sigma @ centring(batch), tol=1e-10) == 2
    value, _ = bn_kernel_laplace(parse_activation(spec), sigma)
    mean, se = bn_monte_carlo(homogeneous(*HOMOGENEOUS[spec]), sigma, n=200_000, seed=6)
    assert np.all(np.abs(value - mean) < K_SE * se + 1e-12)  # + for entries that are exactly 0 in both


def test_ill_conditioned_sigma():
    """Condition number 1e5 still converges (error estimate tiny); the answer agrees with Monte Carlo."""
    q, _ = np.linalg.qr(np.random.default_rng(8).standard_normal((6, 6)))
    sigma = q @ np.diag(np.geomspace(1, 1e-5, 6)) @ q.T
    value, error = bn_kernel_laplace(parse_activation("relu"), sigma)
    assert error.max() < 1e-8
    mean, se = bn_monte_carlo(homogeneous(1.0), sigma, n=200_000, seed=9)
    assert np.all(np.abs(value - mean) < K_SE * se)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_scale_invariance_at_extreme_scales():
    # (1e-160 and 1e160 fail too, but only after the 4096-node rule, ~4 s each: left out of the default run)
    t = 1e-200
    phi = parse_activation("relu")
    sigma = random_psd(6, 8, seed=2)
    np.testing.assert_allclose(bn_kernel_laplace(phi, t * sigma).value, bn_kernel_laplace(phi, sigma).value, rtol=1e-10)
