"""Philipp et al.'s networks drawn by the one twin (bnsym.sim.arch): each builder equal in law to the one it
replaced (issue 42, item 3). Where the twin draws the same numbers (a Gaussian weight is the first draw of its
Dense; the bias comes after), the check is exact; otherwise it is the defining property of the law."""

import math

import numpy as np
import pytest
import torch

from bnsym.core.activations import parse_activation
from bnsym.core.device import generator
from bnsym.core.layers import Dense, walk
from bnsym.sim.arch import DenseLayer
from bnsym.sim.philipp import (
    Architecture,
    _forward,
    _gaussian_matrix,
    _twin,
    _widths,
    dense_weight,
    description,
    gaussian_noise,
    gaussian_weights,
    gsc_from_gradients,
    layer_tanh_residual,
    network_gsc,
    normalised_unit_gsc,
    normalize,
    relu_residual,
    resnet_profile,
    scaled_orthogonal,
    sign_diversity,
    tanh_residual,
)

CPU = torch.device("cpu")


@pytest.mark.parametrize("m, n", [(7, 5), (4, 9)])
def test_gaussian_matrix_is_the_old_draw(m, n):
    """The twin's Dense() weight is randn(m, n) / sqrt(n) from the same generator state: Table 3's matrix."""
    torch.testing.assert_close(dense_weight(m, n, generator(3, CPU), CPU), _gaussian_matrix(m, n, generator(3, CPU),
                                                                                             CPU), rtol=1e-15, atol=0)


def test_gaussian_weights_are_the_old_draws_times_sigma():
    """Each layer's weight is the old randn(m, n) sigma_w / sqrt(n) of the generator state before it."""
    widths, sigma_w = [5, 6, 4], 1.5
    gen = generator(8, CPU)
    states, weights = [], []
    for n, m in zip(widths, widths[1:]):
        states.append(gen.get_state())
        weights.append(dense_weight(m, n, gen, CPU, sigma_w**2))
    replay = gaussian_weights(widths, sigma_w, generator(8, CPU), CPU)
    for state, w, again, (n, m) in zip(states, weights, replay, zip(widths, widths[1:])):
        old = torch.randn(m, n, generator=torch.Generator().set_state(state), dtype=torch.float64)
        torch.testing.assert_close(w, old * (sigma_w / math.sqrt(n)), rtol=1e-15, atol=0)
        assert torch.equal(again, w)


def test_scaled_orthogonal_has_operator_norm_exactly_p():
    """Haar orthogonal times p (the old law): every singular value of every network's matrix equals p."""
    norms = [0.5, 2.0, 1e-3]
    matrices = scaled_orthogonal(3, 6, norms, generator(1, CPU), CPU)
    assert [tuple(m.shape) for m in matrices] == [(3, 6, 6)] * 3
    for p, m in zip(norms, matrices):
        torch.testing.assert_close(torch.linalg.svdvals(m), torch.full((3, 6), p, dtype=torch.float64),
                                   rtol=1e-12, atol=0)


def _old_forward(arch, x, weights, depth):
    """The hand-written forward that Table 1's networks ran before the twin (I.1), on given weights."""
    phi, matrices = parse_activation(arch.phi).torch, iter(weights)
    if arch.skip == "none":
        outputs, pres = [], []
        for j in range(depth):
            x = x @ next(matrices).mT
            outputs.append(x)
            if arch.norm != "none":
                x = normalize(x, arch.norm)
                outputs.append(x)
            if j < depth - 1:
                pres.append(x)
                x = phi(x)
                outputs.append(x)
        return outputs, pres
    x = x @ next(matrices).mT
    outputs, pres = [x], []
    for _ in range(depth // 2):
        skip = x if arch.skip == "identity" else x @ next(matrices).mT
        for _ in range(2):
            pres.append(normalize(x, arch.norm))
            x = phi(pres[-1]) @ next(matrices).mT
        x = skip + x
        outputs.append(x)
    outputs.append(normalize(x, arch.norm))
    return outputs, pres


def _old_gains(arch, depth):
    """(weight variance, width in, width out) of each linear layer as the old _draw_weights drew them."""
    relu = arch.phi == "relu"
    if arch.skip == "none":
        widths = _widths(arch.width, depth)
        return [(2.0 if (relu and j) or arch.matrix == "looks-linear" else 1.0, widths[j], widths[j + 1])
                for j in range(depth)]
    block = [(1.0, 100, 100)] * (arch.skip == "gaussian") + [(2.0 if relu else 1.0, 100, 100)] * 2
    return [(1.0, 100, 100), *block * (depth // 2)]


@pytest.mark.parametrize("arch", [Architecture("tanh", "batch", width="100/200"), Architecture("relu", "layer"),
                                  Architecture("selu", "lolayer", width="200"),
                                  Architecture("relu", "batch", "orthogonal"),
                                  Architecture("relu", "none", "looks-linear"),
                                  Architecture("relu", "batch", skip="identity"),
                                  Architecture("tanh", "layer", skip="gaussian")])
def test_table1_twin_is_the_old_network(arch):
    """The twin of Table 1's description has the old layers (weight variance, shape, order) and, on its own
    weights, the old forward's outputs and pre-activations (to rounding); a looks-linear ReLU network is linear."""
    depth = 6
    network = _twin(arch, depth, generator(2, CPU), CPU)
    in_order = [part for top in network.layers  # a residual's skip is drawn (and applied) before its branch
                for part in ([top.skip, top.branch] if hasattr(top, "branch") else [top])]
    denses = [m for part in in_order if part is not None for m in part.modules() if isinstance(m, DenseLayer)]
    weights = [(m.scale * m.weight.detach())[0] for m in denses]
    drawn = [(layer.weight_var, w.shape[1], w.shape[0]) for layer, w in
             zip((layer for layer in walk(description(arch, depth)) if isinstance(layer, Dense)), weights)]
    assert drawn == _old_gains(arch, depth)
    assert all(m.bias_scale == 0 for m in denses)
    x = gaussian_noise(30, generator(5, CPU), CPU)[0]
    outputs, pres = _forward(network, x[None])
    old_outputs, old_pres = _old_forward(arch, x, weights, depth)
    assert len(outputs) == len(old_outputs) and len(pres) == len(old_pres)
    for new, old in zip(outputs + pres, old_outputs + old_pres):
        torch.testing.assert_close(new[0], old, rtol=1e-10, atol=1e-12)
    if arch.matrix == "looks-linear":
        a, b = (gaussian_noise(4, generator(s, CPU), CPU)[0][None] for s in (6, 7))
        torch.testing.assert_close(network(a + b), network(a) + network(b), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("make, old", [
    (lambda d, gen: tanh_residual(3.0, d, gen, CPU),
     lambda v, w: torch.tanh(3.0 * normalize(v @ w[0].T, "lolayer")) @ w[1].T),
    (lambda d, gen: relu_residual(d, gen, CPU), lambda v, w: torch.relu(v @ w[0].T) @ w[1].T),
    (lambda d, gen: layer_tanh_residual(d, gen, CPU), lambda v, w: torch.tanh(normalize(v, "layer")) @ w[0].T),
])
def test_dilution_residuals_are_the_old_maps(make, old):
    """Each residual is the twin of its description: replaying its generator through the twin's Dense gives its
    weights (norms and activations draw nothing), and on them the old hand-written map, to rounding."""
    d = 12
    rho = make(d, generator(4, CPU))
    replay = generator(4, CPU)
    weights = [dense_weight(d, d, replay, CPU) for _ in range(2)]
    v = gaussian_noise(9, generator(5, CPU), CPU, dim=d)[0]
    torch.testing.assert_close(rho(v), old(v, weights), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("phi, norm, alpha", [("tanh", "layer", 0.5), ("relu", "batch", 1.0)])
def test_resnet_profile_is_the_old_resnet(phi, norm, alpha):
    """resnet_profile runs the twin of Table 1's identity ResNet with branches times alpha: on the twin's weights
    the old forward (its GSC curve at the first Dense and every block, and the top sign diversity of each block)."""
    n_blocks, n_points = 3, 40
    profile = resnet_profile(phi, norm, n_blocks, n_points, seed=7, alpha=alpha, device=CPU)
    gen = generator(7, CPU)
    x, y = gaussian_noise(n_points, gen, CPU)
    arch = Architecture(phi, norm, skip="identity")
    twin = _twin(arch, 2 * n_blocks, gen, CPU, alpha=alpha)
    first, *branches = [(m.scale * m.weight)[0] for m in twin.modules() if isinstance(m, DenseLayer)]
    f, h = parse_activation(phi).torch, (x @ first.T).requires_grad_(True)
    outputs, pres, v = [h], [], h
    for pair in zip(branches[0::2], branches[1::2]):
        branch = v
        for w in pair:
            pres.append(normalize(branch, norm))
            branch = f(pres[-1]) @ w.T
        v = v + alpha * branch
        outputs.append(v)
    error = (normalize(v, norm) * y).sum(-1)
    curve = gsc_from_gradients(outputs, torch.autograd.grad(error.sum(), outputs), error)
    np.testing.assert_allclose(profile["gsc"], curve, rtol=1e-10)
    np.testing.assert_allclose(profile["sign_diversity"], [sign_diversity(p) for p in pres[1::2]], rtol=1e-12)
    assert profile["k"].shape == profile["r"].shape == profile["r_d"].shape == (n_blocks,)


@pytest.mark.parametrize("phi, norm", [("relu", "batch"), ("tanh", "layer")])
def test_normalised_unit_is_the_old_unit(phi, norm):
    """normalised_unit_gsc's unit is the twin of [Dense, norm, phi]: replaying its generator (input, the Dense's
    weight and bias, labels) the old hand-written unit gives the same rate, to rounding."""
    width, n_points = 16, 24
    gen = generator(3, CPU)
    f = parse_activation(phi).torch
    x = f(normalize(torch.randn(n_points, width, generator=gen, dtype=torch.float64), "batch"))
    w = dense_weight(width, width, gen, CPU)
    y = torch.randn(n_points, width, generator=gen, dtype=torch.float64)
    values = network_gsc([lambda v: v @ w.T, lambda v: normalize(v, norm), f], x, y)
    assert normalised_unit_gsc(phi, norm, width, n_points, 3, device=CPU) == pytest.approx(values[3] / values[1],
                                                                                          rel=1e-12)


def test_table1_cell_is_simulate_architecture_per_seed_and_splits_over_seeds():
    """The sweep task of the stored Table 1 run: the same per-seed metrics as simulate_architecture, whether the seeds
    run in one cell or two (each seed draws its own data and network)."""
    from bnsym.sim.philipp import Architecture, simulate_architecture, table1_cell

    config = {"phi": "relu", "norm": "batch", "matrix": "gaussian", "skip": "none", "width": "100", "n_points": 64}
    whole = table1_cell({**config, "seeds": [0, 1, 2]})
    parts = [table1_cell({**config, "seeds": seeds}) for seeds in ([0], [1, 2])]
    direct = simulate_architecture(Architecture("relu", "batch"), 64, [0, 1, 2], device="cpu")
    for key, values in (("gsc", direct.gsc), ("std", direct.std), ("sign_diversity", direct.sign_diversity)):
        assert np.allclose(whole[key], values, rtol=1e-12)
        assert np.allclose(parts[0][key] + parts[1][key], values, rtol=1e-12)
