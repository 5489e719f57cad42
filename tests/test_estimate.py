"""One result type (bnsym.core.estimate.Estimate) and the route tables of bnsym.api.

Every numeric route returns an Estimate whose error is absolute; the public functions return plain values by
default and the Estimate with ``with_error=True``; arrays of B give what a loop over B gives, where the route
is vectorised, and are refused with a message naming the vectorised method elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest

import bnsym
from bnsym.core.activations import parse_activation
from bnsym.core.estimate import Estimate
from bnsym.core.geometry import bsb1_matrix
from bnsym.core.symbols import B
from bnsym.meanfield.backward import derive_relu_rate, operator_eigenvalues, rate_closed_form, rate_spherical
from bnsym.meanfield.forward import bn_kernel_spherical, bsb1_image, derive_homogeneous_fixed_point
from bnsym.meanfield.forward_linear import (
    derive_relu_eigenvalues,
    finite_difference_eigenvalues,
    homogeneous_eigenvalues,
    spherical_eigenvalues,
)
from bnsym.meanfield.gegenbauer import forward_eigenvalues_gegenbauer, gradient_rate_gegenbauer
from bnsym.meanfield.laplace import bn_kernel_laplace
from bnsym.meanfield.qmc import bn_kernel_qmc

BATCHES = np.array([4, 5, 8, 33, 1024])


# ------------------------------------------------------------------------------------------- the type itself

def test_estimate_unpacks_as_value_and_error():
    value, error = Estimate(1.5, 1e-9, "spherical")
    assert (value, error) == (1.5, 1e-9) and isinstance(value, float)


def test_estimate_broadcasts_a_scalar_error_and_keeps_shapes():
    estimate = Estimate(np.arange(3.0), 0.0, "closed_form")
    assert estimate.error.shape == (3,) and not estimate.error.any()
    assert isinstance(Estimate(np.float64(2.0), np.array(0.1), "x").value, float)


@pytest.mark.parametrize("value, error, match", [
    (float("nan"), 0.0, "NaN"), (1.0, float("nan"), "NaN"), (np.array([1.0, np.nan]), 0.0, "NaN"),
    (1.0, -1e-3, "negative"), (np.ones(3), np.ones(2), "shape"),
])
def test_estimate_refuses_bugs(value, error, match):
    with pytest.raises(ValueError, match=match):
        Estimate(value, error, "route")


# ------------------------------------------------------------------------- every route returns an Estimate

def _routes():
    relu, tanh = parse_activation("relu"), parse_activation("tanh")
    sigma = bsb1_matrix(6, 1.0, 0.3)
    return {
        "closed_form": [rate_closed_form(relu, 8), *homogeneous_eigenvalues(relu, 8).values()],
        # few nodes: only the result type is checked here, the accuracy in the routes' own tests
        "spherical": [rate_spherical(tanh, 8, n=16), *spherical_eigenvalues(tanh, 8, n=16).values(),
                      *operator_eigenvalues(tanh, 8, n=16).values(), *bsb1_image(tanh, 8, n=16).values(),
                      *bsb1_image(tanh, 8, mu=0.5, eps=0.1, n=16, n_radial=8).values(),
                      bn_kernel_spherical(tanh, sigma)],
        "gegenbauer": [gradient_rate_gegenbauer(tanh, 8), *forward_eigenvalues_gegenbauer(tanh, 8).values()],
        "finite_differences": [*finite_difference_eigenvalues(relu, 6).values()],
        "laplace": [bn_kernel_laplace(relu, sigma)],
        "qmc": [bn_kernel_qmc(tanh, sigma, n_points=2**8)],
    }


def test_every_route_returns_an_estimate_named_after_it():
    for method, estimates in _routes().items():
        for estimate in estimates:
            assert isinstance(estimate, Estimate) and estimate.method == method
            assert np.shape(estimate.error) == np.shape(estimate.value) and np.all(np.asarray(estimate.error) >= 0)


@pytest.mark.parametrize("spec", ["relu^1.5", "relu^2"])
@pytest.mark.parametrize("batch", [5, 8, 32])
def test_gegenbauer_rate_error_is_absolute(spec, batch):
    """|Gegenbauer - closed form| <= the Gegenbauer error, the closed form being exact (tol loose enough to stop
    early, so the error is not negligible against the difference)."""
    estimate = bnsym.gradient_rate(spec, batch, method="gegenbauer", tol=1e-6, with_error=True)
    exact = bnsym.gradient_rate(spec, batch, method="closed_form")
    assert abs(estimate.value - exact) <= estimate.error
    assert estimate.error <= 1e-6 * estimate.value  # tol is relative


@pytest.fixture(scope="module")
def relu_exact():
    """ReLU's rate, c* and forward eigenvalues as exact SymPy expressions in B."""
    eigenvalues = derive_relu_eigenvalues()
    return {"rate": derive_relu_rate().result, "c": derive_homogeneous_fixed_point().result,
            "L": eigenvalues["L"], "M": eigenvalues["M"]}


@pytest.mark.parametrize("batch", [4, 64, 4096])
def test_closed_forms_are_exact_up_to_rounding(relu_exact, batch):
    """The closed forms report error 0: they agree with the exact SymPy results to a few ulp."""
    relu = parse_activation("relu")
    lam = homogeneous_eigenvalues(relu, batch)
    computed = {"rate": rate_closed_form(relu, batch).value, "c": bnsym.fixed_point("relu", batch).c,
                "L": lam["L"].value, "M": lam["M"].value}
    for key, expr in relu_exact.items():
        assert expr.free_symbols == {B}, key
        exact = float(expr.subs(B, batch).evalf(30))
        assert abs(computed[key] - exact) <= 16 * np.finfo(float).eps * abs(exact), key


# --------------------------------------------------------------------------------------- with_error=True

@pytest.mark.parametrize("spec", ["relu", "tanh"])
def test_with_error_returns_the_estimates_of_the_default(spec):
    calls = {
        "gradient_rate": lambda **kw: bnsym.gradient_rate(spec, 8, **kw),
        "depth_scale": lambda **kw: bnsym.depth_scale(spec, 8, **kw),
        "bn_kernel": lambda **kw: bnsym.bn_kernel(spec, bsb1_matrix(6, 1.0, 0.3), **kw),
    }
    for name, call in calls.items():
        estimate = call(with_error=True)
        assert isinstance(estimate, Estimate), name
        np.testing.assert_array_equal(estimate.value, call(), err_msg=name)
    for call in (bnsym.forward_eigenvalues, bnsym.backward_eigenvalues):
        estimates, plain = call(spec, 8, with_error=True), call(spec, 8)
        assert list(estimates) == list(plain) == ["G", "L", "M"]
        assert all(isinstance(e, Estimate) and e.value == plain[key] for key, e in estimates.items())


def test_fixed_point_with_error_bounds_q_c_and_mu():
    """The spherical route's propagated errors cover its distance from the closed form (relu, B = 8), up to
    rounding."""
    exact = bnsym.fixed_point("relu", 8)
    point = bnsym.fixed_point("relu", 8, method="spherical")
    estimates = bnsym.fixed_point("relu", 8, method="spherical", with_error=True)
    assert list(estimates) == ["q", "c", "mu"] and all(isinstance(e, Estimate) for e in estimates.values())
    for key, estimate in estimates.items():
        assert estimate.value == getattr(point, key) and estimate.method == "spherical", key
        rounding = 16 * np.finfo(float).eps * abs(estimate.value)  # the bounds leave out float64 rounding
        assert 0 < estimate.error and abs(estimate.value - getattr(exact, key)) <= estimate.error + rounding, key
    assert estimates["q"].error == point.error
    closed = bnsym.fixed_point("relu", BATCHES, with_error=True)
    assert all(not e.error.any() and e.value.shape == BATCHES.shape for e in closed.values())


def test_a_collapsed_fixed_point_has_exact_c_and_mu():
    point = bnsym.fixed_point("tanh", 8, eps=2.0)
    estimates = bnsym.fixed_point("tanh", 8, eps=2.0, with_error=True)
    assert point.collapsed and (estimates["c"].value, estimates["mu"].value) == (1.0, 0.0)
    assert estimates["c"].error == estimates["mu"].error == 0 and estimates["q"].error == point.error


def test_backward_eigenvalues_parse_phi_once(monkeypatch):
    """A composite function validates its arguments once and calls the routes, not its public siblings."""
    calls = []
    parse = bnsym.api.parse_activation
    monkeypatch.setattr(bnsym.api, "parse_activation", lambda spec: calls.append(spec) or parse(spec))
    eigenvalues = bnsym.backward_eigenvalues("tanh", 8, with_error=True)
    assert calls == ["tanh"]
    assert eigenvalues["G"] == bnsym.gradient_rate("tanh", 8, with_error=True)


def test_depth_scale_error_propagates_the_rate_error():
    rate = bnsym.gradient_rate("tanh", 8, with_error=True)
    xi = bnsym.depth_scale("tanh", 8, with_error=True)
    lo, hi = 1 / np.log(rate.value + rate.error), 1 / np.log(rate.value - rate.error)
    assert xi.error == pytest.approx(max(hi - xi.value, xi.value - lo), rel=1e-6) and xi.error > 0
    assert bnsym.depth_scale("relu", 8, with_error=True).error == 0.0


def test_bn_kernel_error_still_unpacks():
    value, error = bnsym.bn_kernel("tanh", bsb1_matrix(6, 1.0, 0.3), with_error=True)
    assert value.shape == error.shape == (6, 6)


# ------------------------------------------------------------------------------------------ arrays of B

@pytest.mark.parametrize("spec", ["relu", "relu^1.5", "leaky_relu(0.2)"])
def test_arrays_of_batch_sizes_equal_the_scalar_loop(spec):
    point = bnsym.fixed_point(spec, BATCHES)
    loop = [bnsym.fixed_point(spec, int(b)) for b in BATCHES]
    np.testing.assert_allclose(point.q, [p.q for p in loop], rtol=1e-14)
    np.testing.assert_allclose(point.c, [p.c for p in loop], rtol=1e-14)
    np.testing.assert_array_equal(point.batch_size, BATCHES)
    for call in (bnsym.gradient_rate, bnsym.depth_scale):
        np.testing.assert_allclose(call(spec, BATCHES), [call(spec, int(b)) for b in BATCHES], rtol=1e-14)
    lam = bnsym.forward_eigenvalues(spec, BATCHES)
    for key in lam:
        np.testing.assert_allclose(lam[key], [bnsym.forward_eigenvalues(spec, int(b))[key] for b in BATCHES],
                                   rtol=1e-14, atol=0)


@pytest.mark.parametrize("call", [
    lambda b, **k: bnsym.gradient_rate("relu", b, method="spherical", **k),
    lambda b, **k: bnsym.gradient_rate("tanh", b, method="gegenbauer", **k),
    lambda b, **k: bnsym.forward_eigenvalues("tanh", b, **k),
    lambda b, **k: bnsym.fixed_point("tanh", b).estimates(),
    lambda b, **k: bnsym.depth_scale("tanh", b, **k),
    lambda b, **k: bnsym.backward_eigenvalues("relu", b, **k),
])
def test_an_array_of_b_on_a_route_that_takes_one_b_is_looped(call):
    """Every route answers an array of B, in the shape of the vectorised routes: arrays where a float was, the same
    values as one B at a time."""
    looped = call(BATCHES, with_error=True) if "estimates" not in str(call) else call(BATCHES)
    single = [call(int(b), with_error=True) if "estimates" not in str(call) else call(int(b)) for b in BATCHES]
    parts = looped if isinstance(looped, dict) else {"": looped}
    for key, estimate in parts.items():
        values = [part[key] if key else part for part in single]
        assert np.shape(estimate.value) == np.shape(BATCHES)
        np.testing.assert_array_equal(estimate.value, [v.value for v in values])
        assert np.all(estimate.error >= [v.error for v in values])  # equal, but a FixedPoint keeps one bound, the max


def test_a_fixed_point_for_many_batch_sizes_has_no_single_matrix():
    with pytest.raises(ValueError, match="one matrix per batch size"):
        bnsym.fixed_point("relu", BATCHES).matrix


@pytest.mark.parametrize("call, match", [
    (lambda: bnsym.alpha_transition(BATCHES), "one whole number"),
    (lambda: bnsym.gradient_rate("relu", [8, 2]), "below 4"),
    (lambda: bnsym.gradient_rate("relu", [8, True]), "whole numbers"),
    (lambda: bnsym.gradient_rate("tanh", 8, eps=[0.0, 0.1], method="spherical"),
     "method 'spherical' takes one eps at a time; arrays of eps need method 'radial'"),
    (lambda: bnsym.gradient_rate("relu", [8, 16], eps=[0.0, 0.1]), "array of eps needs one batch size"),
    (lambda: bnsym.cross_batch_kernel("tanh", np.stack([np.eye(8)] * 2), 4),
     "no method applies: .*'laplace' needs a positive-homogeneous.*'qmc' takes one joint covariance"),
])
def test_arrays_where_no_route_takes_them(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------------------------------------------------ method tables

def test_closed_form_and_laplace_are_one_fixed_point_method():
    for spec in ("relu", "relu^1.5", "identity"):
        assert bnsym.fixed_point(spec, 8, method="closed_form") == bnsym.fixed_point(spec, 8, method="laplace")
    assert bnsym.fixed_point("relu", 8, method="laplace").method == "closed_form"
    np.testing.assert_array_equal(bnsym.fixed_point("relu", BATCHES, method="laplace").c,
                                  bnsym.fixed_point("relu", BATCHES, method="closed_form").c)
    with pytest.raises(ValueError, match="method 'closed_form' needs a positive-homogeneous"):
        bnsym.fixed_point("tanh", 8, method="closed_form")


@pytest.mark.parametrize("call, known", [
    (bnsym.fixed_point, "closed_form, laplace, spherical, gegenbauer"),
    (bnsym.gradient_rate, "closed_form, spherical, gegenbauer"),
    (bnsym.forward_eigenvalues, "closed_form, spherical, gegenbauer"),
    (lambda phi, b, method: bnsym.bn_kernel(phi, np.eye(b), method=method), "laplace, spherical, qmc, fourier"),
    (lambda phi, b, method: bnsym.cross_batch_kernel(phi, np.eye(2 * b), b, method=method), "laplace, qmc"),
    (lambda phi, b, method: bnsym.gradient_rate(phi, b, eps=[0.0, 0.1], method=method),
     "closed_form, spherical, gegenbauer, radial"),
])
def test_unknown_method_lists_the_table(call, known):
    with pytest.raises(ValueError, match=f"unknown method 'trapezoid'; known methods: {known}"):
        call("relu", 8, method="trapezoid")
