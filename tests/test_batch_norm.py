"""The one batch-norm forward (bnsym.core.batchnorm, exported as bnsym.sim.batch_norm): the definition, its
autograd, and that every simulator and the training harness normalise through it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bnsym.core.activations import parse_activation
from bnsym.core.batchnorm import batch_norm_forward
from bnsym.sim import batch_norm, bjorck, generator, philipp, simulate_forward
from bnsym.sim.networks import gram_of_rows
from bnsym.train.networks import forward, init_weights, predict

ROUNDING = 1e-13  # float64 rounding of O(1) values through a few dozen operations


def reference(h, eps: float = 0.0, axis: int = -1, centre: bool = True, statistics=None,
              with_scale: bool = False):
    """The definition in numpy: centre along ``axis`` (optional), divide by s = sqrt(mean square + eps); the mean
    and mean square of ``statistics`` (population statistics) when given. With ``with_scale``, also s."""
    h = np.moveaxis(np.asarray(h, dtype=float), axis, -1)
    source = h if statistics is None else np.moveaxis(np.asarray(statistics, dtype=float), axis, -1)
    mean = source.mean(-1, keepdims=True) if centre else 0.0
    scale = np.sqrt(((source - mean) ** 2).mean(-1, keepdims=True) + eps)
    normalised = np.moveaxis((h - mean) / scale, -1, axis)
    return (normalised, np.moveaxis(scale, -1, axis)) if with_scale else normalised


def _pre_activations(*shape: int, seed: int = 0) -> torch.Tensor:
    return 3.0 + 2.0 * torch.randn(*shape, dtype=torch.float64, generator=generator(seed, "cpu"))


@pytest.mark.parametrize("eps", [0.0, 1e-3, 2.0])
@pytest.mark.parametrize("dim", [-1, -2])
@pytest.mark.parametrize("centre", [True, False])
def test_forward_is_the_definition(eps, dim, centre):
    """Both layouts: (M, N, B) with the batch last, and neurons last (M, B, N) with the batch at -2."""
    h = _pre_activations(4, 5, 7)
    z, s = batch_norm_forward(h, eps, dim, centre=centre)
    expected, scale = reference(h, eps, dim, centre, with_scale=True)
    np.testing.assert_allclose(z.numpy(), expected, rtol=0, atol=ROUNDING)
    np.testing.assert_allclose(s.numpy(), scale, rtol=ROUNDING, atol=0)
    assert torch.equal(batch_norm(h, eps, dim=dim, centre=centre), z)
    # the two layouts are one map: normalising the transpose along the other axis gives the transpose
    assert torch.equal(batch_norm(h.mT, eps, dim=-1 - (dim == -1), centre=centre), z.mT)


def test_zero_mean_unit_variance_and_eps_shrinks_the_variance():
    h = _pre_activations(4, 5, 7)
    z = batch_norm(h)
    torch.testing.assert_close(z.mean(-1), torch.zeros(4, 5, dtype=torch.float64), rtol=0, atol=1e-14)
    torch.testing.assert_close(z.var(-1, correction=0), torch.ones(4, 5, dtype=torch.float64))
    variance = h.var(-1, correction=0)
    eps = 0.5
    torch.testing.assert_close(batch_norm(h, eps).var(-1, correction=0), variance / (variance + eps))
    constant = torch.ones(2, 3, 6, dtype=torch.float64)  # eps > 0 keeps a batch without variance finite (at 0)
    assert torch.equal(batch_norm(constant, eps), torch.zeros_like(constant))


@pytest.mark.parametrize("eps", [1e-5, 1e-2])  # torch refuses eps = 0 in training mode
def test_forward_matches_torch(eps):
    h = _pre_activations(4, 5, 7)
    # nn.BatchNorm1d normalises each feature over the batch: features = (network, neuron).
    layer = torch.nn.BatchNorm1d(4 * 5, eps=eps, affine=False, dtype=torch.float64).train()
    expected = layer(h.reshape(20, 7).T).T.reshape(4, 5, 7)
    torch.testing.assert_close(batch_norm(h, eps), expected)


@pytest.mark.parametrize("dim", [-1, -2])
def test_separate_batches(dim):
    """sizes: each consecutive batch normalised on its own, for equal (one reshaped pass) and unequal sizes."""
    h = _pre_activations(3, 12, 12)
    for sizes in [(4, 4, 4), (6, 6), (3, 5, 4), (12,)]:
        parts = h.split(list(sizes), dim)
        by_hand = torch.cat([batch_norm(part, 0.1, dim=dim) for part in parts], dim)
        assert torch.equal(batch_norm(h, 0.1, sizes, dim), by_hand)
        offsets = np.cumsum((0,) + sizes)
        expected = np.concatenate([reference(h.numpy().take(range(a, b), axis=dim), 0.1, dim)
                                   for a, b in zip(offsets[:-1], offsets[1:])], axis=dim)
        np.testing.assert_allclose(batch_norm(h, 0.1, sizes, dim).numpy(), expected, rtol=0, atol=ROUNDING)
    with pytest.raises(ValueError, match="add up"):
        batch_norm(h, sizes=(5, 5), dim=dim)


def test_population_statistics():
    """Evaluation mode: h normalised with the mean and variance of another batch; with itself, training mode."""
    h, population = _pre_activations(2, 5, 3), _pre_activations(2, 5, 40, seed=1)
    for dim, (x, ref) in {-1: (h, population), -2: (h.mT, population.mT)}.items():
        np.testing.assert_allclose(batch_norm(x, 1e-3, dim=dim, reference=ref).numpy(),
                                   reference(x, 1e-3, dim, statistics=ref), rtol=0, atol=ROUNDING)
    assert torch.equal(batch_norm(population, 1e-3, reference=population), batch_norm(population, 1e-3))
    with pytest.raises(ValueError, match="one batch"):
        batch_norm(population, sizes=(20, 20), reference=population)


@pytest.mark.parametrize("eps", [0.0, 0.3])
@pytest.mark.parametrize("centre", [True, False])
def test_autograd_is_the_closed_form_jacobian(eps, centre):
    """dBN/dh = (P - z z^T / B) / s for one batch, P = I - 11^T/B (centred) or I (uncentred)."""
    batch = 7
    rows = _pre_activations(5, batch)
    jacobians = torch.func.vmap(torch.func.jacrev(lambda v: batch_norm(v, eps, centre=centre)))(rows)
    z, s = batch_norm_forward(rows, eps, centre=centre)
    projection = torch.eye(batch, dtype=torch.float64) - (1.0 / batch if centre else 0.0)
    closed = (projection - z.unsqueeze(-1) * z.unsqueeze(-2) / batch) / s.unsqueeze(-1)
    torch.testing.assert_close(jacobians, closed, rtol=1e-12, atol=1e-12)
    column = rows[0].clone().requires_grad_(True)
    (batch_norm(column, eps, centre=centre) @ rows[1]).backward()
    torch.testing.assert_close(column.grad, closed[0].T @ rows[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dim", [-1, -2])
def test_autograd_against_finite_differences(dim):
    """Central differences, first and second derivatives (gradcheck, gradgradcheck), both layouts, eps > 0."""
    h = _pre_activations(2, 3, 5).requires_grad_(True)
    population = _pre_activations(2, 3, 5, seed=1).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: batch_norm(x, 0.1, dim=dim), (h,))
    assert torch.autograd.gradgradcheck(lambda x: batch_norm(x, 0.1, dim=dim), (h,))
    assert torch.autograd.gradcheck(lambda x: batch_norm(x, 0.0, (2, 3), dim=-1), (h,))
    assert torch.autograd.gradcheck(lambda x, r: batch_norm(x, 0.1, dim=dim, reference=r), (h, population))


# --- every simulator normalises through it ------------------------------------------------------------------


@pytest.mark.parametrize("sizes", [None, (3, 3)])
def test_simulate_forward_calls_it(sizes):
    """Layer 1 of the "weights" sampler is phi(batch_norm(W x)) with the sampler's own W, to the last bit."""
    m, n, b, seed, eps = 3, 16, 6, 5, 0.1
    phi = parse_activation("tanh")
    x = _pre_activations(m, n, b, seed=2)
    grams = simulate_forward(phi, x, 1, eps=eps, seed=seed, sampler="weights", chunk=m, device="cpu", sizes=sizes)
    w = torch.randn(m, n, n, generator=generator(seed, "cpu"), dtype=torch.float64)
    h = torch.bmm(x.mT.contiguous(), w.mT) / math.sqrt(n)  # neurons last, (M, B, N)
    assert torch.equal(grams[:, 1], gram_of_rows(phi.torch(batch_norm(h, eps, sizes, dim=-2))))


def test_philipp_normalizations_are_it():
    x = _pre_activations(40, 7)
    assert torch.equal(philipp.normalize(x, "batch"), batch_norm(x, dim=-2))
    assert torch.equal(philipp.normalize(x, "layer"), batch_norm(x, dim=-1))
    assert torch.equal(philipp.normalize(x, "lolayer"), batch_norm(x, dim=-1, centre=False))
    gen = generator(0, "cpu")
    arch, x = philipp.Architecture("tanh", "batch"), philipp.gaussian_noise(30, gen, "cpu")[0]
    outputs, _ = philipp._forward(philipp._twin(arch, 3, gen, "cpu"), x[None])
    for linear, normalised in zip(outputs[0::3], outputs[1::3]):  # records [linear, norm, phi] per layer
        assert torch.equal(normalised, batch_norm(linear, dim=-2))


def test_bjorck_residual_block_calls_it():
    gen = generator(0, "cpu")
    x = _pre_activations(2, 8, 5)
    w1, w2 = (torch.randn(2, 5, 5, generator=gen, dtype=torch.float64) for _ in range(2))
    eps = 1e-5
    by_hand = torch.relu(x + batch_norm(torch.relu(batch_norm(x @ w1.mT, eps, dim=-2)) @ w2.mT, eps, dim=-2))
    assert torch.equal(bjorck.residual_block(x, w1, w2, True, eps), by_hand)
    mask = torch.tensor([True, False]).view(2, 1, 1)  # BN in the first network only
    mixed = bjorck.residual_block(x, w1, w2, mask, eps)
    assert torch.equal(mixed[0], by_hand[0])
    assert torch.equal(mixed[1], bjorck.residual_block(x, w1, w2, False, eps)[1])


@pytest.mark.parametrize("group", [None, 4])
def test_training_harness_calls_it(group):
    """The trainer's forward (plain and ghost batch norm) and its population-statistics prediction."""
    relu = parse_activation("relu")
    weights = init_weights(2, 3, 8, 6, 4, torch.Generator().manual_seed(0), torch.float64)
    x = _pre_activations(2, 6, 12, seed=3)
    logits, preactivations = forward(weights, x, relu, 1e-3, group)
    sizes = None if group is None else (group,) * 3
    hidden = x
    for weight, h in zip(weights[:-1], preactivations):
        assert torch.equal(h, weight @ hidden)
        hidden = relu.torch(batch_norm(h, 1e-3, sizes))
    assert torch.equal(logits, weights[-1] @ hidden)
    train, test = _pre_activations(20, 6, seed=4), _pre_activations(5, 6, seed=5)
    hidden, population = test.T.expand(2, -1, -1), train.T.expand(2, -1, -1)
    for weight in weights[:-1]:
        hidden = relu.torch(batch_norm(weight @ hidden, 1e-3, reference=weight @ population))
        population = relu.torch(batch_norm(weight @ population, 1e-3))
    assert torch.equal(predict(weights, train, test, relu, 1e-3), weights[-1] @ hidden)
