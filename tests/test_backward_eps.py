"""Backward L and M eigenvalues with eps > 0 (bnsym.meanfield.backward.operator_eigenvalues_eps; R16).

ACCEPTANCE: as eps -> 0 they tend to the eps = 0 operator; their lambda_G equals the radial route's gradient
rate (an independent quadrature of the trace); they agree with autograd through real random layers at the
fixed point, within k standard errors; past the collapse they are refused.
"""

from __future__ import annotations

import numpy as np
import pytest

import bnsym
from bnsym.core.activations import parse_activation
from bnsym.meanfield.backward import operator_eigenvalues, operator_eigenvalues_eps
from bnsym.sim import backward_rayleigh_autograd, mc_tolerance, mean_and_se


@pytest.mark.parametrize("spec", ["tanh", "relu"])
def test_small_eps_tends_to_eps_zero(spec):
    phi = parse_activation(spec)
    small, zero = operator_eigenvalues_eps(phi, 6, 1e-10), operator_eigenvalues(phi, 6)
    for key in "GLM":
        assert abs(small[key].value - zero[key].value) < 1e-6


@pytest.mark.parametrize("spec,batch,eps", [("tanh", 8, 0.2), ("relu", 16, 0.1), ("identity", 6, 0.3)])
def test_operator_G_is_the_radial_rate(spec, batch, eps):
    operator = operator_eigenvalues_eps(parse_activation(spec), batch, eps)["G"]
    rate = bnsym.gradient_rate(spec, batch, eps, with_error=True)
    assert abs(operator.value - rate.value) <= operator.error + rate.error + 1e-9


def test_only_eps_over_sigma_w2_matters():
    one, two = (bnsym.backward_eigenvalues("tanh", 8, eps, sigma_w2) for eps, sigma_w2 in ((0.2, 1.0), (0.4, 2.0)))
    for key in "GLM":
        assert abs(one[key] - two[key]) < 1e-12


def test_against_autograd_through_real_layers():
    cases = [("tanh", 8, 0.3), ("relu", 8, 0.1)]
    networks = 24
    k = mc_tolerance(networks, n_comparisons=3 * len(cases))
    for spec, batch, eps in cases:
        theory = bnsym.backward_eigenvalues(spec, batch, eps)
        sigma = bnsym.fixed_point(spec, batch, eps).matrix
        quotients = backward_rayleigh_autograd(spec, sigma, 128, networks, eps=eps, seed=batch)
        for key in "GLM":
            estimate = mean_and_se(quotients[key])
            assert abs(estimate.value - theory[key]) <= k * estimate.error, (spec, key, estimate, theory[key])


def test_autograd_probe_at_eps_zero_matches_the_formula_probe():
    sigma = bnsym.fixed_point("tanh", 6).matrix
    auto = backward_rayleigh_autograd("tanh", sigma, 64, 4, seed=3)
    assert all(np.isfinite(auto[key]).all() for key in "GLM")
    theory = bnsym.backward_eigenvalues("tanh", 6)
    k = mc_tolerance(4, n_comparisons=3)
    for key in "GLM":
        estimate = mean_and_se(auto[key])
        assert abs(estimate.value - theory[key]) <= k * estimate.error


def test_past_the_collapse_is_refused():
    with pytest.raises(ValueError, match="past the collapse"):
        bnsym.backward_eigenvalues("relu", 8, eps=5.0)
