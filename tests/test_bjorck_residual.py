"""Bjorck et al.'s ResNet-v1 as a description: its twin is the network :func:`bnsym.sim.bjorck.residual_block`
composes, and :func:`bnsym.sim.bjorck.simulate_residual` reads its statistics off the twin's block outputs."""

from __future__ import annotations

import pytest
import torch

from bnsym.sim import bjorck
from bnsym.sim.arch import DenseLayer, torch_network

WIDTH, BATCH, BLOCKS, NETWORKS = 6, 5, 3, 2


@pytest.mark.parametrize("batch_norm", [False, True])
def test_the_twin_of_the_description_is_the_resnet_v1_block(batch_norm):
    """x' = ReLU(x + BN(W_2 ReLU(BN(W_1 x)))) (no BN: without them) with the twin's own weights, Xavier on square
    layers: W = sqrt(weight_var / n) Z, weight_var 1. Equal up to the rounding of where sqrt(1/n) multiplies."""
    net = torch_network(bjorck.residual_description(BLOCKS, batch_norm), WIDTH, NETWORKS, seed=3, device="cpu")
    dense = [m for m in net.modules() if isinstance(m, DenseLayer)]
    assert len(dense) == 2 * BLOCKS and all(m.scale ** 2 * WIDTH == pytest.approx(1) for m in dense)
    assert all(m.bias_scale == 0 for m in dense)
    x = torch.randn(NETWORKS, BATCH, WIDTH, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        outputs = net.layer_outputs(x)[1::2]
    h = x
    for block in range(BLOCKS):
        w1, w2 = (m.scale * m.weight.detach() for m in dense[2 * block:2 * block + 2])
        h = bjorck.residual_block(h, w1, w2, batch_norm)
        torch.testing.assert_close(outputs[block], h, rtol=1e-12, atol=1e-12)


def test_simulate_residual_reads_every_block():
    run = bjorck.simulate_residual(WIDTH, BATCH, BLOCKS, 3, batch_norm=True, seed=2, device="cpu")
    assert run.q.shape == run.abs_mean.shape == run.variance.shape == (3, BLOCKS + 1)
    again = bjorck.simulate_residual(WIDTH, BATCH, BLOCKS, 3, batch_norm=True, seed=2, device="cpu")
    assert (run.q == again.q).all() and (run.q[:, 1:] > 0).all()
