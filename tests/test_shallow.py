"""bnsym.dilution.shallow (Philipp et al.: gradients explode, deep networks are shallow) against independent
references."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from bnsym import dilution
from bnsym.dilution import shallow
from bnsym.sim import philipp as sim


def test_residual_orders_are_elementary_symmetric_sums():
    p = np.array([0.3, 1.7, 0.2, 2.5])
    brute = [sum(np.prod(c) for c in itertools.combinations(p, j)) for j in range(5)]
    np.testing.assert_allclose(shallow.residual_orders(p), brute, rtol=1e-12)
    equal = shallow.residual_orders([0.4] * 12)
    assert math.isclose(equal[5:].sum(), dilution.residual_tail_bound(12, 0.4, 5), rel_tol=1e-12)


def test_infinite_depth_orders_are_the_limit_of_long_products():
    long = shallow.residual_orders(1.7 * 1.3 ** -np.arange(1.0, 400))[:8]
    np.testing.assert_allclose(shallow.infinite_depth_orders(1.7, 1.3, 8), long, rtol=1e-10)


def test_trace_orders_derivation_closes():
    derivation = shallow.derive_trace_orders()
    assert derivation["gap"] == 0


def test_orders_effective_depth():
    assert shallow.orders_effective_depth([1.0, 0.5, 0.1, 0.01], 0.05) == 2
    assert shallow.orders_effective_depth([1.0, 0.5], 10.0) == 0
    depth = dilution.effective_depth(20, 0.3, 1e-3)
    assert shallow.orders_effective_depth(shallow.residual_orders([0.3] * 20), 1e-3) == depth


def test_exact_order_sums_match_brute_force():
    gen = torch.Generator().manual_seed(0)
    d, n = 3, 4
    g = torch.randn(d, generator=gen, dtype=torch.float64)
    ins = [torch.randn(d, d, generator=gen, dtype=torch.float64) for _ in range(n)]
    res = [torch.randn(d, d, generator=gen, dtype=torch.float64) for _ in range(n)]
    terms = sim.residual_order_terms(g, ins, res)
    for j in range(n + 1):
        total = torch.zeros(d, dtype=torch.float64)
        for chosen in itertools.combinations(range(n), j):
            v = g
            for m in range(n):
                v = v @ (res[m] if m in chosen else ins[m])
            total += v
        torch.testing.assert_close(terms[j], total)


def test_theorem1_bound_and_theorem2_rate():
    assert shallow.theorem1_update_bound(50, 1.19) < 1e-2  # vacuous at realistic sizes, as the authors say
    assert math.isclose(float(shallow.theorem2_rate(0.5, 2.0)), math.sqrt(3.0))
    assert math.isclose(float(shallow.theorem2_bound(4, 0.5, 2.0, 2)), math.sqrt(3 / 4) * 3)
    s = np.array([0.5, 1.0, 1.5, 1.0])
    assert float(shallow.spread_probability(s, 0.25)) == 0.5


def test_parameter_identity_derivations():
    assert shallow.derive_parameter_sensitivity()["identity"] == 1
    assert shallow.derive_qm_multiplicativity()["gap"] == 0
    w = np.diag([2.0, 1.0, 1.0])  # ||W||_F = sqrt(6), W x = 2 x for x = e_1
    assert math.isclose(float(shallow.parameter_ratio(w, np.array([1.0, 0.0, 0.0]))), math.sqrt(6) / (2 * math.sqrt(3)))


@pytest.mark.parametrize("b", [5, 12, 60])
def test_minibatch_noise_against_quadrature(b):
    chi = stats.chi(b - 1)
    inv1 = math.sqrt(b) * integrate.quad(lambda t: chi.pdf(t) / t, 0, np.inf)[0]
    inv2 = b * integrate.quad(lambda t: chi.pdf(t) / t**2, 0, np.inf)[0]
    reference = (1 + 1 / b) * inv2 - 2 * inv1 + 1
    assert math.isclose(float(shallow.minibatch_noise(b)) ** 2, reference, rel_tol=1e-7)


def test_minibatch_noise_large_b_and_errors():
    assert math.isclose(float(shallow.minibatch_noise(1e5)) ** 2 * 1e5, 1.5, rel_tol=1e-3)
    assert shallow.derive_minibatch_noise()["leading"].free_symbols
    with pytest.raises(ValueError, match="b > 3"):
        shallow.minibatch_noise(3)
    assert math.isclose(float(shallow.minibatch_noise_ratio(10.0, 50)), 10 * float(shallow.minibatch_noise(50)))


def test_unnormalised_rate_and_variance_map():
    np.testing.assert_allclose(shallow.unnormalised_gsc_rate("relu", [0.01, 1.0, 50.0]), 1.0, rtol=1e-12)
    q = 0.7
    e_phi2 = integrate.quad(lambda z: math.tanh(math.sqrt(q) * z) ** 2 * stats.norm.pdf(z), -np.inf, np.inf)[0]
    e_d2 = integrate.quad(lambda z: (1 - math.tanh(math.sqrt(q) * z) ** 2) ** 2 * stats.norm.pdf(z), -np.inf, np.inf)[0]
    assert math.isclose(float(shallow.variance_map("tanh", 1.3, q)), 1.69 * e_phi2, rel_tol=1e-9)
    assert math.isclose(float(shallow.unnormalised_gsc_rate("tanh", q)), math.sqrt(q * e_d2 / e_phi2), rel_tol=1e-9)
    stable, exploding = (shallow.mean_field_gsc_curve("tanh", s, s * s, 200)[-1] for s in (1.0, 1.5))
    assert stable < 2 < exploding


def test_resnet_gsc_against_the_product():
    a, r2, blocks = 2.5, 1.4, 17
    product = np.prod([(a + b - 1 + r2) / (a + b) for b in range(1, blocks + 1)])
    assert math.isclose(float(shallow.resnet_gsc(a, r2, blocks)), math.sqrt(product), rel_tol=1e-10)
    per_block = [dilution.diluted_rate(math.sqrt(r2), math.sqrt(a + b - 1)) for b in range(1, blocks + 1)]
    assert math.isclose(float(shallow.resnet_gsc(a, r2, blocks)), float(np.prod(per_block)), rel_tol=1e-10)
    assert float(shallow.resnet_gsc(a, r2, 10**6, None)) < shallow.resnet_gsc_limit(a, r2) * (1 + 1e-5)
    assert shallow.derive_resnet_gsc()["check"] == 1


def test_bad_input_raises():
    with pytest.raises(ValueError):
        shallow.residual_orders([-1.0])
    with pytest.raises(ValueError, match="r > 1"):
        shallow.infinite_depth_orders(1.0, 1.0, 3)
    with pytest.raises(ValueError):
        shallow.orders_effective_depth([1.0], 0.0)
