"""Monte Carlo forward passes of wide random batch-normalized networks.

Conventions of the theory (Yang et al. 2019), sigma_w = 1, no bias. Tensors are shaped
(M, N, B): M independent networks, width N, batch size B. Layer l computes

    h^l = W^l x^{l-1},  W^l_{ab} ~ N(0, 1/N) i.i.d.,
    x^l = phi(BN(h^l)),  BN(h)_{ab} = (h_{ab} - mean_b h_{ab}) / sqrt(var_b h_{ab} + eps),

batch norm acting per neuron (row a) over the batch (b), in training mode with the biased
variance and no affine map: :func:`batch_norm` (:mod:`bnsym.core.batchnorm`), the one forward of every simulator.
The observable is the Gram matrix G^l = (1/N) x^{l T} x^l (B x B); in the mean field limit N -> infinity,
G^l = V_{B_phi}(G^{l-1}).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from ..core.activations import Activation, parse_activation
from ..core.batchnorm import batch_norm
from ..core.device import Normals, configure_torch, default_device, generator, haar_orthogonal
from ..core.progress import progress_bar

SAMPLERS = ("weights", "gram")
_CHUNK_BYTES = 512 * 2**20  # memory a simulator keeps per chunk of networks on the CPU (see chunk_budget)
_CACHE_BYTES = 2 * 2**20  # the "gram" sampler on the CPU keeps one chunk's (B, N) activations under this size
_PROGRESS_FLOPS = 2e10  # show a progress bar by default above this many multiply-adds


def chunk_budget(device: torch.device | str) -> int:
    """Bytes a simulator keeps per chunk of networks: 512 MB on the CPU; on a GPU a quarter of its free memory
    (at least 512 MB), so that a chunk fills the card."""
    device = torch.device(device)
    if device.type != "cuda":
        return _CHUNK_BYTES
    return max(_CHUNK_BYTES, torch.cuda.mem_get_info(device)[0] // 4)


def gram(x: torch.Tensor) -> torch.Tensor:
    """G = (1/N) x^T x for x of shape (..., N, B): the (..., B, B) empirical covariance of the batch."""
    return x.mT @ x / x.shape[-2]


def gram_of_rows(x: torch.Tensor) -> torch.Tensor:
    """The same Gram (1/N) x x^T for x stored neurons last, (..., B, N): the simulators' layout, in which the
    O(N B^2) products run about twice as fast on the CPU as with (..., N, B)."""
    return x @ x.mT / x.shape[-1]


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


@lru_cache(maxsize=64)
def centred_basis(batch_size: int, device=None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """e (B x (B-1)): orthonormal columns spanning 1^perp (Helmert basis), so e e^T = G = I - 11^T/B.

    Column k (k = 1..B-1) is (1, ..., 1, -k, 0, ..., 0) / sqrt(k (k + 1)), with k ones; built on ``device``
    once per (B, device, dtype) and shared: do not modify it.
    """
    row = torch.arange(batch_size, device=device, dtype=dtype).unsqueeze(-1)
    k = torch.arange(1, batch_size, device=device, dtype=dtype)
    entries = torch.where(row < k, 1.0, torch.where(row == k, -k, 0.0))
    return entries / torch.sqrt(k * (k + 1))


@dataclass(frozen=True)
class CentredFactor:
    """Factors of the centred Gram K_c = G K G (rank <= B - 1) of a batch (..., B, B) of Grams K.

    ``root`` R (..., B, B - 1) with R R^T = K_c, and ``inverse_root`` F with F F^T = K_c^+ (pseudo-inverse; None
    where the caller did not ask for it), both with columns in 1^perp. ``exact`` (...,) says where they are exact:
    the Cholesky route marks a K_c of rank < B - 1 False (a failed factorisation, or a pivot below 1e-12 times the
    largest); the eigendecomposition route is exact everywhere.
    """

    root: torch.Tensor
    inverse_root: torch.Tensor | None
    exact: torch.Tensor


def centred_factor(k: torch.Tensor, robust: bool = False, inverse: bool = True) -> CentredFactor:
    """Factor K_c = G K G in the Helmert basis e (:func:`centred_basis`), where it is e K_r e^T, K_r = e^T K e.

    Cholesky K_r = L L^T gives R = e L and F = e L^-T; with ``robust``, the eigendecomposition
    K_r = U diag(lam) U^T gives R = e U diag(sqrt(lam)), F = e U diag(lam^-1/2) (0 where lam <= 1e-12 max lam),
    which accepts any rank; ``inverse=False`` skips F on the Cholesky route (a triangular solve the forward
    draws do not need). Neither synchronises the device with the host: callers check ``exact`` once
    per run and redo the run with ``robust=True`` where it fails.
    """
    e = centred_basis(k.shape[-1], k.device, k.dtype)
    reduced = e.mT @ k @ e
    if robust:
        eigenvalues, eigenvectors = torch.linalg.eigh(reduced)
        keep = eigenvalues > 1e-12 * eigenvalues[..., -1:].clamp(min=torch.finfo(k.dtype).tiny)
        root_values = eigenvalues.clamp(min=0).sqrt()
        inverse_values = torch.where(keep, 1 / torch.where(keep, root_values, 1.0), 0.0)
        rotated = e @ eigenvectors
        return CentredFactor(rotated * root_values.unsqueeze(-2), rotated * inverse_values.unsqueeze(-2),
                             torch.ones(k.shape[:-2], dtype=torch.bool, device=k.device))
    chol, info = torch.linalg.cholesky_ex(reduced)
    pivots = chol.diagonal(0, -2, -1).square()  # a rank-deficient K_r leaves pivots of rounding size
    exact = (info == 0) & (pivots.amin(-1) > 1e-12 * pivots.amax(-1))
    inverse_root = torch.linalg.solve_triangular(chol, e.mT, upper=False).mT if inverse else None  # e L^-T
    return CentredFactor(e @ chol, inverse_root, exact)


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
    q = haar_orthogonal(width, generator(seed, device), device, batch=(n_networks,), columns=b)
    return (math.sqrt(width) * q @ c.mT).to(dtype)


def _weights_preactivations(x: torch.Tensor, gen: torch.Generator, chunk: int) -> torch.Tensor:
    """h = W x with explicit W_{ab} ~ N(0, 1/N) i.i.d., drawn for ``chunk`` networks at a time; x and h are
    stored neurons last, (M, B, N), so this computes h^T = x^T W^T."""
    n = x.shape[-1]
    products = [
        torch.bmm(part, torch.randn(len(part), n, n, generator=gen, device=x.device, dtype=x.dtype).mT)
        for part in x.split(chunk)
    ]
    return torch.cat(products) / math.sqrt(n)


def _gram_preactivations(k: torch.Tensor, width: int, normals: Normals, robust: bool,
                         out: torch.Tensor | None = None, noise: torch.Tensor | None = None,
                         inverse: bool = True) -> tuple[torch.Tensor, CentredFactor]:
    """Centred pre-activations H_c = W x G of one layer, drawn without W: H_c = Z R^T, R R^T = G K G, K = gram(x).

    Given x, the rows of W x are i.i.d. N(0, K), so those of W x G are i.i.d. N(0, G K G): with
    Z (M, N, B-1) i.i.d. N(0, 1) and R from :func:`centred_factor` this is exact, at cost O(N B^2) instead of
    O(N^2 B). Batch norm sees h only through G h, so the network has the law of the "weights" sampler's.
    Takes K (M, B, B) and N = ``width`` (the caller has K: the previous layer's recorded Gram). H_c is stored
    neurons last, (M, B, N): H_c^T = R Z^T. Returns H_c^T and the factor (the backward pass needs its
    pseudo-inverse, computed where ``inverse``; ``exact`` says where it holds); ``out``: where to write H_c^T,
    ``noise``: where to draw Z^T.
    """
    factor = centred_factor(k, robust, inverse)
    noise = normals(k.shape[0], factor.root.shape[-1], width, dtype=k.dtype, out=noise)
    return torch.matmul(factor.root, noise, out=out), factor


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
    sizes: tuple[int, ...] | None = None,
) -> torch.Tensor:
    """Gram matrices G^l = (1/N) x^{l T} x^l, l = 0..depth, of M random batch-normalized networks.

    Args:
        phi: the activation (a name for :func:`parse_activation`, or an Activation).
        inputs: x^0, shape (M, N, B), or (N, B) shared by ``n_networks`` networks.
        depth: number of layers L.
        eps: the batch norm epsilon.
        n_networks: M; defaults to inputs.shape[0] for (M, N, B) inputs.
        seed: seeds the weights (or the Gaussian draws of "gram"): same seed, device and chunk give the same
            result.
        sampler: "weights" draws W^l explicitly; "gram" draws the centred pre-activations G h^l directly,
            as rows N(0, G G^{l-1} G) (:func:`centred_factor`). Both give the same law of (G^0, ..., G^L).
        device: where to compute; default :func:`default_device`.
        dtype: the compute dtype (float64 for comparisons with theory; TF32 is always off).
        chunk: networks per W draw of the "weights" sampler; default keeps a chunk's W within
            :func:`chunk_budget` (512 MB on the CPU).
        sizes: batch sizes that split the B columns into batches normalised separately (two batches
            through one network, App. H); default one batch. (Centring over all B columns before a per-batch
            batch norm changes nothing: each batch norm removes its own mean.)
        progress: show a progress bar over layers (where bnsym.core.progress allows); default: when
            the job exceeds 2e10
            multiply-adds.

    Returns:
        float64 CPU tensor (M, L + 1, B, B): [:, 0] is the inputs' Gram, [:, l] layer l's.
    """
    configure_torch()
    device = device or default_device()
    activation = parse_activation(phi)
    x = _batched_inputs(inputs, n_networks, device, dtype)
    m, n, b = x.shape
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; choose from {SAMPLERS}")
    chunk = chunk or max(1, chunk_budget(device) // (n * n * x.element_size()))
    flops = m * n * b * depth * (n if sampler == "weights" else b)
    bar = progress if progress is not None else flops > _PROGRESS_FLOPS

    def run(robust: bool) -> tuple[torch.Tensor, torch.Tensor]:
        gen, normals = generator(seed, device), Normals(seed, device)
        out = x.mT.contiguous()  # neurons last, (M, B, N)
        grams, exact = [gram_of_rows(out)], torch.ones((), dtype=torch.bool, device=device)
        for _ in progress_bar(range(depth), desc=f"forward ({sampler})", show=bar):
            if sampler == "weights":
                h = _weights_preactivations(out, gen, chunk)
            else:
                h, factor = _gram_preactivations(grams[-1], n, normals, robust, inverse=False)
                exact = exact & factor.exact.all()
            # the Gram sampler draws G h, centred over the whole batch: only separate batches need centring
            out = activation.torch(batch_norm(h, eps, sizes, -2, centre=sampler != "gram" or sizes is not None))
            grams.append(gram_of_rows(out))
        return torch.stack(grams, dim=1), exact

    grams, exact = run(robust=n < b - 1)  # N < B - 1: G K G is singular, Cholesky cannot succeed
    if not bool(exact):  # the run's one host synchronisation; rank-deficient Grams are rare
        grams, _ = run(robust=True)
    return grams.to(device="cpu", dtype=torch.float64)
