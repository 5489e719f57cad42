"""Linear batch norm converges globally (bnsym.meanfield.linear_bn; Lemma F.1, Thm F.2, Cor F.3).

ACCEPTANCE: the derived rate C/(C+2) at full rank C = B - 1 equals the forward eigenvalues lambda_L = lambda_M of
the identity by the independent closed-form (Thm F.33) and spherical routes; Sigma* = (B/C) P is a fixed point of
the BN kernel; iterating the kernel from random inputs of every rank converges to it, and the distance shrinks by
C/(C+2) per layer; rank 1 arrives in one layer.
"""

from __future__ import annotations

import numpy as np
import pytest

import bnsym
from bnsym.meanfield.linear_bn import centred_rank, linear_limit, linear_rate, linear_trajectory


@pytest.mark.parametrize("batch", [4, 7, 16])
@pytest.mark.parametrize("method", ["closed_form", "spherical"])
def test_full_rank_rate_is_the_forward_eigenvalue(batch, method):
    eigenvalues = bnsym.forward_eigenvalues("identity", batch, method=method, with_error=True)
    for key in ("L", "M"):
        assert abs(eigenvalues[key].value - linear_rate(batch - 1)) <= max(10 * eigenvalues[key].error, 1e-9)


def _start(batch: int, rank: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((batch, rank)) * np.arange(1, rank + 1)  # a spread spectrum
    return x @ x.T + 3.0  # a constant 11^T is invisible to batch norm


@pytest.mark.parametrize("rank", [2, 3, 5, 7])
def test_converges_to_the_limit_at_the_rate(rank):
    sigma = _start(8, rank, seed=rank)
    assert centred_rank(sigma) == rank
    limit = linear_limit(sigma)
    assert np.allclose(bnsym.bn_kernel("identity", limit, method="laplace"), limit, atol=1e-9)
    path = linear_trajectory(sigma, 60).value
    distance = np.linalg.norm(path - limit, axis=(1, 2))
    assert distance[-1] < 1e-3 * distance[1]
    last = np.flatnonzero(distance > 1e-7 * distance[0]).max()  # above the rounding floor
    late = distance[last] / distance[last - 1]
    assert abs(late - linear_rate(rank)) < 1e-2 * (1 - linear_rate(rank))
    assert np.allclose(np.trace(path[1:], axis1=1, axis2=2), 8.0)


@pytest.mark.parametrize("rank", [1, 3, 7])
def test_trajectory_is_the_laplace_kernel_iterated(rank):
    sigma = _start(8, rank, seed=10 + rank)
    path = linear_trajectory(sigma, 4).value
    for layer in range(4):
        assert np.allclose(bnsym.bn_kernel("identity", path[layer], method="laplace"), path[layer + 1], atol=1e-9)


def test_rank_one_arrives_in_one_layer():
    sigma = _start(6, 1, seed=0)
    path = linear_trajectory(sigma, 3).value
    assert np.allclose(path[1:], linear_limit(sigma), atol=1e-9)
