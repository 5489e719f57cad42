"""RMSNorm, the uncentred LayerNorm by name: one map with ``LayerNorm(centre=False)`` in the theory, the gradient,
the tangent kernel and the twin; its own spec name and torch reader; its infinite-width map K_ab / sqrt((K_aa +
eps)(K_bb + eps)) against relu moments computed independently (polar quadrature, conftest), on an input whose mean
is not 0 (where the centred LayerNorm differs); and finite twins against the theory within k standard errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import HOMOGENEOUS, gaussian_pair_moment, random_psd
from torch import nn

from bnsym import arch
from bnsym.arch import Activation, Dense, LayerNorm, RMSNorm, describe, parse_architecture, serial
from bnsym.sim import mc_tolerance, mean_and_se
from bnsym.sim.arch import from_torch, simulate_signal_propagation, torch_network

B = 6
SIGMA0 = random_psd(B, B + 3, seed=5)


def test_rms_norm_is_the_uncentred_layer_norm_by_name():
    layer = RMSNorm(0.1, (2.0, 0.5))
    assert isinstance(layer, LayerNorm) and layer.centre is False
    assert layer != LayerNorm(0.1, centre=False, affine=(2.0, 0.5))  # another kind: it describes as its own name
    assert describe(layer) == "rms(eps=0.1,scale=2,shift=0.5)" and describe(RMSNorm()) == "rms"
    assert parse_architecture("dense,tanh,rms(eps=0.1,scale=2,shift=0.5)").layers[-1] == layer
    with pytest.raises(ValueError, match="unknown option 'centre=true'"):
        parse_architecture("dense,rms(centre=true)")
    with pytest.raises(TypeError):
        RMSNorm(centre=True)  # an RMSNorm's centre is not an option


@pytest.mark.parametrize("spec", ["dense(1,0.5),relu,{}(eps=0.2),dense,tanh", "dense,res(relu,{},dense)*2"])
def test_rms_norm_and_the_uncentred_layer_norm_have_one_map(spec):
    """Kernels, gradient statistics and tangent kernels of RMSNorm and LayerNorm(centre=False) are the same numbers;
    so are the twins' outputs from one seed."""
    rms = parse_architecture(spec.replace("{}(", "rms(").replace("{}", "rms"))
    ln = parse_architecture(spec.replace("{}(", "ln(centre=false,").replace("{}", "ln(centre=false)"))
    first, second = arch.signal_propagation(rms, SIGMA0), arch.signal_propagation(ln, SIGMA0)
    assert np.array_equal(first.kernels[-1].value, second.kernels[-1].value)
    assert np.array_equal(first.gradient.value, second.gradient.value)
    assert np.array_equal(arch.ntk(rms, SIGMA0), arch.ntk(ln, SIGMA0))
    x = torch.randn(2, B, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out = [torch_network(net, 16, 2, in_features=8, seed=3, device="cpu")(x) for net in (rms, ln)]
    assert torch.equal(out[0], out[1])


@pytest.mark.parametrize("eps", [0.0, 0.3])
def test_the_rms_map_after_relu_is_k_over_the_root_of_the_diagonals(eps):
    """[Dense(1.7, 0.4), relu, RMSNorm]: relu's moments by polar quadrature (conftest, not bnsym); the output of relu
    has mean sqrt(K_aa / (2 pi)) != 0, which RMSNorm keeps (no centring)."""
    k = 1.7 * SIGMA0 + 0.4
    _, a, b = HOMOGENEOUS["relu"]
    moments = np.array([[gaussian_pair_moment(1.0, a, b, k[np.ix_([i, j], [i, j])]) for j in range(B)]
                        for i in range(B)])
    diagonal = np.diag(moments) + eps
    expected = moments / np.sqrt(diagonal[:, None] * diagonal[None, :])
    got = arch.kernel([Dense(1.7, 0.4), Activation("relu"), RMSNorm(eps)], SIGMA0)
    assert np.abs(got - expected).max() <= 1e-9
    centred = arch.kernel([Dense(1.7, 0.4), Activation("relu"), LayerNorm(eps)], SIGMA0)
    assert np.abs(got - centred).max() > 0.1  # the centring matters here: the check above can tell them apart


def test_finite_rms_networks_converge_to_the_map():
    """Twins of width 512 (M networks, independent): each off-diagonal entry of the output Gram, averaged over the
    networks, within k = mc_tolerance(M, B (B - 1) / 2) standard errors of the theory (an O(1/n) bias of 1/512 is
    well inside the standard error of M = 64 networks, about 0.01); the diagonal is 1 (eps = 0) to rounding."""
    net, networks = parse_architecture("dense(1,0.3),tanh,rms"), 64
    theory = arch.kernel(net, SIGMA0)
    run = simulate_signal_propagation(net, SIGMA0, 512, networks, seed=2, device="cpu")
    gram = run.grams[:, -1]
    upper = np.triu_indices(B, 1)
    estimate = mean_and_se(gram[:, upper[0], upper[1]])
    z = np.abs(estimate.value - theory[upper]) / estimate.error
    assert z.max() <= mc_tolerance(networks, len(upper[0]))
    assert np.abs(np.diagonal(gram, axis1=-2, axis2=-1) - 1).max() <= 1e-12


def test_nn_rms_norm_reads_as_rms_norm():
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.RMSNorm(4, eps=0.1), nn.Linear(4, 4))
    read = from_torch(model)
    assert type(read.layers[2]) is RMSNorm and describe(read.layers[2]) == "rms(eps=0.1)"
    assert parse_architecture(",".join(describe(layer) for layer in read)).layers[2] == read.layers[2]
    assert serial(read) == read
