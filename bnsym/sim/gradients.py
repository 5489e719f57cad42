"""Monte Carlo back-propagation through wide random batch-normalized networks.

Same networks as :mod:`bnsym.sim.networks` (h^l = W^l x^{l-1}, x^l = phi(BN(h^l)), W ~ N(0, 1/N)),
with the loss L = <g, x^L>, g_{ab} ~ N(0, 1) i.i.d. per network. Back-propagation computes

    delta^l = dL/dh^l = BN'(h^l)^T [phi'(z^l) * dL/dx^l],     dL/dx^{l-1} = W^{l T} delta^l,

and records the gradient Grams Pi^l = (1/N) delta^{l T} delta^l (B x B).

Two samplers with the same joint law of all Grams:

* "weights": explicit W^l (O(N^2 B) per layer; the W of a chunk of networks are kept for the backward pass);
* "gram": exact conditional sampling, O(N B^2) per layer. Forward: given X = x^{l-1}, the rows of
  H = W X are i.i.d. N(0, X^T X / N). Backward: given (X, H), W = H X^+ + W' (I - P_X) with W' a fresh
  i.i.d. N(0, 1/N) matrix and P_X the projection onto the columns of X (Gaussian conditioning of each row
  of W on the linear constraint w^T X = h^T). Hence W^T delta = X^{+T} H^T delta + (I - P_X) W'^T delta,
  and W'^T delta has i.i.d. rows N(0, delta^T delta / N): no N x N matrix is ever formed. Since the rest
  of the network depends on W^l only through H^l, this is exact, layer by layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..core.activations import Activation, parse_activation
from ..core.progress import progress_bar
from .device import configure_torch, default_device, generator
from .networks import SAMPLERS, _batched_inputs, gram, gram_root

_CHUNK_BYTES = 512 * 2**20  # memory kept per chunk of networks for the backward pass
_PROGRESS_FLOPS = 2e10


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


def batch_norm_forward(h: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """z = (h - mean h) / s and s = sqrt(var h + eps) along the batch (last) axis."""
    centred = h - h.mean(-1, keepdim=True)
    s = torch.sqrt(centred.square().mean(-1, keepdim=True) + eps)
    return centred / s, s


def batch_norm_backward(z: torch.Tensor, s: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
    """dL/dh from dL/dz for z = BN(h): (grad_z - mean(grad_z) - z mean(grad_z z)) / s (per neuron)."""
    return (grad_z - grad_z.mean(-1, keepdim=True) - z * (grad_z * z).mean(-1, keepdim=True)) / s


def conditional_transpose_product(x: torch.Tensor, h: torch.Tensor, delta: torch.Tensor, k_pinv: torch.Tensor,
                                  delta_gram: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A draw of W^T delta given X = x and H = W X, W ~ N(0, 1/N) i.i.d.: exact, O(N B^2).

    W^T delta = X K^+ (H^T delta) / N + (I - P_X) Y,  K = X^T X / N,  P_X Y = X K^+ X^T Y / N,
    and Y = W'^T delta has i.i.d. rows N(0, delta^T delta / N). ``k_pinv`` = K^+ and ``delta_gram`` =
    delta^T delta / N are passed in because the caller has them already.
    """
    root, _ = gram_root(delta_gram)
    y = torch.randn(*delta.shape[:-1], root.shape[-1], generator=gen, device=x.device, dtype=x.dtype) @ root.mT
    return x @ (k_pinv @ ((h.mT @ delta) - x.mT @ y)) / x.shape[-2] + y


def _chunk_run(x: torch.Tensor, depth: int, eps: float, activation: Activation, gen: torch.Generator,
               sampler: str, bar) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward then backward pass of one chunk of networks; returns (forward Grams, gradient Grams)."""
    m, n, b = x.shape
    xs, grams, saved = [x], [gram(x)], []
    for layer in range(depth):
        if sampler == "weights":
            w = torch.randn(m, n, n, generator=gen, device=x.device, dtype=x.dtype) / math.sqrt(n)
            h, memo = w @ x, w
        else:
            root, k_pinv = gram_root(grams[-1])
            h = torch.randn(m, n, root.shape[-1], generator=gen, device=x.device, dtype=x.dtype) @ root.mT
            memo = (h, k_pinv)
        z, s = batch_norm_forward(h, eps)
        saved.append((z, s, memo))
        x = activation.torch(z)
        xs.append(x)
        grams.append(gram(x))
        bar.update(1)
    grad_x = torch.randn(m, n, b, generator=gen, device=x.device, dtype=x.dtype)  # dL/dx^L = g
    gradients = [None] * (depth + 1)
    for layer in range(depth, 0, -1):
        z, s, memo = saved[layer - 1]
        delta = batch_norm_backward(z, s, grad_x * activation.torch_derivative(z))
        gradients[layer] = gram(delta)
        if sampler == "weights":
            grad_x = memo.mT @ delta
        else:
            grad_x = conditional_transpose_product(xs[layer - 1], memo[0], delta, memo[1], gradients[layer], gen)
        bar.update(1)
    gradients[0] = gram(grad_x)
    return torch.stack(grams, 1), torch.stack(gradients, 1)


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
    """Forward and backward passes of M random batch-normalized networks (see the module docstring).

    Arguments as :func:`bnsym.sim.simulate_forward`; ``sampler`` is "gram" (exact conditional
    sampling, the default) or "weights" (explicit weights); ``chunk`` networks are simulated at a time
    (default: keep the stored activations, and for "weights" the stored W, under 512 MB).
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
    chunk = chunk or max(1, _CHUNK_BYTES // per_network)
    flops = 2 * m * depth * n * b * (n if sampler == "weights" else 4 * b)
    if progress is None:
        progress = flops > _PROGRESS_FLOPS
    gen = generator(seed, device)
    grams, gradients = [], []
    with progress_bar(total=2 * depth * math.ceil(m / chunk), desc=f"forward+backward ({sampler})",
                      show=progress) as bar:
        for part in x.split(chunk):
            g, p = _chunk_run(part, depth, eps, activation, gen, sampler, bar)
            grams.append(g)
            gradients.append(p)
    return GradientRun(torch.cat(grams).to("cpu", torch.float64), torch.cat(gradients).to("cpu", torch.float64))


def per_layer_growth(run: GradientRun, first: int, last: int) -> np.ndarray:
    """Ratios tr Pi^{l-1} / tr Pi^l for layers l = last, ..., first + 1 of each network: shape (M, last - first).

    Their mean over networks estimates lambda_G without the downward (Jensen) bias of log-slope fits. For
    B = 4 (and B = 5) each ratio is a mean over neurons of terms with a factor B / r^2, r^2 ~ mu chi^2_{B-1},
    whose variance is infinite (E[chi_3^-4] = E[chi_4^-4] = infinity): report the median with the mean.
    """
    norms = run.squared_norms()
    return norms[:, first:last] / norms[:, first + 1:last + 1]

