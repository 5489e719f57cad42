"""The BN-NTK of a data set: the neural tangent kernel of the BN-NNGP's network (:mod:`bnsym.nngp`), over a data
set cut into batches.

The network is the BN-NNGP's, [Dense, BN, phi] * depth with f = v . x^L / sqrt(N) (weight variance 1, no bias,
eps = 0), every W^l and v trained in the NTK parametrisation; the training points, and test points among
themselves, are batched as :func:`bnsym.nngp.batch_layout` does. For phi positive-homogeneous of degree 1, 2 or 3
the blocks come from the Laplace tangent route (:func:`ntk_blocks_laplace`), as tasks here or on a Dask cluster
(:mod:`bnsym.nngp.tasks`, as the prior's); otherwise from ``_blocks``: within a batch :func:`bnsym.arch.ntk`,
between two batches :func:`bnsym.arch.ntk_cross` on their joint input Gram.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from ..arch.graph import Sampling
from ..arch.network import check_sampling
from ..arch.ntk import ntk_route
from ..core.activations import Activation, parse_activation
from ..core.layers import Activation as Layer
from ..core.layers import BatchNorm, Dense, repeat
from ..core.progress import progress_bar
from ..core.validation import (
    check_activation,
    check_batch_size,
    check_covariance,
    check_whole_number,
)
from ..meanfield.backward import rate_closed_form, rate_spherical
from .prior import (
    MAX_MEMORY,
    BatchedPrior,
    _check_depth,
    _check_inputs,
    batch_layout,
    batched_kernels,
    input_covariance,
    task_blocks,
)

MAX_DEPTH = 10**4
MIN_SPAN = 3  # dimensions each batch's centred inputs must span for the eps = 0 BN-NTK to be finite (check_spans)
MAX_GROWTH = 1e300  # lambda_G^depth above this leaves float64 (max 1.8e308) no room for the NTK's sums (check_cost)
MAX_LAPLACE_MAPS = 10**6  # depth x blocks of Laplace layer maps: ~0.01 s of CPU each at B = 32, 0.03 s at B = 8
MAX_SAMPLED_MAPS = 10**5  # the same for the sampled route at 2^16 samples (points x replicates): ~0.4 s each, B = 8
DEFAULT_SAMPLES = 2**16  # the default points x replicates, the unit of MAX_SAMPLED_MAPS


def check_spans(batches: np.ndarray) -> None:
    """Every batch (k, B, d) of inputs, centred over the batch, spans at least ``MIN_SPAN`` dimensions (numpy's
    ``matrix_rank``). At eps = 0 the first BN divides by the batch's pre-activation scale s(w), s^2 = w^T S w with
    S the batch's input covariance, of rank r, and w ~ N(0, I_d) a neuron's weights: its Jacobian scales as 1 / s,
    so the first layer's tangent term is E[c(w / |w|) / s^2], finite iff r >= 3 (E[1 / chi^2_r] = 1 / (r - 2)).
    At r = 2 it is infinite (the Laplace route grows by a constant per doubling of its nodes, finite networks'
    per-neuron terms have a 1 / t tail); at r = 1, BN(w x) = sign(w) x / s(x) has zero gradient almost surely, and
    Price's theorem sees the step at w = 0 as a delta (the Laplace route grows in proportion to its nodes). At r = 3
    the tangent's integrand has the endpoint factor (1 - x)^(-1/2), which the Laplace rule takes into its weights
    (``bnsym.meanfield.crossbatch._laplace_rule``; B = 16, two batches of 3 features, depth 2: mean diagonal
    3.349953, 3.3500348, 3.3500354 at 12, 24, 48 nodes, where a rule blind to it converged as 1 / nodes)."""
    centred = batches - batches.mean(1, keepdims=True)
    spans = np.linalg.matrix_rank(centred)
    if spans.min() < MIN_SPAN:
        batch = int(np.argmin(spans))
        raise ValueError(f"the BN-NTK at eps = 0 needs each batch's centred inputs to span at least {MIN_SPAN} "
                         f"dimensions, but batch {batch} spans {spans[batch]} (n_features = {batches.shape[-1]}): "
                         "the first BN's Jacobian grows as 1 / (the pre-activations' scale), whose mean square over "
                         "the weights diverges below 3 dimensions; use inputs with at least 3 independent features")


def check_cost(phi: Activation, batch: int, depth: int, blocks: int, samples: int | None) -> None:
    """Refuse, before any work, an NTK that float64 cannot hold or that would run for hours. Theta grows per layer
    by the gradient rate lambda_G(phi, B) (Thms 7, 8: the tangent is pushed through the same Jacobians whose
    squared norm grows by lambda_G): relu at B = 8, depth 1000, max Theta 2.3e252 against 1.788^1000 = 2.5e252;
    lambda_G^depth must stay below ``MAX_GROWTH`` (relu: depth <= 614 at B = 4, 1223 at B = 8, 1640 at B = 32).
    The work is depth x ``blocks`` layer maps of a B x B block, at most ``MAX_LAPLACE_MAPS`` on the Laplace route
    (``samples`` None) and ``MAX_SAMPLED_MAPS`` at ``DEFAULT_SAMPLES`` (scaled by ``samples``) on the sampled one."""
    rate = (rate_closed_form(phi, batch) if phi.is_homogeneous else rate_spherical(phi, batch)).value
    if rate > 1 and depth * math.log(rate) > math.log(MAX_GROWTH):
        raise ValueError(f"the BN-NTK at depth {depth} is beyond float64: it grows per layer by the gradient rate "
                         f"lambda_G = {rate:.4g} ({phi}, B = {batch}), and lambda_G^depth = "
                         f"1e{depth * math.log10(rate):.0f} (float64 ends at 1.8e308); use depth <= "
                         f"{int(math.log(MAX_GROWTH) / math.log(rate))}")
    limit = MAX_LAPLACE_MAPS if samples is None else MAX_SAMPLED_MAPS * DEFAULT_SAMPLES // samples
    if depth * blocks > limit:
        each = "0.01-0.03 s (Laplace route, B = 32 and 8)" if samples is None else (
            f"about 0.4 s at B = 8 and {DEFAULT_SAMPLES} samples (sampled route), in proportion to the samples")
        raise ValueError(f"the BN-NTK of {blocks} blocks (each batch and each pair of batches) at depth {depth} is "
                         f"{depth * blocks:.3g} layer maps of a B x B block, each {each} of one CPU core, above "
                         f"{limit:.3g}: use fewer points or layers, a larger batch size (fewer blocks)")


def _blocks(phi: Activation, batches: np.ndarray, pairs: np.ndarray, depth: int, sampling: Sampling,
            first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The NTK blocks of k batches (k, B, d): within each batch (k, B, B) and across the pairs (P, 2) of batch
    indices (P, B, B), as :func:`bnsym.nngp.block_prior` returns the prior's. Sampled: one tangent propagation per
    block (the joint 2B x 2B one for a pair), each passing :func:`bnsym.arch.ntk.ntk_route`'s error check. Within
    blocks only from batch ``first`` on (the earlier ones, not needed, are left 0)."""
    k, batch, dim = batches.shape
    net = repeat([Dense(), BatchNorm(), Layer(phi)], depth)
    grams = [check_covariance(x @ x.T / dim) for x in batches]
    within, cross = np.zeros((k, batch, batch)), np.zeros((len(pairs), batch, batch))
    jobs = [(i, None) for i in range(first, k)] + [(p, tuple(pair)) for p, pair in enumerate(pairs)]
    for index, pair in progress_bar(jobs, desc="BN-NTK blocks", leave=False):
        if pair is None:
            within[index] = ntk_route(net, grams[index], sampling).value
        else:
            x = np.concatenate([batches[pair[0]], batches[pair[1]]])
            joint = ntk_route(net, x @ x.T / dim, sampling, (batch, batch)).value
            cross[index] = joint[:batch, batch:]
    return within, cross


def ntk_blocks_laplace(phi: str | Activation, batches: np.ndarray, pairs: np.ndarray, depth: int,
                       nodes: int | None = None, device: torch.device | str | None = None, *, client: object = None,
                       chunk_batches: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The NTK of the BN-NNGP's network (this module's) for k batches (k, B, d): within-batch (k, B, B) and cross
    (P, B, B) blocks for the batch pairs ``pairs`` (P, 2), as :func:`bnsym.nngp.block_prior` for the kernel.

    Each layer maps every block's kernel and tangent kernel in one pass through the cross-batch Laplace integral and
    its derivative (:mod:`bnsym.meanfield.ntk_laplace`, Price's theorem: Theta' = K' + dV_12 / dSigma_12 [Theta_12]),
    ``nodes`` per axis (None: ``bnsym.meanfield.ntk_laplace.tangent_nodes``, and in the first layer, whose
    raw-input Gram has spread eigenvalues, twice that and at least :func:`~bnsym.nngp.first_layer_nodes`: 1000
    digits at B = 32, depth 10, 6e-9 of the NTK's largest entry against 24 nodes everywhere, where 8 in the first
    layer leave 4e-7). The blocks are computed as tasks, here or on ``client``, with the same bits either way
    (:mod:`bnsym.nngp.tasks`, ``chunk_batches`` as there).
    phi positive-homogeneous of degree 1, 2 or 3 (relu, leaky relu, relu^2, ...).
    """
    depth = _check_depth(depth)
    return task_blocks(phi, batches, pairs, [depth], nodes, device, client, chunk_batches, tangent=True)[depth]


def bn_ntk(phi: str | Activation, X: np.ndarray, depth: int, batch_size: int, X_test: np.ndarray | None = None,
           points: int = 2**12, replicates: int = 16, seed: int = 0, nodes: int | None = None,
           device: torch.device | str | None = None, *, client: object = None, out: str | os.PathLike | None = None,
           max_memory: int = MAX_MEMORY, chunk_batches: int | None = None) -> BatchedPrior:
    """The NTK Theta of the training copies of ``X`` (n, d) cut into batches of ``batch_size`` (``train``, rows
    ``train_rows``), or with ``X_test`` between the test points, batched among themselves, and the training copies
    (``cross`` (t, m), ``test_diagonal`` (t,)); batching as :func:`bnsym.nngp.bn_nngp_priors`, the same
    :class:`~bnsym.nngp.BatchedPrior`. Theta does not see the inputs' scale (eps = 0, no bias). Positive-homogeneous
    phi of degree 1, 2 or 3 (relu, relu^2, ...) take the Laplace route (:func:`ntk_blocks_laplace`, ``nodes``
    per axis, ~1e-8 by default), computed as tasks here or on ``client`` (``device``, ``out``, ``max_memory`` and
    ``chunk_batches`` as for :func:`bnsym.nngp.bn_nngp_priors`); any other phi is sampled here, block by block
    (``_blocks``: seconds per block at B = 8; ``points``, ``replicates``, ``seed``, routes and errors as for
    :func:`bnsym.arch.ntk_cross`). Every batch's centred inputs must span at least 3 dimensions (``check_spans``:
    below that the eps = 0 NTK is infinite, so inputs need at least 3 features). A depth whose NTK float64 cannot
    hold (it grows as lambda_G^depth) and work of hours are refused before any is done (``check_cost``)."""
    batch = check_batch_size(batch_size)
    activation = check_activation(parse_activation(phi), batch, slope=True)
    depth = check_whole_number(depth, "depth", 1, MAX_DEPTH, "the number of Dense-BN-phi layers")
    sampling = check_sampling(points, replicates, seed)
    layout = batch_layout(X, batch, X_test)
    laplace = activation.degree in (1, 2, 3)
    check_cost(activation, batch, depth, len(layout.batches) + len(layout.pairs),
               None if laplace else sampling.points * sampling.replicates)
    check_spans(layout.batches)
    if laplace:
        return batched_kernels(activation, X, [depth], batch, X_test, nodes, device, test_covariance=False,
                               client=client, out=out, max_memory=max_memory, chunk_batches=chunk_batches,
                               tangent=True)[depth]
    given = [name for name, value in (("nodes", nodes), ("device", device), ("client", client), ("out", out),
                                      ("chunk_batches", chunk_batches)) if value is not None]
    if given:
        raise ValueError(f"{', '.join(given)} apply to the Laplace route (phi positive-homogeneous of degree 1, 2 or "
                         f"3); {activation} is sampled here, block by block")
    first = 0 if X_test is None else len(layout.rows)  # with test points the training blocks are not used
    return layout.assemble(*_blocks(activation, layout.batches, layout.pairs, depth, sampling, first))


def arccos_ntk(phi: str | Activation, X1: np.ndarray, X2: np.ndarray | None, depth: int) -> np.ndarray:
    """The NTK of the same network without batch norm, [Dense, phi] * depth: Jacot et al.'s recursion Theta^l =
    K^l + Theta^(l-1) o E[phi'(h) phi'(h)^T] (arc-cosine kernels for positive-homogeneous phi), which
    :func:`bnsym.arch.ntk` takes exactly where no BN couples the inputs, on the joint Gram of X1 and X2. Returns
    Theta between the rows of X1 and X2 (X2 = None: X1 with itself)."""
    activation = check_activation(parse_activation(phi), slope=True)
    depth = check_whole_number(depth, "depth", 1, MAX_DEPTH, "the number of Dense-phi layers")
    X1 = _check_inputs(X1, "X1")
    both = X1 if X2 is None else np.concatenate([X1, _check_inputs(X2, "X2", X1.shape[1])])
    theta = ntk_route(repeat([Dense(), Layer(activation)], depth), input_covariance(both, both), check_sampling(
        2**12, 16, 0)).value
    return theta if X2 is None else theta[: len(X1), len(X1):]
