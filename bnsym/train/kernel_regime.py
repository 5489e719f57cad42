"""Wide batch-normalised networks against their tangent kernel: gradient descent on fixed batches, and test accuracy.

* :func:`kernel_regime`: finite Dense -> BN -> relu MLPs trained by full-batch gradient descent on fixed BN batches
  approach the BN-NTK estimator's prediction at the same time t as the width grows (the kernel regime);
* :func:`accuracy_rows`: the BN-NTK, the BN-NNGP, the NTK without batch norm and the same BN network trained by
  SGD, scored on one data set at several depths.

Both serve the tangent-kernel chapter (09b) at book sizes and the benchmarks at the issue's sizes, on any device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..arch import Activation, BatchNorm, Dense, repeat
from ..nngp import BatchNormNNGPClassifier, BatchNormNNGPRegressor, batch_layout
from ..nngp.estimators import BatchNormNTKClassifier, BatchNormNTKRegressor, flow_weights
from ..nngp.ntk import arccos_ntk
from .tangent import train_on_batches

BOOTSTRAP = 1000  # resamples of the seeds for the slope's standard error
SGD_RATE = 0.5  # the SGD baseline's learning rate, times 1 / lambda_max of the BN-NTK within one training batch
NNGP_FIXED = {"noise": 1e-2, "weight_var": 1.0, "bias_var": 0.0}  # the BN-NNGP compared: the prior as derived


def relu_mlp(depth: int) -> object:
    """The network of both experiments: [Dense, BN, relu] * depth (NTK parametrisation, :mod:`bnsym.arch`)."""
    return repeat([Dense(), BatchNorm(), Activation("relu")], depth)


@dataclass(frozen=True)
class KernelRegime:
    """Trained networks against the BN-NTK estimator at the same time t.

    ``squared`` (widths, seeds): each network's mean squared distance to the estimator over the test points;
    ``of_mean`` (widths,): the RMS distance of the seeds' mean; ``last`` (seeds, test points): the widest networks'
    outputs; ``euler``: the largest gap, on the training copies, between the discrete steps and the flow the
    estimator solves; ``lr_lambda_max`` and ``t_lambda_min``: eta lambda_max(Theta) and t lambda_min(Theta).
    """

    widths: np.ndarray
    prediction: np.ndarray
    squared: np.ndarray
    of_mean: np.ndarray
    last: np.ndarray
    euler: float
    lr_lambda_max: float
    t_lambda_min: float

    @property
    def per_network(self) -> np.ndarray:
        """RMS distance of one network to the estimator, per width (the mean of the squares over seeds)."""
        return np.sqrt(self.squared.mean(1))

    @property
    def slope(self) -> float:
        """Log-log slope of :attr:`per_network` against the width (-1/2 for the kernel's N^(-1/2) fluctuations)."""
        return float(np.polyfit(np.log(self.widths), np.log(self.per_network), 1)[0])

    @property
    def slope_se(self) -> float:
        """Standard error of :attr:`slope`, the seeds bootstrapped (``BOOTSTRAP`` resamples, a fixed stream)."""
        seeds = self.squared.shape[1]
        draws = np.random.default_rng(11).integers(0, seeds, size=(BOOTSTRAP, seeds))
        slopes = [np.polyfit(np.log(self.widths), 0.5 * np.log(self.squared[:, d].mean(1)), 1)[0] for d in draws]
        return float(np.std(slopes))


def kernel_regime(X: np.ndarray, y: np.ndarray, X_test: np.ndarray, widths: Sequence[int], n_networks: int,
                  steps: int, batch_size: int, depth: int = 1, t: float = 5.0,
                  device: torch.device | str = "cpu") -> KernelRegime:
    """Train ``n_networks`` networks per width by ``steps`` full-batch gradient descent steps of size t / steps on the
    squared loss, their output centred at initialisation (g = f(theta) - f(theta_0), whose wide limit is the
    estimator's mean prediction itself), and measure each against ``BatchNormNTKRegressor(t=t)`` on ``X_test``.

    The estimator solves the flow f_t = Theta(x*, X) Theta^-1 (I - exp(-t Theta)) y; the steps solve its Euler
    discretisation, (I - eta Theta)^s in place of exp(-t Theta), whose gap is reported as ``euler``.
    """
    model = BatchNormNTKRegressor(depth=depth, batch_size=batch_size, t=t, normalise_y=False).fit(X, y)
    prediction = model.predict(X_test)
    theta, targets = model.kernel_, np.asarray(y, dtype=float)[model.train_rows_]
    lr = t / steps
    eigenvalues = np.linalg.eigvalsh(theta)
    stepped = np.linalg.solve(theta, (np.eye(len(theta)) - np.linalg.matrix_power(np.eye(len(theta)) - lr * theta,
                                                                                  steps)) @ targets)
    euler = float(np.abs(theta @ (stepped - model.weights_[:, 0])).max())
    layout = batch_layout(X, batch_size, X_test)
    k = len(layout.rows)
    squared, of_mean, last = [], [], None
    for width in widths:
        runs = train_on_batches(relu_mlp(depth), layout.batches[:k], np.asarray(y, dtype=float)[layout.rows][..., None],
                                layout.batches[k:], int(width), n_networks, lr, steps, device=device)
        runs = runs.reshape(n_networks, -1)[:, : len(X_test)]
        squared.append(np.mean((runs - prediction) ** 2, 1))
        of_mean.append(float(np.sqrt(np.mean((runs.mean(0) - prediction) ** 2))))
        last = runs
    return KernelRegime(np.asarray(widths), prediction, np.array(squared), np.array(of_mean), last, euler,
                        float(lr * eigenvalues.max()), float(t * eigenvalues.min()))


def accuracy_rows(task: str, X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray,
                  depths: Sequence[int], batch_size: int, width: int, n_networks: int, steps: int,
                  device: torch.device | str = "cpu") -> list[dict]:
    """One row per depth: the test score of the BN-NTK estimator (t = infinity), the BN-NNGP posterior mean (noise
    0.01, weight_var 1, bias_var 0, fixed: ``NNGP_FIXED``), the NTK of the network without batch norm (kernel
    regression, :func:`bnsym.nngp.ntk.arccos_ntk`) and the mean
    over ``n_networks`` seeds of the same BN network at ``width`` trained by SGD over the fixed batches (one batch a
    step, ``steps`` steps, squared loss, learning rate ``SGD_RATE`` / lambda_max, the largest eigenvalue of the BN-NTK
    within one batch: a step on one batch is stable below 2 / lambda_max); also the score of the networks' mean
    output (the initial outputs' noise averaged away, as in the estimators' mean prediction) and the networks' mean
    score on the training copies (how well SGD fitted them).

    ``task`` "classification": ``y`` holds labels, the score is the accuracy and the targets are centred one-hot
    vectors; "regression": ``y`` holds standardised targets and the score is the mean squared error. Test points
    are batched among themselves for every BN model.
    """
    if task not in ("classification", "regression"):
        raise ValueError(f"task must be 'classification' or 'regression', got {task!r}")
    classify = task == "classification"
    if classify:
        classes = np.unique(y)
        targets = (y[:, None] == classes).astype(float) - 1 / len(classes)
    else:
        targets = np.asarray(y, dtype=float)[:, None]

    def score(outputs: np.ndarray, truth: np.ndarray = y_test) -> float:
        if classify:
            return float(np.mean(classes[outputs.argmax(-1)] == truth))
        return float(np.mean((outputs[..., 0] - truth) ** 2))

    layout = batch_layout(X, batch_size, X_test)
    k = len(layout.rows)
    rows = []
    for depth in depths:
        if classify:
            ntk = BatchNormNTKClassifier(depth=depth, batch_size=batch_size, device=device).fit(X, y)
            nngp = BatchNormNNGPClassifier(depth=depth, batch_size=batch_size, device=device,
                                           **NNGP_FIXED).fit(X, y)
            ntk_score, nngp_score = (float(np.mean(m.predict(X_test) == y_test)) for m in (ntk, nngp))
        else:
            ntk = BatchNormNTKRegressor(depth=depth, batch_size=batch_size, normalise_y=False, device=device).fit(X, y)
            nngp = BatchNormNNGPRegressor(depth=depth, batch_size=batch_size, normalise_y=False, device=device,
                                          **NNGP_FIXED).fit(X, y)
            ntk_score, nngp_score = (float(np.mean((m.predict(X_test) - y_test) ** 2)) for m in (ntk, nngp))
        plain = arccos_ntk("relu", X_test, X, depth) @ flow_weights(arccos_ntk("relu", X, None, depth), targets, np.inf)
        within = ntk.kernel_.reshape(k, batch_size, k, batch_size)[np.arange(k), :, np.arange(k), :]
        rate = SGD_RATE / np.linalg.eigvalsh(within).max()
        evaluated = np.concatenate([layout.batches[k:], layout.batches[:k]])  # test batches, then training ones
        sgd = train_on_batches(relu_mlp(depth), layout.batches[:k], targets[layout.rows], evaluated, width,
                               n_networks, rate, steps, centred=False, stochastic=True, device=device)
        sgd = sgd.reshape(n_networks, -1, targets.shape[1])
        rows.append({"depth": depth, "BN-NTK": ntk_score, "BN-NNGP": nngp_score, "no-BN NTK": score(plain),
                     f"SGD (N = {width})": float(np.mean([score(run) for run in sgd[:, : len(X_test)]])),
                     "SGD, mean of the networks": score(sgd[:, : len(X_test)].mean(0)),
                     "SGD, training copies": float(np.mean([score(run, y[layout.rows.ravel()])
                                                            for run in sgd[:, -k * batch_size:]]))})
    return rows
