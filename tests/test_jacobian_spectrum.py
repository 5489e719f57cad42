"""The spectrum of a linear batch-norm layer's Jacobian (bnsym.meanfield.jacobian_spectrum) and the probes behind it.

ACCEPTANCE: the derived CDF equals direct sampling of (B-1)/chi^2_(B-1) with an atom 1/(B-1); its mean equals
gradient_rate("identity", B) (chapter 3's derivation) and is infinite at B = 3; a real orthogonal-rows layer
matches the CDF within k standard errors; whole-network gradients vanish at B = 2 and are finite at B = 4.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch

import bnsym
from bnsym.core.symbols import B
from bnsym.meanfield.jacobian_spectrum import derive_linear_spectrum, linear_spectrum_cdf, linear_spectrum_moments
from bnsym.meanfield.linear_bn import linear_limit
from bnsym.sim import layer_jacobian, mc_tolerance, mean_and_se, network_gradient_norms


@pytest.mark.parametrize("batch", [3, 6, 16])
def test_cdf_against_sampling(batch):
    rng = np.random.default_rng(batch)
    draws = (batch - 1) / rng.chisquare(batch - 1, (40, 5000))
    draws[rng.random(draws.shape) < 1 / (batch - 1)] = 0.0
    k = mc_tolerance(40, 3)
    for x in (0.5, 1.0, 2.0):
        estimate = mean_and_se((draws <= x).mean(axis=1))
        assert abs(estimate.value - linear_spectrum_cdf(x, batch)) <= k * estimate.error


@pytest.mark.parametrize("batch", [4, 8, 64])
def test_mean_is_the_linear_gradient_rate(batch):
    assert abs(linear_spectrum_moments(batch)["mean"] - bnsym.gradient_rate("identity", batch)) < 1e-12


def test_moments_diverge_where_they_should():
    assert linear_spectrum_moments(3)["mean"] == np.inf and linear_spectrum_moments(5)["second"] == np.inf
    assert derive_linear_spectrum()["atom"].subs(B, 5) == sp.Rational(1, 4)


def test_real_layer_matches_the_law():
    batch, networks = 6, 8
    jac = layer_jacobian("identity", linear_limit(np.eye(batch)), 16, networks, seed=1, orthogonal=True,
                         in_width=256)
    squares = torch.linalg.eigvalsh(jac @ jac.mT).flip(-1)[:, : 16 * (batch - 1)].clamp(min=0).numpy()
    assert abs((squares < 1e-9 * squares.max()).mean() - 1 / (batch - 1)) < 1e-12
    k = mc_tolerance(networks, 2)
    for x in (1.0, 2.0):
        estimate = mean_and_se((squares <= x).mean(axis=1))
        assert abs(estimate.value - linear_spectrum_cdf(x, batch)) <= k * estimate.error


def test_orthogonal_rows_give_an_isometry_without_batch_norm():
    jac = layer_jacobian("identity", np.eye(4), 8, 2, seed=0, batch_norm=False, orthogonal=True, in_width=32)
    gram = jac @ jac.mT * 8 / 32  # rows of squared length N_in / N
    assert torch.allclose(gram, torch.eye(32, dtype=gram.dtype).expand_as(gram), atol=1e-10)


def test_network_gradients_vanish_at_two_only():
    zero = network_gradient_norms("relu", np.eye(2), 16, 5, 2, seed=0)
    assert zero.shape == (2, 5) and zero.max() < 1e-12
    assert network_gradient_norms("relu", np.eye(4), 16, 5, 2, seed=0).min() > 1e-3
