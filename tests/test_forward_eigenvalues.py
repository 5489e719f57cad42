"""Forward eigenvalues at the BSB1 fixed point (bnsym.forward_eigenvalues, bnsym.alpha_transition).

ACCEPTANCE: forward_eigenvalues agrees with central finite differences of the exact finite-B map (Laplace
kernel for positive-homogeneous phi; common-random-number QMC for tanh) and with the layer-1 response of
simulated wide networks, for relu, tanh, identity and relu^alpha at B from 4 to 64; alpha_transition(B) is
bracketed to 1e-4 by the independent spherical route.
"""

from __future__ import annotations

from itertools import permutations

import numpy as np
import pytest

import bnsym
from bnsym.core.estimate import Estimate
from bnsym.core.geometry import eigen_directions
from bnsym.core.symbols import P00, P11, P20, S0, S2, B
from bnsym.meanfield import forward_linear as fl
from bnsym.meanfield.forward_linear import depth_scales, finite_difference_eigenvalues, spherical_eigenvalues
from bnsym.meanfield.ultrasymmetric import CLASSES
from bnsym.sim import mean_and_se, simulated_decay

HOMOGENEOUS = ["relu", "identity", "relu^1.5", "leaky_relu(0.2)"]
K_SE = 5  # tolerance in standard errors (QMC scramblings or independent networks)


@pytest.mark.parametrize("batch", [4, 5, 8, 16, 64])
@pytest.mark.parametrize("spec", HOMOGENEOUS)
def test_acceptance_closed_form_matches_finite_differences(spec, batch):
    lam = bnsym.forward_eigenvalues(spec, batch)
    assert set(lam) == {"G", "L", "M"} and all(isinstance(v, float) for v in lam.values())
    fd = finite_difference_eigenvalues(bnsym.parse_activation(spec), batch)
    for key in lam:
        assert abs(lam[key] - fd[key].value) < 1e-7 + 5 * fd[key].error, key


@pytest.mark.parametrize("batch", [4, 8, 64])
@pytest.mark.parametrize("spec", ["relu", "identity", "relu^2", "relu^0.75"])
def test_spherical_route_matches_closed_form(spec, batch):
    closed = bnsym.forward_eigenvalues(spec, batch, method="closed_form")
    spherical = spherical_eigenvalues(bnsym.parse_activation(spec), batch)
    for key in closed:
        assert abs(closed[key] - spherical[key].value) < 1e-9 + 3 * spherical[key].error, key


@pytest.mark.parametrize("batch", [4, 8, 64])
def test_acceptance_tanh_matches_finite_differences(batch):
    lam = bnsym.forward_eigenvalues("tanh", batch)
    fd = finite_difference_eigenvalues(bnsym.parse_activation("tanh"), batch, n_points=2**11, n_replicates=12)
    for key in ("L", "M"):
        assert abs(lam[key] - fd[key].value) < K_SE * fd[key].error, key
    assert abs(fd["G"].value) < K_SE * fd["G"].error


@pytest.mark.parametrize("spec, batch, key", [("relu", 4, "L"), ("tanh", 16, "M"), ("identity", 8, "L"),
                                              ("relu^1.5", 64, "M")])
def test_acceptance_network_layer_one_response(spec, batch, key):
    """d_1 = <G^1(+) - G^1(-), Lam>/(2 delta) is unbiased at finite width; its mean must be lambda
    (5 SE across networks)."""
    lam = bnsym.forward_eigenvalues(spec, batch)[key]
    point = bnsym.fixed_point(spec, batch)
    d = simulated_decay(spec, point.matrix, eigen_directions(batch)[key], 0.1 * point.mu, width=256, n_networks=8,
                        depth=1, seed=3)
    mean, se = mean_and_se(d[:, 1])
    assert np.allclose(d[:, 0], 1.0)
    assert abs(mean - lam) < K_SE * se


@pytest.mark.parametrize("batch", [5, 6, 8, 64])
def test_alpha_transition_bracketed_by_spherical_route(batch):
    alpha = bnsym.alpha_transition(batch)
    assert isinstance(alpha, float) and alpha > 1
    below = spherical_eigenvalues(bnsym.parse_activation(f"relu^{alpha - 1e-4!r}"), batch)
    above = spherical_eigenvalues(bnsym.parse_activation(f"relu^{alpha + 1e-4!r}"), batch)
    assert below["L"].value < 1 < above["L"].value and above["M"].value < 1


def test_no_transition_at_batch_size_four():
    assert bnsym.alpha_transition(4) is None


def test_default_and_explicit_methods():
    assert bnsym.forward_eigenvalues("relu", 8) == bnsym.forward_eigenvalues("relu", 8, method="closed_form")
    spherical = bnsym.forward_eigenvalues("relu", 8, method="spherical")
    assert spherical["G"] == 0.0 and abs(spherical["L"] - bnsym.forward_eigenvalues("relu", 8)["L"]) < 1e-9


@pytest.mark.parametrize("kwargs, match", [
    ({"phi": "relu", "B": 3}, "below 4"),
    ({"phi": "relu", "B": 8.5}, "whole number"),
    ({"phi": "swosh", "B": 8}, "unknown activation"),
    ({"phi": "relu", "B": 8, "eps": -1.0}, "eps"),
    ({"phi": "relu", "B": 8, "eps": 0.1, "method": "closed_form"}, "eps = 0"),
    ({"phi": "relu", "B": 8, "method": "fourier"}, "unknown method"),
    ({"phi": "relu", "B": 8, "method": "gegenbauer", "tol": -1.0}, "tol must be a finite number > 0"),
    ({"phi": "tanh", "B": 8, "method": "closed_form"}, "positive-homogeneous"),
])
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bnsym.forward_eigenvalues(**kwargs)


@pytest.mark.parametrize("batch, match", [(3, "below 4"), (7.5, "whole number"), (True, "whole number")])
def test_alpha_transition_bad_input(batch, match):
    with pytest.raises(ValueError, match=match):
        bnsym.alpha_transition(batch)


def test_depth_scales():
    scales = {key: xi.value for key, xi in depth_scales({"G": 0.0, "L": 1.2, "M": np.exp(-0.5),
                                                          "N": -np.exp(-2.0)}).items()}
    assert scales["G"] == 0.0 and scales["L"] == np.inf
    assert scales["M"] == pytest.approx(2.0) and scales["N"] == pytest.approx(0.5)


def test_a_depth_scale_within_its_error_of_one_is_inf_and_says_why():
    """-1/log(lambda) near lambda = 1 is rounding noise: 1 - 1e-16 gives 9e15 on one CPU and inf on another."""
    scales = depth_scales({"L": Estimate(1 - 1e-9, 2e-9, "radial"), "M": 1 - 1e-16, "R": Estimate(0.5, 1e-3, "x")})
    assert scales["L"].value == scales["M"].value == np.inf
    assert "within its error" in scales["L"].note and "abs(lambda_L)" in scales["L"].note
    # resolved: the error is the larger change of xi over lambda +- error
    assert scales["R"].error == pytest.approx(1 / np.log(1 / 0.501) - 1 / np.log(2), rel=1e-9)
    assert scales["R"].note == ""


@pytest.mark.parametrize("batch", (4, 5, 9))
def test_class_reduction_is_exact_for_symmetrised_sphere_points(batch):
    """Averaged over all index tuples, the constraints sum x = 0, |x|^2 = B hold point by point, so the
    reduction of the 11 classes to one- and two-coordinate moments must hold exactly for any sample."""
    rng = np.random.default_rng(batch)
    y = rng.standard_normal((5, batch))
    y -= y.mean(axis=1, keepdims=True)
    x = np.sqrt(batch) * y / np.linalg.norm(y, axis=1, keepdims=True)
    f = np.tanh(x) + 0.3 * x**2  # neither odd nor even

    def average(pattern):  # E over the sample and over all distinct index assignments of the pattern's labels
        labels = sorted(set(pattern))
        values = [np.mean(np.prod([f[:, idx[labels.index(p)]] if k < 2 else x[:, idx[labels.index(p)]]
                                   for k, p in enumerate(pattern)], axis=0))
                  for idx in permutations(range(batch), len(labels))]
        return np.mean(values)

    moments = {S0: average("11"), S2: average("1111"), P00: average("12"),
               P20: average("1211"), P11: average("1212")}
    reduction = fl.derive_class_reduction().result
    for name in CLASSES:
        a, b_, c_, d_ = name[0], name[1], name[3], name[4]
        direct = average(a + b_ + c_ + d_)
        assert float(reduction[name].subs(B, batch).subs(moments)) == pytest.approx(direct, rel=1e-9, abs=1e-12), name


def _gaussian_moment_ratio(phi) -> float:
    """(E phi'(z))^2 / Var phi(z), z ~ N(0, 1), by adaptive quadrature on each half line (phi kinks at 0)."""
    from scipy.integrate import quad

    def expect(f) -> float:
        density = lambda z: f(z) * np.exp(-z * z / 2) / np.sqrt(2 * np.pi)  # noqa: E731
        return quad(density, -np.inf, 0)[0] + quad(density, 0, np.inf)[0]

    slope, mean, second = (expect(f) for f in (phi.numpy_derivative, phi.numpy, lambda z: phi.numpy(z) ** 2))
    return slope**2 / (second - mean**2)


LARGE_BATCH = ["relu", "identity", "relu^1.5", "leaky_relu(0.2)", "relu^2", "relu^0.75"]


@pytest.mark.parametrize("spec", LARGE_BATCH)
def test_large_batch_limits_are_those_of_prop_f34(spec):
    """lambda_L -> alpha and lambda_M -> (E phi')^2 / Var phi, the latter by quadrature of phi itself."""
    phi = bnsym.parse_activation(spec)
    limits = fl.large_batch_eigenvalues(phi)
    assert limits["L"] == pytest.approx(phi.degree, rel=1e-12)
    assert limits["M"] == pytest.approx(_gaussian_moment_ratio(phi), rel=1e-8)


@pytest.mark.parametrize("spec", LARGE_BATCH)
def test_large_batch_gap_shrinks_like_the_derived_next_order_term(spec):
    """At B = 2^10 .. 2^14 the closed form is lambda^oo + s/B + O(B^-2), so e_B = B (lambda(B) - lambda^oo) - s is
    O(1/B) and halves as B doubles. A wrong limit makes e_B grow like B (ratio 2), a wrong s leaves it constant
    (ratio 1); the O(B^-3) terms move the ratio from 1/2 by O(1/B), so (0.4, 0.6) separates the three."""
    limits = fl.large_batch_eigenvalues(bnsym.parse_activation(spec))
    batch = 2.0 ** np.arange(10, 15)
    lam = bnsym.forward_eigenvalues(spec, batch, method="closed_form")
    for key in ("L", "M"):
        excess = batch * (lam[key] - limits[key]) - limits[f"{key}_slope"]
        assert np.all(np.abs(excess) > 1e-8), (key, excess)  # far above the rounding of B lambda (~1e-11)
        ratios = excess[1:] / excess[:-1]
        assert np.all((ratios > 0.4) & (ratios < 0.6)), (key, ratios)


def test_large_batch_limits_need_the_closed_form():
    with pytest.raises(ValueError, match="positive-homogeneous"):
        fl.large_batch_eigenvalues(bnsym.parse_activation("tanh"))
