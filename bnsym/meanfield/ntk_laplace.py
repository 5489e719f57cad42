"""The tangent kernel of BN -> phi layers by the Laplace route: Price's theorem on the cross-batch kernel.

One layer h -> x = phi(BN(h)) per neuron (train-mode BN over each batch, eps = 0, phi positive-homogeneous of
integer degree alpha), h = (h_1, h_2) ~ N(0, Sigma) the joint pre-activations of two batches, each normalised on
its own. Its tangent map is T(Theta) = E[J Theta J^T], J = diag(J_1, J_2) the Jacobian of x in h
(:mod:`bnsym.arch.ntk`). The cross block of the layer's kernel, V_12(Sigma) = E[F(h_1) F(h_2)^T], has by Price's
theorem (d E[g(h)] / d Sigma_(1i, 2j) = E[d^2 g / dh_1i dh_2j] for an entry off the diagonal blocks)

    d V_12 / d Sigma_12 [Theta_12] = E[J_1 Theta_12 J_2^T] = T(Theta)_12,

so the tangent block is the derivative of the two-dimensional Laplace integral (*) of
:mod:`bnsym.meanfield.crossbatch` in its cross covariance, in the direction Theta_12, on the same Gauss-Jacobi
nodes: the derivative, written out alongside the integral (``_cross_block``), gives the next kernel and the tangent
block together (``benchmarks/ntk_prior_speed.py`` times it against the kernel alone). Within a batch the same holds
for the batch paired with an identical copy of itself (Sigma_12 = Sigma_11, the one-sided derivative at that
edge of the PSD cone; Price's ladder gives J_n' finite at c = 1, :mod:`bnsym.meanfield.dual`). The adjoint,
Pi -> E[J_1^T Pi J_2], is the reverse-mode gradient of tr(Pi^T V_12) in Sigma_12 (autograd through the same
integral): Yang's (2020) per-entry backward recursion at the same accuracy (:func:`ntk_per_entry`), an independent
check of the written-out derivative.

Network: [Dense, BN, phi] * L, f = v . x^L / sqrt(n), every Dense without bias (its weight variance drops out:
BN at eps = 0 is scale invariant, T_(cK)(c Theta) = T_K(Theta)). Theta^(h_1) = K^(h_1), Theta^(h_(l+1)) =
K^(x_l) + T_l(Theta^(h_l)), and the NTK is Theta^(h_(L+1)).
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.activations import Activation
from ..core.validation import batch_scales, check_batch_size
from .crossbatch import _chunked, _reduce


def tangent_nodes(batch_size: int) -> int:
    """Gauss-Jacobi nodes per axis of the Laplace tangent map: 8 for B >= 32, 16 for B >= 16, 64 below. The
    tangent's integrand is the kernel's times (1 - x)^(-1) (1 - y)^(-1/2) (the BN Jacobian's 1 / s^2 at the
    endpoints), taken into the rule's weights (``_chunked(..., tangent=True)``): a rule blind to it converged as
    1 / nodes at B = 4 (depth 2: 1.0 % off at 64 nodes, three times its stated error). Depth 3, largest error
    against 4x the nodes relative to the NTK's largest entry: 1e-8 at B = 4 (rounding: J_phi' has a square-root
    branch at c = 1), 3e-15 at B = 8, 3e-15 at B = 16, 1e-14 at B = 32."""
    batch = check_batch_size(batch_size)
    return 8 if batch >= 32 else 16 if batch >= 16 else 64


def _prepare(sigma: torch.Tensor, batch1: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(Omega, the reduction's per-input scale, the rescaling D) of a stack of joint covariances: each batch at
    unit scale (BN at eps = 0 is blind to it), Omega in the bases of 1^perp of each batch."""
    scales = torch.as_tensor(batch_scales(sigma.diagonal(0, -2, -1).cpu().numpy(), batch1), device=sigma.device)
    flat = sigma * scales[:, :, None] * scales[:, None, :]
    return _reduce(flat, batch1), flat.diagonal(0, -2, -1).mean(-1), scales[:, :, None] * scales[:, None, :]


def _off_diagonal(theta: torch.Tensor, batch1: int) -> torch.Tensor:
    """Theta with its two diagonal blocks zeroed: the direction Theta_12 (and its transpose)."""
    out = theta.clone()
    out[..., :batch1, :batch1] = 0.0
    out[..., batch1:, batch1:] = 0.0
    return out


def tangent_cross_block(phi: Activation, sigma: torch.Tensor, theta: torch.Tensor, batch1: int,
                        nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(V_12(Sigma), T(Theta)_12) for a stack of joint covariances ``sigma`` and tangent kernels ``theta``
    (n, B1 + B2, B1 + B2): the cross block of the layer's kernel and its derivative in Sigma_12 along Theta_12
    (module docstring), both (n, B1, B2), on one Laplace rule with ``nodes`` Gauss-Jacobi nodes per axis. Only
    Theta's cross block is read."""
    omega, scale, rescale = _prepare(sigma, batch1)
    direction = _reduce(theta * rescale, batch1)[..., :batch1 - 1, batch1 - 1:]  # E_1^T Theta_12 E_2, rescaled
    return _chunked(phi, omega, batch1, nodes, scale, direction, tangent=True)


def _recorded_cross_block(phi: Activation, sigma: torch.Tensor, batch1: int,
                          nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """V_12(Sigma) on the rule of :func:`tangent_cross_block`, recorded for reverse mode: (V_12 (n, B1, B2), the
    leaf S (n, B1 + B2, B1 + B2) at zero whose off-diagonal blocks are added to Sigma's)."""
    omega, scale, rescale = _prepare(sigma, batch1)
    with torch.enable_grad():
        cross = omega.new_zeros(sigma.shape).requires_grad_(True)
        joint = omega + _reduce(_off_diagonal(cross, batch1) * rescale, batch1)
        return _chunked(phi, joint, batch1, nodes, scale, tangent=True), cross


def _pull_back(value: torch.Tensor, cross: torch.Tensor, pi: torch.Tensor, batch1: int) -> torch.Tensor:
    """T*(Pi) = E[J_1^T Pi J_2] (n, B1, B2): the gradient of tr(Pi^T V_12) in Sigma_12, each entry counted in both
    off-diagonal blocks (it is one covariance), the recorded graph kept for the next cotangent."""
    (gradient,) = torch.autograd.grad(value, cross, pi, retain_graph=True)
    return gradient[..., :batch1, batch1:] + gradient[..., batch1:, :batch1].mT


def ntk_per_entry(phi: Activation, sigma: torch.Tensor, depth: int, entries: list[tuple[int, int]],
                  nodes: int) -> torch.Tensor:
    """The NTK entries (a, b) of [Dense, BN, phi] * ``depth`` for one batch with input Gram ``sigma`` (B, B) by Yang's
    (2020) route on this module's integrals: one backward recursion per entry, Theta_ab = sum_l tr(Pi_l K^(x_l)) with
    Pi_L = (e_a e_b^T + e_b e_a^T) / 2, Pi_(l-1) = T_l*(Pi_l) and K^(x_0) = Sigma0 (the adjoint of the forward
    propagation, :func:`ntk_blocks`, B (B + 1) / 2 times its work for every entry). The forward kernels and each
    layer's recorded Laplace integral are set up once and shared by the entries."""
    batch = sigma.shape[-1]
    kernels, layers = [sigma], []
    for _ in range(depth):
        kernel = kernels[-1]
        value, cross = _recorded_cross_block(phi, _joint(kernel, kernel, kernel)[None], batch, nodes)
        layers.append((value, cross))
        kernels.append(((value + value.mT) / 2)[0].detach())
    out = []
    for a, b in entries:
        pi = torch.zeros_like(sigma)
        pi[a, b] += 0.5
        pi[b, a] += 0.5
        total = (pi * kernels[-1]).sum()
        for (value, cross), kernel in zip(reversed(layers), reversed(kernels[:-1])):
            pi = _pull_back(value, cross, pi[None], batch)[0]
            total = total + (pi * kernel).sum()
        out.append(total)
    return torch.stack(out) if out else sigma.new_zeros(0)


def _joint(first: torch.Tensor, cross: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.cat([first, cross], -1), torch.cat([cross.mT, second], -1)], -2)


def within_step(phi: Activation, state: torch.Tensor, nodes: int) -> torch.Tensor:
    """One [BN, phi, Dense] step of k batches' own blocks: ``state`` (2, k, B, B), the Dense inputs' kernel K and
    tangent kernel Theta, to (K^x, Theta^h' = K^x + T(Theta)), each batch's block as its cross block with an
    identical copy of itself, all in one tensor op."""
    kernel, theta = state
    value, slope = tangent_cross_block(phi, _joint(kernel, kernel, kernel), _joint(theta, theta, theta),
                                       kernel.shape[-1], nodes)
    kernel = (value + value.mT) / 2
    return torch.stack([kernel, kernel + (slope + slope.mT) / 2])


def cross_step(phi: Activation, left: torch.Tensor, cross: torch.Tensor, right: torch.Tensor,
               nodes: int) -> torch.Tensor:
    """The same step for P pairs of batches: their cross blocks ``cross`` (2, P, B, B) (K and Theta), given each
    pair's own blocks ``left`` and ``right`` (2, P, B, B), to the next layer's (2, P, B, B)."""
    value, slope = tangent_cross_block(phi, _joint(left[0], cross[0], right[0]), _joint(left[1], cross[1], right[1]),
                                       left.shape[-1], nodes)
    return torch.stack([value, value + slope])


def ntk_layer(phi: Activation, within: torch.Tensor, cross: torch.Tensor, pairs: torch.Tensor,
              nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`within_step` and :func:`cross_step` of k batches ``within`` (2, k, B, B) and P pairs ``cross``
    (2, P, B, B) of them, ``pairs`` (P, 2)."""
    if len(pairs):
        cross = cross_step(phi, within[:, pairs[:, 0]], cross, within[:, pairs[:, 1]], nodes)
    return within_step(phi, within, nodes), cross


def ntk_blocks(phi: Activation, within: torch.Tensor, cross: torch.Tensor, pairs: np.ndarray, depth: int,
               nodes: int, first: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The NTK blocks of [Dense, BN, phi] * ``depth`` -> readout for input Grams ``within`` (k, B, B) and
    ``cross`` (P, B, B) (the first Dense's K = Theta), within (k, B, B) and cross (P, B, B); ``first`` nodes in
    the first layer (default ``nodes``)."""
    pairs = torch.as_tensor(np.asarray(pairs, dtype=np.int64).reshape(-1, 2), device=within.device)
    within, cross = torch.stack([within, within]), torch.stack([cross, cross])
    for layer in range(depth):
        within, cross = ntk_layer(phi, within, cross, pairs, first if layer == 0 and first else nodes)
    return within[1], cross[1]


def ntk_joint(phi: Activation, sigma: np.ndarray, depth: int, batch: int, nodes: int) -> np.ndarray:
    """The joint NTK (m, m) of [Dense, BN, phi] * ``depth`` for the joint input Gram ``sigma`` (m, m) of m / ``batch``
    batches of size ``batch``, each normalised on its own: every batch's block and every pair's, one tensor op;
    ``nodes`` per axis, twice that in the first layer (an input Gram's eigenvalues may be spread)."""
    k = len(sigma) // batch
    blocks = torch.as_tensor(sigma).reshape(k, batch, k, batch).transpose(1, 2)
    pairs = np.array([(i, j) for i in range(k) for j in range(i + 1, k)], dtype=np.int64).reshape(-1, 2)
    within, cross = ntk_blocks(phi, blocks[range(k), range(k)], blocks[pairs[:, 0], pairs[:, 1]], pairs, depth, nodes,
                               2 * nodes)
    full = torch.zeros_like(blocks)
    full[range(k), range(k)] = within
    full[pairs[:, 0], pairs[:, 1]] = cross
    full[pairs[:, 1], pairs[:, 0]] = cross.mT
    return full.transpose(1, 2).reshape(len(sigma), len(sigma)).numpy()
