"""bnsym.dilution: Philipp et al.'s definitions, Theorem 3, Proposition 7 and the normalised GSC rate.

References are independent of the code under test: finite differences, Monte Carlo over unit vectors and
Gaussian samples, nesting of the two-block law, limits. Tolerance for Monte Carlo: 4.5 standard errors.
"""

import math

import numpy as np
import pytest
import sympy as sp
import torch

import bnsym
from bnsym import dilution
from bnsym.core import symbols
from bnsym.dilution import (
    composed_dilution,
    datapoint_gsc,
    diluted_rate,
    first_order_diluted_rate,
    fit_explosion,
    normalised_gsc_rate,
    qm_norm,
    undiluted_rate,
)

K_SE = 4.5


def test_module_is_importable_as_attribute():
    import bnsym

    assert bnsym.dilution.diluted_rate is diluted_rate


def test_qm_norm_is_quadratic_mean_over_unit_vectors():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((7, 5))
    u = rng.standard_normal((200_000, 5))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    lengths_sq = np.linalg.norm(u @ a.T, axis=1) ** 2
    mean, se = lengths_sq.mean(), lengths_sq.std(ddof=1) / math.sqrt(len(u))
    assert abs(mean - qm_norm(a) ** 2) < K_SE * se


def test_qm_norm_derivation_reduces_to_frobenius():
    d = dilution.derive_qm_norm()
    assert d["minus_frobenius"] == 0


def test_gsc_is_relative_sensitivity_unsquared():
    """Proposition 2: Q_u of the relative output change over the relative input change equals the unsquared GSC."""
    torch.manual_seed(1)
    w1, w2 = torch.randn(30, 20, dtype=torch.float64) / 20**0.5 * 3, torch.randn(10, 30, dtype=torch.float64) / 30**0.5

    def f(v):
        return torch.tanh(torch.tanh(v @ w1.T) @ w2.T)

    x = torch.randn(20, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(f, x).numpy()
    fx = f(x)
    eps = 1e-6
    u = torch.randn(20_000, 20, dtype=torch.float64)
    u /= u.norm(dim=1, keepdim=True)
    ratios = ((f(x + eps * u) - fx).norm(dim=1) / fx.norm()) / (eps / x.norm())
    estimate = ratios.square().mean().sqrt().item()
    se = (ratios.square().std() / ratios.square().mean() / 2 / 20_000**0.5).item()
    unsquared = datapoint_gsc(jac, x.numpy(), fx.detach().numpy())
    assert abs(estimate - unsquared) < K_SE * se * estimate + 1e-5
    assert abs(estimate - unsquared**2) > 50 * se * estimate  # the printed squared form is another number


def test_gsc_rejects_zero_output():
    with pytest.raises(ValueError, match="f_l = 0"):
        datapoint_gsc(np.eye(2), np.ones(2), np.zeros(2))


def test_fit_explosion_recovers_rate_and_intercept():
    layers = np.arange(1, 20)
    r_fit, c_fit = fit_explosion(0.7 * 1.3**layers)
    assert r_fit == pytest.approx(1.3, rel=1e-12) and c_fit == pytest.approx(0.7, rel=1e-12)
    with pytest.raises(ValueError):
        fit_explosion([1.0])


def test_diluted_rate_limits():
    r = np.array([1.1, 2.0, 5.0])
    assert np.allclose(diluted_rate(1.0, np.array([0.1, 1, 10])), 1.0)
    assert np.allclose(diluted_rate(r, 1e-9), r)  # no dilution: the undiluted rate
    assert np.allclose(diluted_rate(r, 1e6), 1.0)  # infinite dilution: the skip's rate


def test_first_order_is_the_derivative_at_r_equal_1():
    ks = np.array([0.3, 1.0, 2.5])
    h = 1e-6
    slope_fd = (diluted_rate(1 + h, ks) - diluted_rate(1 - h, ks)) / (2 * h)
    slope_first = first_order_diluted_rate(2.0, ks) - first_order_diluted_rate(1.0, ks)
    assert np.allclose(slope_fd, slope_first, rtol=1e-8)
    assert np.allclose(first_order_diluted_rate(1.0, ks), 1.0)


def test_second_order_coefficient_matches_finite_differences():
    d = dilution.derive_first_order_diluted_rate()
    c2 = sp.lambdify(symbols.k, d["second_order"])
    h = 1e-4
    for kv in (0.5, 1.0, 3.0):
        second = (diluted_rate(1 + h, kv) - 2 * diluted_rate(1.0, kv) + diluted_rate(1 - h, kv)) / h**2 / 2
        assert second == pytest.approx(c2(kv), rel=1e-5)


def test_undiluted_rate_inverts():
    r = np.linspace(1.01, 4, 7)
    for kv in (0.5, 1, 4):
        assert np.allclose(undiluted_rate(diluted_rate(r, kv), kv), r)
    with pytest.raises(ValueError, match="too small"):
        undiluted_rate(0.1, 3.0)


@pytest.mark.parametrize("fn", [diluted_rate, first_order_diluted_rate])
@pytest.mark.parametrize(("r", "k", "which"), [(0.0, 1.0, "r must"), (-1.0, 1.0, "r must"), (2.0, 0.0, "k must"),
                                               (2.0, -3.0, "k must"), (2.0, np.nan, "k must")])
def test_rate_rejects_bad_input(fn, r, k, which):
    with pytest.raises(ValueError, match=which):
        fn(r, k)


def test_composed_dilution_single_block_and_nesting():
    assert composed_dilution([2.5]) == pytest.approx(2.5)
    a, b, c = 0.7, 1.9, 3.0
    nested = composed_dilution([composed_dilution([a, b]), c])
    assert composed_dilution([a, b, c]) == pytest.approx(nested)
    assert composed_dilution([c, a, b]) == pytest.approx(nested)  # the law is symmetric
    batch = composed_dilution(np.array([[1.0, 1.0], [2.0, 2.0]]))
    assert batch.shape == (2,) and batch[1] == pytest.approx(composed_dilution([2.0, 2.0]))


def test_composed_dilution_equal_k_gloss_only_for_few_blocks():
    """The main text's k / sqrt(B): right for B << k^2, wrong for B ~ k^2 (catalogue §7.7)."""
    assert composed_dilution([100.0] * 4) == pytest.approx(100 / 2, rel=1e-3)
    assert composed_dilution([5.0] * 25) < 0.8 * (5 / 5)


@pytest.mark.parametrize(("ks", "message"), [([], "empty"), ([1.0, 0.0], "k_b"), ([1.0, -2.0], "k_b"),
                                             ([np.inf], "k_b")])
def test_composed_dilution_rejects_bad_input(ks, message):
    with pytest.raises(ValueError, match=message):
        composed_dilution(ks)


def test_composition_derivation_steps_vanish():
    d = dilution.derive_composed_dilution()
    assert [eq.rhs for _, eq in d.steps if "minus" in _] == [0, 0, 0]


def test_batch_relu_rate_is_pi_over_pi_minus_1():
    d = dilution.derive_normalised_gsc_rate()
    assert sp.simplify(d["batch_relu"] - sp.pi / (sp.pi - 1)) == 0
    assert normalised_gsc_rate("relu") ** 2 == pytest.approx(math.pi / (math.pi - 1), rel=1e-10)
    assert normalised_gsc_rate("relu", "layer") == pytest.approx(1.0, rel=1e-10)


@pytest.mark.parametrize("phi", ["relu", "relu^1.5", "relu^0.75", "leaky_relu(0.2)", "leaky_relu(-0.5)", "identity"])
def test_homogeneous_moments_match_quadrature(phi):
    """The closed forms of a positive-homogeneous phi against adaptive quadrature of the same phi (its degree
    removed, so that gaussian_moments integrates it)."""
    from dataclasses import replace

    act = bnsym.parse_activation(phi)
    assert dilution.homogeneous_moments(act) == pytest.approx(
        dilution.gaussian_moments(replace(act, degree=None)), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("phi", ["relu^0.5", "relu^0.3"])
def test_homogeneous_slope_moment_is_infinite_at_or_below_degree_one_half(phi):
    """E phi'^2 = alpha^2 E[z^(2 alpha - 2); z > 0] diverges at 0 for alpha <= 1/2; the Gamma formula of c_(alpha-1)
    would continue to a finite value below 1/2. The finite moments still match their closed forms."""
    moments = dilution.homogeneous_moments(bnsym.parse_activation(phi))
    assert math.isinf(moments[2]) and all(math.isfinite(m) and m > 0 for m in moments[:2])


@pytest.mark.parametrize("phi", ["tanh", "gelu", "silu", "erf", "mish", "x*sigmoid(1.702*x)", "tanh(gamma=3)"])
def test_smooth_moments_match_quadrature(phi):
    """Gauss-Hermite (or, where its two rules disagree, as for tanh(gamma=3), quadrature) against adaptive quadrature
    of the same phi told of a kink at 0, which gaussian_moments integrates piecewise."""
    from dataclasses import replace

    act = bnsym.parse_activation(phi)
    assert dilution.gaussian_moments(act) == pytest.approx(
        dilution.gaussian_moments(replace(act, kinks=(0.0,))), rel=1e-12, abs=1e-13)


@pytest.mark.parametrize("phi", ["tanh", "selu", "relu"])
@pytest.mark.parametrize("norm", ["batch", "layer"])
def test_normalised_rate_matches_gaussian_sampling(phi, norm):
    act = bnsym.parse_activation(phi)
    zs = np.random.default_rng(3).standard_normal(2_000_000)
    f, df = act.numpy(zs), act.numpy_derivative(zs)
    denominator = f.var() if norm == "batch" else (f**2).mean()
    assert normalised_gsc_rate(phi, norm) ** 2 == pytest.approx((df**2).mean() / denominator, rel=5e-3)


def test_normalised_rate_rejects_unknown_norm():
    with pytest.raises(ValueError, match="unknown normalisation"):
        normalised_gsc_rate("relu", "group")


def test_selu_forms_agree_and_self_normalise():
    act = bnsym.parse_activation("selu")
    xs = np.linspace(-3, 3, 13)
    sym = sp.lambdify(symbols.z, act.expr, "numpy")(xs)
    assert np.allclose(act.numpy(xs), sym) and np.allclose(act.torch(torch.tensor(xs)).numpy(), sym)
    mean, second, _ = dilution.gaussian_moments(act)
    assert abs(mean) < 1e-3 and second == pytest.approx(1.0, abs=1e-3)  # Klambauer et al.'s fixed point


def test_cli_predict_reports_the_gsc_rate():
    from bnsym.cli import predict

    rates = predict("relu", 8)["gsc_rate"]
    assert rates["batch"] ** 2 == pytest.approx(math.pi / (math.pi - 1)) and rates["layer"] == pytest.approx(1.0)


def test_residual_tail_bound_counts_terms_with_enough_residual_factors():
    """Brute force over the 2^L terms of prod_l (I + R_l) with commuting scalar factors of size p."""
    from itertools import product

    depth, p = 10, 0.3
    brute = [sum(p ** sum(c) for c in product((0, 1), repeat=depth) if sum(c) >= lam) for lam in range(depth + 1)]
    assert [dilution.residual_tail_bound(depth, p, lam) for lam in range(depth + 1)] == pytest.approx(brute, rel=1e-12)
    assert dilution.effective_depth(depth, p, 1e-3) == max(lam for lam, tail in enumerate(brute) if tail >= 1e-3)
    with pytest.raises(ValueError):
        dilution.effective_depth(depth, p, 0.0)
