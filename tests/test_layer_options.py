"""The options of the layer descriptions (issue 42, item 2), each defaulting to the old meaning: Dense ``init``
(gaussian | orthogonal | looks_linear | uniform | uniform_positive), BatchNorm ``centre``, ``affine`` and
``statistics`` (= ``mode``), LayerNorm ``centre`` and ``affine``, and Residual ``skip``. Spec strings round-trip;
the twin implements every option; the theory maps those with an infinite-width limit and refuses the others with a
ValueError naming the field.

Theory against the twin: M networks per width at widths 64, 128 and 256 (``extrapolated_signal_propagation``:
each per-layer statistic's mean over the networks, its SE std / sqrt(M), fitted as a + b / width by weighted least
squares; the intercept a and its SE are the infinite-width estimate, the O(1/n) bias removed). z = (a - theory) /
hypot(SE(a), theory's error), |z| <= k = mc_tolerance(M, m): the Student-t quantile with the false-alarm rate 1e-3
split over all m compared statistics of all cases. Where the twin holds a statistic exactly (no spread over
networks, e.g. a batch-normed layer's diagonal), the widest width's value must equal the theory within its error
plus 1e-9 relative.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_psd

from bnsym import arch
from bnsym.core.layers import BatchNorm, Dense, LayerNorm, Residual, describe, parse_architecture
from bnsym.sim import mc_tolerance
from bnsym.sim.arch import MEASURED, extrapolated_signal_propagation, torch_network

B = 6
SIGMA0 = random_psd(B, B + 3, seed=5)
WIDTHS, NETWORKS = (64, 128, 256), 24

CASES = {
    "orthogonal Dense": "dense(init=orthogonal),bn,relu,dense(2,init=orthogonal),tanh",
    "uncentred population BN with affine": "dense,relu,bn(mode=eval,centre=false,scale=0.7,shift=0.3),tanh,dense",
    "centred population BN": "dense,relu,bn(statistics=population,eps=0.1),tanh",
    "batch BN with affine": "dense,bn(eps=0.01,scale=1.5,shift=-0.2),relu,dense",
    "uncentred LayerNorm": "dense,relu,ln(centre=false),dense,tanh",
    "LayerNorm with affine": "dense,relu,ln(eps=0.01,scale=-2,shift=0.5),tanh,dense",
    "Residual with a Dense skip": "dense,res(alpha=0.5,skip=dense(0.8),bn,relu,dense),tanh",
    "uniform Dense (the Gaussian limit by the CLT)": "dense(init=uniform),relu,dense(2,0.3,init=uniform),bn,tanh",
}
COMPARED = sum(len(MEASURED) * len(parse_architecture(spec)) for spec in CASES.values())
K = mc_tolerance(NETWORKS, COMPARED)


@pytest.mark.parametrize("spec", [
    "dense(2,0.1,init=orthogonal)", "dense(init=looks_linear)", "dense(0.5,0.1,init=uniform)",
    "dense(init=uniform_positive)", "bn(eps=0.001,mode=eval,centre=false,scale=0.5,"
    "shift=0.1)", "bn(scale=0,shift=0)", "bn(eps=0.1,statistics=reference)", "ln(centre=false)",
    "ln(eps=0.1,centre=false)", "ln(scale=-2,shift=0.5)",
    "res(alpha=0.5,skip=dense(2,0),bn,relu,dense)", "res(skip=(dense,bn),relu,dense)"])
def test_options_round_trip(spec):
    (layer,) = parse_architecture(spec).layers
    assert describe(layer) == spec and parse_architecture(describe(layer)).layers == (layer,)


def test_defaults_are_the_old_meanings():
    assert parse_architecture("dense,bn,ln,res(relu)").layers == (
        Dense(1.0, 0.0, "gaussian"), BatchNorm(0.0, "train", True, None, "batch"), LayerNorm(0.0, True),
        Residual([parse_architecture("relu").layers[0]], 1.0, None))
    assert describe(BatchNorm(statistics="population")) == "bn(mode=eval)"


def test_mode_and_statistics_are_one_choice():
    assert BatchNorm(0.1, "eval") == BatchNorm(0.1, statistics="population") == parse_architecture(
        "bn(eps=0.1,statistics=population)").layers[0]
    assert BatchNorm(statistics="population").mode == "eval" and BatchNorm(mode="train").statistics == "batch"
    with pytest.raises(ValueError, match="mode='train' means statistics='batch', but statistics='population'"):
        BatchNorm(mode="train", statistics="population")
    assert BatchNorm(mode="eval", statistics="reference") == BatchNorm(statistics="reference")
    assert BatchNorm(statistics="reference").mode == "eval"
    with pytest.raises(ValueError, match="mode='train' means statistics='batch', but statistics='reference'"):
        BatchNorm(mode="train", statistics="reference")


@pytest.mark.parametrize(("make", "match"), [
    (lambda: Dense(init="xavier"), "Dense init must be one of 'gaussian', 'orthogonal', 'looks_linear', 'uniform', "
                                   "'uniform_positive'"),
    (lambda: BatchNorm(statistics="running"), "BatchNorm statistics must be one of 'batch', 'population'"),
    (lambda: BatchNorm(centre="no"), "BatchNorm centre must be True or False"),
    (lambda: LayerNorm(centre=1), "LayerNorm centre must be True or False"),
    (lambda: BatchNorm(affine=(1.0,)), "affine must be None or two numbers"),
    (lambda: BatchNorm(affine=(np.inf, 0.0)), "affine scale and shift must be finite"),
    (lambda: parse_architecture("dense,ln(centre=maybe)"), "centre must be true or false, got 'maybe'"),
    (lambda: parse_architecture("dense,bn(scale=x)"), "scale must be a number, got 'x'"),
])
def test_bad_options_are_refused_by_name(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize(("spec", "field"), [
    ("dense,relu,dense(init=looks_linear)", "init='looks_linear'"),
    ("dense(init=uniform_positive),relu", "init='uniform_positive'"),
    ("dense,bn(statistics=reference),relu", "statistics='reference'"),
    ("dense,bn(centre=false)", "centre=False with statistics='batch'"),
    ("dense,res(skip=bn(scale=0,shift=1),relu)", r"affine=\(0.0, 1.0\)"),
])
def test_the_theory_refuses_options_without_a_limit_naming_the_field(spec, field):
    for route in (arch.kernel, arch.signal_propagation, arch.ntk):
        with pytest.raises(ValueError, match=field):
            route(spec, SIGMA0)


def test_orthogonal_and_looks_linear_weights():
    """Orthogonal: W^T W = n_out I (orthonormal columns, entries of variance 1). Looks-linear: pairs (h, -h) after
    every such layer, and relu(h) - relu(-h) = h makes relu -> looks-linear Dense act on h as W h / 2."""
    net = torch_network(parse_architecture("dense(init=orthogonal)"), 12, 3, in_features=8, seed=1, device="cpu")
    weight = net.layers[0].weight.detach()
    assert torch.allclose(weight.mT @ weight, 12 * torch.eye(8, dtype=weight.dtype).expand(3, 8, 8), atol=1e-10)
    net = torch_network(parse_architecture("dense(2,0.5,init=looks_linear),relu,dense(2,init=looks_linear)"), 16, 2,
                        seed=2, device="cpu")
    x = torch.randn(2, B, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    h, _, out = net.layer_outputs(x)
    assert torch.equal(h[..., 0::2], -h[..., 1::2]) and torch.equal(out[..., 0::2], -out[..., 1::2])
    dense = net.layers[2]
    assert torch.allclose(out, dense.scale * h @ dense.weight.mT / 2, atol=1e-12)
    with pytest.raises(ValueError, match="looks_linear.*even widths, got 7 -> 16"):
        torch_network(parse_architecture("dense(init=looks_linear)"), 16, in_features=7, device="cpu")


def test_uncentred_batch_norm_twin():
    """The twin's centre=False batch norm: x / sqrt(mean x^2 + eps) per neuron over the batch (the theory refuses
    it; the twin has it)."""
    net = torch_network(parse_architecture("dense(1,1),bn(centre=false,eps=0.1)"), 16, 2, seed=4, device="cpu")
    h, out = net.layer_outputs(torch.randn(2, B, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(5)))
    assert torch.allclose(out, h / torch.sqrt(h.square().mean(-2, keepdim=True) + 0.1), atol=1e-14)


@pytest.mark.parametrize("case", list(CASES))
def test_the_theory_of_each_option_agrees_with_the_twin(case):
    torch.set_num_threads(1)
    net = parse_architecture(CASES[case])
    theory = arch.signal_propagation(net, SIGMA0)
    twin = extrapolated_signal_propagation(net, SIGMA0, WIDTHS, NETWORKS, seed=100 * list(CASES).index(case),
                                           device="cpu")
    for name in MEASURED:
        predicted, measured = getattr(theory, name), twin.infinite[name]
        spread = np.hypot(measured.error, predicted.error)
        held = twin.exact[name]
        z = (measured.value - predicted.value) / np.where(held, 1.0, spread)
        assert np.all(np.abs(z[~held]) <= K), (name, f"k = {K:.2f}", z.round(2))
        assert np.all(np.abs(z[held]) <= K * predicted.error[held] + 1e-9 * np.abs(predicted.value[held])), (name, z)


def test_the_tangent_kernel_holds_an_affine_batch_norm():
    """relu is 1-homogeneous: a last BatchNorm with affine (s, 0) scales f, so the NTK, by s^2. The plain network
    takes the Laplace route, the affine one the graph's; they agree within their errors (k = mc_tolerance over the
    B(B+1)/2 entries). The Laplace route used to take the affine one too, and ignore its scale."""
    sigma = random_psd(4, 6, seed=2)
    plain = arch.ntk("dense,bn,relu,dense,bn,relu", sigma, with_error=True)
    scaled = arch.ntk("dense,bn,relu,dense,bn(scale=2,shift=0),relu", sigma, with_error=True)
    upper = np.triu_indices(4)
    z = (scaled.value - 4 * plain.value) / np.hypot(scaled.error, 4 * plain.error)
    assert np.all(np.abs(z[upper]) <= mc_tolerance(16, len(upper[0]))), z
