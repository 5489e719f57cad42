"""arch.ntk: exact reductions without BN, the adjoint of the per-entry backward route, Yang's reference setting by an
independent per-entry computation, and the empirical NTK of finite torch networks."""

import numpy as np
import pytest
import torch

from bnsym import arch
from bnsym.arch import Activation, BatchNorm, Dense, Residual, repeat, serial
from bnsym.arch.ntk import ntk_per_entry
from bnsym.core.statistics import mc_tolerance
from bnsym.nngp.ntk import arccos_ntk, bn_ntk
from bnsym.sim.ntk import empirical_ntk

torch.set_num_threads(1)


def _gram(batch: int, dim: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).standard_normal((batch, dim))
    return x, x @ x.T / dim


def _relu_ntk_reference(sigma0: np.ndarray, depth: int, weight_var: float, bias_var: float) -> np.ndarray:
    """Jacot et al.'s recursion for a relu MLP, written out: arc-cosine kernels of degree 1 and 0."""
    sigma = weight_var * sigma0 + bias_var
    theta = sigma.copy()
    for layer in range(depth):
        root = np.sqrt(np.diag(sigma))
        angle = np.arccos(np.clip(sigma / np.outer(root, root), -1.0, 1.0))
        np.fill_diagonal(angle, 0.0)  # arccos is ill-conditioned at 1: the diagonal's angle is exactly 0
        kernel = np.outer(root, root) * (np.sin(angle) + (np.pi - angle) * np.cos(angle)) / (2 * np.pi)
        slope = (np.pi - angle) / (2 * np.pi)
        if layer == depth - 1:
            return kernel + theta * slope
        sigma = weight_var * kernel + bias_var
        theta = sigma + weight_var * theta * slope
    raise AssertionError("depth must be positive")


@pytest.mark.parametrize("depth, weight_var, bias_var", [(1, 1.0, 0.0), (3, 2.0, 0.1), (5, 1.5, 0.4)])
def test_without_batch_norm_it_is_the_relu_ntk(depth, weight_var, bias_var):
    _, sigma0 = _gram(6)
    net = repeat(serial(Dense(weight_var, bias_var), Activation("relu")), depth)
    result = arch.ntk(net, sigma0, with_error=True)
    reference = _relu_ntk_reference(sigma0, depth, weight_var, bias_var)
    assert result.method == "exact"
    np.testing.assert_allclose(result.value, reference, rtol=1e-10, atol=1e-12)


def test_the_backward_map_is_the_adjoint_of_the_tangent_map():
    derivation = arch.derive_ntk_adjoint()
    assert derivation["adjoint"] == 0
    assert derivation["two_layers"] == 0


@pytest.mark.parametrize("net", [
    repeat(serial(Dense(), BatchNorm(), Activation("relu")), 2),
    serial(Dense(bias_var=0.5), BatchNorm(eps=0.1), Activation("tanh"), Dense(), BatchNorm(eps=0.1),
           Activation("tanh")),
], ids=["bn-relu", "bn-tanh"])
def test_per_entry_backward_recursions_equal_the_forward_propagation(net):
    """On the same samples the routes are adjoint sums: they agree to rounding."""
    _, sigma0 = _gram(5)
    entries = [(0, 0), (0, 3), (2, 4), (4, 4)]
    forward = arch.ntk(net, sigma0, with_error=True, points=2**11, replicates=4, method="qmc")
    backward = ntk_per_entry(net, sigma0, entries, points=2**11, replicates=4)
    rows, columns = zip(*entries)
    np.testing.assert_allclose(backward.value, forward.value[rows, columns], rtol=1e-10)


def _bn_relu(h: torch.Tensor) -> torch.Tensor:
    centred = h - h.mean()
    return torch.relu(centred / torch.sqrt((centred * centred).mean()))


def _yang_reference(sigma0: np.ndarray, draws: int, replicates: int) -> tuple[np.ndarray, np.ndarray]:
    """Depth 1 (Dense, BN, relu; eps = 0, no bias) one backward recursion per entry, as Yang's reference notebook
    does, by plain Monte Carlo with autograd Jacobians: Theta_ab = K_ab + tr(Sigma0 E[J^T E_ab J]). J is 1/r times a
    function of the direction of G h (r = norm(G h)), and 1/r^2 has an infinite variance at B = 5, so each sample's
    J^T E J is weighted by r^2 E[r^-2 | direction] = r^2 q / (B - 3), q = (G h)^T (G Sigma0 G)^+ (G h) / r^2 (r^2 given
    the direction is Gamma((B - 1)/2, rate q / 2)). Per-replicate values (R, B, B)."""
    batch = len(sigma0)
    factor = torch.from_numpy(np.linalg.cholesky(sigma0))
    centring = np.eye(batch) - 1.0 / batch
    precision = np.linalg.pinv(centring @ sigma0 @ centring)
    generator = torch.Generator().manual_seed(7)
    jacobian = torch.func.vmap(torch.func.jacrev(_bn_relu))
    values = np.zeros((replicates, batch, batch))
    for r in range(replicates):
        h = torch.randn(draws, batch, generator=generator, dtype=torch.float64) @ factor.T
        y, jac = torch.func.vmap(_bn_relu)(h).numpy(), jacobian(h).numpy()
        kernel = y.T @ y / draws
        centred = h.numpy() @ centring
        jac = jac * np.sqrt(np.einsum("pa,ab,pb->p", centred, precision, centred) / (batch - 3))[:, None, None]
        for a in range(batch):
            for b in range(a, batch):
                delta = np.einsum("pc,pd->cd", jac[:, a], jac[:, b]) / draws
                values[r, a, b] = values[r, b, a] = kernel[a, b] + np.sum(sigma0 * (delta + delta.T) / 2)
    return values.mean(0), values.std(0, ddof=1) / np.sqrt(replicates)


def test_yang_reference_setting_entry_by_entry():
    """12 inputs in batches of 7 and 5, depth 1, relu, eps = 0, no bias: every within-batch entry."""
    x, _ = _gram(12, seed=3)
    batches = [x[:7], x[7:]]
    replicates = 32
    k = mc_tolerance(replicates, n_comparisons=28 + 15)
    net = serial(Dense(), BatchNorm(), Activation("relu"))
    for inputs in batches:
        sigma0 = inputs @ inputs.T / inputs.shape[1]
        theory = arch.ntk(net, sigma0, with_error=True, points=2**13)
        reference, se = _yang_reference(sigma0, 2**12, replicates)
        tolerance = k * np.sqrt(se**2 + theory.error**2)
        assert tolerance.max() < 0.03 * np.abs(reference).max()
        assert np.all(np.abs(theory.value - reference) <= tolerance), np.abs(theory.value - reference) / tolerance


FINITE = {
    "BN -> relu, depth 1": repeat([Dense(), BatchNorm(), Activation("relu")], 1),
    "BN -> relu, depth 2": repeat([Dense(), BatchNorm(), Activation("relu")], 2),
    "BN -> tanh, eps 0.1, biases": repeat([Dense(bias_var=0.5), BatchNorm(eps=0.1), Activation("tanh")], 2),
    "relu -> BN, eps 0.1": repeat([Dense(), Activation("relu"), BatchNorm(eps=0.1)], 2),
    "pre-activation ResNet": serial(Dense(), repeat(Residual([BatchNorm(), Activation("relu"), Dense()]), 2)),
    "post-activation ResNet": serial(Dense(), Activation("relu"), repeat([Residual([Dense(), BatchNorm()]),
                                                                         Activation("relu")], 2)),
    "x + tanh(x) -> BN -> relu": serial(Dense(), Residual([Activation("tanh")]), BatchNorm(), Activation("relu")),
}


@pytest.mark.parametrize("label", FINITE)
def test_finite_networks_agree_with_the_theory(label):
    net = FINITE[label]
    x, sigma0 = _gram(8, seed=1)
    width, seeds = 512, 16
    samples = np.stack([empirical_ntk(net, x, width, seed) for seed in range(seeds)])
    mean, se = samples.mean(0), samples.std(0, ddof=1) / np.sqrt(seeds)
    theory = arch.ntk(net, sigma0, with_error=True, points=2**12)
    upper = np.triu_indices(8)
    tolerance = mc_tolerance(seeds, n_comparisons=len(upper[0])) * np.sqrt(se**2 + theory.error**2)
    z = np.abs(mean - theory.value) / tolerance
    assert z[upper].max() <= 1.0, z


def test_an_infinite_tangent_kernel_is_refused():
    _, sigma0 = _gram(6)
    with pytest.raises(ValueError, match="tangent kernel is infinite"):
        arch.ntk(serial(Dense(), Activation("relu"), BatchNorm()), sigma0)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="PSD|positive"):
        arch.ntk(serial(Dense(), Activation("relu")), -np.eye(4))


def test_the_ntk_across_two_batches_agrees_with_finite_networks():
    """Two batches of 8, each normalised on its own: the 16 x 16 joint NTK, the cross block included."""
    x, sigma0 = _gram(16, seed=2)
    net = serial(Dense(), BatchNorm(), Activation("relu"))
    theory = arch.ntk_cross(net, sigma0, (8, 8), with_error=True)
    width, seeds = 512, 16
    samples = np.stack([empirical_ntk(net, x, width, seed, sizes=(8, 8)) for seed in range(seeds)])
    mean, se = samples.mean(0), samples.std(0, ddof=1) / np.sqrt(seeds)
    upper = np.triu_indices(16)
    tolerance = mc_tolerance(seeds, n_comparisons=len(upper[0])) * np.sqrt(se**2 + theory.error**2)
    z = np.abs(mean - theory.value) / tolerance
    assert z[upper].max() <= 1.0, z
    assert np.abs(theory.value[:8, 8:]).max() > 3 * tolerance[:8, 8:].max()  # a zero cross block would fail


def test_batches_must_be_large_enough_and_cover_sigma0():
    _, sigma0 = _gram(8)
    net = serial(Dense(), BatchNorm(), Activation("relu"))
    with pytest.raises(ValueError, match="add up"):
        arch.ntk_cross(net, sigma0, (4, 5))
    with pytest.raises(ValueError, match="batch size"):
        arch.ntk_cross(net, sigma0, (5, 3))


def test_bn_ntk_cuts_a_data_set_into_batches():
    """12 points in 2 batches of 8 (the second wraps around to the first 4 points): the blocks are the NTK of each
    batch and the NTK across the two (checked against finite networks above)."""
    x = np.random.default_rng(4).standard_normal((12, 16))
    prior = bn_ntk("relu", x, 1, 8)
    np.testing.assert_array_equal(prior.train_rows, np.r_[0:12, 0:4])
    copies = x[prior.train_rows]
    net = serial(Dense(), BatchNorm(), Activation("relu"))
    gram = copies @ copies.T / 16
    # bn_ntk scales the inputs by a power of 2 (the NTK is blind to it): equal to rounding, not bit for bit
    np.testing.assert_allclose(prior.train[:8, 8:], arch.ntk_cross(net, gram, (8, 8))[:8, 8:], rtol=1e-9)
    np.testing.assert_allclose(prior.train[8:, 8:], arch.ntk(net, gram[8:, 8:]), rtol=1e-9)
    np.testing.assert_array_equal(prior.train[8:, :8], prior.train[:8, 8:].T)


def test_bn_ntk_batches_test_points_among_themselves():
    """6 test points make one batch of 8, completed by the first 2 training points: its blocks with the two training
    batches are the NTK across batches of the joint inputs, and its diagonal that of the test batch alone."""
    x = np.random.default_rng(5).standard_normal((16, 16))
    x_test = np.random.default_rng(6).standard_normal((6, 16))
    prior = bn_ntk("relu", x, 1, 8, X_test=x_test)
    assert prior.train is None and prior.cross.shape == (6, 16) and prior.test_diagonal.shape == (6,)
    net = serial(Dense(), BatchNorm(), Activation("relu"))
    test_batch = np.concatenate([x_test, x[:2]])
    for start in (0, 8):
        joint = np.concatenate([test_batch, x[start:start + 8]])
        expected = arch.ntk_cross(net, joint @ joint.T / 16, (8, 8))[:6, 8:]
        np.testing.assert_allclose(prior.cross[:, start:start + 8], expected, rtol=1e-9)
    own = arch.ntk(net, test_batch @ test_batch.T / 16)
    np.testing.assert_allclose(prior.test_diagonal, np.diag(own)[:6], rtol=1e-9)


@pytest.mark.parametrize("name", ["relu", "tanh"])
def test_at_a_bsb1_input_the_ntk_is_exact_and_agrees_with_finite_networks(name):
    """Sigma0 = 0.7 I + 0.3 11^T: every BN -> phi maps an exchangeable Theta by the adjoint of the closed-form
    backward map, no sampling; checked against finite networks and, at depth 1, Yang's per-entry route."""
    sigma0 = 0.7 * np.eye(8) + 0.3
    x = np.sqrt(8) * np.linalg.cholesky(sigma0)
    net = repeat([Dense(), BatchNorm(), Activation(name)], 2)
    theory = arch.ntk(net, sigma0, with_error=True, method="qmc")
    assert theory.method == "exact" and theory.error.max() < 1e-10
    seeds = 16
    samples = np.stack([empirical_ntk(net, x, 512, seed) for seed in range(seeds)])
    mean, se = samples.mean(0), samples.std(0, ddof=1) / np.sqrt(seeds)
    upper = np.triu_indices(8)
    assert np.all(np.abs(mean - theory.value)[upper] <= mc_tolerance(seeds, len(upper[0])) * se[upper])
    if name == "relu":
        depth1 = arch.ntk(serial(Dense(), BatchNorm(), Activation("relu")), sigma0)
        reference, se = _yang_reference(sigma0, 2**12, 32)
        assert np.all(np.abs(depth1 - reference) <= mc_tolerance(32, len(upper[0])) * se)


def test_arccos_ntk_is_jacots_recursion():
    """The no-BN NTK of a data set, between two sets of rows, against the written-out relu recursion."""
    x = np.random.default_rng(8).standard_normal((7, 5))
    reference = _relu_ntk_reference(x @ x.T / 5, 3, 1.0, 0.0)
    np.testing.assert_allclose(arccos_ntk("relu", x[:4], x[4:], 3), reference[:4, 4:], rtol=1e-10)
    np.testing.assert_allclose(arccos_ntk("relu", x, None, 3), reference, rtol=1e-10)
