"""The flat point of bnsym.arch's graph: whether phi(h), h ~ N(0, Sigma), is constant over the batch with positive
probability, i.e. whether the range of Sigma holds a vector strictly on phi's flat side in every coordinate (what
a train-mode batch norm with eps = 0 after phi needs: its E[r^-2] is then infinite). Decided in closed form at full
rank (the range is R^B) and by a linear program otherwise; here against a linear program over the range found
independently (an SVD) on every Gram, and against the answers known by construction. It is decided only when a
train-mode batch norm asks: the kernel and tangent kernel of a network without one never run it."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import bsb1, random_psd
from scipy.linalg import orth
from scipy.optimize import linprog

from bnsym import arch
from bnsym.arch import Activation, Dense, repeat
from bnsym.arch import graph as arch_graph
from bnsym.arch.graph import _flat_side, _has_flat_point
from bnsym.core.activations import parse_activation
from bnsym.core.geometry import centring

B = 8
MIXED = np.array([1.0, -1.0, 2.0, 0.5, -0.3, 1.0, 1.0, 1.0])  # a vector with coordinates of both signs
POSITIVE = np.linspace(0.5, 2.0, B)
ZERO_SUM = centring(B) @ np.random.default_rng(1).standard_normal((B, 3))  # columns summing to 0: a range in 1^perp

FULL_RANK = [random_psd(B, B + 8, seed) for seed in range(4)] + [bsb1(B, 1.0, 0.5), np.eye(B), random_psd(B, B)]
MUST_BE_FALSE = [centring(B), np.outer(MIXED, MIXED), ZERO_SUM @ ZERO_SUM.T]  # every range vector: both signs or 0
MUST_BE_TRUE = [np.outer(POSITIVE, POSITIVE), np.ones((B, B)), np.outer(POSITIVE, POSITIVE) + np.outer(MIXED, MIXED),
                centring(B) + np.ones((B, B)) / B**2]
RANDOM_DEFICIENT = [random_psd(B, rank, seed) for rank in range(1, B) for seed in range(6)]


def _linear_program(sigma: np.ndarray, side: int) -> bool:
    """Whether some c has side * (U c) >= 1 in every coordinate, U an orthonormal basis of the range of sigma (an
    SVD, singular values below 1e-10 of the largest dropped: the Grams here have none between 1e-15 and 1e-4)."""
    basis = orth(sigma, rcond=1e-10)
    result = linprog(np.zeros(basis.shape[1]), A_ub=-side * basis, b_ub=-np.ones(B),
                     bounds=[(None, None)] * basis.shape[1], method="highs")
    return result.status == 0


@pytest.mark.parametrize("name", ["relu", "hardtanh"])
def test_the_flat_point_decision_is_the_linear_programs(name):
    phi = parse_activation(name)
    side = _flat_side(phi)[1]
    decided = {label: [_has_flat_point(sigma, phi) for sigma in grams] for label, grams in
               [("full", FULL_RANK), ("false", MUST_BE_FALSE), ("true", MUST_BE_TRUE), ("random", RANDOM_DEFICIENT)]}
    assert decided["full"] == [True] * len(FULL_RANK)
    assert decided["false"] == [False] * len(MUST_BE_FALSE)
    assert decided["true"] == [True] * len(MUST_BE_TRUE)
    assert decided["random"] == [_linear_program(sigma, side) for sigma in RANDOM_DEFICIENT]
    assert {True, False} <= set(decided["random"])  # the random Grams reach both answers
    assert [_linear_program(sigma, side) for sigma in FULL_RANK] == decided["full"]


def test_a_network_without_batch_norm_never_decides_the_flat_point(monkeypatch):
    """The decision (a linear program at B = 256 took 92 % of a 10-layer relu kernel) was made for every activation;
    at a rank-deficient input it is a linear program still, so it must not be asked for."""
    net = repeat([Dense(), Activation("relu")], 3)

    def refuse(*_):
        raise AssertionError("the flat point was decided for a network without batch norm")

    monkeypatch.setattr(arch_graph, "_has_flat_point", refuse)
    sigma0 = random_psd(B, 3)
    assert np.all(np.isfinite(arch.kernel(net, sigma0))) and np.all(np.isfinite(arch.ntk(net, sigma0)))


@pytest.mark.parametrize(("sigma0", "flat"), [(random_psd(B, B + 8), True), (centring(B), False)])
def test_a_batch_norm_after_relu_asks_for_the_flat_point(sigma0, flat):
    """relu of h ~ N(0, Sigma0) then BN (eps = 0): at a full-rank Sigma0 relu(h) = 0 with probability 2^-B > 0, an
    infinite tangent kernel; at Sigma0 = G the coordinates of h sum to 0 and are never all <= 0 (but at h = 0), so
    the kernel is finite (G has rank B - 1 >= 3: no low-rank divergence either)."""
    if flat:
        with pytest.raises(ValueError, match="constant over the batch with positive probability"):
            arch.ntk("dense,relu,bn", sigma0)
    else:
        assert np.all(np.isfinite(arch.ntk("dense,relu,bn", sigma0)))
