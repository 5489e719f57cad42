"""bnsym.sim.daneshmand: the inits' laws, the Gaussian-row sampler and the digits training harness."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bnsym import rank
from bnsym.core.batchnorm import batch_norm
from bnsym.sim import daneshmand, mc_tolerance, mean_and_se
from bnsym.train.daneshmand import train_digits


@pytest.mark.parametrize("init", sorted(daneshmand.INIT_VARIANCES))
def test_init_variances_are_the_sampled_laws(init):
    """Weights of variance s_w^2 / fan_in and biases of variance s_b^2, estimated from drawn layers."""
    fan_in, fan_out, n = 50, 40, 200
    w, b = daneshmand.init_layer(torch.Generator().manual_seed(0), n, fan_in, fan_out, init, torch.float64)
    s_w2, s_b2 = daneshmand.init_variances(init, fan_in)
    k = mc_tolerance(n, 2)
    weight = mean_and_se((fan_in * w.square()).mean((-2, -1)).numpy())
    assert abs(weight.value - s_w2) < k * weight.error
    if b is None:
        assert s_b2 == 0
    else:
        bias = mean_and_se(b.square().mean((-2, -1)).numpy())
        assert abs(bias.value - s_b2) < k * bias.error


def test_unknown_inits_are_refused():
    with pytest.raises(ValueError, match="init"):
        daneshmand.representations(torch.randn(4, 4), [1], 4, 1, init="xavier")
    with pytest.raises(ValueError, match="zero-mean init"):
        daneshmand.init_variances("asymmetric", 4)


def test_gaussian_rows_follow_the_mean_field_cosines():
    """The exact row sampler at width 2048 against the mean-field map (PyTorch's init: biases dominate)."""
    depth, width, nets = 3, 2048, 16
    s_w2, s_b2 = daneshmand.init_variances("torch", width)
    simulated = daneshmand.gaussian_relu_cosines(depth, s_w2, s_b2, width, 6, nets, seed=1)
    theory = rank.relu_cosines(depth, s_w2, s_b2)
    k = mc_tolerance(nets, depth)
    for layer in range(depth):
        estimate = mean_and_se(simulated[layer])
        assert abs(estimate.value - theory[layer]) < k * estimate.error


def test_training_records_the_rank_bound_and_is_deterministic():
    torch.set_num_threads(1)
    kwargs = dict(depth=2, bn=True, lrs=[0.1], epochs=1, rank_bound=rank.differentiable_rank_bound, width=16,
                  n_networks=2, pretrain_steps=2, n_samples=256)
    run = train_digits(**kwargs)
    assert run.loss.shape == run.rank_bound.shape == (2, 2) and run.accuracy.shape == (2,)
    assert np.all((run.rank_bound >= 1) & (run.rank_bound <= 16))  # 1 <= r(H) <= d (Lemma 1)
    np.testing.assert_array_equal(train_digits(**kwargs).loss, run.loss)


@pytest.mark.parametrize("call, message", [
    (lambda: daneshmand.init_variances("he", "64"), "fan_in must be a whole number, got '64'"),
    (lambda: daneshmand.representations(torch.randn(4, 4), [0], 4, 1), "every entry of depths .* got 0"),
    (lambda: daneshmand.representations(torch.randn(4, 4), [1], 4, 1, bn="yes"), "bn must be True or False"),
    (lambda: daneshmand.representations(torch.randn(4, 1), [1], 4, 1, bn=True), "x must have N >= 2 samples"),
    (lambda: daneshmand.representations(1e300 * torch.randn(4, 4, dtype=torch.float64), [1], 4, 1, init="gaussian"),
     "leave torch.float32's range"),
    (lambda: daneshmand.batch_norm_rows(torch.ones(2, 3)), "constant over the samples"),
    (lambda: daneshmand.mean_pair_cosine(torch.tensor([[1.0, 0.0], [2.0, 0.0]])), "column\\) equal to 0"),
    (lambda: daneshmand.gaussian_relu_cosines(2, 1.0, 0.0, 8, 9, 2), "n_samples must be between 2 and 8"),
    (lambda: train_digits(1, True, [0.1], 1, rank_bound=None), "rank_bound must be a function"),
    (lambda: train_digits(1, True, [float("nan")], 1, rank_bound=rank.differentiable_rank_bound),
     "lrs \\(learning rates\\) must be finite"),
    (lambda: train_digits(1, True, [0.1], 1, rank_bound=rank.differentiable_rank_bound, batch=1),
     "batch must be between 2 and 1,437"),
])
def test_arguments_follow_the_input_contract(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_batch_norm_rows_is_scale_free_and_matches_the_one_forward():
    """The checked batch norm rescales each row by a power of 2: rows of 1e300 or 1e-300 normalise exactly; at
    ordinary sizes it is the one batch-norm forward that the networks' layers use."""
    h = torch.randn(3, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for centre in (True, False):
        for eps in (0.0, 1e-3):
            torch.testing.assert_close(daneshmand.batch_norm_rows(h, centre, eps),
                                       batch_norm(h, eps, centre=centre), rtol=1e-14, atol=0)
    for scale in (1e300, 1e-300):
        torch.testing.assert_close(daneshmand.batch_norm_rows(scale * h), daneshmand.batch_norm_rows(h))
