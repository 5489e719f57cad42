"""The estimators of the BN-NNGP and of the BN-NTK.

The estimators follow scikit-learn's Gaussian processes: ``fit``, ``predict`` (``return_std`` or ``return_cov``),
``sample_y``, ``predict_proba`` (classifier), ``score``, ``log_marginal_likelihood(theta)``,
``get_params``/``set_params``; the posterior goes through a Cholesky factor (SciPy).

**Hyperparameters of the BN-NNGP.** The network's readout f = sqrt(weight_var) v . x^L / sqrt(N) + sqrt(bias_var) b
(v, b standard normal) gives the prior weight_var K + bias_var 11^T, K the BN-NNGP of ``bnsym.nngp.prior``; the
targets carry independent noise of variance ``noise``. Weight and bias variances of the hidden layers do not enter:
at eps = 0 batch norm removes the scale of W^l and the (batch-constant) bias before it, so only the readout's remain,
and there is no eps to fit. Each of ``noise``, ``weight_var``, ``bias_var`` is fitted by default (``"fit"``): the mean
over the batchings of log p(y) is maximised by L-BFGS-B on their logs with its analytic gradient, from two starting
points (``fit_hyperparameters``), on the prior K computed once (a Cholesky factor per step; on diabetes' 352
training copies 62 steps, 0.5 s of one core against 1.4 s for the prior); a number keeps one fixed.
``log_marginal_likelihood(theta)`` evaluates log p(y) at theta = the logs of (noise, weight_var, bias_var)
(``HYPERPARAMETERS``), as scikit-learn's GaussianProcessRegressor. The classifiers fit them on the same criterion
they condition on: the sum over the centred one-hot columns of each column's log p(y), as independent GP outputs
sharing one kernel and one noise. The BN-NTK estimators below have no noise and no likelihood, and their mean
prediction at t = inf does not change with a scale of Theta: nothing of theirs is fitted.

**Kernel-regime predictions** of an infinitely wide batch-normalised network trained by gradient flow.

**Premises.** The network and the batching are the BN-NNGP's (:mod:`bnsym.nngp`): [Dense, BN, phi] * depth, eps =
0, no bias, f = v . x^L / sqrt(N), every W^l and v trained in the NTK parametrisation; the training set is cut into
fixed BN batches of B rows (the last wrapping around to the first rows: m = k B training copies), and each test
point is normalised with training points as its batch context, averaged over ``n_batchings`` random batchings
(``batching="random"``, below), or, with ``batching="ordered"``, the training rows are batched in the order given and
test points among themselves; each batch's centred inputs must span at least 3 dimensions (at eps = 0 the NTK
is infinite below that: ``bnsym.nngp.ntk.check_spans``, a ValueError at ``fit`` or ``predict``); at most ``MAX_COPIES``
training copies (the flow eigendecomposes their NTK) and the depths and sizes ``bnsym.nngp.ntk.check_cost`` allows.
Training is full-batch gradient flow on the squared loss L = sum over the m copies of (f(x_i) - y_i)^2 / 2,
d theta / ds = -eta grad L. As the width grows the network moves as its linearisation with the deterministic NTK
Theta (:func:`bnsym.nngp.ntk.bn_ntk`), and the mean over initialisations (E f_0 = 0) of the prediction at time s is
(Jacot et al. 2018, Thm 2; Lee et al. 2019, Eq. 16)

    mean_t(x*) = Theta(x*, X) Theta^-1 (I - exp(-t Theta)) y,        t = eta s

(the learning rate folded into the time t; t = inf: kernel regression Theta(x*, X) Theta^-1 y). Theta(x*, X) is
the NTK between the test batch holding x* and each training batch. With the eigenvalues lambda of Theta, the weights
are V g(Lambda) V^T y with g(lambda) = (1 - exp(-t lambda)) / lambda; at t = inf the directions with lambda below
``RCOND`` times the largest are left unlearnt (their limit: the joint kernel is PSD, so Theta(x*, X) has no part
along them).

**Batching** (both kinds of estimator). A train-mode BN network's output for x depends on the other points of x's
batch, so the prior, and every prediction, depends on how points are batched. ``batching="random"`` makes
predictions independent of the order of the rows and of which points are predicted together:

* ``fit`` draws ``n_batchings`` = R independent orders of the training rows from ``random_state`` (scikit-learn's
  convention), stratified for the classifiers (each class spread evenly along the order: class c's i-th point at
  (i + u) / n_c, u uniform, i a random rank), and cuts each into batches of B consecutive rows (``assignments``);
* a test point x* is predicted in its own batch, [x*, c_1, ..., c_{B-1}], completed with the first B - 1 training
  points of that batching that differ from x* (the first training batch's, so a stratified mix of classes; a
  training point predicted again is not batched with its own copy, which would take one dimension from the batch's
  centred span: at B = 4 the eps = 0 BN-NTK of such a batch is infinite), whose outputs are not observed: its
  prior, K(x*, x*) and K(x*, training copies), does not depend on any other test point (``context_batches``);
* the prediction is the mean over the R batchings of each batching's prediction (posterior mean, or NTK mean
  prediction); the BN-NNGP's posterior variance is the mean of the batchings' variances.

This is the limit of R wide train-mode BN networks, each trained on its own fixed random batching, that at test time
normalise each test point with the batch statistics of it and B - 1 training points (no population statistics),
their mean output averaged over initialisations and then over the R networks. The expectation over random
batchings is the target; the R batchings estimate it with a Monte Carlo error, which ``batching_error(X)`` reports
(the standard deviation of the R batchings' predictions over sqrt(R); inf for R = 1). ``batching="ordered"`` keeps
the fixed in-order batching (one batching; ``n_batchings`` and ``random_state`` unused), which the book's chapters
compare with finite networks trained on the same fixed batches; its predictions change when the points to predict
are reordered or predicted in subsets (the tag ``batch_order_dependent`` is then True).

"ordered" is still the default because "random" costs more, by a factor that lies in the scheme: with k training
batches and depth L, a test point costs (k + 1) L block maps (its batch with itself and with each training batch)
in each of the R batchings, against (k + 1) L / B when B test points share a batch, R B times as many. Computing
only the test point's row of each block does not help before the last layer: batch norm couples the rows of a
batch, so a layer's map of a block needs the previous layer's whole joint covariance of the two batches.
On breast_cancer (398 + 171 points, B = 32, depth 2, 30 features, so a first layer of 24 nodes per axis,
``bnsym.nngp.first_layer_nodes``), CPU time of one thread: "ordered" 4.3 s for fit + predict, "random" at R = 1
about 60 s (its prediction timed on 16 test points, 0.34 s each), and R times that.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, fields
from typing import Callable

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve, solve_triangular
from scipy.optimize import minimize
from scipy.special import log_ndtr
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import Tags, check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ..arch.network import check_sampling
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
from .ntk import MAX_DEPTH, bn_ntk
from .prior import BatchedPrior, _check_depth, _check_nodes, _homogeneous, bn_nngp_prior, bn_nngp_priors

MAX_JITTER = 1e-4  # relative to the mean prior variance; beyond it the kernel is reported singular
ARGMAX_NODES = 64  # Gauss-Hermite nodes of the class probabilities

RCOND = 1e-12  # eigenvalues of Theta below this times the largest are rounding: unlearnt at t = inf
MAX_COPIES = 2**14  # training copies m: the flow eigendecomposes the m x m NTK, O(m^3), three m x m float64 arrays
BATCHINGS = ("random", "ordered")
N_BATCHINGS = 4  # default random batchings: wine (B = 16), one batching's accuracy spread ~0.02, the mean's half that
MAX_BATCHINGS = 1024
TEST_CHUNK = 256  # test points per prior call (random batching): their cross blocks (B t, m) are held at once
FIT = "fit"  # a hyperparameter given as FIT is fitted by maximising the log marginal likelihood
HYPERPARAMETERS = ("noise", "weight_var", "bias_var")  # the order of theta (their logs) in log_marginal_likelihood
RANGE = 1e5  # each fitted variance lies within RANGE^{-1} to RANGE times its unit (fit_hyperparameters)
STARTS = (0.1, 1.0)  # the starting points of the fit: every fitted variance at this many units (one restart)
DEPTHS = (1, 2, 3, 4, 6, 8)  # the BN-NNGP's depths compared with depth="fit" (one recursion to the deepest)


def check_batching(batching: object, n_batchings: object) -> tuple[str, int]:
    """``batching`` one of ``BATCHINGS``, and the number of batchings it averages (1 for "ordered")."""
    if not isinstance(batching, str) or batching not in BATCHINGS:
        raise ValueError(f"batching must be one of {BATCHINGS}: 'random' (seeded random batches, each test point with "
                         f"training points as its batch context) or 'ordered' (rows batched in the order given), "
                         f"got {batching!r:.80}")
    count = check_whole_number(n_batchings, "n_batchings", 1, MAX_BATCHINGS, "random batchings, one prior each")
    return batching, 1 if batching == "ordered" else count


def assignments(n: int, labels: np.ndarray | None, n_batchings: int, random_state: object) -> list[np.ndarray]:
    """``n_batchings`` random orders of the n training rows (``labels`` (n,) integer codes, or None), each to be cut
    into batches of consecutive rows: uniform permutations, or stratified with labels, where class c's point of
    random rank i (of n_c) sits at (i + u) / n_c, u ~ U(0, 1), so each class is spread evenly along the order and
    every batch holds each class in about its proportion."""
    rng = check_random_state(random_state)
    orders = []
    for _ in range(n_batchings):
        if labels is None:
            orders.append(rng.permutation(n))
            continue
        key = np.empty(n)
        for code in np.unique(labels):
            members = np.flatnonzero(labels == code)
            key[members] = (rng.permutation(len(members)) + rng.uniform(size=len(members))) / len(members)
        orders.append(np.argsort(key, kind="stable"))
    return orders


def context_batches(X_test: np.ndarray, X_train: np.ndarray, batch_size: int) -> np.ndarray:
    """The rows (t B, d) of t batches [x*_i, c_i1, ..., c_i(B-1)]: each test point alone in a batch completed by the
    first B - 1 rows of ``X_train`` (in batch order) that differ from it (cycling through those if there are fewer),
    so its prior does not depend on the other test points. The test point's row of batch i is row i B."""
    rows = np.empty((len(X_test), batch_size, X_test.shape[1]))
    rows[:, 0] = X_test
    for point, batch in zip(X_test, rows):
        window = batch_size - 1  # the first rows that differ from x* lie among the first B - 1 + (its copies)
        while True:
            differ = np.flatnonzero((X_train[:window] != point).any(1))
            if len(differ) >= batch_size - 1 or window >= len(X_train):
                break
            window = min(2 * window, len(X_train))
        batch[1:] = X_train[differ[np.arange(batch_size - 1) % len(differ)]]
    return rows.reshape(len(X_test) * batch_size, -1)


class KernelConditioningWarning(UserWarning):
    """The prior covariance needed diagonal jitter before its Cholesky factor existed."""


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


def check_hyperparameter(value: object, name: str, why: str, positive: bool = False) -> float | None:
    """None where ``value`` is ``FIT`` (to be fitted), else ``value`` as a finite number >= 0 (> 0 with
    ``positive``), which stays fixed."""
    if isinstance(value, str) and value == FIT:
        return None
    return check_range(value, name, 0.0, open_low=positive,
                       why=f"{why}, kept fixed (or {FIT!r}: fitted by maximising the log marginal likelihood)")


def evidence(kernel: np.ndarray, targets: np.ndarray, variances: np.ndarray) -> tuple[Posterior, np.ndarray]:
    """The posterior (:func:`gp_posterior`) of targets (m, c) under the covariance A = w K + b 11^T + s I, with
    (s, w, b) = ``variances`` (noise, weight_var, bias_var), and the gradient of its log p(y) in their logs
    (Rasmussen & Williams 2006, Eq. 5.9, summed over the c columns):

        d log p(y) / d log v = v tr((alpha alpha^T - c A^-1) dA/dv) / 2,   dA/ds = I, dA/dw = K, dA/db = 11^T.
    """
    noise, weight_var, bias_var = variances
    posterior = gp_posterior(weight_var * kernel + bias_var, targets, noise)
    inverse = cho_solve(posterior.factor, np.eye(len(kernel)))
    outer = posterior.alpha @ posterior.alpha.T - posterior.alpha.shape[1] * inverse
    return posterior, 0.5 * variances * np.array([np.trace(outer), np.sum(outer * kernel), outer.sum()])


def mean_evidence(kernels: list[np.ndarray], targets: list[np.ndarray],
                  variances: np.ndarray) -> tuple[float, np.ndarray]:
    """The mean over the batchings (each one's prior ``kernels`` and observed ``targets``) of :func:`evidence`'s
    log p(y) and of its gradient."""
    results = [evidence(kernel, observed, variances) for kernel, observed in zip(kernels, targets)]
    return (float(np.mean([posterior.log_marginal_likelihood for posterior, _ in results])),
            np.mean([gradient for _, gradient in results], axis=0))


def fit_hyperparameters(kernels: list[np.ndarray], targets: list[np.ndarray],
                        given: list[float | None]) -> np.ndarray:
    """The variances (noise, weight_var, bias_var) that maximise :func:`mean_evidence`: the ``given`` numbers fixed,
    the others (None) by L-BFGS-B on their logs with the analytic gradient, each within 1 / ``RANGE`` to ``RANGE``
    times its unit, from each of ``STARTS`` units (the best end kept). The units make the fit blind to the scale of y
    and of K: the targets' mean square q for the noise and the bias variance, q / (K's mean diagonal) for the weight
    variance."""
    variances = np.array([1.0 if value is None else value for value in given])
    free = [index for index, value in enumerate(given) if value is None]
    if not free:
        return variances
    with np.errstate(over="ignore", divide="ignore"):
        square = float(np.mean(targets[0] ** 2)) or 1.0
        units = np.array([square, square / float(np.mean(np.diag(kernels[0]))), square])[free]
        bounds = np.log(units)[:, None] + np.log([1 / RANGE, RANGE])
    if not np.all(np.isfinite(units * RANGE) & (units / RANGE > 0)):
        raise ValueError(f"the targets' mean square {square:g} puts the variances to fit beyond float64; centre and "
                         f"scale the targets (normalise_y=True) or give {', '.join(HYPERPARAMETERS)} as numbers")

    def loss(logs: np.ndarray) -> tuple[float, np.ndarray]:
        variances[free] = np.exp(logs)
        value, gradient = mean_evidence(kernels, targets, variances)
        return -value, -gradient[free]

    with warnings.catch_warnings():  # the fitted model's posterior warns of a jitter it needs
        warnings.simplefilter("ignore", KernelConditioningWarning)
        ends = [minimize(loss, np.log(start * units), jac=True, method="L-BFGS-B", bounds=bounds) for start in STARTS]
    variances[free] = np.exp(min(ends, key=lambda end: end.fun).x)
    return variances


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
    """scikit-learn's tags, and ``batch_order_dependent``: predictions depend on which test points share a batch
    (True with ``batching="ordered"``)."""

    batch_order_dependent: bool = True


KernelCall = Callable[[np.ndarray, np.ndarray, bool], BatchedPrior]


def test_kernel(kernel: KernelCall, X_train: np.ndarray, X: np.ndarray, batch_size: int, own_batches: bool,
                covariance: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(cross (t, m), test_diagonal (t,), test (t, t) with ``covariance``) of the test points X against the training
    copies of ``X_train`` (rows in batch order), from ``kernel(X_train, X_test, covariance)``: X batched among
    itself, or with ``own_batches`` each point in a batch of its own completed by ``X_train``'s first B - 1 rows
    that differ from it (``context_batches``; in chunks of ``TEST_CHUNK`` points without ``covariance``)."""
    if not own_batches:
        prior = kernel(X_train, X, covariance)
        return prior.cross, prior.test_diagonal, prior.test
    chunks = [X] if covariance else [X[start:start + TEST_CHUNK] for start in range(0, len(X), TEST_CHUNK)]
    priors = [kernel(X_train, context_batches(chunk, X_train, batch_size), covariance) for chunk in chunks]
    cross = np.concatenate([np.asarray(prior.cross[::batch_size]) for prior in priors])
    diagonal = np.concatenate([prior.test_diagonal[::batch_size] for prior in priors])
    return cross, diagonal, np.asarray(priors[0].test[::batch_size, ::batch_size]) if covariance else None


class BatchedEstimator(BaseEstimator):
    """What the BN-NNGP and BN-NTK estimators share: the batchings (module docstring), the batch-order tag, a clone
    that shares ``client``, and the check of where and how finely the kernel is computed (``nodes``, ``device``)."""

    def __sklearn_tags__(self) -> BatchOrderTags:
        tags = super().__sklearn_tags__()
        return BatchOrderTags(**{field.name: getattr(tags, field.name) for field in fields(tags)},
                              batch_order_dependent=self.batching != "random")

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
        check_batching(self.batching, self.n_batchings)

    def _draw_batchings(self, n: int, labels: np.ndarray | None) -> list[np.ndarray]:
        """The training rows in batch order, one array (n,) per batching (kept as ``batch_orders_`` (R, n)), and the
        fitted ``batching_``."""
        self.batching_, count = check_batching(self.batching, self.n_batchings)
        orders = [np.arange(n)] if self.batching_ == "ordered" else assignments(n, labels, count, self.random_state)
        self.batch_orders_ = np.stack(orders)
        return orders

    def _keep(self, **fitted: list) -> None:
        """Each batching's fitted arrays as attributes ``name_``: the one array itself with ``batching="ordered"``,
        else their stack (R, ...) (a tuple for objects)."""
        for name, values in fitted.items():
            ordered = self.batching_ == "ordered"
            stacked = tuple(values) if not isinstance(values[0], np.ndarray) else np.stack(values)
            setattr(self, f"{name}_", values[0] if ordered else stacked)

    def batching_error(self, X: np.ndarray) -> np.ndarray:
        """The Monte Carlo standard error of ``predict``'s mean (regressors) or ``decision_function`` (classifiers) at
        X over the random batchings: the standard deviation of the R batchings' values over sqrt(R) (module
        docstring); inf for one random batching (not estimable), 0 for ``batching="ordered"`` (deterministic)."""
        check_is_fitted(self, "batch_orders_")
        X = _validate_data(self, X, reset=False, dtype=float)
        values = np.stack([self._public(mean) for mean in self._batch_means(X)])
        if len(values) == 1:
            return np.full(values.shape[1:], 0.0 if self.batching_ == "ordered" else np.inf)
        return values.std(0, ddof=1) / math.sqrt(len(values))


class _BatchNormNNGP(BatchedEstimator):
    """What the regressor and the classifier share: validation, the batched prior, the posterior."""

    def _validate(self) -> Activation:
        phi = _homogeneous(self.phi, check_batch_size(self.batch_size))
        self._depths()
        self._given()
        self._check_placement()
        check_flag(getattr(self, "normalise_y", False), "normalise_y")
        return phi

    def _depths(self) -> list[int]:
        """The depths to compare: ``DEPTHS`` for depth="fit", else the one depth given."""
        return list(DEPTHS) if isinstance(self.depth, str) and self.depth == FIT else [_check_depth(self.depth)]

    def _given(self) -> list[float | None]:
        """The hyperparameters in the order ``HYPERPARAMETERS``: each given number, None where ``FIT``."""
        return [check_hyperparameter(self.noise, "noise", "the observation noise variance"),
                check_hyperparameter(self.weight_var, "weight_var", "the variance of the readout weights", True),
                check_hyperparameter(self.bias_var, "bias_var", "the variance of the readout bias")]

    def _fit_targets(self, X: np.ndarray, targets: np.ndarray, labels: np.ndarray | None = None) -> None:
        """The prior and posterior of (X, targets) in each batching (stratified by ``labels`` where given), with the
        hyperparameters given as ``FIT`` fitted (``fit_hyperparameters``) and kept, with the given ones, as
        ``noise_``, ``weight_var_``, ``bias_var_``; the other parameters they used are kept as the fitted ``phi_``,
        ``depth_`` (with depth="fit" the one of ``DEPTHS`` of largest fitted evidence, each depth's in
        ``depth_evidence_``), ``batch_size_``, ``nodes_``, which ``predict`` reads (set_params changes nothing until
        refit; ``device`` and ``client`` say where to compute, and are read anew by each call). ``train_rows_``,
        ``kernel_`` (the prior K of the training copies at weight_var 1 without bias), ``posterior_`` and
        ``jitter_`` are each batching's (stacked over R random batchings: ``jitter_`` their largest),
        ``log_marginal_likelihood_`` the mean of their log evidences."""
        phi = self._validate()
        check_distinct(X, "the BN-NNGP")
        self.phi_, self.nodes_, depths = self.phi, self.nodes, self._depths()
        self.batch_size_ = check_batch_size(self.batch_size)
        self.X_train_ = X
        rows, kernels, observed = [], {depth: [] for depth in depths}, []
        for order in self._draw_batchings(len(X), labels):
            priors = bn_nngp_priors(phi, X[order], depths, self.batch_size_, nodes=self.nodes_, device=self.device,
                                    client=self.client)
            rows.append(order[priors[depths[0]].train_rows])
            observed.append(targets[rows[-1]])
            for depth in depths:
                kernels[depth].append(priors[depth].train)
        fits, posteriors = {}, {}
        for depth in depths:
            fits[depth] = noise, weight_var, bias_var = fit_hyperparameters(kernels[depth], observed, self._given())
            posteriors[depth] = [gp_posterior(weight_var * kernel + bias_var, y, noise)
                                 for kernel, y in zip(kernels[depth], observed)]
        self.depth_evidence_ = {depth: float(np.mean([p.log_marginal_likelihood for p in posteriors[depth]]))
                                for depth in depths}
        self.depth_ = max(depths, key=self.depth_evidence_.get)
        self.noise_, self.weight_var_, self.bias_var_ = map(float, fits[self.depth_])
        kernels, posteriors = kernels[self.depth_], posteriors[self.depth_]
        self._posteriors, self._kernels, self._observed = posteriors, kernels, observed
        self._keep(train_rows=rows, kernel=kernels, posterior=posteriors)
        self.jitter_ = max(p.jitter for p in posteriors)
        self.log_marginal_likelihood_ = self.depth_evidence_[self.depth_]

    def log_marginal_likelihood(self, theta: np.ndarray | None = None, eval_gradient: bool = False):
        """log p(y | X) (summed over output columns; the mean over the batchings) of the prior weight_var K +
        bias_var 11^T with noise variance ``noise``, as scikit-learn's GaussianProcessRegressor: at ``theta`` = the
        logs of (noise, weight_var, bias_var) (``HYPERPARAMETERS``), with ``eval_gradient`` also its gradient in
        theta (3,); ``theta`` None: the fitted model's ``log_marginal_likelihood_``. The prior K is the fitted one
        (depth, batch size, batchings); compare the evidence of those by fitting them."""
        check_is_fitted(self, "posterior_")
        if theta is None:
            if check_flag(eval_gradient, "eval_gradient"):
                raise ValueError("eval_gradient needs theta: the gradient is taken at a given hyperparameter vector")
            return self.log_marginal_likelihood_
        theta = check_real_array(theta, "theta", 1, why="the logs of (noise, weight_var, bias_var)")
        if theta.shape != (len(HYPERPARAMETERS),):
            raise ValueError(f"theta must hold the logs of {', '.join(HYPERPARAMETERS)}: shape (3,), got shape "
                             f"{theta.shape}")
        with np.errstate(over="ignore"):
            variances = check_finite_result(np.exp(theta), "exp(theta), the variances (theta above ~709)")
        value, gradient = mean_evidence(self._kernels, self._observed, variances)
        return (value, gradient) if check_flag(eval_gradient, "eval_gradient") else value

    def _kernel(self, X_train: np.ndarray, X_test: np.ndarray, covariance: bool) -> BatchedPrior:
        return bn_nngp_prior(self.phi_, X_train, self.depth_, self.batch_size_, X_test=X_test, nodes=self.nodes_,
                             device=self.device, client=self.client, test_covariance=covariance)

    def _batchings(self, X: np.ndarray, return_std: bool = False,
                   return_cov: bool = False) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """Each batching's posterior mean (t, outputs) of the latent function at X, and its standard deviation (t,)
        or covariance (t, t) (shared by every output column: one kernel, one noise), under the prior weight_var K +
        bias_var 11^T."""
        results = []
        for order, posterior in zip(self.batch_orders_, self._posteriors):
            blocks = test_kernel(self._kernel, self.X_train_[order], X, self.batch_size_, self.batching_ == "random",
                                 return_cov)
            cross, diagonal, test = (None if block is None else self.weight_var_ * block + self.bias_var_
                                     for block in blocks)
            mean = cross @ posterior.alpha
            if not (return_std or return_cov):
                results.append((mean, None))
                continue
            v = solve_triangular(posterior.factor[0], cross.T, lower=True)
            spread = test - v.T @ v if return_cov else np.clip(diagonal - np.sum(v * v, axis=0), 0.0, None)
            results.append((mean, spread))
        return results

    def _batch_means(self, X: np.ndarray) -> list[np.ndarray]:
        return [mean for mean, _ in self._batchings(X)]

    def _predict_latent(self, X: np.ndarray, return_std: bool = False,
                        return_cov: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """The posterior mean (t, outputs) of the latent function at X, and its standard deviation (t,) or
        covariance (t, t): the means over the batchings of each batching's mean and variance (or covariance)."""
        results = self._batchings(X, return_std, return_cov)
        mean = np.mean([mean for mean, _ in results], axis=0)
        if not (return_std or return_cov):
            return mean, None
        spread = np.mean([spread for _, spread in results], axis=0)
        return mean, spread if return_cov else np.sqrt(spread)


class BatchNormNNGPRegressor(RegressorMixin, _BatchNormNNGP):
    """Gaussian-process regression with the prior of an infinitely wide BN network (see the module docstring).

    Args:
        phi: a positive-homogeneous activation (name or Activation).
        depth: L, the number of BN-phi layers; "fit": the depth of ``DEPTHS`` whose fitted log marginal likelihood
        is largest (all from one recursion, at the cost of the deepest), kept as ``depth_``.
        batch_size: B, the batch size of the network (training and test batching as in the module docstring).
        noise: the observation noise variance added to the diagonal of the prior covariance; "fit" (default):
        fitted by maximising the log marginal likelihood (module docstring), a number: kept fixed. Fitted value:
        ``noise_``.
        normalise_y: centre and scale the targets (the prior's variance is O(1)).
        nodes: Gauss-Jacobi nodes per axis of the Laplace integral, every layer (None: the default rules).
        device: the torch device of the prior's tasks (None: CUDA where there is one, else the CPU).
        client: where the prior is computed: None (here), True (a local Dask cluster), an address, a Client.
        batching: "random": the mean over ``n_batchings`` seeded random batchings of the training rows, each
        test point in a batch of its own with B - 1 training points as context, so predictions do not depend on
        the rows' order nor on which points are predicted together; "ordered": rows batched in the order given,
        test points among themselves (module docstring, **Batching**); the default until "random" costs less.
        n_batchings: R, the random batchings averaged (R priors: R times the cost); ``batching_error(X)`` gives the
        Monte Carlo standard error of the mean prediction over them.
        random_state: the seed of the random batchings (scikit-learn's convention: None, an int, a RandomState).
        weight_var: the variance of the readout weights, which scales the prior K; "fit" or a number > 0, as
        ``noise`` (fitted value ``weight_var_``; 1 is the prior of ``bnsym.nngp.prior``).
        bias_var: the variance of the readout bias, a constant added to the prior; "fit" or a number >= 0, as
        ``noise`` (fitted value ``bias_var_``).

    The posterior mean is the mean of the batchings' posterior means, the posterior variance (``return_std``,
    ``return_cov``, ``sample_y``) the mean of their variances; ``log_marginal_likelihood_`` the mean of their log
    evidences, which the fitted hyperparameters maximise. The defaults were fixed noise 1e-2, weight_var 1,
    bias_var 0 until the hyperparameters were fitted; pass those numbers for the old model. With
    ``batching="ordered"`` the points to predict are cut into batches of ``batch_size`` in the order given, so
    reordering them, or predicting a subset, changes the result (the tag ``batch_order_dependent`` is then True).
    Any ``client`` gives the same result bit for bit (:func:`bn_nngp_priors`).
    """

    def __init__(self, phi: str = "relu", depth: int | str = 2, batch_size: int = 32, noise: float | str = FIT,
                 normalise_y: bool = True, nodes: int | None = None, device: str | None = None,
                 client: object = None, batching: str = "ordered", n_batchings: int = N_BATCHINGS,
                 random_state: int | np.random.RandomState | None = None, weight_var: float | str = FIT,
                 bias_var: float | str = FIT) -> None:
        self.phi = phi
        self.depth = depth
        self.batch_size = batch_size
        self.noise = noise
        self.normalise_y = normalise_y
        self.nodes = nodes
        self.device = device
        self.client = client
        self.batching = batching
        self.n_batchings = n_batchings
        self.random_state = random_state
        self.weight_var = weight_var
        self.bias_var = bias_var

    def __sklearn_tags__(self) -> BatchOrderTags:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X: np.ndarray, y: np.ndarray) -> BatchNormNNGPRegressor:
        """Condition the prior on (X, y); y of shape (n,) or (n, outputs)."""
        self._fit_targets(*regression_targets(self, X, y))
        return self

    def _public(self, mean: np.ndarray) -> np.ndarray:
        return target_units(self, mean, "the posterior mean")

    def predict(self, X: np.ndarray, return_std: bool = False, return_cov: bool = False):
        """Posterior mean (t, ...) of y at X; with ``return_std`` also the latent function's posterior standard
        deviation (t, ...), or with ``return_cov`` its posterior covariance (t, t) ((t, t, outputs) for 2-D y), in
        the targets' units, as scikit-learn's GaussianProcessRegressor (not both). Batch order matters only with
        ``batching="ordered"`` (below)."""
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

    Args as :class:`BatchNormNNGPRegressor` (without ``normalise_y``), batchings as there, the random ones
    stratified by class (each batch holds each class in about its proportion); ``noise``, ``weight_var``,
    ``bias_var`` fitted by default on the sum over the one-hot columns of their log evidences (module docstring).
    """

    def __init__(self, phi: str = "relu", depth: int | str = 2, batch_size: int = 32, noise: float | str = FIT,
                 nodes: int | None = None, device: str | None = None, client: object = None,
                 batching: str = "ordered", n_batchings: int = N_BATCHINGS,
                 random_state: int | np.random.RandomState | None = None, weight_var: float | str = FIT,
                 bias_var: float | str = FIT) -> None:
        self.phi = phi
        self.depth = depth
        self.batch_size = batch_size
        self.noise = noise
        self.nodes = nodes
        self.device = device
        self.client = client
        self.batching = batching
        self.n_batchings = n_batchings
        self.random_state = random_state
        self.weight_var = weight_var
        self.bias_var = bias_var

    def fit(self, X: np.ndarray, y: np.ndarray) -> BatchNormNNGPClassifier:
        """Condition the prior on one-hot codes of the labels y, centred by 1 / (number of classes)."""
        X, codes = classification_targets(self, X, y)
        self._fit_targets(X, codes, np.argmax(codes, axis=1))
        return self

    def _public(self, scores: np.ndarray) -> np.ndarray:
        return scores[:, 1] - scores[:, 0] if len(self.classes_) == 2 else scores

    def _latent(self, X: np.ndarray, return_std: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        check_is_fitted(self, "posterior_")
        X = _validate_data(self, X, reset=False, dtype=float)
        return self._predict_latent(X, return_std=return_std)

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """The posterior mean of the centred one-hot code, (n, classes); for two classes the difference
        (second minus first), as scikit-learn's binary classifiers return."""
        return self._public(self._latent(X)[0])

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The label with the largest posterior mean."""
        scores = self._latent(X)[0]
        return self.classes_[np.argmax(scores, axis=1)]

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """P(class c has the largest latent value at x | data), (n, classes): :func:`argmax_probabilities` of the
        posterior means m_c(x) and the common posterior standard deviation s(x) (the class outputs are independent
        GPs with one kernel and one noise, so at one point they are independent normals of one variance), both as
        averaged over the batchings (``_predict_latent``). Its argmax is ``predict``'s label."""
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


def flow_weights(theta: np.ndarray, targets: np.ndarray, t: float) -> np.ndarray:
    """Theta^-1 (I - exp(-t Theta)) y for a PSD kernel ``theta`` (m, m) and targets (m, outputs), through the
    eigendecomposition (module docstring); exp(-t lambda) is 0 at t = inf."""
    values, vectors = np.linalg.eigh((theta + theta.T) / 2)
    values = np.clip(values, 0.0, None)
    learnt = values > RCOND * values.max()
    if math.isinf(t):
        gain = np.where(learnt, 1.0 / np.where(learnt, values, 1.0), 0.0)
    else:  # t (1 - exp(-z)) / z at z = t lambda, whose limit at z = 0 is t
        z = t * values
        gain = np.where(z > 0, -np.expm1(-z) / np.where(z > 0, values, 1.0), t)
    return vectors @ (gain[:, None] * (vectors.T @ targets))


class _BatchNormNTK(BatchedEstimator):
    """What the regressor and the classifier share: validation, the NTK and the gradient-flow weights."""

    def _validate(self) -> Activation:
        batch = check_batch_size(self.batch_size)
        phi = check_activation(parse_activation(self.phi), batch, slope=True)
        check_whole_number(self.depth, "depth", 1, MAX_DEPTH, "the number of Dense-BN-phi layers")
        check_range(self.t, "t", 0.0, infinite_ok=True, why="the training time times the learning rate")
        check_sampling(self.points, self.replicates, self.seed)
        check_flag(getattr(self, "normalise_y", False), "normalise_y")
        self._check_placement()
        return phi

    def _kernel(self, X_train: np.ndarray, X_test: np.ndarray | None = None, covariance: bool = False):
        return bn_ntk(self.phi_, X_train, self.depth_, self.batch_size_, X_test=X_test, points=self.points_,
                      replicates=self.replicates_, seed=self.seed_, nodes=self.nodes_, device=self.device,
                      client=self.client)

    def _fit_targets(self, X: np.ndarray, targets: np.ndarray, labels: np.ndarray | None = None) -> None:
        """The NTK of the training copies (``kernel_``) and the gradient-flow weights (``weights_``) of each
        batching (stratified by ``labels`` where given; ``kernel_``, ``weights_``, ``train_rows_`` stacked over R
        random batchings); the parameters they used are kept as the fitted ``phi_``, ``depth_``, ``batch_size_``,
        ``t_``, ``points_``, ``replicates_``, ``seed_``, ``nodes_``, which ``predict`` reads (set_params changes nothing
        until refit; ``device`` and ``client`` say where to compute, and are read anew by each call)."""
        self._validate()
        self.phi_ = self.phi  # as given (a name pickles; a parsed activation holds local functions)
        check_distinct(X, "the BN-NTK")
        copies = -(-len(X) // int(self.batch_size)) * int(self.batch_size)
        if copies > MAX_COPIES:
            raise ValueError(f"{len(X)} training points make {copies} training copies at batch size "
                             f"{self.batch_size}, above {MAX_COPIES}: gradient flow eigendecomposes their "
                             f"{copies} x {copies} NTK (O(m^3) operations, {3 * copies**2 * 8 / 2**30:.1f} GiB held), "
                             "and the NTK itself takes one layer map per pair of batches per layer; use a subset")
        self.depth_, self.batch_size_ = int(self.depth), int(self.batch_size)
        self.t_ = float(self.t)
        self.points_, self.replicates_, self.seed_ = int(self.points), int(self.replicates), int(self.seed)
        self.nodes_ = self.nodes
        self.X_train_ = X
        rows, kernels, weights = [], [], []
        for order in self._draw_batchings(len(X), labels):
            kernel = self._kernel(X[order])
            rows.append(order[kernel.train_rows])
            kernels.append(kernel.train)
            weights.append(check_finite_result(flow_weights(kernel.train, targets[rows[-1]], self.t_),
                                               "the gradient-flow weights (centre and scale the targets)"))
        self._weights = weights
        self._keep(train_rows=rows, kernel=kernels, weights=weights)

    def _batch_means(self, X: np.ndarray) -> list[np.ndarray]:
        """Each batching's mean prediction (t, outputs) at X."""
        return [test_kernel(self._kernel, self.X_train_[order], X, self.batch_size_, self.batching_ == "random")[0]
                @ weights for order, weights in zip(self.batch_orders_, self._weights)]

    def _predict_latent(self, X: np.ndarray) -> np.ndarray:
        """The mean over the batchings of their mean predictions."""
        return np.mean(self._batch_means(X), axis=0)


class BatchNormNTKRegressor(RegressorMixin, _BatchNormNTK):
    """The mean prediction of an infinitely wide BN network trained by gradient flow on the squared loss up to time
    ``t`` (module docstring).

    Args:
        phi: the activation (name or Activation), any that :func:`bnsym.arch.ntk` accepts.
        depth: L, the number of Dense-BN-phi layers.
        batch_size: B, the batch size of the network (training and test batching as in :mod:`bnsym.nngp`).
        t: the training time times the learning rate (inf: the end of training, kernel regression).
        normalise_y: centre and scale the targets.
        points, replicates, seed: the quasi-Monte Carlo sampling of each NTK block, where phi is not
        positive-homogeneous of degree 1-3 (those take the Laplace route: :func:`bnsym.nngp.ntk.bn_ntk`).
        nodes: Gauss-Jacobi nodes per axis of the Laplace route, every layer (None: its default rules, ~1e-8; the
        BN-NNGP's rule, 6 at B >= 16, gives ~1e-5 on digits at a quarter to a third of the time).
        device: the torch device of the Laplace route's tasks (None: CUDA where there is one, else the CPU).
        client: where the Laplace route's tasks run: None (here), True (a local Dask cluster), an address, a Client.
        batching, n_batchings, random_state: as for :class:`bnsym.nngp.BatchNormNNGPRegressor` (module docstring,
        **Batching**): with "random", the mean over R random batchings of each batching's mean prediction, each test
        point in a batch of its own with training points as context; ``batching_error(X)`` its Monte Carlo error.

    With ``batching="ordered"`` predictions depend on which test points share a batch (the tag
    ``batch_order_dependent`` is then True).
    """

    def __init__(self, phi: str = "relu", depth: int = 2, batch_size: int = 32, t: float = math.inf,
                 normalise_y: bool = True, points: int = 2**12, replicates: int = 16, seed: int = 0,
                 nodes: int | None = None, device: str | None = None, client: object = None,
                 batching: str = "ordered", n_batchings: int = N_BATCHINGS,
                 random_state: int | np.random.RandomState | None = None) -> None:
        self.phi = phi
        self.depth = depth
        self.batch_size = batch_size
        self.t = t
        self.normalise_y = normalise_y
        self.points = points
        self.replicates = replicates
        self.seed = seed
        self.nodes = nodes
        self.device = device
        self.client = client
        self.batching = batching
        self.n_batchings = n_batchings
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X: np.ndarray, y: np.ndarray) -> BatchNormNTKRegressor:
        """Train on (X, y); y of shape (n,) or (n, outputs)."""
        self._fit_targets(*regression_targets(self, X, y))
        return self

    def _public(self, mean: np.ndarray) -> np.ndarray:
        return target_units(self, mean, "the mean prediction")

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The mean prediction at time t (batched as the module docstring says)."""
        check_is_fitted(self, "weights_")
        X = _validate_data(self, X, reset=False, dtype=float)
        return target_units(self, self._predict_latent(X), "the mean prediction")


class BatchNormNTKClassifier(ClassifierMixin, _BatchNormNTK):
    """Classification by BN-NTK regression on centred one-hot targets; ``predict`` returns the argmax label.

    Args as :class:`BatchNormNTKRegressor` (without ``normalise_y``); random batchings stratified by class.
    """

    def __init__(self, phi: str = "relu", depth: int = 2, batch_size: int = 32, t: float = math.inf,
                 points: int = 2**12, replicates: int = 16, seed: int = 0,
                 nodes: int | None = None, device: str | None = None, client: object = None,
                 batching: str = "ordered", n_batchings: int = N_BATCHINGS,
                 random_state: int | np.random.RandomState | None = None) -> None:
        self.phi = phi
        self.depth = depth
        self.batch_size = batch_size
        self.t = t
        self.points = points
        self.replicates = replicates
        self.seed = seed
        self.nodes = nodes
        self.device = device
        self.client = client
        self.batching = batching
        self.n_batchings = n_batchings
        self.random_state = random_state

    def fit(self, X: np.ndarray, y: np.ndarray) -> BatchNormNTKClassifier:
        """Train on the centred one-hot codes of the labels y."""
        X, codes = classification_targets(self, X, y)
        self._fit_targets(X, codes, np.argmax(codes, axis=1))
        return self

    def _public(self, scores: np.ndarray) -> np.ndarray:
        return scores[:, 1] - scores[:, 0] if len(self.classes_) == 2 else scores

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """The mean prediction of the centred one-hot code, (n, classes); for two classes the difference (second
        minus first), as scikit-learn's binary classifiers return."""
        check_is_fitted(self, "weights_")
        return self._public(self._predict_latent(_validate_data(self, X, reset=False, dtype=float)))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The label with the largest mean prediction."""
        scores = self.decision_function(X)
        index = (scores > 0).astype(int) if scores.ndim == 1 else np.argmax(scores, axis=1)
        return self.classes_[index]
