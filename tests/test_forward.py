"""The BSB1 fixed point (bnsym.meanfield.forward through the public bnsym.fixed_point).

ACCEPTANCE: bnsym.fixed_point agrees with the catalogue's spherical integrals (Thm 4 / F.5) evaluated
independently (1-D quadrature of the marginal density for q*, the (theta_1, theta_2) angular form for
q* c*; conftest.sphere_fixed_point) to 1e-6 for relu, tanh and identity, B in {4, ..., 64}.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import HOMOGENEOUS, bn_monte_carlo, bsb1, centring, relu, sphere_fixed_point

import bnsym
from bnsym.core.activations import parse_activation
from bnsym.core.symbols import B
from bnsym.core.validation import MAX_BATCH_SIZE
from bnsym.meanfield.epsilon import fixed_point_radial
from bnsym.meanfield.forward import FixedPoint, bsb1_image, derive_homogeneous_fixed_point

ACCEPTANCE_BATCH_SIZES = [4, 5, 6, 8, 16, 32, 64]
ACCEPTANCE_PHIS = {"relu": (relu, (0.0,)), "tanh": (np.tanh, ()), "identity": (lambda x: x, ())}
K_SE = 5  # QMC tolerance in standard errors (16 scramblings: t with 15 dof, P(|t| > 5) ~ 2e-4 per entry)


def _relu_c_star(batch):
    """c* = J_1(-1/(B-1)) (Thm 5), J_1 typed in from the catalogue."""
    rho = -1.0 / (np.asarray(batch, dtype=float) - 1)
    return (np.sqrt(1 - rho**2) + (np.pi - np.arccos(rho)) * rho) / np.pi


@pytest.mark.parametrize("batch", ACCEPTANCE_BATCH_SIZES)
@pytest.mark.parametrize("spec", sorted(ACCEPTANCE_PHIS))
def test_acceptance_fixed_point_matches_spherical_integrals(spec, batch):
    f, kinks = ACCEPTANCE_PHIS[spec]
    q_ref, c_ref = sphere_fixed_point(f, batch, kinks)
    methods = [None, "spherical"] + (["laplace"] if spec != "tanh" else [])
    for method in methods:
        point = bnsym.fixed_point(spec, batch, method=method)
        assert isinstance(point, FixedPoint) and point.batch_size == batch and point.eps == 0
        assert point.q == pytest.approx(q_ref, abs=1e-6), method
        assert point.c == pytest.approx(c_ref, abs=1e-6), method


def test_default_methods():
    assert bnsym.fixed_point("relu", 8).method == "closed_form"
    assert bnsym.fixed_point("tanh", 8).method == "spherical"
    assert bnsym.fixed_point("relu", 8, eps=0.1).method == "radial"


@pytest.mark.parametrize("spec", sorted(HOMOGENEOUS))
@pytest.mark.parametrize("batch", ACCEPTANCE_BATCH_SIZES)
def test_laplace_and_spherical_agree(spec, batch):
    laplace = bnsym.fixed_point(spec, batch, method="laplace")
    spherical = bnsym.fixed_point(spec, batch, method="spherical")
    assert laplace.q == pytest.approx(spherical.q, abs=1e-9)
    assert laplace.q * laplace.c == pytest.approx(spherical.q * spherical.c, abs=1e-9)


@pytest.mark.parametrize("spec", ["relu^1.5", "relu^0.75", "relu^2.5"])
@pytest.mark.parametrize("batch", [4, 16, 64, 256])
def test_spherical_error_bounds_its_distance_to_laplace(spec, batch):
    laplace = bnsym.fixed_point(spec, batch, method="laplace")
    spherical = bnsym.fixed_point(spec, batch, method="spherical")
    assert abs(laplace.q - spherical.q) <= spherical.error + 1e-13
    assert abs(laplace.q * laplace.c - spherical.q * spherical.c) <= spherical.error + 1e-13


def test_relu_closed_form_and_large_batch_limit():
    """q* = 1/2 for every B; c* = J_1(-1/(B-1)) increases with B towards J_1(0) = 1/pi, and
    (1/pi - c*)(B - 1) -> J_1'(0) = 1/2."""
    batch = np.array([4, 5, 6, 8, 16, 32, 64, 128, 256, 1024, 4096])
    points = [bnsym.fixed_point("relu", int(b)) for b in batch]
    q = np.array([p.q for p in points])
    c = np.array([p.c for p in points])
    np.testing.assert_allclose(q, 0.5, rtol=0, atol=1e-11)
    np.testing.assert_allclose(c, _relu_c_star(batch), rtol=0, atol=1e-13)
    assert np.all(np.diff(c) > 0) and np.all(c < 1 / np.pi)
    gap = (1 / np.pi - c) * (batch - 1)
    assert np.all(np.diff(np.abs(gap - 0.5)) < 0)  # the first-order term takes over
    assert gap[-1] == pytest.approx(0.5, abs=1e-4)
    assert bnsym.fixed_point("relu", 10**4).c == pytest.approx(1 / np.pi, abs=1e-4)


def test_relu_q_is_one_half_at_large_batch():
    for batch in (10**6, MAX_BATCH_SIZE):
        assert bnsym.fixed_point("relu", batch).q == pytest.approx(0.5, abs=1e-12)


def test_derived_relu_fixed_point():
    """derive_homogeneous_fixed_point: its result c*(B) is Thm 5's J_1(-1/(B-1))."""
    result = derive_homogeneous_fixed_point().result
    for batch in (4, 9, 100):
        assert float(result.subs(B, batch)) == pytest.approx(float(_relu_c_star(batch)), abs=1e-14)


@pytest.mark.parametrize("batch", ACCEPTANCE_BATCH_SIZES)
def test_identity_fixed_point(batch):
    """phi = id: the BN output itself, q* = E x^2 = 1 and c* = -1/(B-1)."""
    for method in ("laplace", "spherical"):
        point = bnsym.fixed_point("identity", batch, method=method)
        assert point.q == pytest.approx(1.0, abs=1e-12)
        assert point.c == pytest.approx(-1 / (batch - 1), abs=1e-12)
        assert point.mu == pytest.approx(batch / (batch - 1), abs=1e-12)


@pytest.mark.parametrize("spec", ["relu", "tanh", "relu^2", "sin(gamma=2)"])
def test_matrix_property(spec):
    point = bnsym.fixed_point(spec, 7)
    matrix = point.matrix
    assert matrix.shape == (7, 7)
    np.testing.assert_allclose(np.diag(matrix), point.q, rtol=1e-15)
    off = matrix[~np.eye(7, dtype=bool)]
    np.testing.assert_allclose(off, point.q * point.c, rtol=1e-15)
    np.testing.assert_allclose(matrix, bsb1(7, point.q, point.c), rtol=1e-15)
    g = centring(7)
    np.testing.assert_allclose(g @ matrix @ g, point.mu * g, atol=1e-14)
    eigenvalues = np.linalg.eigvalsh(matrix)
    np.testing.assert_allclose(np.sort(eigenvalues), np.sort([point.mu] * 6 + [point.q * (1 + 6 * point.c)]),
                               atol=1e-13)


def test_bsb1_image_does_not_depend_on_mu():
    """eps = 0: any BSB1 input gives the same image. eps > 0 and mu -> oo: eps no longer matters."""
    phi = parse_activation("tanh")
    base = bsb1_image(phi, 8)
    for mu in (0.01, 50.0):
        image = bsb1_image(phi, 8, mu=mu)
        assert all(tuple(image[key]) == pytest.approx(tuple(base[key]), abs=1e-14) for key in ("q", "qc"))
    big = bsb1_image(phi, 8, mu=1e9, eps=0.1)
    assert big["q"].value == pytest.approx(base["q"].value, abs=1e-8)
    assert big["qc"].value == pytest.approx(base["qc"].value, abs=1e-8)


def test_bsb1_image_with_eps_matches_monte_carlo():
    """eps = 0.3, mu = 0.5: plain Monte Carlo of BN with eps on a BSB1 input, 400k samples, k = 5
    (SE of the diagonal mean and off-diagonal mean: std over samples of the per-sample means / sqrt(n)
    is bounded by the entrywise SE, which is what is used)."""
    batch, eps, mu = 8, 0.3, 0.5
    image = bsb1_image(parse_activation("tanh"), batch, mu=mu, eps=eps)
    q, qc = image["q"].value, image["qc"].value
    sigma = bsb1(batch, mu + 0.2, 0.2 / (mu + 0.2))  # G Sigma G = mu G
    mean, se = bn_monte_carlo(np.tanh, sigma, n=400_000, seed=12, eps=eps)
    off = ~np.eye(batch, dtype=bool)
    assert abs(np.diag(mean).mean() - q) < K_SE * np.diag(se).max()
    assert abs(mean[off].mean() - qc) < K_SE * se[off].max()


def test_eps_fixed_point_is_a_fixed_point():
    """fixed_point("tanh", 8, eps=0.1) satisfies V(Sigma*) = Sigma*, checked by randomised QMC (k = 5)."""
    point = bnsym.fixed_point("tanh", 8, eps=0.1)
    assert point.eps == 0.1 and point.method == "radial"
    assert point.mu < bnsym.fixed_point("tanh", 8).mu  # eps shrinks the BN output
    value, error = bnsym.bn_kernel("tanh", point.matrix, eps=0.1, method="qmc", with_error=True)
    assert np.all(np.abs(value - point.matrix) < K_SE * error)


def test_eps_fixed_point_error_bounds_its_residual():
    phi = parse_activation("tanh")
    point = fixed_point_radial(phi, 8, eps=0.1)
    image = bsb1_image(phi, 8, mu=point.mu, eps=0.1, n_radial=160)  # a much finer radial rule
    q, qc = image["q"].value, image["qc"].value
    assert abs(q - point.q) <= 5 * point.error + 1e-13
    assert abs(qc - point.q * point.c) <= 5 * point.error + 1e-13


def test_eps_tends_to_zero():
    assert bnsym.fixed_point("tanh", 8, eps=1e-9).q == pytest.approx(bnsym.fixed_point("tanh", 8).q, abs=1e-6)


@pytest.mark.parametrize("spec", ["tanh", "relu"])
def test_large_eps_collapses(spec):
    """No fixed point with mu > 0 for eps >= 1 (B = 8): the attracting one is mu* = 0, flagged, not an error.

    With G Sigma G = mu G, y = G h has |y|^2 = mu r^2 (r ~ chi_{B-1}), and the BN output is
    n_eps(y) = y / sqrt(|y|^2/B + eps), so |n_eps(y)|^2 < mu r^2 / eps. tanh and relu are 1-Lipschitz
    with phi(0) = 0, so the next mu' = E|G phi(n_eps(y))|^2/(B-1) <= E|n_eps(y)|^2/(B-1) < mu E[r^2]/((B-1) eps)
    = mu / eps: the map mu -> mu' is below mu/eps times a factor < 1 (for small mu tanh is linear and
    the factor tends to 1, for larger mu the normalisation and the saturation shrink it). For eps >= 1
    every mu > 0 shrinks, so the batch collapses to mu* = 0 (and Sigma* = phi(0)^2 11^T = 0).
    """
    point = bnsym.fixed_point(spec, 8, eps=1.0)
    assert point.collapsed and point.mu == 0 and point.q == 0
    assert bnsym.collapse_eps(spec, 8) <= 1.0 + 1e-12  # tanh: exactly phi'(0)^2 = 1, up to rounding
