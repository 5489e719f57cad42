"""Derivatives of the Laplace integrand's pieces that automatic differentiation gets wrong at the edges.

The tangent kernel of a BN layer is the derivative of its cross-batch kernel in the cross covariance (Price's
theorem, :mod:`bnsym.meanfield.ntk_laplace`): written out alongside the integral in
:func:`~bnsym.meanfield.crossbatch._cross_block` (forward), and taken by reverse-mode differentiation through it
(the adjoint). Two of its pieces need their derivative written out:

* the arc-cosine kernel J_n(c) at c = 1 (a batch paired with itself: the correlation of a coordinate with its copy
  is 1), where the chain rule through sqrt(1 - c^2) and acos(c) gives inf - inf, while Price's ladder (the
  derivation of :func:`~bnsym.meanfield.kernels.derive_arccos_kernel`) gives J_n' = n^2 c_(n-1) / c_n J_(n-1),
  finite on [-1, 1] for n >= 1;
* the symmetric eigendecomposition of a rank-deficient block, whose repeated zero eigenvalues make torch's
  1 / (lambda_j - lambda_i) infinite: a matrix function of a degenerate eigenspace does not depend on the basis
  chosen in it, so pairs with (nearly) equal eigenvalues contribute nothing and are masked.
"""

from __future__ import annotations

from typing import Callable

import torch

from .kernels import c_alpha

EDGE = 1e-12  # a correlation within this of +-1 is taken as +-1 in J' (:func:`snapped`)
GAP = 1e-10  # eigenvalues closer than this times the largest |eigenvalue| count as equal


def _gaps(values: torch.Tensor) -> torch.Tensor:
    """F_ij = 1 / (lambda_j - lambda_i), zero where the two are equal to GAP (the diagonal included)."""
    gap = values[..., None, :] - values[..., :, None]
    scale = values.abs().amax(-1, keepdim=True)[..., None].clamp(min=torch.finfo(values.dtype).tiny)
    small = gap.abs() <= GAP * scale
    return torch.where(small, 0.0, 1.0 / torch.where(small, 1.0, gap))


class _Eigh(torch.autograd.Function):
    """torch.linalg.eigh with degenerate pairs masked in its reverse-mode derivative (module docstring)."""

    @staticmethod
    def forward(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.linalg.eigh(a)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(*output)

    @staticmethod
    def backward(ctx, dvalues: torch.Tensor, dvectors: torch.Tensor) -> torch.Tensor:
        values, vectors = ctx.saved_tensors
        inner = _gaps(values) * (vectors.mT @ dvectors)
        inner = torch.diag_embed(dvalues) + (inner + inner.mT) / 2
        return vectors @ inner @ vectors.mT


def eigh(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues (ascending) and eigenvectors of symmetric ``a``, differentiable at repeated eigenvalues."""
    return _Eigh.apply(a)


def eigh_tangent(values: torch.Tensor, rotated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The derivatives of :func:`eigh`'s eigenpairs (values lambda, vectors U) along a symmetric direction dA, given
    in the eigenbasis, ``rotated`` R = U^T dA U: (d lambda = diag R, S = F o R), dU = U S, F_ij = 1 / (lambda_j -
    lambda_i), degenerate pairs masked."""
    return rotated.diagonal(0, -2, -1), _gaps(values) * rotated


def snapped(corr: torch.Tensor) -> torch.Tensor:
    """c clamped to [-1, 1] and set to +-1 within EDGE of it: J_(n-1) has a sqrt(1 -+ c) edge, which would turn the
    rounding of a correlation that is exactly 1 (a coordinate and its copy) into an error of sqrt(rounding)."""
    corr = corr.clamp(-1.0, 1.0)
    return torch.where(1 - corr.abs() <= EDGE, corr.sign(), corr)


def arccos_kernel_function(kernel: Callable[[torch.Tensor], torch.Tensor],
                           slope: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """J(c) on [-1, 1] (``c`` clamped there) with derivative ``slope`` (J'(c), by Price's ladder) in reverse mode."""

    class _Kernel(torch.autograd.Function):
        @staticmethod
        def forward(corr: torch.Tensor) -> torch.Tensor:
            return kernel(corr.clamp(-1.0, 1.0))

        @staticmethod
        def setup_context(ctx, inputs, output) -> None:
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
            return slope(snapped(ctx.saved_tensors[0])) * grad

    return _Kernel.apply


def ladder_factor(order: int) -> float:
    """n^2 c_(n-1) / c_n: J_n' = n^2 c_(n-1) / c_n J_(n-1) (Price's ladder on the normalised kernels)."""
    return float(order**2 * c_alpha(order - 1) / c_alpha(order))
