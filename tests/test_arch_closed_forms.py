"""The closed forms of erf(gamma z) (Williams' arcsine kernel and its slope kernel, the NTK's derivative map),
derived in SymPy (bnsym.meanfield.kernels.derive_erf_kernels), against Gauss-Hermite quadrature of phi itself; and
bnsym.arch's kernel and NTK of erf networks through them, against the same networks through quadrature."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import bsb1, random_psd

from bnsym import arch
from bnsym.arch import Activation, Dense, LayerNorm, repeat
from bnsym.arch import backward as arch_backward
from bnsym.arch import graph as arch_graph
from bnsym.core.activations import parse_activation
from bnsym.meanfield.kernels import erf_kernel, erf_scale, gauss_hermite_kernel, gaussian_kernel, is_odd

GRAMS = [random_psd(6, 14, 0), 1.5 * random_psd(6, 3, 1), bsb1(6, 0.5, 0.2), 1e-6 * random_psd(6, 6, 2)]
ERFS = ["erf", "erf(gamma=2)", "erf(gamma=0.3)", "erf(gamma=-1.5)"]


def _quadrature(function, sigma: np.ndarray) -> np.ndarray:
    """E[f(h) f(h)^T] by Gauss-Hermite, the nodes per axis doubled from 256 until its stated error (the change from
    half the nodes) is below 1e-13 of its size."""
    for degree in (256, 512, 1024, 2048):
        estimate = gauss_hermite_kernel(function, sigma, degree)
        if estimate.error.max() <= 1e-13 * np.abs(estimate.value).max():
            return estimate.value
    raise AssertionError("the reference quadrature did not converge")


@pytest.mark.parametrize("spec", ERFS)
@pytest.mark.parametrize("slope", [False, True])
def test_erf_closed_forms_match_quadrature(spec, slope):
    phi = parse_activation(spec)
    for sigma in GRAMS:
        closed = erf_kernel(phi, sigma, slope)
        reference = _quadrature(phi.numpy_derivative if slope else phi, sigma)
        assert np.abs(closed - reference).max() <= 1e-12 * np.abs(reference).max()


def test_erf_closed_forms_broadcast_over_replicates():
    phi, stack = parse_activation("erf"), np.stack(GRAMS)
    assert np.array_equal(erf_kernel(phi, stack), np.stack([erf_kernel(phi, sigma) for sigma in GRAMS]))


@pytest.mark.parametrize("spec, gamma", [("erf", 1.0), ("erf(gamma=2)", 2.0), ("erf(gamma=-0.5)", 0.5),
                                         ("erf(3*x)", 3.0), ("-erf(x/4)", 0.25), ("erf(x)/2", None),
                                         ("erf(x + 1)", None), ("tanh", None), ("relu", None), ("gelu", None)])
def test_erf_is_recognised_by_its_expression(spec, gamma):
    assert erf_scale(parse_activation(spec)) == gamma


def _erf_net(depth: int = 3):
    return repeat([Dense(1.5, 0.1), Activation("erf(gamma=1.3)")], depth)


def test_arch_uses_the_closed_forms_for_erf(monkeypatch):
    """No quadrature runs for an erf network's kernel and NTK (on the old code both ran Gauss-Hermite)."""
    def refuse(*args):
        raise AssertionError("Gauss-Hermite quadrature ran")

    monkeypatch.setattr(arch_graph, "hermite_kernel", refuse)
    monkeypatch.setattr(arch_backward, "hermite_kernel", refuse)
    sigma = random_psd(16, 24, 3)
    assert np.all(np.isfinite(arch.kernel(_erf_net(), sigma))) and np.all(np.isfinite(arch.ntk(_erf_net(), sigma)))


def test_arch_erf_network_matches_the_quadrature_route(monkeypatch):
    """Kernel and NTK of [Dense, erf] x 3 at B = 8 by the closed forms, and by Gauss-Hermite (the closed forms
    switched off): within 1e-12 of the largest entry."""
    sigma = random_psd(8, 12, 3)
    closed = arch.kernel(_erf_net(), sigma), arch.ntk(_erf_net(), sigma)
    monkeypatch.setattr(arch_graph, "erf_kernel", lambda *args, **kwargs: None)
    monkeypatch.setattr(arch_backward, "erf_kernel", lambda *args, **kwargs: None)
    quadrature = arch.kernel(_erf_net(), sigma), arch.ntk(_erf_net(), sigma)
    for ours, reference in zip(closed, quadrature):
        assert np.abs(ours - reference).max() <= 1e-12 * np.abs(reference).max()


@pytest.mark.parametrize("spec", ["erf", "tanh", "sin(gamma=0.5)"])
def test_layer_norm_after_an_odd_activation(spec):
    """LayerNorm after an odd phi of a Gaussian: the mean E[phi(h)] is 0 by symmetry. Quadrature gave it as
    rounding (1e-17) with an error of the same size, a relative error of order 1 that made the kernel 'not resolved'
    (a ValueError on the old code). Reference: the blocks one at a time, LayerNorm applied by hand to the kernel of
    [Dense, phi] (K_ab / sqrt(K_aa K_bb) for a zero mean)."""
    sigma = random_psd(8, 12, 4)
    ours = arch.kernel(repeat([Dense(1.0, 0.1), Activation(spec), LayerNorm()], 2), sigma)
    reference = sigma
    for _ in range(2):
        inner = arch.kernel([Dense(1.0, 0.1), Activation(spec)], reference)
        reference = inner / np.sqrt(np.outer(np.diag(inner), np.diag(inner)))
    assert np.abs(ours - reference).max() <= 1e-12 * np.abs(reference).max()


def test_odd_activations_are_recognised():
    odd = {spec: is_odd(parse_activation(spec)) for spec in ("erf", "tanh(gamma=0.5)", "sin", "x**3", "identity",
                                                              "gelu", "swish", "x**2", "cos(x)")}
    assert odd == {"erf": True, "tanh(gamma=0.5)": True, "sin": True, "x**3": True, "identity": True,
                   "gelu": False, "swish": False, "x**2": False, "cos(x)": False}


def _sheppard_slope(phi, kernel: np.ndarray) -> np.ndarray:
    """E[phi'(h_a) phi'(h_b)] for phi = relu, leaky_relu(s) (phi' = 1 or s by sign) or relu^2 (phi' = 2 relu), from
    Sheppard's orthant probability P(h_a > 0, h_b > 0) = 1/4 + arcsin(c) / (2 pi), or from the relu kernel: an arcsine,
    where bnsym's route reads the arc-cosine kernel J_0 (and J_1) from one correlation shared with the kernel map."""
    root = np.sqrt(np.diag(kernel))
    corr = np.clip(np.divide(kernel, np.outer(root, root), out=np.zeros_like(kernel), where=np.outer(root, root) > 0),
                   -1, 1)
    np.fill_diagonal(corr, root > 0)  # exactly 1: arcsin's slope is infinite there, and rounding would cost 1e-8
    same = 0.25 + np.arcsin(corr) / (2 * np.pi)  # P(++) = P(--)
    if phi.degree == 2:
        return 4 * gaussian_kernel(parse_activation("relu"), kernel)
    s = phi.ab[1]  # leaky_relu(s) = a relu(z) - b relu(-z) with a = 1, b = s
    return same + 2 * s * (0.5 - same) + s * s * same


@pytest.mark.parametrize("spec", ["relu", "leaky_relu(0.2)", "relu^2"])
@pytest.mark.parametrize("bias", [0.1, 0.0])
def test_arch_homogeneous_network_matches_a_loop_of_the_public_maps(spec, bias):
    """Kernel and NTK of [Dense(1.5, bias), phi] x 3 (the kernel map and slope map from one kept correlation per
    layer), against a loop of meanfield's gaussian_kernel (its own correlation) and Sheppard's orthant probability
    for the slope: within 1e-12 of the largest entry. With bias 0 and one input 0, a variance is 0 at every layer
    (the masked branch)."""
    phi = parse_activation(spec)
    sigma = random_psd(8, 12, 5)
    sigma[0], sigma[:, 0] = 0.0, 0.0
    if bias:
        sigma = random_psd(8, 12, 5)
    kernel, theta = sigma, np.zeros_like(sigma)
    for _ in range(3):
        h = 1.5 * kernel + bias
        theta = (1.5 * theta + h) * _sheppard_slope(phi, h)
        kernel = gaussian_kernel(phi, h)
    net = repeat([Dense(1.5, bias), Activation(spec)], 3)
    ours_kernel, ours_ntk = arch.kernel(net, sigma), arch.ntk(net, sigma)
    assert np.abs(ours_kernel - kernel).max() <= 1e-12 * np.abs(kernel).max()
    assert np.abs(ours_ntk - (kernel + theta)).max() <= 1e-12 * np.abs(kernel + theta).max()
