"""The networks converted to descriptions (issue 42, item 3) draw their weights with the law of their old inits, and
Yang's MLPs (train and eval mode) compute what the twin of their description computes.

Each old init is written here as it was (the reference law); the twin's Dense of the description now used draws
the same generator's numbers in the same order for one layer, so each layer is compared exactly (float64, to
the rounding of two orders of the same product). Whole builders draw a bias per layer besides (the twin's
stream), so their layers are compared by replaying that stream, layer by layer.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bnsym import arch
from bnsym.core.activations import parse_activation
from bnsym.core.layers import Dense, parse_architecture
from bnsym.sim import daneshmand_mlp, digit_resnet
from bnsym.sim.arch import DenseLayer, dense_parameters, torch_network
from bnsym.train.networks import description, forward, init_weights, predict

ROUNDING = 1e-12  # float64: sqrt(a / b) * x against x * sqrt(c), the same number scaled in another order
C = 3  # networks


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _close(new: torch.Tensor, old: torch.Tensor) -> None:
    assert new.shape == old.shape
    torch.testing.assert_close(new, old, rtol=ROUNDING, atol=0.0)


@pytest.mark.parametrize(("n_in", "n_out"), [(64, 24), (24, 24), (24, 10)])
def test_xavier_dense_is_the_old_xavier_normal(n_in, n_out):
    """The digit ResNet's old draw: randn(C, n_out, n_in) * sqrt(2 / (n_in + n_out))."""
    old = torch.randn(C, n_out, n_in, generator=_gen(n_in), dtype=torch.float64) * (2 / (n_in + n_out)) ** 0.5
    new, bias = dense_parameters(digit_resnet.xavier(n_in, n_out), n_in, n_out, C, _gen(n_in), "cpu", torch.float64)
    _close(new, old)
    assert not bias.any()


def test_digit_resnet_layers_are_the_twins_in_order():
    """init_params: W_in, then each block's two layers, then W_out, each the twin of its Xavier Dense."""
    blocks, width = 2, 12
    params = digit_resnet.init_params(C, blocks, width, _gen(4), "cpu")
    gen, sizes = _gen(4), [(64, width)] + [(width, width)] * (2 * blocks) + [(width, 10)]
    replay = [dense_parameters(digit_resnet.xavier(*size), *size, C, gen, "cpu", torch.get_default_dtype())[0]
              for size in sizes]
    assert torch.equal(params[0], replay[0]) and torch.equal(params[2], replay[-1])
    assert torch.equal(params[1], torch.stack(replay[1:-1], 1).view(C, blocks, 2, width, width))
    assert not params[3].any() and bool((params[4] == 1).all()) and not params[5].any()


def _old_daneshmand(gen: torch.Generator, fan_in: int, fan_out: int, init: str):
    """Daneshmand's inits as they were drawn: uniform weights and biases of nn.Linear, U(0, 2 / sqrt(fan_in))
    weights (asymmetric), Gaussian weights without biases (He, Gaussian)."""
    shape, bound = (C, fan_out, fan_in), 1 / math.sqrt(fan_in)
    if init in ("torch", "asymmetric"):
        u = torch.rand(shape, generator=gen, dtype=torch.float64)
        w = (2 * u - 1) * bound if init == "torch" else 2 * u * bound
        return w, (2 * torch.rand(C, fan_out, 1, generator=gen, dtype=torch.float64) - 1) * bound
    variance = {"he": 2.0, "gaussian": 1.0}[init] / fan_in
    return math.sqrt(variance) * torch.randn(shape, generator=gen, dtype=torch.float64), None


@pytest.mark.parametrize("init", daneshmand_mlp.INITS)
def test_daneshmand_inits_are_the_old_draws(init):
    new_w, new_b = daneshmand_mlp.init_layer(_gen(7), C, 20, 16, init, torch.float64)
    old_w, old_b = _old_daneshmand(_gen(7), 20, 16, init)
    _close(new_w, old_w)
    assert (new_b is None) == (old_b is None)
    if old_b is not None:
        _close(new_b, old_b)


def test_yang_mlp_layers_are_the_twins_in_order():
    """init_weights: N(0, 1/fan_in) entries as before (the first layer is the old draw itself), each layer the
    twin of Dense() in turn."""
    weights = init_weights(C, 3, 12, 64, 10, _gen(2), torch.float64)
    old_first = torch.randn(C, 12, 64, generator=_gen(2), dtype=torch.float64) / math.sqrt(64)
    _close(weights[0].detach(), old_first)
    gen = _gen(2)
    for weight, (n_in, n_out) in zip(weights, [(64, 12), (12, 12), (12, 12), (12, 10)]):
        assert weight.requires_grad
        assert torch.equal(weight.detach(), dense_parameters(Dense(), n_in, n_out, C, gen, "cpu", torch.float64)[0])


def _yang_twin(weights: list[torch.Tensor], phi: str, eps: float, statistics: str):
    """The twin of Yang's description carrying ``weights`` (its Dense weights are sqrt(1 / n_in) W: W = weight /
    scale)."""
    net = torch_network(description(len(weights) - 1, phi, eps, statistics), weights[1].shape[-1], len(weights[0]),
                        in_features=weights[0].shape[-1], out_features=weights[-1].shape[-2], device="cpu")
    dense = [module for module in net.layers if isinstance(module, DenseLayer)]
    with torch.no_grad():
        for module, weight in zip(dense, weights, strict=True):
            module.weight.copy_(weight / module.scale)
    return net


@pytest.mark.parametrize("phi", ["tanh", "relu"])
def test_yang_mlp_forward_and_evaluation_are_the_twin_of_its_description(phi):
    """Training (statistics="batch") and evaluation with the training set's per-neuron statistics
    (statistics="reference") of the twin equal train.networks' forward and predict on the same weights."""
    weights = [w.detach() for w in init_weights(C, 3, 12, 8, 4, _gen(5), torch.float64)]
    x_train, x_test = (torch.randn(n, 8, generator=_gen(n), dtype=torch.float64) for n in (16, 5))
    logits, _ = forward(weights, x_train.T.expand(C, -1, -1), parse_activation(phi), 1e-3)
    twin = _yang_twin(weights, phi, 1e-3, "batch")(x_train.expand(C, -1, -1))
    torch.testing.assert_close(twin, logits.mT, rtol=ROUNDING, atol=ROUNDING)
    evaluated = _yang_twin(weights, phi, 1e-3, "reference")(x_test.expand(C, -1, -1),
                                                             reference=x_train.expand(C, -1, -1))
    torch.testing.assert_close(evaluated, predict(weights, x_train, x_test, parse_activation(phi), 1e-3).mT,
                               rtol=ROUNDING, atol=ROUNDING)


def test_reference_statistics_are_per_neuron_and_need_the_reference_set():
    """statistics="reference" differs from "population" (all neurons pooled) and from the test batch's own
    statistics; without reference inputs the twin refuses to guess them."""
    net = parse_architecture("dense(1,1),bn(statistics=reference)")
    x, reference = (torch.randn(2, n, 6, generator=_gen(n), dtype=torch.float64) for n in (4, 9))
    twin = torch_network(net, 6, 2, seed=3, device="cpu")
    h = twin.layers[0](torch.cat([reference, x], -2))
    h_ref, h_x = h[:, :9], h[:, 9:]
    expected = (h_x - h_ref.mean(-2, keepdim=True)) / h_ref.var(-2, unbiased=False, keepdim=True).sqrt()
    torch.testing.assert_close(twin(x, reference=reference), expected, rtol=ROUNDING, atol=ROUNDING)
    with pytest.raises(ValueError, match="statistics='reference'.*layer_outputs\\(x, reference=...\\)"):
        twin(x)
    with pytest.raises(ValueError, match="statistics='reference'"):
        arch.kernel(net, np.eye(4) + 0.5)


@pytest.mark.parametrize("norm", [digit_resnet.PLAIN_BN, digit_resnet.Norm(), digit_resnet.Norm.keeping(()),
                                  digit_resnet.Norm.keeping(("mu", "sigma"), top=1, head=True)])
def test_digit_resnet_forward_is_the_twin_of_its_description(norm):
    """digit_resnet.forward at initialisation equals the twin of description(blocks, width, norm) carrying the same
    weights (float64)."""
    blocks, width = 2, 12
    params = [p.double() for p in digit_resnet.init_params(C, blocks, width, _gen(6), "cpu")]
    net = torch_network(digit_resnet.description(blocks, width, norm), width, C, in_features=64, out_features=10,
                        device="cpu")
    dense = [m for m in net.modules() if isinstance(m, DenseLayer)]
    weights = [params[0], *(params[1][:, b, j] for b in range(blocks) for j in (0, 1)), params[2]]
    with torch.no_grad():
        for module, weight in zip(dense, weights, strict=True):
            module.weight.copy_(weight / module.scale)
    x = torch.randn(C, 16, 64, generator=_gen(8), dtype=torch.float64)
    logits, _ = digit_resnet.forward(params, x, norm)
    torch.testing.assert_close(net(x), logits, rtol=ROUNDING, atol=ROUNDING)


@pytest.mark.parametrize(("norm", "match"), [
    (digit_resnet.Norm.keeping(("mu",)), "mu without sigma"), (digit_resnet.Norm.keeping(("sigma",)), "sigma without"),
    (digit_resnet.Norm(alternate=True), "alternate=True")])
def test_digit_resnet_norms_without_a_description_are_refused(norm, match):
    with pytest.raises(ValueError, match=match):
        digit_resnet.description(2, 8, norm)


@pytest.mark.parametrize(("init", "bn", "centre"), [("torch", True, True), ("asymmetric", True, False),
                                                    ("he", False, True), ("gaussian", True, True)])
def test_daneshmand_forward_is_the_twin_of_its_description(init, bn, centre):
    """daneshmand_mlp.forward (features x samples) equals the twin of description(...) carrying the same weights
    and biases (a missing bias is 0, as the training harness holds it)."""
    depth, width, sizes = 3, 12, [64, 12, 12, 12, 10]
    gen, params = _gen(9), []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        w, b = daneshmand_mlp.init_layer(gen, C, fan_in, fan_out, init if fan_out != 10 else "torch", torch.float64)
        params.append((w, torch.zeros(C, fan_out, 1, dtype=torch.float64) if b is None else b))
    net = torch_network(daneshmand_mlp.description(depth, width, init, bn, centre), width, C, in_features=64,
                        out_features=10, device="cpu")
    with torch.no_grad():
        for module, (w, b) in zip([m for m in net.layers if isinstance(m, DenseLayer)], params, strict=True):
            module.weight.copy_(w / module.scale)
            module.bias.copy_(b.mT / module.bias_scale if module.bias_scale else b.mT)
    x = torch.randn(64, 16, generator=_gen(10), dtype=torch.float64)
    logits, _ = daneshmand_mlp.forward(params, x, bn, centre)
    torch.testing.assert_close(net(x.T.expand(C, -1, -1)), logits.mT, rtol=ROUNDING, atol=ROUNDING)
