"""Tests of the Monte Carlo simulators bnsym.sim: exact identities first, then laws."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bnsym.core.activations import parse_activation
from bnsym.core.batchnorm import batch_norm as bn
from bnsym.core.device import Normals
from bnsym.sim import (
    SAMPLERS,
    configure_torch,
    generator,
    gram,
    inputs_with_gram,
    layer_jacobian,
    layer_jacobian_mean_square,
    mean_diagonal,
    mean_off_diagonal,
    simulate_forward,
)
from bnsym.train.bjorck import loss_along_gradient


def _random_psd(b: int, rank: int, seed: int = 0) -> np.ndarray:
    """A random B x B PSD matrix of the given rank, entries O(1)."""
    a = np.random.default_rng(seed).standard_normal((b, rank))
    return a @ a.T / rank


@pytest.fixture
def sigma6() -> np.ndarray:
    return _random_psd(6, 6)


def test_device_helpers():
    """TF32 off (idempotent) and seeded generators; default_device itself is one line and not restated here."""
    configure_torch()
    configure_torch()
    assert not torch.backends.cuda.matmul.allow_tf32
    assert not torch.backends.cudnn.allow_tf32
    a = torch.randn(3, generator=generator(7, "cpu"))
    assert torch.equal(a, torch.randn(3, generator=generator(7, "cpu")))


def test_gram_and_observables():
    x = torch.randn(3, 10, 4, dtype=torch.float64, generator=generator(0, "cpu"))
    g = gram(x)
    torch.testing.assert_close(g[1], x[1].T @ x[1] / 10)
    q, c = 2.0, 0.3
    bsb1 = q * ((1 - c) * np.eye(5) + c * np.ones((5, 5)))
    assert mean_diagonal(bsb1) == pytest.approx(q)
    assert mean_off_diagonal(bsb1) == pytest.approx(q * c)
    torch.testing.assert_close(mean_off_diagonal(g), (g.sum((-2, -1)) - g.diagonal(0, -2, -1).sum(-1)) / 12)


@pytest.mark.parametrize("rank", [6, 3])
def test_inputs_with_gram_exact(rank):
    sigma = _random_psd(6, rank)
    x = inputs_with_gram(sigma, width=64, n_networks=5, seed=1, device="cpu")
    assert x.shape == (5, 64, 6) and x.dtype == torch.float64
    np.testing.assert_allclose(gram(x).numpy(), np.broadcast_to(sigma, (5, 6, 6)), rtol=0, atol=1e-12)
    assert not torch.allclose(x[0], x[1])  # a different random basis per network


def test_inputs_with_gram_rejects_bad_sigma(sigma6):
    with pytest.raises(ValueError, match="symmetric"):
        inputs_with_gram(sigma6 + np.triu(np.ones((6, 6)), 1), width=64, n_networks=2)
    with pytest.raises(ValueError, match="semidefinite"):
        inputs_with_gram(np.diag([1.0, -0.5, 1.0]), width=64, n_networks=2)
    with pytest.raises(ValueError, match="width"):
        inputs_with_gram(sigma6, width=4, n_networks=2)
    with pytest.raises(ValueError, match="square"):
        inputs_with_gram(np.ones((2, 3)), width=64, n_networks=2)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_identity_network_exact_identities(sampler, sigma6):
    """phi = identity, eps = 0: each neuron's output has batch sum 0 and sum of squares B, so
    for l >= 1 the Gram has trace B (mean diagonal 1) and G 1 = 0, in every network."""
    x0 = inputs_with_gram(sigma6, width=32, n_networks=4, device="cpu")
    grams = simulate_forward("identity", x0, depth=3, sampler=sampler)
    assert grams.shape == (4, 4, 6, 6) and grams.dtype == torch.float64
    np.testing.assert_allclose(grams[:, 0].numpy(), np.broadcast_to(sigma6, (4, 6, 6)), atol=1e-12)
    np.testing.assert_allclose(mean_diagonal(grams[:, 1:]).numpy(), 1.0, rtol=1e-12)
    np.testing.assert_allclose((grams[:, 1:] @ torch.ones(6, dtype=torch.float64)).numpy(), 0.0, atol=1e-12)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_batch_wider_than_network(sampler):
    """B > N makes every Gram singular (rank <= N); the identities above still hold."""
    x0 = torch.randn(4, 6, dtype=torch.float64, generator=generator(3, "cpu"))
    grams = simulate_forward("identity", x0, depth=2, n_networks=2, sampler=sampler)
    assert torch.isfinite(grams).all()
    np.testing.assert_allclose(mean_diagonal(grams[:, 1:]).numpy(), 1.0, rtol=1e-12)
    assert torch.linalg.matrix_rank(grams[:, -1]).max() <= 4


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_relu_batch_of_two_exact(sampler):
    """B = 2, eps = 0: BN maps every neuron to (1, -1) or (-1, 1), so relu gives (1, 0) or (0, 1):
    the off-diagonal Gram entry is 0 and the trace is 1 exactly."""
    grams = simulate_forward(parse_activation("relu"), _random_psd(2, 2), 2, n_networks=3, sampler=sampler)
    np.testing.assert_allclose(grams[:, 1:, 0, 1].numpy(), 0.0, atol=1e-15)
    np.testing.assert_allclose(grams[:, 1:].diagonal(0, -2, -1).sum(-1).numpy(), 1.0, rtol=1e-12)


def test_samplers_agree_in_distribution(sigma6):
    m = 64
    x0 = inputs_with_gram(sigma6, width=256, n_networks=m, device="cpu")
    last = {s: simulate_forward("relu", x0, depth=3, sampler=s, seed=11)[:, -1] for s in SAMPLERS}
    for observable in (mean_diagonal, mean_off_diagonal):
        a, b = (observable(last[s]) for s in SAMPLERS)
        # The M networks are independent, so each sampler's mean over networks has standard
        # error std/sqrt(M), and the two samplers are independent of each other: their
        # difference has SE sqrt(var_a/M + var_b/M). Equal laws put it within 4 SE with
        # probability > 0.9999 (normal approximation, M = 64).
        se = torch.sqrt(a.var() / m + b.var() / m)
        assert abs(a.mean() - b.mean()) < 4 * se, observable.__name__


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_seeds(sampler, sigma6):
    x0 = inputs_with_gram(sigma6, width=32, n_networks=3, device="cpu")
    run = lambda seed: simulate_forward("tanh", x0, depth=2, sampler=sampler, seed=seed)  # noqa: E731
    assert torch.equal(run(5), run(5))
    assert not torch.allclose(run(5)[:, 1:], run(6)[:, 1:])


def test_weights_sampler_chunks_cover_all_networks(sigma6):
    x0 = inputs_with_gram(sigma6, width=16, n_networks=5, device="cpu")
    grams = simulate_forward("identity", x0, depth=1, chunk=2)
    np.testing.assert_allclose(mean_diagonal(grams[:, 1]).numpy(), 1.0, rtol=1e-12)
    assert not torch.allclose(grams[3, 1], grams[4, 1])


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_float32(sampler, sigma6):
    x0 = inputs_with_gram(sigma6, width=64, n_networks=2, device="cpu", dtype=torch.float32)
    assert x0.dtype == torch.float32
    grams = simulate_forward("identity", x0, depth=2, sampler=sampler, dtype=torch.float32)
    assert grams.dtype == torch.float64 and grams.device.type == "cpu"
    np.testing.assert_allclose(mean_diagonal(grams[:, 1:]).numpy(), 1.0, rtol=1e-5)


def test_shared_two_dimensional_inputs(sigma6):
    x0 = inputs_with_gram(sigma6, width=32, n_networks=1, device="cpu")[0]
    grams = simulate_forward("relu", x0, depth=1, n_networks=3)
    assert grams.shape == (3, 2, 6, 6)
    np.testing.assert_allclose(grams[:, 0].numpy(), np.broadcast_to(sigma6, (3, 6, 6)), atol=1e-12)
    assert not torch.allclose(grams[0, 1], grams[1, 1])


def test_simulate_forward_rejects_bad_arguments(sigma6):
    x0 = inputs_with_gram(sigma6, width=32, n_networks=2, device="cpu")
    with pytest.raises(ValueError, match="n_networks"):
        simulate_forward("relu", x0[0], depth=1)
    with pytest.raises(ValueError, match="n_networks"):
        simulate_forward("relu", x0, depth=1, n_networks=3)
    with pytest.raises(ValueError, match="sampler"):
        simulate_forward("relu", x0, depth=1, sampler="kernel")
    with pytest.raises(ValueError, match="shape"):
        simulate_forward("relu", x0[0, 0], depth=1, n_networks=2)


@pytest.mark.parametrize("batch_norm", [True, False])
@pytest.mark.parametrize("phi", ["relu", "tanh"])
def test_layer_jacobian_is_autograd(phi, batch_norm):
    """layer_jacobian's closed-form blocks against torch autograd of the same layer (same inputs and weights)."""
    width, b = 6, 5
    sigma = _random_psd(b, b, seed=1)
    jac = layer_jacobian(phi, sigma, width, 2, seed=3, batch_norm=batch_norm)
    x = inputs_with_gram(sigma, width, 2, seed=3, device="cpu")
    w = Normals(4, "cpu")(2, width, width) / np.sqrt(width)
    act = parse_activation(phi)
    g = torch.as_tensor(np.eye(b) - 1.0 / b)
    for m in range(2):
        def layer(inputs, m=m):
            h = w[m] @ inputs
            return act.torch(bn(h, 0.0, dim=-1)) @ g if batch_norm else act.torch(h)
        reference = torch.autograd.functional.jacobian(layer, x[m]).reshape(width * b, width * b)
        assert torch.allclose(jac[m], reference, atol=1e-10)
    mean_square = layer_jacobian_mean_square(phi, sigma, width, 2, seed=3, batch_norm=batch_norm)
    rank = width * (b - 1 if batch_norm else b)
    assert np.allclose(mean_square, torch.linalg.svdvals(jac).square().sum(-1).numpy() / rank, rtol=1e-12)


def test_loss_along_gradient_starts_at_the_batch_loss_and_descends():
    """Fig. 24's path: s = 0 is the minibatch loss at that step, and a small step along -g/|g| lowers it."""
    from bnsym.core.digits import digits

    data = digits(device="cpu")
    distances = np.array([0.0, 1e-4, 10.0])
    found = loss_along_gradient(data, 2, 8, {False: 1e-4, True: 0.1}, distances, 3, probe_batches=(1, 2))
    assert sorted(found) == [(False, 1), (False, 2), (True, 1), (True, 2)]
    for losses in found.values():
        assert losses.shape == (3, 3) and np.all(losses[:, 1] < losses[:, 0])
