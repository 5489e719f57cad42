"""Monte Carlo back-propagation (bnsym.sim.gradients): exact identities first, then equality in law."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import ks_2samp

import bnsym
from bnsym.core.activations import parse_activation
from bnsym.sim import generator, gram, inputs_with_gram
from bnsym.sim.gradients import (
    _activate_into,
    _slope_into,
    batch_norm_backward,
    batch_norm_forward,
    per_layer_growth,
    simulate_gradients,
)
from bnsym.sim.networks import centred_basis, centred_factor

K_SE = 5
KS_MIN_P = 1e-3  # chosen in advance: per comparison, a false alarm has probability 1e-3 under equality in law


@pytest.mark.parametrize("eps", [0.0, 1e-3])
def test_batch_norm_backward_is_autograd(eps):
    h = torch.randn(3, 5, 7, dtype=torch.float64, generator=generator(0, "cpu"), requires_grad=True)
    upstream = torch.randn(3, 5, 7, dtype=torch.float64, generator=generator(1, "cpu"))
    z, s = batch_norm_forward(h, eps)
    (z * upstream).sum().backward()
    with torch.no_grad():
        torch.testing.assert_close(batch_norm_backward(z, s, upstream), h.grad, rtol=1e-12, atol=1e-12)


def test_centred_factor_full_rank_centred_and_deficient():
    """R R^T = G K G and F F^T = (G K G)^+ (Penrose identities); Cholesky flags what it cannot factor exactly."""
    rng = np.random.default_rng(0)
    a = torch.as_tensor(rng.standard_normal((4, 6, 9)))
    full = a @ a.mT / 9
    e = centred_basis(6)
    g = torch.eye(6, dtype=torch.float64) - 1 / 6
    torch.testing.assert_close(e @ e.T, g)
    torch.testing.assert_close(e.T @ e, torch.eye(5, dtype=torch.float64))
    centred = g @ full @ g  # rows sum to zero: rank 5
    low = a[..., :3] @ a[..., :3].mT  # G K G of rank 3: Cholesky cannot factor it
    for k in (full, centred, low):
        kc = g @ k @ g
        for robust in (False, True):
            factor = centred_factor(k, robust)
            if k is low and not robust:
                assert not factor.exact.any()
                continue
            assert factor.exact.all()
            without = centred_factor(k, robust, inverse=False)  # the same root, F only where asked for
            assert torch.equal(without.root, factor.root) and (robust or without.inverse_root is None)
            root, pinv = factor.root, factor.inverse_root @ factor.inverse_root.mT
            torch.testing.assert_close(root @ root.mT, kc, rtol=1e-10, atol=1e-10)
            assert (root.sum(-2).abs().max() < 1e-12) and (pinv.sum(-2).abs().max() < 1e-8)
            torch.testing.assert_close(kc @ pinv @ kc, kc, rtol=1e-8, atol=1e-8)
            torch.testing.assert_close(pinv @ kc @ pinv, pinv, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("spec", ["relu", "tanh"])
def test_activation_into_buffers_is_the_activation(spec):
    """The sampler's one-pass relu and relu step (written into its buffers) are bit for bit the activation's own."""
    phi, z = parse_activation(spec), torch.randn(3, 4, 5, dtype=torch.float64, generator=generator(0, "cpu"))
    z[0, 0, :2] = 0.0
    assert torch.equal(_activate_into(phi, z, torch.empty_like(z)), phi.torch(z))
    assert torch.equal(_slope_into(phi, z, torch.empty_like(z)), phi.torch_derivative(z))


@pytest.mark.parametrize("width", [4, 32])
def test_gram_sampler_rank_deficient_grams(width):
    """N = 4 < B - 1 (eigendecompositions from the start), and N = 32 with inputs of Gram rank 3 (Cholesky fails,
    the run is redone with eigendecompositions): finite, reproducible, and the identity network's exact identities."""
    a = np.random.default_rng(1).standard_normal((6, 3))
    x0 = (inputs_with_gram(a @ a.T, width, 3, seed=0, device="cpu") if width >= 6
          else torch.randn(3, width, 6, dtype=torch.float64, generator=generator(0, "cpu")))
    run = simulate_gradients("identity", x0, 2, sampler="gram", seed=1, device="cpu")
    again = simulate_gradients("identity", x0, 2, sampler="gram", seed=1, device="cpu")
    assert torch.isfinite(run.grams).all() and torch.isfinite(run.gradients).all()
    assert torch.equal(run.gradients, again.gradients)
    torch.testing.assert_close(run.grams[:, 1:].diagonal(0, -2, -1).mean(-1), torch.ones(3, 2, dtype=torch.float64))
    assert (run.gradients[:, 1:] @ torch.ones(6, dtype=torch.float64)).abs().max() < 1e-10


@pytest.mark.parametrize("spec", ["relu", "identity", "tanh"])
def test_weights_sampler_is_exact_backpropagation(spec):
    """The "weights" run equals autograd on the same explicit network (same generator stream), to rounding."""
    m, n, b, depth, seed = 2, 16, 5, 3, 4
    x0 = inputs_with_gram(np.eye(b), n, m, seed=1, device="cpu")
    run = simulate_gradients(spec, x0, depth, sampler="weights", seed=seed, device="cpu")
    phi = bnsym.parse_activation(spec)
    leaves = []
    gen = generator(seed, "cpu")
    weights = [torch.randn(m, n, n, generator=gen, dtype=torch.float64) / math.sqrt(n) for _ in range(depth)]
    g = torch.randn(m, n, b, generator=gen, dtype=torch.float64)
    x = x0.clone().requires_grad_(True)
    for w in weights:
        h = w @ x
        h.retain_grad()
        leaves.append(h)
        x = phi.torch(batch_norm_forward(h, 0.0)[0])
    (g * x).sum().backward()
    for layer, h in enumerate(leaves, start=1):
        torch.testing.assert_close(run.gradients[:, layer], gram(h.grad), rtol=1e-10, atol=1e-12)


@pytest.fixture(scope="module")
def two_samplers():
    """relu and identity (singular Grams), B = 6, N = 128, 96 networks at the fixed point, depth 4."""
    runs = {}
    for spec in ("relu", "identity"):
        sigma = bnsym.fixed_point(spec, 6).matrix
        x0 = inputs_with_gram(sigma, 128, 96, seed=2, device="cpu")
        runs[spec] = {s: simulate_gradients(spec, x0, 4, sampler=s, seed=7 + i, device="cpu")
                      for i, s in enumerate(("weights", "gram"))}
    return runs


@pytest.mark.parametrize("spec", ["relu", "identity"])
def test_samplers_equal_in_law(two_samplers, spec):
    """Means (SE across networks, k = 5) and KS two-sample tests of per-network scalars at every layer."""
    a, b = two_samplers[spec]["weights"], two_samplers[spec]["gram"]
    for stat in (lambda r: r.squared_norms(), lambda r: r.weight_gradient_norms(),
                 lambda r: r.grams[:, :, 0, 1].numpy()):
        sa, sb = stat(a), stat(b)
        for layer in range(sa.shape[1]):
            ma, mb = sa[:, layer].mean(), sb[:, layer].mean()
            se = np.hypot(sa[:, layer].std(ddof=1), sb[:, layer].std(ddof=1)) / np.sqrt(len(sa))
            assert abs(ma - mb) <= K_SE * se + 1e-12, (layer, ma, mb, se)
            if se > 1e-12:
                assert ks_2samp(sa[:, layer], sb[:, layer]).pvalue > KS_MIN_P


def test_gradients_have_zero_row_sums_and_identity_is_exact(two_samplers):
    run = two_samplers["identity"]["gram"]
    ones = torch.ones(6, dtype=torch.float64)
    assert (run.gradients[:, 1:] @ ones).abs().max() < 1e-10
    torch.testing.assert_close(run.grams[:, 1:].diagonal(0, -2, -1).mean(-1), torch.ones(96, 4, dtype=torch.float64))


def test_per_layer_growth_shape_and_values(two_samplers):
    run = two_samplers["relu"]["gram"]
    ratios = per_layer_growth(run, 1, 4)
    norms = run.squared_norms()
    assert ratios.shape == (96, 3)
    np.testing.assert_allclose(ratios[:, 0], norms[:, 1] / norms[:, 2])


def test_bad_arguments():
    x0 = inputs_with_gram(np.eye(4), 8, 2, seed=0, device="cpu")
    with pytest.raises(ValueError, match="sampler"):
        simulate_gradients("relu", x0, 2, sampler="exact")
    with pytest.raises(ValueError, match="depth"):
        simulate_gradients("relu", x0, 0)
