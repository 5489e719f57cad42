"""Correlations at initialisation in Daneshmand et al. 2020: samples and features align, and gradients follow.

Without batch norm, the mean-field correlation map of a ReLU layer with weight variance s_w^2 / fan_in and bias
variance s_b^2 (Poole et al. 2016; J_1 the arccosine kernel) predicts how fast samples align:
q' = s_w^2 q / 2 + s_b^2, c' = (s_w^2 q J_1(c) / 2 + s_b^2) / q', and post-ReLU cosines J_1(c)
(:func:`relu_cosines`). An asymmetric init correlates the features after one batch-norm layer
(:func:`asymmetric_unit_correlation`, Fig. 5). Prop. 19 turns aligned representations into aligned last-layer
gradients (:func:`last_layer_gradient_cosines`). The networks these predictions are checked on are
:mod:`bnsym.sim.daneshmand`.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.validation import check_variance
from ..meanfield.kernels import arccos_kernel


def relu_cosines(depth: int, s_w2: float, s_b2: float, c0: float = 0.0) -> np.ndarray:
    """Mean-field cosine of post-ReLU representations after layers 1..depth (no batch norm), inputs with cosine c0.

    Inputs of unit second moment per coordinate; weights of variance s_w2 / fan_in, biases of variance s_b2
    (PyTorch's default init: 1/3 and 1/(3 fan_in)).
    """
    s_w2, s_b2 = check_variance(s_w2, "s_w2", positive=True), check_variance(s_b2, "s_b2", positive=False)
    q, k = s_w2 + s_b2, s_w2 * c0 + s_b2  # layer 1 acts on the inputs directly
    cosines = []
    for _ in range(depth):
        c = k / q
        cosines.append(float(arccos_kernel(1, c)))
        q, k = s_w2 * q / 2 + s_b2, s_w2 * q * float(arccos_kernel(1, c)) / 2 + s_b2
    return np.array(cosines)


def asymmetric_unit_correlation(x: torch.Tensor | None = None, lower: float = 0.0, upper: float = 2.0) -> float:
    """Correlation of two features after one layer with U(lower, upper)/sqrt(fan_in) weights and centred BN.

    Feature i over the batch is m G S + G X^T w_i, with S = X^T 1 the inputs' sums shared by every feature, w_i of
    variance v per entry, G the centring, m and v the weight law's mean and variance (over 1/fan_in). To leading
    order in 1/N the correlation is m^2 |G S|^2 / (m^2 |G S|^2 + v |X G|_F^2) for the given inputs ``x`` (d_in x N);
    with ``x = None`` (i.i.d. inputs, |G S|^2 ~ |X G|_F^2) it is m^2 / (m^2 + v), 3/4 for U(0, 2a).
    """
    mean, variance = (lower + upper) / 2, (upper - lower) ** 2 / 12
    if x is None:
        return mean**2 / (mean**2 + variance)
    centred = x - x.mean(-1, keepdim=True)
    common = mean**2 * float(centred.sum(0).square().sum())
    return common / (common + variance * float(centred.square().sum()))


def last_layer_gradient_cosines(H: torch.Tensor, errors: torch.Tensor) -> dict[str, torch.Tensor]:
    """Prop. 19: per-example gradients of a linear read-out W (d_out x d) and their cosines.

    ``H`` (d, N) is the last hidden layer, ``errors`` (d_out, N) the loss gradients dl_i / d(W h_i). The gradient of
    L_i in W is errors_i h_i^T (eq. 97), so its Frobenius cosine with L_j's is cos(e_i, e_j) cos(h_i, h_j), and row
    k's is sign(e_ik e_jk) cos(h_i, h_j). Returns the gradients' pairwise cosines (N x N), whole and row 0.
    """
    grads = torch.einsum("kn,dn->nkd", errors, H)  # (N, d_out, d): one per example
    flat = grads.flatten(1)
    unit = flat / flat.norm(dim=1, keepdim=True)
    rows = grads[:, 0, :] / grads[:, 0, :].norm(dim=1, keepdim=True)
    return {"frobenius": unit @ unit.T, "row0": rows @ rows.T}
