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


def _centre_both(k: torch.Tensor) -> torch.Tensor:
    """G K G for (..., B, B) matrices K, G = I - 11^T / B: K minus its row and column means plus its grand mean."""
    return k - k.mean(-1, keepdim=True) - k.mean(-2, keepdim=True) + k.mean((-2, -1), keepdim=True)


def _weights_chunk_run(x: torch.Tensor, depth: int, eps: float, activation: Activation, gen: torch.Generator,
                       bar) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward then backward pass of one chunk of networks with explicit weights (the W of the chunk are kept for
    the backward pass): (forward Grams, gradient Grams). Activations are stored neurons last, (M, B, N)."""
    m, n, b = x.shape
    x = x.mT.contiguous()
    grams, saved = [gram_of_rows(x)], []
    for _ in range(depth):
        w = torch.randn(m, n, n, generator=gen, device=x.device, dtype=x.dtype) / math.sqrt(n)
        z, s = batch_norm_forward(x @ w.mT, eps, -2)
        saved.append((z, s, w))
        x = activation.torch(z)
        grams.append(gram_of_rows(x))
        bar.update(1)
    grad_x = torch.randn(m, n, b, generator=gen, device=x.device, dtype=x.dtype).mT  # dL/dx^L = g
    gradients = [None] * (depth + 1)
    for layer in range(depth, 0, -1):
        z, s, w = saved[layer - 1]
        # grad_x is a fresh tensor of this pass: multiply and back-propagate through batch norm in place
        delta = batch_norm_backward(z, s, grad_x.mul_(activation.torch_derivative(z)), dim=-2, inplace=True)
        gradients[layer] = gram_of_rows(delta)
        grad_x = delta @ w
        bar.update(1)
    gradients[0] = gram_of_rows(grad_x)
    return torch.stack(grams, 1), torch.stack(gradients, 1)


def _activate_into(activation: Activation, z: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """phi(z) written into ``out``: relu in one pass without a temporary (clamp_min(z, 0), what torch.relu
    computes, with out=), any other phi through its tensor function."""
    if activation.name == "relu":
        return torch.clamp_min(z, 0.0, out=out)
    return out.copy_(activation.torch(z))


def _slope_into(activation: Activation, z: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """phi'(z), written into ``out`` for relu (the step z > 0 as floats, what its derivative computes), through
    the derivative's own tensor otherwise."""
    if activation.name == "relu":
        return torch.gt(z, 0.0, out=out)
    return activation.torch_derivative(z)


def _gram_workspace(depth: int, chunk: int, b: int, n: int, dtype: torch.dtype,
                    device: torch.device | str) -> dict[str, torch.Tensor]:
    """The buffers of a "gram" run, allocated once and shared by its chunks of networks (on the CPU each fresh page
    of memory costs a page fault: re-allocating them chunk after chunk cost a third of the run).

    ``x[l]`` (chunk, B, N) holds x^l and ``z[l - 1]`` BN(h^l). ``pair`` (chunk, 2B, N) serves every layer: the
    forward draws h^l into its first B rows; the backward keeps dL/dx^l in its last B and H_c^l in its first B, so
    that the two Grams it needs are one product. ``noise`` (chunk, B - 1, N) receives every layer's Z and Z'.
    """
    def empty(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, dtype=dtype, device=device)

    return {"x": empty(depth + 1, chunk, b, n), "z": empty(depth, chunk, b, n),
            "pair": empty(chunk, 2 * b, n), "noise": empty(chunk, b - 1, n)}


def _gram_backward(x: torch.Tensor, z: torch.Tensor, s: torch.Tensor, inverse_root: torch.Tensor,
                   pair: torch.Tensor, noise: torch.Tensor, activation: Activation, normals: Normals,
                   robust: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer back: dL/dx^l in ``pair``'s last B rows becomes a draw of dL/dx^{l-1} = W^T delta given X = x^{l-1}
    and H_c = W X G, W ~ N(0, 1/N) i.i.d. (exact, O(N B^2)), in place. Returns (the Gram of delta, whether its
    factor was exact).

    With M = dL/dz - z mean_b(z dL/dz) (per neuron), batch norm's backward is delta = G M / s, so the two products
    the draw needs come without delta itself, from one product (M/s) [H_c | M/s]^T (H_c = z s, written into
    ``pair``'s first B rows): Pi = delta^T delta / N = G (M/s)^T (M/s) G / N and H_c^T delta = H_c^T (M/s) G.
    Then, with Y = W'^T delta = Z' R'^T (R' R'^T = Pi, Z' (N, B-1) i.i.d. N(0, 1): rows i.i.d. N(0, Pi)) and
    K_c^+ = F F^T (``inverse_root`` F),

        W^T delta = X K_c^+ (H_c^T delta - X^T Y) / N + Y = Z' R'^T + X C,  C = F F^T (H_c^T delta - X^T Y) / N.

    Stored neurons last: ``x`` (X^T) and z are (M, B, N), ``pair`` (M, 2B, N); Z'^T is drawn into ``noise``
    (M, B - 1, N), kept in cache from layer to layer (drawing it next to X, for one product [R' | C^T] [Z'; X],
    wrote to memory far from the cache and cost more than the second product saves).
    """
    b, n = z.shape[-2], z.shape[-1]
    head, grad = pair[:, :b], pair[:, b:]
    grad.mul_(_slope_into(activation, z, head))  # dL/dz
    correlation = torch.mul(grad, z, out=head).mean(-2, keepdim=True)
    grad.addcmul_(z, correlation, value=-1).mul_(s.reciprocal())  # M / s (a product is faster than a quotient)
    torch.mul(z, s, out=head)  # H_c
    products = grad @ pair.mT  # [(M/s) H_c^T | (M/s)(M/s)^T]
    cross = products[..., :b].mT
    cross = cross - cross.mean(-1, keepdim=True)  # H_c^T delta = H_c^T (M/s) G
    delta_gram = _centre_both(products[..., b:] / n)
    factor = centred_factor(delta_gram, robust, inverse=False)
    normals(out=noise)
    coefficients = inverse_root @ (inverse_root.mT @ (cross - (x @ noise.mT) @ factor.root.mT)) / n
    torch.matmul(factor.root, noise, out=grad).baddbmm_(coefficients.mT, x)
    return delta_gram, factor.exact.all()


def _gram_chunk_run(x: torch.Tensor, depth: int, eps: float, activation: Activation, normals: Normals, robust: bool,
                    bar, work: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward then backward pass of one chunk of networks with the Gram sampler, in the buffers ``work`` of
    :func:`_gram_workspace`: (forward Grams, gradient Grams, exact), ``exact`` (a device scalar) False where a
    Cholesky factor failed."""
    m, n, b = x.shape
    xs, zs, pair, noise = work["x"][:, :m], work["z"][:, :m], work["pair"][:m], work["noise"][:m]
    xs[0].copy_(x.mT)
    grams, saved = [gram_of_rows(xs[0])], []
    exact = torch.ones((), dtype=torch.bool, device=x.device)
    for layer in range(depth):
        h, factor = _gram_preactivations(grams[-1], n, normals, robust, out=pair[:, :b], noise=noise)
        exact = exact & factor.exact.all()
        z, s = batch_norm_forward(h, eps, -2, centre=False, out=zs[layer])  # the sampler draws G h, already centred
        grams.append(gram_of_rows(_activate_into(activation, z, xs[layer + 1])))
        saved.append((s, factor.inverse_root))
        bar.update(1)
    grad = normals(out=pair[:, b:])  # dL/dx^L = g
    gradients = [None] * (depth + 1)
    for layer in range(depth, 0, -1):
        gradients[layer], ok = _gram_backward(xs[layer - 1], zs[layer - 1], *saved[layer - 1], pair, noise,
                                              activation, normals, robust)
        exact = exact & ok
        bar.update(1)
    gradients[0] = gram_of_rows(grad)
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
        work = _gram_workspace(depth, min(chunk, m), b, n, dtype, device) if sampler == "gram" else None
        with progress_bar(total=2 * depth * math.ceil(m / chunk), desc=f"forward+backward ({sampler})",
                          show=progress) as bar:
            for part in x.split(chunk):
                if sampler == "gram":
                    g, p, ok = _gram_chunk_run(part, depth, eps, activation, normals, robust, bar, work)
                    exact = exact & ok
                else:
                    g, p = _weights_chunk_run(part, depth, eps, activation, gen, bar)
                grams.append(g)
                gradients.append(p)
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

