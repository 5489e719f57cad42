"""The networks converted to descriptions (issue 42, item 3) draw their weights with the law of their old inits.

Each old init is written here as it was (the reference law); the twin's Dense of the description now used draws
the same generator's numbers in the same order for one layer, so each layer is compared exactly (float64, to
the rounding of two orders of the same product). Whole builders draw a bias per layer besides (the twin's
stream), so their layers are compared by replaying that stream, layer by layer.
"""

from __future__ import annotations

import math

import pytest
import torch

from bnsym.core.layers import Dense
from bnsym.sim import daneshmand_mlp, digit_resnet
from bnsym.sim.arch import dense_parameters
from bnsym.train.networks import init_weights

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
