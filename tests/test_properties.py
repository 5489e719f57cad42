"""Property-based tests of the input contract (bnsym.core.validation) over the public API, bnsym.dilution and the CLI.

For any input, the answer is a ValueError whose message names an argument, or finite values that satisfy the
theory's invariants: lambda_G >= (B-2)/(B-3), forward eigenvalues >= 0, q* > 0, |c*| <= 1, relu's rate
non-increasing in B. The CLI answers with valid JSON (no NaN) or one ``bnsym: error:`` line, never a traceback
or a warning. Inputs mix hostile values (wrong types, huge, tiny, non-finite, malformed activations) with valid
ones; the examples are derandomized, so every run tries the same inputs.
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bnsym
from bnsym import dilution
from bnsym.cli import main
from bnsym.core.validation import MAX_BATCH_SIZE

FAST = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SLOW = settings(FAST, max_examples=15)  # quadrature routes: about 0.1-1 s per example
ARGUMENTS = re.compile(r"\b(B|batch|phi|activation|eps|tol|method|Sigma|x|A|jacobian|f_k|f_l|gsc_to_error|layers|"
                       r"depth|p|lambda|threshold|r|k|k_b|r_d|ks|norm)\b")

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
                     "leaky_relu(1e308)", "relu(beta=1e308)", "tanh(gamma=1,gamma=2)", "swish", "", "relu^",
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
    if rate is not None:
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
    outcomes = [_outcome(bnsym.fixed_point, phi, 8) is None for phi in ("relu", "swish", "tanh(1e308)", "tanh")]
    assert outcomes == [False, True, True, False]
    assert math.isfinite(bnsym.gradient_rate("relu", MAX_BATCH_SIZE))
