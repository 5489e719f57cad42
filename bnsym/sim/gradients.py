"""Monte Carlo back-propagation through wide random batch-normalised networks.

Same networks as :mod:`bnsym.sim.networks` (h^l = W^l x^{l-1}, x^l = phi(BN(h^l)), W ~ N(0, 1/N)),
with the loss L = <g, x^L>, g_{ab} ~ N(0, 1) i.i.d. per network. Back-propagation computes

    delta^l = dL/dh^l = BN'(h^l)^T [phi'(z^l) * dL/dx^l],     dL/dx^{l-1} = W^{l T} delta^l,

and records the gradient Grams Pi^l = (1/N) delta^{l T} delta^l (B x B).

Two samplers with the same joint law of all Grams:

* "weights": explicit W^l (O(N^2 B) per layer; the W of a chunk of networks are kept for the backward pass);
* "gram": exact conditional sampling, O(N B^2) per layer. Batch norm sees h = W X (X = x^{l-1}) only
  through its centred part H_c = W X_c, X_c = X G, whose rows are i.i.d. N(0, K_c), K_c = X_c^T X_c / N:
  the forward pass draws H_c alone. Backward: given (X, H_c), W = H_c X_c^+ + W' (I - P) with W' a fresh
  i.i.d. N(0, 1/N) matrix and P the projection onto the columns of X_c (Gaussian conditioning of each row
  of W on the linear constraint w^T X_c = h_c^T). Hence W^T delta = X_c^{+T} H_c^T delta + (I - P) W'^T delta,
  and W'^T delta has i.i.d. rows N(0, delta^T delta / N): no N x N matrix is ever formed. Since the rest
  of the network depends on W^l only through H_c^l, this is exact, layer by layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..core.activations import Activation, parse_activation
from ..core.batchnorm import batch_norm_forward
from ..core.device import Normals, configure_torch, default_device, generator
from ..core.progress import progress_bar
from .networks import (
    _CACHE_BYTES,
    _PROGRESS_FLOPS,
    SAMPLERS,
    _batched_inputs,
    _gram_preactivations,
    centred_factor,
    chunk_budget,
    gram_of_rows,
)


@dataclass(frozen=True)
class GradientRun:
    """Forward Grams ``grams[:, l]`` = (1/N) x^{lT} x^l (l = 0..L) and gradient Grams ``gradients[:, l]``.

    ``gradients[:, l]`` = (1/N) delta^{lT} delta^l with delta^l = dL/dh^l for l = 1..L, and
    ``gradients[:, 0]`` = the Gram of dL/dx^0. All (M, L + 1, B, B) float64 CPU tensors.
    """

    grams: torch.Tensor
    gradients: torch.Tensor

    def squared_norms(self) -> np.ndarray:
        """||delta^l||_F^2 / N = tr Pi^l, shape (M, L + 1)."""
        return self.gradients.diagonal(0, -2, -1).sum(-1).numpy()

    def weight_gradient_norms(self) -> np.ndarray:
        """||dL/dW^l||_F^2 / N^2 = <Pi^l, (1/N) x^{l-1 T} x^{l-1}>, l = 1..L: shape (M, L).

        dL/dW^l = delta^l x^{l-1 T}, so ||dL/dW^l||_F^2 = tr(delta^T delta x^T x) without any N x N matrix.
        """
        return (self.gradients[:, 1:] * self.grams[:, :-1]).sum((-2, -1)).numpy()


def batch_norm_backward(z: torch.Tensor, s: torch.Tensor, grad_z: torch.Tensor, dim: int = -1,
                        inplace: bool = False) -> torch.Tensor:
    """dL/dh from dL/dz for (z, s) = :func:`~bnsym.core.batchnorm.batch_norm_forward` (h): (grad_z - mean(grad_z)
    - z mean(grad_z z)) / s, means along the batch axis ``dim`` (per neuron); what torch autograd computes through
    that forward, in place. ``inplace``: overwrite grad_z with the result (no new tensor)."""
    correlation = torch.linalg.vecdot(grad_z, z, dim=dim).unsqueeze(dim) / z.shape[dim]
    mean = grad_z.mean(dim, keepdim=True)
    centred = grad_z.sub_(mean) if inplace else grad_z - mean
    return centred.addcmul_(z, correlation, value=-1).div_(s)


def conditional_transpose_product(x: torch.Tensor, h: torch.Tensor, inverse_root: torch.Tensor, delta: torch.Tensor,
                                  delta_gram: torch.Tensor, normals: Normals,
                                  robust: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A draw of W^T delta given X = x and H_c = W X G, W ~ N(0, 1/N) i.i.d.: exact, O(N B^2).

    W^T delta = X K_c^+ (H_c^T delta - X^T Y) / N + Y,  K_c = G X^T X G / N = (F F^T)^+,
    and Y = W'^T delta has i.i.d. rows N(0, delta^T delta / N) (a centred Gram: rows of delta sum to 0).
    ``inverse_root`` F and ``delta_gram`` = delta^T delta / N are passed in because the caller has them.
    x, h, delta and the result are stored neurons last, (M, B, N), i.e. transposed.
    Returns the draw and whether the factor of delta_gram was exact (see :class:`CentredFactor`).
    """
    factor = centred_factor(delta_gram, robust)
    y = factor.root @ normals(x.shape[0], factor.root.shape[-1], x.shape[-1], dtype=x.dtype)
    coefficients = inverse_root @ (inverse_root.mT @ (h @ delta.mT - x @ y.mT)) / x.shape[-1]
    return y.add_(coefficients.mT @ x), factor.exact.all()  # (torch.baddbmm is twice as slow on the CPU)


def _chunk_run(x: torch.Tensor, depth: int, eps: float, activation: Activation, sampler: str,
               gen: torch.Generator, normals: Normals, robust: bool, bar,
               store: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward then backward pass of one chunk of networks: (forward Grams, gradient Grams, exact).

    Activations are stored neurons last, (M, B, N). ``exact`` (a device scalar) is False where a Cholesky
    factor of the "gram" sampler failed. ``store`` (the "gram" sampler), a (3 L + 1, >= M, B, N) tensor, holds
    x^0..x^L, z^1..z^L and H_c^1..H_c^L; one store serves every chunk of a run, since on the CPU each fresh page
    of memory costs a page fault, and re-allocating the stored activations chunk after chunk cost a third of
    the run.
    """
    m, n, b = x.shape

    def slot(index: int) -> torch.Tensor | None:
        return None if store is None else store[index, :m]

    x = x.mT.contiguous() if store is None else slot(0).copy_(x.mT)
    xs, grams, saved = [x], [gram_of_rows(x)], []
    exact = torch.ones((), dtype=torch.bool, device=x.device)
    for layer in range(depth):
        if sampler == "weights":
            w = torch.randn(m, n, n, generator=gen, device=x.device, dtype=x.dtype) / math.sqrt(n)
            h, memo = x @ w.mT, w
        else:
            h, factor = _gram_preactivations(x, normals, robust, out=slot(2 * depth + 1 + layer))
            exact = exact & factor.exact.all()
            memo = (h, factor.inverse_root)
        # the Gram sampler draws G h, already centred
        z, s = batch_norm_forward(h, eps, -2, centre=sampler != "gram", out=slot(depth + 1 + layer))
        saved.append((z, s, memo))
        x = activation.torch(z) if store is None else slot(layer + 1).copy_(activation.torch(z))
        xs.append(x)
        grams.append(gram_of_rows(x))
        bar.update(1)
    if sampler == "weights":  # dL/dx^L = g
        grad_x = torch.randn(m, n, b, generator=gen, device=x.device, dtype=x.dtype).mT
    else:
        grad_x = normals(m, b, n, dtype=x.dtype)
    gradients = [None] * (depth + 1)
    for layer in range(depth, 0, -1):
        z, s, memo = saved[layer - 1]
        # grad_x is a fresh tensor of this pass: multiply and back-propagate through batch norm in place
        delta = batch_norm_backward(z, s, grad_x.mul_(activation.torch_derivative(z)), dim=-2, inplace=True)
        gradients[layer] = gram_of_rows(delta)
        if sampler == "weights":
            grad_x = delta @ memo
        else:
            grad_x, ok = conditional_transpose_product(xs[layer - 1], *memo, delta, gradients[layer], normals, robust)
            exact = exact & ok
        bar.update(1)
    gradients[0] = gram_of_rows(grad_x)
    return torch.stack(grams, 1), torch.stack(gradients, 1), exact


def simulate_gradients(
    phi: str | Activation,
    inputs: np.ndarray | torch.Tensor,
    depth: int,
    eps: float = 0.0,
    n_networks: int | None = None,
    seed: int = 0,
    sampler: str = "gram",
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float64,
    chunk: int | None = None,
    progress: bool | None = None,
) -> GradientRun:
    """Forward and backward passes of M random batch-normalised networks (see the module docstring).

    Arguments as :func:`bnsym.sim.simulate_forward`; ``sampler`` is "gram" (exact conditional
    sampling, the default) or "weights" (explicit weights); ``chunk`` networks are simulated at a time
    (default: keep the stored activations, and for "weights" the stored W, within :func:`chunk_budget`; for
    "gram" on the CPU also keep one chunk's (B, N) tensor within 2 MB, so that its many passes stay in cache:
    about 20% faster).
    """
    configure_torch()
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; choose from {SAMPLERS}")
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    device = device or default_device()
    activation = parse_activation(phi)
    x = _batched_inputs(inputs, n_networks, device, dtype)
    m, n, b = x.shape
    per_network = (depth * x.element_size() * (n * n if sampler == "weights" else 0)
                   + 4 * depth * n * b * x.element_size())
    if chunk is None:
        chunk = max(1, chunk_budget(device) // per_network)
        if sampler == "gram" and torch.device(device).type == "cpu":  # memory-bound passes: keep them in cache
            chunk = min(chunk, max(1, _CACHE_BYTES // (n * b * x.element_size())))
    flops = 2 * m * depth * n * b * (n if sampler == "weights" else 4 * b)
    if progress is None:
        progress = flops > _PROGRESS_FLOPS

    def run(robust: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        gen, normals = generator(seed, device), Normals(seed, device)
        grams, gradients, exact = [], [], torch.ones((), dtype=torch.bool, device=device)
        store = (torch.empty(3 * depth + 1, min(chunk, m), b, n, dtype=dtype, device=device)
                 if sampler == "gram" else None)
        with progress_bar(total=2 * depth * math.ceil(m / chunk), desc=f"forward+backward ({sampler})",
                          show=progress) as bar:
            for part in x.split(chunk):
                g, p, ok = _chunk_run(part, depth, eps, activation, sampler, gen, normals, robust, bar, store)
                grams.append(g)
                gradients.append(p)
                exact = exact & ok
        return torch.cat(grams), torch.cat(gradients), exact

    grams, gradients, exact = run(robust=n < b - 1)  # N < B - 1: G K G is singular, Cholesky cannot succeed
    if not bool(exact):  # the run's one host synchronisation; rank-deficient Grams are rare
        grams, gradients, _ = run(robust=True)
    return GradientRun(grams.to("cpu", torch.float64), gradients.to("cpu", torch.float64))


def per_layer_growth(run: GradientRun, first: int, last: int) -> np.ndarray:
    """Ratios tr Pi^{l-1} / tr Pi^l for layers l = last, ..., first + 1 of each network: shape (M, last - first).

    Their mean over networks estimates lambda_G without the downward (Jensen) bias of log-slope fits. For
    B = 4 (and B = 5) each ratio is a mean over neurons of terms with a factor B / r^2, r^2 ~ mu chi^2_{B-1},
    whose variance is infinite (E[chi_3^-4] = E[chi_4^-4] = infinity): report the median with the mean.
    """
    norms = run.squared_norms()
    return norms[:, first:last] / norms[:, first + 1:last + 1]

