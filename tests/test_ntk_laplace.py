"""The Laplace tangent route (bnsym.meanfield.ntk_laplace): exact at BSB1 and CBSB1 inputs, the QMC route within its
error on general inputs, the written-out derivative against reverse mode through the same integrals (its adjoint,
Yang's per-entry backward recursion) to rounding, and the batched blocks of a data set."""

import numpy as np
import pytest
import torch

from bnsym import arch
from bnsym.arch import Activation, BatchNorm, Dense, repeat
from bnsym.core.activations import parse_activation
from bnsym.core.statistics import mc_tolerance
from bnsym.meanfield import ntk_laplace
from bnsym.meanfield.crossbatch import _mean_rho, _rate
from bnsym.meanfield.ntk_laplace import ntk_blocks, ntk_per_entry, tangent_cross_block
from bnsym.nngp.ntk import bn_ntk, ntk_blocks_laplace

torch.set_num_threads(1)


def _wishart(batch: int, seed: int = 0) -> np.ndarray:
    factor = np.random.default_rng(seed).standard_normal((batch, batch + 8))
    return factor @ factor.T / (batch + 8)


def _mlp(depth: int, eps: float = 0.0) -> object:
    return repeat([Dense(), BatchNorm(eps=eps), Activation("relu")], depth)


def test_at_a_bsb1_input_it_is_the_closed_form():
    """Sigma0 = 0.7 I + 0.3 11^T keeps every Theta exchangeable: the QMC route's closed form (the adjoint of the
    backward map's BSB1 form, no sampling) is exact there."""
    sigma0 = 0.7 * np.eye(32) + 0.3
    laplace = arch.ntk(_mlp(3), sigma0, with_error=True)
    exact = arch.ntk(_mlp(3), sigma0, with_error=True, method="qmc")
    assert laplace.method == "laplace" and exact.method == "exact" and exact.error.max() < 1e-10
    scale = np.abs(exact.value).max()
    assert laplace.error.max() < 1e-8 * scale
    np.testing.assert_allclose(laplace.value, exact.value, rtol=0, atol=1e-9 * scale)


@pytest.mark.parametrize("name", ["relu", "relu^2"])
def test_across_two_batches_at_a_cbsb1_input_it_is_the_cross_rate(name):
    """Independent centred batches (Sigma_12 = c 11^T): E[J_1 Theta_12 J_2^T] = E[J] Theta_12 E[J]^T with
    E[J] = lambda_x G, lambda_x^2 the cross-batch rate's closed form at G Sigma_kk G = G (mu = 1)."""
    phi, batch = parse_activation(name), 16
    block = torch.eye(batch, dtype=torch.float64) + 0.3
    sigma = torch.cat([torch.cat([block, 0.2 + 0 * block], 1), torch.cat([0.2 + 0 * block, block], 1)])
    theta = torch.as_tensor(_wishart(2 * batch, seed=1))
    _, tangent = tangent_cross_block(phi, sigma[None], theta[None], batch, 16)
    a, b = phi.ab
    rate = _rate()(float(batch), (a + b) * _mean_rho()(float(batch), phi.degree + 1), 1.0)
    centring = torch.eye(batch, dtype=torch.float64) - 1.0 / batch
    expected = rate * centring @ theta[:batch, batch:] @ centring
    np.testing.assert_allclose(tangent[0], expected, rtol=0, atol=1e-10 * float(expected.abs().max()))


def test_on_general_inputs_it_agrees_with_the_sampled_route():
    """Two batches of 16, depth 2: the joint 32 x 32 NTK, within its error of the QMC route (eps = 0, sampled) and of
    a BN with a tiny eps (the QMC graph's radial route)."""
    sigma0, sizes = _wishart(32, seed=2), (16, 16)
    laplace = arch.ntk_cross(_mlp(2), sigma0, sizes, with_error=True)
    assert laplace.method == "laplace" and laplace.error.max() < 1e-6 * np.abs(laplace.value).max()
    upper = np.triu_indices(32)
    for sampled in (arch.ntk_cross(_mlp(2), sigma0, sizes, True, 2**12, 8, method="qmc"),
                    arch.ntk_cross(_mlp(2, eps=1e-12), sigma0, sizes, True, 2**12, 8)):
        assert sampled.method == "qmc"
        z = np.abs(laplace.value - sampled.value) / (mc_tolerance(8, len(upper[0])) * sampled.error)
        assert z[upper].max() <= 1.0, z.max()


def test_the_qmc_route_needs_no_laplace_pattern():
    """Biases, eps > 0 or another activation keep the sampled route."""
    sigma0 = _wishart(8)
    net = repeat([Dense(bias_var=0.1), BatchNorm(), Activation("relu")], 1)
    assert arch.ntk(net, sigma0, with_error=True, points=2**10, replicates=4).method != "laplace"
    with pytest.raises(ValueError, match="method"):
        arch.ntk(_mlp(1), sigma0, method="exact")


def test_yangs_per_entry_recursion_on_the_same_integrals_agrees_to_rounding():
    """The backward recursion (reverse mode, one per entry) is the forward propagation's adjoint."""
    sigma = torch.as_tensor(_wishart(8, seed=3))
    phi, entries = parse_activation("relu"), [(0, 0), (0, 3), (2, 5), (7, 7)]
    forward = ntk_blocks(phi, sigma[None], sigma.new_zeros(0, 8, 8), np.zeros((0, 2)), 3, 16)[0][0]
    backward = ntk_per_entry(phi, sigma, 3, entries, 16).detach()
    rows, columns = zip(*entries)
    np.testing.assert_allclose(backward, forward[rows, columns], rtol=1e-12)


@pytest.mark.parametrize("name", ["relu", "leaky_relu(0.2)", "relu^2"])
@pytest.mark.parametrize("features", [40, 5])
def test_the_written_out_tangent_is_the_adjoint_of_reverse_mode(name, features):
    """<Pi, T(Theta)_12> = <T*(Pi), Theta_12> for two different batches, T by the derivative written out in the
    Laplace integral, T* by autograd through the same integral, random Pi and Theta; full-rank inputs and raw inputs
    of rank 5 < B - 1."""
    rng = np.random.default_rng(11)
    batch1, batch2, phi = 8, 6, parse_activation(name)
    x = rng.standard_normal((batch1 + batch2, features))
    sigma = torch.as_tensor(x @ x.T / features)[None]
    theta = torch.as_tensor(_wishart(batch1 + batch2, seed=12))[None]
    pi = torch.as_tensor(rng.standard_normal((1, batch1, batch2)))
    _, tangent = tangent_cross_block(phi, sigma, theta, batch1, 16)
    value, cross = ntk_laplace._recorded_cross_block(phi, sigma, batch1, 16)
    adjoint = ntk_laplace._pull_back(value, cross, pi, batch1).detach()
    forward, backward = float((pi * tangent).sum()), float((adjoint * theta[:, :batch1, batch1:]).sum())
    assert abs(forward - backward) <= 1e-12 * float((pi.abs() * tangent.abs()).sum())


@pytest.mark.parametrize("features, tolerance", [(20, 1e-8), (6, 1e-6)])
def test_the_blocks_of_a_data_set_are_the_joint_ntk_of_each_pair(features, tolerance):
    """ntk_blocks_laplace (k batches, P pairs, one tensor op) against arch.ntk_cross pair by pair, and against twice
    the nodes; raw inputs with fewer features than B - 1 (a rank-deficient first layer, whose endpoint weight is
    low) converge algebraically: 3e-7 of the NTK at B = 16, d = 6."""
    x = np.random.default_rng(5).standard_normal((3, 16, features))
    pairs = np.array([[0, 2], [1, 0]])
    within, cross = ntk_blocks_laplace("relu", x, pairs, 2)
    finer = ntk_blocks_laplace("relu", x, pairs, 2, nodes=48)
    scale = np.abs(within).max()
    np.testing.assert_allclose(within, finer[0], rtol=0, atol=tolerance * scale)
    np.testing.assert_allclose(cross, finer[1], rtol=0, atol=tolerance * scale)
    if features < 15:
        return
    for (i, j), block in zip(pairs, cross):
        joint = np.concatenate([x[i], x[j]])
        reference = arch.ntk_cross(_mlp(2), joint @ joint.T / features, (16, 16))
        np.testing.assert_allclose(block, reference[:16, 16:], rtol=0, atol=1e-12 * scale)
        np.testing.assert_allclose(within[i], reference[:16, :16], rtol=0, atol=1e-12 * scale)


def test_bad_input_is_refused():
    x = np.random.default_rng(6).standard_normal((2, 8, 4))
    with pytest.raises(ValueError, match="positive-homogeneous"):
        ntk_blocks_laplace("tanh", x, [[0, 1]], 1)
    with pytest.raises(ValueError, match="pairs"):
        ntk_blocks_laplace("relu", x, [[0, 0]], 1)
    with pytest.raises(ValueError, match="depth"):
        ntk_blocks_laplace("relu", x, [[0, 1]], 0)


def test_the_ntk_is_infinite_below_three_spanned_dimensions():
    """One batch of B = 16 inputs with d features, depth 1: the NTK's mean diagonal at 16, 32, 64 nodes per axis.
    With d = 4 it converges (each doubling changes it less than half as much as the one before); with d = 2 the
    first BN's 1 / s(w)^2 has an infinite mean (E[1 / chi^2_2]), and each doubling adds about as much as the one
    before, a logarithmic divergence, which is why bn_ntk refuses such batches."""
    rng = np.random.default_rng(1)
    steps = {}
    for d in (2, 4):
        x = rng.standard_normal((1, 16, d))
        diagonal = [np.trace(ntk_blocks_laplace("relu", x, np.zeros((0, 2)), 1, nodes)[0][0]) for nodes in (16, 32, 64)]
        steps[d] = np.diff(diagonal)
    assert steps[4][1] < steps[4][0] / 2, steps
    assert steps[2][1] > 0.8 * steps[2][0] > 0, steps
    with pytest.raises(ValueError, match="span at least 3 dimensions.*n_features = 2"):
        bn_ntk("relu", rng.standard_normal((16, 2)), 1, 8)
    plane = rng.standard_normal((8, 2)) @ rng.standard_normal((2, 4))  # a test batch in a 2-dimensional plane
    with pytest.raises(ValueError, match="batch 2 spans 2"):
        bn_ntk("relu", rng.standard_normal((16, 4)), 1, 8, X_test=plane)


def test_finite_networks_first_layer_terms_have_the_tail_the_span_says():
    """Independent of the Laplace route: one neuron's first-layer tangent term, c = sum_a |d x_a / d w|^2 (torch
    autograd through train-mode BN, eps = 0, then relu, of one batch of B = 16 inputs with d features, w ~ N(0, I_d)),
    has P(c > t) ~ t^(-r/2) for a batch spanning r dimensions (c ~ 1 / (w^T S w)). The Hill estimate of the tail
    index from the top k of N neurons' terms is r / 2 within mc_tolerance standard errors (alpha / sqrt(k)): 1 at
    r = 2, where the mean, the NTK's term, is infinite (check_spans), and 2 at r = 4."""
    draws, top = 200_000, 200
    for d in (2, 4):
        generator = torch.Generator().manual_seed(d)
        x = torch.randn(16, d, generator=generator, dtype=torch.float64)
        w = torch.randn(draws, d, generator=generator, dtype=torch.float64, requires_grad=True)
        h = w @ x.T
        out = torch.relu((h - h.mean(1, keepdim=True)) / h.std(1, correction=0, keepdim=True))
        terms = sum((torch.autograd.grad(out[:, a].sum(), w, retain_graph=True)[0] ** 2).sum(1) for a in range(16))
        largest = np.sort(terms.numpy())[::-1][: top + 1]
        alpha = top / np.sum(np.log(largest[:top] / largest[top]))
        assert abs(alpha - d / 2) <= mc_tolerance(top, 2) * alpha / np.sqrt(top), (d, alpha)
