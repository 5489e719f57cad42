"""The two fast paths are equal in law to the twin (issue 42, item 3).

The Gram sampler (:func:`bnsym.sim.simulate_forward`) and the hand-written backward
(:func:`bnsym.sim.simulate_gradients`) simulate the networks (Dense -> BatchNorm(eps) -> phi) x L; the twin
(:mod:`bnsym.sim.arch`) builds the same description with explicit weights and autograd. On a small case (n = 16,
B = 8, L = 3, inputs of the same Gram) the means over networks of each layer's mean diagonal and mean off-diagonal
Gram entry, and of each layer's squared gradient norm, must agree. The twin's S^l at the Dense output of layer l
(f = v . x^L / sqrt(n), v standard normal) and the fast path's tr Pi^l = ||dL/dh^l||^2 / N (L = <g, x^L>, g
standard normal) have the same mean: both are (1/n) sum_{a, j} E ||d x^L_{aj} / d h^l||^2.

Tolerance: z = (mean_fast - mean_twin) / sqrt(SE_fast^2 + SE_twin^2), the SEs from the networks of each run
(independent runs); every |z| must stay below k = mc_tolerance(M, number of comparisons) (Bonferroni at false
alarm 1e-3). B = 8 keeps the fourth moments of the batch-norm gradient (a factor 1/s^2, s^2 ~ chi^2_{B-1}) finite.
The same check flags a twin with a 10 % wrong weight variance (gradients scaled by 1/weight_var) or a wrong eps.
"""

from __future__ import annotations

import numpy as np
import pytest

from bnsym.core.layers import Activation, BatchNorm, Dense, serial
from bnsym.sim import inputs_with_gram, mc_tolerance, mean_and_se, simulate_forward, simulate_gradients
from bnsym.sim.arch import simulate_signal_propagation

WIDTH, BATCH, DEPTH, NETWORKS, EPS, PHI = 16, 8, 3, 1500, 1e-3, "tanh"
SIGMA0 = np.eye(BATCH) * 0.6 + 0.4  # BSB1 input Gram, q = 1, c = 0.4


def _summaries(grams: np.ndarray) -> np.ndarray:
    """Per network and layer: the mean diagonal and mean off-diagonal entry of each (B, B) Gram, (M, 2 L)."""
    diagonal = np.diagonal(grams, axis1=-2, axis2=-1).mean(-1)
    off = (grams.sum((-2, -1)) - diagonal * BATCH) / (BATCH * (BATCH - 1))
    return np.concatenate([diagonal, off], axis=1)


def _twin(weight_var: float = 1.0, eps: float = EPS) -> tuple[np.ndarray, np.ndarray]:
    """(Gram summaries after each phi, S at each Dense output) of the twin of (Dense -> BN -> phi) x DEPTH."""
    net = serial([Dense(weight_var), BatchNorm(eps), Activation(PHI)] * DEPTH)
    run = simulate_signal_propagation(net, SIGMA0, WIDTH, NETWORKS, seed=11, device="cpu")
    return _summaries(run.grams[:, 2::3]), run.gradient[:, 0::3]


def _fast(sampler: str) -> tuple[np.ndarray, np.ndarray]:
    """The same statistics from the Gram sampler and the hand-written backward."""
    x = inputs_with_gram(SIGMA0, WIDTH, NETWORKS, seed=5, device="cpu")
    grams = simulate_forward(PHI, x, DEPTH, EPS, seed=6, sampler=sampler, device="cpu", progress=False)
    run = simulate_gradients(PHI, x, DEPTH, EPS, seed=7, sampler=sampler, device="cpu", progress=False)
    return _summaries(grams[:, 1:].numpy()), run.squared_norms()[:, 1:]


def _z(fast: tuple[np.ndarray, np.ndarray], twin: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """z of fast minus twin for every statistic's mean over networks (independent runs, axis 0 the networks)."""
    (mean_a, se_a), (mean_b, se_b) = (mean_and_se(np.concatenate(run, axis=1), axis=0) for run in (fast, twin))
    return (mean_a - mean_b) / np.hypot(se_a, se_b)


@pytest.fixture(scope="module")
def twin() -> tuple[np.ndarray, np.ndarray]:
    return _twin()


@pytest.mark.parametrize("sampler", ["gram", "weights"])
def test_fast_paths_agree_in_law_with_the_twin(twin, sampler):
    z = _z(_fast(sampler), twin)
    assert z.size == 3 * DEPTH and np.all(np.isfinite(z)), z
    assert np.abs(z).max() <= mc_tolerance(NETWORKS, z.size), z


@pytest.mark.parametrize("weight_var, eps", [(1.1, EPS), (1.0, 0.1)])
def test_the_comparison_sees_a_wrong_twin(weight_var, eps):
    """A twin with weight_var 1.1 (its gradients divided by 1.1: max |z| 6.7) or eps = 0.1 (its Grams moved: max |z|
    123) fails the bound (k = 3.9)."""
    z = _z(_fast("gram"), _twin(weight_var, eps))
    assert np.abs(z).max() > mc_tolerance(NETWORKS, z.size), z
