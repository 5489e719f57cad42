"""Batch norm, the premise every chapter shares: the one forward of theory and simulator.

    BN(h) = (h - mean h) / s,   s = sqrt(mean (h - mean h)^2 + eps),

means along the batch axis ``dim`` (per neuron, feature or channel along the other axes), the variance biased
(1/B), no affine map (gamma = 1, beta = 0: the theory folds any gain and shift into phi). On centred y (y = G h)
it is the theory's n_eps(y) = y / sqrt(mean y^2 + eps) = sqrt(B) y / sqrt(y^T y + B eps).

Every network of :mod:`bnsym.sim` and the training harness normalise through :func:`batch_norm`, and the
quasi-Monte Carlo route of the theory (:mod:`bnsym.meanfield.qmc`) integrates the same map. It is plain torch
ops, so torch autograd differentiates it (higher derivatives and ``torch.func`` included); the simulators' own
back-propagation of it is :func:`bnsym.sim.gradients.batch_norm_backward`. The layouts in use: (M, N, B)
(networks, neurons, batch; ``dim=-1``), neurons last (M, B, N) or rows (B, d) (``dim=-2``); layer norm is the same
map along the feature axis.
"""

from __future__ import annotations

from typing import Sequence

from .lazy import lazy_module

torch = lazy_module("torch")


def batch_norm_forward(h: torch.Tensor, eps: float = 0.0, dim: int = -1, *, centre: bool = True,
                       reference: torch.Tensor | None = None,
                       out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(BN(h), s) for one batch along the axis ``dim``: s = sqrt(mean (h - mean h)^2 + eps), keeping ``dim``.

    ``centre=False`` skips the centring: for h already centred (the Gram sampler draws G h; the theory's y = G h),
    where it saves a pass, or for the uncentred normalisation h / sqrt(mean h^2 + eps).
    ``reference``: evaluation mode (population statistics): the mean and s are those of ``reference`` (say the
    training set's pre-activations; same shape as h except along ``dim``), so an output does not depend on the
    other examples of h. ``out``: where to write BN(h) (not differentiable); where it has h's shape and its own
    memory it also holds the squares on the way (no temporary of h's size).
    """
    source = h if reference is None else reference
    if centre:
        mean = source.mean(dim, keepdim=True)
        source = source - mean
        h = source if reference is None else h - mean
    scratch = out is not None and out.shape == source.shape and (
        out.untyped_storage().data_ptr() not in (source.untyped_storage().data_ptr(), h.untyped_storage().data_ptr()))
    square = torch.square(source, out=out if scratch else None)
    s = torch.sqrt(square.mean(dim, keepdim=True) + eps)
    return torch.div(h, s, out=out), s


def batch_norm(h: torch.Tensor, eps: float = 0.0, sizes: Sequence[int] | None = None, dim: int = -1, *,
               centre: bool = True, reference: torch.Tensor | None = None) -> torch.Tensor:
    """BN(h) = (h - mean(h)) / sqrt(var(h) + eps) along the batch axis ``dim`` (default last), var biased (1/B).

    ``sizes`` splits the batch axis into consecutive batches normalised separately (several batches through one
    network, Yang et al. 2019 App. H; ghost batch norm); default one batch. ``centre`` and ``reference`` (population
    statistics, evaluation mode) as in :func:`batch_norm_forward`.
    """
    if sizes is None:
        return batch_norm_forward(h, eps, dim, centre=centre, reference=reference)[0]
    sizes = [int(size) for size in sizes]
    if reference is not None:
        raise ValueError("reference (population statistics) normalises one batch: pass sizes=None")
    if sum(sizes) != h.shape[dim]:
        raise ValueError(f"sizes {sizes} must add up to the batch axis' length {h.shape[dim]}")
    if len(set(sizes)) == 1:  # equal batches (ghost batch norm): one pass over a view with an axis per batch
        axis = dim % h.ndim
        parts = h.unflatten(axis, (len(sizes), sizes[0]))
        return batch_norm_forward(parts, eps, axis + 1, centre=centre)[0].flatten(axis, axis + 1)
    return torch.cat([batch_norm_forward(part, eps, dim, centre=centre)[0] for part in h.split(sizes, dim)], dim)
