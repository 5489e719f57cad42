"""bnsym.arch and its twin bnsym.sim.arch: exact reductions to the theory of one layer, the derived maps against
independent references, finite networks against the infinite-width prediction, bad input, the spec grammar and
the ``bnsym arch`` command.

Finite-width checks: M networks per width at widths 64, 128 and 256, each layer's mean diagonal, mean
off-diagonal and gradient statistic S averaged over the networks with its standard error (std / sqrt(M), networks
independent), fitted by weighted least squares as a + b / width (the O(1/n) bias of a smooth function of the layer
Grams); the intercept's standard error and the theory's own error make z, compared with k = mc_tolerance(M, number
of comparisons of the architecture). A quantity the twin holds exactly (a batch-normed layer's mean diagonal, a
LayerNorm output's) is compared with an absolute tolerance instead.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import sympy as sp
import torch
from conftest import HOMOGENEOUS, bsb1, gaussian_pair_moment, random_psd
from conftest import run_cli as _run
from torch import nn

import bnsym
from bnsym import arch
from bnsym.arch import (
    Activation,
    BatchNorm,
    Dense,
    LayerNorm,
    Residual,
    describe,
    parse_architecture,
    repeat,
    serial,
)
from bnsym.arch.derivations import derive_layer_norm, lambdified
from bnsym.core.symbols import K_aa, K_ab, K_bb, epsilon, m_a, m_b
from bnsym.sim import extrapolate_to_infinite_width, mc_tolerance, mean_and_se
from bnsym.sim.arch import (
    ResidualBlock,
    extrapolated_signal_propagation,
    from_torch,
    simulate_signal_propagation,
    torch_network,
)

B = 8
SIGMA0 = random_psd(B, B + 4, seed=3)  # a generic input Gram: no symmetry for the routes to lean on
WIDTHS = (64, 128, 256)
NETWORKS = 48


def relu_block(eps: float = 0.0) -> list:
    return [Dense(), Activation("relu"), BatchNorm(eps)]


ARCHITECTURES = {
    "BN -> relu MLP": repeat([Dense(), BatchNorm(), Activation("relu")], 2),
    "relu -> BN MLP": repeat(relu_block(0.01), 2),
    "tanh -> BN MLP": repeat([Dense(), Activation("tanh"), BatchNorm()], 2),
    "pre-activation BN ResNet": serial(Dense(), repeat(Residual([BatchNorm(), Activation("relu"), Dense()]), 2)),
    "post-activation BN ResNet": serial(Dense(), Activation("relu"),
                                       repeat([Residual([Dense(), BatchNorm()]), Activation("relu")], 2)),
    "LayerNorm after relu": repeat([Dense(), Activation("relu"), LayerNorm()], 2),
    "LayerNorm before tanh": repeat([Dense(), LayerNorm(), Activation("tanh")], 2),
    "unnormalised ResNet, alpha = 0.3": serial(Dense(), repeat(Residual([Activation("relu"), Dense()], 0.3), 2)),
    "eval-mode BN after relu": repeat([Dense(), Activation("relu"), BatchNorm(mode="eval")], 2),
}


def kind(layer) -> str:
    """The layer kind a z-score is reported under."""
    return {Dense: "Dense", BatchNorm: "BatchNorm", LayerNorm: "LayerNorm", Activation: "Activation",
            Residual: "Residual"}[type(layer)]


def finite_width_z(net, sigma0=SIGMA0, gradient=True, seed=0) -> tuple[list[tuple[str, str, int, float]], int]:
    """(kind, quantity, layer, z) for every comparison of twin and theory, and the number of exact ones checked."""
    theory = arch.signal_propagation(net, sigma0)
    measured = extrapolated_signal_propagation(net, sigma0, WIDTHS, NETWORKS, seed=seed, gradient=gradient)
    out, exact = [], 0
    for name in ("diagonal", "off_diagonal") + (("gradient",) if gradient else ()):
        predicted, fitted = getattr(theory, name), measured.infinite[name]
        for layer in range(len(net)):
            value, error = predicted.value[layer], predicted.error[layer]
            if measured.exact[name][layer]:  # the twin holds it exactly: no spread to fit
                means = np.array([e.value[layer] for e in measured.per_width[name]])
                assert np.abs(means - value).max() <= 1e-9 + error, (name, layer, means, value)
                exact += 1
                continue
            z = (fitted.value[layer] - value) / np.hypot(fitted.error[layer], error)
            out.append((kind(net.layers[layer]), name, layer, z))
    return out, exact


# ------------------------------------------------------------------------------------------ exact reductions


@pytest.mark.parametrize("phi", ["relu", "leaky_relu(0.2)", "relu^1.5"])
def test_bn_stack_is_the_iterated_bn_kernel(phi):
    """[Dense, BatchNorm, phi] * L is bn_kernel iterated (weight_var 2: the Dense scales, BN removes it)."""
    net = repeat([Dense(2.0), BatchNorm(), Activation(phi)], 3)
    expected = SIGMA0
    for _ in range(3):
        expected = bnsym.bn_kernel(phi, 2.0 * expected)
    assert np.abs(arch.kernel(net, SIGMA0) - expected).max() <= 1e-12 * np.abs(expected).max()


def test_bn_tanh_stack_at_a_bsb1_input_is_the_spherical_bn_kernel():
    net = repeat([Dense(), BatchNorm(), Activation("tanh")], 2)
    sigma = bsb1(B, 1.3, 0.4)
    got = arch.kernel(net, sigma, with_error=True)
    expected = bnsym.bn_kernel("tanh", bnsym.bn_kernel("tanh", sigma, method="spherical"), method="spherical",
                               with_error=True)
    assert got.method == "exact" and np.abs(got.value - expected.value).max() <= got.error.max() + expected.error.max()


@pytest.mark.parametrize("batch", [8, 32])
@pytest.mark.parametrize("phi", ["relu", "tanh"])
def test_gradient_growth_is_the_gradient_rate_at_the_fixed_point(phi, batch):
    """At Sigma* every block below the top one multiplies S by lambda_G (Pi is then proportional to G)."""
    depth = 4
    result = arch.signal_propagation(repeat([Dense(), BatchNorm(), Activation(phi)], depth),
                                     bnsym.fixed_point(phi, batch).matrix)
    s, error = result.gradient.value, result.gradient.error
    after, after_error = s[2::3], error[2::3]  # S after each block's activation; the top block's Pi is I, not G
    growth = after[:-2] / after[1:-1]
    rate = bnsym.gradient_rate(phi, batch, with_error=True)
    bound = rate.error + growth * (after_error[:-2] / after[:-2] + after_error[1:-1] / after[1:-1])
    assert np.all(np.abs(growth - rate.value) <= bound + 1e-12 * rate.value)
    if phi == "relu":
        assert result.gradient.method == "exact" and np.abs(growth - rate.value).max() <= 1e-10 * rate.value


def _cho_saul(k: np.ndarray) -> np.ndarray:
    """V_relu(K) = sqrt(K_aa K_bb) (sin t + (pi - t) cos t) / (2 pi), t = arccos(corr) (Cho & Saul 2009)."""
    root = np.sqrt(np.diag(k))
    angle = np.arccos(np.clip(k / np.outer(root, root), -1, 1))
    return np.outer(root, root) * (np.sin(angle) + (np.pi - angle) * np.cos(angle)) / (2 * np.pi)


def _williams_erf(k: np.ndarray) -> np.ndarray:
    """V_erf(K) = (2/pi) arcsin(2 K_ab / sqrt((1 + 2 K_aa)(1 + 2 K_bb))) (Williams 1997)."""
    scale = np.sqrt(1 + 2 * np.diag(k))
    return 2 / np.pi * np.arcsin(2 * k / np.outer(scale, scale))


def test_compositions_without_bn_are_the_arccos_and_gauss_hermite_kernels():
    net = [Dense(1.5, 0.2), Activation("relu"), Dense(2.0, 0.1), Activation("erf"), Dense(0.7, 0.0),
           Activation("relu")]
    expected = _cho_saul(_williams_erf(_cho_saul(1.5 * SIGMA0 + 0.2) * 2.0 + 0.1) * 0.7)
    got = arch.kernel(net, SIGMA0, with_error=True)
    assert np.abs(got.value - expected).max() <= 1e-10 and got.error.max() <= 1e-10


def test_no_batch_norm_admits_any_batch_size():
    """Without a train-mode BatchNorm, B = 1 .. 3 are batches like any other (here B = 3: Cho-Saul)."""
    sigma = random_psd(3, seed=5)
    assert np.abs(arch.kernel([Dense(), Activation("relu")], sigma) - _cho_saul(sigma)).max() <= 1e-12


# ------------------------------------------------------------------------------------ the derived maps


def test_layer_norm_rule_is_neural_tangents_for_a_gaussian_input():
    rule = derive_layer_norm()
    assert sp.simplify(rule["gaussian"] - K_ab / (sp.sqrt(K_aa + epsilon) * sp.sqrt(K_bb + epsilon))) == 0
    assert sp.simplify(rule["layer_norm"].subs({m_a: 0, m_b: 0}) - rule["gaussian"]) == 0


@pytest.mark.parametrize("eps", [0.0, 0.3])
def test_layer_norm_after_relu_is_the_derived_rule_with_independent_moments(eps):
    """[Dense, relu, LayerNorm]: the derived rule evaluated on moments of relu computed in polar coordinates
    (conftest) and the mean E[relu(h)] = sqrt(K_aa / (2 pi)), against the engine."""
    k = 1.7 * SIGMA0
    _, a, b = HOMOGENEOUS["relu"]
    moments = np.array([[gaussian_pair_moment(1.0, a, b, k[np.ix_([i, j], [i, j])]) for j in range(B)]
                        for i in range(B)])
    mean = np.sqrt(np.diag(k) / (2 * np.pi))
    rule = sp.lambdify((K_ab, K_aa, K_bb, m_a, m_b, epsilon), derive_layer_norm()["layer_norm"])
    diagonal = np.diag(moments)
    expected = rule(moments, diagonal[:, None], diagonal[None, :], mean[:, None], mean[None, :], eps)
    got = arch.kernel([Dense(1.7), Activation("relu"), LayerNorm(eps)], SIGMA0)
    assert np.abs(got - expected).max() <= 1e-9


def test_phi_bn_at_an_exchangeable_input_against_plain_monte_carlo():
    """relu -> BN at K = sigma^2 I + beta 11^T: (B p / (B - 1)) G, against plain Monte Carlo of BN(relu(h)) (batch
    norm written here; the all-negative rows map to 0), within k standard errors of the draws."""
    batch, sigma = 6, bsb1(6, 1.0, 0.5)
    got = arch.kernel([Dense(), Activation("relu"), BatchNorm()], sigma, with_error=True)
    assert got.method == "exact"
    rng = np.random.default_rng(11)
    draws = rng.standard_normal((400_000, batch)) @ np.linalg.cholesky(sigma).T
    x = np.maximum(draws, 0)
    centred = x - x.mean(1, keepdims=True)
    spread = np.sqrt((centred**2).mean(1, keepdims=True))
    y = np.divide(centred, spread, out=np.zeros_like(centred), where=spread > 0)
    products = y[:, :, None] * y[:, None, :]
    mean, se = products.mean(0), products.std(0, ddof=1) / np.sqrt(len(y))
    assert np.all(np.abs(mean - got.value) <= mc_tolerance(len(y), batch * batch) * se + 1e-12)
    assert np.any(spread == 0)  # the convention mattered: some batches were all negative


def test_pre_activation_resnet_stream_grows_linearly():
    """De & Smith: x^{l+1} = x^l + Dense(relu(BN(x^l))) at a BSB1 input. BN -> relu maps every BSB1 input to Sigma*,
    so K^l = K^0 + l Sigma*: the branch's variance stays q* while the stream's grows like l, so the branch's share
    falls like 1/l, its standard deviation relative to the stream's like 1/sqrt(l)."""
    depth, sigma = 6, bsb1(B, 1.0, 0.2)
    result = arch.signal_propagation(serial(Dense(), repeat(Residual([BatchNorm(), Activation("relu"), Dense()]),
                                                            depth)), sigma)
    star = bnsym.fixed_point("relu", B).matrix
    for level in range(depth + 1):
        assert np.abs(result.kernels[level].value - (sigma + level * star)).max() <= 1e-11
    branch = np.array([result.branch_variance[level].value for level in range(1, depth + 1)])
    assert np.abs(branch - (np.trace(star) - star.sum() / B) / B).max() <= 1e-11
    share = branch / result.channel_variance.value[1:]
    assert np.all(np.diff(share) < 0)
    law = lambdified("depth_downscaling")(np.arange(depth + 1), result.channel_variance.value[0], branch[0], 1.0)
    assert np.abs(law - result.channel_variance.value).max() <= 1e-11
    assert arch.derive_depth_downscaling()["limit"] == 1


def test_relu_then_batch_norm_has_an_infinite_gradient_at_eps_zero():
    """relu -> BN at eps = 0: S is inf below the BN (with a note), finite above it; eps > 0 makes it finite."""
    net = repeat(relu_block(), 2)
    result = arch.signal_propagation(net, SIGMA0)
    s = result.gradient.value
    assert np.all(np.isinf(s[:2])) and np.all(np.isfinite(s[2:])) and "eps > 0" in result.gradient.note
    assert np.all(np.isfinite(arch.signal_propagation(repeat(relu_block(0.01), 2), SIGMA0).gradient.value))


def test_bsb1_backward_reduces_to_thm7():
    assert arch.derive_bsb1_backward()["minus_thm7"] == 0


# --------------------------------------------------------------------------------------- finite networks


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_twin_agrees_with_the_theory(name):
    zs, _ = finite_width_z(ARCHITECTURES[name])
    k = mc_tolerance(NETWORKS, len(zs))
    worst = max(zs, key=lambda item: abs(item[3]))
    assert abs(worst[3]) <= k, f"{name}: {worst} (k = {k:.2f})"


def test_twin_kernels_of_relu_bn_at_eps_zero():
    """The forward pass of relu -> BN at eps = 0 (the constant-neuron convention in both), kernels only."""
    zs, exact = finite_width_z(repeat(relu_block(), 2), gradient=False)
    assert exact >= 1 and max(abs(z) for *_, z in zs) <= mc_tolerance(NETWORKS, len(zs))


def test_twin_detects_a_wrong_theory():
    """The comparison has power: the post-activation ResNet's output variance extrapolated from the twin agrees with
    the theory and rejects the same network without its residual branches (the sum's kernel left out)."""
    net = ARCHITECTURES["post-activation BN ResNet"]
    right = np.diag(arch.kernel(net, SIGMA0)).mean()
    wrong = np.diag(arch.kernel(serial(Dense(), Activation("relu"), Activation("relu"), Activation("relu")),
                                SIGMA0)).mean()
    measured = [mean_and_se(np.diagonal(simulate_signal_propagation(net, SIGMA0, width, NETWORKS, seed=width).grams[
        :, -1], axis1=-2, axis2=-1).mean(-1)) for width in WIDTHS]
    intercept, se, _ = extrapolate_to_infinite_width(np.array(WIDTHS), *map(np.array, zip(*measured)))
    k = mc_tolerance(NETWORKS, 2)
    assert abs(intercept - right) <= k * se < abs(intercept - wrong)


def test_twin_layout_and_law():
    net = serial(Dense(2.0, 0.5), Activation("tanh"), Residual([LayerNorm(), Dense()], 0.5))
    model = torch_network(net, width=32, n_networks=3, in_features=5, device="cpu")
    x = torch.randn(3, 6, 5, dtype=torch.float64)
    outputs = model.layer_outputs(x)
    assert [tuple(o.shape) for o in outputs] == [(3, 6, 32)] * 3
    squares = model.layers[0].weight.detach().square().flatten()  # standard normal weights: mean square 1
    assert model.layers[0].weight.shape == (3, 32, 5)
    assert abs(float(squares.mean()) - 1) <= mc_tolerance(len(squares)) * float(squares.std()) / np.sqrt(len(squares))


# ------------------------------------------------------------------------------------- from_torch, specs


def test_from_torch_reads_a_sequential():
    torch.manual_seed(0)
    width = 256
    first = nn.Linear(16, width)
    nn.init.normal_(first.weight, std=np.sqrt(2.0 / 16))
    nn.init.normal_(first.bias, std=0.1)
    model = nn.Sequential(first, nn.BatchNorm1d(width), nn.ReLU(),
                          ResidualBlock(nn.Sequential(nn.LayerNorm(width), nn.Tanh(), nn.Linear(width, width)), 0.5),
                          nn.LeakyReLU(0.2), nn.Identity())
    net = from_torch(model)
    assert [describe(layer) for layer in net][1:] == ["bn(eps=1e-05)", "relu", "res(alpha=0.5,ln(eps=1e-05),tanh,dense"
                                                      f"({net.layers[3].branch.layers[2].weight_var:g},"
                                                      f"{net.layers[3].branch.layers[2].bias_var:g}))",
                                                      "leaky_relu(0.2)", "identity"]
    dense = net.layers[0]
    # estimated from 16 x 256 weights and 256 biases: mean squares of normals, relative standard error sqrt(2/n)
    assert abs(dense.weight_var - 2.0) <= mc_tolerance(16 * width, 2) * 2.0 * np.sqrt(2 / (16 * width))
    assert abs(dense.bias_var - 0.01) <= mc_tolerance(width, 2) * 0.01 * np.sqrt(2 / width)


@pytest.mark.parametrize("spec", ["dense,bn,relu*3", "dense(2,0.1),res(alpha=0.2,bn(eps=0.001),relu,dense)*2,ln",
                                  "dense,(relu,bn(mode=eval))*2,tanh(gamma=0.5),relu^1.5"])
def test_spec_round_trip(spec):
    net = parse_architecture(spec)
    assert parse_architecture(",".join(describe(layer) for layer in net)) == net


def test_spec_repeats():
    assert len(parse_architecture("dense,bn,relu*20")) == 60
    assert len(parse_architecture("dense,res(bn,relu,dense)*50")) == 51
    assert len(parse_architecture("dense,(bn,relu,dense)*3,bn")) == 11


# ---------------------------------------------------------------------------------------------- bad input


class Conv(nn.Module):
    def forward(self, x):
        return x


BAD_INPUT = {
    "unknown layer": (lambda: arch.kernel([Dense(), "relu"], SIGMA0), "unknown layer"),
    "first layer": (lambda: arch.kernel([Activation("relu"), Dense()], SIGMA0), "first layer must be a Dense"),
    "non-PSD Sigma0": (lambda: arch.kernel([Dense()], np.diag([1.0, 1, 1, 1, -1])), "positive semi-definite"),
    "non-square Sigma0": (lambda: arch.kernel([Dense()], np.ones((4, 5))), "square"),
    "B < 4 with BN": (lambda: arch.kernel([Dense(), BatchNorm()], np.eye(3)), "at least 4"),
    "constant batch with BN": (lambda: arch.kernel([Dense(), BatchNorm()], np.ones((5, 5))), "G Sigma G = 0"),
    "residual width": (lambda: from_torch(nn.Sequential(nn.Linear(4, 8), ResidualBlock(nn.Linear(8, 3)))),
                       "maps 8 features to 3"),
    "residual before the first Dense": (lambda: torch_network(serial(Residual([Dense()]), Dense()), 8,
                                                              in_features=5), "maps 5 features to 8"),
    "unreadable module": (lambda: from_torch(nn.Sequential(nn.Linear(4, 4), Conv())), "layer 1 (Conv)"),
    "nested unreadable": (lambda: from_torch(nn.Sequential(nn.Linear(4, 4), ResidualBlock(nn.Sequential(
        nn.ReLU(), nn.Softmax(dim=-1))))), "layer 1.branch.1 (Softmax)"),
    "not a module": (lambda: from_torch("relu"), "nn.Module"),
    "eval-mode BatchNorm1d": (lambda: from_torch(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4).eval())),
                              "running statistics"),
    "trained affine": (lambda: from_torch(nn.Sequential(nn.Linear(4, 4), _scaled_layer_norm())),
                       "affine weight differs between neurons"),
    "linear width": (lambda: from_torch(nn.Sequential(nn.Linear(4, 8), nn.Linear(6, 2))), "receives 8"),
    "points": (lambda: arch.kernel([Dense()], SIGMA0, points=1000), "power of 2"),
    "twin width": (lambda: torch_network([Dense()], width=0), "width"),
    "replicates": (lambda: arch.kernel([Dense()], SIGMA0, replicates=1), "replicates"),
    "slope of relu^0.4": (lambda: arch.signal_propagation([Dense(), Activation("relu^0.4")], SIGMA0), "is infinite"),
    "bad BatchNorm mode": (lambda: BatchNorm(mode="test"), "mode"),
    "negative weight_var": (lambda: Dense(-1.0), "weight_var"),
    "residual alpha": (lambda: Residual([Dense()], float("nan")), "alpha"),
    "spec": (lambda: parse_architecture("dense,bn(eps=1,eps=2)"), "given twice"),
    "spec repeat": (lambda: parse_architecture("dense,relu*0"), "repeats"),
}


def _scaled_layer_norm() -> nn.LayerNorm:
    """A LayerNorm whose weight differs between neurons, as after training (a constant one reads as affine)."""
    norm = nn.LayerNorm(4)
    with torch.no_grad():
        norm.weight.copy_(torch.arange(1.0, 5.0))
    return norm


@pytest.mark.parametrize("name", list(BAD_INPUT))
def test_bad_input_says_what_and_why(name):
    call, match = BAD_INPUT[name]
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        call()


def test_relu_04_kernel_is_fine_without_gradients():
    assert np.all(np.isfinite(arch.kernel([Dense(), Activation("relu^0.4")], SIGMA0)))


# -------------------------------------------------------------------------------------------------- CLI


def test_cli_json_equals_the_api_and_blocks_grow_by_lambda_g(capsys, tmp_path):
    plot = tmp_path / "spp.png"
    status, out, err = _run(capsys, ["arch", "dense,bn,relu*4", "--batch-size", "8", "--correlation", "0.3", "--json",
                                     "--plot", str(plot)])
    assert status == 0 and err == "" and plot.stat().st_size > 0
    result = json.loads(out)
    sigma = bsb1(8, 1.0, 0.3)
    expected = arch.signal_propagation(parse_architecture("dense,bn,relu*4"), sigma)
    assert result["gradient"]["value"] == expected.gradient.value.tolist()
    assert result["block"] == {"start": 0, "length": 3}
    # from the second block on the forward pass sits at Sigma*: the growth is lambda_G
    assert np.allclose(result["gradient_growth"][2:-1], bnsym.gradient_rate("relu", 8), rtol=1e-10)


def test_cli_text_and_errors(capsys):
    status, out, _ = _run(capsys, ["arch", "dense,res(bn,relu,dense)*3", "-B", "8"])
    assert status == 0 and "gradient growth per block of 1 layer(s)" in out
    for argv, match in ((["arch", "dense,foo", "-B", "8"], "unknown"), (["arch", "dense,bn", "-B", "3"], "at least 4"),
                        (["arch", "dense", "-B", "8", "--correlation", "2"], "correlation"),
                        (["arch", "dense", "-B", "8", "--points", "100"], "power of 2")):
        status, out, err = _run(capsys, argv)
        assert status == 2 and out == "" and len(err.splitlines()) == 1 and match in err, err


def test_cli_help_documents_the_grammar(capsys):
    status, out, _ = _run(capsys, ["arch", "--help"])
    assert status == 0 and "dense,bn,relu*20" in out
    assert "res([alpha=A,][skip=LAYER,]LAYERS)" in out and "init=gaussian|orthogonal|looks_linear" in out


def test_extrapolation_needs_three_widths_and_a_finite_gradient():
    """The twin's 1/width fit says why it cannot answer: too few widths, or S not finite (relu -> BN at eps = 0 on a
    strongly correlated batch, where many neurons are constant over the batch)."""
    with pytest.raises(ValueError, match="at least 3 widths"):
        extrapolated_signal_propagation(repeat(relu_block(0.01), 1), SIGMA0, (64, 128), 4)
    correlated = 0.1 * np.eye(B) + 0.9
    with pytest.raises(ValueError, match="gradient=False"):
        extrapolated_signal_propagation(repeat(relu_block(), 1), correlated, (16, 32, 64), 4)
    kernels = extrapolated_signal_propagation(repeat(relu_block(), 1), correlated, (16, 32, 64), 4, gradient=False)
    assert "gradient" not in kernels.infinite and kernels.exact["channel_mean_squared"][-1]
