"""Cross-batch kernel (Yang et al. 2019, App. H): Laplace route against QMC, bn_kernel and its own contract."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch

import bnsym
from bnsym.api import cross_batch_kernel
from bnsym.core import symbols
from bnsym.sim import mc_tolerance


def _random_joint(batch1: int, batch2: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = batch1 + batch2
    a = rng.standard_normal((n, n + 2))
    return a @ a.T / (n + 2)


@pytest.mark.parametrize("spec", ["relu", "identity", "relu^1.5", "leaky_relu(0.2)"])
def test_laplace_matches_qmc_on_random_inputs(spec):
    sigma = _random_joint(5, 6, seed=len(spec))
    laplace = cross_batch_kernel(spec, sigma, 5, with_error=True)
    qmc = cross_batch_kernel(spec, sigma, 5, method="qmc", with_error=True)
    k = mc_tolerance(16, n_comparisons=sigma.size)  # 16 scramblings; every entry is one comparison
    assert laplace.error.max() < 1e-2 * qmc.error.min()  # the quadrature error is negligible next to QMC's
    assert np.all(np.abs(laplace.value - qmc.value) <= k * qmc.error)


@pytest.mark.parametrize("rank", [2, 4])
def test_laplace_on_rank_deficient_inputs(rank):
    """Inputs with fewer features than B - 1 (a first layer on raw data): the rule takes each batch's rank into its
    endpoint weights, converges (the adaptive rule raised here before) and agrees with QMC."""
    rng = np.random.default_rng(rank)
    features = rng.standard_normal((16, rank))
    sigma = features @ features.T / rank
    laplace = cross_batch_kernel("relu", sigma, 8, with_error=True)
    qmc = cross_batch_kernel("relu", sigma, 8, method="qmc", with_error=True)
    k = mc_tolerance(16, n_comparisons=sigma.size)
    assert laplace.error.max() < 0.1 * np.median(qmc.error)  # small next to QMC's (rank 2 needs 128 nodes)
    assert np.all(np.abs(laplace.value - qmc.value) <= k * qmc.error)


def test_diagonal_blocks_are_bn_kernel():
    sigma = _random_joint(6, 9, seed=2)
    joint = cross_batch_kernel("relu", sigma, 6)
    np.testing.assert_allclose(joint[:6, :6], bnsym.bn_kernel("relu", sigma[:6, :6]), rtol=0, atol=1e-8)
    np.testing.assert_allclose(joint[6:, 6:], bnsym.bn_kernel("relu", sigma[6:, 6:]), rtol=0, atol=1e-8)
    np.testing.assert_allclose(joint, joint.T, atol=1e-14)


@pytest.mark.parametrize("scale", [1e-200, 1e-160, 1e160, 1e300])
def test_each_batch_is_rescaled_first(scale):
    """BN at eps = 0 is blind to each batch's scale: Sigma -> D Sigma D, D = diag(s1 I, s2 I), changes nothing, even
    where o12 / sqrt(m1 m22) once overflowed (0.41 off at 1e160) or eigh failed (1e-200)."""
    a = np.random.default_rng(5).standard_normal((8, 12))
    sigma = a @ a.T / 12
    reference = cross_batch_kernel("relu", sigma, 4)
    np.testing.assert_allclose(cross_batch_kernel("relu", scale * sigma, 4), reference, rtol=1e-10, atol=1e-12)
    d = np.diag([1.0] * 4 + [scale ** 0.02] * 4)  # variances 1e+-12 apart (1e300: 1e12) were refused as identical
    np.testing.assert_allclose(cross_batch_kernel("relu", d @ sigma @ d, 4), reference, rtol=1e-10, atol=1e-12)


def test_node_arrays_too_large_for_memory_are_refused_before_allocation():
    with pytest.raises(ValueError, match="1024 Gauss-Jacobi nodes per axis at B1 = 32, B2 = 32 need .* GiB"):
        cross_batch_kernel("relu", np.eye(64), 32, nodes=1024)


def test_stacks_and_tensors():
    stack = np.stack([_random_joint(6, 6, seed) for seed in range(3)]).reshape(3, 1, 12, 12)
    one_by_one = np.stack([cross_batch_kernel("relu", m[0], 6, nodes=12) for m in stack])[:, None]
    batched = cross_batch_kernel("relu", torch.as_tensor(stack), 6, nodes=12)
    assert isinstance(batched, torch.Tensor) and batched.shape == stack.shape
    np.testing.assert_allclose(batched.numpy(), one_by_one, atol=1e-13)
    cross = cross_batch_kernel("relu", stack, 6, nodes=12, blocks="cross")
    np.testing.assert_allclose(cross, one_by_one[..., :6, 6:], atol=1e-13)


def test_independent_batches_give_the_product_of_means():
    """A joint covariance with zero cross block: x1, x2 independent, C = E[x1] E[x2]^T (rank one)."""
    sigma = _random_joint(5, 5, seed=4)
    sigma[:5, 5:] = sigma[5:, :5] = 0.0
    cross = cross_batch_kernel("relu", sigma, 5, blocks="cross")
    singular = np.linalg.svd(cross, compute_uv=False)
    assert singular[1] < 1e-10 * singular[0]


@pytest.mark.parametrize(("sigma", "batch1", "message"), [
    (np.eye(10) - 0.5, 5, "positive semi-definite"),
    (np.eye(10), 3, "B1 = 3 is below 4"),
    (np.eye(10), 7, "B2 = Sigma.shape\\[-1\\] - B1 = 3"),
    (np.ones((10, 9)), 5, "square"),
    (np.eye(10), 4.5, "whole number"),
])
def test_bad_input(sigma, batch1, message):
    with pytest.raises(ValueError, match=message):
        cross_batch_kernel("relu", sigma, batch1)


def test_qmc_takes_one_matrix_and_laplace_needs_homogeneous_phi():
    with pytest.raises(ValueError, match="one joint covariance"):
        cross_batch_kernel("tanh", np.stack([np.eye(8)] * 2), 4)
    with pytest.raises(ValueError, match="positive-homogeneous"):
        cross_batch_kernel("tanh", np.eye(8), 4, method="laplace")
    with pytest.raises(ValueError, match="blocks"):
        cross_batch_kernel("relu", np.eye(8), 4, blocks="diagonal")


@pytest.mark.parametrize("spec", ["relu", "identity", "relu^1.5", "leaky_relu(0.2)"])
def test_closed_forms_match_quadrature(spec):
    """Gamma-function closed forms against the spherical quadrature of E phi(x_1), E x_1 phi(x_1) and mu*."""
    for batch in (4, 9, 32):
        for public in (bnsym.cross_batch_fixed_point, bnsym.cross_batch_rate):
            closed = public(spec, batch)
            quadrature = public(spec, batch, method="spherical", with_error=True)
            assert abs(closed - quadrature.value) <= 10 * quadrature.error + 1e-12


def test_rate_bound_limits_and_arrays():
    from bnsym.meanfield.crossbatch import derive_cross_fixed_point, derive_cross_rate

    batches = np.array([4, 8, 64, 10**6])
    bound = derive_cross_rate()["bound"]
    bounds = np.array([float(bound.subs(symbols.B, int(b))) for b in batches[:3]])
    relu, linear = bnsym.cross_batch_rate("relu", batches), bnsym.cross_batch_rate("identity", batches)
    np.testing.assert_allclose(linear[:3], bounds, rtol=1e-12)  # equality exactly for linear phi
    assert np.all(relu[:3] < bounds) and np.all(bnsym.cross_batch_rate("relu^1.5", batches[:3]) < bounds)
    assert abs(relu[-1] - float(derive_cross_rate()["relu_limit"])) < 1e-5  # O(1/B) from the limit
    assert abs(linear[-1] - float(derive_cross_rate()["linear_limit"])) < 1e-5
    relu_cross = bnsym.cross_batch_fixed_point("relu", batches)
    assert abs(relu_cross[-1] - float(derive_cross_fixed_point()["relu_limit"])) < 1e-6
    assert np.all(bnsym.cross_batch_fixed_point("identity", batches) == 0)


@pytest.mark.parametrize("batch", [10**5, 10**7])
def test_one_minus_the_rate_keeps_its_digits_at_large_batches(batch):
    """Gamma ratios by poch, not exp(log Gamma - log Gamma): the linear rate equals its bound, 1 - lambda_x^2 ~ 1/(2B)
    to 1e-6 relative against 50-digit mpmath (it was 19 % off at B = 1e7, above the proven bound)."""
    import mpmath

    from bnsym.core.symbols import B
    from bnsym.meanfield.crossbatch import derive_cross_rate

    bound = sp.lambdify(B, derive_cross_rate()["bound"], "mpmath")  # a symbolic B = 1e7 would expand Gamma(5e6)
    with mpmath.workdps(50):
        exact = 1 - bound(mpmath.mpf(batch))
    assert float(exact) > 0
    assert 1 - bnsym.cross_batch_rate("identity", batch) == pytest.approx(float(exact), rel=1e-6)


def test_fixed_point_is_the_cross_block_of_the_kernel():
    """A CBSB1 input (diagonal blocks Sigma*, cross block c 11^T) maps to cross block c*_cross 11^T for any c."""
    sigma_star = bnsym.fixed_point("relu", 6).matrix
    for c in (0.0, 0.01):  # the joint matrix is PSD for small c
        joint = np.block([[sigma_star, np.full((6, 6), c)], [np.full((6, 6), c), sigma_star]])
        cross = cross_batch_kernel("relu", joint, 6, blocks="cross")
        np.testing.assert_allclose(cross, bnsym.cross_batch_fixed_point("relu", 6), atol=1e-9)


def test_predict_json_has_cross_batch_keys():
    from bnsym.cli import _cross_batch_predictions

    result = _cross_batch_predictions("relu", 8, 0.0)
    assert result["rate"] == bnsym.cross_batch_rate("relu", 8)
    assert result["gradient_correlation_rate"] == result["rate"] / bnsym.gradient_rate("relu", 8)
    assert _cross_batch_predictions("relu", 8, 0.1) is None


@pytest.mark.parametrize("spec, batch", [("relu", 8), ("relu^1.5", 32), ("tanh", 8), ("identity", 16)])
def test_gegenbauer_rate_matches_the_other_routes(spec, batch):
    """Cor I.6: the rate from phi's Gegenbauer coefficients equals the closed form (or the spherical quadrature,
    tanh) within the two routes' error bounds (plus rounding)."""
    from bnsym.meanfield.crossbatch import cross_rate_gegenbauer

    series = cross_rate_gegenbauer(bnsym.parse_activation(spec), batch)
    other = bnsym.cross_batch_rate(spec, batch, with_error=True)
    assert 0 < series.error < 1e-8
    assert abs(series.value - other.value) <= series.error + other.error + 1e-12


def test_gegenbauer_form_is_the_identity_rate_times_the_degree_one_share():
    """Cor I.6's form: with R = 0 (linear phi) it is the bound of Thms H.13-H.14, and R > 0 lowers it."""
    from bnsym.meanfield.crossbatch import derive_cross_rate, derive_cross_rate_gegenbauer

    form = derive_cross_rate_gegenbauer()
    a1, rest = sp.Symbol("a_1", positive=True), sp.Symbol("R", nonnegative=True)
    assert sp.simplify(form.result.subs(rest, 0) / derive_cross_rate()["bound"]) == 1
    value = form.result.subs({symbols.B: 8, a1: 1})
    assert float(value.subs(rest, 0.5)) < float(value.subs(rest, 0)) < 1
