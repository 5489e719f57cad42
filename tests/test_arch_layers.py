"""The gradient statistic S of every layer of every architecture of chapter 06, against finite networks, at an
exchangeable (BSB1) input and at a general one; and the gradient between BN and phi against a direct simulation.

Twin (``bnsym.sim.arch``): M networks per width at widths 128, 256 and 512 on inputs with exactly the given Gram,
S^l by autograd of f_a = v . x_out,a / sqrt(n), summed over the examples a. Per network, S^l is divided by the
output's S^out / B = |v|^2 / n: S^l = sum_a v^T A_a v / n for matrices A_a of the network, and v / |v| is uniform on
the sphere, so E[S^l B / S^out | network] = sum_a tr(A_a) / n = E[S^l | network] exactly; the ratio removes the
readout's chi-square noise, which every layer shares, without a bias. Its mean over the networks has the standard
error std / sqrt(M) (networks independent). The O(1/n) finite-width bias (about 5/n relative
at the LayerNorm MLP's layers, 2 % at n = 256, measured with 96 networks per width; comparable to the SE, so not
negligible) is removed by the weighted least-squares fit a + b / n (``extrapolate_to_infinite_width``, as chapter
06 does); the O(1/n^2) rest, about (5/n)^2 = 0.15 % at n = 128, is below the
intercepts' SE (0.3-4 % of S).
z = (a - theory) / hypot(SE(a), theory's error), and every |z| <= k, k = mc_tolerance(M, m): the Student-t quantile
(M - 1 degrees of freedom) with the false-alarm rate 1e-3 split by Bonferroni over all m compared layers of both
inputs and every architecture. The output layer is exactly B in every network and is not counted.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_psd

from bnsym import arch
from bnsym.arch import Activation, BatchNorm, Dense, LayerNorm, Residual, describe, serial
from bnsym.arch.backward import _sphere_moments
from bnsym.arch.derivations import lambdified
from bnsym.core.activations import parse_activation
from bnsym.sim import extrapolate_to_infinite_width, mc_tolerance
from bnsym.sim.arch import simulate_signal_propagation

B, DEPTH, EPS, ALPHA = 8, 2, 0.01, 0.2
WIDTHS, NETWORKS = (128, 256, 512), 24
RELU = Activation("relu")
INPUTS = {"exchangeable": 0.7 * np.eye(B) + 0.3, "general": random_psd(B, B + 4, seed=3)}


def nf_resnet(sigma0: np.ndarray) -> list:
    """Chapter 06's NF-ResNet: Dense, then x + alpha [relu, Dense(2 / beta_l^2)](x), beta_l^2 the predicted mean
    variance of the stream."""
    layers = [Dense()]
    for _ in range(DEPTH):
        beta2 = float(np.mean(np.diag(arch.kernel(layers, sigma0))))
        layers.append(Residual([RELU, Dense(2.0 / beta2)], ALPHA))
    return layers


def architectures(sigma0: np.ndarray) -> dict[str, object]:
    """The networks of chapter 06 (its ``architectures``, and the swapped branch [relu, BN, Dense]; with eps > 0 as
    in its relu -> BN MLP, since at eps = 0 S is infinite below a BN after relu, which test_arch holds)."""
    return {
        "BN -> relu MLP": serial(*[Dense(), BatchNorm(), RELU] * DEPTH),
        "relu -> BN MLP": serial(*[Dense(), RELU, BatchNorm(EPS)] * DEPTH),
        "pre-activation BN ResNet": serial(Dense(), *[Residual([BatchNorm(), RELU, Dense()])] * DEPTH),
        "post-activation BN ResNet": serial(Dense(), RELU, *[Residual([Dense(), BatchNorm()]), RELU] * DEPTH),
        "NF-ResNet": serial(*nf_resnet(sigma0)),
        "LayerNorm MLP": serial(*[Dense(), RELU, LayerNorm()] * DEPTH),
        "swapped [relu, BN, Dense] ResNet": serial(Dense(), *[Residual([RELU, BatchNorm(EPS), Dense()])] * DEPTH),
    }


CASES = [(arrival, name) for arrival in INPUTS for name in architectures(INPUTS[arrival])]
COMPARED = sum(len(net) - 1 for sigma in INPUTS.values() for net in architectures(sigma).values())
K = mc_tolerance(NETWORKS, COMPARED)


def twin_gradient(net, sigma0: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The twin's S at every layer below the output, extrapolated to infinite width: (intercepts, their standard
    errors)."""
    means, ses = [], []
    for width in WIDTHS:
        s = simulate_signal_propagation(net, sigma0, width, NETWORKS, seed=seed + width, device="cpu").gradient
        ratio = s[:, :-1] * B / s[:, -1:]
        means.append(ratio.mean(0))
        ses.append(ratio.std(0, ddof=1) / np.sqrt(NETWORKS))
    means, ses = np.array(means), np.array(ses)
    fits = [extrapolate_to_infinite_width(np.array(WIDTHS), means[:, i], ses[:, i])[:2] for i in range(means.shape[1])]
    return np.array([f[0] for f in fits]), np.array([f[1] for f in fits])


@pytest.mark.parametrize(("arrival", "name"), CASES)
def test_every_layer_s_agrees_with_finite_networks(arrival, name):
    """At the exchangeable input the BN -> relu layers once read about half the networks' S (z = 32 at B = 16)."""
    torch.set_num_threads(1)
    sigma0 = INPUTS[arrival]
    net = architectures(sigma0)[name]
    theory = arch.signal_propagation(net, sigma0).gradient
    assert theory.value[-1] == pytest.approx(B, rel=1e-12)
    value, se = twin_gradient(net, sigma0, seed=1000 * CASES.index((arrival, name)))
    z = (value - theory.value[:-1]) / np.hypot(se, theory.error[:-1])
    layers = [describe(layer) for layer in net][:-1]
    assert np.all(np.abs(z) <= K), (f"k = {K:.2f}", list(zip(layers, theory.value, value, se, z.round(1))))


@pytest.mark.parametrize("phi", ["relu", "gelu", "tanh"])
@pytest.mark.parametrize(("a", "b"), [(1.0, -1.0 / B), (1.0, 1.0), (0.5, 0.0)])
def test_gradient_between_bn_and_phi_is_the_direct_average(phi, a, b):
    """tr E[D Pi D] ("between") against a direct simulation of E|D g|^2: x = BN(h) uniform on its sphere, D =
    diag(phi'(x)), g ~ N(0, a I + b 11^T) independent of x; |z| <= mc_tolerance over the 9 cases. Pi = G (a = 1,
    b = -1/B) is what a BN above feeds back; there the old form read relu's S at 0.52 of the truth."""
    activation = parse_activation(phi)
    rng = np.random.default_rng(17)
    draws = 200_000
    h = rng.standard_normal((draws, B))
    y = h - h.mean(1, keepdims=True)
    x = np.sqrt(B) * y / np.linalg.norm(y, axis=1, keepdims=True)
    lam, vecs = np.linalg.eigh(a * np.eye(B) + b * np.ones((B, B)))
    g = rng.standard_normal((draws, B)) @ (vecs * np.sqrt(np.clip(lam, 0.0, None))).T  # E[g g^T] = Pi (PSD)
    samples = np.sum((activation.numpy_derivative(x) * g) ** 2, 1)
    moments, error = _sphere_moments(activation, B)
    predicted = lambdified("between")(a, b, B, 1.0, *moments)
    se = samples.std(ddof=1) / np.sqrt(draws)
    assert abs(samples.mean() - predicted) <= mc_tolerance(draws, 9) * se + B * error * (abs(a) + abs(b))
