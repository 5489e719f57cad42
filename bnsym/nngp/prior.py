"""The BN-NNGP: exact Bayesian inference with an infinitely wide batch-normalised network.

**Premises.** Inputs x_1, ..., x_n in R^d are cut into batches of B consecutive rows. A network of depth L
computes, for each batch separately (batch norm in training mode, eps = 0, no affine map),

    h^1 = W^1 x / sqrt(d),   x^l = phi(BN(h^l)),   h^{l+1} = W^{l+1} x^l / sqrt(N),   f = v^T x^L / sqrt(N),

with i.i.d. standard normal W^l and v (sigma_w^2 = 1, no bias; with eps = 0 batch norm is scale invariant,
so sigma_w^2 changes nothing but the scale of f). As the width N grows the outputs f over all n inputs become a
centred Gaussian process (Yang et al. 2019, Sec. 1 and App. H) with covariance K^L, where K^0 = X X^T / d and,
for two batches a and b, the joint 2B x 2B block of K^l is the cross-batch layer map applied to that of
K^{l-1} (``bnsym.meanfield.crossbatch.cross_batch_kernel_laplace``; its diagonal blocks are
:func:`bnsym.bn_kernel`'s).

**Which points share a batch.** The prior depends on it: a train-mode BN network's output for x depends on
the rest of x's batch. Here training points are batched in the order given. When B does not divide n, the last
batch is completed by wrapping around to the first training points, whose outputs in that batch are observed
too (their labels are known), so every batch has exactly B points. Test points are batched among themselves,
in the order given; a short last test batch is completed with training inputs whose outputs are not observed
(they only enter the batch statistics). A test point in a batch with no observed training point is linked to
the data only through cross-batch blocks, which tend to c*_cross 11^T with depth at the rate lambda_x^2
(the cross-batch chapter): deep BN priors give such points less and less informative posteriors.

The GP estimators are in :mod:`bnsym.nngp.estimators`. The prior's pairs of batches are computed as tasks
(:mod:`bnsym.nngp.tasks`), here or on a Dask cluster (``client=``), on the CPU or a GPU (``device=``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch

from ..core.activations import Activation, parse_activation
from ..core.validation import (
    check_activation,
    check_batch_size,
    check_finite_result,
    check_flag,
    check_real_array,
    check_whole_number,
)
from ..meanfield.kernels import gaussian_kernel
from ..meanfield.ntk_laplace import tangent_nodes
from .tasks import allocate, check_chunk_batches, on_gpu, run_blocks

MAX_DEPTH = 10**4  # one cross-batch layer map per layer
MAX_LAYER_MAPS = 10**7  # depth x blocks: 0.4-2.5 ms of one CPU core each (check_layer_maps), hours in all
MAX_NODES = 1024  # Gauss-Jacobi nodes per axis: nodes^2 points per entry of every block
MAX_MEMORY = 2**31  # bytes of prior matrices held in memory; more go to memory-mapped files
MAX_ROWS = 2**27  # training or test points: their indices, and far more their covariances, are held at once


def _homogeneous(phi: str | Activation, batch_size: int | None = None) -> Activation:
    """phi, positive-homogeneous and usable on the BN sphere of ``batch_size`` (on N(0, 1) without one)."""
    phi = parse_activation(phi)
    if not phi.is_homogeneous:
        raise ValueError(f"the BN-NNGP needs a positive-homogeneous phi (relu, relu^alpha, leaky_relu, identity), "
                         f"whose cross-batch kernel has an exact Laplace route; got {phi}")
    return check_activation(phi, batch_size)


def _check_depth(depth: object) -> int:
    return check_whole_number(depth, "depth", 1, MAX_DEPTH, "the number of BN-phi layers, one layer map each")


def _check_depths(depths: object) -> list[int]:
    """Sorted distinct depths, each a whole number >= 1 (at least one)."""
    if isinstance(depths, torch.Tensor):
        depths = depths.tolist()
    if isinstance(depths, (str, bytes)) or not isinstance(depths, Iterable):
        raise ValueError(f"depths must be a list of depths, got {depths!r:.80}")
    checked = sorted({_check_depth(depth) for depth in np.ravel(np.asarray(depths, dtype=object)).tolist()})
    if not checked:
        raise ValueError("depths must name at least one depth")
    return checked


def check_layer_maps(depth: int, blocks: int, batch_size: int) -> None:
    """Refuse, before any work, a prior of hours: ``depth`` x ``blocks`` (each batch and each pair of batches)
    cross-batch layer maps above ``MAX_LAYER_MAPS``. Measured on standardised digits (CPU time, torch on one thread,
    default nodes, 500-6000 maps): 0.4-0.6 ms per map at B = 4, 1.0-1.5 ms at B = 8, 1.5-2.5 ms at B = 32 (more
    where a task holds few blocks: 1.9 ms at B = 4 with 3 blocks), so the limit is 1 to 7 hours of one core; all
    1797 digits at B = 32 and depth 50 are 8.3e4 maps. The maps do not reach a float64 fixed point (relu, B = 4, 8,
    32: entries still change by 1e-16 after 400 layers), so no depth can be skipped exactly."""
    if depth * blocks > MAX_LAYER_MAPS:
        each = {4: "0.4-0.6 ms", 8: "1.0-1.5 ms", 32: "1.5-2.5 ms"}.get(batch_size, "0.4-2.5 ms (B = 4 to 32)")
        most = MAX_LAYER_MAPS // blocks
        raise ValueError(f"the BN-NNGP prior of {blocks} blocks (each batch and each pair of batches, B = "
                         f"{batch_size}) at depth {depth} is {depth * blocks:.3g} cross-batch layer maps, each about "
                         f"{each} of one CPU core, above {MAX_LAYER_MAPS:.3g}: "
                         + (f"use depth <= {most} for these points, or" if most else "use")
                         + " fewer points or a larger batch size (fewer blocks)")


def _check_nodes(nodes: object) -> int | None:
    if nodes is None:
        return None
    return check_whole_number(nodes, "nodes", 2, MAX_NODES, "Gauss-Jacobi nodes per axis, nodes^2 points per entry")


def _check_inputs(X: object, name: str, n_features: int | None = None) -> np.ndarray:
    """Inputs (n, d), real and finite; d = ``n_features`` where given."""
    X = check_real_array(X, f"{name} (n_samples, n_features)", 2)
    if X.ndim != 2 or (n_features is not None and X.shape[1] != n_features):
        raise ValueError(f"{name} must be a matrix (n_samples, n_features)"
                         + (f" with n_features = {n_features}" if n_features is not None else "")
                         + f", got shape {X.shape}")
    return X


def fill_batches(n: int, batch_size: int) -> np.ndarray:
    """Row indices (k, B) of k = ceil(n / B) batches: 0..n-1 in order, the last batch wrapping around to 0, 1, ..."""
    n = check_whole_number(n, "n", 1, MAX_ROWS, "the row indices are held at once")
    batch_size = check_batch_size(batch_size)
    k = -(-n // batch_size)
    return np.arange(k * batch_size).reshape(k, batch_size) % n


def input_covariance(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """K^0 = x_i . x_j / d for rows of ``left`` and ``right`` (the first layer's pre-activation covariance)."""
    left = _check_inputs(left, "left")
    return left @ _check_inputs(right, "right", left.shape[1]).T / left.shape[-1]


def default_nodes(batch_size: int) -> int:
    """Gauss-Jacobi nodes per axis of the cross-batch integral: 6 for B >= 16, 24 for smaller batches, whose endpoint
    factors (1 - x)^((B - 3) / 2) are rougher (about 1e-7 at B = 4). The error of 6 nodes at B = 32 depends on how
    far apart a batch's centred eigenvalues are: about 1e-10 of the kernel when they are near their mean (Wishart),
    but on standardised digits (spread over two to three decades) 3e-5 of the prior's largest entry after the first
    layer and 1e-5 after a second; 8 nodes give 2e-6, 10 give 1e-7, 12 give 7e-9 there, at (nodes / 6)^2 the cost."""
    return 6 if check_batch_size(batch_size) >= 16 else 24


def first_layer_nodes(batch_size: int, n_features: int) -> int:
    """Default nodes for the first layer, whose input Gram X X^T / d has rank at most d. Below B - 1 the Laplace
    rule takes the rank into its endpoint weights, but the few nonzero eigenvalues of raw inputs are spread far
    apart, which the smooth part of the integrand feels: relu, B = 32, 128 standardised inputs with d = 10, the
    largest error of the prior relative to its largest entry is 3e-3 (diabetes) and 2e-2 (ten digits pixels) with 6
    nodes, 3e-6 and 1e-4 with 12, 5e-12 and 5e-9 with 24 (iris, d = 4, B = 8: 3e-6 with 24). Deeper layers see
    full-rank post-activation Grams with eigenvalues near their mean."""
    n_features = check_whole_number(n_features, "n_features", 1, 2**53)
    return 24 if n_features < check_batch_size(batch_size) - 1 else default_nodes(batch_size)


def block_prior(phi: str | Activation, batches: np.ndarray, pairs: np.ndarray, depths: Sequence[int],
                nodes: int | None = None, device: torch.device | str | None = None, *, client: object = None,
                chunk_batches: int | None = None) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """K^l blocks of k batches (k, B, d) at each l in ``depths``: within-batch (k, B, B) and cross (P, B, B) blocks.

    ``pairs`` (P, 2) holds batch indices (i, j), i != j. Each layer maps the joint 2B x 2B covariance of every
    pair with the cross-batch map (Laplace route, ``nodes`` per axis; None: :func:`first_layer_nodes`, then
    :func:`default_nodes`); the within-batch blocks are the cross blocks of each batch with an identical copy of
    itself. The work is cut into tasks of ``chunk_batches`` batches (None: :func:`bnsym.nngp.tasks.check_chunk_batches`)
    and run here or on ``client`` (:mod:`bnsym.nngp.tasks`: the same bits either way).
    """
    return task_blocks(phi, batches, pairs, depths, nodes, device, client, chunk_batches, tangent=False)


def task_blocks(phi: str | Activation, batches: np.ndarray, pairs: np.ndarray, depths: Sequence[int],
                nodes: int | None, device: torch.device | str | None, client: object, chunk_batches: int | None,
                tangent: bool) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """:func:`block_prior`'s blocks of the prior K^l, or with ``tangent`` of the NTK Theta^l
    (:func:`bnsym.nngp.ntk.bn_ntk`)."""
    batches, pairs, depths, phi, first, nodes = _check_blocks(phi, batches, pairs, depths, nodes, tangent)
    chunk = check_chunk_batches(chunk_batches, batches.shape[1], len(batches), on_gpu(device, client))
    within = np.zeros((len(depths), *batches.shape[:2], batches.shape[1]))
    cross = np.zeros((len(depths), len(pairs), batches.shape[1], batches.shape[1]))

    def on_within(rows: np.ndarray, blocks: dict[int, np.ndarray]) -> None:
        for i, depth in enumerate(depths):
            within[i, rows] = blocks[depth]

    def on_cross(rows: np.ndarray, blocks: dict[int, np.ndarray]) -> None:
        for i, depth in enumerate(depths):
            cross[i, rows] = blocks[depth]

    run_blocks(phi, batches, pairs, depths, first, nodes, device, client, chunk, on_within, on_cross,
               desc=_description(tangent, batches, pairs), tangent=tangent)
    return {depth: (within[i], cross[i]) for i, depth in enumerate(depths)}


def _check_blocks(phi: str | Activation, batches: np.ndarray, pairs: np.ndarray, depths: Sequence[int],
                  nodes: int | None,
                  tangent: bool = False) -> tuple[np.ndarray, np.ndarray, list[int], Activation, int, int]:
    """:func:`block_prior`'s arguments checked: batches (k, B, d), pairs (P, 2) of distinct batch indices, depths,
    phi, and the nodes of the first and later layers (with ``tangent``, the NTK's: phi of degree 1, 2 or 3, and
    :func:`~bnsym.meanfield.ntk_laplace.tangent_nodes`, twice that and at least :func:`first_layer_nodes` in the
    first layer)."""
    batches = check_real_array(batches, "batches (k, B, d)", 3)
    if batches.ndim != 3:
        raise ValueError(f"batches must have shape (k, B, d), got {batches.shape}")
    batch = check_batch_size(batches.shape[1])
    phi, depths, nodes = _homogeneous(phi, batch), _check_depths(depths), _check_nodes(nodes)
    pairs = np.reshape(check_real_array(pairs, "pairs (P, 2)") if np.size(pairs) else np.zeros(0), (-1, 2))
    if not (np.all(pairs == np.round(pairs)) and np.all((0 <= pairs) & (pairs < len(batches)))
            and np.all(pairs[:, 0] != pairs[:, 1])):
        raise ValueError(f"pairs must hold pairs (i, j), i != j, of batch indices 0..{len(batches) - 1}")
    if tangent and phi.degree not in (1, 2, 3):
        raise ValueError(f"the Laplace tangent map needs phi of degree 1, 2 or 3 (its slope's arc-cosine kernel in "
                         f"closed form), got {phi} of degree {phi.degree}")
    if not tangent:  # the NTK's cost is checked by bnsym.nngp.ntk.check_cost, with its own limits
        check_layer_maps(max(depths), len(batches) + len(pairs), batch)
    later = tangent_nodes(batch) if tangent else default_nodes(batch)
    first = nodes or max(first_layer_nodes(batch, batches.shape[-1]), 2 * later if tangent else later)
    # each batch is normalised on its own, so each may be rescaled on its own: a power of 2 brings its max |x| near
    # 1, exactly (a batch 1e-300 times another would otherwise underflow when the data set is scaled as one)
    batches = batches * np.ldexp(1.0, -np.frexp(np.abs(batches).max((1, 2)))[1])[:, None, None]
    return batches, pairs.astype(int), depths, phi, first, nodes or later


@dataclass(frozen=True)
class BatchedPrior:
    """The prior covariance over the training copies, and between test points and them.

    ``train`` (m, m) over the m = k B training copies (rows ``train_rows`` of the training set); with test points,
    ``cross`` (t, m) between the t test points and the training copies, ``test_diagonal`` (t,) their variances and,
    where asked for, ``test`` (t, t) their covariance. Any of the matrices may be a np.memmap.
    """

    train_rows: np.ndarray
    train: np.ndarray | None = None
    cross: np.ndarray | None = None
    test_diagonal: np.ndarray | None = None
    test: np.ndarray | None = None


@dataclass(frozen=True)
class BatchLayout:
    """How :func:`bn_nngp_priors` and :func:`bnsym.nngp.ntk.bn_ntk` batch a data set (the module docstring): ``batches``
    (k + kt, B, d) the k training batches (rows ``rows`` (k, B) of X) then the kt test batches, inputs scaled by a
    power of 2 (blind to it with eps = 0); ``pairs`` (P, 2) the blocks to compute, every pair of training batches
    without test points, every (test batch, training batch) pair with them; ``n_test`` the test points."""

    batches: np.ndarray
    rows: np.ndarray
    pairs: np.ndarray
    n_test: int | None

    def assemble(self, within: np.ndarray, cross: np.ndarray) -> BatchedPrior:
        """The :class:`BatchedPrior` of the blocks ``within`` (k + kt, B, B) and ``cross`` (P, B, B)."""
        k, batch = self.rows.shape
        if self.n_test is None:
            full = np.zeros((k, batch, k, batch))
            full[np.arange(k), :, np.arange(k), :] = within
            full[self.pairs[:, 0], :, self.pairs[:, 1], :] = cross
            full[self.pairs[:, 1], :, self.pairs[:, 0], :] = cross.transpose(0, 2, 1)
            return BatchedPrior(self.rows.ravel(), train=full.reshape(k * batch, k * batch))
        kt = len(self.batches) - k
        cross = cross.reshape(kt, k, batch, batch).transpose(0, 2, 1, 3).reshape(kt * batch, k * batch)
        diagonal = np.diagonal(within[k:], axis1=-2, axis2=-1).ravel()
        return BatchedPrior(self.rows.ravel(), cross=cross[: self.n_test], test_diagonal=diagonal[: self.n_test])


def batch_layout(X: np.ndarray, batch_size: int, X_test: np.ndarray | None = None,
                 test_covariance: bool = False, depth: int | None = None) -> BatchLayout:
    """The batches and blocks of ``X`` (and ``X_test``) at ``batch_size``, validated (:class:`BatchLayout`); with
    ``test_covariance``, every pair of test batches too (after the (test, training) pairs). With ``depth``, the
    BN-NNGP prior's layer maps are checked first (:func:`check_layer_maps`), before the pairs are listed."""
    batch = check_batch_size(batch_size)
    X = _check_inputs(X, "X")
    X_test = None if X_test is None else _check_inputs(X_test, "X_test", X.shape[1])
    test_covariance = check_flag(test_covariance, "test_covariance")
    k = -(-len(X) // batch)
    # batch norm (eps = 0) makes the prior blind to the inputs' scale: a power of 2 brings max |x| near 1, exactly
    # (ldexp: 2^-exponent itself overflows for subnormal inputs, max |x| < 2^-1022)
    exponent = math.frexp(max(np.abs(X).max(), 0.0 if X_test is None else np.abs(X_test).max()))[1]
    X, X_test = np.ldexp(X, -exponent), None if X_test is None else np.ldexp(X_test, -exponent)
    rows = fill_batches(len(X), batch)
    kt = 0 if X_test is None else -(-len(X_test) // batch)
    if depth is not None:
        n_pairs = k * (k - 1) // 2 if X_test is None else kt * k + (kt * (kt - 1) // 2 if test_covariance else 0)
        check_layer_maps(depth, k + kt + n_pairs, batch)
    if X_test is None:
        pairs = np.array([(i, j) for i in range(k) for j in range(i + 1, k)], dtype=int).reshape(-1, 2)
        return BatchLayout(X[rows], rows, pairs, None)
    filler = np.arange(kt * batch - len(X_test)) % len(X)
    test_batches = np.concatenate([X_test, X[filler]]).reshape(kt, batch, -1)
    pairs = [(k + a, i) for a in range(kt) for i in range(k)]
    pairs += [(k + a, k + b) for a in range(kt) for b in range(a + 1, kt)] if test_covariance else []
    return BatchLayout(np.concatenate([X[rows], test_batches]), rows, np.array(pairs, dtype=int), len(X_test))


def bn_nngp_priors(phi: str | Activation, X: np.ndarray, depths: Sequence[int], batch_size: int,
                   X_test: np.ndarray | None = None, nodes: int | None = None,
                   device: torch.device | str | None = None, *, test_covariance: bool = False,
                   client: object = None, out: str | os.PathLike | None = None, max_memory: int = MAX_MEMORY,
                   chunk_batches: int | None = None) -> dict[int, BatchedPrior]:
    """The BN-NNGP prior K^l at each depth l of ``depths``: of the training rows of ``X`` (without ``X_test``), or
    between ``X_test`` and them (and among the test points with ``test_covariance``). One recursion serves every
    depth.

    Batching as the module docstring says. Without test points: all pairs of training batches. With them: all
    (test batch, training batch) pairs (the training block is not recomputed), and with ``test_covariance`` all
    pairs of test batches. The pairs are computed in tasks (:mod:`bnsym.nngp.tasks`) here or on ``client`` (None:
    here; a ``distributed.Client``; a scheduler address; True: a LocalCluster, as ``bnsym.core.cluster.connect``),
    with the same result bit for bit. Matrices larger in all than ``max_memory`` bytes, or any with ``out`` (a
    folder), are memory-mapped files (``out/<kind>-depth<l>.npy``, or unnamed temporary files). Work of hours, more
    than ``MAX_LAYER_MAPS`` layer maps at the deepest depth, is refused before any is done (:func:`check_layer_maps`).
    """
    return batched_kernels(phi, X, depths, batch_size, X_test, nodes, device, test_covariance=test_covariance,
                           client=client, out=out, max_memory=max_memory, chunk_batches=chunk_batches, tangent=False)


def batched_kernels(phi: str | Activation, X: np.ndarray, depths: Sequence[int], batch_size: int,
                    X_test: np.ndarray | None, nodes: int | None, device: torch.device | str | None, *,
                    test_covariance: bool, client: object, out: str | os.PathLike | None, max_memory: int,
                    chunk_batches: int | None, tangent: bool) -> dict[int, BatchedPrior]:
    """:func:`bn_nngp_priors` of the prior K^l, or with ``tangent`` of the NTK Theta^l
    (:func:`bnsym.nngp.ntk.bn_ntk`)."""
    depths = _check_depths(depths)
    layout = batch_layout(X, batch_size, X_test, test_covariance, None if tangent else max(depths))
    max_memory = check_whole_number(max_memory, "max_memory", 0, 2**62, "bytes of kernel matrices held in memory")
    rows, pairs = layout.rows, layout.pairs
    k, batch = rows.shape
    chunk = check_chunk_batches(chunk_batches, batch, len(layout.batches), on_gpu(device, client))
    if layout.n_test is None:
        arrays = allocate({f"train-depth{d}": (k * batch, k * batch) for d in depths}, out, max_memory)
        train = {d: arrays[f"train-depth{d}"].reshape(k, batch, k, batch) for d in depths}

        def on_within(index: np.ndarray, blocks: dict[int, np.ndarray]) -> None:
            for d in depths:
                train[d][index, :, index, :] = blocks[d]

        def on_cross(index: np.ndarray, blocks: dict[int, np.ndarray]) -> None:
            left, right = pairs[index, 0], pairs[index, 1]
            for d in depths:
                train[d][left, :, right, :] = blocks[d]
                train[d][right, :, left, :] = blocks[d].transpose(0, 2, 1)

        _run(phi, layout.batches, pairs, depths, nodes, device, client, chunk, on_within, on_cross, tangent)
        return {d: BatchedPrior(rows.ravel(), train=arrays[f"train-depth{d}"]) for d in depths}
    t, kt = layout.n_test, len(layout.batches) - k
    shapes = {f"cross-depth{d}": (kt * batch, k * batch) for d in depths}
    shapes.update({f"test-depth{d}": (kt * batch, kt * batch) for d in depths if test_covariance})
    arrays = allocate(shapes, out, max_memory)
    diagonal = {d: np.zeros((kt, batch)) for d in depths}
    cross = {d: arrays[f"cross-depth{d}"].reshape(kt, batch, k, batch) for d in depths}
    test = {d: arrays[f"test-depth{d}"].reshape(kt, batch, kt, batch) for d in depths if test_covariance}

    def on_test_within(index: np.ndarray, blocks: dict[int, np.ndarray]) -> None:
        keep = index >= k
        for d in depths:
            diagonal[d][index[keep] - k] = np.diagonal(blocks[d][keep], axis1=-2, axis2=-1)
            if test_covariance:
                test[d][index[keep] - k, :, index[keep] - k, :] = blocks[d][keep]

    def on_test_cross(index: np.ndarray, blocks: dict[int, np.ndarray]) -> None:
        left, right = pairs[index, 0] - k, pairs[index, 1]
        train_side = right < k
        for d in depths:
            cross[d][left[train_side], :, right[train_side], :] = blocks[d][train_side]
            if test_covariance:
                among, other = ~train_side, right[~train_side] - k
                test[d][left[among], :, other, :] = blocks[d][among]
                test[d][other, :, left[among], :] = blocks[d][among].transpose(0, 2, 1)

    _run(phi, layout.batches, pairs, depths, nodes, device, client, chunk, on_test_within, on_test_cross, tangent)
    return {d: BatchedPrior(rows.ravel(), cross=arrays[f"cross-depth{d}"][:t], test_diagonal=diagonal[d].ravel()[:t],
                            test=arrays[f"test-depth{d}"][:t, :t] if test_covariance else None) for d in depths}


def _run(phi: str | Activation, batches: np.ndarray, pairs: np.ndarray, depths: list[int], nodes: int | None,
         device: torch.device | str | None, client: object, chunk: int, on_within, on_cross, tangent: bool) -> None:
    """:func:`bnsym.nngp.tasks.run_blocks` on checked arguments (as :func:`block_prior` checks them)."""
    batches, pairs, depths, phi, first, nodes = _check_blocks(phi, batches, pairs, depths, nodes, tangent)
    run_blocks(phi, batches, pairs, depths, first, nodes, device, client, chunk, on_within, on_cross,
               desc=_description(tangent, batches, pairs), tangent=tangent)


def _description(tangent: bool, batches: np.ndarray, pairs: np.ndarray) -> str:
    return f"{'BN-NTK' if tangent else 'BN-NNGP prior'} ({len(batches)} batches, {len(pairs)} pairs)"


def bn_nngp_prior(phi: str | Activation, X: np.ndarray, depth: int, batch_size: int,
                  X_test: np.ndarray | None = None, nodes: int | None = None,
                  device: torch.device | str | None = None, **options: object) -> BatchedPrior:
    """:func:`bn_nngp_priors` at one depth (``options``: its keyword-only arguments)."""
    depth = _check_depth(depth)
    return bn_nngp_priors(phi, X, [depth], batch_size, X_test, nodes, device, **options)[depth]


def arccos_nngp_kernel(phi: str | Activation, X1: np.ndarray, X2: np.ndarray | None, depth: int) -> np.ndarray:
    """The NNGP kernel of the same network without batch norm: K^l = V_phi(K^{l-1}) (arc-cosine kernels, Prop E.10).

    Returns K^L between the rows of X1 and X2 (X2 = None: X1 with itself).
    """
    phi, depth = _homogeneous(phi), _check_depth(depth)
    X1 = _check_inputs(X1, "X1")
    both = X1 if X2 is None else np.concatenate([X1, _check_inputs(X2, "X2", X1.shape[1])])
    kernel = input_covariance(both, both)
    with np.errstate(all="ignore"):
        for _ in range(depth):
            kernel = gaussian_kernel(phi, kernel)
    kernel = check_finite_result(kernel, f"the kernel of these inputs at depth {depth}")
    return kernel if X2 is None else kernel[: len(X1), len(X1):]
