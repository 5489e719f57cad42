"""Philipp et al.'s architectures trained on digits (bnsym.train.philipp): networks against hand-built references,
the step-size selection against a brute-force loop, the training records, the sweep task and its validation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from bnsym.core.digits import digits
from bnsym.sim.philipp import Architecture
from bnsym.train import philipp as P

TINY = {"depth": 4, "width": 8, "epochs": 1, "n_seeds": 2, "n_probe": 64, "batch_size": 256,
        "single_steps": (0.1,), "layer_scales": (0.1,), "deltas": (0.01, 0.1, 1.0)}


def test_looks_linear_relu_network_is_its_linear_map_at_init():
    """Section H: relu(a) - relu(-a) = a makes a looks-linear ReLU network linear at init (odd and additive),
    which a Gaussian ReLU network is not."""
    gen = torch.Generator().manual_seed(2)
    x, z = torch.randn(20, 64, generator=gen), torch.randn(20, 64, generator=gen)
    for matrix, linear in (("looks-linear", True), ("gaussian", False)):
        arch = Architecture("relu", "none", matrix)
        weights = P.init_weights(arch, 5, 12, 3, seed=1)

        def f(v, arch=arch, weights=weights):
            return P.forward(arch, weights, v)[0]
        assert torch.allclose(f(-x), -f(x), atol=1e-4) == linear
        assert torch.allclose(f(x + z), f(x) + f(z), atol=1e-4) == linear


def test_resnet_with_zero_branches_is_its_outer_layers():
    """A ResNet whose blocks' second linear layers are 0 computes norm(W_L phi(norm(W_1 x)))."""
    arch = Architecture("tanh", "layer", skip="identity")
    weights = P.init_weights(arch, 6, 10, 2, seed=3)
    weights[2].zero_(), weights[4].zero_()
    x = torch.randn(15, 64, generator=torch.Generator().manual_seed(4))
    prediction, outputs, pres = P.forward(arch, weights, x)
    expected = torch.nn.functional.layer_norm(torch.tanh(torch.nn.functional.layer_norm(x @ weights[0].mT, (10,)))
                                              @ weights[-1].mT, (10,))
    torch.testing.assert_close(prediction, expected, rtol=1e-4, atol=1e-4)
    assert len(outputs) == 6 and len(pres) == 5


def test_best_relative_updates_matches_a_brute_force_loop():
    arch = Architecture("tanh", "batch")
    weights = P.init_weights(arch, 4, 8, 2, seed=5)
    data = digits()
    x, y = data.x_train[:100], data.y_train[:100]
    deltas = (0.003, 0.03, 0.3, 3.0)
    best = P.best_relative_updates(arch, weights, x, y, deltas)
    for s in range(2):
        single = [w[s:s + 1].clone().requires_grad_(True) for w in weights]
        loss = P.errors(P.forward(arch, single, x)[0], y).mean()
        grads = torch.autograd.grad(loss, single)
        for j in range(4):
            losses = []
            for delta in deltas:
                trial = [w.detach().clone() for w in single]
                trial[j] -= delta * trial[j].norm() / grads[j].norm() * grads[j]
                losses.append(P.errors(P.forward(arch, trial, x)[0], y).mean().item())
            assert best[s, j] == deltas[int(np.argmin(losses))]


def test_smoothed_returns_an_exact_log_linear_profile():
    layers = np.arange(7)
    profile = 0.02 * 1.3**layers
    noisy = np.stack([profile * 1.1, profile / 1.1])  # symmetric in log scale: the fit is the profile itself
    np.testing.assert_allclose(P.smoothed(noisy), profile, rtol=1e-10)


def test_training_with_zero_steps_changes_nothing():
    arch = Architecture("selu", "none")
    weights = P.init_weights(arch, 4, 8, 2, seed=6)
    runs = P.train(arch, weights, torch.zeros(2, 4), epochs=2, batch_size=256, seed=0, n_probe=64)
    assert runs["error"].shape == (2, 3) and np.all(runs["error"] == runs["error"][:, :1])
    assert np.all(runs["gsc"] == runs["gsc"][:, :1])
    assert np.all(runs["residual_norm"] == 0) and np.all(runs["largest_relative_update"] == 0)


def test_training_records_the_relative_updates_it_makes():
    """One full-batch step: the recorded relative update of layer l is c_l ||grad_l|| / ||W_l||."""
    arch = Architecture("relu", "layer")
    weights = P.init_weights(arch, 3, 8, 2, seed=7)
    data = digits()
    n = len(data.y_train)
    steps = torch.tensor([[0.1, 0.2, 0.3], [0.01, 0.02, 0.03]])
    runs = P.train(arch, weights, steps, epochs=1, batch_size=n, seed=0, n_probe=64)
    params = [w.clone().requires_grad_(True) for w in weights]
    grads = torch.autograd.grad(P.errors(P.forward(arch, params, data.x_train)[0], data.y_train).mean(-1).sum(),
                                params)
    expected = np.array([[(steps[s, j] * grads[j][s].norm() / weights[j][s].norm()).item() for j in range(3)]
                         for s in range(2)])
    np.testing.assert_allclose(runs["largest_relative_update"], expected, rtol=1e-3)
    # one step of W_l - c_l grad_l: the residual matrix is that step, its operator norm that of c_l grad_l
    norms = np.array([[(steps[s, j] * torch.linalg.matrix_norm(grads[j][s], ord=2)).item() for j in range(3)]
                      for s in range(2)])
    np.testing.assert_allclose(runs["residual_norm"], norms, rtol=1e-3)


@pytest.mark.parametrize("arch", [{"phi": "relu", "norm": "batch"},
                                  {"phi": "tanh", "norm": "layer", "skip": "identity"},
                                  {"phi": "relu", "norm": "none", "matrix": "looks-linear"}])
def test_run_cell_returns_json_ready_records(arch):
    result = P.run_cell({**arch, **TINY})
    json.dumps(result, allow_nan=False)
    assert np.shape(result["gsc_init"]) == (2, 4) and np.shape(result["best_delta"]) == (2, 4)
    for scheme in P.SCHEMES:
        record = result[scheme]
        assert np.shape(record["final_error"]) == (1, 2) and record["best"] == 0
        assert np.shape(record["error"]) == (2, 2) and np.shape(record["residual_norm"]) == (2, 4)
        assert all(0 <= e <= 1 for row in record["error"] for e in row)


@pytest.mark.parametrize("config, match", [
    ({"phi": "relu"}, "phi and norm"),
    ({"phi": "relu", "norm": "batch", "lr": 1}, "unknown settings"),
    ({"phi": "relu", "norm": "layer", "skip": "identity", "depth": 5}, "even depth"),
    ({"phi": "relu", "norm": "layer", "skip": "gaussian"}, "skip"),
    ({"phi": "tanh", "norm": "none", "matrix": "looks-linear"}, "looks-linear"),
    ({"phi": "relu", "norm": "none", "matrix": "looks-linear", "width": 7}, "even"),
    ({"phi": "relu", "norm": "none", "depth": True}, "depth"),
    ({"phi": "relu", "norm": "none", "n_seeds": 1}, "n_seeds"),
    ({"phi": "relu", "norm": "none", "deltas": [0.1, -1]}, "deltas"),
    ({"phi": "relu", "norm": "none", "single_steps": [math.nan]}, "single_steps"),
    ("relu", "dict"),
])
def test_bad_configurations_are_refused(config, match):
    with pytest.raises(ValueError, match=match):
        P.validate(config)


def test_log_slopes_against_polyfit():
    values = np.exp(np.random.default_rng(0).normal(size=(3, 9)))
    expected = [np.polyfit(np.arange(9), np.log(row), 1)[0] for row in values]
    np.testing.assert_allclose(P.log_slopes(values), expected, rtol=1e-10)
    with pytest.raises(ValueError, match="values"):
        P.log_slopes([[1.0, 0.0]])


def test_layerwise_gain_compares_only_networks_that_left_chance():
    """Per network single minus layer-wise final error, where either scheme learned; the paper's difference for the
    row's architecture (batch-ReLU: 76.65 % single against 34.83 % custom)."""
    single, layerwise = [0.5, 0.9, 0.3, 0.95], [0.4, 0.85, 0.35, 0.7]  # network 1 left chance with neither
    row = {"phi": "relu", "norm": "batch", "matrix": "gaussian", "skip": "none",
           "single": {"error": [[0.9, e] for e in single]}, "layerwise": {"error": [[0.9, e] for e in layerwise]}}
    gain, effect = P.layerwise_gain(row)
    np.testing.assert_allclose(gain, [0.1, -0.05, 0.25])
    assert effect == pytest.approx((76.65 - 34.83) / 100)
