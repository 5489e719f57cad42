"""Two batches through one network: the cross-batch kernel (Yang et al. 2019, App. H, Defn H.1, Lemma H.5).

Two batches of sizes B1 and B2 pass through the same weights; batch norm normalises each batch on its own.
With joint pre-activations h = (h1, h2) ~ N(0, Sigma), Sigma of shape (B1 + B2, B1 + B2), the next layer's
covariance is V(Sigma) = E[x x^T], x = (B_phi(h1), B_phi(h2)) (eq. 54, the direct sum of the batch maps).
Its diagonal blocks are the within-batch kernels V_{B_phi}(Sigma_11), V_{B_phi}(Sigma_22); the new object is
the cross block E[B_phi(h1) B_phi(h2)^T].

Laplace route (positive-homogeneous phi of degree alpha, eps = 0). With y_k = G_k h_k,
B_phi(h_k) = B_k^(alpha/2) |y_k|^(-alpha) phi(y_k). One Schwinger parameter per batch,
|y|^(-alpha) = Gamma(alpha/2)^-1 int_0^oo s^(alpha/2 - 1) e^(-s |y|^2) ds, and Gaussian completion
(E[e^(-y^T D y) f(y)] = det(I + 2 Omega D)^(-1/2) E_{y ~ N(0, Omega (I + 2 D Omega)^-1)} f(y)) give

    E[B_phi(h1) B_phi(h2)^T] = (B1 B2)^(alpha/2) / Gamma(alpha/2)^2  int int s^(alpha/2-1) t^(alpha/2-1)
                               det(I + 2 D Omega)^(-1/2) V_phi(Omega (I + 2 D Omega)^-1)_12 ds dt,     (*)

Omega = diag(G1, G2) Sigma diag(G1, G2), D = diag(s I_B1, t I_B2): a two-dimensional Laplace integral
(Lemma H.5; GP4A's ``Batchnorm.ipynb`` computes the cross block this way). A Schur complement makes the inner
integral cheap: with Y_s = Omega_22 - Omega_21 2s (I + 2s Omega_11)^-1 Omega_12 (the covariance of y2 "seen"
through the s-tilt of y1) and Q_s = (I + 2s Omega_11)^-1 Omega_12,

    det(I + 2 D Omega) = det(I + 2s Omega_11) det(I + 2t Y_s),
    [Omega (I + 2 D Omega)^-1]_12 = Q_s (I + 2t Y_s)^-1,       ..._22 = Y_s (I + 2t Y_s)^-1,
    ..._11 = Omega_11 (I + 2s Omega_11)^-1 - 2t Q_s (I + 2t Y_s)^-1 Q_s^T,

so one eigendecomposition of Omega_11 per input and one of Y_s per s-node serve all t-nodes.

QMC route (any phi, any eps): sample h, normalise each batch, average x x^T (:mod:`bnsym.meanfield.qmc`).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Callable

import numpy as np
from scipy.special import gammaln

from ..core.activations import Activation
from ..core.derivation import Derivation
from ..core.estimate import Estimate
from ..core.kernels import lambdified
from ..core.lazy import lazy_module
from ..core.quadrature import gauss_jacobi
from ..core.validation import batch_scales
from .forward import derive_bsb1_constant, fixed_point_closed_form, fixed_point_spherical
from .kernels import arccos_kernel_symbolic, c_alpha, derive_arccos_kernel, phi_kernel
from .laplace import euler_beta
from .sphere import expect_pair_with_error

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use

torch = lazy_module("torch")

RTOL = 1e-9  # adaptive rule: nodes per axis double from 8 until two rules agree to RTOL max |V|
MAX_NODES = 128
RANK_TOL = 1e-10  # an eigenvalue below this times the mean eigenvalue of its batch's block counts as zero
_CHUNK_BYTES = 256 * 2**20  # memory budget of one chunk of the stack of inputs
_MAX_ITEM_BYTES = 2 * 2**30  # the node arrays of a single input: above it one input alone would not fit
_NODE_ELEMENTS = 2**16  # entries of the (items, nx, ny, B1, B2) integrand evaluated at once on the CPU (cache)


@cache
def _arccos_kernel_torch(order: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """J_n(c) for integer n on [-1, 1] (c clamped there), lambdified for torch from
    :func:`~bnsym.meanfield.kernels.derive_arccos_kernel`; for n >= 1 differentiable in both modes with Price's
    J_n' = n^2 c_(n-1) / c_n J_(n-1) (:mod:`bnsym.meanfield.dual`), finite at c = 1."""
    from ..core.symbols import c
    from .dual import arccos_kernel_function, ladder_factor  # here: dual's autograd Function imports torch

    kernel = sp.lambdify(c, derive_arccos_kernel(order).result.evalf(17), modules="torch", cse=True)
    if order == 0:
        return lambda corr: kernel(corr.clamp(-1.0, 1.0))
    lower, factor = _arccos_kernel_torch(order - 1), ladder_factor(order)
    return arccos_kernel_function(kernel, lambda corr: factor * lower(corr))


@cache
def _arccos_kernel_and_slope_torch(order: int) -> Callable[[torch.Tensor], list[torch.Tensor]]:
    """(J_n(c), J_n'(c)) for integer n >= 1 at c snapped to [-1, 1] (:func:`~bnsym.meanfield.dual.snapped`), from
    :func:`~bnsym.meanfield.kernels.derive_arccos_kernel` and Price's ladder J_n' = n^2 c_(n-1) / c_n J_(n-1),
    lambdified together so that the two share their arc-cosine."""
    from ..core.symbols import c
    from .dual import ladder_factor, snapped  # here: dual's autograd Function imports torch

    pair = [derive_arccos_kernel(order).result.evalf(17),
            ladder_factor(order) * derive_arccos_kernel(order - 1).result.evalf(17)]
    both = sp.lambdify(c, pair, modules="torch", cse=True)
    return lambda corr: both(snapped(corr))


def phi_kernel_and_slope_torch(phi: Activation, corr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(J_phi(c), J_phi'(c)) for phi positive-homogeneous of integer degree 1 to 3 (:func:`phi_kernel_torch`):
    J_phi' = (a^2 + b^2) J_alpha'(c) + 2ab J_alpha'(-c)."""
    a, b = phi.ab
    function = _arccos_kernel_and_slope_torch(int(phi.degree))
    kernel, slope = function(corr)
    if a * a + b * b != 1:
        kernel, slope = (a * a + b * b) * kernel, (a * a + b * b) * slope
    if a * b == 0:  # relu: b = 0, half the work
        return kernel, slope
    mirror, mirror_slope = function(-corr)
    return kernel - 2 * a * b * mirror, slope + 2 * a * b * mirror_slope


def phi_kernel_torch(phi: Activation, corr: torch.Tensor) -> torch.Tensor:
    """J_phi(c) = (a^2 + b^2) J_alpha(c) - 2ab J_alpha(-c) on torch tensors (on their device).

    Integer alpha <= 3 use the derived closed forms; other alpha (relu^1.5) the hypergeometric series of
    :func:`~bnsym.meanfield.kernels.phi_kernel` on the CPU.
    """
    alpha = phi.degree
    if float(alpha).is_integer() and alpha <= 3:
        a, b = phi.ab
        kernel = _arccos_kernel_torch(int(alpha))
        value = (a * a + b * b) * kernel(corr)
        return value - 2 * a * b * kernel(-corr) if a * b != 0 else value  # relu: b = 0, half the work
    values = phi_kernel(phi, corr.detach().cpu().numpy())
    return torch.as_tensor(values, dtype=corr.dtype).to(corr.device)


def helmert(batch_size: int, like: torch.Tensor) -> torch.Tensor:
    """e (B x (B-1)): orthonormal columns spanning 1^perp, so e e^T = G (dtype and device of ``like``)."""
    k = torch.arange(1, batch_size, dtype=like.dtype, device=like.device)
    rows = torch.arange(batch_size, device=like.device)[:, None]
    e = torch.where(rows < k, 1.0, torch.where(rows == k, -k, 0.0))
    return e / torch.sqrt(k * (k + 1))


def _jacobi_rule(n: int, exponent_one_minus: float, exponent_zero: float, like: torch.Tensor):
    """Nodes x in (0, 1) and normalised weights for x^(exponent_zero) (1 - x)^(exponent_one_minus)."""
    t, w = gauss_jacobi(n, exponent_one_minus, exponent_zero)  # cached, read-only: torch gets copies
    return (torch.tensor((1 + t) / 2, dtype=like.dtype, device=like.device),
            torch.tensor(w, dtype=like.dtype, device=like.device))


def _laplace_rule(nodes: int, rank: int, alpha: int, lower: float, like: torch.Tensor):
    """Nodes in (0, 1) and weights of the rule for x^(alpha/2-1) (1-x)^(rank/2-1) normalised to total 1, as
    :func:`_jacobi_rule`; with ``lower`` > 0 (and rank / 2 > lower) a Gauss-Jacobi rule for the endpoint power
    (1-x)^(rank/2-1-lower), the remaining (1-x)^lower a factor of the weights: exact for integrands that are
    smooth times (1-x)^(-lower), as the tangent's are (:mod:`bnsym.meanfield.ntk_laplace`)."""
    b, a = rank / 2, alpha / 2
    if lower == 0 or b <= lower:
        return _jacobi_rule(nodes, b - 1, a - 1, like)
    x, w = _jacobi_rule(nodes, b - lower - 1, a - 1, like)
    mass = math.exp(gammaln(b - lower) + gammaln(a + b) - gammaln(b) - gammaln(a + b - lower))  # B(a,b-l)/B(a,b)
    return x, w * (1 - x) ** lower * mass


def _cross_block(phi: Activation, omega: torch.Tensor, batch1: int, nodes: int, rank1: int, rank2: int,
                 direction: torch.Tensor | None = None,
                 tangent: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The cross block of (*) for reduced centred covariances ``omega`` (..., r1 + r2, r1 + r2), r_k = B_k - 1,
    whose diagonal blocks Omega_11, Omega_22 have ranks ``rank1``, ``rank2`` (r1, r2 unless the batch's inputs
    span fewer directions, as raw inputs with fewer features than B - 1 do). With ``direction`` (..., r1, r2), also
    its derivative in Omega_12 along that direction, on the same nodes: (value, derivative).

    Each batch is rescaled to unit mean eigenvalue (batch norm is scale invariant per batch). The changes of
    variables s = x / (2 m1 (1 - x)), t = y / (2 m2 (1 - y)), m1 = mean eig Omega_11, m2 = mean eig Y_s, turn (*)
    into int int x^(alpha/2-1) (1-x)^(r1/2-1) y^(alpha/2-1) (1-y)^(r2/2-1) F(x, y) dx dy. Each zero eigenvalue of
    Omega_11 puts a factor (1 + 0)^(-1/2) in det(I + 2s Omega_11), that is (1 - x)^(-1/2) after the change of
    variables, and likewise for Y_s, whose rank is that of Omega_22 for every finite s; those factors are taken
    into the endpoint powers, (1-x)^(rank1/2-1) (1-y)^(rank2/2-1), and F is smooth again. A tensor Gauss-Jacobi
    rule integrates the endpoint powers exactly. Omega_11, its eigenbasis and the nodes do not move with Omega_12:
    the derivative is the chain rule through Y_s (its eigenpairs by :func:`~bnsym.meanfield.dual.eigh_tangent`),
    the determinant and the correlations of F (J_phi' by Price's ladder). The derivative's integrand is rougher at
    the endpoints, (1-x)^(-1) (1-y)^(-1/2) times a smooth function (the BN Jacobian's 1 / s^2: E[1 / chi^2_r]
    with r = 3 at B = 4); ``tangent=True`` takes those powers into the rule (``_laplace_rule``), for the value
    and the derivative alike, so that the derivative converges as fast as the kernel (depth 2, B = 4: 1e-8 at 64
    nodes, where a rule blind to them is 1.0 % off and converges as 1 / nodes).
    """
    from .dual import eigh, eigh_tangent  # here: dual's autograd Function imports torch

    alpha = phi.degree
    r1 = batch1 - 1
    r2 = omega.shape[-1] - r1
    batch2 = r2 + 1
    e1, e2 = helmert(batch1, omega), helmert(batch2, omega)
    o11, o12, o22 = omega[..., :r1, :r1], omega[..., :r1, r1:], omega[..., r1:, r1:]
    m1 = o11.diagonal(0, -2, -1).mean(-1)[..., None, None]  # batch norm is scale invariant per batch:
    m22 = o22.diagonal(0, -2, -1).mean(-1)[..., None, None]  # rescale each to mean eigenvalue 1
    o11, o12, o22 = o11 / m1, o12 / (m1 * m22).sqrt(), o22 / m22
    omega_eig, u = eigh(o11)  # (..., r1), (..., r1, r1); ascending
    live1 = torch.arange(r1, device=omega.device) >= r1 - rank1  # the rank1 nonzero eigenvalues
    omega_eig = torch.where(live1, omega_eig, 0.0)
    x, wx = _laplace_rule(nodes, rank1, alpha, 1.0 if tangent else 0.0, omega)
    y, wy = _laplace_rule(nodes, rank2, alpha, 0.5 if tangent else 0.0, omega)
    xs = x[:, None]  # (nx, 1)
    den1 = (1 - xs) + xs * omega_eig[..., None, :]  # (..., nx, r1): (1 + 2 s omega_k) (1 - x)
    det1 = torch.where(live1, den1, 1.0).rsqrt().prod(-1)  # (..., nx)
    t1 = e1 @ u  # (..., B1, r1)
    p0 = (t1.square()[..., None, :, :] * (omega_eig[..., None, :] / den1)[..., None, :]).sum(-1)  # (..., nx, B1)
    rot = torch.where(live1[:, None], u.mT @ o12, 0.0)  # (..., r1, r2); o12 vanishes on the null space of o11
    tilt = xs / den1  # (..., nx, r1): 2 s / (1 + 2 s omega_k)
    ys_ = o22[..., None, :, :] - rot.mT[..., None, :, :] @ (tilt[..., :, None] * rot[..., None, :, :])
    kappa, v = eigh(ys_)  # (..., nx, r2), ascending
    live2 = torch.arange(r2, device=omega.device) >= r2 - rank2
    values = kappa
    kappa = torch.where(live2, kappa.clamp(min=0.0), 0.0)
    m2 = kappa.mean(-1).clamp(min=torch.finfo(omega.dtype).tiny)  # (..., nx)
    ratio = kappa / m2[..., None]
    t2 = e2 @ v  # (..., nx, B2, r2)
    lead = t1[..., None, :, :] / den1[..., None, :]  # (..., nx, B1, r1)
    turned = rot[..., None, :, :] @ v  # (..., nx, r1, r2)
    z = torch.where(live2, lead @ turned, 0.0)
    yy = y[:, None]
    den2 = (1 - yy) + yy * ratio[..., None, :]  # (..., nx, ny, r2)
    det2 = torch.where(live2, den2, 1.0).rsqrt().prod(-1)  # (..., nx, ny)
    inverse2 = torch.where(live2, 1 / den2, 0.0)  # (..., nx, ny, r2)
    q = (kappa[..., None, :] * inverse2) @ t2.square().mT  # (..., nx, ny, B2)
    drop = (1 - xs) * y / m2[..., None]  # (..., nx, ny): (1 - x) y / m2
    p = p0[..., None, :] - drop[..., None] * (inverse2 @ z.square().mT)  # (..., nx, ny, B1)
    scale = torch.sqrt((1 - xs) * (1 - y))  # (nx, ny)
    root_p, root_q = p.clamp(min=0).sqrt(), q.clamp(min=0).sqrt()
    weight = (wx[:, None] * wy) * det1[..., None] * det2 * m2[..., None] ** (-alpha / 2)
    inverse_p = torch.where(root_p > 0, 1 / root_p, 0.0)
    rows = scale[..., None] * inverse_p  # corr = rows_a cross_ab columns_b
    columns = torch.where(root_q > 0, 1 / root_q, 0.0)
    left = weight[..., None] * (root_p if alpha == 1 else root_p**alpha)  # integrand = left_a J(corr_ab) right_b
    right = root_q if alpha == 1 else root_q**alpha
    log_pref = (alpha / 2 * math.log(batch1 * batch2 / 4) + float(np.log(c_alpha(alpha)))
                + gammaln(rank1 / 2) + gammaln(rank2 / 2) - gammaln((alpha + rank1) / 2)
                - gammaln((alpha + rank2) / 2))
    if direction is None:
        return math.exp(log_pref) * _node_sum(phi, z, rows, inverse2, t2, columns, left, right)
    dturned = torch.where(live1[:, None], u.mT @ direction, 0.0)[..., None, :, :] @ v / (m1 * m22).sqrt()[..., None]
    half = turned.mT @ (tilt[..., :, None] * dturned)  # Y_s moves by -(drot^T tilt rot + rot^T tilt drot):
    dkappa, spin = eigh_tangent(values, -(half + half.mT))  # in its eigenbasis v, dv = v spin
    dkappa = torch.where(live2, dkappa, 0.0)
    dm2 = dkappa.mean(-1)
    dden2 = yy * ((dkappa - ratio * dm2[..., None]) / m2[..., None])[..., None, :]
    dinverse2 = -inverse2 * inverse2 * dden2
    dt2 = t2 @ spin
    dz = torch.where(live2, lead @ (dturned + turned @ spin), 0.0)
    dq = ((dkappa[..., None, :] * inverse2 + kappa[..., None, :] * dinverse2) @ t2.square().mT
          + (kappa[..., None, :] * inverse2) @ (2 * t2 * dt2).mT)
    dp = (drop * dm2[..., None] / m2[..., None])[..., None] * (inverse2 @ z.square().mT) - drop[..., None] * (
        dinverse2 @ z.square().mT + inverse2 @ (2 * z * dz).mT)
    droot_p, droot_q = 0.5 * dp * inverse_p, 0.5 * dq * columns
    dweight = weight * (-0.5 * (dden2 * inverse2).sum(-1) - alpha / 2 * dm2[..., None] / m2[..., None])
    dcolumns = -columns * columns * droot_q
    if alpha == 1:
        dleft, dright = dweight[..., None] * root_p + weight[..., None] * droot_p, droot_q
    else:
        dleft = dweight[..., None] * root_p**alpha + weight[..., None] * alpha * root_p ** (alpha - 1) * droot_p
        dright = alpha * root_q ** (alpha - 1) * droot_q
    value, slope = _node_sum(phi, z, rows, inverse2, t2, columns, left, right,
                             (dz, -droot_p * inverse_p, dinverse2, dt2, dcolumns, dleft, dright))
    return math.exp(log_pref) * value, math.exp(log_pref) * slope


def _node_sum(phi: Activation, z: torch.Tensor, rows: torch.Tensor, inverse2: torch.Tensor, t2: torch.Tensor,
              columns: torch.Tensor, left: torch.Tensor, right: torch.Tensor,
              tangents: tuple[torch.Tensor, ...] | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """sum over the (nx, ny) nodes of left_a J_phi(corr_ab) right_b with corr_ab = rows_a sum_k z_ak inverse2_k t2_bk
    columns_b (z (n, nx, B1, r2), rows (n, nx, ny, B1), inverse2 (n, nx, ny, r2), t2 (n, nx, B2, r2)): one GEMM per
    input and x-node, and the (n, nx, ny, B1, B2) arrays on the CPU in pieces of a few inputs, or of a few x-nodes of
    one input, so that they stay in cache. With ``tangents``, the derivatives along one direction of z, log rows,
    inverse2, t2, columns, left and right: (the sum, its derivative)."""
    n, nx, ny, b1 = rows.shape
    b2 = t2.shape[-2]
    per_node = ny * b1 * b2
    size = n if z.is_cuda else max(1, _NODE_ELEMENTS // (nx * per_node))
    step = nx if z.is_cuda or size > 1 else max(1, _NODE_ELEMENTS // per_node)
    out = z.new_zeros(n, b1, b2)
    derivative = None if tangents is None else z.new_zeros(n, b1, b2)
    for lo in range(0, n, size):
        for x_lo in range(0, nx, step):
            part = (slice(lo, lo + size), slice(x_lo, x_lo + step))
            pieces = [array[part] for array in (z, rows, inverse2, t2, columns, left, right)]
            piece = _node_piece(phi, *pieces, None if tangents is None else [array[part] for array in tangents])
            if tangents is None:
                out[part[0]] += piece
            else:
                out[part[0]] += piece[0]
                derivative[part[0]] += piece[1]
    return out if tangents is None else (out, derivative)


def _node_piece(phi: Activation, z: torch.Tensor, rows: torch.Tensor, inverse2: torch.Tensor, t2: torch.Tensor,
                columns: torch.Tensor, left: torch.Tensor, right: torch.Tensor,
                tangents: list[torch.Tensor] | None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """:func:`_node_sum` over one piece of inputs and x-nodes (its arguments sliced alike)."""
    n, nx, ny, b1 = rows.shape
    b2, r2 = t2.shape[-2:]
    tilt = rows[..., :, None] * inverse2[..., None, :]
    tilted = (z[:, :, None] * tilt).reshape(-1, nx, ny * b1, r2)
    corr = (tilted @ t2.mT).view(-1, nx, ny, b1, b2)
    if tangents is None:
        kernel = phi_kernel_torch(phi, corr.mul_(columns[..., None, :]))
        return kernel.mul_(right[..., None, :]).mul_(left[..., None]).sum((-4, -3))
    dz, dlog_rows, dinverse2, dt2, dcolumns, dleft, dright = tangents
    dtilted = (dz[:, :, None] * tilt).addcmul_(z[:, :, None] * rows[..., :, None],
                                              dinverse2[..., None, :]).reshape(-1, nx, ny * b1, r2)
    dcorr = (torch.cat([dtilted, tilted], -1) @ torch.cat([t2, dt2], -1).mT).view(-1, nx, ny, b1, b2)
    dcorr.addcmul_(corr, dlog_rows[..., None]).mul_(columns[..., None, :])
    dcorr.addcmul_(corr, dcolumns[..., None, :])
    kernel, slope = phi_kernel_and_slope_torch(phi, corr.mul_(columns[..., None, :]))
    slope = (slope * dcorr).mul_(right[..., None, :]).addcmul_(kernel, dright[..., None, :])
    kernel = kernel * right[..., None, :]
    return ((kernel * left[..., None]).sum((-4, -3)),
            slope.mul_(left[..., None]).addcmul_(kernel, dleft[..., None]).sum((-4, -3)))


def _as_tensor(sigma: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(float64 tensor on the input's device, whether the input was a numpy array)."""
    if isinstance(sigma, torch.Tensor):
        return sigma.to(torch.float64), False
    return torch.as_tensor(np.asarray(sigma, dtype=float)), True


def _reduce(sigma: torch.Tensor, batch1: int) -> torch.Tensor:
    """E^T Sigma E with E = diag(e1, e2): the centred covariance Omega in the bases of 1^perp of each batch."""
    batch2 = sigma.shape[-1] - batch1
    basis = torch.block_diag(helmert(batch1, sigma), helmert(batch2, sigma))
    return basis.mT @ sigma @ basis


def _ranks(block: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Numerical ranks of a stack of centred PSD blocks: eigenvalues above RANK_TOL times the block's mean
    eigenvalue and above the rounding left by centring, 64 float eps times ``scale`` (the mean variance of the
    uncentred inputs), so that a block of identical inputs, all rounding, has rank 0."""
    eig = torch.linalg.eigvalsh(block)
    floor = 64 * torch.finfo(block.dtype).eps * scale[:, None]
    return (eig > torch.maximum(RANK_TOL * eig.mean(-1, keepdim=True), floor)).sum(-1)


def _chunked(phi: Activation, omega: torch.Tensor, batch1: int, nodes: int, scale: torch.Tensor,
             direction: torch.Tensor | None = None,
             tangent: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """:func:`_cross_block` over a flat stack (n, r, r), grouped by the ranks of the two diagonal blocks, in chunks
    that keep the node arrays under a budget. ``scale`` (n,): the mean variance of each uncentred input;
    ``direction`` (n, r1, r2): also the derivative in Omega_12 along it; ``tangent``: the tangent's rule (as
    :func:`_cross_block`)."""
    r1 = batch1 - 1
    batch2 = omega.shape[-1] - batch1 + 2
    per_item = nodes * nodes * (batch1 + 1) * batch2 * 8 * (4 if direction is None else 8)
    if per_item > _MAX_ITEM_BYTES:
        raise ValueError(f"{nodes} Gauss-Jacobi nodes per axis at B1 = {batch1}, B2 = {batch2} need "
                         f"{per_item / 2**30:.1f} GiB for one joint covariance, above {_MAX_ITEM_BYTES // 2**30} GiB "
                         "(nodes^2 points per entry of the cross block): use fewer nodes or smaller batches")
    size = max(1, _CHUNK_BYTES // per_item)
    ranks = torch.stack([_ranks(omega[:, :r1, :r1], scale), _ranks(omega[:, r1:, r1:], scale)], -1)
    if bool((ranks == 0).any()):
        raise ValueError("a batch's centred covariance is zero: batch norm divides by a zero batch variance")
    out = [omega.new_empty(len(omega), batch1, batch2) for _ in range(1 if direction is None else 2)]
    for rank1, rank2 in torch.unique(ranks, dim=0).tolist():
        index = ((ranks[:, 0] == rank1) & (ranks[:, 1] == rank2)).nonzero()[:, 0]
        parts = [_cross_block(phi, omega[part], batch1, nodes, rank1, rank2,
                              None if direction is None else direction[part], tangent)
                 for part in index.split(size)]
        for whole, pieces in zip(out, zip(*parts) if direction is not None else [parts]):
            whole[index] = torch.cat(pieces)
    return out[0] if direction is None else (out[0], out[1])


def cross_batch_kernel_laplace(phi: Activation, sigma: np.ndarray | torch.Tensor, batch1: int,
                               nodes: int | None = None, with_error: bool = False,
                               blocks: str = "all") -> np.ndarray | torch.Tensor | Estimate:
    """V(Sigma) of a pair of batches by the two-dimensional Laplace integral (*), positive-homogeneous phi, eps = 0.

    ``sigma``: one joint covariance (B1 + B2, B1 + B2) or a stack (..., B1 + B2, B1 + B2), a numpy array or a
    torch tensor (computed on its device, CUDA included, in float64). ``blocks="all"`` returns the joint
    covariance after the layer, same shape (its diagonal blocks are :func:`bnsym.bn_kernel`'s, computed by (*)
    for the pair (h1, h1), an independent route); ``blocks="cross"`` only the (..., B1, B2) cross block, the
    cheap part for many pairs of batches whose diagonal blocks are known.

    ``nodes``: Gauss-Jacobi nodes per axis. None (default) doubles them from 8 until two rules agree to
    ``RTOL`` max |V| (at most ``MAX_NODES``); the error is that last change. A fixed ``nodes`` computes one rule
    (error, with ``with_error``, the change from ``nodes // 2``): 6 nodes give about 1e-10 relative at B = 32
    when each batch's centred eigenvalues are near their mean, but 3e-5 on standardised digits, whose eigenvalues
    spread over two to three decades (12 nodes: 7e-9; :func:`bnsym.nngp.default_nodes`); small batches (B ~ 4)
    and rank-deficient blocks need more. Inputs are not validated here (see
    :func:`bnsym.cross_batch_kernel`).
    """
    tensor, was_numpy = _as_tensor(sigma)
    batch = tensor.shape[-1]
    flat = tensor.reshape(-1, batch, batch)
    scales = torch.as_tensor(batch_scales(flat.diagonal(0, -2, -1).cpu().numpy(), batch1), device=flat.device)
    flat = flat * scales[:, :, None] * scales[:, None, :]  # each batch at unit scale: BN (eps = 0) is blind to it
    shape = (*tensor.shape[:-2], batch1, batch - batch1) if blocks == "cross" else tensor.shape

    def solve(n: int) -> torch.Tensor:
        cross = _chunked(phi, _reduce(flat, batch1), batch1, n, flat.diagonal(0, -2, -1).mean(-1))
        if blocks == "cross":
            return cross.reshape(shape)
        diagonal = []
        for lo, hi in ((0, batch1), (batch1, batch)):
            block = flat[..., lo:hi, lo:hi]
            pair = torch.cat([torch.cat([block, block], -1)] * 2, -2)
            diagonal.append(_chunked(phi, _reduce(pair, hi - lo), hi - lo, n, pair.diagonal(0, -2, -1).mean(-1)))
        top = torch.cat([diagonal[0], cross], -1)
        bottom = torch.cat([cross.mT, diagonal[1]], -1)
        return torch.cat([top, bottom], -2).reshape(shape)

    if nodes is None:
        nodes, value = 8, solve(8)
        while True:
            nodes *= 2
            previous, value = value, solve(nodes)
            error = (value - previous).abs()
            if error.max() <= RTOL * value.abs().max() or nodes >= MAX_NODES:
                break
        if error.max() > 1e-4 * value.abs().max():
            raise ValueError(f"the Laplace rule did not converge ({nodes} nodes per axis, relative change "
                             f"{float(error.max() / value.abs().max()):.1e}): a batch's centred covariance is (nearly) "
                             "rank-deficient; use method='qmc'")
    else:
        value = solve(nodes)
        error = (value - solve(nodes // 2)).abs() if with_error else None
    if not with_error:
        return value.cpu().numpy() if was_numpy else value
    return Estimate(value.cpu().numpy(), error.cpu().numpy(), "laplace")


# --- The CBSB1 fixed point and the cross-batch rate (Defn H.2, Thms H.3, H.13-H.14) -------------------------


@cache
def derive_cross_fixed_point() -> Derivation:
    """c*_cross = (E phi(x_1))^2 (Thm H.3), and E rho_alpha(x_1) in closed form by Euler's Beta integral.

    At a CBSB1 point the cross block of the pre-activations is c 1 1^T, which the centrings G1, G2 remove: the two
    batches' BN outputs are independent, each x = sqrt(B) v with v uniform on the unit sphere of 1^perp, so
    E[x1_i x2_j] = E phi(x_1)^2 whatever c. One coordinate is x_1 = sqrt(B - 1) t, t ~ (1 - t^2)^((B-4)/2).
    """
    from ..core.symbols import B, alpha, t

    d = Derivation("The CBSB1 fixed point: the cross block of two batches")
    density = (1 - t**2) ** ((B - 4) / 2)
    d.step("Independent batches: the cross block of the next layer is the product of the two means,",
           sp.Eq(sp.Symbol("c^*_cross"), sp.Symbol("E[phi(x_1)]") ** 2))
    half = sp.Integral(t**alpha * density, (t, 0, 1))
    d.step("With $\\phi = a\\rho_\\alpha(z) - b\\rho_\\alpha(-z)$ and $x_1 = \\sqrt{B-1}\\,t$ symmetric, "
           "$E\\phi(x_1) = (a-b)E\\rho_\\alpha(x_1)$, where",
           sp.Eq(sp.Symbol("E[rho_alpha(x_1)]"),
                 (B - 1) ** (alpha / 2) * half / sp.Integral(density, (t, -1, 1))))
    beta_one = euler_beta((alpha + 1) / 2, (B - 2) / 2)
    beta_all = euler_beta(sp.Rational(1, 2), (B - 2) / 2)
    d.step("Substitute $u = t^2$, then $u = w/(1+w)$: each integral is Euler's Beta integral "
           "$\\int_0^1 u^{p-1}(1-u)^{q-1}du = \\int_0^\\infty w^{p-1}(1+w)^{-p-q}dw$; the numerator has "
           "$p = (\\alpha+1)/2$, $q = (B-2)/2$ and a factor 1/2,", beta_one)
    moment = sp.gammasimp((B - 1) ** (alpha / 2) * beta_one.rhs / 2 / beta_all.rhs)
    d.step("so", sp.Eq(sp.Symbol("E[rho_alpha(x_1)]"), moment), name="E_rho")
    relu = sp.gammasimp(moment.subs(alpha, 1) ** 2)
    d.step("ReLU ($a = 1$, $b = 0$, $\\alpha = 1$):", sp.Eq(sp.Symbol("c^*_cross,relu"), relu), name="relu")
    ratio = sp.Symbol("S_B", positive=True)  # Gamma((B-1)/2) / Gamma(B/2)
    relu_s = sp.simplify(sp.expand_func(relu * sp.gamma(B / 2) ** 2 / sp.gamma((B - 1) / 2) ** 2)) * ratio**2
    limit = sp.limit(relu_s.subs(ratio, sp.sqrt(2 / B)), B, sp.oo)
    d.step("With $S_B = \\Gamma(\\frac{B-1}2)/\\Gamma(\\frac B2)$ and Stirling's $B S_B^2 \\to 2$, as $B\\to\\infty$",
           sp.Eq(sp.Limit(sp.Symbol("c^*_cross,relu"), B, sp.oo), limit), name="relu_limit")
    d.step("and the linear network ($a = b = 1$) has $E\\phi = 0$:", sp.Eq(sp.Symbol("c^*_cross,id"), 0))
    d.result = moment
    return d


@cache
def derive_cross_rate() -> Derivation:
    """lambda_x^2, the factor by which the centred cross block shrinks per layer (Thms H.13-H.14), and its bound.

    Near CBSB1 the cross covariance of (y1, y2) is small: to first order (Price) the cross block of the outputs
    moves by E[J_h1] Xi E[J_h2]^T, and E[J_h] = lambda_x G (permutation symmetry; J_h 1 = 0).
    """
    from ..core.symbols import B, alpha, c, mu_star

    d = Derivation("The cross-batch rate lambda_x^2")
    a1, lam, ratio = sp.symbols("a_1 lambda_x R_B", positive=True)  # a_1 = E[x_1 phi(x_1)]
    x = sp.Symbol("x", real=True)
    d.step("$E[J_h] = \\lambda_\\times G$ with $J_h = \\frac{\\sqrt B}{r} D (G - vv^T)$, $v_a = x_a/\\sqrt B$, and "
           "$r$ independent of $v$:",
           sp.Eq(lam, sp.sqrt(B) * sp.Symbol("E[1/r]") * sp.Symbol("E[phi'(x_1)(B-1-x_1^2)]") / (B - 1)))
    rr = sp.Symbol("r", positive=True)
    chi = rr ** (B - 2) * sp.exp(-rr**2 / 2)
    inverse_r = sp.gammasimp(sp.integrate(chi / rr, (rr, 0, sp.oo), conds="none")
                             / sp.integrate(chi, (rr, 0, sp.oo), conds="none")) / sp.sqrt(mu_star)
    d.step("$r^2 \\sim \\mu^*\\chi^2_{B-1}$ at the BSB1 point:", sp.Eq(sp.Symbol("E[1/r]"), inverse_r))
    density = (1 - x**2 / (B - 1)) ** ((B - 4) / 2)
    d.step("Integration by parts against the density $p(x) \\propto (1 - x^2/(B-1))^{(B-4)/2}$ of $x_1$: "
           "$\\frac{d}{dx}[(B-1-x^2)p] + (B-2)xp = 0$, checked:",
           sp.Eq(sp.simplify(sp.diff((B - 1 - x**2) * density, x) + (B - 2) * x * density), 0, evaluate=False))
    rate = sp.sqrt(B) * inverse_r * (B - 2) * a1 / (B - 1)
    d.step("so $E[\\phi'(x_1)(B-1-x_1^2)] = (B-2)\\,a_1$, $a_1 = E[x_1\\phi(x_1)]$, and", sp.Eq(lam, rate))
    squared = sp.expand_power_base(rate**2, force=True)
    d.step("The cross block's centred part shrinks by", sp.Eq(lam**2, squared), name="lambda_x2")
    general = squared.subs(sp.gamma(B / 2 - 1) / sp.gamma(B / 2 - sp.Rational(1, 2)), ratio)
    bound = sp.simplify(squared.subs(mu_star, B * a1**2 / (B - 1)))
    d.step("$(B-1)\\mu^* = E|G\\phi|^2 \\ge E\\langle\\phi, x\\rangle^2/B \\ge B a_1^2$ (projection on $x$, "
           "$|x|^2 = B$; equality iff $\\phi$ is linear), so", sp.Eq(sp.Symbol("lambda_x^2_max"), bound), name="bound")
    relu_mu = sp.gammasimp(derive_bsb1_constant().result.subs(alpha, 1)) * (
        1 - arccos_kernel_symbolic(1).subs(c, -1 / (B - 1)))
    relu = squared.subs({a1: sp.Rational(1, 2), mu_star: relu_mu})
    d.step("ReLU: $a_1 = E\\rho_2(x_1)$ = 1/2, $\\mu^* = q^*(1-c^*)$ of chapter 1,",
           sp.Eq(sp.Symbol("lambda_x^2_relu"), relu), name="relu")
    stirling = {ratio: sp.sqrt(2 / B)}
    relu_limit = sp.limit(general.subs({a1: sp.Rational(1, 2), mu_star: relu_mu}).subs(stirling), B, sp.oo)
    d.step("With $R_B = \\Gamma(\\frac B2-1)/\\Gamma(\\frac{B-1}2)$ and Stirling's $B R_B^2 \\to 2$:",
           sp.Eq(sp.Limit(sp.Symbol("lambda_x^2_relu"), B, sp.oo), relu_limit), name="relu_limit")
    linear_limit = sp.limit(sp.simplify(sp.expand_func(bound * sp.gamma((B - 1) / 2) ** 2 / sp.gamma(B / 2 - 1) ** 2))
                            * stirling[ratio] ** 2, B, sp.oo)
    d.step("Identity (the bound is attained):", sp.Eq(sp.Limit(sp.Symbol("lambda_x^2_id"), B, sp.oo), linear_limit),
           name="linear_limit")
    d.result = squared
    return d


@lambdified(modules="scipy")
def _mean_rho() -> tuple:
    """E rho_alpha(x_1) as a function of (B, alpha), lambdified from :func:`derive_cross_fixed_point`."""
    from ..core.symbols import B, alpha

    return (B, alpha), _log_gamma(derive_cross_fixed_point()["E_rho"])


@lambdified(modules="scipy")
def _rate() -> tuple:
    """lambda_x^2 as a function of (B, a_1, mu*), lambdified from :func:`derive_cross_rate`."""
    from ..core.symbols import B, mu_star

    return (B, sp.Symbol("a_1", positive=True), mu_star), _log_gamma(derive_cross_rate()["lambda_x2"])


def cross_fixed_point_closed_form(phi: Activation, batch_size: int | np.ndarray) -> Estimate:
    """c*_cross = ((a - b) E rho_alpha(x_1))^2 for positive-homogeneous phi, vectorised over B (exact: error 0)."""
    a, b = phi.ab
    mean = (a - b) * _mean_rho()(np.asarray(batch_size, dtype=float), phi.degree)
    return Estimate(mean**2, 0.0, "closed_form")


def cross_rate_closed_form(phi: Activation, batch_size: int | np.ndarray) -> Estimate:
    """lambda_x^2 with a_1 = (a + b) E rho_(alpha+1)(x_1) and mu* of Thm F.8, vectorised over B (error 0)."""
    a, b = phi.ab
    batch = np.asarray(batch_size, dtype=float)
    a1 = (a + b) * _mean_rho()(batch, phi.degree + 1)
    return Estimate(_rate()(batch, a1, fixed_point_closed_form(phi, batch_size).mu), 0.0, "closed_form")


def _one_coordinate(f: Callable[[np.ndarray], np.ndarray], phi: Activation, batch_size: int) -> Estimate:
    """E f(x_1) for one BN coordinate by the pair quadrature of :mod:`bnsym.meanfield.sphere` (exact rule)."""
    value, error = expect_pair_with_error(lambda first, second: f(first), batch_size, phi.kinks)
    return Estimate(value, error, "spherical")


def cross_fixed_point_spherical(phi: Activation, batch_size: int) -> Estimate:
    """c*_cross = (E phi(x_1))^2 for any phi, E by quadrature on the BN sphere; error propagated."""
    mean = _one_coordinate(phi.numpy, phi, batch_size)
    return Estimate(mean.value**2, 2 * abs(mean.value) * mean.error + mean.error**2, "spherical")


def cross_rate_spherical(phi: Activation, batch_size: int) -> Estimate:
    """lambda_x^2 for any phi: a_1 = E[x_1 phi(x_1)] by quadrature, mu* from the spherical fixed point."""
    a1 = _one_coordinate(lambda x: x * phi.numpy(x), phi, batch_size)
    point = fixed_point_spherical(phi, batch_size)
    mu, mu_error = point.mu, point.error * (1 + abs(point.c)) + abs(point.q) * point.error
    value = float(_rate()(float(batch_size), a1.value, mu))
    relative = 2 * a1.error / max(abs(a1.value), 1e-300) + mu_error / mu
    return Estimate(value, value * relative, "spherical")


# --- Cor I.6: the cross-batch rate in the Gegenbauer basis ------------------------------------------------


@cache
def derive_cross_rate_gegenbauer() -> Derivation:
    """Cor I.6: lambda_x^2 = lambda_id^2(B) c_1 a_1^2 / sum_l c_l a_l^2, the identity's rate times the share of the
    degree-1 Gegenbauer component in mu*; below 1 for every phi, equal to lambda_id^2 only for linear phi.

    psi_1(x) = x, so a_1 = E[x_1 phi(x_1)] of :func:`derive_cross_rate` is phi's degree-1 Gegenbauer coefficient,
    and mu* = sum_l c_l a_l^2 (Thm F.13, :mod:`bnsym.meanfield.gegenbauer`).
    """
    from ..core.symbols import B, mu_star, t
    from .gegenbauer import normalised_gegenbauer_symbolic, psi_symbolic

    d = Derivation("Cor I.6: the cross-batch rate in the Gegenbauer basis")
    x = sp.Symbol("x", real=True)
    psi1 = sp.simplify(psi_symbolic(1).subs(sp.Symbol("lambda", positive=True), (B - 3) / 2)
                       .subs(t, x / sp.sqrt(B - 1)))
    d.step("The degree-1 basis function is the coordinate itself, so $a_1 = E[x_1\\phi(x_1)]$ of the rate is "
           "$\\phi$'s degree-1 Gegenbauer coefficient:", sp.Eq(sp.Symbol("psi_1(x)"), psi1), name="psi_1")
    c1 = sp.simplify(1 - normalised_gegenbauer_symbolic(1, -1 / (B - 1)).subs(sp.Symbol("lambda", positive=True),
                                                                                 (B - 3) / 2))
    d.step("Its weight $c_1 = 1 - \\hat C_1(-1/(B-1))$ in $\\mu^* = \\sum_l c_l a_l^2$ (Thm F.13):",
           sp.Eq(sp.Symbol("c_1"), c1), name="c_1")
    a1, rest = sp.Symbol("a_1", positive=True), sp.Symbol("R", nonnegative=True)  # R = sum_{l >= 2} c_l a_l^2
    rate = derive_cross_rate()["lambda_x2"]
    identity = sp.simplify(rate.subs(mu_star, c1 * a1**2))
    d.step("A linear $\\phi$ has only $a_1$ ($c_0 = 0$ drops the constant): its rate does not depend on $a_1$,",
           sp.Eq(sp.Symbol("lambda_id^2"), identity), name="identity")
    share = c1 * a1**2 / (c1 * a1**2 + rest)
    general = rate.subs(mu_star, c1 * a1**2 + rest)
    assert sp.simplify(general / (identity * share)) == 1, "Cor I.6: the Gegenbauer form does not factor"
    d.step("With $R = \\sum_{l\\ge2} c_l a_l^2 \\ge 0$ (each $c_l \\ge 0$ since $|\\hat C_l| \\le 1$), "
           "checked by simplify:", sp.Eq(sp.Symbol("lambda_x^2"), sp.Symbol("lambda_id^2") * share), name="form")
    d.step("So $\\lambda_\\times^2 \\le \\lambda_{id}^2 < 1$ for every $\\phi$, with equality iff $R = 0$ "
           "($\\phi$ linear): stacking batch norm always decorrelates two batches, forward and backward.",
           sp.Le(sp.Symbol("lambda_x^2"), sp.Symbol("lambda_id^2")))
    d.result = identity * share
    return d


def cross_rate_gegenbauer(phi: Activation, batch_size: int, tol: float = 1e-8) -> Estimate:
    """lambda_x^2 of Cor I.6 from phi's Gegenbauer coefficients: a_1 and mu* = sum_l c_l a_l^2 (tail-corrected,
    :func:`bnsym.meanfield.gegenbauer.gegenbauer_sums`), error from the truncation and quadrature bounds."""
    from .gegenbauer import _converged_sums, coefficients

    sums = _converged_sums(phi, batch_size, tol, 2048, lambda s: (s.cross_error + s.energy_error) / s.weighted)
    n = 2 * sums.terms + 64
    a1, a1_coarse = coefficients(phi, batch_size, 1, n)[1], coefficients(phi, batch_size, 1, n // 2)[1]
    value = float(_rate()(float(batch_size), a1, sums.weighted))
    relative = 2 * abs(a1 - a1_coarse) / max(abs(a1), 1e-300) + (sums.cross_error + sums.energy_error) / sums.weighted
    return Estimate(value, value * relative, "gegenbauer")


def _log_gamma(expr: sp.Expr) -> sp.Expr:
    """Gamma ratios Gamma(x + m)^p / Gamma(x)^p whose shift m does not grow with B -> RisingFactorial(x, m)^p
    (SciPy's ``poch``, accurate to rounding at any B, where exp(log Gamma(x + m) - log Gamma(x)) loses log Gamma's
    size, B log B x 1e-16, and so 1 - lambda_x^2 at large B); any other Gamma(x) -> exp(log Gamma(x)), exponents
    combined, so that nothing overflows at large B."""
    from ..core.symbols import B

    factors = sp.Mul.make_args(expr)
    powers = sp.Mul(*factors).as_powers_dict()
    gammas = [base for base in powers if isinstance(base, sp.gamma)]
    for top in gammas:
        for bottom in gammas:
            shift = sp.simplify(top.args[0] - bottom.args[0])
            if powers[top] != 0 and powers[top] == -powers[bottom] and not shift.has(B) and shift != 0:
                powers[bottom], power = 0, powers[top]
                powers[top] = 0
                powers[sp.RisingFactorial(bottom.args[0], shift)] = power
    paired = sp.Mul(*(base**power for base, power in powers.items()))
    return sp.powsimp(paired.replace(sp.gamma, lambda arg: sp.exp(sp.loggamma(arg))), combine="exp", force=True)
