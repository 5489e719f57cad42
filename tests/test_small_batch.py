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
