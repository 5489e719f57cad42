"""bnsym.sim.resnet_init: the paper's CIFAR ResNet at initialisation, Table 1's summand sums, Fig. 4's class bias."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bnsym.sim import resnet_init


def test_layer_numbers_are_the_papers_for_resnet_110():
    assert resnet_init.layer_numbers(18) == [(18, 0), (19, 0), (54, 1), (55, 1), (90, 2), (91, 2)]
    assert resnet_init.layer_numbers(3) == [(4, 0), (5, 0), (10, 1), (11, 1), (16, 2), (17, 2)]
    with pytest.raises(ValueError, match="blocks per stage"):
        resnet_init.layer_numbers(2)


def test_summand_sums_match_explicit_summands():
    """T1..T4 against the summands d^{bxy} built one by one from the padded input (eq. 4)."""
    gen = torch.Generator().manual_seed(0)
    m, batch, c_in, c_out, side = 2, 3, 2, 3, 4
    inp = torch.randn(batch, m * c_in, side, side, generator=gen, dtype=torch.float64)
    grad = torch.randn(batch, m * c_out, side, side, generator=gen, dtype=torch.float64)
    got = resnet_init._summand_sums(inp, grad, m).numpy()
    padded = F.pad(inp, (1, 1, 1, 1)).view(batch, m, c_in, side + 2, side + 2).numpy()
    g = grad.view(batch, m, c_out, side, side).numpy()
    for net in range(m):
        d = np.empty((c_out, c_in, 3, 3, batch, side, side))
        for i in range(3):
            for j in range(3):
                window = padded[:, net, :, i:i + side, j:j + side]  # (B, c_in, X, Y)
                d[:, :, i, j] = np.einsum("boxy,bcxy->ocbxy", g[:, net], window)
        n = batch * side * side
        expected = [np.abs(d).sum((-3, -2, -1)), np.abs(d.sum((-2, -1))).sum(-1), np.abs(d.sum(-3)).sum((-2, -1)),
                    np.abs(d.sum((-3, -2, -1)))]
        np.testing.assert_allclose(got[net], [e.mean() / n for e in expected], rtol=1e-12)


def test_kernel_gradients_are_autograds_and_output_gradients_sum_to_zero():
    run = resnet_init.init_run(3, 4, 8, 4, 3, batch_norm=True, seed=1, extra_layers=(7,), chunk=2, device="cpu")
    assert run.logits.shape == run.output_grads.shape == (3, 4, 10)
    np.testing.assert_allclose(run.output_grads.sum(-1), 0.0, atol=1e-12)  # softmax minus one-hot
    t = run.summands.t
    assert t.shape == (3, 6, 4) and np.all(t[..., 3] <= t[..., 1] * (1 + 1e-12)) and np.all(t[..., 1] <= t[..., 0])
    assert run.activations[4].shape == (3, 4, 4, 8, 8) and run.activations[16].shape == (3, 4, 16, 2, 2)
    assert run.kernel_grads[16].shape == (3, 16 * 16 * 9) and run.kernel_grads[7].shape == (3, 4 * 4 * 9)
    assert np.all(np.abs(run.kernel_grads[7]) <= run.abs_sums[7] * (1 + 1e-12))  # |sum d| <= sum |d|
    assert run.input_means[7].shape == (3, 4) and np.all(run.input_means[7] >= 0)  # post-ReLU inputs


@pytest.mark.parametrize("batch_norm", [False, True])
def test_bias_gradients_class_masks_and_summands(batch_norm):
    """Recording the class masks leaves the full gradients alone; the class-masked kernel gradients bound the full
    one (backprop is linear); the recorded summands of one parameter sum to its dL/dK."""
    run = resnet_init.init_run(3, 4, 8, 4, 2, batch_norm=batch_norm, seed=3, extra_layers=(7,), chunk=2, device="cpu",
                               summand_layer=16, masked_layer=7)
    assert sorted(run.bias_grads) == list(range(1, 20)) and run.bias_grads[16].shape == (2, 16)
    plain = resnet_init.init_run(3, 4, 8, 4, 2, batch_norm=batch_norm, seed=3, extra_layers=(7,), chunk=2,
                                 device="cpu")
    np.testing.assert_allclose(run.kernel_grads[7], plain.kernel_grads[7], rtol=1e-12)  # masks leave it alone
    for layer, grads in plain.bias_grads.items():
        np.testing.assert_allclose(run.bias_grads[layer], grads, rtol=1e-12, atol=1e-300)
    assert run.class_grads.shape == (2, 10) and np.all(run.class_grads >= 0)
    # the full mean |dL/dK| is at most the sum of the per-class ones (triangle inequality), with equality for none
    full = np.abs(run.kernel_grads[7]).mean(-1)
    assert np.all(full <= run.class_grads.sum(-1) * (1 + 1e-12))
    sums = run.top_summands.sum(-1)
    assert run.top_summands.shape == (2, 4 * 2 * 2)  # batch 4, layer 16 at 2 x 2
    assert np.all(np.isclose(np.abs(sums)[:, None], np.abs(run.kernel_grads[16])).any(-1))


def test_kernel_gradient_against_autograd_of_one_conv():
    gen = torch.Generator().manual_seed(2)
    inp = torch.randn(2, 3, 5, 5, generator=gen, dtype=torch.float64)
    weight = torch.randn(4, 3, 3, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 4, 5, 5, generator=gen, dtype=torch.float64)
    (F.conv2d(inp, weight, padding=1) * upstream).sum().backward()
    torch.testing.assert_close(resnet_init.kernel_gradient(inp, upstream, 1).view(4, 3, 3, 3), weight.grad)


def test_init_run_validates_its_input():
    with pytest.raises(ValueError, match="multiple of 4"):
        resnet_init.init_run(3, 4, 10, 4, 1, batch_norm=False, seed=0, device="cpu")
    with pytest.raises(ValueError, match="strided"):
        resnet_init.init_run(3, 4, 8, 4, 1, batch_norm=False, seed=0, extra_layers=(8,), device="cpu")
    with pytest.raises(ValueError, match="extra layer"):
        resnet_init.init_run(3, 4, 8, 4, 1, batch_norm=False, seed=0, extra_layers=(20,), device="cpu")
    with pytest.raises(ValueError, match="n_networks"):
        resnet_init.init_run(3, 4, 8, 4, 0, batch_norm=False, seed=0, device="cpu")
    with pytest.raises(ValueError, match="masked_layer 7 must be a recorded layer"):
        resnet_init.init_run(3, 4, 8, 4, 1, batch_norm=False, seed=0, masked_layer=7, device="cpu")


def test_class_bias():
    logits = np.array([[[5.0, 1, 0], [4, 2, 0], [0, 3, 1]]])  # class 0 wins 2 of 3
    grads = np.array([[[0.9, 0, -0.9], [-0.1, 0.1, 0], [0.3, 0, -0.3]]])
    bias = resnet_init.class_bias(logits, grads)
    assert bias.favoured.tolist() == [0] and bias.win_fraction.tolist() == [pytest.approx(2 / 3)]
    np.testing.assert_allclose(bias.lead, [[4, 2, -3]])
    np.testing.assert_allclose(bias.column_mean, [(0.9 - 0.1 + 0.3) / 3])
    with pytest.raises(ValueError, match="must both be"):
        resnet_init.class_bias(logits, grads[0])
