"""The training harness: evaluation statistics, the scale-invariance identity and the 16 xi line analysis."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import integrate, special

from bnsym import parse_activation
from bnsym.core.digits import digits
from bnsym.train import LR_PER_EXAMPLE, best_factor, line_agreement, readout_matched_lr, train
from bnsym.train.dynamics import FirstSteps, first_steps
from bnsym.train.networks import forward, init_weights, predict
from bnsym.train.trainability import validate

ROUNDING = 1e-12  # float64 comparisons of two orders of the same arithmetic


def test_population_statistics_equal_full_batch_norm_on_the_reference_set():
    data = digits(torch.float64)
    weights = init_weights(2, 3, 16, data.n_features, 10, torch.Generator().manual_seed(1), torch.float64)
    relu = parse_activation("relu")
    logits, _ = forward(weights, data.x_train.T.expand(2, -1, -1), relu, 1e-3)
    population = predict(weights, data.x_train, data.x_train, relu, 1e-3)
    assert torch.allclose(logits, population, rtol=0, atol=1e-10)


def test_training_is_deterministic_and_learns():
    torch.set_num_threads(1)  # tiny products: threads only add overhead
    runs = [train("relu", 2, 32, 16, lr=0.16, epochs=2, n_seeds=2, seed=3) for _ in range(2)]
    assert torch.equal(runs[0].test_accuracy, runs[1].test_accuracy)
    assert (runs[0].test_accuracy > runs[0].chance + 0.5).all()


def test_scale_invariance_identity_holds_at_eps_0_and_fails_at_eps_positive():
    exact = first_steps("relu", 4, 16, 8, lr=0.5, steps=3, n_seeds=2).scale_invariance_residual()
    assert np.abs(exact).max() < ROUNDING
    broken = first_steps("relu", 4, 16, 8, lr=0.5, steps=3, n_seeds=2, eps=1.0).scale_invariance_residual()
    assert np.abs(broken).max() > 1e3 * ROUNDING  # the check can fail: eps > 0 breaks scale invariance


def test_log_growth_of_a_geometric_sequence():
    """log_growth is minus the slope of log |dL/dh|^2: exactly log(rate) on a geometric sequence."""
    layers = np.arange(1, 11)
    grad_h = np.sqrt(1.5 ** (10 - layers))[None, None, :]
    steps = FirstSteps(np.ones((1, 1, 11)), np.ones((1, 1, 11)), grad_h, lr=1.0)
    assert steps.log_growth(2, 9)[0] == pytest.approx(np.log(1.5), abs=ROUNDING)


def test_line_agreement_and_best_factor():
    depths = np.array([5, 10, 20, 40, 5, 10, 20, 40])
    xi = np.array([2.0] * 4 + [4.0] * 4)  # ratios 2.5, 5, 10, 20 | 1.25, 2.5, 5, 10
    trained = depths / xi < 6
    fractions = line_agreement(depths, 4 * xi, trained)  # lines at 8 and 16: 3 + 2 cells above, 2 of them train
    assert (fractions["n_above"], fractions["n_below"]) == (5, 3)
    assert fractions["train_above"] == 0.4 and fractions["train_below"] == 1.0
    assert best_factor(depths, xi, trained) == (5.0, 10.0, 0)


@pytest.mark.parametrize("config, message", [
    ({"depth": 2, "batch_size": 8, "ghost_batch": 12}, "multiple of batch_size"),
    ({"depth": 0, "batch_size": 8}, "depth"),
    ({"depth": 2, "batch_size": 1}, "batch_size"),
    ({"depth": 2, "batch_size": 8, "phi": "swosh"}, "unknown activation"),
    ({"depth": 2, "batch_size": 8, "eps": -1}, "eps"),
    ({"depth": 2, "batch_size": 8, "lr_per_example": 0}, "lr"),
    ({"depth": 2, "batch_size": 2000}, "batch_size = 2000 examples per step, more than the .* training examples"),
    ({"depth": 2, "batch_size": 8, "ghost_batch": -8}, "ghost_batch"),
    ({"depth": 2, "batch_size": 8, "ghost_batch": 4000}, "ghost_batch = 4000 examples per step, more than the"),
])
def test_bad_configurations_name_the_argument(config, message):
    with pytest.raises(ValueError, match=message):
        validate(config)


def test_numpy_numbers_are_accepted_and_sizes_come_back_as_ints():
    config = validate({"depth": np.int64(2), "batch_size": np.float64(8.0), "width": np.int32(16)})
    assert (config["depth"], config["batch_size"], config["width"]) == (2, 8, 16)
    assert all(type(config[key]) is int for key in ("depth", "batch_size", "width"))


@pytest.mark.parametrize("config, message", [
    ({"depth": 2, "batch_size": "8"}, "batch_size must be a whole number, got '8'"),
    ({"depth": 2, "batch_size": 8, "optimizer": ["sgd"]}, "optimizer must be one of 'sgd', 'rmsprop'"),
    ({"depth": 2, "batch_size": 8, "lr_per_example": float("nan")}, "lr must be a finite number"),
    ({"depth": 2, "batch_size": 8, "seed": -1}, "seed must be between 0"),
])
def test_bad_values_name_the_argument(config, message):
    with pytest.raises(ValueError, match=message):
        validate(config)


def test_a_step_larger_than_the_training_set_is_refused():
    with pytest.raises(ValueError, match="more than the .* training examples"):
        train("relu", 1, 4, 4000, lr=0.1, epochs=1)


def test_line_analysis_edge_cases():
    """A side of the line without cells has no fraction (NaN); xi = inf puts a cell below every c."""
    assert np.isnan(line_agreement([1], [5.0], [True])["train_above"])
    low, high, errors = best_factor([1, 2], [np.inf, 1.0], [False, False])
    assert low < high and errors == 1  # the xi = inf cell is predicted to train at every c


def _sphere_second_moment(phi, batch: int) -> float:
    """E[phi(x_1)^2] for x = sqrt(B) e v, v uniform on the unit sphere of 1-perp (the BN output at eps = 0): x_1 =
    sqrt(B - 1) t with t's density proportional to (1 - t^2)^((B - 4) / 2), by one-dimensional quadrature."""
    norm = special.beta(0.5, (batch - 2) / 2)
    value, _ = integrate.quad(lambda t: phi(np.sqrt(batch - 1) * t) ** 2 * (1 - t * t) ** ((batch - 4) / 2),
                              -1, 1, epsabs=1e-13, epsrel=1e-12)
    return value / norm


def test_readout_matched_lr_scales_by_the_second_moment_on_the_bn_sphere():
    batch = 16
    q_relu = _sphere_second_moment(lambda x: max(x, 0.0), batch)
    q_shifted = _sphere_second_moment(lambda x: max(x + 1.5, 0.0), batch)
    expected = LR_PER_EXAMPLE["sgd"] * q_relu / q_shifted
    assert readout_matched_lr("relu(beta=1.5)", batch, eps=0.0) == pytest.approx(expected, rel=1e-6)
    assert readout_matched_lr("relu(beta=1.5)", batch, eps=0.0, lr_per_example=1.0) == pytest.approx(
        q_relu / q_shifted, rel=1e-6)


@pytest.mark.parametrize("kwargs, message", [({"lr_per_example": 0.0}, "lr_per_example"),
                                             ({"lr_per_example": float("nan")}, "lr_per_example"),
                                             ({"eps": 10.0}, "zero signal")])
def test_readout_matched_lr_refuses_what_has_no_answer(kwargs, message):
    with pytest.raises(ValueError, match=message):
        readout_matched_lr("relu", 16, **kwargs)  # at eps = 10 relu has collapsed: x^L = phi(0) = 0
