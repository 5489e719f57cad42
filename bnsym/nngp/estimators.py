"""Kernel-regime predictions of an infinitely wide batch-normalised network trained by gradient flow.

**Premises.** The network and the batching are the BN-NNGP's (:mod:`bnsym.nngp`): [Dense, BN, phi] * depth, eps =
0, no bias, f = v . x^L / sqrt(N), every W^l and v trained in the NTK parametrisation; the training set is cut into
fixed BN batches of B consecutive rows (the last wrapping around to the first rows: m = k B training copies), test
points are batched among themselves; each batch's centred inputs must span at least 3 dimensions (at eps = 0 the NTK
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
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ..arch.network import check_sampling
from ..core.activations import Activation, parse_activation
from ..core.validation import (
    check_activation,
    check_batch_size,
    check_finite_result,
    check_flag,
    check_range,
    check_whole_number,
)
from .ntk import MAX_DEPTH, bn_ntk
from .prior import (
    BatchedEstimator,
    _validate_data,
    check_distinct,
    classification_targets,
    regression_targets,
    target_units,
)

RCOND = 1e-12  # eigenvalues of Theta below this times the largest are rounding: unlearnt at t = inf
MAX_COPIES = 2**14  # training copies m: the flow eigendecomposes the m x m NTK, O(m^3), three m x m float64 arrays


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

    def _kernel(self, X: np.ndarray | None = None):
        return bn_ntk(self.phi_, self.X_train_, self.depth_, self.batch_size_, X_test=X, points=self.points_,
                      replicates=self.replicates_, seed=self.seed_, nodes=self.nodes_, device=self.device,
                      client=self.client)

    def _fit_targets(self, X: np.ndarray, targets: np.ndarray) -> None:
        """The NTK of the training copies (``kernel_``) and the gradient-flow weights; the parameters they used are
        kept as the fitted ``phi_``, ``depth_``, ``batch_size_``, ``t_``, ``points_``, ``replicates_``, ``seed_``,
        ``nodes_``, which ``predict`` reads (set_params changes nothing until refit; ``device`` and ``client`` say where
        to compute, and are read anew by each call)."""
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
        kernel = self._kernel()
        self.train_rows_, self.kernel_ = kernel.train_rows, kernel.train
        self.weights_ = check_finite_result(flow_weights(kernel.train, targets[kernel.train_rows], self.t_),
                                            "the gradient-flow weights (centre and scale the targets)")

    def _predict_latent(self, X: np.ndarray) -> np.ndarray:
        return self._kernel(X).cross @ self.weights_


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

    Predictions depend on which test points share a batch, as for :class:`bnsym.nngp.BatchNormNNGPRegressor` (the
    tag ``batch_order_dependent`` says so).
    """

    def __init__(self, phi: str = "relu", depth: int = 2, batch_size: int = 32, t: float = math.inf,
                 normalise_y: bool = True, points: int = 2**12, replicates: int = 16, seed: int = 0,
                 nodes: int | None = None, device: str | None = None, client: object = None) -> None:
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

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X: np.ndarray, y: np.ndarray) -> BatchNormNTKRegressor:
        """Train on (X, y); y of shape (n,) or (n, outputs)."""
        self._fit_targets(*regression_targets(self, X, y))
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The mean prediction at time t, test points batched among themselves."""
        check_is_fitted(self, "weights_")
        X = _validate_data(self, X, reset=False, dtype=float)
        return target_units(self, self._predict_latent(X), "the mean prediction")


class BatchNormNTKClassifier(ClassifierMixin, _BatchNormNTK):
    """Classification by BN-NTK regression on centred one-hot targets; ``predict`` returns the argmax label.

    Args as :class:`BatchNormNTKRegressor` (without ``normalise_y``).
    """

    def __init__(self, phi: str = "relu", depth: int = 2, batch_size: int = 32, t: float = math.inf,
                 points: int = 2**12, replicates: int = 16, seed: int = 0,
                 nodes: int | None = None, device: str | None = None, client: object = None) -> None:
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

    def fit(self, X: np.ndarray, y: np.ndarray) -> BatchNormNTKClassifier:
        """Train on the centred one-hot codes of the labels y."""
        self._fit_targets(*classification_targets(self, X, y))
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """The mean prediction of the centred one-hot code, (n, classes); for two classes the difference (second
        minus first), as scikit-learn's binary classifiers return."""
        check_is_fitted(self, "weights_")
        scores = self._predict_latent(_validate_data(self, X, reset=False, dtype=float))
        return scores[:, 1] - scores[:, 0] if len(self.classes_) == 2 else scores

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The label with the largest mean prediction."""
        scores = self.decision_function(X)
        index = (scores > 0).astype(int) if scores.ndim == 1 else np.argmax(scores, axis=1)
        return self.classes_[index]
