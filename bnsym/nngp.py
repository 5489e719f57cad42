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

The estimators follow scikit-learn's Gaussian processes: ``fit``, ``predict`` (``return_std=True``),
``score``, ``get_params``/``set_params``; the posterior goes through a Cholesky factor (SciPy) and the log
marginal likelihood is reported as ``log_marginal_likelihood_``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch
from scipy.linalg import LinAlgError, cho_factor, cho_solve, solve_triangular
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .core.activations import Activation, parse_activation
from .core.validation import (
    check_activation,
    check_batch_size,
    check_device,
    check_finite_result,
    check_flag,
    check_range,
    check_real_array,
    check_whole_number,
)
from .meanfield.crossbatch import cross_batch_kernel_laplace
from .meanfield.kernels import gaussian_kernel

MAX_JITTER = 1e-4  # relative to the mean prior variance; beyond it the kernel is reported singular
MAX_DEPTH = 10**4  # one cross-batch layer map per layer
MAX_NODES = 1024  # Gauss-Jacobi nodes per axis: nodes^2 points per entry of every block
MAX_ENTRIES = 2**27  # float64 entries of the joint 2B x 2B covariances mapped at once (1 GiB)


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
    if isinstance(depths, (str, bytes)) or not isinstance(depths, Iterable):
        raise ValueError(f"depths must be a list of depths, got {depths!r:.80}")
    checked = sorted({_check_depth(depth) for depth in np.ravel(np.asarray(depths, dtype=object)).tolist()})
    if not checked:
        raise ValueError("depths must name at least one depth")
    return checked


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


def _check_size(n_batches: int, n_pairs: int, batch_size: int) -> None:
    """The joint covariances of the batches and their pairs must fit in MAX_ENTRIES."""
    entries = (n_batches + n_pairs) * (2 * batch_size) ** 2
    if entries > MAX_ENTRIES:
        raise ValueError(f"{n_batches} batches and {n_pairs} pairs of them at batch_size B = {batch_size} make "
                         f"{entries:,} entries of joint covariances, above {MAX_ENTRIES:,} (1 GiB of float64): use "
                         "fewer points or a smaller batch size")


def fill_batches(n: int, batch_size: int) -> np.ndarray:
    """Row indices (k, B) of k = ceil(n / B) batches: 0..n-1 in order, the last batch wrapping around to 0, 1, ..."""
    n, batch_size = check_whole_number(n, "n", 1, 2**53), check_batch_size(batch_size)
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
                nodes: int | None = None,
                device: torch.device | str | None = None) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """K^l blocks of k batches (k, B, d) at each l in ``depths``: within-batch (k, B, B) and cross (P, B, B) blocks.

    ``pairs`` (P, 2) holds batch indices (i, j), i != j. Each layer maps the joint 2B x 2B covariance of every
    pair with the cross-batch map (Laplace route, ``nodes`` per axis; None: :func:`first_layer_nodes`, then
    :func:`default_nodes`), all pairs in one batched tensor op; the within-batch blocks are the cross blocks of
    each batch with an identical copy of itself, in the same op.
    """
    batches = check_real_array(batches, "batches (k, B, d)", 3)
    if batches.ndim != 3:
        raise ValueError(f"batches must have shape (k, B, d), got {batches.shape}")
    batch = check_batch_size(batches.shape[1])
    phi, depths, nodes = _homogeneous(phi, batch), _check_depths(depths), _check_nodes(nodes)
    pairs = np.reshape(check_real_array(pairs, "pairs (P, 2)") if np.size(pairs) else np.zeros(0), (-1, 2))
    if not (np.all(pairs == np.round(pairs)) and np.all((0 <= pairs) & (pairs < len(batches)))
            and np.all(pairs[:, 0] != pairs[:, 1])):
        raise ValueError(f"pairs must hold pairs (i, j), i != j, of batch indices 0..{len(batches) - 1}")
    pairs = pairs.astype(int)
    _check_size(len(batches), len(pairs), batch)
    first = nodes or first_layer_nodes(batch, batches.shape[-1])
    nodes = nodes or default_nodes(batch)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if device is None else check_device(device)
    x = torch.as_tensor(batches, device=torch.device(device))
    left, right = torch.as_tensor(pairs[:, 0], device=x.device), torch.as_tensor(pairs[:, 1], device=x.device)
    within = x @ x.mT / x.shape[-1]
    cross = x[left] @ x[right].mT / x.shape[-1]
    out = {}
    for layer in range(1, depths[-1] + 1):
        joint = torch.cat([torch.cat([within, within], -1), torch.cat([within, within], -1)], -2)
        joint_pairs = torch.cat([torch.cat([within[left], cross], -1), torch.cat([cross.mT, within[right]], -1)], -2)
        rule = first if layer == 1 else nodes
        blocks = cross_batch_kernel_laplace(phi, torch.cat([joint, joint_pairs]), batch, nodes=rule, blocks="cross")
        within, cross = (blocks[: len(x)] + blocks[: len(x)].mT) / 2, blocks[len(x):]
        if layer in depths:
            out[layer] = (within.cpu().numpy(), cross.cpu().numpy())
    return out


@dataclass(frozen=True)
class BatchedPrior:
    """The prior covariance over the training copies, and between test points and them.

    ``train`` (m, m) over the m = k B training copies (rows ``train_rows`` of the training set); with test points,
    ``cross`` (t, m) between the t test points and the training copies and ``test_diagonal`` (t,) their variances.
    """

    train_rows: np.ndarray
    train: np.ndarray | None = None
    cross: np.ndarray | None = None
    test_diagonal: np.ndarray | None = None


def bn_nngp_priors(phi: str | Activation, X: np.ndarray, depths: Sequence[int], batch_size: int,
                   X_test: np.ndarray | None = None, nodes: int | None = None,
                   device: torch.device | str | None = None) -> dict[int, BatchedPrior]:
    """The BN-NNGP prior K^l at each depth l of ``depths``: of the training rows of ``X`` (without ``X_test``), or
    between ``X_test`` and them. One recursion serves every depth.

    Batching as the module docstring says. Without test points: all pairs of training batches. With them: all
    (test batch, training batch) pairs (the training block is not recomputed).
    """
    batch = check_batch_size(batch_size)
    X = _check_inputs(X, "X")
    X_test = None if X_test is None else _check_inputs(X_test, "X_test", X.shape[1])
    k = -(-len(X) // batch)
    kt = 0 if X_test is None else -(-len(X_test) // batch)
    _check_size(k + kt, k * (k - 1) // 2 if X_test is None else k * kt, batch)
    # batch norm (eps = 0) makes the prior blind to the inputs' scale: a power of 2 brings max |x| near 1, exactly
    scale = 2.0 ** -math.frexp(max(np.abs(X).max(), 0.0 if X_test is None else np.abs(X_test).max()))[1]
    X, X_test = X * scale, None if X_test is None else X_test * scale
    rows = fill_batches(len(X), batch)
    if X_test is None:
        pairs = np.array([(i, j) for i in range(k) for j in range(i + 1, k)], dtype=int).reshape(-1, 2)
        priors = {}
        for depth, (within, cross) in block_prior(phi, X[rows], pairs, depths, nodes, device).items():
            full = np.zeros((k, batch, k, batch))
            full[np.arange(k), :, np.arange(k), :] = within
            full[pairs[:, 0], :, pairs[:, 1], :] = cross
            full[pairs[:, 1], :, pairs[:, 0], :] = cross.transpose(0, 2, 1)
            priors[depth] = BatchedPrior(rows.ravel(), train=full.reshape(k * batch, k * batch))
        return priors
    t = len(X_test)
    filler = np.arange(kt * batch - t) % len(X)
    test_batches = np.concatenate([X_test, X[filler]]).reshape(kt, batch, -1)
    pairs = np.array([(k + a, i) for a in range(kt) for i in range(k)], dtype=int)
    priors = {}
    for depth, (within, cross) in block_prior(phi, np.concatenate([X[rows], test_batches]), pairs, depths, nodes,
                                              device).items():
        cross = cross.reshape(kt, k, batch, batch).transpose(0, 2, 1, 3).reshape(kt * batch, k * batch)
        diagonal = np.diagonal(within[k:], axis1=-2, axis2=-1).ravel()
        priors[depth] = BatchedPrior(rows.ravel(), cross=cross[:t], test_diagonal=diagonal[:t])
    return priors


def bn_nngp_prior(phi: str | Activation, X: np.ndarray, depth: int, batch_size: int,
                  X_test: np.ndarray | None = None, nodes: int | None = None,
                  device: torch.device | str | None = None) -> BatchedPrior:
    """:func:`bn_nngp_priors` at one depth."""
    depth = _check_depth(depth)
    return bn_nngp_priors(phi, X, [depth], batch_size, X_test, nodes, device)[depth]


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

    log p(y) = -y^T alpha / 2 - sum log diag(L) - n log(2 pi) / 2, summed over the columns of y.
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
    with np.errstate(all="ignore"):  # overflow is reported just below
        fit = float(np.sum(targets * alpha))
        lml = -0.5 * fit - targets.shape[1] * (0.5 * log_det + 0.5 * n * math.log(2 * math.pi))
    check_finite_result(np.append(alpha, lml), "the posterior weights and log marginal likelihood of these targets "
                        "(centre and scale them: normalise_y=True)")
    return Posterior(factor, alpha, jitter, lml)


def _validate_data(estimator: BaseEstimator, *arrays: object, **options: object):
    """scikit-learn's ``validate_data``, its ValueError prefixed with the arguments it refers to."""
    try:
        return validate_data(estimator, *arrays, **options)
    except ValueError as error:
        raise ValueError(f"{'X, y' if len(arrays) > 1 else 'X'}: {error}") from None


class _BatchNormNNGP(BaseEstimator):
    """What the regressor and the classifier share: validation, the batched prior, the posterior."""

    def _validate(self) -> Activation:
        phi = _homogeneous(self.phi, check_batch_size(self.batch_size))
        _check_depth(self.depth)
        check_range(self.noise, "noise", 0.0, why="the observation noise variance")
        _check_nodes(self.nodes)
        check_flag(getattr(self, "normalise_y", False), "normalise_y")
        return phi

    def _fit_targets(self, X: np.ndarray, targets: np.ndarray) -> None:
        """The prior and posterior of (X, targets); the parameters they used are kept as the fitted ``phi_``,
        ``depth_``, ``batch_size_``, ``nodes_``, which ``predict`` reads (set_params changes nothing until refit)."""
        phi = self._validate()
        if len(np.unique(X, axis=0)) < 2:
            raise ValueError(f"the BN-NNGP needs at least 2 distinct inputs, got n_samples = {len(X)} with "
                             f"{len(np.unique(X, axis=0))} distinct: batch norm of identical inputs divides by a zero "
                             "batch variance")
        self.phi_, self.depth_, self.nodes_ = self.phi, _check_depth(self.depth), self.nodes
        self.batch_size_ = check_batch_size(self.batch_size)
        self.X_train_ = X
        prior = bn_nngp_prior(phi, X, self.depth_, self.batch_size_, nodes=self.nodes_)
        self.train_rows_ = prior.train_rows
        self.posterior_ = gp_posterior(prior.train, targets[prior.train_rows], self.noise)
        self.jitter_ = self.posterior_.jitter
        self.log_marginal_likelihood_ = self.posterior_.log_marginal_likelihood

    def _predict_latent(self, X: np.ndarray, return_std: bool) -> tuple[np.ndarray, np.ndarray | None]:
        prior = bn_nngp_prior(self.phi_, self.X_train_, self.depth_, self.batch_size_, X_test=X, nodes=self.nodes_)
        mean = prior.cross @ self.posterior_.alpha
        if not return_std:
            return mean, None
        v = solve_triangular(self.posterior_.factor[0], prior.cross.T, lower=True)
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
    """

    def __init__(self, phi: str = "relu", depth: int = 2, batch_size: int = 32, noise: float = 1e-2,
                 normalise_y: bool = True, nodes: int | None = None) -> None:
        self.phi = phi
        self.depth = depth
        self.batch_size = batch_size
        self.noise = noise
        self.normalise_y = normalise_y
        self.nodes = nodes

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X: np.ndarray, y: np.ndarray) -> BatchNormNNGPRegressor:
        """Condition the prior on (X, y); y of shape (n,) or (n, outputs)."""
        X, y = _validate_data(self, X, y, multi_output=True, y_numeric=True, dtype=float)
        self._y_shape = y.shape[1:]
        y = y.reshape(len(y), -1)
        normalise = check_flag(self.normalise_y, "normalise_y")
        magnitude = np.ldexp(1.0, np.frexp(np.abs(y).max(0))[1])  # powers of 2: y / magnitude cannot overflow
        self._y_mean = (y / magnitude).mean(0) * magnitude if normalise else np.zeros(y.shape[1])
        self._y_scale = (y / magnitude).std(0) * magnitude if normalise else np.ones(y.shape[1])
        self._y_scale = np.where(self._y_scale > 0, self._y_scale, 1.0)
        self._fit_targets(X, (y - self._y_mean) / self._y_scale)
        return self

    def predict(self, X: np.ndarray, return_std: bool = False):
        """Posterior mean (and the latent function's posterior standard deviation with ``return_std``)."""
        check_is_fitted(self, "posterior_")
        X = _validate_data(self, X, reset=False, dtype=float)
        mean, std = self._predict_latent(X, return_std)
        mean = (mean * self._y_scale + self._y_mean).reshape(len(X), *self._y_shape)
        check_finite_result(mean, "the posterior mean in the targets' units")
        if not return_std:
            return mean
        std = (std[:, None] * self._y_scale).reshape(len(X), *self._y_shape)
        return mean, check_finite_result(std, "the posterior standard deviation in the targets' units")


class BatchNormNNGPClassifier(ClassifierMixin, _BatchNormNNGP):
    """Classification by BN-NNGP regression on centred one-hot targets; ``predict`` returns the argmax label.

    Args as :class:`BatchNormNNGPRegressor` (without ``normalise_y``).
    """

    def __init__(self, phi: str = "relu", depth: int = 2, batch_size: int = 32, noise: float = 1e-2,
                 nodes: int | None = None) -> None:
        self.phi = phi
        self.depth = depth
        self.batch_size = batch_size
        self.noise = noise
        self.nodes = nodes

    def fit(self, X: np.ndarray, y: np.ndarray) -> BatchNormNNGPClassifier:
        """Condition the prior on one-hot codes of the labels y, centred by 1 / (number of classes)."""
        X, y = _validate_data(self, X, y, dtype=float)
        check_classification_targets(y)
        encoder = LabelEncoder().fit(y)
        self.classes_ = encoder.classes_
        if len(self.classes_) < 2:
            raise ValueError(f"y has 1 class ({self.classes_[0]!r}); a classifier needs at least 2 classes")
        codes = np.eye(len(self.classes_))[encoder.transform(y)] - 1.0 / len(self.classes_)
        self._fit_targets(X, codes)
        return self

    def _scores(self, X: np.ndarray) -> np.ndarray:
        check_is_fitted(self, "posterior_")
        X = _validate_data(self, X, reset=False, dtype=float)
        return self._predict_latent(X, return_std=False)[0]

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """The posterior mean of the centred one-hot code, (n, classes); for two classes the difference
        (second minus first), as scikit-learn's binary classifiers return."""
        scores = self._scores(X)
        return scores[:, 1] - scores[:, 0] if len(self.classes_) == 2 else scores

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The label with the largest posterior mean."""
        scores = self._scores(X)
        return self.classes_[np.argmax(scores, axis=1)]
