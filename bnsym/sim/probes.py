"""Probes of simulated networks along the eigen-directions of the mean-field operators (Yang et al. 2019, Sec. 3).

The probes know nothing of the theory's formulas: the caller passes the point to probe at (a fixed point
Sigma* from :mod:`bnsym.meanfield`, or simulated Grams) and the direction; :mod:`bnsym.core.geometry`
supplies the directions R G, L and M that theory and simulation share.

* :func:`simulated_decay`: the forward response of wide networks to a perturbation Sigma + delta Lam;
* :func:`backward_rayleigh`: Rayleigh quotients of the backward operator of simulated layers;
  :func:`backward_rayleigh_autograd`, the same by autograd through real layers, any eps;
* :func:`layer_jacobian`, :func:`layer_jacobian_mean_square`: the Jacobian of one layer and the mean of its
  squared singular values; :func:`neuron_gradient_ratios`, the per-neuron factors behind that mean;
* :func:`network_gradient_norms`: gradient norms of whole networks by autograd, any B >= 2.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..core.activations import Activation, parse_activation
from ..core.batchnorm import batch_norm_forward
from ..core.device import Normals, configure_torch, default_device, generator, haar_orthogonal
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


def backward_rayleigh_autograd(phi: str | Activation, sigma: np.ndarray, width: int, n_networks: int,
                               eps: float = 0.0, seed: int = 0) -> dict[str, np.ndarray]:
    """Rayleigh quotients <Lambda, T{Lambda}>/|Lambda|^2 of the backward operator of real random layers, by autograd.

    Unlike :func:`backward_rayleigh` no Jacobian formula is used: inputs x (N x B) of Gram ``sigma`` go through an
    explicit W ~ N(0, 1/N), and torch differentiates x'_a = phi((h_a - mean h_a) / sqrt(var h_a + eps)) (biased
    variance, as BatchNorm1d in training mode) neuron by neuron; T{Lambda} = (1/N) sum_a J_a^T Lambda J_a.
    Returns {"G", "L", "M"} -> (M,) numpy arrays, one quotient per network.
    """
    configure_torch()
    activation = parse_activation(phi)
    x = inputs_with_gram(sigma, width, n_networks, seed=seed, device="cpu")  # (M, N, B)
    h = Normals(seed + 1, "cpu")(n_networks, width, width) / math.sqrt(width) @ x

    def layer(row: torch.Tensor) -> torch.Tensor:
        return activation.torch(batch_norm_forward(row, eps)[0])

    jac = torch.func.vmap(torch.func.jacrev(layer))(h.reshape(-1, h.shape[-1])).reshape(*h.shape, h.shape[-1])
    out = {}
    for name, lam in eigen_directions(h.shape[-1]).items():
        lam_t = torch.as_tensor(lam, dtype=torch.float64)
        quotient = torch.einsum("ij,mnki,kl,mnlj->m", lam_t, jac, lam_t, jac) / width
        out[name] = quotient.numpy() / float((lam * lam).sum())
    return out


def _layer_blocks(phi: str | Activation, sigma: np.ndarray, width: int, n_networks: int, seed: int,
                  batch_norm: bool, orthogonal: bool = False,
                  in_width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(W, E): the weights (M, N, N_in) and the per-neuron blocks (M, N, B, B) of :func:`layer_jacobian`."""
    configure_torch()
    activation = parse_activation(phi)
    in_width = in_width or width
    x = inputs_with_gram(sigma, in_width, n_networks, seed=seed, device="cpu")  # (M, N_in, B)
    b = x.shape[-1]
    if orthogonal:  # the first N rows of a Haar orthogonal N_in x N_in matrix, times sqrt(N_in / N): W W^T = N_in/N I
        haar = haar_orthogonal(in_width, generator(seed + 1, "cpu"), "cpu", batch=(n_networks,))
        w = haar[:, :width] * math.sqrt(in_width / width)
    else:
        w = Normals(seed + 1, "cpu")(n_networks, width, in_width) / math.sqrt(width)
    h = w @ x  # (M, N, B)
    if not batch_norm:
        return w, torch.diag_embed(activation.torch_derivative(h))
    z, s = batch_norm_forward(h, 0.0)
    v = z / math.sqrt(b)
    g = torch.as_tensor(np.eye(b) - 1.0 / b, dtype=torch.float64)
    inner = (torch.eye(b, dtype=torch.float64) - v.unsqueeze(-1) * v.unsqueeze(-2)) @ g / s.unsqueeze(-1)
    return w, g @ (activation.torch_derivative(z).unsqueeze(-1) * inner)


def layer_jacobian(phi: str | Activation, sigma: np.ndarray, width: int, n_networks: int, seed: int = 0,
                   batch_norm: bool = True, orthogonal: bool = False, in_width: int | None = None) -> torch.Tensor:
    """Jacobians d x'/d x of one random layer x' = phi(BN(W x)) (or phi(W x) with ``batch_norm=False``), W_ac ~
    N(0, 1/N), at inputs x (N x B) whose Gram is ``sigma``, as (M, N B, N B) float64 tensors on the CPU.

    Neuron a's block is W_ac E_a with E_a = diag(phi'(z_a)) (1/s_a) (I - v_a v_a^T) G, z_a = BN(h_a) = s_a^-1 G h_a
    and v_a = z_a / sqrt(B) (E_a = diag(phi'(h_a)) without batch norm). With batch norm the output is projected
    by G per neuron (its mean over the batch carries no gradient: the next batch norm removes it), so the
    squared singular values average, over the N (B - 1) nonzero ones, to the backward rate lambda_G as N -> oo.
    ``in_width``: N_in inputs (default N; W_ac ~ N(0, 1/N), so the Jacobian's scale does not depend on N_in);
    ``orthogonal``: W has orthogonal rows of squared length N_in/N (Haar), so J J^T = E E^T exactly. Shape
    (M, N B, N_in B).
    """
    w, block = _layer_blocks(phi, sigma, width, n_networks, seed, batch_norm, orthogonal, in_width)
    b = block.shape[-1]
    return torch.einsum("mac,maij->maicj", w, block).reshape(n_networks, width * b, w.shape[-1] * b)


def layer_jacobian_mean_square(phi: str | Activation, sigma: np.ndarray, width: int, n_networks: int,
                               seed: int = 0, batch_norm: bool = True) -> np.ndarray:
    """Per network, the mean squared singular value of :func:`layer_jacobian` over N (B - 1) of them (with batch
    norm; N B without): abs(J)_F^2 = sum_ac W_ac^2 abs(E_a)_F^2, without building J. Shape (M,)."""
    w, block = _layer_blocks(phi, sigma, width, n_networks, seed, batch_norm)
    b = block.shape[-1]
    total = torch.einsum("mac,ma->m", w * w, block.square().sum((-1, -2)))
    return (total / (width * (b - 1 if batch_norm else b))).numpy()


def neuron_gradient_ratios(phi: str | Activation, sigma: np.ndarray, width: int, n_networks: int,
                           seed: int = 0) -> np.ndarray:
    """abs(E_a)_F^2 / (B - 1) per neuron of one batch-normed layer (the blocks of :func:`layer_jacobian`): the
    factor by which neuron a's batch norm and phi scale an isotropic centred gradient. Shape (M, N)."""
    _, block = _layer_blocks(phi, sigma, width, n_networks, seed, True)
    return (block.square().sum((-1, -2)) / (block.shape[-1] - 1)).numpy()


def network_gradient_norms(phi: str | Activation, sigma: np.ndarray, width: int, depth: int, n_networks: int,
                           seed: int = 0) -> np.ndarray:
    """Squared norms of dL/dh^l, l = 1..depth, of random networks x^l = phi(BN(W^l x^(l-1))) (eps = 0, explicit
    W ~ N(0, 1/N), batch statistics per neuron, biased variance) by autograd, for L = <g, x^depth> with Gaussian g
    and inputs of Gram ``sigma``. Any B >= 2 (at B = 2 every entry is 0). Shape (M, depth)."""
    configure_torch()
    activation = parse_activation(phi)
    x = inputs_with_gram(sigma, width, n_networks, seed=seed, device="cpu")
    normals = Normals(seed + 1, "cpu")
    pre = []
    for _ in range(depth):
        h = (normals(n_networks, width, width) / math.sqrt(width)) @ x
        h.requires_grad_(True)
        pre.append(h)
        x = activation.torch(batch_norm_forward(h, 0.0)[0])
    grads = torch.autograd.grad((normals(*x.shape) * x).sum(), pre)
    return torch.stack([g.square().sum((-1, -2)) for g in grads], dim=1).numpy()
