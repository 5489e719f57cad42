"""Small batches (bnsym.meanfield.small_batch; Yang et al. App. J).

ACCEPTANCE: at B = 2 the batch-norm Jacobian is zero (SymPy) and the simulated layer Jacobian vanishes to rounding;
the derived linear rate (B-2)/(B-3) equals gradient_rate("identity", B) for B >= 4 and is infinite at B = 3; the
truncated mean at B = 3 agrees with direct sampling of r^2 = mu chi^2_2. gradient_rate answers B = 2 (0) and B = 3
(inf, where the angular factor is positive, which a finite layer's mean squared singular value tracks) at eps = 0
and refuses only B = 3 with phi' = 0 on the BN range (0 x inf) and eps > 0 there (not derived).
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import bnsym
from bnsym.core.symbols import B
from bnsym.meanfield.small_batch import derive_small_batches, truncated_rate_three
from bnsym.sim import layer_jacobian, mc_tolerance, mean_and_se


def test_b2_jacobian_is_zero():
    assert derive_small_batches()["jacobian_2"] == sp.zeros(2, 2)
    for phi in ("relu", "tanh"):
        assert float(layer_jacobian(phi, np.eye(2), 16, 3).abs().max()) < 1e-12


@pytest.mark.parametrize("batch", [4, 6, 32])
def test_linear_rate_is_gradient_rate(batch):
    rate = float(derive_small_batches()["rate"].subs(B, batch))
    assert abs(rate - bnsym.gradient_rate("identity", batch)) < 1e-9


def test_b3_rate_is_infinite_and_truncation_grows():
    assert derive_small_batches()["rate_3"] == sp.oo
    samples = 1.5 / (1.5 * np.random.default_rng(0).chisquare(2, (50, 4000)))
    k = mc_tolerance(50, 3)
    for threshold in (10.0, 100.0, 1000.0):
        estimate = mean_and_se(np.minimum(samples, threshold).mean(axis=1))
        assert abs(estimate.value - truncated_rate_three(threshold)) <= k * estimate.error
    assert truncated_rate_three(1e6) > truncated_rate_three(1e3) + 2.0  # log growth: no finite mean


@pytest.mark.parametrize("phi", ["relu", "tanh", "identity", "relu^2"])
def test_library_answers_two_and_three(phi):
    assert bnsym.gradient_rate(phi, 2) == 0.0
    assert bnsym.gradient_rate(phi, 3) == np.inf
    assert bnsym.depth_scale(phi, 3) == 0.0 and bnsym.max_trainable_depth(phi, 2) == 0.0


def test_b3_angular_factor_is_the_layer_factor():
    """E_v tr(P D G D P) of the circle quadrature: B - 2 = 1 for phi = id, positive for relu."""
    from bnsym.core.activations import parse_activation
    from bnsym.meanfield.small_batch import angular_factor_three

    linear = angular_factor_three(parse_activation("identity"))
    assert abs(linear - 1.0) < 1e-12  # phi = id: tr(P G P) = B - 2 = 1
    assert angular_factor_three(parse_activation("relu")) > 0


def test_small_batch_refusals():
    with pytest.raises(ValueError, match="0 x infinity"):
        bnsym.gradient_rate("relu(beta=-5)", 3)
    with pytest.raises(ValueError, match="not derived here"):
        bnsym.gradient_rate("tanh", 2, eps=0.5)


@pytest.mark.parametrize("phi", ["relu", "tanh", "identity"])
@pytest.mark.parametrize("batch", [2, 3])
def test_small_batch_fixed_point_against_sampling(phi, batch):
    """q* and q* c* against sampled BN outputs of Gaussian pre-activations (B = 2: exact, any sample)."""
    point = bnsym.fixed_point(phi, batch)
    h = np.random.default_rng(batch).standard_normal((40, 4000, batch))
    y = h - h.mean(-1, keepdims=True)
    out = bnsym.parse_activation(phi).numpy(np.sqrt(batch) * y / np.linalg.norm(y, axis=-1, keepdims=True))
    k = mc_tolerance(40, 12)
    for theory, sample in ((point.q, out[..., 0] ** 2), (point.q * point.c, out[..., 0] * out[..., 1])):
        estimate = mean_and_se(sample.mean(axis=1))
        assert abs(estimate.value - theory) <= k * estimate.error + 1e-12


def test_relu_fixed_point_at_three_is_the_arccos_kernel():
    """Thm F.8's ReLU form q* = 1/2, c* = J_1(-1/(B-1)) holds at B = 3 too: J_1(-1/2) = (sqrt(3)/2 - pi/6) / pi."""
    point = bnsym.fixed_point("relu", 3)
    assert abs(point.q - 0.5) < 1e-6 and abs(point.c - (np.sqrt(3) / 2 - np.pi / 6) / np.pi) < 1e-6


def test_small_batch_fixed_point_refusals():
    with pytest.raises(ValueError, match="not derived here"):
        bnsym.fixed_point("relu", 3, eps=0.1)
    with pytest.raises(ValueError, match="below 4"):
        bnsym.fixed_point("relu", np.array([3, 8]))
