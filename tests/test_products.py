"""bnsym.products against independent references: series inversion, textbook densities, explicit matrices,
enumeration, quadrature and particle simulation."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
import torch
from scipy import integrate
from scipy.special import digamma

from bnsym import products
from bnsym.core.symbols import N_width, d
from bnsym.sim import mc_tolerance, mean_and_se


def _series_moments(m: int, order: int) -> list[int]:
    """Coefficients of psi = z (1 + psi)^(M+1) by fixed-point iteration on truncated power series."""
    psi = np.zeros(order + 1, dtype=object)
    for _ in range(order + 1):
        power = np.zeros(order + 1, dtype=object)
        power[0] = 1
        one_plus = psi.copy()
        one_plus[0] += 1
        for _ in range(m + 1):
            power = np.array([sum(power[i] * one_plus[n - i] for i in range(n + 1)) for n in range(order + 1)],
                             dtype=object)
        psi = np.concatenate([[0], power[:-1]])
    return [int(v) for v in psi[1:]]


@pytest.mark.parametrize("m", [1, 2, 3, 5])
def test_moments_match_series_inversion(m):
    assert [products.fuss_catalan_moment(k, m) for k in range(1, 6)] == _series_moments(m, 5)


@pytest.mark.parametrize("m", [1, 2, 4, 7])
def test_density_integrates_to_one_and_matches_moments(m):
    for k in range(5):
        assert products.density_moment(k, m) == pytest.approx(products.fuss_catalan_moment(k, m), rel=1e-10)


def test_density_reduces_to_marchenko_pastur_and_cardano():
    x = np.linspace(1e-4, 3.99, 300)
    np.testing.assert_allclose(products.fuss_catalan_density(x, 1), np.sqrt((4 - x) / x) / (2 * np.pi), rtol=1e-10)
    x2 = np.linspace(1e-4, 6.7, 300)
    np.testing.assert_allclose(products.fuss_catalan_density(x2, 2), products.closed_form_density(x2, 2), rtol=1e-10)


@pytest.mark.parametrize("m", [1, 3, 6])
def test_edges(m):
    phi = 1e-7  # x(phi) of eq. (9) near phi = 0 approaches the soft edge
    x_small_phi = math.sin((m + 1) * phi) ** (m + 1) / (math.sin(phi) * math.sin(m * phi) ** m)
    assert products.soft_edge(m) == pytest.approx(x_small_phi, rel=1e-12)
    assert products.fuss_catalan_density(products.soft_edge(m) * 1.001, m) == 0
    c, a = products.hard_edge(m)
    assert a == pytest.approx(-m / (m + 1))
    # the next term of the expansion is of relative size x^(1/(M+1))
    assert products.fuss_catalan_density(1e-30, m) == pytest.approx(c * 1e-30**a, rel=10 * 1e-30 ** (1 / (m + 1)))


def test_bad_input_raises():
    for call in (lambda: products.fuss_catalan_density(1.0, 0), lambda: products.fuss_catalan_density(1.0, 1.5),
                 lambda: products.fuss_catalan_density(np.nan, 2), lambda: products.fuss_catalan_moment(-1, 2),
                 lambda: products.soft_edge(True), lambda: products.closed_form_density(1.0, 3),
                 lambda: products.log_condition_number(np.ones((2, 3, 4))),
                 lambda: products.log_condition_number(np.zeros((1, 2, 2))), lambda: products.gd_rate(0.5),
                 lambda: products.sgd_noise(0.1, 10, 1.0, population=5), lambda: products.residual_growth(-1)):
        with pytest.raises(ValueError):
            call()


def test_condition_number_matches_explicit_product_and_bounds():
    rng = np.random.default_rng(0)
    factors = rng.standard_normal((3, 4, 30, 30)) / math.sqrt(30)
    explicit = [np.linalg.cond(np.linalg.multi_dot(list(f))) for f in factors]
    np.testing.assert_allclose(products.log_condition_number(factors).numpy(), np.log(explicit), rtol=1e-9)
    stretches = products.qr_log_stretches(factors).sum(-2)
    bound = (stretches.max(-1).values - stretches.min(-1).values).numpy()
    assert np.all(bound <= np.log(explicit) + 1e-9)


def test_lyapunov_slope_is_fast_at_the_largest_width():
    """psi(N/2) by SciPy, not SymPy's exact sum of N/2 terms (over 60 s at N = 1e5); reference: 30-digit mpmath."""
    import mpmath

    cpu = time.process_time()  # this process's CPU time: what the test claims, whatever else the machine runs
    for n in (10**5, 10**6):
        exact = (mpmath.digamma(mpmath.mpf(n) / 2) - mpmath.digamma(mpmath.mpf(1) / 2)) / 2
        assert products.lyapunov_slope(n) == pytest.approx(float(exact), rel=1e-13)
    assert time.process_time() - cpu < 5


def test_lyapunov_slope_and_exponents():
    for n in (2, 10, 1000):
        assert products.lyapunov_slope(n) == pytest.approx(0.5 * (digamma(n / 2) - digamma(0.5)), rel=1e-14)
    mu = products.ginibre_lyapunov_exponents(10, 0.3)
    np.testing.assert_allclose(mu, 0.5 * (np.log(2 * 0.3) + digamma((10 - np.arange(10)) / 2)), rtol=1e-12)


def test_gd_rate_and_max_lr_against_explicit_hessian():
    rng = np.random.default_rng(1)
    abar, x = rng.standard_normal((5, 5)), rng.standard_normal((5, 8))
    hessian = 2 * np.kron(x @ x.T, abar.T @ abar)
    eig = np.linalg.eigvalsh(hessian)
    assert products.max_stable_lr(abar, x) == pytest.approx(2 / eig[-1], rel=1e-10)
    kappa = math.sqrt(eig[-1] / eig[0])
    eta = 2 / (eig[0] + eig[-1])
    assert float(products.gd_rate(kappa)) == pytest.approx(max(abs(1 - eta * eig)), rel=1e-10)


def test_sgd_noise_by_enumeration():
    g = np.array([[0.3, -1.0], [2.0, 0.5], [-0.7, 0.2], [1.1, 1.4]])
    variance = np.mean(np.sum((g - g.mean(0)) ** 2, axis=1))
    for replacement, draws in ((True, itertools.product(range(4), repeat=2)),
                               (False, itertools.permutations(range(4), 2))):
        errors = [np.sum((g[list(d)].mean(0) - g.mean(0)) ** 2) for d in draws]
        expected = products.sgd_noise(0.5, 2, variance, None if replacement else 4)
        assert 0.25 * np.mean(errors) == pytest.approx(expected, rel=1e-12)
    for population in (1, 4):  # the whole population in one batch: the gradient is exact (N = 1 was 0/0)
        draws = itertools.permutations(range(population), population)
        errors = [np.sum((g[list(d)].mean(0) - g[:population].mean(0)) ** 2) for d in draws]
        assert products.sgd_noise(0.5, population, variance, population) == 0
        assert 0.25 * np.mean(errors) < 1e-28  # rounding of the means


def test_alignment_ratio_against_quadrature():
    def folded(mu):
        return integrate.quad(lambda z: abs(z + mu) * math.exp(-z * z / 2) / math.sqrt(2 * math.pi), -np.inf, np.inf)[0]

    for n, m in ((16, 0.0), (16, 0.4), (400, 0.05)):
        assert float(products.alignment_ratio(n, m)) == pytest.approx(
            n * folded(m) / (math.sqrt(n) * folded(math.sqrt(n) * m)), rel=1e-7)
    assert float(products.bias_grad_dominance(60.0, 10, 128)) == pytest.approx(128 * 9 / 10)


def test_residual_growth_against_particles():
    blocks, particles = 8, 200_000
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(particles, generator=gen, dtype=torch.float64)
    q = [1.0]
    for _ in range(blocks):
        x = torch.relu(x + math.sqrt(x.square().mean() / 2) * torch.randn(particles, generator=gen,
                                                                          dtype=torch.float64))
        q.append(float(x.square().mean()))
    theory = products.residual_growth(blocks)
    # the particle q_L is one draw; its relative SE is about sd(x^2)/mean(x^2)/sqrt(particles) per block
    se = theory[-1] * math.sqrt(blocks) * float((x.square().std() / x.square().mean())) / math.sqrt(particles)
    assert abs(q[-1] - theory[-1]) < mc_tolerance(particles) * se
    mean, _ = mean_and_se(np.diff(products.residual_growth(40, batch_norm=True))[-5:])
    assert 0.8 < mean < 1.0  # linear growth with BN, about 1 per block


def test_qr_method_estimates_the_ginibre_spectrum():
    """The Monte Carlo QR method against the closed form, exponent by exponent, and the same derivation in d."""
    width, s2 = 6, 0.5
    estimate = products.qr_lyapunov_exponents(products.ginibre_sampler(width, s2), width, depth=50, n_products=64,
                                              seed=3)
    exact = products.ginibre_lyapunov_exponents(width, s2)
    assert np.all(np.abs(estimate.value - exact) < mc_tolerance(64, width) * estimate.error)
    assert products.derive_lyapunov(d)["slope"].subs(d, N_width) == products.derive_lyapunov()["slope"]


@pytest.mark.parametrize("call, message", [
    (lambda: products.ginibre_lyapunov_exponents(6, math.inf), "s2 must be a finite number > 0, got inf"),
    (lambda: products.lyapunov_slope("4"), "the width N \\(the factors are N x N\\) must be a whole number, got '4'"),
    (lambda: products.sgd_noise("0.1", 8, 1.0), "lr must be a real number, got '0.1'"),
    (lambda: products.sgd_noise(float("nan"), 8, 1.0), "lr must be a finite number > 0, got nan"),
    (lambda: products.residual_growth(3, q0=math.inf), "q0 .* must be a finite number > 0, got inf"),
    (lambda: products.residual_growth(3, batch_norm="yes"), "batch_norm must be True or False"),
    (lambda: products.qr_log_stretches(np.zeros((1, 2, 2))), "factors give a stretch .* singular"),
])
def test_arguments_follow_the_input_contract(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_large_arguments_stay_finite():
    """gd_rate and bias_grad_dominance evaluate forms in which kappa^2 and e^Delta cannot overflow."""
    kappa = np.array([1.0, 3.0, 1e200])
    np.testing.assert_allclose(products.gd_rate(kappa[:2]), (kappa[:2] ** 2 - 1) / (kappa[:2] ** 2 + 1), rtol=1e-14)
    assert products.gd_rate(kappa[2]) == 1.0
    assert products.bias_grad_dominance(1e4, 10, 128) == pytest.approx(128 * 9 / 10)  # the Delta -> oo limit
    assert products.bias_grad_dominance(-1e4, 10, 128) == pytest.approx(-128 / 10)
    assert products.ginibre_lyapunov_exponents(np.int64(6), 1 / 6).shape == (6,)
