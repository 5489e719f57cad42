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

from ..core.validation import check_layers, check_range, check_real_tensor, check_variance, check_whole_number
from ..meanfield.kernels import arccos_kernel


def relu_cosines(depth: int, s_w2: float, s_b2: float, c0: float = 0.0) -> np.ndarray:
    """Mean-field cosine of post-ReLU representations after layers 1..depth (no batch norm), inputs with cosine c0.

    Inputs of unit second moment per coordinate; weights of variance s_w2 / fan_in, biases of variance s_b2
    (PyTorch's default init: 1/3 and 1/(3 fan_in)).
    """
    depth = check_layers(depth, "depth")
    s_w2, s_b2 = check_variance(s_w2, "s_w2", positive=True), check_variance(s_b2, "s_b2", positive=False)
    c0 = check_range(c0, "c0", -1.0, 1.0, why="a cosine")
    # the map in the bias share t = s_b^2 / q, which stays in [0, 1] where q itself over- or underflows:
    # c = (1 - t) J_1(c_prev) + t and t' = t / (s_w^2 / 2 + t); layer 1 acts on the inputs directly
    share = 0.0 if s_b2 == 0 else 1 / (1 + s_w2 / s_b2)
    c = (1 - share) * c0 + share
    cosines = []
    for _ in range(depth):
        cosines.append(float(arccos_kernel(1, c)))
        share = share / (s_w2 / 2 + share) if share else 0.0
        c = (1 - share) * cosines[-1] + share
    return np.array(cosines)


def asymmetric_unit_correlation(x: torch.Tensor | None = None, lower: float = 0.0, upper: float = 2.0) -> float:
    """Correlation of two features after one layer with U(lower, upper)/sqrt(fan_in) weights and centred BN.

    Feature i over the batch is m G S + G X^T w_i, with S = X^T 1 the inputs' sums shared by every feature, w_i of
    variance v per entry, G the centring, m and v the weight law's mean and variance (over 1/fan_in). To leading
    order in 1/N the correlation is m^2 ||G S||^2 / (m^2 ||G S||^2 + v ||X G||_F^2) for the given inputs ``x``
    (d_in x N); with ``x = None`` (i.i.d. inputs, ||G S||^2 ~ ||X G||_F^2) it is m^2 / (m^2 + v), 3/4 for U(0, 2a).
    """
    lower, upper = check_range(lower, "lower"), check_range(upper, "upper")
    if not lower < upper:
        raise ValueError(f"the weight law U(lower, upper) needs lower < upper, got {lower!r} and {upper!r}")
    scale = max(abs(lower), abs(upper))  # the correlation is scale free; bounds in [-1, 1] keep mean^2 in range
    lower, upper = lower / scale, upper / scale
    mean, variance = (lower + upper) / 2, (upper - lower) ** 2 / 12
    if x is None:
        return mean**2 / (mean**2 + variance)
    x = check_real_tensor(x, "x (d_in features x N samples)", min_ndim=2).to(torch.float64)
    if x.ndim != 2 or x.shape[1] < 2:
        raise ValueError(f"x must be one matrix of d_in features x N >= 2 samples, got shape {tuple(x.shape)}")
    centred = x - x.mean(-1, keepdim=True)
    largest = float(centred.abs().max())
    if largest == 0:
        raise ValueError("x is constant over the samples: centred batch norm of its features divides by 0")
    centred = centred * 2.0 ** -np.frexp(largest)[1]  # both terms are quadratic in x: an exact power of 2 cancels
    common = mean**2 * float(centred.sum(0).square().sum())
    return common / (common + variance * float(centred.square().sum()))


def last_layer_gradient_cosines(H: torch.Tensor, errors: torch.Tensor) -> dict[str, torch.Tensor]:
    """Prop. 19: per-example gradients of a linear read-out W (d_out x d) and their cosines.

    ``H`` (d, N) is the last hidden layer, ``errors`` (d_out, N) the loss gradients dl_i / d(W h_i). The gradient of
    L_i in W is errors_i h_i^T (eq. 97), so its Frobenius cosine with L_j's is cos(e_i, e_j) cos(h_i, h_j), and row
    k's is sign(e_ik e_jk) cos(h_i, h_j). Returns the gradients' pairwise cosines (N x N), whole and row 0.
    """
    H = check_real_tensor(H, "H (the last hidden layer, d x N)", min_ndim=2)
    errors = check_real_tensor(errors, "errors (the loss gradients, d_out x N)", min_ndim=2)
    if H.ndim != 2 or errors.ndim != 2 or H.shape[1] != errors.shape[1]:
        raise ValueError(f"H (d, N) and errors (d_out, N) must be matrices with one column per example, got shapes "
                         f"{tuple(H.shape)} and {tuple(errors.shape)}")
    if (H == 0).all(0).any() or (errors[0] == 0).any():
        raise ValueError("H has an example (column) equal to 0, or errors a 0 in row 0: that example's gradient (or "
                         "its row 0) is 0 and has no direction")
    dtype = torch.promote_types(H.dtype, errors.dtype)  # each example's gradient by powers of 2: cosines unchanged
    H = torch.ldexp(H.to(dtype), -torch.frexp(H.abs().amax(0))[1])
    errors = torch.ldexp(errors.to(dtype), -torch.frexp(errors.abs().amax(0))[1])
    grads = torch.einsum("kn,dn->nkd", errors, H)  # (N, d_out, d): one per example
    flat = grads.flatten(1)
    unit = flat / flat.norm(dim=1, keepdim=True)
    rows = grads[:, 0, :] / grads[:, 0, :].norm(dim=1, keepdim=True)
    return {"frobenius": unit @ unit.T, "row0": rows @ rows.T}


def gradient_alignment(H: torch.Tensor, errors: torch.Tensor, row: int | None = None) -> torch.Tensor:
    """Fig. 10's "average pairwise gradient angle": the mean absolute cosine over pairs i < j of the per-example
    gradients errors_i h_i^T of a linear read-out (``row`` None), or of its row ``row``, for a batch of networks.

    ``H`` (n, d, P) are the last hidden layers, ``errors`` (n, d_out, P) the loss gradients in the logits. By eq. 97
    the cosine is cos(e_i, e_j) cos(h_i, h_j) for the whole read-out and sign(e_ik e_jk) cos(h_i, h_j) for row k
    (:func:`last_layer_gradient_cosines` builds the gradients themselves). The mean runs over the pairs of nonzero
    gradients; with fewer than two, every gradient lies on one line and the value is 1. Returns (n,).
    """
    H = check_real_tensor(H, "H (the last hidden layers, n x d x P)", min_ndim=3)
    errors = check_real_tensor(errors, "errors (the loss gradients, n x d_out x P)", min_ndim=3)
    if H.ndim != 3 or errors.ndim != 3 or H.shape[0] != errors.shape[0] or H.shape[2] != errors.shape[2] \
            or H.shape[2] < 2:
        raise ValueError(f"H (n, d, P) and errors (n, d_out, P) must be batches of matrices with the same P >= 2 "
                         f"examples (columns), got shapes {tuple(H.shape)} and {tuple(errors.shape)}")
    if row is not None:
        row = check_whole_number(row, "row (of the read-out, from 0)", 0, errors.shape[1] - 1,
                                 f"the read-out has {errors.shape[1]} rows")
        errors = errors[:, row:row + 1]

    def unit_columns(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.ldexp(a, -torch.frexp(a.abs().amax(1, keepdim=True))[1])  # by powers of 2: cosines unchanged
        norm = a.norm(dim=1, keepdim=True)
        return torch.where(norm > 0, a / torch.where(norm > 0, norm, 1), 0), norm[:, 0] > 0

    (h, h_nonzero), (e, e_nonzero) = unit_columns(H), unit_columns(errors)
    cosines = ((h.transpose(1, 2) @ h) * (e.transpose(1, 2) @ e)).abs()
    k = (h_nonzero & e_nonzero).sum(1).to(cosines.dtype)  # nonzero gradients per network
    pairs = cosines.sum((1, 2)) - cosines.diagonal(dim1=1, dim2=2).sum(1)
    return torch.where(k >= 2, pairs / torch.where(k >= 2, k * (k - 1), 1), 1.0)
