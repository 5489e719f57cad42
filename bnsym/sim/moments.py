"""Per-network moments of the finite twin (:func:`bnsym.sim.arch.torch_network`) at one width: the output's forward
variance and covariance, and the gradient statistic S at one layer, each one number per network.

The inputs have Gram exactly Sigma0 in dimension d = B (``inputs_with_gram``): the first Dense's outputs are then
i.i.d. N(0, Sigma0) rows at any width, and the first layer costs n x B weights instead of n x n. S^l = sum_a
||df(x_a)/dx^l||^2 (f = v . x_out / sqrt(n), v standard normal, as in :mod:`bnsym.arch`) is estimated with
``probes`` backward passes per network instead of B: probe k takes its own readout v_k and the direction
u_k = sqrt(B) q_k, q_1, ..., q_P the orthonormal columns of a Haar-random B x P frame drawn independently of the
network. Since E[u_ka u_kb] = delta_ab, ||d(sum_a u_ka f_k(x_a))/dx^l||^2 has expectation S^l (the cross terms
vanish, and E over v_k is the same S), and the mean over the P probes is an unbiased estimate; orthogonal directions
make the probes' errors partly cancel. The spread over the probes adds to the spread over networks, and both are in
the standard error over networks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..core.device import default_device, generator, haar_orthogonal
from ..core.layers import Dense, Serial, parse_architecture, serial, walk
from ..core.validation import check_whole_number
from .arch import torch_network
from .networks import chunk_budget, inputs_with_gram

READOUT_OFFSET, PROBE_OFFSET, INPUT_OFFSET = 1, 2, 3  # the seeds of a chunk's readout, probes U and inputs


@dataclass(frozen=True)
class TwinMoments:
    """One value per network (axis 0): ``variance`` (1/B) sum_a K_aa and ``covariance`` the mean of K_ab over
    a != b of the output Gram K = x x^T / n; ``gradient`` the probes' estimate of S at the chosen layer."""

    variance: np.ndarray
    covariance: np.ndarray
    gradient: np.ndarray


def _chunk(network: Serial, width: int, batch: int, device: torch.device) -> int:
    """Networks per chunk: their weights and activations within the simulators' memory budget."""
    layers = list(walk(network))
    square = sum(isinstance(layer, Dense) for layer in layers[1:])
    per_network = 8 * (square * width * width + 4 * len(layers) * batch * width)
    return max(1, chunk_budget(device) // per_network)


def simulate_moments(net: object, Sigma0: np.ndarray, width: int, n_networks: int, gradient_layer: int = 0,
                     probes: int = 4, seed: int = 0, device: torch.device | str | None = None) -> TwinMoments:
    """The moments of ``n_networks`` twins of ``net`` (its first layer a Dense on inputs of Gram Sigma0) of width
    ``width``: the output's variance and covariance, and S after top-level layer ``gradient_layer`` from
    ``probes`` backward passes each (at most B: B is exact). ``net``: a layer, list, Serial or spec string."""
    network = parse_architecture(net) if isinstance(net, str) else serial(net)
    sigma = np.asarray(Sigma0, dtype=float)
    batch = sigma.shape[0]
    width = check_whole_number(width, "width", 1, 2**20)
    n_networks = check_whole_number(n_networks, "n_networks", 2, 2**20)
    seed = check_whole_number(seed, "seed", 0, 2**40)
    layers = len(network)
    gradient_layer = check_whole_number(gradient_layer, "gradient_layer", 0, layers - 1,
                                        f"a top-level layer of the network (it has {layers})")
    probes = min(check_whole_number(probes, "probes", 1, 2**20), batch)
    device = torch.device(device or default_device())
    chunk = _chunk(network, width, batch, device)
    parts = []
    for start in range(0, n_networks, chunk):
        count = min(chunk, n_networks - start)
        stream = seed + 1_000_003 * start
        x = inputs_with_gram(sigma, batch, count, seed=stream + INPUT_OFFSET, device=device).mT.contiguous()
        model = torch_network(network, width, count, in_features=batch, seed=stream, device=device)
        outputs = model.layer_outputs(x)
        readouts = torch.randn(count, width, probes, generator=generator(stream + READOUT_OFFSET, device),
                               device=device, dtype=x.dtype)  # a fresh readout v per probe: E_v is the same S
        frame = haar_orthogonal(batch, generator(stream + PROBE_OFFSET, device), device, batch=(count,),
                                columns=probes) * math.sqrt(batch)  # (M, B, P)
        f = outputs[-1] @ readouts / math.sqrt(width)  # (M, B, P): f_k(x_a) = v_k . x_a / sqrt(n)
        squares = sum(torch.autograd.grad((frame[..., k] * f[..., k]).sum(), outputs[gradient_layer],
                                          retain_graph=k + 1 < probes)[0].square().sum((-2, -1))
                      for k in range(probes)) / probes
        out = outputs[-1].detach()
        gram = out @ out.mT / width
        diagonal = torch.diagonal(gram, dim1=-2, dim2=-1).sum(-1)
        parts.append(torch.stack([diagonal / batch, (gram.sum((-2, -1)) - diagonal) / (batch * (batch - 1)),
                                  squares], 1).cpu())
    values = torch.cat(parts).numpy()
    return TwinMoments(values[:, 0], values[:, 1], values[:, 2])
