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

The estimators follow scikit-learn's Gaussian processes: ``fit``, ``predict`` (``return_std`` or ``return_cov``),
``sample_y``, ``predict_proba`` (classifier), ``score``, ``log_marginal_likelihood()``, ``get_params``/``set_params``;
the posterior goes through a Cholesky factor (SciPy). The prior's pairs of batches are computed as tasks
(:mod:`bnsym.nngp.tasks`), here or on a Dask cluster (``client=``), on the CPU or a GPU (``device=``).
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, fields
from typing import Iterable, Sequence

import numpy as np
import torch
from scipy.linalg import LinAlgError, cho_factor, cho_solve, solve_triangular
from scipy.special import log_ndtr
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import Tags, check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ..core.activations import Activation, parse_activation
from ..core.validation import (
    ValueTypeError,
    check_activation,
    check_batch_size,
    check_device,
    check_finite_result,
    check_flag,
    check_memory,
    check_range,
    check_real_array,
    check_whole_number,
)
from ..meanfield.kernels import gaussian_kernel
from ..meanfield.ntk_laplace import tangent_nodes
from .tasks import allocate, check_chunk_batches, on_gpu, run_blocks

MAX_JITTER = 1e-4  # relative to the mean prior variance; beyond it the kernel is reported singular
MAX_DEPTH = 10**4  # one cross-batch layer map per layer
MAX_LAYER_MAPS = 10**7  # depth x blocks: 0.4-2.5 ms of one CPU core each (check_layer_maps), hours in all
MAX_NODES = 1024  # Gauss-Jacobi nodes per axis: nodes^2 points per entry of every block
ARGMAX_NODES = 64  # Gauss-Hermite nodes of the class probabilities
MAX_MEMORY = 2**31  # bytes of prior matrices held in memory; more go to memory-mapped files
MAX_ROWS = 2**27  # training or test points: their indices, and far more their covariances, are held at once


class KernelConditioningWarning(UserWarning):
    """The prior covariance needed diagonal jitter before its Cholesky factor existed."""


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


@dataclass(frozen=True)
class Posterior:
    """A GP posterior's factor: Cholesky ``factor`` of K + noise I (+ jitter I), ``alpha`` = (K + ...)^-1 y."""

    factor: tuple[np.ndarray, bool]
    alpha: np.ndarray
    jitter: float
    log_marginal_likelihood: float


def gp_posterior(kernel: np.ndarray, targets: np.ndarray, noise: float) -> Posterior:
    """Cholesky of K + noise I, adding jitter (from 1e-10 up to 1e-4 times the mean prior variance) if needed.

    log p(y) = -y^T alpha / 2 - sum log diag(L) - n log(2 pi) / 2, summed over the columns of y: -inf where
    y^T alpha / 2 exceeds float64's range (targets far larger than the prior's scale, e.g. y ~ 1e200 for K ~ 1: the
    likelihood is then below 10^-(10^308)); the weights alpha, and so the predictions, are still finite.
    ValueError where alpha itself is not finite.
    """
    kernel, targets = check_real_array(kernel, "kernel (n, n)", 2), check_real_array(targets, "targets (n, ...)", 1)
    if kernel.ndim != 2 or kernel.shape[0] != kernel.shape[1] or len(targets) != len(kernel):
        raise ValueError(f"kernel must be a square (n, n) matrix and targets have n rows, got shapes {kernel.shape} "
                         f"and {targets.shape}")
    noise = check_range(noise, "noise", 0.0, why="a variance")
    n = len(kernel)
    scale = float(np.mean(np.abs(np.diag(kernel))))
    if scale == 0 and noise == 0:
        raise ValueError("the prior covariance has a zero diagonal and noise = 0: K + noise I is singular; "
                         "raise `noise`")
    jitters = [0.0, *(scale * 10.0 ** power for power in range(-10, round(math.log10(MAX_JITTER)) + 1))]
    for jitter in jitters:
        try:
            factor = cho_factor(kernel + (noise + jitter) * np.eye(n), lower=True)
            break
        except LinAlgError:
            continue
    else:
        raise ValueError(f"the prior covariance is singular (or not positive semi-definite) beyond a jitter of "
                         f"{MAX_JITTER:g} x its mean variance; raise `noise` (now {noise:g})")
    if jitter:
        warnings.warn(f"the prior covariance needed a diagonal jitter of {jitter:.2g} to be factored",
                      KernelConditioningWarning, stacklevel=3)
    targets = targets.reshape(n, -1)
    alpha = cho_solve(factor, targets)
    log_det = 2 * np.log(np.diag(factor[0])).sum()
    check_finite_result(alpha, "the posterior weights of these targets (centre and scale them: normalise_y=True)")
    # y^T alpha / 2 = s^2 (y/s)^T (alpha/s) / 2 >= 0 with s a power of 2 (exact): no product of two huge numbers,
    # and beyond float64 it is +inf (log p(y) = -inf, documented), never inf - inf = NaN
    scale = math.ldexp(1.0, math.frexp(float(np.abs(targets).max(initial=0.0)))[1])
    with np.errstate(over="ignore"):
        half_fit = 0.5 * float(np.sum((targets / scale) * (alpha / scale))) * scale * scale
    lml = -half_fit - targets.shape[1] * (0.5 * log_det + 0.5 * n * math.log(2 * math.pi))
    return Posterior(factor, alpha, jitter, lml)


def _validate_data(estimator: BaseEstimator, *arrays: object, **options: object):
    """scikit-learn's ``validate_data``, its ValueError prefixed with the arguments it refers to."""
    names = "X, y" if len(arrays) > 1 else "X"
    try:
        return validate_data(estimator, *arrays, **options)
    except TypeError as error:  # a scalar y, a dict among X's entries: scikit-learn's checks expect a TypeError
        raise ValueTypeError(f"{names}: {error}") from None
    except ValueError as error:
        raise ValueError(f"{names}: {error}") from None


def regression_targets(estimator: BaseEstimator, X: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    """A kernel regressor's validated X and targets y (n, outputs), centred and scaled where its ``normalise_y``;
    y's shape, mean and scale are kept on the estimator for :func:`target_units`."""
    X, y = _validate_data(estimator, X, y, multi_output=True, y_numeric=True, dtype=float)
    if y.dtype.kind not in "biuf":  # scikit-learn's y_numeric converts only object arrays
        raise ValueError(f"y: regression targets must be numbers, got dtype {y.dtype} (first {str(y.flat[0])!r:.40}); "
                         "labels are for a classifier")
    y = y.astype(float)
    estimator._y_shape = y.shape[1:]
    y = y.reshape(len(y), -1)
    normalise = check_flag(estimator.normalise_y, "normalise_y")
    magnitude = np.ldexp(1.0, np.frexp(np.abs(y).max(0))[1])  # powers of 2: y / magnitude cannot overflow
    estimator._y_mean = (y / magnitude).mean(0) * magnitude if normalise else np.zeros(y.shape[1])
    estimator._y_scale = (y / magnitude).std(0) * magnitude if normalise else np.ones(y.shape[1])
    estimator._y_scale = np.where(estimator._y_scale > 0, estimator._y_scale, 1.0)
    return X, (y - estimator._y_mean) / estimator._y_scale


def target_units(estimator: BaseEstimator, mean: np.ndarray, what: str) -> np.ndarray:
    """A prediction (t, outputs) of normalised targets back in the targets' units and shape, checked finite."""
    mean = (mean * estimator._y_scale + estimator._y_mean).reshape(len(mean), *estimator._y_shape)
    return check_finite_result(mean, f"{what} in the targets' units")


def classification_targets(estimator: BaseEstimator, X: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    """A kernel classifier's validated X and the one-hot codes of the labels y, centred by 1 / (number of
    classes); the classes are kept as ``classes_``."""
    X, y = _validate_data(estimator, X, y, dtype=float)
    check_classification_targets(y)
    encoder = LabelEncoder().fit(y)
    estimator.classes_ = encoder.classes_
    if len(estimator.classes_) < 2:
        raise ValueError(f"y has 1 class ({estimator.classes_[0]!r}); a classifier needs at least 2 classes")
    return X, np.eye(len(estimator.classes_))[encoder.transform(y)] - 1.0 / len(estimator.classes_)


def check_distinct(X: np.ndarray, what: str) -> None:
    """At least 2 distinct inputs: batch norm of identical inputs divides by a zero batch variance."""
    distinct = len(np.unique(X, axis=0))
    if distinct < 2:
        raise ValueError(f"{what} needs at least 2 distinct inputs, got n_samples = {len(X)} with {distinct} "
                         "distinct: batch norm of identical inputs divides by a zero batch variance")


@dataclass
class BatchOrderTags(Tags):
    """scikit-learn's tags, and ``batch_order_dependent``: predictions depend on which test points share a batch."""

    batch_order_dependent: bool = True


class BatchedEstimator(BaseEstimator):
    """What the BN-NNGP and BN-NTK estimators share: the batch-order tag, a clone that shares ``client``, and the
    check of where and how finely the kernel is computed (``nodes``, ``device``)."""

    def __sklearn_tags__(self) -> BatchOrderTags:
        tags = super().__sklearn_tags__()
        return BatchOrderTags(**{field.name: getattr(tags, field.name) for field in fields(tags)})

    def __sklearn_clone__(self) -> BatchedEstimator:
        """An unfitted copy with copies of the parameters, sharing ``client`` (a ``distributed.Client`` cannot be
        deep-copied, and it only says where to compute)."""
        params = self.get_params(deep=False)
        client = params.pop("client")
        return type(self)(**{name: clone(value, safe=False) for name, value in params.items()}, client=client)

    def _check_placement(self) -> None:
        _check_nodes(self.nodes)
        if self.device is not None:
            check_device(self.device)


class _BatchNormNNGP(BatchedEstimator):
    """What the regressor and the classifier share: validation, the batched prior, the posterior."""

    def _validate(self) -> Activation:
        phi = _homogeneous(self.phi, check_batch_size(self.batch_size))
        _check_depth(self.depth)
        check_range(self.noise, "noise", 0.0, why="the observation noise variance")
        self._check_placement()
        check_flag(getattr(self, "normalise_y", False), "normalise_y")
        return phi

    def _fit_targets(self, X: np.ndarray, targets: np.ndarray) -> None:
        """The prior and posterior of (X, targets); the parameters they used are kept as the fitted ``phi_``,
        ``depth_``, ``batch_size_``, ``nodes_``, which ``predict`` reads (set_params changes nothing until refit;
        ``device`` and ``client`` say where to compute, and are read anew by each call)."""
        phi = self._validate()
        check_distinct(X, "the BN-NNGP")
        self.phi_, self.depth_, self.nodes_ = self.phi, _check_depth(self.depth), self.nodes
        self.batch_size_ = check_batch_size(self.batch_size)
        self.X_train_ = X
        prior = bn_nngp_prior(phi, X, self.depth_, self.batch_size_, nodes=self.nodes_, device=self.device,
                              client=self.client)
        self.train_rows_ = prior.train_rows
        self.posterior_ = gp_posterior(prior.train, targets[prior.train_rows], self.noise)
        self.jitter_ = self.posterior_.jitter
        self.log_marginal_likelihood_ = self.posterior_.log_marginal_likelihood

    def log_marginal_likelihood(self, theta: None = None) -> float:
        """log p(y | X) of the fitted prior, ``log_marginal_likelihood_`` (summed over output columns). The prior
        has no hyperparameter vector theta: compare the evidence of other parameters by fitting them."""
        if theta is not None:
            raise ValueError("theta must be None: the BN-NNGP prior has no hyperparameter vector; fit an estimator "
                             "with other parameters (depth, batch_size, noise) to compare their evidence")
        check_is_fitted(self, "posterior_")
        return self.log_marginal_likelihood_

    def _predict_latent(self, X: np.ndarray, return_std: bool = False,
                        return_cov: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """The posterior mean (t, outputs) of the latent function at X, and its standard deviation (t,) or
        covariance (t, t) (shared by every output column: one kernel, one noise)."""
        prior = bn_nngp_prior(self.phi_, self.X_train_, self.depth_, self.batch_size_, X_test=X, nodes=self.nodes_,
                              device=self.device, client=self.client, test_covariance=return_cov)
        mean = prior.cross @ self.posterior_.alpha
        if not (return_std or return_cov):
            return mean, None
        v = solve_triangular(self.posterior_.factor[0], prior.cross.T, lower=True)
        if return_cov:
            return mean, prior.test - v.T @ v
        variance = prior.test_diagonal - np.sum(v * v, axis=0)
        return mean, np.sqrt(np.clip(variance, 0.0, None))


class BatchNormNNGPRegressor(RegressorMixin, _BatchNormNNGP):
    """Gaussian-process regression with the prior of an infinitely wide BN network (see the module docstring).

    Args:
        phi: a positive-homogeneous activation (name or Activation).
        depth: L, the number of BN-phi layers.
        batch_size: B, the batch size of the network (training and test batching as in the module docstring).
        noise: the observation noise variance added to the diagonal of the prior covariance.
        normalise_y: centre and scale the targets (the prior's variance is O(1)).
        nodes: Gauss-Jacobi nodes per axis of the Laplace integral, every layer (None: the default rules).
        device: the torch device of the prior's tasks (None: CUDA where there is one, else the CPU).
        client: where the prior is computed: None (here), True (a local Dask cluster), an address, a Client.

    Predictions depend on which test points share a batch: the points to predict are cut into batches of
    ``batch_size`` in the order given, so reordering them, or predicting a subset, changes the result (the tag
    ``batch_order_dependent`` says so). Any ``client`` gives the same result bit for bit (:func:`bn_nngp_priors`).
    """

    def __init__(self, phi: str = "relu", depth: int = 2, batch_size: int = 32, noise: float = 1e-2,
                 normalise_y: bool = True, nodes: int | None = None, device: str | None = None,
                 client: object = None) -> None:
        self.phi = phi
        self.depth = depth
        self.batch_size = batch_size
        self.noise = noise
        self.normalise_y = normalise_y
        self.nodes = nodes
        self.device = device
        self.client = client

    def __sklearn_tags__(self) -> BatchOrderTags:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X: np.ndarray, y: np.ndarray) -> BatchNormNNGPRegressor:
        """Condition the prior on (X, y); y of shape (n,) or (n, outputs)."""
        self._fit_targets(*regression_targets(self, X, y))
        return self

    def predict(self, X: np.ndarray, return_std: bool = False, return_cov: bool = False):
        """Posterior mean (t, ...) of y at X; with ``return_std`` also the latent function's posterior standard
        deviation (t, ...), or with ``return_cov`` its posterior covariance (t, t) ((t, t, outputs) for 2-D y), in
        the targets' units, as scikit-learn's GaussianProcessRegressor (not both). Batch order matters (below)."""
        check_is_fitted(self, "posterior_")
        if check_flag(return_std, "return_std") and check_flag(return_cov, "return_cov"):
            raise ValueError("return_std and return_cov: ask for one (the standard deviations are the square roots "
                             "of the covariance's diagonal)")
        X = _validate_data(self, X, reset=False, dtype=float)
        mean, spread = self._predict_latent(X, return_std, return_cov)
        mean = target_units(self, mean, "the posterior mean")
        if return_std:
            std = (spread[:, None] * self._y_scale).reshape(len(X), *self._y_shape)
            return mean, check_finite_result(std, "the posterior standard deviation in the targets' units")
        if return_cov:
            cov = (spread[..., None] * self._y_scale**2).reshape(len(X), len(X), *self._y_shape)
            return mean, check_finite_result(cov, "the posterior covariance in the targets' units")
        return mean

    def sample_y(self, X: np.ndarray, n_samples: int = 1, random_state: int | np.random.RandomState | None = 0):
        """``n_samples`` draws of the latent function at X from the posterior, (t, n_samples) ((t, outputs,
        n_samples) for 2-D y), as scikit-learn's GaussianProcessRegressor: mean + U sqrt(max(Lambda, 0)) z with
        U Lambda U^T the posterior covariance and z standard normal from ``random_state``."""
        check_is_fitted(self, "posterior_")
        n_samples = check_whole_number(n_samples, "n_samples", 1, 2**40, "draws of the latent function")
        X = _validate_data(self, X, reset=False, dtype=float)
        outputs = len(self._y_mean)
        check_memory(1, len(X) * outputs, n_samples, "(test points x outputs, n_samples)")
        mean, cov = self._predict_latent(X, return_cov=True)
        eigenvalues, vectors = np.linalg.eigh(cov)
        root = vectors * np.sqrt(np.clip(eigenvalues, 0.0, None))
        z = check_random_state(random_state).standard_normal((len(X), outputs * n_samples))
        draws = (mean[:, :, None] + (root @ z).reshape(len(X), outputs, n_samples)) * self._y_scale[:, None]
        draws = (draws + self._y_mean[:, None]).reshape(len(X), *self._y_shape, n_samples)
        return check_finite_result(draws, "the posterior draws in the targets' units")


class BatchNormNNGPClassifier(ClassifierMixin, _BatchNormNNGP):
    """Classification by BN-NNGP regression on centred one-hot targets; ``predict`` returns the argmax label.

    Args as :class:`BatchNormNNGPRegressor` (without ``normalise_y``); predictions depend on which test points
    share a batch, as there.
    """

    def __init__(self, phi: str = "relu", depth: int = 2, batch_size: int = 32, noise: float = 1e-2,
                 nodes: int | None = None, device: str | None = None, client: object = None) -> None:
        self.phi = phi
        self.depth = depth
        self.batch_size = batch_size
        self.noise = noise
        self.nodes = nodes
        self.device = device
        self.client = client

    def fit(self, X: np.ndarray, y: np.ndarray) -> BatchNormNNGPClassifier:
        """Condition the prior on one-hot codes of the labels y, centred by 1 / (number of classes)."""
        self._fit_targets(*classification_targets(self, X, y))
        return self

    def _latent(self, X: np.ndarray, return_std: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        check_is_fitted(self, "posterior_")
        X = _validate_data(self, X, reset=False, dtype=float)
        return self._predict_latent(X, return_std=return_std)

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """The posterior mean of the centred one-hot code, (n, classes); for two classes the difference
        (second minus first), as scikit-learn's binary classifiers return."""
        scores = self._latent(X)[0]
        return scores[:, 1] - scores[:, 0] if len(self.classes_) == 2 else scores

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The label with the largest posterior mean."""
        scores = self._latent(X)[0]
        return self.classes_[np.argmax(scores, axis=1)]

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """P(class c has the largest latent value at x | data), (n, classes): :func:`argmax_probabilities` of the
        posterior means m_c(x) and the common posterior standard deviation s(x) (the class outputs are independent
        GPs with one kernel and one noise, so at one point they are independent normals of one variance). Its
        argmax is ``predict``'s label."""
        mean, std = self._latent(X, return_std=True)
        return argmax_probabilities(mean, std)


def argmax_probabilities(mean: np.ndarray, std: np.ndarray, nodes: int = ARGMAX_NODES) -> np.ndarray:
    """P(f_c = max_j f_j) for independent f_j ~ N(m_j, s^2) (rows of ``mean`` (n, C), ``std`` (n,)):

        P_c = int phi(z) prod_{j != c} Phi((m_c - m_j) / s + z) dz,

    by ``nodes``-point Gauss-Hermite quadrature (error below 1e-9 of each row's sum here), each row then divided by
    its sum; s = 0 gives the indicator of the largest mean. The same probabilities as counting the argmax of
    posterior draws, without their Monte Carlo error sqrt(P (1 - P) / draws)."""
    z, weights = np.polynomial.hermite_e.hermegauss(nodes)
    weights = weights / math.sqrt(2 * math.pi)
    difference = mean[:, :, None] - mean[:, None, :]  # (n, C, C): m_c - m_j
    spread = std[:, None, None]
    shift = np.where(spread > 0, difference / np.where(spread > 0, spread, 1.0),
                     np.where(difference > 0, np.inf, np.where(difference < 0, -np.inf, 0.0)))
    classes = mean.shape[1]
    shift[:, np.arange(classes), np.arange(classes)] = np.inf  # j = c: a factor Phi(inf) = 1
    probabilities = np.empty_like(mean)
    for c in range(classes):
        log_terms = log_ndtr(shift[:, c, :, None] + z).sum(1)  # (n, nodes)
        probabilities[:, c] = np.exp(log_terms) @ weights
    return probabilities / probabilities.sum(1, keepdims=True)
