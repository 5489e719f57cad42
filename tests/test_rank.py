"""bnsym.rank: rank notions, Lyapunov spectra, the BN chain and delta_F, against independent references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bnsym import products, rank
from bnsym.sim import mc_tolerance


def test_rank_notions_on_a_known_spectrum():
    """H = U diag(sqrt(N lambda)) V^T has M's eigenvalues lambda: soft rank, r and numerical rank by hand."""
    lam = np.array([3.0, 1.0, 0.4, 0.0])
    n = 6
    u, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((4, 4)))
    v, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((n, 4)))
    h = u @ np.diag(np.sqrt(n * lam)) @ v.T
    assert rank.rank_tau(h, 0.5) == 2
    assert rank.rank_tau(h, 0.3) == 3
    assert rank.rank_lower_bound(h) == pytest.approx(lam.sum() ** 2 / (lam**2).sum())
    assert rank.numerical_rank(h) == 3
    assert rank.numerical_rank(torch.as_tensor(h, dtype=torch.float32)) == 3


@pytest.mark.parametrize("bad, message", [(np.ones(3), "matrix"), (np.full((2, 2), np.nan), "NaN"),
                                          (np.zeros((3, 4)), "H = 0")])
def test_bad_features_raise(bad, message):
    with pytest.raises(ValueError, match=message):
        rank.rank_lower_bound(bad)


def test_bad_second_moment_raises():
    with pytest.raises(ValueError, match="positive semi-definite"):
        rank.delta_F(np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="symmetric"):
        rank.delta_F(np.array([[1.0, 0.5], [0.1, 1.0]]))
    with pytest.raises(ValueError, match="unit diagonal"):
        rank.delta_F(2 * np.eye(3))
    with pytest.raises(ValueError, match="tau"):
        rank.rank_tau(np.eye(3), 0.0)


def test_lemma1_derivation():
    d = rank.derive_rank_bounds()
    assert d["lagrange_identity"] == 0 and d["part2_limit"] == 1


def test_ginibre_exponents_sum_to_expected_log_determinant():
    """sum_i mu_i = E ln|det W|, estimated independently by Monte Carlo over W with N(0, 1) entries."""
    width = 6
    w = torch.randn(20_000, width, width, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    logdet = torch.linalg.slogdet(w)[1].numpy()
    se = logdet.std(ddof=1) / math.sqrt(len(logdet))
    assert abs(products.ginibre_lyapunov_exponents(width, 1.0).sum() - logdet.mean()) < mc_tolerance(len(logdet)) * se


def test_residual_top_exponent_tends_to_the_ginibre_one():
    """For large gamma, mu_1(I + gamma W) - ln gamma -> mu_1(W)."""
    big = 1e4
    value = products.residual_top_exponent(8, big).value - math.log(big)
    assert value == pytest.approx(products.ginibre_lyapunov_exponents(8, 1.0)[0], abs=1e-3)


def test_m_chain_and_h_chain_agree():
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    a = rank.bn_chain(x, 30, 0.7, 2, seed=3, kind="H")
    b = rank.bn_chain(x @ x.T / 7, 30, 0.7, 2, seed=3, kind="M")
    assert (a - b).abs().max() < 1e-10


def test_delta_F_derivation_and_kernels():
    d = rank.derive_delta_F()
    assert d["moment_residuals"] == 0 and d["pair_sum_residual"] == 0 and d["brute_residual"] == 0
    assert rank.delta_F(np.eye(4)) == pytest.approx(2 * 16 - 2 * 4 - 8 * 4 + 8 * 4)
    assert rank.delta_F(np.ones((5, 5))) == pytest.approx(0.0)  # rank one: no drift
    circulant = np.array([[1, 0.2, -0.1, 0.2], [0.2, 1, 0.2, -0.1], [-0.1, 0.2, 1, 0.2], [0.2, -0.1, 0.2, 1]])
    assert rank.delta_F_spectral(np.linalg.eigvalsh(circulant)) == pytest.approx(rank.delta_F(circulant))


def test_second_order_drift_matches_finite_differences():
    """The closed-form second derivative against a central difference of the full map, on the same two W."""
    eye = torch.eye(4, dtype=torch.float64)
    m = rank.bn_chain(torch.randn(4, 4, generator=torch.Generator().manual_seed(4), dtype=torch.float64), 5)[-1, 0]

    def frob(w: torch.Tensor, g: float) -> float:
        a = (eye + g * w) @ m @ (eye + g * w).T
        s = a.diagonal().rsqrt()
        return float((a * s[:, None] * s[None, :]).square().sum())

    step = 1e-4
    draws = torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)  # as the kernel
    numeric = [(frob(w, step) + frob(w, -step) - 2 * frob(w, 0.0)) / step**2 / 2 for w in draws]
    assert rank.second_order_drift(m, n_draws=2, seed=0).value == pytest.approx(np.mean(numeric), rel=1e-5)


def test_asymmetric_correlation_is_three_quarters():
    assert rank.asymmetric_unit_correlation() == pytest.approx(0.75)
    assert rank.asymmetric_unit_correlation(lower=-1.0, upper=1.0) == 0.0


def test_relu_cosine_map_he_fixed_point():
    """He init without bias: J_1(c) grows towards 1; the first post-ReLU cosine for orthogonal inputs is 1/pi."""
    cos = rank.relu_cosines(5, 2.0, 0.0)
    assert cos[0] == pytest.approx(1 / math.pi)
    assert np.all(np.diff(cos) > 0)
    with pytest.raises(ValueError, match="s_w2"):
        rank.relu_cosines(5, 0.0, 0.0)


def test_differentiable_rank_bound_has_the_finite_difference_gradient():
    h = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(5), dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(rank.differentiable_rank_bound(h).sum(), h)
    u, step = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(6), dtype=torch.float64), 1e-6
    with torch.no_grad():
        numeric = (rank.differentiable_rank_bound(h + step * u) - rank.differentiable_rank_bound(h - step * u)).sum()
    assert float((grad * u).sum()) == pytest.approx(float(numeric) / (2 * step), rel=1e-6)


WIDTH = "the width N \\(the factors are N x N\\) must be a whole number, got "


@pytest.mark.parametrize("call, message", [
    (lambda: products.ginibre_lyapunov_exponents("4", 1.0), WIDTH + "'4'"),
    (lambda: products.ginibre_lyapunov_exponents(float("nan"), 1.0), WIDTH + "nan"),
    (lambda: products.ginibre_lyapunov_exponents(6, math.inf), "s2 must be a finite number > 0, got inf"),
    (lambda: rank.rank_tau(np.eye(3), "0.5"), "tau must be a real number, got '0.5'"),
    (lambda: rank.bn_chain(np.eye(3), 2, every=5), "every must be between 1 and 2"),
    (lambda: rank.bn_chain(np.eye(3), 2, kind=["H"]), "kind must be one of 'H', 'M'"),
    (lambda: rank.predicted_numerical_rank([0.0, -1.0], 5, float("nan")), "rtol must be a finite number in \\(0, 1\\)"),
])
def test_arguments_follow_the_input_contract(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_numpy_sizes_and_huge_features_are_accepted():
    assert products.ginibre_lyapunov_exponents(np.int64(6), 1.0).shape == (6,)
    assert rank.bn_chain(np.eye(3), np.int64(2), n_chains=np.float64(2.0)).shape == (2, 2, 3, 3)
    h = np.random.default_rng(0).standard_normal((3, 5))
    assert rank.rank_lower_bound(1e200 * h) == pytest.approx(rank.rank_lower_bound(h), rel=1e-12)  # r is scale free


@pytest.mark.parametrize("call, message", [
    (lambda: rank.relu_cosines("5", 2.0, 0.0), "depth must be a whole number, got '5'"),
    (lambda: rank.relu_cosines(5, 2.0, 0.0, 1.5), "c0 must be a finite number in \\[-1, 1\\]"),
    (lambda: rank.asymmetric_unit_correlation(lower=1.0, upper=1.0), "needs lower < upper"),
    (lambda: rank.asymmetric_unit_correlation(torch.ones(3, 4)), "x is constant over the samples"),
    (lambda: rank.last_layer_gradient_cosines(torch.ones(3, 4), torch.ones(2, 5)), "one column per example"),
    (lambda: rank.last_layer_gradient_cosines(torch.zeros(3, 4), torch.ones(2, 4)), "has no direction"),
])
def test_correlations_follow_the_input_contract(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_correlations_are_scale_free_where_their_inputs_overflow():
    """The cosine map in the bias share, and the correlations rescaled by powers of 2, stay finite and exact."""
    # s_w^2 = s_b^2 = 1e300: layer 1 sees c = 1/2, after which the bias share is 1e-300, so He's map from c0 = 1/2
    np.testing.assert_allclose(rank.relu_cosines(8, 1e300, 1e300), rank.relu_cosines(8, 2.0, 0.0, 0.5), rtol=1e-14)
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert rank.asymmetric_unit_correlation(1e300 * x, 0.0, 2e300) == pytest.approx(
        rank.asymmetric_unit_correlation(x), rel=1e-14)
    errors = torch.randn(2, 7, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    huge = rank.last_layer_gradient_cosines(1e300 * x, 1e300 * errors)
    plain = rank.last_layer_gradient_cosines(x, errors)
    for key in ("frobenius", "row0"):
        torch.testing.assert_close(huge[key], plain[key])


def test_half_precision_is_computed_in_float32():
    """float16 and bfloat16 features and factors once raised torch's NotImplementedError or RuntimeError (no half
    linear algebra); float32 holds them exactly, so the answers are float32's."""
    h = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    for dtype in (torch.float16, torch.bfloat16):
        low = h.to(dtype)
        assert rank.numerical_rank(low) == rank.numerical_rank(low.float())
        assert rank.rank_lower_bound(low) == rank.rank_lower_bound(low.float())
        factors = torch.eye(3, dtype=dtype).expand(2, 3, 3) + 0.1 * low[:, :3].to(dtype)
        assert torch.equal(products.log_condition_number(factors), products.log_condition_number(factors.float()))
