"""Probes of simulated networks along the eigen-directions of the mean-field operators (Yang et al. 2019, Sec. 3).

The probes know nothing of the theory's formulas: the caller passes the point to probe at (a fixed point
Sigma* from :mod:`bnsym.meanfield`, or simulated Grams) and the direction; :mod:`bnsym.core.geometry`
supplies the directions R G, L and M that theory and simulation share.

* :func:`simulated_decay`: the forward response of wide networks to a perturbation Sigma + delta Lam;
* :func:`backward_rayleigh`: Rayleigh quotients of the backward operator of simulated layers.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..core.activations import Activation, parse_activation
from ..core.batchnorm import batch_norm_forward
from ..core.device import Normals, configure_torch, default_device
from ..core.geometry import eigen_directions
from .networks import centred_factor, inputs_with_gram, simulate_forward


def simulated_decay(phi: str | Activation, sigma: np.ndarray, direction: np.ndarray, delta: float, width: int,
                    n_networks: int, depth: int, seed: int = 0) -> np.ndarray:
    """Per-network response d_l = <G^l(+) - G^l(-), Lam> / (2 delta), l = 0..depth, of wide networks at Sigma.

    ``sigma`` is the point to linearise at (the BSB1 fixed point Sigma* for the forward eigenvalues) and
    ``direction`` the unit-Frobenius-norm perturbation Lam (e.g. :func:`bnsym.core.geometry.eigen_directions`).
    Both runs share inputs and weights (common random numbers): x^0(+-) = X C(+-)^T with X of Gram I and
    C(+-) the Cholesky factor of Sigma + 11^T +- delta Lam (the 11^T term, removed by the first batch norm,
    makes the factor exist when Sigma is singular, as for the identity), so d_0 = 1 exactly and even orders
    in delta cancel. In the mean field limit d_l = lambda^l along an eigen-direction. Layer 1 has no
    finite-width bias (its pre-activations are exactly Gaussian given the input Gram).
    """
    sigma, lam = np.asarray(sigma, dtype=float), np.asarray(direction, dtype=float)
    batch_size = sigma.shape[0]
    if lam.shape != sigma.shape:
        raise ValueError(f"direction has shape {lam.shape}, Sigma {sigma.shape}: both must be B x B")
    base = inputs_with_gram(np.eye(batch_size), width, n_networks, seed=seed)
    grams = []
    for sgn in (1, -1):
        shifted = sigma + 1.0 + sgn * delta * lam
        factor = torch.as_tensor(np.linalg.cholesky(shifted), dtype=base.dtype, device=base.device)
        grams.append(simulate_forward(phi, base @ factor.T, depth, seed=seed + 1, sampler="weights").numpy())
    return np.einsum("mlab,ab->ml", grams[0] - grams[1], lam) / (2 * delta)


def backward_rayleigh(phi: str | Activation, grams: torch.Tensor, width: int, seed: int = 0,
                      device: torch.device | str | None = None) -> dict[str, np.ndarray]:
    """Rayleigh quotients <Lambda, T{Lambda}>/|Lambda|^2 of the backward operator of simulated layers.

    For each network m, the pre-activations of a layer whose input Gram is ``grams[m]`` are N = ``width``
    i.i.d. rows h_a ~ N(0, grams[m]) (exact in law, see :mod:`bnsym.sim.networks`); T{Lambda} =
    (1/N) sum_a J_a^T Lambda J_a with J_a = sqrt(B)/r_a D_a (G - v_a v_a^T) the batch-norm Jacobian of
    neuron a. With P = G - v v^T, d = phi'(x), u = Lambda v:

        tr(Lambda J^T Lambda J) = (B/r^2) [d^T (Lambda o Lambda) d - 2 (d v)^T Lambda (d u)
                                           + (v^T Lambda v) (d v)^T Lambda (d v)].

    Returns {"G", "L", "M"} -> (M,) numpy arrays, one quotient per network (eps = 0).
    """
    configure_torch()
    device = device or default_device()
    activation = parse_activation(phi)
    grams = torch.as_tensor(grams, dtype=torch.float64, device=device)
    m, b, _ = grams.shape
    root = centred_factor(grams, robust=True).root  # batch norm sees only G h: draw its rows N(0, G Sigma G)
    h = Normals(seed, device)(m, width, root.shape[-1]) @ root.mT
    z, s = batch_norm_forward(h, 0.0, centre=False)  # z = sqrt(B) v, s = r / sqrt(B)
    v = z / math.sqrt(b)
    d = activation.torch_derivative(z)
    scale = 1.0 / s.squeeze(-1) ** 2  # B / r^2
    out = {}
    for name, lam in eigen_directions(b).items():
        lam_t = torch.as_tensor(lam, dtype=torch.float64, device=device)
        u = v @ lam_t
        dv = d * v
        quadratic = ((d @ (lam_t * lam_t)) * d).sum(-1) - 2 * ((dv @ lam_t) * (d * u)).sum(-1) \
            + (v * u).sum(-1) * ((dv @ lam_t) * dv).sum(-1)
        out[name] = (scale * quadratic).mean(-1).cpu().numpy() / float((lam * lam).sum())
    return out
