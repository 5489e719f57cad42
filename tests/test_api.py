"""The public API bnsym.bn_kernel / bnsym.fixed_point: fixed-point property, methods, error estimates,
simulated wide networks, and the input validation shared with the CLI (bnsym.core.validation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import bn_monte_carlo, bsb1, random_psd

import bnsym
from bnsym.core.activations import parse_activation
from bnsym.meanfield.forward import bsb1_image
from bnsym.meanfield.qmc import bn_kernel_qmc
from bnsym.sim import inputs_with_gram, simulate_forward

K_SE = 5  # QMC: SE = std over 16 scramblings / 4 (t with 15 dof); plain Monte Carlo: std over samples / sqrt(n)
K_NETWORKS = 4.5  # networks: SE = std over M = 64 networks / 8


def test_public_names():
    assert set(bnsym.__all__) >= {"Activation", "FixedPoint", "bn_kernel", "fixed_point", "parse_activation"}


@pytest.mark.parametrize("spec", ["relu", "tanh"])
@pytest.mark.parametrize("batch", [4, 8])
def test_bn_kernel_maps_the_fixed_point_to_itself(spec, batch):
    point = bnsym.fixed_point(spec, batch)
    value, error = bnsym.bn_kernel(spec, point.matrix, with_error=True)
    np.testing.assert_allclose(value, point.matrix, rtol=0, atol=1e-10)
    assert np.all(error < 1e-9)
    # any BSB1 input, not only Sigma* itself, goes to Sigma* in one step (Thm F.5)
    np.testing.assert_allclose(bnsym.bn_kernel(spec, bsb1(batch, 3.0, 0.6)), point.matrix, rtol=0, atol=1e-10)


def test_bn_kernel_qmc_at_the_fixed_point():
    point = bnsym.fixed_point("tanh", 6)
    value, error = bnsym.bn_kernel("tanh", point.matrix, method="qmc", with_error=True)
    assert np.all(np.abs(value - point.matrix) < K_SE * error)


def test_bn_kernel_default_methods(generic_sigma):
    """laplace for homogeneous phi, spherical for BSB1 inputs, qmc otherwise: the answers agree."""
    relu_laplace, relu_error = bnsym.bn_kernel("relu", generic_sigma, with_error=True)
    assert relu_error.max() < 1e-9  # a quadrature error, not a Monte Carlo one
    relu_qmc, qmc_error = bnsym.bn_kernel("relu", generic_sigma, method="qmc", with_error=True)
    assert np.all(np.abs(relu_laplace - relu_qmc) < K_SE * qmc_error)
    default = bnsym.bn_kernel("tanh", generic_sigma)
    np.testing.assert_array_equal(default, bnsym.bn_kernel("tanh", generic_sigma, method="qmc"))
    point = bnsym.fixed_point("tanh", 6)
    np.testing.assert_array_equal(bnsym.bn_kernel("tanh", point.matrix),
                                  bnsym.bn_kernel("tanh", point.matrix, method="spherical"))


def test_bn_kernel_tanh_matches_plain_monte_carlo(generic_sigma):
    """QMC vs 400k plain Monte Carlo samples; the difference has SE sqrt(se_qmc^2 + se_mc^2); k = 5."""
    value, error = bnsym.bn_kernel("tanh", generic_sigma, with_error=True)
    mean, se = bn_monte_carlo(np.tanh, generic_sigma, n=400_000, seed=21)
    assert np.all(np.abs(value - mean) < K_SE * np.sqrt(error**2 + se**2))


def test_bn_kernel_output_is_a_covariance(generic_sigma):
    for spec in ("relu", "tanh", "relu^1.5"):
        value = bnsym.bn_kernel(spec, generic_sigma)
        np.testing.assert_allclose(value, value.T, atol=1e-15)
        assert np.linalg.eigvalsh(value).min() > -1e-12


def test_bn_kernel_accepts_lists_and_eps(generic_sigma):
    np.testing.assert_array_equal(bnsym.bn_kernel("relu", generic_sigma.tolist()),
                                  bnsym.bn_kernel("relu", generic_sigma))
    smaller = bnsym.bn_kernel("relu", generic_sigma, eps=0.5)  # eps shrinks every BN output
    assert np.all(np.diag(smaller) < np.diag(bnsym.bn_kernel("relu", generic_sigma)))


def test_with_error_qmc_is_plausible(generic_sigma):
    """The QMC error estimate, judged against a 8x finer run (2^17 points, 16 scramblings)."""
    value, error = bnsym.bn_kernel("tanh", generic_sigma, with_error=True)
    assert error.shape == value.shape == (6, 6) and np.all(error > 0)
    fine, fine_error = bn_kernel_qmc(parse_activation("tanh"), generic_sigma, n_points=2**17, seed=99)
    true_error = np.abs(value - fine)
    assert np.all(fine_error < error)
    assert np.all(true_error < 5 * error + 3 * fine_error)
    # and not a gross over-estimate either: |t| with 15 dof has mean 0.8; allow a factor 4 either way
    assert 0.2 < np.mean(true_error / error) < 3.2


def test_with_error_laplace_is_plausible(generic_sigma):
    value, error = bnsym.bn_kernel("relu", generic_sigma, with_error=True)
    fine, _ = bnsym.meanfield.laplace.bn_kernel_laplace(parse_activation("relu"), generic_sigma, rtol=1e-15,
                                                        max_nodes=2048)
    assert error.shape == (6, 6)
    assert np.all(np.abs(value - fine) <= 5 * error + 1e-14)


def test_with_error_spherical_is_plausible():
    point = bnsym.fixed_point("tanh", 8)
    value, error = bnsym.bn_kernel("tanh", bsb1(8, 2.0, 0.5), method="spherical", with_error=True)
    image = bsb1_image(parse_activation("tanh"), 8, n=256)
    q, qc = image["q"].value, image["qc"].value
    assert error.shape == (8, 8)
    assert np.all(np.abs(value - bsb1(8, q, qc / q)) <= 5 * error + 1e-14)
    np.testing.assert_allclose(value, point.matrix, atol=1e-12)


def test_with_error_spherical_eps_is_plausible():
    sigma = bsb1(8, 0.8, 0.25)  # mu = 0.6
    value, error = bnsym.bn_kernel("tanh", sigma, eps=0.1, method="spherical", with_error=True)
    image = bsb1_image(parse_activation("tanh"), 8, mu=0.6, eps=0.1, n_radial=256)  # a finer radial rule
    q, qc = image["q"].value, image["qc"].value
    assert np.all(np.abs(value - bsb1(8, q, qc / q)) <= 5 * error + 1e-14)


@pytest.fixture(scope="module")
def simulated():
    """64 networks of width 512, B = 6, inputs with an exact generic Gram (sampler "gram": exact in law)."""
    sigma = random_psd(6, 8, seed=31)
    x0 = inputs_with_gram(sigma, width=512, n_networks=64, seed=1, device="cpu")
    return sigma, {spec: simulate_forward(spec, x0, depth=2, sampler="gram", seed=2).numpy()
                   for spec in ("relu", "tanh")}


@pytest.mark.parametrize("spec", ["relu", "tanh"])
def test_bn_kernel_matches_simulated_networks(simulated, spec):
    """Mean over M = 64 networks of the layer-1 Gram vs bn_kernel, entrywise within 4.5 SE (SE = std / sqrt(M)).

    Finite width: at depth 1 there is no bias at all. The inputs' Gram is exactly Sigma, so the rows of
    h^1 = W x^0 are i.i.d. N(0, Sigma) and G^1 = (1/N) sum_a B_phi(h_a) B_phi(h_a)^T is an unbiased mean
    of N i.i.d. matrices: E G^1 = V(Sigma) at every width, only its fluctuations are O(N^-1/2). The O(1/N)
    finite-width bias starts at depth 2 (next test).
    """
    sigma, grams = simulated
    np.testing.assert_allclose(grams[spec][:, 0], np.broadcast_to(sigma, (64, 6, 6)), atol=1e-12)
    layer1 = grams[spec][:, 1]
    mean, se = layer1.mean(0), layer1.std(0, ddof=1) / np.sqrt(len(layer1))
    theory = bnsym.bn_kernel(spec, grams[spec][0, 0])
    assert np.all(np.abs(mean - theory) < K_NETWORKS * se)


def test_depth_two_finite_width_bias_is_below_tolerance(simulated):
    """Layer 2 (relu): E[G^2 | G^1] = V(G^1) exactly, so the width bias is E V(G^1) - V(V(Sigma)) = O(1/N).

    It is estimated without the layer-2 noise by the antithetic pairs (V(S + D) + V(S - D))/2 - V(S),
    S = V(Sigma), D = G^1 - S per network (the linear term cancels, the quadratic one is the bias); its
    estimate plus 4 of its own SEs is below one network SE of the layer-2 mean, far inside 4.5 SE,
    and the layer-2 mean agrees with V(V(Sigma)) within 4.5 SE.
    """
    sigma, grams = simulated
    layer1, layer2 = grams["relu"][:, 1], grams["relu"][:, 2]
    first = bnsym.bn_kernel("relu", sigma)
    second = bnsym.bn_kernel("relu", first)
    bias_samples = np.array([(bnsym.bn_kernel("relu", first + d) + bnsym.bn_kernel("relu", first - d)) / 2 - second
                             for d in layer1 - first])
    bias, bias_se = bias_samples.mean(0), bias_samples.std(0, ddof=1) / np.sqrt(len(bias_samples))
    se2 = layer2.std(0, ddof=1) / np.sqrt(len(layer2))
    assert np.all(np.abs(bias) + 4 * bias_se < se2)
    assert np.all(np.abs(layer2.mean(0) - second) < K_NETWORKS * se2)


# ---------------------------------------------------------------- validation (bnsym.core.validation, api) --

@pytest.mark.parametrize("batch, match", [
    (3, r"below 4"), (2, r"B >= 4"), (8.5, "whole number"), (-1, "positive"), (0, "positive"), ("8", "whole number"),
    (float("nan"), "whole number"), (None, "whole number"),
])
def test_bad_batch_size(batch, match):
    """forward_eigenvalues: fixed_point and gradient_rate answer B = 2 and 3 (tests/test_small_batch.py)."""
    with pytest.raises(ValueError, match=match):
        bnsym.forward_eigenvalues("relu", batch)


def test_batch_size_below_four_says_why():
    for batch in (2, 3):
        with pytest.raises(ValueError, match="B >= 4") as info:
            bnsym.forward_eigenvalues("tanh", batch)
        assert "B = 2" in str(info.value) and "B = 3" in str(info.value)


def test_boolean_batch_size():
    with pytest.raises(ValueError, match="whole number"):
        bnsym.fixed_point("relu", True)


def test_boolean_batch_size_is_refused():
    with pytest.raises(ValueError):
        bnsym.fixed_point("relu", True)


def test_whole_number_types_are_accepted():
    reference = bnsym.fixed_point("relu", 8)
    assert bnsym.fixed_point("relu", 8.0) == reference
    assert bnsym.fixed_point("relu", np.int64(8)) == reference


@pytest.mark.parametrize("eps, match", [(-0.1, "eps"), (float("nan"), "eps.*finite"), (float("inf"), "finite"),
                                        (None, "eps must be a real number"), ("abc", "eps must be a real number")])
def test_bad_eps(eps, match):
    with pytest.raises(ValueError, match=match):
        bnsym.fixed_point("tanh", 8, eps=eps)
    with pytest.raises(ValueError, match=match):
        bnsym.bn_kernel("tanh", np.eye(6), eps=eps)


def test_bad_activation_and_method(generic_sigma):
    with pytest.raises(ValueError, match="unknown activation 'swosh'"):
        bnsym.fixed_point("swosh", 8)
    with pytest.raises(ValueError, match="unknown activation"):
        bnsym.bn_kernel("swosh", generic_sigma)
    with pytest.raises(ValueError, match="unknown method 'fourier'.*laplace, spherical, gegenbauer"):
        bnsym.fixed_point("relu", 8, method="fourier")
    with pytest.raises(ValueError, match="unknown method 'foo'.*qmc"):
        bnsym.bn_kernel("relu", generic_sigma, method="foo")
    with pytest.raises(ValueError, match="laplace.*positive-homogeneous"):
        bnsym.fixed_point("tanh", 8, method="laplace")
    with pytest.raises(ValueError, match="laplace.*positive-homogeneous"):
        bnsym.bn_kernel("tanh", generic_sigma, method="laplace")
    with pytest.raises(ValueError, match="eps = 0"):
        bnsym.fixed_point("relu", 8, eps=0.1, method="laplace")
    with pytest.raises(ValueError, match="eps = 0"):
        bnsym.bn_kernel("relu", generic_sigma, eps=0.1, method="laplace")
    with pytest.raises(ValueError, match="spherical.*BSB1"):
        bnsym.bn_kernel("tanh", generic_sigma, method="spherical")


@pytest.mark.parametrize("sigma, match", [
    (random_psd(6) + np.triu(np.full((6, 6), 0.1), 1), "symmetric"),
    (np.diag([1.0, 1, 1, 1, 1, -1]), "positive semi-definite"),
    (np.ones((6, 6)), "G Sigma G = 0"),
    (np.zeros((6, 6)), "G Sigma G = 0"),
    (np.ones((6, 5)), "square"),
    (np.ones((2, 6, 6)), "square"),
    (np.eye(3), "below 4"),
    (np.full((6, 6), np.nan), "non-finite"),
])
def test_bad_sigma(sigma, match):
    for spec in ("relu", "tanh"):
        with pytest.raises(ValueError, match=match):
            bnsym.bn_kernel(spec, sigma)


@pytest.mark.parametrize("kernel", [lambda s: bnsym.bn_kernel("relu", s), lambda s: bnsym.bn_kernel("tanh", s),
                                    lambda s: bnsym.cross_batch_kernel("relu", s, 4)])
def test_a_tensor_in_is_a_tensor_out(kernel):
    """The kernels answer a torch tensor with a tensor of its dtype and device, equal to the numpy answer."""
    sigma = 0.7 * np.eye(8) + 0.3
    for dtype in (torch.float64, torch.float32):
        out = kernel(torch.as_tensor(sigma, dtype=dtype))
        assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.device.type == "cpu"
        np.testing.assert_allclose(out.numpy(), kernel(sigma), rtol=1e-6 if dtype == torch.float32 else 1e-12)
