"""Property-based tests of the input contract (bnsym.core.validation) over the public API, bnsym.dilution,
bnsym.rank, bnsym.products, bnsym.train, bnsym.nngp, bnsym.sweep, the CLI and the networks of bnsym.sim.daneshmand.

For any input, the answer is a ValueError whose message names an argument, or finite values that satisfy the
theory's invariants: lambda_G >= (B-2)/(B-3), forward eigenvalues >= 0, q* > 0, |c*| <= 1, relu's rate
non-increasing in B; 1 <= r(H) <= rank(H) (Lemma 1), unit-diagonal batch-norm chains, decreasing Ginibre
exponents, 1 <= T1/T4 <= sqrt(n), kappa >= 1, PSD priors. The CLI answers with valid JSON (no NaN) or one
``bnsym: error:`` line, never a traceback or a warning. Inputs mix hostile values (wrong types, huge, tiny,
non-finite, malformed activations) with valid ones, at sizes that keep each example cheap; the examples are
derandomized, so every run tries the same inputs.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import bnsym
from bnsym import arch, dilution, nngp, products, rank, sweep
from bnsym.arch import Activation, BatchNorm, Dense, LayerNorm, Residual, serial
from bnsym.cli import main
from bnsym.core.cluster import connect
from bnsym.core.validation import MAX_BATCH_SIZE
from bnsym.nngp import BatchNormNNGPRegressor, arccos_nngp_kernel, bn_nngp_prior, gp_posterior
from bnsym.sim import daneshmand, mc_tolerance
from bnsym.sweep.cli import int_list
from bnsym.sweep.runner import keyed
from bnsym.train import best_factor, grid, line_agreement, run_cell, train, trains
from bnsym.train import bjorck as bjorck_cells
from bnsym.train.daneshmand import train_digits
from bnsym.train.dynamics import first_steps
from bnsym.train.philipp import validate as philipp_validate
from bnsym.train.trainability import validate

FAST = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SLOW = settings(FAST, max_examples=15)  # quadrature routes: about 0.1-1 s per example
ARGUMENTS = re.compile(r"\b(B|batch|phi|activation|eps|tol|method|Sigma|x|A|jacobian|f_k|f_l|gsc_to_error|layers|"
                       r"depth|p|lambda|threshold|r|k|k_b|r_d|ks|norm|H|M|start|tau|rtol|width|gamma|s2|nodes|seed|"
                       r"n_chains|every|burn|samples|n_draws|n_products|exponents|eigenvalues|kind|factors|condition|"
                       r"Abar|lr|variance|population|n|m|Delta|classes|blocks|q0|batch_norm|order|X|X_test|X1|X2|"
                       r"noise|kernel|targets|depths|batch_sizes|config|rows|test_accuracy|chance|max_depths|xi|"
                       r"trained|optimizer|epochs|n_seeds|ghost_batch|batch_size|normalise_y|task|version|key|"
                       r"n_workers|scheduler|first|last|step|steps|configs|trainability|N|sample|cells|s_w2|s_b2|c0|"
                       r"lower|upper|errors|fan_in|init|h|centre|bn|relu|dtype|n_networks|n_samples|lrs|"
                       r"rank_bound|pretrain_steps|Sigma0|layer|network spec|points|replicates|keep|top|head|alternate|"
                       r"n_evals|warm_epochs|warm_lr|matrix|skip|n_probe|deltas|single_steps|layer_scales)\b")

HOSTILE_NUMBERS = st.sampled_from([None, True, "8", Decimal("8"), [8], complex(8, 0), float("nan"), float("inf"),
                                   -float("inf"), 10**400, -(10**400), 2**63, 1e300, 1e-300, -0.0, object()])
NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**30), 10**30),
                    st.fractions(), HOSTILE_NUMBERS)
BATCH_SIZES = st.one_of(st.integers(4, 64), st.integers(-3, 4), st.integers(MAX_BATCH_SIZE - 2, MAX_BATCH_SIZE + 2),
                        st.sampled_from([2**63, 10**26, 8.0, 8.5, Fraction(16, 2), np.int64(6), np.float32(5)]),
                        NUMBERS)
PARAMETERS = st.one_of(st.floats(-1e3, 1e3), st.sampled_from([1e308, -1e308, 1e-300, 1e-30, 0.0, 1e30, 50.0, -50.0,
                                                             1e9, 2.65, -2.6, 0.4, 0.5, 0.51, 10.0, 10.5]),
                       st.floats(allow_nan=True, allow_infinity=True))


def _number(value: float) -> str:
    return repr(float(value))


ACTIVATIONS = st.one_of(
    st.sampled_from(["relu", "tanh", "identity", "leaky_relu(0.2)", "relu^1.5", "erf(gamma=2)", "sin(gamma=0.5)",
                     "selu", "cubic", "relu(beta=-50)", "tanh(1e-300)", "tanh(1e308)", "relu^1e300",
                     "leaky_relu(1e308)", "relu(beta=1e308)", "tanh(gamma=1,gamma=2)", "swosh", "", "relu^",
                     "relu(beta=2", "tanh(gamma=2, 3)", "leaky_relu", "identity(2)", "relu^nan"]),
    PARAMETERS.map(lambda v: f"relu^{_number(abs(v))}"),
    PARAMETERS.map(lambda v: f"relu(beta={_number(v)})"),
    PARAMETERS.map(lambda v: f"leaky_relu({_number(v)})"),
    st.tuples(st.sampled_from(["tanh", "erf", "sin"]), PARAMETERS).map(lambda p: f"{p[0]}(gamma={_number(p[1])})"),
    st.text(max_size=12),
    st.sampled_from([None, 3, b"relu", ["relu"]]),
)
EPS = st.one_of(st.just(0.0), NUMBERS.filter(lambda v: not (isinstance(v, (int, float)) and v == v and 0 < v < 1e300)))
TOL = st.one_of(st.sampled_from([1e-8, 1e-4]), NUMBERS)


def _outcome(call, *args, **kwargs):
    """The call's result, or None after a ValueError that names an argument; anything else fails the test."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return call(*args, **kwargs)
    except ValueError as error:
        assert ARGUMENTS.search(str(error)), f"the message names no argument: {error}"
        return None


def _finite(*values) -> None:
    for value in values:
        assert np.all(np.isfinite(np.asarray(value, dtype=float))), values


def _floor(batch) -> np.ndarray:
    batch = np.asarray(batch, dtype=float)
    return (batch - 2) / (batch - 3)


@SLOW
@given(phi=ACTIVATIONS, batch=BATCH_SIZES, eps=EPS, tol=TOL)
def test_fixed_point(phi, batch, eps, tol):
    point = _outcome(bnsym.fixed_point, phi, batch, eps=eps, tol=tol)
    if point is not None:
        _finite(point.q, point.c, point.mu, point.error)
        assert np.all(point.q > 0) and np.all(np.abs(point.c) <= 1 + 1e-12)  # eps = 0: never collapsed


@SLOW
@given(phi=ACTIVATIONS, batch=BATCH_SIZES, tol=TOL)
def test_gradient_rate_and_depth_scale(phi, batch, tol):
    rate = _outcome(bnsym.gradient_rate, phi, batch, tol=tol, with_error=True)
    if rate is not None and np.ndim(batch) == 0 and batch in (2, 3):  # App. J: 0 at B = 2, inf at B = 3
        assert rate.value == (0.0 if batch == 2 else np.inf) and bnsym.depth_scale(phi, batch, tol=tol) <= 0
    elif rate is not None:
        _finite(rate.value, rate.error)
        assert np.all(rate.value + rate.error >= _floor(batch) * (1 - 1e-12))  # Thm 9
        scale = bnsym.depth_scale(phi, batch, tol=tol)
        _finite(scale)
        assert np.all(scale > 0)


@SLOW
@given(phi=ACTIVATIONS, batch=BATCH_SIZES, tol=TOL)
def test_forward_eigenvalues(phi, batch, tol):
    eigenvalues = _outcome(bnsym.forward_eigenvalues, phi, batch, tol=tol, with_error=True)
    if eigenvalues is not None:
        for estimate in eigenvalues.values():
            _finite(estimate.value, estimate.error)
            assert np.all(estimate.value >= -estimate.error - 1e-12)


@SLOW
@given(phi=ACTIVATIONS, batch=BATCH_SIZES)
def test_backward_eigenvalues(phi, batch):
    eigenvalues = _outcome(bnsym.backward_eigenvalues, phi, batch, with_error=True)
    if eigenvalues is not None:
        for estimate in eigenvalues.values():
            _finite(estimate.value, estimate.error)
        assert eigenvalues["G"].value + eigenvalues["G"].error >= _floor(batch) * (1 - 1e-12)


@SLOW
@given(phi=ACTIVATIONS, batch=BATCH_SIZES)
def test_cross_batch(phi, batch):
    """c*_cross is a correlation of two batches' outputs, lambda_x^2 a ratio of squared norms."""
    correlation = _outcome(bnsym.cross_batch_fixed_point, phi, batch)
    if correlation is not None:
        _finite(correlation)
        assert np.all(np.abs(correlation) <= 1 + 1e-12)
        rate = bnsym.cross_batch_rate(phi, batch)
        _finite(rate)
        assert np.all(rate >= 0)


SIGMAS = st.one_of(
    st.tuples(st.integers(2, 9), st.floats(1e-300, 1e300), st.floats(-0.99, 0.99)).map(
        lambda p: p[1] * ((1 - p[2]) * np.eye(p[0]) + p[2] * np.ones((p[0], p[0])))),
    st.tuples(st.integers(4, 7), st.integers(0, 10**6), st.floats(1e-200, 1e200)).map(
        lambda p: p[2] * (lambda a: a @ a.T)(np.random.default_rng(p[1]).standard_normal((p[0], p[0])))),
    st.sampled_from([1e308 * np.eye(8), 5e-324 * np.eye(6), np.eye(6) * (1 + 1j), np.ones((6, 6)), np.eye(6)[:5],
                     [[1, 0, 0, 0]] * 4, "eye", None, np.full((6, 6), np.nan), np.diag([1.0, 1, 1, 1, 1, -1])]),
)


@SLOW
@given(phi=st.one_of(st.sampled_from(["relu", "tanh", "relu^1.5"]), ACTIVATIONS), sigma=SIGMAS, eps=EPS)
def test_bn_kernel(phi, sigma, eps):
    kernel = _outcome(bnsym.bn_kernel, phi, sigma, eps=eps, method=None if eps == 0 else "qmc", with_error=True)
    if kernel is not None:
        _finite(kernel.value, kernel.error)
        assert np.linalg.eigvalsh(kernel.value / np.abs(kernel.value).max()).min() > -1e-6  # a covariance


NETS = st.sampled_from([
    [Dense(), BatchNorm(), Activation("relu")], [Dense(2.0, 0.5), Activation("tanh"), LayerNorm()],
    serial(Dense(), Residual([BatchNorm(), Activation("relu"), Dense()])),
    [Dense(), Activation("relu"), BatchNorm(0.1)],
    [Dense(), Activation("relu"), BatchNorm(mode="eval"), Activation("selu")], "dense,bn,relu*2", "dense,(relu",
    ["relu"], [], None, [Activation("relu"), Dense()], 3, [Dense(), object()]])


@SLOW
@given(net=NETS, sigma=SIGMAS, points=st.one_of(st.just(2**8), NUMBERS))
def test_arch_kernel_and_signal_propagation(net, sigma, points):
    """Every architecture answers with a finite PSD kernel and S >= 0 (inf only with its note), or a ValueError."""
    kernel = _outcome(arch.kernel, net, sigma, points=points, with_error=True)
    if kernel is not None:
        _finite(kernel.value, kernel.error)
        assert np.linalg.eigvalsh(kernel.value / max(np.abs(kernel.value).max(), 1e-300)).min() > -1e-6
        result = _outcome(arch.signal_propagation, net, sigma, points=points)
        if result is not None:
            assert np.all(result.gradient.value >= 0) and (np.all(np.isfinite(result.gradient.value))
                                                           or result.gradient.note)


@FAST
@given(low=st.integers(4, 1000), high=st.integers(4, MAX_BATCH_SIZE))
def test_relu_rates_fall_with_batch_size(low, high):
    batches = np.unique(np.geomspace(min(low, high), max(low, high), 12).round().astype(int))
    for values in (bnsym.gradient_rate("relu", batches), bnsym.fixed_point("relu", batches).c):
        _finite(values)
    rates = bnsym.gradient_rate("relu", batches)
    assert np.all(np.diff(rates) <= 1e-15 * rates[1:])


@FAST
@given(r=NUMBERS, k=NUMBERS)
def test_diluted_rates(r, k):
    diluted = _outcome(dilution.diluted_rate, r, k)
    if diluted is not None:
        _finite(diluted)
        rate = np.asarray(r, dtype=float)  # r and k may be arrays
        assert np.all(np.minimum(rate, 1) * (1 - 1e-12) <= diluted)  # between the skip's rate and rho's
        assert np.all(diluted <= np.maximum(rate, 1) * (1 + 1e-12))
        first = dilution.first_order_diluted_rate(r, k)
        _finite(first)
        back = _outcome(dilution.undiluted_rate, diluted, k)
        if back is not None:
            _finite(back)


@FAST
@given(ks=st.one_of(st.lists(st.floats(1e-150, 1e150), min_size=1, max_size=6), st.lists(NUMBERS, max_size=3),
                    NUMBERS))
def test_composed_dilution(ks):
    composed = _outcome(dilution.composed_dilution, ks)
    if composed is not None:
        _finite(composed)
        assert 0 < composed <= min(ks) * (1 + 1e-12)  # composing only dilutes more


@FAST
@given(depth=st.one_of(st.integers(0, 300), st.integers(10**5, 10**6), NUMBERS), p=st.one_of(st.floats(0, 3), NUMBERS),
       lam=st.one_of(st.integers(0, 300), NUMBERS), threshold=st.one_of(st.floats(1e-300, 1e300), NUMBERS))
def test_residual_tails(depth, p, lam, threshold):
    tail = _outcome(dilution.residual_tail_bound, depth, p, lam)
    if tail is not None:
        _finite(tail)
        assert tail >= 0
    effective = _outcome(dilution.effective_depth, depth, p, threshold)
    if effective is not None:
        assert 0 <= effective <= depth


@FAST
@given(x=st.one_of(st.lists(st.floats(-1e300, 1e300), max_size=5), st.lists(NUMBERS, max_size=3), NUMBERS))
def test_quadratic_mean(x):
    value = _outcome(dilution.quadratic_mean, x)
    if value is not None:
        _finite(value)
        assert 0 <= value <= np.abs(x).max() * (1 + 1e-12)


@FAST
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)), scale=st.floats(1e-300, 1e300),
       seed=st.integers(0, 100), junk=st.sampled_from([None, "shape", "zero", "nan"]))
def test_datapoint_gsc(shape, scale, seed, junk):
    rng = np.random.default_rng(seed)
    d_l, d_k, extra = shape
    jacobian, f_k, f_l = (scale * rng.standard_normal(s) for s in ((d_l, d_k), (d_k,), (d_l,)))
    if junk == "shape":
        f_k = np.ones(d_k + extra)
    elif junk == "zero":
        f_l = np.zeros(d_l)
    elif junk == "nan":
        jacobian[0, 0] = np.nan
    value = _outcome(dilution.datapoint_gsc, jacobian, f_k, f_l)
    if value is not None:
        _finite(value)
        assert value >= 0 and junk is None


@SLOW
@given(phi=ACTIVATIONS, norm=st.sampled_from(["batch", "layer", "group"]))
def test_normalised_gsc_rate(phi, norm):
    rate = _outcome(dilution.normalised_gsc_rate, phi, norm)
    if rate is not None:
        _finite(rate)
        assert rate > 0


# ------------------------------------------------------------------------ bnsym.rank, products, train, nngp, sweep
# These draw every argument from a (valid, hostile) pair of strategies: all valid, or all valid but one hostile.
# So every refusal is one argument's, and a share of the examples are valid calls whose results are checked against
# the theory. "Valid" includes the extremes the contract accepts (1e-300, 1e300, numpy scalars, whole floats).

Pair = tuple[st.SearchStrategy, st.SearchStrategy]


def _arguments(**pairs: Pair) -> st.SearchStrategy[dict]:
    """Keyword arguments: all drawn valid (about a third of the examples), or all valid but one drawn hostile."""
    return st.sampled_from([None] * (len(pairs) // 2) + [None, *pairs]).flatmap(lambda bad: st.fixed_dictionaries(
        {name: pair[name == bad] for name, pair in pairs.items()}))


def _count(low: int, high: int) -> Pair:
    """A whole number in [low, high] (an int, a numpy int or a whole float), or one outside, or no number."""
    valid = st.integers(low, high)
    return (st.one_of(valid, valid.map(np.int64), valid.map(float)),
            st.one_of(st.integers(low - 3, low - 1), st.sampled_from([10**26, 2**63, low + 0.5, str(low)]),
                      HOSTILE_NUMBERS))


def _matrix(p) -> np.ndarray:
    rows, columns, scale, seed = p
    return scale * np.random.default_rng(seed).standard_normal((rows, columns))


def _correlation(p) -> np.ndarray:
    """A random unit-diagonal PSD d x d matrix (a batch-norm chain's M)."""
    a = np.random.default_rng(p[1]).standard_normal((p[0], p[0] + 1))
    m = a @ a.T
    return m / np.sqrt(np.outer(np.diag(m), np.diag(m)))


def _floats(low: float, high: float, extremes: list) -> st.SearchStrategy:
    return st.one_of(st.floats(low, high), st.sampled_from(extremes))


HOSTILE_ARRAYS = st.one_of(st.sampled_from([[np.nan], [1.0, np.inf], [], [[1.0], [2.0, 3.0]], "1,2", None, [True],
                                            [1 + 1j], np.array(["a"]), object()]), HOSTILE_NUMBERS)
POSITIVE: Pair = (_floats(1e-3, 1e3, [1e-300, 1e300, 5e-324, np.float32(2.0), Fraction(1, 3)]),
                  st.one_of(st.sampled_from([0.0, -1.0, -math.inf, math.inf, math.nan]), HOSTILE_NUMBERS))
NON_NEGATIVE: Pair = (_floats(0.0, 1e3, [0.0, 1e-300, 1e300]), st.one_of(st.sampled_from([-1e-300, -1.0, math.inf,
                                                                                          math.nan]), HOSTILE_NUMBERS))
GAMMA: Pair = (st.one_of(POSITIVE[0], st.just(math.inf)), st.one_of(st.sampled_from([0.0, -1.0, -math.inf, math.nan]),
                                                                     HOSTILE_NUMBERS))
SEED: Pair = (st.one_of(st.integers(0, 2**64 - 1), st.just(np.uint64(7))),
              st.one_of(st.sampled_from([-1, 2**64, 1.5]), HOSTILE_NUMBERS))
FEATURES: Pair = (  # H, d features x N samples
    st.one_of(st.tuples(st.integers(1, 4), st.integers(1, 5), st.floats(1e-300, 1e300), st.integers(0, 99)).map(
        _matrix), st.tuples(st.integers(2, 4), st.integers(2, 5), st.just(1.0), st.integers(0, 9)).map(
        lambda p: torch.as_tensor(_matrix(p), dtype=torch.float32)), st.just([[1, 2, 0], [0, 1, 3]])),
    st.one_of(st.sampled_from([np.zeros((3, 4)), np.full((2, 2), np.nan), np.ones(3), np.ones((0, 3)),
                               np.eye(3) * (1 + 1j), np.eye(3, dtype=bool), torch.eye(3, dtype=torch.bool),
                               [[1, 2], [3]], [["a", "b"]], [[1, np.inf], [0, 1]]]), HOSTILE_NUMBERS))


def _second_moment(h):
    """H H^T / N of a finite numeric matrix H (in float64), anything else as it is."""
    try:
        matrix = np.asarray(h, dtype=float)
    except (TypeError, ValueError):
        return h
    with np.errstate(over="ignore"):
        return matrix @ matrix.T / matrix.shape[1] if matrix.ndim == 2 and np.all(np.isfinite(matrix)) else h


@FAST
@given(kw=_arguments(H=FEATURES, tau=POSITIVE, rtol=(st.one_of(st.none(), st.floats(0.0, 1.0)), POSITIVE[1])))
def test_rank_measures(kw):
    """1 <= r(H) <= rank(H) (Lemma 1); the ranks count at most min(d, N) directions."""
    bound = _outcome(rank.rank_lower_bound, kw["H"])
    if bound is not None:
        _finite(bound)
        assert np.all(1 - 1e-9 <= bound) and np.all(bound <= rank.numerical_rank(kw["H"]) * (1 + 1e-6) + 1e-6)
    for value in (_outcome(rank.rank_tau, kw["H"], kw["tau"]), _outcome(rank.numerical_rank, kw["H"], kw["rtol"])):
        if value is not None:
            assert np.all((0 <= value) & (value <= min(np.shape(kw["H"])[-2:])))


@SLOW
@given(kw=_arguments(start=FEATURES, depth=_count(1, 4), gamma=GAMMA, n_chains=_count(1, 3), seed=SEED,
                     kind=(st.sampled_from(["H", "M"]), st.sampled_from(["h", None, 3])),
                     every=(st.just(1), _count(1, 1)[1])))
def test_bn_chain(kw):
    """Batch norm rescales every row to norm sqrt N: each M_l has unit diagonal and is PSD."""
    if kw["kind"] == "M":
        kw["start"] = _second_moment(kw["start"])
    chain = _outcome(rank.bn_chain, **kw)
    if chain is not None:
        m = chain.double()
        _finite(m.numpy())
        np.testing.assert_allclose(m.diagonal(0, -2, -1).numpy(), 1.0, atol=1e-5)
        assert torch.linalg.eigvalsh(m).min() > -1e-5


@SLOW
@given(kw=_arguments(width=_count(3, 4), gamma=GAMMA, depth=_count(1, 3), burn=_count(0, 2), n_chains=_count(2, 3),
                     samples=(st.one_of(st.none(), st.integers(1, 4)), _count(1, 4)[1]), seed=SEED))
def test_bn_lyapunov_and_chain_statistics(kw):
    """Finite spectra; ergodic averages within their ranges: 1 <= r <= d, 0 <= rank_1/2 <= d, |M_12| <= 1."""
    spectrum = _outcome(rank.bn_lyapunov, **kw)
    if spectrum is not None:
        _finite(spectrum.value, spectrum.error)
    stats = _outcome(rank.chain_statistics, **kw, every=1)
    if stats is not None:
        for estimate in stats.values():
            _finite(estimate.value, estimate.error)
        width = int(kw["width"])
        assert 1 - 1e-9 <= stats["r"].value <= width * (1 + 1e-9) and 0 <= stats["rank_half"].value <= width
        assert abs(stats["m12"].value) <= 1 + 1e-12


UNIT_DIAGONAL: Pair = (st.tuples(st.integers(2, 4), st.integers(0, 99)).map(_correlation),
                       st.one_of(FEATURES[1], st.sampled_from([2 * np.eye(3), np.array([[1.0, 2.0], [2.0, 1.0]]),
                                                               np.array([[1.0, 0.5], [0.1, 1.0]])])))


@FAST
@given(kw=_arguments(M=UNIT_DIAGONAL, n_draws=_count(2, 300), seed=SEED))
def test_delta_F(kw):
    """Lemma 7: the Monte Carlo drift estimates delta_F(M) (k from mc_tolerance, Bonferroni over the examples)."""
    exact = _outcome(rank.delta_F, kw["M"])
    drift = _outcome(rank.second_order_drift, **kw)
    if exact is not None and drift is not None:
        _finite(exact, drift.value, drift.error)
        k = mc_tolerance(int(kw["n_draws"]), FAST.max_examples)
        assert abs(drift.value - exact) <= k * drift.error + 1e-9 * abs(exact)


@FAST
@given(kw=_arguments(eigenvalues=(st.lists(_floats(0.0, 1e3, [0.0, 1e-300, 1e200]), min_size=1, max_size=5),
                                  st.one_of(st.just([-1.0, 1.0]), HOSTILE_ARRAYS))))
def test_delta_F_spectral(kw):
    """Finite for every spectrum it accepts (one whose cubes overflow is refused)."""
    value = _outcome(rank.delta_F_spectral, **kw)
    if value is not None:
        _finite(value)


@FAST
@given(kw=_arguments(width=_count(3, 6), s2=POSITIVE, gamma=(_floats(1e-3, 1e3, [1e-300, 1e150]), GAMMA[1]),
                     nodes=_count(2, 40), depth=_count(1, 3), n_products=_count(2, 4), seed=SEED,
                     rtol=(st.floats(1e-12, 1 - 1e-12), st.sampled_from([0.0, 1.0, 1.5, math.nan, "0.5"])),
                     depths=(st.lists(_floats(0.0, 1e3, [0.0, 1e300]), min_size=1, max_size=3),
                             st.one_of(st.just([-1.0]), HOSTILE_ARRAYS))))
def test_lyapunov_spectra(kw):
    """Ginibre exponents decrease (psi grows with the degrees of freedom); a predicted rank counts 1..d."""
    exponents = _outcome(products.ginibre_lyapunov_exponents, kw["width"], kw["s2"])
    if exponents is not None:
        _finite(exponents)
        assert np.all(np.diff(exponents) < 0)
        predicted = _outcome(rank.predicted_numerical_rank, exponents, kw["depths"], kw["rtol"])
        if predicted is not None:
            assert np.all((1 <= predicted) & (predicted <= len(exponents)))
    top = _outcome(products.residual_top_exponent, kw["width"], kw["gamma"], kw["nodes"])
    if top is not None:
        _finite(top.value, top.error)
    sampler = _outcome(products.ginibre_sampler, kw["width"], kw["s2"], kw["gamma"])
    if sampler is not None:
        samples = _outcome(products.lyapunov_samples, sampler, kw["width"], kw["depth"], kw["n_products"], kw["seed"])
        if samples is not None:
            _finite(samples)


COSINE: Pair = (_floats(-1.0, 1.0, [-1.0, 1.0, 0.0]), st.one_of(st.sampled_from([1.5, -1.1, math.inf, math.nan]),
                                                                   HOSTILE_NUMBERS))
BOUNDS: Pair = (_floats(-1e3, 1e3, [0.0, 1e300, -1e300, 1e-300]), st.one_of(st.sampled_from([math.inf, math.nan]),
                                                                            HOSTILE_NUMBERS))
HOSTILE_MATRICES = st.one_of(st.sampled_from([torch.zeros(3, 4), torch.ones(3, 1), torch.ones(3), torch.ones(2, 0),
                                              torch.full((2, 3), math.nan), torch.eye(3, dtype=torch.bool),
                                              [[1.0, 0.0], [2.0, 0.0]], [[1.0], [2.0, 3.0]]]), HOSTILE_NUMBERS)
SAMPLES: Pair = (  # inputs d x N (N >= 2 samples), float64 tensors of any scale
    st.tuples(st.integers(1, 4), st.integers(2, 5), st.sampled_from([1.0, 1e-300, 1e300]), st.integers(0, 99)).map(
        lambda p: torch.as_tensor(_matrix(p))), HOSTILE_MATRICES)


def _examples(p) -> tuple[torch.Tensor, torch.Tensor]:
    """(H (d, N), errors (d_out, N)): a last hidden layer and its loss gradients, of reciprocal scales."""
    d, d_out, n, scale, seed = p
    rng = np.random.default_rng(seed)
    h, errors = scale * rng.standard_normal((d, n)), rng.standard_normal((d_out, n)) / scale
    return torch.as_tensor(h), torch.as_tensor(errors)


EXAMPLES: Pair = (st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 5), st.sampled_from([1.0, 1e-300]),
                            st.integers(0, 99)).map(_examples),
                  st.one_of(st.tuples(st.just(torch.ones(2, 3)), HOSTILE_MATRICES),
                            st.tuples(HOSTILE_MATRICES, st.just(torch.ones(2, 3))),
                            st.sampled_from([(torch.ones(2, 3), torch.ones(2, 4)),
                                             (torch.ones(2, 3), torch.zeros(2, 3))])))


def _unit_columns(m: torch.Tensor) -> np.ndarray:
    m = m.numpy() / m.abs().max().item()
    return m / np.linalg.norm(m, axis=0)


@FAST
@given(kw=_arguments(depth=_count(1, 12), s_w2=POSITIVE, s_b2=NON_NEGATIVE, c0=COSINE,
                     x=(st.one_of(st.none(), SAMPLES[0]), SAMPLES[1]), lower=BOUNDS, upper=BOUNDS, examples=EXAMPLES))
def test_correlations(kw):
    """Post-ReLU cosines lie in [0, 1] and never fall with depth (J_1(c) >= c, and biases pull c to 1); the
    asymmetric init's correlation is in [0, 1]; Prop. 19's gradient cosines are cos(e) cos(h), in [-1, 1]."""
    cosines = _outcome(rank.relu_cosines, kw["depth"], kw["s_w2"], kw["s_b2"], kw["c0"])
    if cosines is not None:
        _finite(cosines)
        assert np.all((0 <= cosines) & (cosines <= 1 + 1e-12)) and np.all(np.diff(cosines) >= -1e-12)
    correlation = _outcome(rank.asymmetric_unit_correlation, kw["x"], kw["lower"], kw["upper"])
    if correlation is not None:
        _finite(correlation)
        assert 0 <= correlation <= 1 + 1e-12
    gradients = _outcome(rank.last_layer_gradient_cosines, *kw["examples"])
    if gradients is not None:
        frobenius, row0 = gradients["frobenius"].numpy(), gradients["row0"].numpy()
        _finite(frobenius, row0)
        assert np.all(np.abs(frobenius) <= 1 + 1e-12) and np.all(np.abs(row0) <= 1 + 1e-12)
        h, errors = (_unit_columns(m) for m in kw["examples"])
        np.testing.assert_allclose(frobenius, (h.T @ h) * (errors.T @ errors), atol=1e-12)


@FAST
@given(kw=_arguments(init=(st.sampled_from(daneshmand.INITS), st.sampled_from(["xavier", None, ["he"], 3])),
                     width=_count(1, 6), depths=(st.lists(st.integers(1, 3), min_size=1, max_size=2),
                                                 st.one_of(st.just([0]), HOSTILE_ARRAYS)),
                     depth=_count(1, 3), n_networks=_count(1, 3), bn=(st.booleans(), st.sampled_from([1, "yes", None])),
                     seed=SEED, dtype=(st.sampled_from([torch.float32, torch.float64]),
                                       st.sampled_from([torch.int64, "float64", None])),
                     x=SAMPLES, s_w2=POSITIVE, s_b2=NON_NEGATIVE, n_samples=_count(2, 4)))
def test_daneshmand_networks(kw):
    """Representations have the asked shapes and finite entries; batch norm gives rows of mean 0 and mean square
    1; pair cosines lie in [-1, 1], post-ReLU ones in [0, 1]."""
    variances = _outcome(daneshmand.init_variances, kw["init"], kw["width"])
    if variances is not None:
        assert variances[0] > 0 and variances[1] >= 0
    reps = _outcome(daneshmand.representations, kw["x"], kw["depths"], kw["width"], kw["n_networks"], kw["init"],
                    bn=kw["bn"], seed=kw["seed"], dtype=kw["dtype"])
    if reps is not None:
        assert sorted(reps) == sorted({int(layer) for layer in kw["depths"]})
        for h in reps.values():
            assert h.shape == (int(kw["n_networks"]), int(kw["width"]), kw["x"].shape[1]) and h.dtype == kw["dtype"]
            _finite(h.double().numpy())
    normalised = _outcome(daneshmand.batch_norm_rows, kw["x"])
    if normalised is not None:
        np.testing.assert_allclose(normalised.mean(-1).numpy(), 0, atol=1e-12)
        np.testing.assert_allclose(normalised.square().mean(-1).numpy(), 1, rtol=1e-12)
    pair = _outcome(daneshmand.mean_pair_cosine, kw["x"])
    if pair is not None:
        _finite(pair)
        assert np.all(np.abs(pair) <= 1 + 1e-12)
    cosines = _outcome(daneshmand.gaussian_relu_cosines, kw["depth"], kw["s_w2"], kw["s_b2"], kw["width"],
                       kw["n_samples"], kw["n_networks"], kw["seed"])
    if cosines is not None:
        _finite(cosines)
        assert np.all((0 <= cosines) & (cosines <= 1 + 1e-12))


@settings(SLOW, max_examples=8)
@given(kw=_arguments(depth=_count(1, 2), bn=(st.booleans(), st.sampled_from([1, None])),
                     lrs=(st.lists(_floats(1e-3, 1.0, [1e-300, 1e30]), min_size=1, max_size=2),
                          st.one_of(st.just([0.0]), st.just([1e39]), HOSTILE_ARRAYS)),
                     epochs=_count(0, 1), rank_bound=(st.just(rank.differentiable_rank_bound),
                                                      st.sampled_from([None, "r", 1.0])),
                     width=_count(1, 6), batch=_count(2, 16), n_networks=_count(1, 2), pretrain_steps=_count(0, 2),
                     init=(st.sampled_from(daneshmand.INITS), st.sampled_from(["xavier", None])),
                     n_samples=(st.integers(16, 64), st.one_of(st.just(0), st.just(10**6), HOSTILE_NUMBERS)),
                     seed=SEED))
def test_daneshmand_training(kw):
    """Losses per epoch (inf where a network diverged), accuracies in [0, 1], 1 <= r(H_L) <= width (NaN only for a
    dead or diverged layer)."""
    run = _outcome(train_digits, **kw)
    if run is not None:
        n, epochs = len(kw["lrs"]) * int(kw["n_networks"]), int(kw["epochs"])
        assert run.loss.shape == run.rank_bound.shape == (n, epochs + 1) and run.accuracy.shape == (n,)
        assert not np.isnan(run.loss).any() and np.all((0 <= run.accuracy) & (run.accuracy <= 1))
        r = run.rank_bound[np.isfinite(run.rank_bound)]
        assert np.all((1 - 1e-6 <= r) & (r <= int(kw["width"]) * (1 + 1e-6)))


@FAST
@given(kw=_arguments(m=_count(1, 8), order=_count(0, 6), nodes=_count(200, 400),
                     x=(st.lists(_floats(-10.0, 40.0, [0.0, 1e-300, 1e300]), min_size=1, max_size=4), HOSTILE_ARRAYS)))
def test_fuss_catalan(kw):
    """Moments are whole numbers >= 1 that the density's quadrature reproduces; the density is >= 0 (inf only at
    the hard edge x = 0)."""
    m, order, x = kw["m"], kw["order"], kw["x"]
    moment = _outcome(products.fuss_catalan_moment, order, m)
    numeric = _outcome(products.density_moment, order, m, kw["nodes"])
    if moment is not None and numeric is not None:
        assert isinstance(moment, int) and moment >= 1 and numeric == pytest.approx(moment, rel=1e-6)
    for edge in (_outcome(products.soft_edge, m), _outcome(products.hard_edge, m)):
        if edge is not None:
            _finite(edge)
    density = _outcome(products.fuss_catalan_density, x, m)
    if density is not None:
        away = np.asarray(x, dtype=float) != 0
        _finite(density[away])
        assert np.all(density >= 0) and np.all(np.isinf(density[~away]))
    closed = _outcome(products.closed_form_density, x, m)
    if closed is not None:
        np.testing.assert_allclose(closed, products.fuss_catalan_density(x, m), rtol=1e-8)


FACTORS: Pair = (st.tuples(st.integers(1, 3), st.integers(1, 3), st.sampled_from([1.0, 1e-300, 1e300]),
                           st.integers(0, 9)).map(
                     lambda p: p[2] * np.random.default_rng(p[3]).standard_normal((p[0], p[1], p[1]))),
                 st.one_of(st.sampled_from([np.zeros((1, 2, 2)), np.ones((2, 3, 4)), np.eye(3)]), FEATURES[1]))


@FAST
@given(kw=_arguments(n=_count(2, 50), s2=POSITIVE, factors=FACTORS,
                     condition=(st.lists(_floats(1.0, 1e3, [1.0, 1e300]), min_size=1, max_size=3),
                                st.one_of(st.just([0.5]), HOSTILE_ARRAYS)),
                     shapes=(st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(0, 9)),
                             st.just((2, 3, 2, -1)))))
def test_products_conditioning(kw):
    """Exponents decrease, log kappa >= max - min of the QR stretches >= 0, GD contracts by a factor in [0, 1)."""
    exponents = _outcome(products.ginibre_lyapunov_exponents, kw["n"], kw["s2"])
    if exponents is not None:
        _finite(exponents)
        assert np.all(np.diff(exponents) < 0) and products.lyapunov_slope(kw["n"]) > 0
    log_kappa = _outcome(products.log_condition_number, kw["factors"])
    stretches = _outcome(products.qr_log_stretches, kw["factors"])
    if log_kappa is not None and stretches is not None:
        _finite(log_kappa.numpy(), stretches.numpy())
        totals = stretches.sum(-2)
        gap = totals.max(-1).values - totals.min(-1).values
        assert torch.all(gap <= log_kappa + 1e-6 * (1 + log_kappa.abs())) and torch.all(log_kappa >= -1e-9)
    rate = _outcome(products.gd_rate, kw["condition"])
    if rate is not None:
        _finite(rate)
        assert np.all((0 <= rate) & (rate <= 1))
    p, n, m, seed = kw["shapes"]
    rng = np.random.default_rng(abs(seed))
    abar, x = rng.standard_normal((p, n)), rng.standard_normal((n if seed >= 0 else n + 1, m))
    step = _outcome(products.max_stable_lr, abar, x)
    if step is not None:
        _finite(step)
        assert step > 0


@FAST
@given(kw=_arguments(lr=POSITIVE, batch=_count(1, 100), variance=NON_NEGATIVE,
                     population=(st.one_of(st.none(), st.integers(100, 1000)), _count(100, 1000)[1]),
                     n=(st.lists(_floats(1.0, 1e6, [1.0, 1e300]), min_size=1, max_size=3),
                        st.one_of(st.just([0.5]), HOSTILE_ARRAYS)),
                     m=(st.lists(_floats(-1e3, 1e3, [0.0, 1e300, -1e300]), min_size=1, max_size=1), HOSTILE_ARRAYS),
                     delta=(st.lists(_floats(-1e4, 1e4, [1e300, -1e300]), min_size=1, max_size=3), HOSTILE_ARRAYS),
                     classes=_count(2, 20)))
def test_gradient_noise(kw):
    """Noise >= 0 (less without replacement), 1 <= T1/T4 <= sqrt(n), the bias gradient in n [-1/K, 1 - 1/K]."""
    noise = _outcome(products.sgd_noise, kw["lr"], kw["batch"], kw["variance"], kw["population"])
    if noise is not None:
        _finite(noise)
        assert 0 <= noise <= products.sgd_noise(kw["lr"], kw["batch"], kw["variance"]) * (1 + 1e-12)
    ratio = _outcome(products.alignment_ratio, kw["n"], kw["m"])
    if ratio is not None:
        _finite(ratio)
        assert np.all((1 - 1e-9 <= ratio) & (ratio <= np.sqrt(np.asarray(kw["n"], dtype=float)) * (1 + 1e-9)))
    bias = _outcome(products.bias_grad_dominance, kw["delta"], kw["classes"], kw["batch"])
    if bias is not None:
        _finite(bias)
        k, b = int(kw["classes"]), int(kw["batch"])
        assert np.all((-b / k * (1 + 1e-12) <= bias) & (bias <= b * (k - 1) / k * (1 + 1e-12)))


@SLOW
@given(kw=_arguments(blocks=_count(0, 5), batch_norm=(st.sampled_from([True, False, np.True_]),
                                                      st.sampled_from([1, "yes", None])), q0=POSITIVE))
def test_residual_growth(kw):
    """q_l > 0, and from the first block on E ReLU(x + sigma xi)^2 >= x^2 (Jensen) keeps it from falling."""
    q = _outcome(products.residual_growth, **kw)
    if q is not None:
        _finite(q)
        assert np.all(q > 0) and np.all(np.diff(q[1:]) >= -1e-6 * q[1:-1])


PHI: Pair = (st.sampled_from(["relu", "tanh"]), st.sampled_from(["swosh", "", None, "tanh(1e308)", "relu(beta=-50)"]))
EPS_PAIR: Pair = (_floats(0.0, 1.0, [0.0, 1e-300]), st.one_of(st.sampled_from([-1e-3, math.inf, math.nan]),
                                                               HOSTILE_NUMBERS))
CONFIG = _arguments(depth=_count(1, 50), batch_size=_count(2, 64), width=_count(1, 256), phi=PHI, eps=EPS_PAIR,
                    optimizer=(st.sampled_from(["sgd", "rmsprop"]), st.sampled_from(["adam", None, ("sgd",)])),
                    lr_per_example=POSITIVE, epochs=_count(1, 5), n_seeds=_count(1, 4), seed=SEED,
                    ghost_batch=(st.none(), st.one_of(st.just(65), _count(2, 64)[1])))


@FAST
@given(config=CONFIG)
def test_trainability_configurations(config):
    """A sweep cell is checked before anything trains, and its whole numbers come back as ints."""
    checked = _outcome(validate, config)
    if checked is not None:
        assert all(type(checked[key]) is int for key in ("depth", "width", "batch_size", "epochs", "n_seeds", "seed"))


BJORCK_CELL = _arguments(
    keep=(st.lists(st.sampled_from(["gamma", "beta", "mu", "sigma"]), max_size=5),
          st.sampled_from([["scale"], "mu", None, [None], 3, [["mu"]]])),
    top=(st.one_of(st.none(), st.integers(0, 2)), st.one_of(st.integers(3, 9), st.just(-1), HOSTILE_NUMBERS)),
    head=(st.booleans(), st.sampled_from(["yes", 1, None, 0.0])), alternate=(st.booleans(), st.sampled_from([1, "no"])),
    blocks=_count(2, 20), width=_count(1, 64), epochs=_count(3, 6), n_evals=_count(1, 3), warm_epochs=_count(0, 2),
    warm_lr=POSITIVE, lrs=(st.lists(_floats(1e-4, 10.0, [1e-300]), min_size=1, max_size=3),
                           st.one_of(st.just([0.0]), HOSTILE_ARRAYS)), n_seeds=_count(1, 4), seed=SEED)


@FAST
@given(config=BJORCK_CELL)
def test_bjorck_training_configurations(config):
    """A cell of Bjorck et al.'s training sweep is checked before anything trains: whole numbers come back as ints,
    the parts kept as a subset of batch norm's four in their order."""
    checked = _outcome(bjorck_cells.validate, config)
    if checked is not None:
        assert all(type(checked[key]) is int for key in ("blocks", "width", "epochs", "n_evals", "warm_epochs",
                                                         "n_seeds", "seed"))
        assert checked["keep"] == [part for part in ("gamma", "beta", "mu", "sigma") if part in config["keep"]]
        assert checked["top"] is None or 0 <= checked["top"] <= checked["blocks"]


PHILIPP_CONFIG = _arguments(
    phi=(st.sampled_from(["relu", "tanh", "selu"]), st.sampled_from(["swosh", "", None, 3])),
    norm=(st.sampled_from(["none", "layer", "batch", "lolayer"]), st.sampled_from(["group", None, 1])),
    matrix=(st.just("gaussian"), st.sampled_from(["orthogonal", "sparse", None])),
    skip=(st.just("none"), st.sampled_from(["gaussian", None, True])), depth=_count(2, 40), width=_count(2, 64),
    epochs=_count(1, 5), n_seeds=_count(2, 8), batch_size=_count(2, 256), n_probe=_count(2, 512), seed=SEED,
    deltas=(st.lists(POSITIVE[0], min_size=1, max_size=3), st.one_of(st.just([]), st.lists(POSITIVE[1], min_size=1,
                                                                                         max_size=2))))


@FAST
@given(config=PHILIPP_CONFIG)
def test_philipp_training_configurations(config):
    """A Philipp et al. training cell is checked before anything trains; its whole numbers come back as ints."""
    checked = _outcome(philipp_validate, config)
    if checked is not None:
        assert all(type(checked[key]) is int for key in ("depth", "width", "epochs", "n_seeds", "batch_size", "seed"))


def _cells(n: int) -> st.SearchStrategy:
    return st.tuples(st.lists(st.integers(1, 60), min_size=n, max_size=n),
                     st.lists(_floats(0.1, 1e3, [math.inf]), min_size=n, max_size=n),
                     st.lists(st.booleans(), min_size=n, max_size=n))


@FAST
@given(kw=_arguments(
    depths=(st.lists(st.integers(1, 50), min_size=1, max_size=3), st.one_of(st.just([0]), HOSTILE_ARRAYS)),
    rows=(st.lists(st.fixed_dictionaries({"test_accuracy": st.floats(0, 1), "chance": st.floats(0, 1)}), min_size=1,
                   max_size=4), st.sampled_from([[], [{"test_accuracy": 0.5}], [{"test_accuracy": math.nan,
                                                                                 "chance": 0.1}], {"a": 1}, None])),
    cells=(st.integers(1, 6).flatmap(_cells), st.sampled_from([([1, 2], [1.0], [True, False]),
                                                              ([1], [0.0], [True]), ([1], [2.0], [1])]))))
def test_trainability_analysis(kw):
    """trains -> bools; the line splits the cells; no factor c misclassifies fewer cells than the best (brute force
    over a c just above each ratio depth / xi, and one below them all)."""
    cells = _outcome(grid, kw["depths"], [4, 8])
    if cells is not None:
        assert all(type(cell["depth"]) is int and cell["depth"] >= 1 for cell in cells)
    flags = _outcome(trains, kw["rows"])
    if flags is not None:
        assert flags.dtype == bool and len(flags) == len(kw["rows"])
    depths, line, trained = kw["cells"]
    agreement = _outcome(line_agreement, depths, line, trained)
    best = _outcome(best_factor, depths, line, trained)
    if agreement is not None and best is not None:
        assert agreement["n_above"] + agreement["n_below"] == len(depths)
        sides = {"train_above": agreement["n_above"], "train_below": agreement["n_below"]}
        assert all(0 <= agreement[key] <= 1 if cells else math.isnan(agreement[key]) for key, cells in sides.items())
        low, high, errors = best
        ratios = np.array(depths) / np.array(line)
        candidates = [np.min(ratios[ratios > 0], initial=2.0) / 2, *(ratios * (1 + 1e-9) + 1e-300)]
        assert low < high and errors == min(np.sum((ratios < c) != np.array(trained)) for c in candidates)


@settings(SLOW, max_examples=8)
@given(kw=_arguments(phi=PHI, depth=_count(1, 2), width=_count(1, 4), batch_size=(st.integers(128, 512), st.one_of(
    st.just(2000), _count(2, 64)[1])), lr=POSITIVE, eps=EPS_PAIR, seed=SEED))
def test_train(kw):
    """One epoch of few, large batches: test accuracies are fractions. The first SGD step at eps = 0 keeps
    |W'|^2 = |W|^2 + lr^2 |g|^2 (R18) to rounding, where the weights stay finite."""
    run = _outcome(train, **kw, epochs=1)
    if run is not None:
        assert torch.all((0 <= run.test_accuracy) & (run.test_accuracy <= 1)) and 0 < run.chance < 1
    steps = _outcome(first_steps, **{**kw, "eps": 0.0}, steps=1)
    if steps is not None:
        residual = steps.scale_invariance_residual()
        if np.all(np.isfinite(residual)):  # lr = 1e300 overflows the weights: no identity left to check
            assert np.all(np.abs(residual) < 1e-5)
        growth = _outcome(steps.log_growth, 1, kw["depth"], 0)
        if growth is not None:
            _finite(growth)


@SLOW
@given(kw=_arguments(
    phi=(st.sampled_from(["relu", "identity", "relu^1.5"]), st.sampled_from(["tanh", "swosh", None, "relu^1e300"])),
    X=(st.tuples(st.integers(4, 9), st.integers(1, 3), st.floats(1e-100, 1e100), st.integers(0, 9)).map(_matrix),
       FEATURES[1]), depth=_count(1, 2), batch_size=_count(4, 6), noise=NON_NEGATIVE,
    nodes=(st.one_of(st.none(), st.integers(2, 8)), _count(2, 8)[1])))
def test_bn_nngp(kw):
    """Priors are covariances (symmetric PSD) and posteriors finite."""
    prior = _outcome(bn_nngp_prior, kw["phi"], kw["X"], kw["depth"], kw["batch_size"], nodes=kw["nodes"], device="cpu")
    if prior is not None:
        k = prior.train
        _finite(k)
        assert np.abs(k - k.T).max() <= 1e-9 * np.abs(k).max() and np.linalg.eigvalsh(k).min() >= -1e-6 * k.max()
        posterior = _outcome(gp_posterior, k, np.ones(len(k)), kw["noise"])
        if posterior is not None:
            _finite(posterior.alpha, posterior.log_marginal_likelihood)
    arccos = _outcome(arccos_nngp_kernel, kw["phi"], kw["X"], None, kw["depth"])
    if arccos is not None:
        _finite(arccos)
        assert np.linalg.eigvalsh(arccos).min() >= -1e-6 * arccos.max()
    targets = np.arange(len(kw["X"]) if isinstance(kw["X"], np.ndarray) and kw["X"].ndim else 4)
    model = _outcome(lambda: BatchNormNNGPRegressor(kw["phi"], kw["depth"], kw["batch_size"], kw["noise"],
                                                    nodes=kw["nodes"]).fit(kw["X"], targets))
    if model is not None:
        _finite(model.predict(kw["X"][:2]))


@FAST
@given(kw=_arguments(
    task=(st.just("trainability"), st.one_of(st.text(max_size=8), HOSTILE_NUMBERS)),
    configs=(st.lists(CONFIG, min_size=1, max_size=2), st.one_of(HOSTILE_NUMBERS, st.just({"depth": 2}),
                                                                  st.just("abc"))),
    key=(st.sampled_from(["0123abcd" * 3, "ffffffff"]), st.one_of(st.text(max_size=7), HOSTILE_NUMBERS)),
    text=(st.sampled_from(["4,8,16", "5:60:5", "1"]), st.one_of(st.sampled_from(["1:10000000000:1", "0:4:0", "a,b",
                                                                                  ""]), HOSTILE_NUMBERS))),
    n_workers=st.one_of(st.integers(-3, 0), st.sampled_from([10**9, 1.5, "2", True, math.nan])))
def test_sweep_arguments(kw, n_workers):
    """Configurations are validated and keyed before anything runs; a bad worker count never starts a cluster."""
    pairs = _outcome(keyed, kw["task"], kw["configs"])
    if pairs is not None:
        assert all(len(key) == 24 and "seed" in config for key, config in pairs)
    seed = _outcome(sweep.seed_of, kw["key"])
    if seed is not None:
        assert 0 <= seed < 2**32
    values = _outcome(int_list, kw["text"], "--depths")
    if values is not None:
        assert values and min(values) >= 1
    with pytest.raises(ValueError, match="n_workers"):  # only bad counts: a good one would start a cluster
        with connect(n_workers=n_workers):
            pass


CLI_BATCHES = st.one_of(st.integers(4, 40).map(str),
                        st.sampled_from(["3", "8.5", "1e300", "99999999999999999999999999", "abc", "nan", "inf", "-8",
                                         "10000001", "8.0", ""]))
CLI_EPS = st.sampled_from(["0", "-1", "nan", "inf", "1e300", "abc", "2e-308", ""])


@settings(SLOW, max_examples=8)
@given(phi=ACTIVATIONS.filter(lambda s: isinstance(s, str) and not s.startswith("-")), batch=CLI_BATCHES,
       eps=CLI_EPS, as_json=st.booleans())
def test_cli(capsys, phi, batch, eps, as_json):
    arguments = ["predict", "--phi", phi, "-B", batch, "--eps", eps] + (["--json"] if as_json else [])
    try:
        status = main(arguments)
    except SystemExit as stop:  # argparse's own usage errors
        status = stop.code
    out, err = capsys.readouterr()
    if status == 0:
        assert err == ""
        if as_json:
            json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in JSON output"))
    else:
        assert status == 2 and out == ""
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("bnsym: error:") and "internal error" not in err, err


def test_the_suite_tries_hostile_and_valid_inputs():
    """The strategies reach both answers: some examples are refused, some computed (a check that can fail)."""
    outcomes = [_outcome(bnsym.fixed_point, phi, 8) is None for phi in ("relu", "swosh", "tanh(1e308)", "tanh")]
    assert outcomes == [False, True, True, False]
    assert math.isfinite(bnsym.gradient_rate("relu", MAX_BATCH_SIZE))


@SLOW
@given(log_scales=st.tuples(st.floats(-300, 300), st.floats(-300, 300)), seed=st.integers(0, 2**16))
def test_the_cross_batch_kernel_is_blind_to_each_batch_scale(log_scales, seed):
    """BN at eps = 0: Sigma -> D Sigma D, D = diag(s1 I, s2 I), changes nothing after the layer, whatever s1, s2."""
    a = np.random.default_rng(seed).standard_normal((8, 10))
    sigma = a @ a.T / 10
    d = np.repeat(10.0 ** (np.array(log_scales) / 2), 4)
    reference = bnsym.cross_batch_kernel("relu", sigma, 4, nodes=24)
    scaled = bnsym.cross_batch_kernel("relu", d[:, None] * sigma * d[None, :], 4, nodes=24)
    np.testing.assert_allclose(scaled, reference, rtol=1e-9, atol=1e-11)


@SLOW
@given(log_scale=st.floats(-300, 300), params=st.sampled_from([{"batch_size": 8}, {"phi": "identity"},
                                                                 {"depth": 2}, {"nodes": 8}]))
def test_bn_nngp_regressor_is_equivariant_in_the_targets_and_keeps_its_fit(log_scale, params):
    """Predictions scale with the targets (normalise_y) and set_params after fit changes nothing until refit."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((8, 3)), rng.standard_normal(8)
    model = BatchNormNNGPRegressor(depth=1, batch_size=4)
    mean = model.fit(X, y).predict(X[:4])
    scale = 10.0**log_scale
    scaled = model.fit(X, scale * y).predict(X[:4])
    np.testing.assert_allclose(scaled / scale, mean, rtol=1e-8, atol=1e-12)
    np.testing.assert_array_equal(model.set_params(**params).predict(X[:4]), scaled)


# ------------------------------------------------------------------ the rest of rank, products, nngp and train (#33)


@FAST
@given(kw=_arguments(H=FEATURES, width=_count(1, 6), gamma=POSITIVE, frobenius=(_floats(1.0, 40.0, [1e-300, 1e300]),
                                                                                  HOSTILE_ARRAYS),
                     trace_m3=(_floats(1e-3, 1e3, [1e-300, 1e300]), st.one_of(st.just(-1.0), HOSTILE_ARRAYS))))
def test_rank_second_moment_and_proof_steps(kw):
    """M(H) is symmetric PSD with Tr M = ||H||_F^2 / N; the residual gap is gamma^2 (claim 4, leading order);
    Lemma 10's alpha is finite; the uniform law's factors I + gamma W have |W_ij| <= sqrt 3 (Lemma 3 (b))."""
    m = _outcome(rank.second_moment, kw["H"])
    if m is not None:
        h = np.asarray(kw["H"], dtype=float)
        m = m.double().numpy()
        _finite(m)
        assert np.abs(m - m.T).max() <= 1e-5 * np.abs(m).max(initial=0.0)  # float32 H too
        assert np.linalg.eigvalsh(m).min() >= -1e-6 * np.abs(m).max(initial=0.0)
        with np.errstate(over="ignore", under="ignore"):
            assert np.trace(m) == pytest.approx(np.sum(h**2) / h.shape[1], rel=1e-5, abs=1e-300)
    gap = _outcome(rank.residual_gap_series, kw["width"], kw["gamma"])
    if gap is not None:
        assert gap == pytest.approx(float(kw["gamma"]) ** 2, rel=1e-12)
    alpha = _outcome(rank.stationary_alpha, kw["width"], kw["frobenius"], kw["trace_m3"])
    if alpha is not None:
        _finite(alpha)
    sampler = _outcome(rank.uniform_sampler, kw["width"], kw["gamma"])
    if sampler is not None and int(kw["width"]) >= 2:
        factors = sampler(torch.Generator().manual_seed(0), 3)
        w = (factors - torch.eye(factors.shape[-1], dtype=factors.dtype)) / float(kw["gamma"])
        assert float(w.abs().max()) <= math.sqrt(3) * (1 + 1e-9) + 1e-300 / float(kw["gamma"])


@SLOW
@given(kw=_arguments(width=_count(2, 4), gamma=GAMMA, depth=_count(1, 6), n_products=_count(2, 4), seed=SEED))
def test_qr_lyapunov_exponents(kw):
    """The QR method's spectrum is finite and ordered (each mean exponent at most the one before, within its
    error), for i.i.d. factors of the Ginibre or the residual law."""
    sampler = _outcome(products.ginibre_sampler, kw["width"], gamma=kw["gamma"])
    if sampler is None:
        return
    spectrum = _outcome(products.qr_lyapunov_exponents, sampler, kw["width"], kw["depth"], kw["n_products"],
                        kw["seed"])
    if spectrum is not None:
        _finite(spectrum.value, spectrum.error)
        assert np.all(np.diff(spectrum.value) <= 4 * (spectrum.error[1:] + spectrum.error[:-1]) + 1e-12)


@FAST
@given(kw=_arguments(n=_count(1, 40), batch_size=_count(4, 9), X=(st.tuples(st.integers(1, 9), st.integers(1, 4),
                                                                            st.floats(1e-100, 1e100),
                                                                            st.integers(0, 9)).map(_matrix),
                                                                  FEATURES[1]),
                     power=(st.integers(-300, 300), st.just(0))))
def test_nngp_batching_and_input_covariance(kw):
    """fill_batches: ceil(n / B) batches of B rows, 0..n-1 in order then wrapping around; the first layer's Gram
    X X^T / d is symmetric PSD and scales exactly by 4^k under X -> 2^k X; node rules are 6 or 24."""
    rows = _outcome(nngp.fill_batches, kw["n"], kw["batch_size"])
    if rows is not None:
        n, b = int(kw["n"]), int(kw["batch_size"])
        assert rows.shape == (-(-n // b), b)
        np.testing.assert_array_equal(rows.ravel(), np.arange(rows.size) % n)
        assert nngp.default_nodes(b) in (6, 24) and nngp.first_layer_nodes(b, n) in (6, 24)
    gram = _outcome(nngp.input_covariance, kw["X"], kw["X"])
    if gram is not None:
        _finite(gram)
        assert np.abs(gram - gram.T).max() <= 1e-12 * np.abs(gram).max(initial=0.0)
        assert np.linalg.eigvalsh(gram).min() >= -1e-9 * np.abs(gram).max(initial=0.0)
        scale = 2.0 ** (kw["power"] // 4)
        scaled = _outcome(nngp.input_covariance, scale * kw["X"], scale * kw["X"])
        if scaled is not None and np.all(np.isfinite(scaled)) and np.all(scaled[gram != 0] != 0):
            np.testing.assert_allclose(scaled / scale**2, gram, rtol=1e-12, atol=0)


@settings(SLOW, max_examples=6)
@given(kw=_arguments(
    phi=(st.sampled_from(["relu", "identity", "relu^1.5", "leaky_relu(0.2)"]), st.sampled_from(["tanh", None])),
    X=(st.tuples(st.sampled_from([8, 10, 12]), st.integers(2, 4), st.floats(1e-100, 1e100), st.integers(0, 9)).map(
        _matrix), FEATURES[1]),
    depths=(st.lists(st.integers(1, 3), min_size=1, max_size=2), st.one_of(st.just([0]), HOSTILE_ARRAYS)),
    batch_size=_count(4, 5), log_scale=(st.integers(-200, 200), st.just(0))))
def test_bn_nngp_priors_are_psd_and_blind_to_each_batch_scale(kw):
    """The prior at every depth is symmetric PSD, and rescaling the first batch by 2^k changes nothing (where no
    batch wraps around to its rows): batch norm (eps = 0) normalises each batch on its own. block_prior's
    within-batch blocks are the priors' diagonal blocks. Default node rules (fewer nodes are not PSD to 1e-6)."""
    priors = _outcome(nngp.bn_nngp_priors, kw["phi"], kw["X"], kw["depths"], kw["batch_size"], device="cpu")
    if priors is None:
        return
    b = int(kw["batch_size"])
    x = np.asarray(kw["X"], dtype=float)
    rescaled = x.copy()
    rescaled[:b] *= 2.0 ** kw["log_scale"]
    again = nngp.bn_nngp_priors(kw["phi"], rescaled, kw["depths"], b, device="cpu") if len(x) % b == 0 else priors
    rows = nngp.fill_batches(len(x), b)
    blocks = nngp.block_prior(kw["phi"], x[rows], np.zeros((0, 2)), sorted(priors), device="cpu")
    for depth, prior in priors.items():
        k = prior.train
        _finite(k)
        assert np.abs(k - k.T).max() <= 1e-9 * np.abs(k).max() and np.linalg.eigvalsh(k).min() >= -1e-6 * k.max()
        np.testing.assert_allclose(again[depth].train, k, rtol=1e-9, atol=1e-12 * np.abs(k).max())
        np.testing.assert_allclose(blocks[depth][0][0], k[:b, :b], rtol=1e-12, atol=1e-15)


@settings(SLOW, max_examples=4)
@given(config=st.one_of(st.fixed_dictionaries({"depth": st.integers(1, 2), "batch_size": st.sampled_from([64, 128]),
                                               "width": st.integers(4, 8), "epochs": st.just(1),
                                               "seeds": st.just(1), "seed": st.integers(0, 9)}),
                        st.sampled_from([{"depth": 0}, {"depth": math.nan, "batch_size": 8}, None, [1],
                                         {"depth": 2, "batch_size": 8, "width": 10**9}])))
@example(config={"depth": 2, "batch_size": 128, "width": 8, "epochs": 1, "seeds": 1, "seed": 0})
def test_run_cell(config):
    """A sweep cell trains, or refuses its configuration; its accuracies are fractions and its chance level the
    inverse number of classes."""
    result = _outcome(run_cell, config)
    if result is not None:
        accuracies = np.asarray(result["test_accuracy"], dtype=float)
        _finite(accuracies)
        assert np.all((0 <= accuracies) & (accuracies <= 1)) and 0 < result["chance"] < 1
