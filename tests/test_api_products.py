"""bnsym.api's products functions (Bjorck et al. 2018), each held against an independent route, and their input
contract."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import roots_jacobi

from bnsym import api


def test_density_for_one_factor_is_marchenko_pastur():
    x = np.linspace(0.05, 3.95, 40)
    np.testing.assert_allclose(api.fuss_catalan_density(x, 1), np.sqrt(4 * x - x**2) / (2 * np.pi * x), rtol=1e-9)
    assert isinstance(api.fuss_catalan_density(1.0, 1), float)
    assert api.fuss_catalan_density(0.0, 2) == math.inf and api.fuss_catalan_density(7.0, 2) == 0.0


@pytest.mark.parametrize("m", [2, 3, 5])
def test_moments_are_the_density_integrals(m):
    # x = edge t^(M+1) removes the hard-edge singularity; Gauss-Jacobi in t with weight sqrt(1 - t) takes the
    # square-root zero at the soft edge
    edge = api.fuss_catalan_edges(m)["soft"]
    s, weights = roots_jacobi(400, 0.5, 0.0)
    t = (s + 1) / 2
    x = edge * t ** (m + 1)
    jacobian = edge * (m + 1) * t**m / np.sqrt(1 - t) * weights / 2 ** 1.5
    for k in range(4):
        value = np.sum(x**k * api.fuss_catalan_density(x, m) * jacobian)
        assert value == pytest.approx(api.fuss_catalan_moment(k, m), rel=1e-6)


@pytest.mark.parametrize("m", [1, 2, 4])
def test_edges_bound_and_describe_the_density(m):
    edges = api.fuss_catalan_edges(m)
    soft = edges["soft"]
    assert api.fuss_catalan_density(soft * (1 - 1e-6), m) > 0 and api.fuss_catalan_density(soft * (1 + 1e-6), m) == 0
    tiny = 1e-30  # the next term of the expansion is of relative size x^(1/(M+1))
    leading = edges["hard_coefficient"] * tiny ** edges["hard_exponent"]
    assert api.fuss_catalan_density(tiny, m) == pytest.approx(leading, rel=1e-5)
    slope = np.diff(np.log(api.fuss_catalan_density(np.array([1e-30, 1e-28]), m))) / np.log(100)
    assert slope[0] == pytest.approx(edges["hard_exponent"], abs=1e-4)


def test_log_condition_number_matches_a_plain_svd_where_that_is_exact():
    rng = np.random.default_rng(3)
    factors = np.eye(6) + 0.2 * rng.standard_normal((4, 3, 6, 6))  # well conditioned: the SVD is accurate
    products = factors[:, 0] @ factors[:, 1] @ factors[:, 2]
    np.testing.assert_allclose(api.log_condition_number(factors), np.log(np.linalg.cond(products)), rtol=1e-10)
    assert isinstance(api.log_condition_number(factors[0]), float)
    tensor = api.log_condition_number(torch.as_tensor(factors))
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (4,)


def test_max_stable_lr_separates_converging_and_diverging_descent():
    rng = np.random.default_rng(4)
    abar, x, y = rng.standard_normal((5, 4)), rng.standard_normal((4, 7)), rng.standard_normal((5, 7))
    eta = api.max_stable_lr(abar, x)

    def final_loss(step):
        a1 = np.zeros((4, 4))
        for _ in range(3000):
            a1 -= step * 2 * abar.T @ (abar @ a1 @ x - y) @ x.T
        return np.sum((abar @ a1 @ x - y) ** 2)

    assert np.isfinite(final_loss(0.95 * eta)) and final_loss(0.95 * eta) < np.sum(y**2)
    assert not final_loss(1.05 * eta) < 1e6


@pytest.mark.parametrize("call, match", [
    (lambda: api.fuss_catalan_density(np.nan, 2), "finite"),
    (lambda: api.fuss_catalan_density(1.0, 0), "between 1 and"),
    (lambda: api.fuss_catalan_moment(-1, 2), "between 0 and"),
    (lambda: api.fuss_catalan_moment(2, 1.5), "whole number"),
    (lambda: api.fuss_catalan_edges(True), "whole number"),
    (lambda: api.log_condition_number(np.ones((3, 3))), "at least 3 axes"),
    (lambda: api.log_condition_number(np.ones((2, 3, 4))), "square"),
    (lambda: api.log_condition_number(np.zeros((2, 3, 3))), "singular"),
    (lambda: api.max_stable_lr(np.ones((2, 3)), np.ones((2, 2))), "chain"),
    (lambda: api.max_stable_lr(np.zeros((2, 3)), np.ones((3, 2))), "does not depend"),
])
def test_bad_input_says_what_and_why(call, match):
    with pytest.raises(ValueError, match=match):
        call()
