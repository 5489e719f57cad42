"""bnsym.sim.philipp: the dataset GSC of torch networks, the paper's layers and the dilution experiments.

Tolerance for Monte Carlo: 4.5 standard errors across independent networks (seeds).
"""

import math

import numpy as np
import pytest
import torch

from bnsym.core.device import generator
from bnsym.core.statistics import mc_tolerance
from bnsym.dilution import composed_dilution, diluted_rate, normalised_gsc_rate
from bnsym.sim.philipp import (
    Architecture,
    block_statistics,
    calibrate,
    compose_identity_blocks,
    dataset_gsc,
    gaussian_noise,
    haar_orthogonal,
    layer_tanh_residual,
    looks_linear,
    network_gsc,
    normalised_unit_gsc,
    normalize,
    relu_residual,
    simulate_architecture,
    tanh_residual,
    unit_sphere,
    weight,
)

K_SE = 4.5
CPU = torch.device("cpu")


def _mean_se(values):
    values = np.asarray(values)
    return values.mean(), values.std(ddof=1) / math.sqrt(len(values))


def test_gsc_matches_formula_with_finite_difference_gradients():
    """GSC_D(l, 0) = Q_D||J||_qm Q_D||f_l|| / Q_D|f_0| with the gradient from central differences."""
    gen = generator(0, CPU)
    w1, w2 = (torch.randn(6, 5, generator=gen, dtype=torch.float64) for _ in range(2))
    w2 = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    x = torch.randn(9, 5, generator=gen, dtype=torch.float64)
    y = torch.randn(9, 4, generator=gen, dtype=torch.float64)
    top = lambda h: torch.tanh(h) @ w2.T  # noqa: E731
    values = network_gsc([lambda v: v @ w1.T, top], x, y)
    h = x @ w1.T
    grad = torch.zeros_like(h)
    for i in range(h.shape[1]):
        e = torch.zeros_like(h)
        e[:, i] = 1e-6
        grad[:, i] = ((top(h + e) * y).sum(1) - (top(h - e) * y).sum(1)) / 2e-6
    f0 = (top(h) * y).sum(1)
    expected = (grad.square().sum(1) / 6).mean().sqrt() * h.square().sum(1).mean().sqrt() / f0.square().mean().sqrt()
    assert values[0] == 1.0 and values[2] == pytest.approx(expected.item(), rel=1e-8)


def test_orthogonal_layer_keeps_the_gsc():
    gen = generator(1, CPU)
    q = haar_orthogonal(20, gen, CPU)
    assert torch.allclose(q @ q.T, torch.eye(20, dtype=torch.float64), atol=1e-12)
    x, y = gaussian_noise(50, gen, CPU, dim=20)
    values = network_gsc([lambda v: v @ q.T, lambda v: v @ q.T], x, y)
    assert values[1] == pytest.approx(values[2], rel=1e-12)


def test_gsc_rejects_bad_shapes():
    with pytest.raises(ValueError, match="labels"):
        network_gsc([lambda v: v], torch.ones(3, 2), torch.ones(3, 4))
    with pytest.raises(ValueError, match="one value"):
        dataset_gsc([torch.ones(3, 2)], torch.ones(3, 2))


def test_normalisations():
    x = torch.randn(40, 7, dtype=torch.float64) * 3 + 1
    b, layer, lo = normalize(x, "batch"), normalize(x, "layer"), normalize(x, "lolayer")
    assert torch.allclose(b.mean(0), torch.zeros(7, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(b.var(0, unbiased=False), torch.ones(7, dtype=torch.float64))
    assert torch.allclose(layer.var(1, unbiased=False), torch.ones(40, dtype=torch.float64))
    assert torch.allclose(lo.square().mean(1), torch.ones(40, dtype=torch.float64))
    with pytest.raises(ValueError, match="unknown normalization"):
        normalize(x, "group")


@pytest.mark.parametrize("norm", ["none", "layer", "batch"])
def test_looks_linear_relu_network_is_linear(norm):
    """relu(a) - relu(-a) = a: an LLI ReLU network is additive at initialization (without BN's batch coupling)."""
    gen = generator(2, CPU)
    ws = [looks_linear(8, 8, pos, gen, CPU) for pos in ("lowest", "intermediate", "intermediate", "highest")]

    def net(v):
        for i, w in enumerate(ws):
            v = v @ w.T
            if i < len(ws) - 1:
                v = torch.relu(normalize(v, norm) if norm == "layer" else v)
        return v

    a, b = torch.randn(5, 8, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64)
    if norm == "batch":  # BN of an antisymmetric pair stays antisymmetric: the network is odd
        assert torch.allclose(net(-a), -net(a))
    elif norm == "none":
        assert torch.allclose(net(a + b), net(a) + net(b))
    else:  # layer norm rescales each row: positively homogeneous of degree 0, odd
        assert torch.allclose(net(-a), -net(a)) and torch.allclose(net(3 * a), net(a))


@pytest.mark.parametrize("m, n", [(8, 8), (16, 8), (8, 16)])
def test_weights_are_the_twins_dense_init(m, n):
    """weight() draws through the twin's Dense: its intermediate looks-linear layer has section H's blocks
    [[Q, -Q], [-Q, Q]] and the singular values of looks_linear's (a scaled Haar frame: all equal); orthogonal is
    sqrt(2) Q after a ReLU; a ReLU network of lowest, intermediate and highest layers stays linear."""
    gen = generator(4, CPU)
    w = weight(m, n, "looks-linear", True, "intermediate", gen, CPU)
    q = w[0::2, 0::2]
    for block in (-w[0::2, 1::2], -w[1::2, 0::2], w[1::2, 1::2]):
        assert torch.equal(block, q)
    reference = looks_linear(m, n, "intermediate", gen, CPU)
    torch.testing.assert_close(torch.linalg.svdvals(w), torch.linalg.svdvals(reference), rtol=1e-12, atol=1e-12)
    if m == n:
        square = weight(n, n, "orthogonal", True, "intermediate", gen, CPU)
        torch.testing.assert_close(square @ square.T, 2 * torch.eye(n, dtype=torch.float64), rtol=0, atol=1e-12)
    lowest, highest = (weight(n, n, "looks-linear", True, "lowest", gen, CPU),
                       weight(n, m, "looks-linear", True, "highest", gen, CPU))
    ws = [lowest, w, highest]  # n -> n -> m -> n

    def net(v):
        for i, layer in enumerate(ws):
            v = v @ layer.T
            v = torch.relu(v) if i < len(ws) - 1 else v
        return v

    a, b = torch.randn(5, n, dtype=torch.float64), torch.randn(5, n, dtype=torch.float64)
    torch.testing.assert_close(net(a + b), net(a) + net(b), rtol=1e-10, atol=1e-10)


def test_architecture_validation():
    with pytest.raises(ValueError, match="looks-linear"):
        Architecture("tanh", "none", "looks-linear")
    with pytest.raises(ValueError, match="normalisation"):
        Architecture("relu", "group")
    with pytest.raises(ValueError, match="width"):
        Architecture("relu", "none", width="300")
    with pytest.raises(ValueError, match="unknown activation"):
        Architecture("swosh", "none")


def test_scale_invariance_of_batch_relu_gsc():
    """Proposition 4: a network whose linear layers are each followed by normalisation has a scale-free GSC."""
    gen = generator(3, CPU)
    ws = [torch.randn(16, 16, generator=gen, dtype=torch.float64) / 4 for _ in range(5)]
    x, y = gaussian_noise(64, gen, CPU, dim=16)

    def layers(scales):
        return [lambda v, w=w, s=s: torch.relu(normalize(v @ (s * w).T, "batch")) for w, s in zip(ws, scales)]

    base = network_gsc(layers([1] * 5), x, y)
    assert np.allclose(network_gsc(layers([0.1, 7, 3, 0.5, 2]), x, y), base, rtol=1e-10)


def test_table1_small_run_shapes_and_lli():
    res = simulate_architecture(Architecture("relu", "none", "looks-linear"), n_points=200, seeds=[0, 1], depth=10,
                                device=CPU)
    assert res.gsc.shape == (2,) and res.curves.shape[0] == 2
    assert np.allclose(res.std, 1.0, atol=0.2) and np.allclose(res.sign_diversity, 0.5, atol=0.05)
    assert np.all(np.abs(res.gsc - 1) < 0.1)


@pytest.mark.parametrize("arch", [Architecture("tanh", "batch", width="100/200"),
                                  Architecture("relu", "batch", skip="gaussian"),
                                  Architecture("relu", "layer", "looks-linear")])
def test_table1_networks_of_a_batch_are_independent(arch, monkeypatch):
    """Seeds run side by side (one batch, or batches of two) give each seed's own network: the same metrics as
    the seed alone, to rounding (batch norm must normalise each network over its own datapoints)."""
    from bnsym.sim import philipp

    def fields(res):
        return [res.gsc, res.std, res.sign_diversity, res.curves, res.std_curves, res.sign_curves]

    together = simulate_architecture(arch, n_points=40, seeds=[0, 5, 9], depth=6, device=CPU)
    monkeypatch.setattr(philipp, "BATCH_ELEMENTS", 2 * 40 * 200)
    in_pairs = simulate_architecture(arch, n_points=40, seeds=[0, 5, 9], depth=6, device=CPU)
    alone = [simulate_architecture(arch, n_points=40, seeds=[seed], depth=6, device=CPU) for seed in (0, 5, 9)]
    for i, one in enumerate(alone):
        for batched, paired, single in zip(fields(together), fields(in_pairs), fields(one)):
            np.testing.assert_allclose(batched[i], single[0], rtol=1e-12)
            np.testing.assert_allclose(paired[i], single[0], rtol=1e-12)


def test_dataset_gsc_of_stacked_networks_is_each_network_s():
    gen = generator(2, CPU)
    w = torch.randn(3, 6, 5, generator=gen, dtype=torch.float64)
    x = torch.randn(3, 20, 5, generator=gen, dtype=torch.float64).requires_grad_(True)
    y = torch.randn(3, 20, 6, generator=gen, dtype=torch.float64)
    hidden = x @ w.mT
    out = normalize(torch.tanh(hidden), "batch")
    stacked = dataset_gsc([hidden, out], (out * y).sum(-1))
    for s in range(3):
        alone = network_gsc([lambda v, s=s: v @ w[s].T, lambda v: normalize(torch.tanh(v), "batch")], x[s], y[s])
        np.testing.assert_allclose(stacked[s], alone[:0:-1], rtol=1e-12)


def test_resnet_and_alternating_width_run():
    for arch in (Architecture("tanh", "layer", skip="identity"), Architecture("selu", "none", width="100/200")):
        res = simulate_architecture(arch, n_points=100, seeds=[0], depth=6, device=CPU)
        assert np.isfinite(res.gsc).all() and res.gsc[0] > 0


def test_theorem3_exact_rate_on_a_standalone_block():
    diffs = []
    for seed in range(6):
        gen = generator(10 + seed, CPU)
        u = unit_sphere(1500, 120, gen, CPU)
        g = torch.randn(1500, 120, generator=gen, dtype=torch.float64)
        stats = block_statistics(lambda v: v, calibrate(tanh_residual(10.0, 120, gen, CPU), u, 1.0), u, g)
        diffs.append(stats["r_d"] - diluted_rate(stats["r"], stats["k"]))
    mean, se = _mean_se(diffs)
    assert abs(mean) < K_SE * se and stats["r"] > 2  # far from r = 1, where the first order fails


def test_prop7_holds_for_ssd_blocks_and_needs_in_situ_k_otherwise():
    """Two two-sided mean tests over 12 draws: k = mc_tolerance(12, 2) (Student t, 11 dof; the composite k is a
    ratio, its draws heavy-tailed: a fixed 4.5 SE over 6 draws failed one re-draw of the weights at 4.8 SE, while
    34 further draws give 0.0013 +- 0.0015)."""
    ks, k = [0.7, 1.5, 3.0, 0.5], mc_tolerance(12, 2)
    ssd, unit_lt, situ_lt = [], [], []
    for seed in range(12):
        gen = generator(20 + seed, CPU)
        u = unit_sphere(1000, 120, gen, CPU)
        out = compose_identity_blocks([calibrate(relu_residual(120, gen, CPU), u, k) for k in ks], u)
        ssd.append(out["composite"] - composed_dilution(ks))
        out = compose_identity_blocks([calibrate(layer_tanh_residual(120, gen, CPU), u, k) for k in ks], u)
        unit_lt.append(out["composite"] - composed_dilution(ks))
        situ_lt.append(out["composite"] - composed_dilution(out["in_situ"]))
    for diffs in (ssd, situ_lt):
        mean, se = _mean_se(diffs)
        assert abs(mean) < k * se
    mean, se = _mean_se(unit_lt)
    assert mean > 20 * se  # unit-input k_b overstate the dilution loss of length-discarding blocks


def test_batch_relu_unit_rate_matches_mean_field():
    values = [normalised_unit_gsc("relu", "batch", 384, 384, seed, device=CPU) for seed in range(10)]
    mean, se = _mean_se(values)
    assert abs(mean - normalised_gsc_rate("relu")) < K_SE * se


def test_dynamical_weights_have_their_structure_and_unit_qm_norm():
    from bnsym.dilution import qm_norm
    from bnsym.sim.philipp import dynamical_weights

    gen = generator(4, CPU)
    for init in ("gaussian", "skew", "negative-gram", "correlated"):
        ws = dynamical_weights(init, 3, 30, gen, CPU)
        assert np.allclose([qm_norm(w.numpy()) for w in ws], 1.0)
    skew = dynamical_weights("skew", 1, 30, gen, CPU)[0]
    assert torch.allclose(skew, -skew.T)
    gram = dynamical_weights("negative-gram", 1, 30, gen, CPU)[0]
    assert torch.allclose(gram, gram.T) and torch.linalg.eigvalsh(gram).max() < 1e-10
    pairs = [dynamical_weights("correlated", 2, 200, generator(s, CPU), CPU) for s in range(3)]
    corr = np.mean([float((a * b).sum() / (a.norm() * b.norm())) for a, b in pairs])
    assert abs(corr - 0.5) < 0.03  # 0.5 up to O(1/d) fluctuations of the normalisation
    with pytest.raises(ValueError, match="unknown initialization"):
        dynamical_weights("hamiltonian", 1, 4, gen, CPU)


def test_dynamical_resnet_reports_per_block_dilution():
    """Identity skips around normalised blocks: dilution grows with depth (each block adds squared length)."""
    from bnsym.sim.philipp import simulate_dynamical_resnet

    out = simulate_dynamical_resnet("tanh", "layer", "gaussian", 200, 0, n_blocks=6, device=CPU)
    assert out["k"].shape == (6,) and np.all(out["r_d"] > 0) and np.isfinite(out["log10_gsc"])
    assert np.all(np.diff(out["k"]) > 0)


def test_sign_diversity_and_std_on_known_inputs():
    from bnsym.sim.philipp import preactivation_std, sign_diversity

    pre = torch.tensor([[1.0, -1.0, 2.0], [-1.0, -2.0, 3.0], [1.0, -3.0, 4.0], [-1.0, -4.0, 5.0]], dtype=torch.float64)
    assert sign_diversity(pre) == pytest.approx((0.5 + 0 + 0) / 3)
    assert preactivation_std(pre) == pytest.approx(math.sqrt((1.0 + 1.25 + 1.25) / 3))
