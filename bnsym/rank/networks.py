"""Random MLPs at initialisation, batched over networks, and the mean-field map that predicts their collapse.

Figs. 1 (left), 2 and 5 of Daneshmand et al. 2020 measure the rank of the last hidden layer at initialisation.
:func:`representations` runs n networks at once (one batched matmul per layer) and returns H, d features x N
samples, at the requested depths. Inits (fan_in = layer input size):

* ``"torch"``: nn.Linear's default, weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in));
* ``"asymmetric"``: weights U(0, 2/sqrt(fan_in)) (same variance, mean 1/sqrt(fan_in); Fig. 5), default biases;
* ``"he"``: weights N(0, 2/fan_in), no bias; ``"gaussian"``: weights N(0, 1/fan_in), no bias (linear nets).

Without batch norm, the mean-field correlation map of a ReLU layer with weight variance s_w^2 / fan_in and bias
variance s_b^2 (Poole et al. 2016; J_1 the arccosine kernel) predicts how fast samples align:
q' = s_w^2 q / 2 + s_b^2, c' = (s_w^2 q J_1(c) / 2 + s_b^2) / q', and post-ReLU cosines J_1(c)
(:func:`relu_cosines`). Prop. 19 turns aligned representations into aligned last-layer gradients
(:func:`last_layer_gradient_cosines`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..core.device import generator
from ..meanfield.kernels import arccos_kernel

INITS = ("torch", "asymmetric", "he", "gaussian")
INIT_VARIANCES = {"torch": (1 / 3, 1 / 3), "he": (2.0, 0.0), "gaussian": (1.0, 0.0)}  # (s_w^2, s_b^2 fan_in)


def _layer(gen: torch.Generator, n: int, fan_in: int, fan_out: int, init: str, dtype: torch.dtype
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weights (n, fan_out, fan_in) and biases (n, fan_out, 1) or None, for the named init."""
    shape, bound = (n, fan_out, fan_in), 1 / math.sqrt(fan_in)
    device = gen.device
    if init in ("torch", "asymmetric"):
        u = torch.rand(shape, generator=gen, device=device, dtype=dtype)
        w = (2 * u - 1) * bound if init == "torch" else 2 * u * bound
        b = (2 * torch.rand(n, fan_out, 1, generator=gen, device=device, dtype=dtype) - 1) * bound
        return w, b
    variance = {"he": 2.0, "gaussian": 1.0}[init] / fan_in
    return math.sqrt(variance) * torch.randn(shape, generator=gen, device=device, dtype=dtype), None


def batch_norm_rows(h: torch.Tensor, centre: bool = True, eps: float = 0.0) -> torch.Tensor:
    """Batch norm of every feature (row) of h (..., d, N) over the N samples, with or without centring."""
    if centre:
        h = h - h.mean(-1, keepdim=True)
    return h / (h.square().mean(-1, keepdim=True) + eps).sqrt()


def representations(x: torch.Tensor, depths: list[int], width: int, n_networks: int, init: str = "torch",
                    bn: bool = False, centre: bool = True, relu: bool = True, seed: int = 0,
                    dtype: torch.dtype = torch.float32) -> dict[int, torch.Tensor]:
    """The hidden representations H_l (n_networks, width, N) of random MLPs at the given depths.

    ``x`` is the input batch, d_in features x N samples (shared by all networks). Layer: h = W x + b, batch norm
    of each feature over the batch if ``bn``, then ReLU if ``relu``. ``dtype`` float32 mimics the paper's runs.
    Networks without batch norm or biases are rescaled by one number per layer (rank and cosines unchanged).
    """
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    if not depths or min(depths) < 1:
        raise ValueError(f"depths must be a non-empty list of layers >= 1, got {depths}")
    gen = generator(seed, x.device)
    h = x.to(dtype).expand(n_networks, *x.shape)
    out = {}
    for layer in range(1, max(depths) + 1):
        w, b = _layer(gen, n_networks, h.shape[-2], width, init, dtype)
        h = w @ h + (b if b is not None else 0)
        if bn:
            h = batch_norm_rows(h, centre)
        if relu:
            h = torch.relu(h)
        if not bn and b is None:  # rank-neutral global rescaling, so deep float32 products neither overflow nor vanish
            h = h / h.square().mean((-2, -1), keepdim=True).sqrt()
        if layer in depths:
            out[layer] = h
    return out


def mean_pair_cosine(H: torch.Tensor) -> np.ndarray:
    """The mean over sample pairs a < b of cos(h_a, h_b), per network, for H (..., d, N)."""
    unit = H / H.norm(dim=-2, keepdim=True)
    cos = unit.mT @ unit
    n = H.shape[-1]
    return ((cos.sum((-2, -1)) - cos.diagonal(0, -2, -1).sum(-1)) / (n * (n - 1))).double().cpu().numpy()


def relu_cosines(depth: int, init: str, fan_in: int, c0: float = 0.0) -> np.ndarray:
    """Mean-field cosine of post-ReLU representations after layers 1..depth (no batch norm), inputs with cosine c0.

    Inputs of unit second moment per coordinate; s_w^2, s_b^2 from ``init`` (torch: 1/3 and 1/(3 fan_in)).
    """
    if init not in INIT_VARIANCES:
        raise ValueError(f"the mean-field map needs a zero-mean init, one of {tuple(INIT_VARIANCES)}; got {init!r}")
    s_w2, s_b2 = INIT_VARIANCES[init][0], INIT_VARIANCES[init][1] / fan_in
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


def gaussian_relu_cosines(depth: int, init: str, width: int, n_samples: int, n_networks: int,
                          seed: int = 0) -> np.ndarray:
    """Simulated mean post-ReLU pair cosine at layers 1..depth, (depth, n_networks), Gaussian weights.

    Orthogonal inputs (cosine 0, unit second moment). Given the layer's input x (width x N), the rows of W x + b are
    i.i.d. N(0, s_w^2 x^T x / fan_in + s_b^2 11^T): sampling them from that N x N covariance is equal in law to
    drawing W (Gaussian), at a cost of O(width N^2) instead of O(width^2 N).
    """
    s_w2, s_b2 = INIT_VARIANCES[init][0], INIT_VARIANCES[init][1] / width
    gen = generator(seed, "cpu")
    q, _ = torch.linalg.qr(torch.randn(n_networks, width, n_samples, generator=gen, dtype=torch.float64))
    x = math.sqrt(width) * q
    ones = torch.ones(n_samples, n_samples, dtype=torch.float64)
    eye = torch.eye(n_samples, dtype=torch.float64)
    out = []
    for _ in range(depth):
        cov = s_w2 * x.mT @ x / width + s_b2 * ones
        root = torch.linalg.cholesky(cov + 1e-12 * cov.diagonal(0, -2, -1).mean(-1)[:, None, None] * eye)
        z = torch.randn(n_networks, width, n_samples, generator=gen, dtype=torch.float64)
        x = torch.relu(z @ root.mT)
        out.append(mean_pair_cosine(x))
    return np.stack(out)


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
