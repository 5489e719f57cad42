"""The proof steps of Daneshmand et al. (bnsym.rank.proofs): each derivation's residuals, and its numbers against an
independent route (direct matrices, the QR method, quadrature)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch

from bnsym import products, rank
from bnsym.core.symbols import d, gamma
from bnsym.core.symbols import weight_bound as B
from bnsym.sim import daneshmand


def test_rank_one_step_freezes_signs_below_the_threshold():
    lemma6 = rank.derive_rank_one_step()
    assert lemma6["rank_one_residual"] == 0 and lemma6["half_step_residual"] == 0
    assert lemma6["delta_m_residual"] == 0
    assert lemma6["bound_at_paper_gamma"] == sp.Rational(17, 64)
    threshold = float(lemma6["sign_threshold"].subs({B: math.sqrt(3), d: 4}))
    # directly, with the weights that push hardest against the signs, W = -B s s^T: t = (1 - gamma B d) s
    s = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    w = -math.sqrt(3) * torch.outer(s, s)
    for factor, kept in ((0.99, True), (1.01, False)):
        t = (torch.eye(4, dtype=torch.float64) + factor * threshold * w) @ s
        assert bool((torch.sign(t) == s).all()) is kept


def test_rank_one_chain_keeps_m_fixed_at_small_gamma():
    x = torch.outer(torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64), torch.linspace(1, 2, 6,
                                                                                                 dtype=torch.float64))
    ms = rank.bn_chain(x, 50, 1 / (8 * math.sqrt(3) * 4), 3, seed=1, law="uniform")
    assert float((ms - ms[0]).abs().max()) < 1e-12
    assert float((ms.abs() - 1).abs().max()) < 1e-12


def test_regularity_identity_and_examples():
    lemma10 = rank.derive_regularity()
    assert lemma10["gap_identity"] == 0 and set(lemma10["example12_limits"]) == {0}
    lam = np.random.default_rng(0).gamma(0.5, size=(100, 6))
    lam *= 6 / lam.sum(-1, keepdims=True)
    assert np.all(6 * (lam**3).sum(-1) >= (lam**2).sum(-1) ** 2)
    assert float(rank.stationary_alpha(8, 64.0, 10.0)) == pytest.approx(1.0)  # ||M||_F^2 = d^2: alpha = 1
    with pytest.raises(ValueError, match="positive"):
        rank.stationary_alpha(8, 30.0, 0.0)


def test_finite_depth_cesaro_limit():
    assert rank.derive_finite_depth()["cesaro_limit"] == sp.Symbol("y_n", positive=True)


def test_residual_gap_series_against_quadrature():
    claim4 = rank.derive_residual_gap()
    assert claim4["gap"] == gamma**2 and claim4["sum_rule"] == -d * gamma**2 / 2
    g = 0.01
    mu1 = products.residual_top_exponent(16, g)
    assert mu1.value == pytest.approx(float(claim4["mu1"].subs({d: 16, gamma: g})), rel=1e-2)
    assert rank.residual_gap_series(8, 0.1) == pytest.approx(0.01)
    with pytest.raises(ValueError):
        rank.residual_gap_series(1, 0.1)


def test_uniform_sampler_has_unit_variance_entries():
    sample = rank.uniform_sampler(6, math.inf)(torch.Generator().manual_seed(0), 400)
    assert sample.shape == (400, 6, 6) and float(sample.abs().max()) <= math.sqrt(3)
    assert float(sample.var()) == pytest.approx(1.0, abs=0.05)
    near_identity = rank.uniform_sampler(6, 0.1)(torch.Generator().manual_seed(0), 2)
    assert torch.allclose(near_identity, torch.eye(6, dtype=torch.float64) + 0.1 * rank.uniform_sampler(
        6, math.inf)(torch.Generator().manual_seed(0), 2))
    with pytest.raises(ValueError):
        rank.bn_chain(torch.eye(3), 2, law="cauchy")


def test_centring_is_redundant_for_linear_layers():
    claim9 = rank.derive_centring()
    assert claim9["projector_residual"] == 0 and claim9["layer_residual"] == 0
    x = torch.randn(6, 10, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    common = dict(init="gaussian", bn=True, relu=False, seed=3, dtype=torch.float64)
    centred = daneshmand.representations(x, [5], 6, 2, centre=True, **common)[5]
    plain = daneshmand.representations(x - x.mean(1, keepdim=True), [5], 6, 2, centre=False, **common)[5]
    assert torch.allclose(centred, plain, atol=1e-12)


def test_invariant_union_example():
    example17 = rank.derive_invariant_union()
    assert set(example17["swap_residuals"]) == {0}
    swap = np.array([[0.0, 1.0], [1.0, 0.0]])
    assert np.linalg.svd(np.linalg.matrix_power(swap, 7), compute_uv=False).tolist() == [1.0, 1.0]
