"""Monte Carlo forward passes of wide random batch-normalized networks.

Conventions of the theory (Yang et al. 2019), sigma_w = 1, no bias. Tensors are shaped
(M, N, B): M independent networks, width N, batch size B. Layer l computes

    h^l = W^l x^{l-1},  W^l_{ab} ~ N(0, 1/N) i.i.d.,
    x^l = phi(BN(h^l)),  BN(h)_{ab} = (h_{ab} - mean_b h_{ab}) / sqrt(var_b h_{ab} + eps),

batch norm acting per neuron (row a) over the batch (b), in training mode with the biased
variance and no affine map. The observable is the Gram matrix G^l = (1/N) x^{l T} x^l
(B x B); in the mean field limit N -> infinity, G^l = V_{B_phi}(G^{l-1}).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Callable

import numpy as np
import torch

from ..core.activations import Activation, parse_activation
from ..core.progress import progress_bar
from .device import configure_torch, default_device, generator

SAMPLERS = ("weights", "gram")
_CHUNK_BYTES = 512 * 2**20  # the "weights" sampler keeps one chunk's W under this size
_PROGRESS_FLOPS = 2e10  # show a progress bar by default above this many multiply-adds


def batch_norm(h: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """BN(h) = (h - mean(h)) / sqrt(var(h) + eps) along the last (batch) axis, var biased (1/B)."""
    centred = h - h.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.square().mean(-1, keepdim=True) + eps)


def gram(x: torch.Tensor) -> torch.Tensor:
    """G = (1/N) x^T x for x of shape (..., N, B): the (..., B, B) empirical covariance of the batch."""
    return x.mT @ x / x.shape[-2]


def mean_diagonal(grams: torch.Tensor) -> torch.Tensor:
    """(1/B) sum_b G_bb for each (..., B, B) matrix: q for a BSB1 matrix q((1 - c) I + c 11^T)."""
    return grams.diagonal(0, -2, -1).mean(-1)


def mean_off_diagonal(grams: torch.Tensor) -> torch.Tensor:
    """(1/(B(B - 1))) sum_{b != b'} G_bb' for each (..., B, B) matrix: q c for a BSB1 matrix."""
    b = grams.shape[-1]
    return (grams.sum((-2, -1)) - grams.diagonal(0, -2, -1).sum(-1)) / (b * (b - 1))


def _psd_factor(k: torch.Tensor) -> torch.Tensor:
    """L = U diag(sqrt(max(lambda, 0))) with K = U diag(lambda) U^T, so that L L^T = K.

    Unlike Cholesky this accepts singular K (..., B, B); eigenvalues pushed below 0 by
    rounding are set to 0.
    """
    eigenvalues, eigenvectors = torch.linalg.eigh(k)
    return eigenvectors * eigenvalues.clamp(min=0).sqrt().unsqueeze(-2)


def centred_basis(batch_size: int, device=None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """e (B x (B-1)): orthonormal columns spanning 1^perp (Helmert basis), so e e^T = G = I - 11^T/B."""
    b = batch_size
    e = torch.zeros(b, b - 1, dtype=dtype, device=device)
    for k in range(1, b):
        e[:k, k - 1] = 1.0
        e[k, k - 1] = -float(k)
        e[:, k - 1] /= math.sqrt(k * (k + 1))
    return e


def gram_root(k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, K^+) with R R^T = K and K^+ the pseudo-inverse, for a batch (..., B, B) of Gram matrices.

    Cholesky where K is positive definite. A Gram of rows that sum to zero (a batch-normed identity
    network, or back-propagated gradients) is singular with null vector 1: it is factored exactly in the
    centred basis e, R = e chol(e^T K e), K^+ = e (e^T K e)^-1 e^T. Anything else Cholesky rejects falls
    back to an eigendecomposition.
    """
    b = k.shape[-1]
    ones = torch.ones(b, dtype=k.dtype, device=k.device)
    null = (ones @ k @ ones) <= 1e-10 * b * k.diagonal(0, -2, -1).sum(-1)
    basis = centred_basis(b, k.device, k.dtype) if bool(null.all()) else torch.eye(b, dtype=k.dtype, device=k.device)
    reduced = basis.mT @ k @ basis
    chol, info = torch.linalg.cholesky_ex(reduced)
    if bool((info == 0).all()):
        return basis @ chol, basis @ torch.cholesky_inverse(chol) @ basis.mT
    eigenvalues, eigenvectors = torch.linalg.eigh(k)  # rank-deficient beyond the 1 direction: rare
    keep = eigenvalues > 1e-12 * eigenvalues[..., -1:].clamp(min=1e-300)
    inverse = torch.where(keep, 1 / torch.where(keep, eigenvalues, 1.0), 0.0)
    return (eigenvectors * eigenvalues.clamp(min=0).sqrt().unsqueeze(-2),
            (eigenvectors * inverse.unsqueeze(-2)) @ eigenvectors.mT)


def inputs_with_gram(
    Sigma: np.ndarray | torch.Tensor,
    width: int,
    n_networks: int,
    seed: int = 0,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Inputs x^0 of shape (M, N, B) whose Gram (1/N) x^{0 T} x^0 is exactly Sigma in every network.

    x^0 = sqrt(N) Q C^T with C C^T = Sigma and Q an N x B matrix with orthonormal columns
    (Haar-distributed, independent per network), so (1/N) x^{0 T} x^0 = C Q^T Q C^T = Sigma.
    The network's law depends on x^0 only through Sigma, since W^1 is rotation invariant.

    Raises:
        ValueError: if Sigma is not a symmetric positive semidefinite (B, B) matrix, or N < B.
    """
    sigma = torch.as_tensor(Sigma, dtype=torch.float64, device="cpu")
    if sigma.ndim != 2 or sigma.shape[0] != sigma.shape[1]:
        raise ValueError(f"Sigma must be a square (B, B) matrix, got shape {tuple(sigma.shape)}")
    b = sigma.shape[0]
    if width < b:
        raise ValueError(f"width N = {width} < batch size B = {b}: no N x B matrix has orthonormal columns")
    tolerance = 1e-10 * sigma.abs().max().item()
    asymmetry = (sigma - sigma.T).abs().max().item()
    if asymmetry > tolerance:
        raise ValueError(f"Sigma is not symmetric: max |Sigma - Sigma^T| = {asymmetry:.3g}")
    smallest = torch.linalg.eigvalsh(sigma)[0].item()
    if smallest < -tolerance:
        raise ValueError(f"Sigma is not positive semidefinite: smallest eigenvalue {smallest:.3g}")
    device = device or default_device()
    c = _psd_factor((sigma + sigma.T) / 2).to(device)
    gaussian = torch.randn(
        n_networks, width, b, generator=generator(seed, device), device=device, dtype=torch.float64
    )
    q, r = torch.linalg.qr(gaussian)
    q = q * r.diagonal(0, -2, -1).sign().unsqueeze(-2)  # signs making Q Haar-distributed
    return (math.sqrt(width) * q @ c.mT).to(dtype)


def _weights_preactivations(x: torch.Tensor, gen: torch.Generator, chunk: int) -> torch.Tensor:
    """h = W x with explicit W_{ab} ~ N(0, 1/N) i.i.d., drawn for ``chunk`` networks at a time."""
    n = x.shape[-2]
    products = [
        torch.bmm(torch.randn(len(part), n, n, generator=gen, device=x.device, dtype=x.dtype), part)
        for part in x.split(chunk)
    ]
    return torch.cat(products) / math.sqrt(n)


def _gram_preactivations(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """h = Z R^T with Z_{ab} ~ N(0, 1) i.i.d. and R R^T = K = gram(x) (:func:`gram_root`).

    Given x, the rows h_a = sum_c W_{ac} x_c of W x are i.i.d. N(0, K): same law as the
    "weights" sampler, at cost O(N B^2) instead of O(N^2 B).
    """
    root, _ = gram_root(gram(x))
    noise = torch.randn(*x.shape[:-1], root.shape[-1], generator=gen, device=x.device, dtype=x.dtype)
    return noise @ root.mT


def _batched_inputs(
    inputs: np.ndarray | torch.Tensor, n_networks: int | None, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """Inputs as an (M, N, B) tensor; (N, B) inputs are shared by all M = n_networks networks."""
    x = torch.as_tensor(inputs, dtype=dtype, device=device)
    if x.ndim == 2:
        if n_networks is None:
            raise ValueError("inputs of shape (N, B) need n_networks: how many networks share them")
        return x.expand(n_networks, *x.shape)
    if x.ndim == 3:
        if n_networks not in (None, x.shape[0]):
            raise ValueError(f"n_networks = {n_networks} but inputs hold {x.shape[0]} networks")
        return x
    raise ValueError(f"inputs must have shape (N, B) or (M, N, B), got {tuple(x.shape)}")


def simulate_forward(
    phi: str | Activation,
    inputs: np.ndarray | torch.Tensor,
    depth: int,
    eps: float = 0.0,
    n_networks: int | None = None,
    seed: int = 0,
    sampler: str = "weights",
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float64,
    chunk: int | None = None,
    progress: bool | None = None,
) -> torch.Tensor:
    """Gram matrices G^l = (1/N) x^{l T} x^l, l = 0..depth, of M random batch-normalized networks.

    Args:
        phi: the activation (a name for :func:`parse_activation`, or an Activation).
        inputs: x^0, shape (M, N, B), or (N, B) shared by ``n_networks`` networks.
        depth: number of layers L.
        eps: the batch norm epsilon.
        n_networks: M; defaults to inputs.shape[0] for (M, N, B) inputs.
        seed: seeds the weights: same seed, device and chunk give the same result.
        sampler: "weights" draws W^l explicitly; "gram" draws h^l directly as N(0, G^{l-1})
            rows. Both give the same law of (G^0, ..., G^L).
        device: where to compute; default :func:`default_device`.
        dtype: the compute dtype (float64 for comparisons with theory; TF32 is always off).
        chunk: networks per W draw of the "weights" sampler; default keeps a chunk's W under
            512 MB.
        progress: show a progress bar over layers (where bnsym.core.progress allows); default: when
            the job exceeds 2e10 multiply-adds.

    Returns:
        float64 CPU tensor (M, L + 1, B, B): [:, 0] is the inputs' Gram, [:, l] layer l's.
    """
    configure_torch()
    device = device or default_device()
    activation = parse_activation(phi)
    x = _batched_inputs(inputs, n_networks, device, dtype)
    m, n, b = x.shape
    if sampler == "weights":
        chunk = chunk or max(1, _CHUNK_BYTES // (n * n * x.element_size()))
        sample: Callable[[torch.Tensor, torch.Generator], torch.Tensor] = partial(
            _weights_preactivations, chunk=chunk
        )
        flops = m * n * n * b * depth
    elif sampler == "gram":
        sample = _gram_preactivations
        flops = m * n * b * b * depth
    else:
        raise ValueError(f"unknown sampler {sampler!r}; choose from {SAMPLERS}")
    if progress is None:
        progress = flops > _PROGRESS_FLOPS
    gen = generator(seed, device)
    grams = [gram(x)]
    for _ in progress_bar(range(depth), desc=f"forward ({sampler})", show=progress):
        x = activation.torch(batch_norm(sample(x, gen), eps))
        grams.append(gram(x))
    return torch.stack(grams, dim=1).to(device="cpu", dtype=torch.float64)
