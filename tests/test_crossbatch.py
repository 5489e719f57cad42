"""Cross-batch kernel (Yang et al. 2019, App. H): Laplace route against QMC, bn_kernel and its own contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import bnsym
from bnsym.api import cross_batch_kernel
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


def test_diagonal_blocks_are_bn_kernel():
    sigma = _random_joint(4, 7, seed=2)
    joint = cross_batch_kernel("relu", sigma, 4)
    np.testing.assert_allclose(joint[:4, :4], bnsym.bn_kernel("relu", sigma[:4, :4]), rtol=0, atol=1e-8)
    np.testing.assert_allclose(joint[4:, 4:], bnsym.bn_kernel("relu", sigma[4:, 4:]), rtol=0, atol=1e-8)
    np.testing.assert_allclose(joint, joint.T, atol=1e-14)


def test_stacks_and_tensors():
    stack = np.stack([_random_joint(6, 6, seed) for seed in range(3)]).reshape(3, 1, 12, 12)
    one_by_one = np.stack([cross_batch_kernel("relu", m[0], 6) for m in stack])[:, None]
    batched = cross_batch_kernel("relu", torch.as_tensor(stack), 6)
    assert isinstance(batched, torch.Tensor) and batched.shape == stack.shape
    np.testing.assert_allclose(batched.numpy(), one_by_one, atol=1e-13)
    cross = cross_batch_kernel("relu", stack, 6, blocks="cross")
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
