"""Daneshmand et al. 2020's networks at initialisation: random MLPs (Figs. 1, 2 and 5 of the paper in miniature).

H is d features x N samples, as in the paper; n networks run at once (one batched matmul per layer, weights (n,
d_out, d_in)); the inits are those of :mod:`bnsym.sim.daneshmand_mlp`. Batch norm is train-mode with or without
centring and no affine parameters (their initial values, gain 1 and shift 0, are what the paper's analysis assumes).
The training on digits (Figs. 4-6) is :mod:`bnsym.train.daneshmand`. The theory that these networks check (the
mean-field cosine map, the rank notions) is :mod:`bnsym.rank`; it reaches a simulator through its caller.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..core.batchnorm import batch_norm, batch_norm_forward
from ..core.device import generator
from ..core.validation import (
    check_choice,
    check_draws,
    check_eps,
    check_flag,
    check_float_dtype,
    check_layers,
    check_memory,
    check_real_array,
    check_real_tensor,
    check_seed,
    check_variance,
    check_whole_number,
    check_width,
)
from .daneshmand_mlp import INIT_VARIANCES, INITS, init_layer

__all__ = ["INITS", "INIT_VARIANCES", "batch_norm_rows", "gaussian_relu_cosines", "init_layer", "init_variances",
           "mean_pair_cosine", "representations"]

def init_variances(init: str, fan_in: int) -> tuple[float, float]:
    """(s_w^2, s_b^2) of a zero-mean init: weights of variance s_w^2 / fan_in, biases of variance s_b^2."""
    init = check_choice(init, "init (a zero-mean init)", INIT_VARIANCES)
    fan_in = check_width(fan_in, name="fan_in")
    return INIT_VARIANCES[init][0], INIT_VARIANCES[init][1] / fan_in


def batch_norm_rows(h: torch.Tensor, centre: bool = True, eps: float = 0.0) -> torch.Tensor:
    """Batch norm of every feature (row) of h (..., d, N) over the N samples, with or without centring."""
    h = check_real_tensor(h, "h (a matrix (..., d, N) of d features x N samples)", min_ndim=2)
    centre, eps = check_flag(centre, "centre"), check_eps(eps)
    largest = h.abs().amax(-1, keepdim=True)
    exponent = torch.frexp(torch.where(largest > 0, largest, 1))[1]
    unit = torch.ldexp(h, -exponent)  # each row by a power of 2 (exact): its mean and square never overflow
    normalised, rms = batch_norm_forward(unit, torch.ldexp(torch.full_like(largest, eps), -2 * exponent),
                                         centre=centre)  # eps scaled as the row: the same map
    if eps == 0 and (rms == 0).any():
        raise ValueError("h has a feature (row) that is " + ("constant over the samples" if centre else "0")
                         + ": batch norm divides by its root mean square, 0 (eps > 0 keeps it from 0)")
    return normalised


def representations(x: torch.Tensor, depths: list[int], width: int, n_networks: int, init: str = "torch",
                    bn: bool = False, centre: bool = True, relu: bool = True, seed: int = 0,
                    dtype: torch.dtype = torch.float32) -> dict[int, torch.Tensor]:
    """The hidden representations H_l (n_networks, width, N) of random MLPs at the given depths.

    ``x`` is the input batch, d_in features x N samples (shared by all networks). Layer: h = W x + b, batch norm
    of each feature over the batch if ``bn``, then ReLU if ``relu``. ``dtype`` float32 mimics the paper's runs.
    Networks without batch norm or biases are rescaled by one number per layer (rank and cosines unchanged).
    """
    x = check_real_tensor(x, "x (d_in features x N samples)", min_ndim=2)
    if x.ndim != 2:
        raise ValueError(f"x must be one matrix of d_in features x N samples, got shape {tuple(x.shape)}")
    depths = {check_layers(layer, "every entry of depths (the layers to return)")
              for layer in check_real_array(depths, "depths (the layers to return)", min_ndim=1).ravel().tolist()}
    width, n_networks = check_width(width), check_draws(n_networks, "n_networks", 1)
    init, seed, dtype = check_choice(init, "init", INITS), check_seed(seed), check_float_dtype(dtype)
    bn, centre, relu = check_flag(bn, "bn"), check_flag(centre, "centre"), check_flag(relu, "relu")
    if bn and x.shape[1] < 2:
        raise ValueError("x must have N >= 2 samples (columns) with bn: batch norm of one sample divides by 0")
    check_memory(n_networks * (len(depths) + 1), max(width, x.shape[0]), x.shape[1],
                 "n_networks (x the layers returned) x max(width, d_in) x N")
    gen = generator(seed, x.device)
    h = x.to(dtype).expand(n_networks, *x.shape)
    out = {}
    for layer in range(1, max(depths) + 1):
        w, b = init_layer(gen, n_networks, h.shape[-2], width, init, dtype)
        h = w @ h + (b if b is not None else 0)
        if bn:
            h = batch_norm(h, centre=centre)  # every feature (row) over the N samples; NaN if diverged
        if relu:
            h = torch.relu(h)
        if not bn and b is None:  # rank-neutral global rescaling, so deep float32 products neither overflow nor vanish
            h = h / h.square().mean((-2, -1), keepdim=True).sqrt()
        if layer in depths:
            out[layer] = h
    if not all(torch.isfinite(h).all() for h in out.values()):
        raise ValueError(f"the representations leave {dtype}'s range: x is too large or too small for it, or (with "
                         "bn) a feature is constant over the samples of x")
    return out


def mean_pair_cosine(H: torch.Tensor) -> np.ndarray:
    """The mean over sample pairs a < b of cos(h_a, h_b), per network, for H (..., d, N)."""
    H = check_real_tensor(H, "H (a matrix (..., d, N) of d features x N samples)", min_ndim=2)
    if H.shape[-1] < 2:
        raise ValueError(f"H must have N >= 2 samples (columns) to have a pair, got shape {tuple(H.shape)}")
    largest = H.abs().amax(-2, keepdim=True)
    if (largest == 0).any():
        raise ValueError("H has a sample (column) equal to 0, whose cosine with another is undefined")
    return _mean_pair_cosine(torch.ldexp(H, -torch.frexp(largest)[1]))  # each column by a power of 2: no overflow


def _mean_pair_cosine(H: torch.Tensor) -> np.ndarray:
    """:func:`mean_pair_cosine` without checks."""
    unit = H / H.norm(dim=-2, keepdim=True)
    cos = unit.mT @ unit
    n = H.shape[-1]
    return ((cos.sum((-2, -1)) - cos.diagonal(0, -2, -1).sum(-1)) / (n * (n - 1))).double().cpu().numpy()


def gaussian_relu_cosines(depth: int, s_w2: float, s_b2: float, width: int, n_samples: int, n_networks: int,
                          seed: int = 0) -> np.ndarray:
    """Simulated mean post-ReLU pair cosine at layers 1..depth, (depth, n_networks): Gaussian weights of variance
    s_w2 / width, biases of variance s_b2 (:func:`init_variances` gives an init's).

    Orthogonal inputs (cosine 0, unit second moment). Given the layer's input x (width x N), the rows of W x + b are
    i.i.d. N(0, s_w^2 x^T x / fan_in + s_b^2 11^T): sampling them from that N x N covariance is equal in law to
    drawing W (Gaussian), at a cost of O(width N^2) instead of O(width^2 N).
    """
    depth, width = check_layers(depth, "depth"), check_width(width)
    s_w2, s_b2 = check_variance(s_w2, "s_w2", positive=True), check_variance(s_b2, "s_b2", positive=False)
    n_samples = check_whole_number(n_samples, "n_samples", 2, width,
                                   "the inputs are orthogonal, at most width of them, and a cosine needs a pair")
    n_networks, seed = check_draws(n_networks, "n_networks", 1), check_seed(seed)
    check_memory(n_networks, width, n_samples, "n_networks x width x n_samples")
    gen = generator(seed, "cpu")
    q, _ = torch.linalg.qr(torch.randn(n_networks, width, n_samples, generator=gen, dtype=torch.float64))
    x = math.sqrt(width) * q
    ones = torch.ones(n_samples, n_samples, dtype=torch.float64)
    eye = torch.eye(n_samples, dtype=torch.float64)
    out = []
    for _ in range(depth):
        cov = s_w2 * x.mT @ x / width + s_b2 * ones
        root = torch.linalg.cholesky_ex(cov + 1e-12 * cov.diagonal(0, -2, -1).mean(-1)[:, None, None] * eye)[0]
        z = torch.randn(n_networks, width, n_samples, generator=gen, dtype=torch.float64)
        x = torch.relu(z @ root.mT)
        out.append(_mean_pair_cosine(x))
    cosines = np.stack(out)
    if not np.isfinite(cosines).all():
        raise ValueError(f"s_w2 = {s_w2:g} and s_b2 = {s_b2:g} over depth = {depth} layers give a sample with no "
                         f"cosine: its representation overflows float64, vanishes, or has all {width} ReLUs off "
                         "(likely at a small width: use a larger one, or another seed)")
    return cosines
