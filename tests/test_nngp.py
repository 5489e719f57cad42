"""bnsym.nngp: the BN-NNGP prior against independent routes and finite networks, and the estimators' contract."""

import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.model_selection import cross_val_score
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import (
    check_methods_sample_order_invariance,
    check_methods_subset_invariance,
    parametrize_with_checks,
)

import bnsym
import bnsym.core.digits
from bnsym.meanfield.kernels import gauss_hermite_kernel
from bnsym.nngp import (
    MAX_DEPTH,
    MAX_LAYER_MAPS,
    BatchNormNNGPClassifier,
    BatchNormNNGPRegressor,
    KernelConditioningWarning,
    arccos_nngp_kernel,
    argmax_probabilities,
    block_prior,
    bn_nngp_prior,
    bn_nngp_priors,
    fill_batches,
    gp_posterior,
)
from bnsym.sim import extrapolate_to_infinite_width, mc_tolerance
from bnsym.sim.batches import simulate_batched_gram

torch.set_num_threads(1)  # tiny matrices: a second thread only adds contention


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((12, 5))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(12)


def test_fill_batches_wraps_around():
    assert fill_batches(10, 4).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]


def test_within_batch_blocks_are_bn_kernels(data):
    """The diagonal blocks of the prior iterate the one-batch map (an independent one-dimensional Laplace route)."""
    X, _ = data
    prior = bn_nngp_prior("relu", X, 2, 4).train
    for k in range(3):
        rows = slice(4 * k, 4 * k + 4)
        expected = bnsym.bn_kernel("relu", bnsym.bn_kernel("relu", X[rows] @ X[rows].T / X.shape[1]))
        assert np.abs(prior[rows, rows] - expected).max() < 1e-6  # default_nodes(4) = 24: about 1e-7


@pytest.mark.parametrize("nodes, bound", [(None, 1e-4), (12, 1e-7)])
def test_node_rules_on_digits_meet_their_stated_error(nodes, bound):
    """Standardised digits (B = 32, four batches, depth 2) spread their batches' eigenvalues over two to three
    decades, the hard case of the Gauss-Jacobi rule: the default rule (6 nodes per axis) and 12 nodes stay within
    the errors that :func:`bnsym.nngp.default_nodes` states, against 24 nodes per axis (converged to 1e-14)."""
    X = bnsym.core.digits.digits(torch.float64).x_train.numpy()[:128]
    reference = bn_nngp_prior("relu", X, 2, 32, nodes=24).train
    error = np.abs(bn_nngp_prior("relu", X, 2, 32, nodes=nodes).train - reference).max()
    assert error < bound * np.abs(reference).max()


def test_prior_is_the_infinite_width_limit_of_networks(data):
    """Extrapolating the mean Gram of finite networks (widths 128, 256, 512) as a + b / N recovers the prior."""
    X, _ = data
    prior = bn_nngp_prior("relu", X, 2, 4).train
    upper = np.triu_indices(len(X))
    widths = np.array([128, 256, 512])
    n_networks = 200
    grams = [simulate_batched_gram("relu", X, 2, 4, int(w), n_networks, seed=int(w)).numpy()[:, *upper]
             for w in widths]
    means = np.array([g.mean(0) for g in grams])
    ses = np.array([g.std(0, ddof=1) / np.sqrt(n_networks) for g in grams])
    k = mc_tolerance(n_networks, n_comparisons=len(upper[0]))
    for entry in range(len(upper[0])):
        intercept, se, _ = extrapolate_to_infinite_width(widths, means[:, entry], ses[:, entry])
        assert abs(intercept - prior[upper][entry]) < k * se


def test_regressor_fits_predicts_and_reports(data):
    X, y = data
    model = BatchNormNNGPRegressor(depth=2, batch_size=4, noise=1e-3, batching="ordered").fit(X, y)
    mean, std = model.predict(X[:5], return_std=True)
    assert mean.shape == std.shape == (5,) and np.all(std >= 0) and np.isfinite(model.log_marginal_likelihood_)
    assert model.jitter_ == 0.0 and model.score(X, y) > 0.9  # in order, X is batched as its training copies
    assert clone(model).get_params() == model.get_params()
    assert model.set_params(depth=3).depth == 3


def test_classifier_in_cross_validation():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(-1, 1, (16, 3)), rng.normal(1, 1, (16, 3))])
    y = np.repeat(["a", "b"], 16)
    order = rng.permutation(32)
    scores = cross_val_score(BatchNormNNGPClassifier(depth=1, batch_size=4), X[order], y[order], cv=2)
    assert scores.mean() > 0.7
    assert set(BatchNormNNGPClassifier(batch_size=4).fit(X, y).predict(X[:3])) <= {"a", "b"}


def test_jitter_is_added_and_reported():
    kernel = np.ones((3, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        posterior = gp_posterior(kernel, np.zeros(3), noise=0.0)
    assert posterior.jitter > 0 and any(issubclass(w.category, KernelConditioningWarning) for w in caught)


@pytest.mark.parametrize("kernel", [np.zeros((4, 4)), np.diag([1.0, -1.0])])
def test_a_singular_kernel_is_refused_not_looped_on(kernel):
    """A zero mean diagonal once made the jitter 0 x 10^k for ever."""
    with pytest.raises(ValueError, match="singular|zero diagonal"):
        gp_posterior(kernel, np.ones(len(kernel)), 0.0)


@pytest.mark.parametrize("params", [{"batch_size": 8}, {"phi": "identity"}, {"depth": 3}])
def test_parameters_set_after_fit_change_nothing_until_the_next_fit(data, params):
    X, y = data
    model = BatchNormNNGPRegressor(batch_size=4, random_state=0).fit(X, y)
    before = model.predict(X[:6])
    np.testing.assert_array_equal(model.set_params(**params).predict(X[:6]), before)
    np.testing.assert_allclose(model.fit(X, y).predict(X[:6]), BatchNormNNGPRegressor(
        **{"batch_size": 4, "random_state": 0, **params}).fit(X, y).predict(X[:6]), rtol=1e-10)


def test_huge_targets_are_normalised_without_overflow(data):
    """normalise_y divides by a power of 2 before the standard deviation, so 1e200 y does not give NaN."""
    X, y = data
    model = BatchNormNNGPRegressor(batch_size=4, depth=1, random_state=0)
    mean, std = model.fit(X, y).predict(X[:6], return_std=True)
    big_mean, big_std = model.fit(X, 1e200 * y).predict(X[:6], return_std=True)
    np.testing.assert_allclose(big_mean / 1e200, mean, rtol=1e-9)
    np.testing.assert_allclose(big_std / 1e200, std, rtol=1e-9)
    # unnormalised with fixed hyperparameters, the weights alpha are linear in y and finite; log p(y) ~ -1e400 is
    # -inf (gp_posterior's doc); variances fitted to such targets (~1e400) are beyond float64 and refused
    with pytest.raises(ValueError, match="beyond float64; centre and scale the targets"):
        BatchNormNNGPRegressor(batch_size=4, depth=1, normalise_y=False).fit(X, 1e200 * y)
    raw = BatchNormNNGPRegressor(batch_size=4, depth=1, normalise_y=False, random_state=0, noise=1e-2, weight_var=1.0,
                                 bias_var=0.0)
    mean, std = raw.fit(X, y).predict(X[:6], return_std=True)
    big_mean, big_std = raw.fit(X, 1e200 * y).predict(X[:6], return_std=True)
    np.testing.assert_allclose(big_mean / 1e200, mean, rtol=1e-9)
    np.testing.assert_array_equal(big_std, std)  # the posterior's spread does not depend on the targets
    assert raw.log_marginal_likelihood_ == -np.inf


@pytest.mark.parametrize("params, match", [
    ({"phi": "tanh"}, "positive-homogeneous"),
    ({"depth": 0}, "depth"),
    ({"batch_size": 3}, "below 4"),
    ({"noise": -1.0}, "noise"),
    ({"device": "nonsense"}, "device must name a torch device"),
    ({"device": "cuda:4096"}, "not available"),
])
def test_bad_parameters(data, params, match):
    X, y = data
    with pytest.raises(ValueError, match=match):
        BatchNormNNGPRegressor(**{"batch_size": 4, **params}).fit(X, y)


def test_hours_of_layer_maps_are_refused_before_any_work(data, tmp_path):
    """depth x blocks above MAX_LAYER_MAPS is refused up front, naming the deepest depth allowed for the data;
    the old code ran the maps for hours (184 points, B = 4: 46 batches and 1035 pairs, 1.08e7 maps at depth 10^4).
    Nothing is written first (``out``)."""
    X = np.random.default_rng(5).standard_normal((184, 3))
    blocks = 46 + 46 * 45 // 2
    assert blocks * MAX_DEPTH > MAX_LAYER_MAPS  # the case is over the limit ...
    most = f"use depth <= {MAX_LAYER_MAPS // blocks} for these points"
    with pytest.raises(ValueError, match=f"{blocks} blocks .* at depth {MAX_DEPTH} .* layer maps.*{most}"):
        BatchNormNNGPRegressor(depth=MAX_DEPTH, batch_size=4).fit(X, X[:, 0])
    with pytest.raises(ValueError, match=most):
        bn_nngp_priors("relu", X, [1, MAX_DEPTH], 4, out=tmp_path / "prior")
    assert not (tmp_path / "prior").exists()
    batches = X.reshape(46, 4, 3)
    pairs = np.array([(i, j) for i in range(46) for j in range(i + 1, 46)])
    with pytest.raises(ValueError, match=most):
        block_prior("relu", batches, pairs, [MAX_DEPTH])
    with pytest.raises(ValueError, match="use fewer points"):  # more blocks than the limit: no depth is allowed
        bn_nngp_prior("relu", np.random.default_rng(6).standard_normal((4 * 4473, 3)), 1, 4)
    depth = MAX_LAYER_MAPS // blocks  # ... and the deepest depth allowed passes the check (its maps are not run)
    assert bnsym.nngp.check_layer_maps(depth, blocks, 4) is None
    assert bnsym.nngp.check_layer_maps(50, 57 + 57 * 56 // 2, 32) is None  # all 1797 digits, B = 32, depth 50


def test_numpy_parameters_are_accepted_and_strings_refused(data):
    X, y = data
    model = BatchNormNNGPRegressor(depth=np.int64(1), batch_size=np.int64(4), noise=np.float32(0.01)).fit(X, y)
    assert np.all(np.isfinite(model.predict(X[:2])))
    with pytest.raises(ValueError, match="depth must be a whole number, got '1'"):
        bn_nngp_prior("relu", X, "1", 4)
    with pytest.raises(ValueError, match="noise must be a finite number >= 0, got nan"):
        BatchNormNNGPRegressor(batch_size=4, noise=float("nan")).fit(X, y)


def test_the_prior_is_blind_to_the_inputs_scale(data):
    """Batch norm (eps = 0) removes any scale of the inputs, also one whose Gram matrix overflows float64."""
    X, _ = data
    prior = bn_nngp_prior("relu", X[:8], 2, 4).train
    np.testing.assert_allclose(bn_nngp_prior("relu", 1e200 * X[:8], 2, 4).train, prior, rtol=1e-12, atol=1e-15)


def test_bad_data(data):
    X, y = data
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        BatchNormNNGPRegressor(batch_size=4).fit(bad, y)
    model = BatchNormNNGPRegressor(batch_size=4, depth=1).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :3])
    with pytest.raises(ValueError, match="distinct"):
        BatchNormNNGPRegressor(batch_size=4).fit(np.ones((8, 2)), np.zeros(8))
    same_batch = X[:8].copy()
    same_batch[:4] = same_batch[0]  # distinct inputs overall, but one batch of four identical ones in order
    with pytest.raises(ValueError, match="zero batch variance"):
        BatchNormNNGPRegressor(batch_size=4, depth=1, batching="ordered").fit(same_batch, y[:8])


def test_arccos_kernel_is_the_no_bn_limit(data):
    """Without batch norm each layer is V_phi: the arc-cosine route against Gauss-Hermite quadrature, depth 2."""
    X, _ = data
    layer1 = gauss_hermite_kernel(bnsym.parse_activation("relu"), X @ X.T / X.shape[1]).value
    layer2 = gauss_hermite_kernel(bnsym.parse_activation("relu"), layer1)
    assert np.abs(arccos_nngp_kernel("relu", X, None, 2) - layer2.value).max() < 1e-6 + 3 * layer2.error.max()



def test_prior_in_tasks_is_the_same_in_memory_on_disk_and_in_any_chunks(data, tmp_path):
    """Memory-mapped results hold the same bits; other chunkings agree to rounding (each pair's arithmetic is its
    own); the test covariance of a whole number of test batches is the training prior of the test points alone."""
    X, _ = data
    memory = bn_nngp_priors("relu", X, [1, 2], 4, chunk_batches=2)
    temporary = bn_nngp_priors("relu", X, [1, 2], 4, chunk_batches=2, max_memory=0)
    named = bn_nngp_priors("relu", X, [1, 2], 4, chunk_batches=2, out=tmp_path)
    for depth in (1, 2):
        assert isinstance(temporary[depth].train, np.memmap) and isinstance(named[depth].train, np.memmap)
        assert np.array_equal(temporary[depth].train, memory[depth].train)
        assert np.array_equal(np.load(tmp_path / f"train-depth{depth}.npy"), memory[depth].train)
        np.testing.assert_allclose(bn_nngp_priors("relu", X, [depth], 4, chunk_batches=1)[depth].train,
                                   memory[depth].train, rtol=1e-12, atol=1e-14)
    joint = bn_nngp_prior("relu", X[:4], 2, 4, X_test=X[4:], test_covariance=True)
    np.testing.assert_allclose(joint.test, bn_nngp_prior("relu", X[4:], 2, 4).train, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(np.diag(joint.test), joint.test_diagonal)


@pytest.mark.parametrize("batches, batch, expected", [(57, 32, 57), (625, 32, 181), (625, 8, 625), (3, 32, 3)])
def test_default_chunks_on_a_gpu_are_the_largest_tiles_that_fit(batches, batch, expected):
    """On a GPU a task is a few large tensor operations: the default chunk is the largest whose tile of pairs fits
    MAX_TILE_ENTRIES (capped at the k batches); on the CPU it stays k // 4, at most CHUNK_BATCHES."""
    from bnsym.nngp.tasks import CHUNK_BATCHES, MAX_TILE_ENTRIES, check_chunk_batches, on_gpu

    chunk = check_chunk_batches(None, batch, batches, on_gpu=True)
    assert chunk == expected and chunk * chunk * (2 * batch) ** 2 <= MAX_TILE_ENTRIES
    assert (chunk + 1) * (chunk + 1) * (2 * batch) ** 2 > MAX_TILE_ENTRIES or chunk == batches
    assert check_chunk_batches(None, batch, batches) == max(1, min(batches // 4, CHUNK_BATCHES))
    assert not on_gpu("cpu", None) and on_gpu(None, None) == torch.cuda.is_available()
    assert not on_gpu(None, object())  # a cluster's workers pick their own device


def test_progress_bar_shows_when_enabled(data, monkeypatch, capsys):
    X, _ = data
    monkeypatch.setenv("BNSYM_PROGRESS", "1")
    bn_nngp_prior("relu", X, 1, 4)
    assert "BN-NNGP prior (3 batches, 3 pairs)" in capsys.readouterr().err
    monkeypatch.setenv("BNSYM_PROGRESS", "0")
    bn_nngp_prior("relu", X, 1, 4)
    assert "BN-NNGP" not in capsys.readouterr().err


@pytest.mark.parametrize("client, match", [(1, "client must be None"), ("tcp://127.0.0.1:1", "no Dask scheduler")])
def test_a_bad_client_is_refused(data, client, match):
    X, _ = data
    with pytest.raises(ValueError, match=match):
        bn_nngp_prior("relu", X, 1, 4, client=client)


@pytest.mark.parametrize("params, match", [({"chunk_batches": 0}, "chunk_batches"),
                                           ({"chunk_batches": 4096}, "smaller chunk_batches"),
                                           ({"max_memory": -1}, "max_memory")])
def test_bad_task_options(data, params, match):
    X, _ = data
    with pytest.raises(ValueError, match=match):
        bn_nngp_prior("relu", X, 1, 4, **params)


def test_predict_std_and_cov_agree_and_are_not_asked_for_together(data):
    X, y = data
    model = BatchNormNNGPRegressor(depth=2, batch_size=4, noise=1e-3).fit(X, y)
    mean, std = model.predict(X[:8], return_std=True)
    same_mean, cov = model.predict(X[:8], return_cov=True)
    assert cov.shape == (8, 8) and np.array_equal(mean, same_mean) and np.allclose(cov, cov.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(cov), std**2, rtol=1e-8, atol=1e-12 * np.var(y))
    with pytest.raises(ValueError, match="ask for one"):
        model.predict(X[:8], return_std=True, return_cov=True)
    two = BatchNormNNGPRegressor(depth=2, batch_size=4, noise=1e-3).fit(X, np.stack([y, 3 * y], 1))
    mean2, cov2 = two.predict(X[:8], return_cov=True)
    assert mean2.shape == (8, 2) and cov2.shape == (8, 8, 2)
    np.testing.assert_allclose(cov2[..., 1], 9 * cov2[..., 0], rtol=1e-10)


def test_sample_y_matches_the_posterior_mean_and_covariance(data):
    """Sample means and covariances of 4000 draws against predict's, within mc_tolerance of their standard errors."""
    X, y = data
    model = BatchNormNNGPRegressor(depth=2, batch_size=4, noise=1e-2).fit(X[:8], y[:8])
    mean, cov = model.predict(X[8:], return_cov=True)
    n = 4000
    draws = model.sample_y(X[8:], n_samples=n, random_state=1)
    assert draws.shape == (4, n) and np.array_equal(draws, model.sample_y(X[8:], n, random_state=1))
    upper = np.triu_indices(4)
    k = mc_tolerance(n, n_comparisons=4 + len(upper[0]))
    assert np.all(np.abs(draws.mean(1) - mean) < k * np.sqrt(np.diag(cov) / n))
    centred = draws - draws.mean(1, keepdims=True)
    products = (centred[:, None, :] * centred[None, :, :])[upper]  # (pairs, n)
    se = products.std(1, ddof=1) / np.sqrt(n)
    assert np.all(np.abs(products.mean(1) - cov[upper]) < k * se + 1e-12)
    assert model.sample_y(X[8:], 3).shape == (4, 3)
    assert BatchNormNNGPRegressor(batch_size=4).fit(X, np.stack([y, y], 1)).sample_y(X[:5], 2).shape == (5, 2, 2)


def test_argmax_probabilities_against_posterior_draws():
    """The quadrature of P(f_c is the largest) against counting the argmax of 20000 independent normal draws."""
    rng = np.random.default_rng(5)
    mean, std = rng.normal(0, 1, (6, 4)), np.array([0.3, 1.0, 2.0, 0.5, 1e-3, 1.5])
    probabilities = argmax_probabilities(mean, std)
    n = 20000
    draws = mean[:, :, None] + std[:, None, None] * rng.standard_normal((6, 4, n))
    counts = np.stack([(draws.argmax(1) == c).mean(1) for c in range(4)], 1)
    se = np.sqrt(np.clip(counts * (1 - counts), 1 / n, None) / n)
    assert np.all(np.abs(counts - probabilities) < mc_tolerance(n, counts.size) * se)
    np.testing.assert_array_equal(argmax_probabilities(mean, np.zeros(6)), np.eye(4)[mean.argmax(1)])


def test_predict_proba_sums_to_one_and_agrees_with_predict():
    rng = np.random.default_rng(2)
    X = np.concatenate([rng.normal(-2, 1, (12, 3)), rng.normal(0, 1, (12, 3)), rng.normal(2, 1, (12, 3))])
    y = np.repeat([0, 1, 2], 12)
    model = BatchNormNNGPClassifier(depth=1, batch_size=4).fit(X, y)
    probabilities = model.predict_proba(X[:20])
    assert probabilities.shape == (20, 3) and np.allclose(probabilities.sum(1), 1.0)
    np.testing.assert_array_equal(model.classes_[probabilities.argmax(1)], model.predict(X[:20]))
    assert model.log_marginal_likelihood() == model.log_marginal_likelihood_
    with pytest.raises(ValueError, match="theta must hold the logs"):
        model.log_marginal_likelihood(np.zeros(2))
    assert get_tags(model).batch_order_dependent and get_tags(BatchNormNNGPRegressor()).batch_order_dependent
    assert not get_tags(BatchNormNNGPRegressor(batching="random")).batch_order_dependent


BATCH_ORDER = ("a train-mode BN network's output for x depends on which points share x's batch, so predictions "
               "change when the points to predict are reordered or predicted in subsets (the module docstring)")


@parametrize_with_checks(
    [BatchNormNNGPRegressor(depth=1, batch_size=16, nodes=12),
     BatchNormNNGPClassifier(depth=1, batch_size=16, nodes=12)],
    expected_failed_checks=lambda estimator: {"check_methods_sample_order_invariance": BATCH_ORDER,
                                              "check_methods_subset_invariance": BATCH_ORDER})
def test_scikit_learn_estimator_checks(estimator, check):
    """Every check of scikit-learn's that applies; with the default batching="ordered" the two batch-order ones fail
    by design (batching="random" passes them: test_random_batching_passes_the_row_order_checks). Twelve nodes per
    axis in the raw-feature first layer (the checks' data have few features; six leave the prior indefinite on
    iris-like data) keep this fast; the default rule (24) passes too."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelConditioningWarning)
        check(estimator)


def test_random_batching_passes_the_row_order_checks():
    """scikit-learn's two row-order checks, which the ordered batching fails (above): each test point has its own
    batch, so predictions do not depend on the order or the subset of the points predicted together."""
    estimator = BatchNormNNGPRegressor(depth=1, batch_size=16, nodes=12, n_batchings=1, batching="random")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelConditioningWarning)
        for check in (check_methods_sample_order_invariance, check_methods_subset_invariance):
            check(type(estimator).__name__, estimator)


@pytest.fixture(scope="module")
def gp_data():
    """Draws from a known BN-NNGP model: 48 inputs (B = 8, depth 1), 40 independent target columns y = sqrt(w) L z
    + sqrt(s) e (K = L L^T the prior, z and e standard normal) at w = 1.5, s = 0.2, b = 0."""
    rng = np.random.default_rng(11)
    X = rng.standard_normal((48, 5))
    prior = bn_nngp_prior("relu", X, 1, 8)
    kernel = np.asarray(prior.train)
    draws = np.sqrt(1.5) * np.linalg.cholesky(kernel + 1e-10 * np.eye(48)) @ rng.standard_normal((48, 40))
    targets = np.empty_like(draws)
    targets[prior.train_rows] = draws + np.sqrt(0.2) * rng.standard_normal(draws.shape)  # no wrap-around: m = n
    return X, targets, kernel, prior.train_rows


def direct_evidence(kernel: np.ndarray, targets: np.ndarray, theta: np.ndarray) -> float:
    """log N(y; 0, A) summed over y's columns, A = w K + b 11^T + s I, (s, w, b) = exp(theta), by numpy's Cholesky."""
    noise, weight_var, bias_var = np.exp(theta)
    factor = np.linalg.cholesky(weight_var * kernel + bias_var + noise * np.eye(len(kernel)))
    whitened = np.linalg.solve(factor, targets)
    return float(-0.5 * np.sum(whitened**2) - targets.shape[1] * (np.log(np.diag(factor)).sum()
                                                                   + 0.5 * len(kernel) * np.log(2 * np.pi)))


def test_fitted_noise_recovers_the_noise_of_generated_data(gp_data):
    """On draws of a known model the fitted noise variance lies within k standard errors of the true 0.2: the
    standard error of the maximum-likelihood estimate of log s from the inverse Fisher information,
    I_ij = c tr(A^-1 dA/dtheta_i A^-1 dA/dtheta_j) / 2 over the c = 40 independent columns (computed here from the
    true A), k = mc_tolerance(40) (a 1e-3 false alarm; the estimate is asymptotically normal in c). The standard
    error is 0.048 (asserted below 0.1), so a fit more than ~19% off fails (the old fixed noise 0.01 by far)."""
    X, targets, kernel, _ = gp_data
    model = BatchNormNNGPRegressor(depth=1, batch_size=8, normalise_y=False).fit(X, targets)
    noise, weight_var = 0.2, 1.5
    covariance = weight_var * kernel + noise * np.eye(len(kernel))
    inverse = np.linalg.inv(covariance)
    derivatives = [noise * np.eye(len(kernel)), weight_var * kernel]  # dA/dlog s, dA/dlog w (b = 0: not a free log)
    fisher = 0.5 * targets.shape[1] * np.array([[np.trace(inverse @ a @ inverse @ b) for b in derivatives]
                                                for a in derivatives])
    se = np.sqrt(np.linalg.inv(fisher)[0, 0])
    assert se < 0.1
    assert abs(np.log(model.noise_) - np.log(noise)) < mc_tolerance(targets.shape[1]) * se, (model.noise_, se)
    assert model.get_params()["noise"] == "fit"  # the parameter stays as given; the fitted value is noise_
    print(f"noise_ = {model.noise_:.4f}, SE of log s = {se:.3f}, k = {mc_tolerance(targets.shape[1]):.2f}")


def test_log_marginal_likelihood_at_theta_is_the_direct_computation(gp_data):
    """log_marginal_likelihood(theta) against an independent numpy Cholesky of w K + b 11^T + s I (K recomputed by
    bn_nngp_prior), its gradient against central differences of that (step 1e-4: error ~1e-8 of the values), and
    theta = None: the fitted model's value, which is the direct one at the fitted hyperparameters, where the gradient
    in the free logs vanishes (a maximum: within 1e-4 of the evidence's scale, L-BFGS-B's tolerance)."""
    X, targets, kernel, rows = gp_data
    model = BatchNormNNGPRegressor(depth=1, batch_size=8, normalise_y=False).fit(X, targets[:, :3])
    observed = targets[rows, :3]
    theta = np.log([0.3, 1.7, 0.2])
    value, gradient = model.log_marginal_likelihood(theta, eval_gradient=True)
    assert value == model.log_marginal_likelihood(theta)
    np.testing.assert_allclose(value, direct_evidence(kernel, observed, theta), rtol=1e-10)
    steps = 1e-4 * np.eye(3)
    differences = [(direct_evidence(kernel, observed, theta + step) - direct_evidence(kernel, observed, theta - step))
                   / 2e-4 for step in steps]
    np.testing.assert_allclose(gradient, differences, rtol=1e-6, atol=1e-8 * abs(value))
    fitted = np.log([model.noise_, model.weight_var_, model.bias_var_])
    assert model.jitter_ == 0
    np.testing.assert_allclose(model.log_marginal_likelihood(), direct_evidence(kernel, observed, fitted), rtol=1e-10)
    _, slope = model.log_marginal_likelihood(fitted, eval_gradient=True)
    inside = np.array([True, True, model.bias_var_ > 1.001e-5 * np.mean(observed**2)])  # bias_var may sit on its bound
    assert np.all(np.abs(slope[inside]) < 1e-4 * abs(model.log_marginal_likelihood()))


def test_a_given_hyperparameter_stays_fixed(data):
    """A number keeps its hyperparameter fixed, the others are fitted; all three given reproduce the posterior of
    the prior w K + b 11^T with noise s, computed directly."""
    X, y = data
    model = BatchNormNNGPRegressor(batch_size=4, depth=1, noise=0.05).fit(X, y)
    assert model.noise_ == 0.05 and model.weight_var_ != 1.0
    model.set_params(noise="fit", weight_var=2.0, bias_var=0.0).fit(X, y)
    assert model.weight_var_ == 2.0 and model.bias_var_ == 0.0 and model.noise_ != 0.05
    fixed = BatchNormNNGPRegressor(batch_size=4, depth=1, noise=0.1, weight_var=2.0, bias_var=0.3).fit(X, y)
    prior = bn_nngp_prior("relu", X, 1, 4, X_test=X[:5])
    targets = (y - y.mean()) / y.std()
    posterior = gp_posterior(2.0 * fixed.kernel_ + 0.3, targets[fixed.train_rows_], 0.1)
    np.testing.assert_allclose(fixed.predict(X[:5]), ((2.0 * prior.cross + 0.3) @ posterior.alpha)[:, 0] * y.std()
                               + y.mean(), rtol=1e-10)
    assert (fixed.noise_, fixed.weight_var_, fixed.bias_var_) == (0.1, 2.0, 0.3)


@pytest.mark.parametrize("params, match", [
    ({"noise": -0.1}, r"noise must be a finite number >= 0, got -0.1: the observation noise variance"),
    ({"noise": float("nan")}, "noise must be a finite number >= 0, got nan"),
    ({"noise": "auto"}, "noise must be a real number, got 'auto'"),
    ({"weight_var": 0.0}, r"weight_var must be a finite number > 0, got 0.0: the variance of the readout weights"),
    ({"bias_var": float("inf")}, "bias_var must be a finite number >= 0, got inf"),
])
def test_bad_hyperparameters_are_refused(data, params, match):
    X, y = data
    with pytest.raises(ValueError, match=match):
        BatchNormNNGPRegressor(batch_size=4, depth=1, **params).fit(X, y)


@pytest.mark.parametrize("theta, match", [
    (np.zeros(2), r"theta must hold the logs of noise, weight_var, bias_var: shape \(3,\)"),
    (np.array([0.0, np.nan, 0.0]), "theta must be finite"),
    (np.array([0.0, 800.0, 0.0]), "exp\\(theta\\), the variances .* is not finite"),
])
def test_bad_theta_is_refused(data, theta, match):
    X, y = data
    model = BatchNormNNGPRegressor(batch_size=4, depth=1).fit(X, y)
    with pytest.raises(ValueError, match=match):
        model.log_marginal_likelihood(theta)
    with pytest.raises(ValueError, match="eval_gradient needs theta"):
        model.log_marginal_likelihood(eval_gradient=True)


def test_depth_fit_takes_the_depth_of_largest_evidence(data):
    """depth="fit": each depth of DEPTHS gets its own fitted hyperparameters, and the model is the one of largest
    log evidence, the same as fitting that depth alone (the recursion serves every depth)."""
    from bnsym.nngp.estimators import DEPTHS
    X, y = data
    model = BatchNormNNGPRegressor(batch_size=4, depth="fit").fit(X, y)
    assert sorted(model.depth_evidence_) == list(DEPTHS)
    assert model.depth_evidence_[model.depth_] == max(model.depth_evidence_.values()) == model.log_marginal_likelihood()
    other = min(model.depth_evidence_, key=model.depth_evidence_.get)
    alone = BatchNormNNGPRegressor(batch_size=4, depth=other).fit(X, y)
    np.testing.assert_allclose(alone.log_marginal_likelihood(), model.depth_evidence_[other], rtol=1e-9)
    np.testing.assert_allclose(model.predict(X[:3]), BatchNormNNGPRegressor(batch_size=4, depth=model.depth_).fit(
        X, y).predict(X[:3]), rtol=1e-9)
    with pytest.raises(ValueError, match="depth must be a whole number"):
        BatchNormNNGPRegressor(batch_size=4, depth="auto").fit(X, y)
