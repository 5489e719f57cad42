"""Kinked activations a user brings (bnsym.core.kinks): every way of passing relu, leaky relu and relu^1.5 gives the
closed form's lambda_G within 1e-6 relative, with a stated error that covers the difference (plus float64 rounding,
``ROUNDING_FLOOR``); kinks away from 0 are split too; what has no usable phi' is refused with the reason."""

from __future__ import annotations

import math
import warnings
from functools import lru_cache

import numpy as np
import pytest
import sympy as sp
import torch
from scipy.integrate import IntegrationWarning, quad

import bnsym
from bnsym.core.activations import parse_activation
from bnsym.core.validation import ROUNDING_FLOOR

x = sp.Symbol("x", real=True)
WAYS = {
    "relu": [sp.Max(0, x), sp.Piecewise((x, x > 0), (0, True)), (x + sp.Abs(x)) / 2, "max(x, 0)", "relu(x)",
             lambda z: np.maximum(z, 0), lambda z: (z + np.abs(z)) / 2, torch.relu, torch.nn.ReLU()],
    "leaky_relu(0.2)": [sp.Max(x, x / 5), sp.Piecewise((x, x > 0), (x / 5, True)), "max(x, 0.2*x)",
                        lambda z: np.where(z > 0, z, 0.2 * z), lambda z: torch.nn.functional.leaky_relu(z, 0.2),
                        torch.nn.LeakyReLU(0.2)],
    "relu^1.5": [sp.Max(0, x) ** sp.Rational(3, 2), sp.Piecewise((x ** sp.Rational(3, 2), x > 0), (0, True)),
                 "max(x, 0)^1.5", lambda z: np.maximum(z, 0) ** 1.5, lambda z: torch.relu(z) ** 1.5],
    "relu^0.75": [sp.Max(0, x) ** sp.Rational(3, 4), lambda z: np.maximum(z, 0) ** 0.75,
                  lambda z: torch.relu(z) ** 0.75],  # phi' unbounded at 0: the quadratures were 3e-3 off
    "relu^1.8": [lambda z: torch.relu(z) ** 1.8],  # phi'' unbounded at 0: was split 2e-4 off 0
}
CASES = [(name, i) for name, ways in WAYS.items() for i in range(len(ways))]


def _holds(estimate, reference: float, reference_tol: float = 0.0) -> None:
    """The closed form's accuracy, 1e-6 relative, and an error that covers the difference (plus rounding and the
    reference's own tolerance)."""
    difference = abs(estimate.value - reference)
    assert difference <= 1e-6 * reference, (estimate, reference)
    assert difference <= estimate.error + (ROUNDING_FLOOR + reference_tol) * reference, (estimate, reference)


@pytest.mark.parametrize("name, i", CASES)
@pytest.mark.parametrize("batch", [4, 8, 32])
def test_kinked_user_activation_gives_the_closed_form(name, i, batch):
    """Before the kinks were found: relu at B = 4 gave 3.1005 +- 2.8e-4 against 3.0841 (z = 59); numpy refused."""
    reference = bnsym.gradient_rate(name, batch, method="closed_form")
    _holds(bnsym.gradient_rate(WAYS[name][i], batch, with_error=True), reference)


REFERENCE_TOL = 1e-11  # relative: the nested adaptive quadratures below ask for 1e-13 at each level


def _pair_expectation(f, batch: int, kink: float) -> float:
    """E f(x_1, x_2) for two BN coordinates at batch size B by nested adaptive quadrature (scipy's QUADPACK), with
    no Gauss rules: u = R^2 has density (B-3)/2 (1-u)^((B-5)/2) (the last piece by QUADPACK's algebraic weight), the
    angle psi is uniform, x_1 = sqrt((B-1) u) cos psi, x_2 = sqrt((B-1) u) cos(psi - theta_0), each split where x_1
    or x_2 crosses the kink."""
    theta0, a = math.acos(-1 / (batch - 1)), (batch - 5) / 2
    options = {"epsabs": 1e-14, "epsrel": 1e-13, "limit": 200}

    def over_angle(u: float) -> float:
        r = math.sqrt((batch - 1) * u)
        s = math.acos(kink / r) if r > abs(kink) else None
        edges = sorted({0.0, 2 * math.pi, *(() if s is None else (p % (2 * math.pi) for p in
                                                                  (s, -s, theta0 + s, theta0 - s)))})
        return sum(quad(lambda p: f(r * math.cos(p), r * math.cos(p - theta0)), lo, hi, **options)[0]
                   for lo, hi in zip(edges, edges[1:])) / (2 * math.pi)

    crossings = (kink**2 / (batch - 1), 2 * kink**2 * (1 - math.cos(theta0)) / ((batch - 1) * math.sin(theta0) ** 2))
    cuts = sorted({0.0, 1.0, *(c for c in crossings if 0 < c < 1)})
    total = sum(quad(over_angle, lo, hi, weight="alg", wvar=(0, a), **options)[0] if hi == 1.0 else
                quad(lambda u: over_angle(u) * (1 - u) ** a, lo, hi, **options)[0] for lo, hi in zip(cuts, cuts[1:]))
    return total * (batch - 3) / 2


@lru_cache
def _reference_rate(name: str, batch: int) -> float:
    """Thm 7, lambda_G = E[(B-1-x_1^2) phi'(x_1)^2 + (1 + x_1 x_2) phi'(x_1) phi'(x_2)] / (mu (B-3)), mu = q - q c."""
    phi, slope, kink = GENERAL[name][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IntegrationWarning)  # QUADPACK's roundoff notice at 1e-13
        q = _pair_expectation(lambda a, b: phi(a) ** 2, batch, kink)
        qc = _pair_expectation(lambda a, b: phi(a) * phi(b), batch, kink)
        top = _pair_expectation(lambda a, b: (batch - 1 - a * a) * slope(a) ** 2 + (1 + a * b) * slope(a) * slope(b),
                                batch, kink)
    return top / ((q - qc) * (batch - 3))


@pytest.mark.parametrize("name, i", [(name, i) for name, i in CASES if name in ("relu", "leaky_relu(0.2)", "relu^1.5")])
@pytest.mark.parametrize("batch", [4, 8, 32])
def test_the_split_quadrature_alone_gives_the_closed_form(name, i, batch):
    """The default route of a recognised a max(z,0)^alpha - b max(-z,0)^alpha is its closed form; the quadrature
    split at the found kink agrees with it on its own."""
    reference = bnsym.gradient_rate(name, batch, method="closed_form")
    _holds(bnsym.gradient_rate(WAYS[name][i], batch, method="spherical", with_error=True), reference)


GENERAL = {  # (phi, phi', kink) by hand for the reference, then the ways of passing phi
    "max(x, -1)": [(lambda z: max(z, -1.0), lambda z: float(z > -1), -1.0), sp.Max(x, -1), "max(x, -1)",
                   lambda z: np.maximum(z, -1.0), lambda z: torch.clamp(z, min=-1.0)],
    "step at 0.5": [(lambda z: max(z, 0.5), lambda z: float(z > 0.5), 0.5),
                    sp.Piecewise((x, x > sp.Rational(1, 2)), (sp.Rational(1, 2), True)),
                    lambda z: np.where(z > 0.5, z, 0.5), lambda z: torch.relu(z - 0.5) + 0.5],
    "abs(x - 0.3)": [(lambda z: abs(z - 0.3), lambda z: 1.0 if z > 0.3 else -1.0, 0.3), sp.Abs(x - sp.Rational(3, 10)),
                     "abs(x - 0.3)", lambda z: np.abs(z - 0.3), lambda z: torch.abs(z - 0.3)],
    "curved pieces": [(lambda z: math.tanh(3 * z) + abs(z - 0.3) * math.exp(z),
                       lambda z: 3 / math.cosh(3 * z) ** 2 + (math.copysign(1.0, z - 0.3) + abs(z - 0.3)) * math.exp(z),
                       0.3),
                      "tanh(3*x) + abs(x - 0.3)*exp(x)", lambda z: np.tanh(3 * z) + np.abs(z - 0.3) * np.exp(z),
                      lambda z: torch.tanh(3 * z) + torch.abs(z - 0.3) * torch.exp(z)],  # numpy: by differences
}


@pytest.mark.parametrize("name, i", [(name, i) for name, ways in GENERAL.items() for i in range(1, len(ways))])
@pytest.mark.parametrize("batch", [4, 8])
def test_kinks_away_from_zero_against_adaptive_quadrature(name, i, batch):
    """Before: a kink away from 0 was not split: max(x, -1) at B = 8 was 4.4e-4 off (+- 1.2e-3), the step at 0.5 at
    B = 4 refused as not resolved; numpy's np.maximum / np.where were refused."""
    _holds(bnsym.gradient_rate(GENERAL[name][i], batch, with_error=True), _reference_rate(name, batch), REFERENCE_TOL)


@pytest.mark.parametrize("phi", [sp.Abs(x - sp.Rational(3, 10)), lambda z: np.abs(z - 0.3),
                                 lambda z: torch.abs(z - 0.3)])
def test_a_kink_at_0_3_is_found_to_float64(phi):
    activation = parse_activation(phi)
    assert activation.kinks == pytest.approx((0.3,), abs=1e-12) and activation.kink_power == 1.0


@pytest.mark.parametrize("phi", [sp.Max(0, x), lambda z: np.maximum(z, 0), torch.nn.ReLU()])
def test_forward_and_backward_quantities_of_a_kinked_user_relu(phi):
    """The fixed point and the backward operator's eigenvalues also split at the found kink."""
    point, closed = bnsym.fixed_point(phi, 8), bnsym.fixed_point("relu", 8)
    assert abs(point.q - closed.q) <= point.error + ROUNDING_FLOOR * closed.q
    user, built_in = (bnsym.backward_eigenvalues(f, 8, with_error=True) for f in (phi, "relu"))
    for key in ("L", "M"):  # built-in relu: its kink written by hand
        error = user[key].error + built_in[key].error + ROUNDING_FLOOR * abs(built_in[key].value)
        assert abs(user[key].value - built_in[key].value) <= error, key


@pytest.mark.parametrize("name, phi", [("elu", torch.nn.ELU()), ("elu(alpha=0.5)", torch.nn.ELU(0.5)),
                                       ("elu", lambda z: np.where(z > 0, z, np.expm1(np.minimum(z, 0))))])
@pytest.mark.parametrize("batch", [4, 8, 32])
def test_a_jump_of_phi_second_derivative_is_split(name, phi, batch):
    """ELU (alpha = 1) has a continuous phi' whose slope jumps at 0: it was not split (3.5e-4 off at B = 8)."""
    _holds(bnsym.gradient_rate(phi, batch, with_error=True), bnsym.gradient_rate(name, batch))


@pytest.mark.parametrize("phi, kinks", [
    (torch.nn.GELU(), ()),  # 0.5 z (1 + erf(z / sqrt 2)) cancels to 1e-15 near z = -8: rounding, not kinks
    (torch.nn.Mish(), ()), (torch.tanh, ()), (lambda z: np.tanh(z) + 0.1 * z, ()),
    (lambda z: torch.exp(z) + torch.relu(z), (0.0,)),  # a corner under a part that reaches e^40 on the scan
    (torch.nn.Hardswish(), (-3.0, 3.0)), (torch.nn.ReLU6(), (0.0, 6.0)), (torch.nn.Softsign(), (0.0,)),
])
def test_smooth_callables_show_no_kinks_and_kinked_ones_all(phi, kinks):
    assert parse_activation(phi).kinks == pytest.approx(kinks, abs=1e-8)


def test_overflow_far_out_is_no_kink():
    """cosh(20 z) overflows beyond |z| = 35.5, far outside the B = 4 sphere: no kinks, and the rate of before."""
    phi = parse_activation(lambda z: torch.cosh(20 * z))
    assert phi.kinks == ()
    _holds(bnsym.gradient_rate(phi, 4, with_error=True), bnsym.gradient_rate(sp.cosh(20 * x), 4))


def test_a_mixed_homogeneous_formula_takes_both_routes():
    """0.7 |x|^1.5 sign(x) + max(x, 0)^1.5 (a = 1.7, b = 0.7, alpha = 1.5) raised AttributeError ('And' has no
    attribute 'n') when its folded piecewise slope was lambdified; closed form and split quadrature agree."""
    phi = 0.7 * sp.Abs(x) ** sp.Rational(3, 2) * sp.sign(x) + sp.Max(x, 0) ** sp.Rational(3, 2)
    assert parse_activation(phi).degree == 1.5
    closed = bnsym.gradient_rate(phi, 8, with_error=True)
    _holds(bnsym.gradient_rate(phi, 8, method="spherical", with_error=True), closed.value)


def test_homogeneity_is_checked_at_many_points():
    """relu plus a bump far out is kinked at 0 only and equals relu at 0, +-1, +-2: it is not relu."""
    bumped = parse_activation(lambda z: torch.relu(z) + 1e-3 * torch.exp(-((z - 5) ** 2)))
    assert bumped.kinks == (0.0,) and bumped.degree is None
    assert parse_activation(lambda z: torch.nn.functional.leaky_relu(z, 0.2)).degree == 1.0


@pytest.mark.parametrize("phi", [lambda z: torch.relu(z - 0.2) ** 0.75, "relu(beta=0.5)^0.75",
                                 lambda z: np.abs(z) ** 0.75 + z])
def test_an_unbounded_slope_off_the_closed_forms_is_refused(phi):
    """relu(beta=0.5)^0.75 gave 1.70177 +- 0.0043 at B = 8, where adaptive quadrature split at the kink gives
    1.70612: the n-versus-2n estimate does not bound an error that converges algebraically."""
    with pytest.raises(ValueError, match="unbounded at its kink"):
        bnsym.gradient_rate(phi, 8)


@pytest.mark.parametrize("phi", ["relu^0.75", sp.Max(0, x) ** sp.Rational(3, 4)])
def test_the_spherical_rate_of_an_unbounded_slope_is_refused(phi):
    """method='spherical' for relu^0.75 gave 2.09716 +- 6.62e-3 at B = 8, 6.65e-3 from the closed form's 2.10380."""
    with pytest.raises(ValueError, match="unbounded at the kink"):
        bnsym.gradient_rate(phi, 8, method="spherical")


def test_formula_relu_is_max():
    """'relu(x) + 0.1*x' read 'parameter x is not a number': it is 1.1 leaky_relu(1/11), of the same rate."""
    reference = bnsym.gradient_rate(f"leaky_relu({1 / 11!r})", 8)
    _holds(bnsym.gradient_rate("relu(x) + 0.1*x", 8, with_error=True), reference)


def test_the_formula_x_is_the_identity():
    """'x' read 'unknown activation' while '1*x' worked."""
    assert bnsym.gradient_rate("x", 8) == pytest.approx(bnsym.gradient_rate("identity", 8), rel=1e-12)


@pytest.mark.parametrize("phi, match", [
    (torch.nn.Softmax(dim=0), "not elementwise"),  # gave lambda_G of about 1e-30
    (lambda t: t - t.mean(), "not elementwise"),  # gave 0
    (torch.sign, "0 almost everywhere"),  # gave 0
    (torch.round, "more than 32"),  # gave 0
    (sp.Heaviside(x), "0 almost everywhere"),  # NameError 'DiracDelta'
    (sp.sign(x), "0 almost everywhere"),  # NameError
    (x + sp.Heaviside(x), "power <= 1/2; 0 is a jump"),  # phi' holds a Dirac delta
    (sp.floor(x), "staircase"),  # PrintMethodNotImplementedError
    (sp.I * x, "not real-valued"),  # TypeError
    (sp.zoo * x, "infinite or undefined"),  # KeyError
    (sp.tanh(10**300 * x), "0 almost everywhere|Thm 9"),  # gave lambda_G = 0, below Thm 9's (B-2)/(B-3)
    (lambda z: np.maximum(z, 0) ** 0.5, "power <= 1/2"),  # E[phi'^2] infinite
])
def test_no_usable_slope_is_refused(phi, match):
    with pytest.raises(ValueError, match=match):
        bnsym.gradient_rate(phi, 4)


def test_rates_below_thm9_bound_are_refused():
    """A route's result below (B-2)/(B-3) beyond its error is refused rather than returned."""
    from bnsym.api import _check_thm9_bound
    from bnsym.core.estimate import Estimate

    _check_thm9_bound(Estimate(6 / 5, 0.0, "closed_form"), parse_activation("identity"), 8, 0.0)  # equality: linear
    with pytest.raises(ValueError, match="Thm 9"):
        _check_thm9_bound(Estimate(1.1, 0.01, "spherical"), parse_activation("tanh"), 8, 0.0)
    _check_thm9_bound(Estimate(0.9, 0.0, "radial"), parse_activation("tanh"), 8, 1.0)  # eps > 0: no such bound
