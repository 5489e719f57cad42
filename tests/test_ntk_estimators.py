"""The BN-NTK estimators: the gradient-flow mean prediction against an independent route (explicit Euler steps of the
flow in function space), trained finite networks, and scikit-learn's estimator contract."""

import math

import numpy as np
import pytest
import torch
from scipy.linalg import expm
from sklearn.datasets import load_wine, make_blobs
from sklearn.model_selection import cross_val_score, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import (
    check_methods_sample_order_invariance,
    check_methods_subset_invariance,
    parametrize_with_checks,
)

from bnsym.arch import Activation, BatchNorm, Dense, repeat
from bnsym.nngp import BatchNormNNGPClassifier, batch_layout
from bnsym.nngp.estimators import BatchNormNTKClassifier, BatchNormNTKRegressor, flow_weights
from bnsym.nngp.ntk import bn_ntk
from bnsym.sim import mc_tolerance
from bnsym.train.tangent import train_on_batches

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((16, 6))
    return X, np.sin(X[:, 0]) + X[:, 1], rng.standard_normal((8, 6))


def test_flow_weights_follow_the_flow():
    """Theta^-1 (I - exp(-t Theta)) y against the matrix exponential, and at t = inf against a linear solve; t = 0
    learns nothing."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 6))
    theta, y = a @ a.T + 0.1 * np.eye(6), rng.standard_normal((6, 2))
    for t in (0.3, 5.0):
        expected = np.linalg.solve(theta, (np.eye(6) - expm(-t * theta)) @ y)
        np.testing.assert_allclose(flow_weights(theta, y, t), expected, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(flow_weights(theta, y, math.inf), np.linalg.solve(theta, y), rtol=1e-8)
    np.testing.assert_array_equal(flow_weights(theta, y, 0.0), 0.0)


def test_the_regressor_is_the_flow_of_the_kernel(data):
    """predict = Theta(x*, X) Theta^-1 (I - exp(-t Theta)) y with the kernels of bn_ntk, through the training copies
    (16 points, B = 8: two batches); at t = inf the training copies are interpolated by the within-training kernel."""
    X, y, X_test = data
    train, test = bn_ntk("relu", X, 1, 8), bn_ntk("relu", X, 1, 8, X_test=X_test)
    for t in (2.0, math.inf):
        model = BatchNormNTKRegressor(depth=1, batch_size=8, t=t, normalise_y=False, batching="ordered").fit(X, y)
        weights = np.linalg.solve(train.train, (np.eye(16) - expm(-t * train.train)) @ y) if math.isfinite(t) \
            else np.linalg.solve(train.train, y)
        np.testing.assert_allclose(model.predict(X_test), test.cross @ weights, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(train.train @ model.weights_[:, 0], y, rtol=1e-6, atol=1e-9)


def test_trained_wide_networks_approach_the_estimator(data):
    """The centred network f - f_0, trained by full-batch gradient descent to t = lr x steps on fixed batches, has
    the estimator's prediction at time t as its wide limit: each network's distance to it shrinks with the width,
    and at the widest their mean agrees with it within the seeds' standard error (Bonferroni over the test points)
    plus the Euler error of the steps (here 0.3% of the prediction)."""
    X, y, X_test = data
    layout = batch_layout(X, 8, X_test)
    net = repeat([Dense(), BatchNorm(), Activation("relu")], 1)
    lr, steps = 0.01, 50
    model = BatchNormNTKRegressor(depth=1, batch_size=8, t=lr * steps, normalise_y=False, batching="ordered").fit(X, y)
    target = model.predict(X_test)
    seeds, distances = 4, []
    for width in (64, 512):
        runs = train_on_batches(net, layout.batches[:2], y[layout.rows][..., None], layout.batches[2:], width,
                                seeds, lr, steps)
        runs = runs.reshape(seeds, -1)[:, :len(X_test)]
        distances.append(np.sqrt(np.mean((runs - target) ** 2)))
    assert distances[1] < distances[0] / 2, distances
    se = runs.std(0, ddof=1) / np.sqrt(seeds)
    euler = 0.01 * np.abs(target).max()
    assert np.all(np.abs(runs.mean(0) - target) <= mc_tolerance(seeds, len(X_test)) * se + euler)


def test_the_classifier_predicts_labels(data):
    X, y, X_test = data
    labels = np.where(y > 0, "up", "down")
    model = BatchNormNTKClassifier(depth=1, batch_size=8).fit(X, labels)
    assert set(model.predict(X_test)) <= {"up", "down"}
    assert np.mean(model.predict(X) == labels) > 0.8  # the training points, batched as test points


@pytest.mark.parametrize("params, match", [
    ({"depth": 0}, "depth"),
    ({"batch_size": 3}, "below 4"),
    ({"t": -1.0}, "t must be"),
    ({"points": 100}, "power of 2"),
])
def test_bad_parameters(data, params, match):
    X, y, _ = data
    with pytest.raises(ValueError, match=match):
        BatchNormNTKRegressor(**{"batch_size": 8, **params}).fit(X, y)


def test_bad_data(data):
    X, y, _ = data
    with pytest.raises(ValueError, match="distinct"):
        BatchNormNTKRegressor(batch_size=4).fit(np.ones((8, 2)), np.zeros(8))
    model = BatchNormNTKRegressor(batch_size=8, depth=1).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :3])


# scikit-learn's checks that fit 2-feature data (make_blobs): each batch's centred inputs span 2 dimensions, where the
# eps = 0 BN-NTK is infinite (bnsym.nngp.ntk.check_spans; on the checks' 300 blobs at B = 16 the Laplace route's kernel
# changes by 14% from 12 nodes to the default and has an eigenvalue -0.5% of its largest, and the classifier
# scored 0.30, where the BN-NNGP scores 0.92); the estimators refuse such data, and these checks must fail so
FEW_FEATURES = {"check_estimators_overwrite_params", "check_estimators_fit_returns_self", "check_readonly_memmap_input",
                "check_fit_idempotent", "check_fit_check_is_fitted", "check_n_features_in",
                "check_classifier_data_not_an_array", "check_classifiers_classes", "check_classifiers_train"}
FEW_FEATURES_REASON = ("fits 2-feature data, whose batches span 2 dimensions: the eps = 0 BN-NTK is infinite there "
                       "(bnsym.nngp.ntk.check_spans), and the estimators raise a ValueError saying so")


BATCH_ORDER = ("a train-mode BN network's output for x depends on which points share x's batch, so predictions "
               "change when the points to predict are reordered or predicted in subsets (the module docstring)")


@parametrize_with_checks(
    [BatchNormNTKRegressor(depth=1, batch_size=16, nodes=12), BatchNormNTKClassifier(depth=1, batch_size=16, nodes=12)],
    expected_failed_checks=lambda estimator: {"check_methods_sample_order_invariance": BATCH_ORDER,
                                              "check_methods_subset_invariance": BATCH_ORDER})
def test_scikit_learn_estimator_checks(estimator, check):
    """Every check of scikit-learn's that applies; with the default batching="ordered" the two batch-order ones fail by
    design (batching="random" passes them: test_nngp.py), and those fitting 2-feature data must fail with the
    estimators' refusal of such data (then reported as expected failures). Twelve nodes per axis keep this fast
    (4.6e-7 of the largest entry from the default rule on the checks' 200 x 10 regression data; 0.56 s against 4.4 s
    per kernel)."""
    if getattr(check, "func", check).__name__ in FEW_FEATURES:
        with pytest.raises(ValueError, match="span at least 3 dimensions"):
            check(estimator)
        pytest.xfail(FEW_FEATURES_REASON)
    check(estimator)


def test_the_classifier_interpolates_blobs_that_span_enough_dimensions():
    """scikit-learn's check_classifiers_train on its blobs with 4 features instead of 2 (each batch spanning 4
    dimensions): at t = inf the predictions on the training points, batched as the training copies, reproduce
    the training labels, beyond the check's 0.83."""
    X, y = make_blobs(n_samples=200, n_features=4, random_state=0)
    X = StandardScaler().fit_transform(X)
    model = BatchNormNTKClassifier(depth=1, batch_size=16, nodes=12).fit(X, y)
    assert np.linalg.eigvalsh(model.kernel_).min() > 0
    np.testing.assert_array_equal(model.predict(X), y)


CLASSIFIERS = [BatchNormNNGPClassifier, BatchNormNTKClassifier]


@pytest.mark.slow
@pytest.mark.parametrize("classifier", CLASSIFIERS)
def test_wine_in_its_own_order_cross_validates(classifier):
    """Issue 43: wine as it arrives (sorted by class), 5-fold cross_val_score at B = 16 with batching="random" (not
    yet the default: its cost, see the estimators' docstring) is at least 0.90 (logistic regression: 0.98). The
    in-order batching cuts the sorted rows into single-class batches, which batch norm centres away: 0.57 (BN-NNGP)
    and 0.64 (BN-NTK), so the test can fail. One batching keeps it to ~1/4 of the CPU of the default four (~80 s
    BN-NNGP, ~280 s BN-NTK on a loaded 2-core machine); the bound holds for each batching, not only for their mean."""
    X, y = load_wine(return_X_y=True)
    model = make_pipeline(StandardScaler(), classifier(batch_size=16, batching="random", n_batchings=1,
                                                       random_state=0))
    assert cross_val_score(model, X, y).mean() >= 0.90


def test_in_order_batching_fails_on_sorted_wine():
    """The old behaviour, kept as batching="ordered": on sorted wine its cross-validated accuracy is far below
    0.90 (the bound the default batching must reach), and it fails scikit-learn's row-order checks."""
    X, y = load_wine(return_X_y=True)
    ordered = make_pipeline(StandardScaler(), BatchNormNNGPClassifier(batch_size=16, batching="ordered"))
    assert cross_val_score(ordered, X, y).mean() < 0.80
    for check in (check_methods_sample_order_invariance, check_methods_subset_invariance):
        with pytest.raises(AssertionError):
            check("ordered", BatchNormNNGPClassifier(depth=1, batch_size=16, nodes=12, batching="ordered"))


@pytest.fixture(scope="module")
def sorted_wine():
    """Standardised wine, split stratified at random, both halves sorted by class (as the data set ships)."""
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.33, stratify=y, random_state=0)
    train, test = np.argsort(y_train, kind="stable"), np.argsort(y_test, kind="stable")
    return X_train[train], y_train[train], X_test[test], y_test[test]


@pytest.mark.parametrize("classifier", CLASSIFIERS)
def test_one_fitted_model_scores_sorted_and_shuffled_rows_alike(sorted_wine, classifier):
    """Issue 43: one fitted model scores the sorted and the shuffled test rows within 0.05 (in fact identically: each
    test point has its own batch), and a point's prediction alone equals it among the others, within 0.1 in
    probability (BN-NNGP) or in decision value (BN-NTK; rounding here). The in-order batching misses both bounds
    (measured: 0.49 sorted against 0.97 shuffled; probabilities 0.9 apart), so these checks can fail."""
    X_train, y_train, X_test, y_test = sorted_wine
    shuffled = np.random.default_rng(0).permutation(len(X_test))
    for batching, invariant in (("random", True), ("ordered", False)):
        model = classifier(batch_size=16, n_batchings=1, random_state=0, batching=batching).fit(X_train, y_train)
        gap = abs(model.score(X_test, y_test) - model.score(X_test[shuffled], y_test[shuffled]))
        score = model.predict_proba if hasattr(model, "predict_proba") else model.decision_function
        among, alone = score(X_test), np.concatenate([score(X_test[i:i + 1]) for i in (0, len(X_test) - 1)])
        moved = np.abs(alone - among[[0, -1]]).max()
        assert (gap <= 0.05 and moved <= 0.1) == invariant, (batching, gap, moved)


def test_batching_error_is_the_spread_of_the_batchings(sorted_wine):
    """batching_error: the standard deviation over the R batchings of their decision values over sqrt(R), which
    decision_function averages; inf for one random batching, 0 in order."""
    X_train, y_train, X_test, _ = sorted_wine
    model = BatchNormNNGPClassifier(batch_size=16, batching="random", n_batchings=3, random_state=1)
    model.fit(X_train, y_train)
    each = np.stack([model._public(mean) for mean in model._batch_means(X_test[:5])])
    np.testing.assert_allclose(model.decision_function(X_test[:5]), each.mean(0), rtol=1e-12)
    np.testing.assert_allclose(model.batching_error(X_test[:5]), each.std(0, ddof=1) / np.sqrt(3), rtol=1e-12)
    assert model.train_rows_.shape[0] == 3 and len(model.posterior_) == 3
    assert np.all(np.isinf(model.set_params(n_batchings=1).fit(X_train, y_train).batching_error(X_test[:2])))
    assert np.all(model.set_params(batching="ordered").fit(X_train, y_train).batching_error(X_test[:2]) == 0)
