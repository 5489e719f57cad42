"""Kinked activations a user brings (bnsym.core.kinks): every way of passing relu, leaky relu and relu^1.5 gives the
closed form's lambda_G within 1e-6 relative, with a stated error that covers the difference (plus float64 rounding,
``ROUNDING_FLOOR``); kinks away from 0 are split too; what has no usable phi' is refused with the reason."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch

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
                 lambda z: np.maximum(z, 0) ** 1.5, lambda z: torch.relu(z) ** 1.5],
}
CASES = [(name, i) for name, ways in WAYS.items() for i in range(len(ways))]


def _holds(estimate, reference: float) -> None:
    difference = abs(estimate.value - reference)
    assert difference <= 1e-6 * reference, (estimate, reference)
    assert difference <= estimate.error + ROUNDING_FLOOR * reference, (estimate, reference)


@pytest.mark.parametrize("name, i", CASES)
@pytest.mark.parametrize("batch", [4, 8, 32])
def test_kinked_user_activation_gives_the_closed_form(name, i, batch):
    """Before the kinks were found: relu at B = 4 gave 3.1005 +- 2.8e-4 against 3.0841 (z = 59); numpy refused."""
    reference = bnsym.gradient_rate(name, batch, method="closed_form")
    _holds(bnsym.gradient_rate(WAYS[name][i], batch, with_error=True), reference)


GENERAL = {  # kinks away from 0, against a built-in whose kink is written by hand (phi + c has phi's rate:
    # the next batch norm removes a constant shift of every pre-activation)
    "relu(beta=1)": [sp.Max(x, -1), "max(x, -1)", lambda z: np.maximum(z, -1.0), lambda z: torch.clamp(z, min=-1.0)],
    "relu(beta=-0.5)": [sp.Piecewise((x, x > sp.Rational(1, 2)), (sp.Rational(1, 2), True)),
                        lambda z: np.where(z > 0.5, z, 0.5), lambda z: torch.relu(z - 0.5)],
}


@pytest.mark.parametrize("name, i", [(name, i) for name, ways in GENERAL.items() for i in range(len(ways))])
@pytest.mark.parametrize("batch", [4, 8, 32])
def test_kinks_away_from_zero_are_split(name, i, batch):
    _holds(bnsym.gradient_rate(GENERAL[name][i], batch, with_error=True), bnsym.gradient_rate(name, batch))


@pytest.mark.parametrize("phi", [sp.Abs(x - sp.Rational(3, 10)), lambda z: np.abs(z - 0.3),
                                 lambda z: torch.abs(z - 0.3)])
def test_a_kink_at_0_3_is_found_to_float64(phi):
    activation = parse_activation(phi)
    assert activation.kinks == pytest.approx((0.3,), abs=1e-12) and activation.kink_power == 1.0
    reference = bnsym.gradient_rate(sp.Abs(x - sp.Rational(3, 10)), 8, with_error=True)
    _holds(bnsym.gradient_rate(phi, 8, with_error=True), reference.value)


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
    (torch.round, "more than 32 kinks"),  # gave 0
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
