"""Conditioning of products of Gaussian matrices (Bjorck et al. 2018, section 4, Figs. 11-12, App. C).

* The per-factor stretches of the QR method (:func:`qr_log_stretches`), whose mean is the Lyapunov slope
  (1/2)[psi(N/2) - psi(1/2)] of log kappa (:mod:`bnsym.products.lyapunov`).
* The condition number itself, without float64 saturation: kappa = sigma_max(X) sigma_max(X^-1), both products
  accumulated with rescaling (:func:`log_condition_number`); a plain SVD of X floors sigma_min near 1e-16
  sigma_max.
* Proposition 1 (App. C): with every matrix but A_1 fixed, a linear net is a least-squares problem; gradient
  descent on A_1 sees the Hessian 2 (x x^T kron Abar^T Abar) (:func:`derive_one_layer_gd`).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import sympy as sp
import torch

from ..core.derivation import Derivation
from ..core.symbols import eta, kappa
from ..core.validation import check_real_array, check_real_tensor
from .lyapunov import qr_step


def _as_factors(factors) -> torch.Tensor:
    x = check_real_tensor(factors, "factors (..., M, N, N)", min_ndim=3)
    if x.shape[-1] != x.shape[-2]:
        raise ValueError(f"factors must have shape (..., M, N, N) (M square factors), got {tuple(x.shape)}")
    return x


def _unit_scaled(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(matrix / 2^k, k log 2) per matrix, 2^k the power of 2 that brings max abs(entry) into [1/2, 1): exact, and
    a product of two such N x N matrices has entries at most N (no overflow, whatever the factors' scales)."""
    exponent = torch.frexp(matrix.abs().amax((-2, -1), keepdim=True))[1]
    return torch.ldexp(matrix, -exponent), exponent[..., 0, 0].to(matrix.dtype) * math.log(2)


def _log_top_singular_value(matrices: list[torch.Tensor]) -> torch.Tensor:
    """log sigma_max of the product matrices[0] @ matrices[1] @ ..., each factor and each partial product rescaled
    by a power of 2 (a factor with entries near 1e300, the inverse of a pivot 1e-300, never overflows)."""
    product, log_scale = _unit_scaled(matrices[0])
    for factor in matrices[1:]:
        unit, log_factor = _unit_scaled(factor)
        product, log_product = _unit_scaled(product @ unit)
        log_scale = log_scale + log_factor + log_product
    return log_scale + torch.linalg.matrix_norm(product, ord=2).log()


def log_condition_number(factors) -> torch.Tensor:
    """log kappa(X_1 X_2 ... X_M) (natural log) for factors of shape (..., M, N, N), without float64 saturation.

    kappa = sigma_max(X) sigma_max(X^-1) with X^-1 = X_M^-1 ... X_1^-1; both products are accumulated with
    rescaling, and the largest singular value of a product is computed to relative accuracy, so kappa is
    correct far beyond 1e16. Raises ValueError for a singular factor.
    """
    x = _as_factors(factors)
    x = torch.ldexp(x, -torch.frexp(x.abs().amax((-2, -1), keepdim=True))[1])  # kappa is scale free: exact powers of 2
    m = x.shape[-3]
    try:
        inverses = torch.linalg.inv_ex(x, check_errors=True)[0]
    except torch.linalg.LinAlgError:
        raise ValueError("a factor is singular: the condition number of the product is infinite") from None
    if not torch.isfinite(inverses).all():
        raise ValueError("a factor is singular to float64: its inverse overflows (that factor's own condition number "
                         "is beyond 1e308)")
    forward = _log_top_singular_value([x[..., i, :, :] for i in range(m)])
    backward = _log_top_singular_value([inverses[..., i, :, :] for i in range(m - 1, -1, -1)])
    return forward + backward


def qr_log_stretches(factors) -> torch.Tensor:
    """log abs(r_jj) of X_i Q_(i-1) = Q_i R_i for X = X_1 ... X_M applied from the right, shape (..., M, N).

    Their sum over factors is the log of the diagonal of R_M ... R_1, so max_j - min_j of the sums is a lower
    bound on log kappa (ratios of a triangular matrix's absolute diagonal entries bound its condition number from
    below).
    """
    x = _as_factors(factors)
    frame = torch.eye(x.shape[-1], dtype=x.dtype, device=x.device).expand_as(x[..., 0, :, :])
    stretches = []
    for i in range(x.shape[-3] - 1, -1, -1):
        frame, logs = qr_step(frame, x[..., i, :, :])
        stretches.append(logs)
    result = torch.stack(stretches[::-1], dim=-2)
    if not torch.isfinite(result).all():
        raise ValueError("factors give a stretch log abs(r_jj) that is not finite in their float type: a factor is "
                         "singular, or its entries are too large")
    return result


@cache
def derive_one_layer_gd() -> Derivation:
    """Proposition 1 and GD on it: the gradient and Hessian in A_1, the stable step and the optimal rate."""
    d = Derivation("Proposition 1: gradient descent on one layer of a linear network")
    abar, a1 = sp.Matrix(2, 2, sp.symbols("b_11:13 b_21:23")), sp.Matrix(2, 2, sp.symbols("a_11:13 a_21:23"))
    x, y = sp.Matrix(2, 3, sp.symbols("x_11:14 x_21:24")), sp.Matrix(2, 3, sp.symbols("y_11:14 y_21:24"))
    residual = abar * a1 * x - y
    loss = sum(e**2 for e in residual)
    gradient = sp.Matrix(2, 2, lambda i, jj: sp.diff(loss, a1[i, jj]))
    if sp.expand(gradient - 2 * abar.T * residual * x.T) != sp.zeros(2, 2):
        raise RuntimeError("the gradient in A_1 is not 2 Abar^T (Abar A_1 x - y) x^T")
    d.step("For L = ||Abar A_1 x - y||_F^2 (2 x 2 and 2 x 3 symbolic matrices), every entry of grad L minus "
           "2 Abar^T (Abar A_1 x - y) x^T expands to", sp.Eq(sp.Symbol("difference"), 0, evaluate=False))
    vec = [a1[i, jj] for jj in range(2) for i in range(2)]  # column-major vec(A_1)
    hessian = sp.hessian(loss, vec)
    kron = 2 * sp.kronecker_product(x * x.T, abar.T * abar)
    if sp.expand(hessian - kron) != sp.zeros(4, 4):
        raise RuntimeError("the Hessian in vec(A_1) is not 2 (x x^T kron Abar^T Abar)")
    d.step("and its Hessian in vec(A_1) minus 2 (x x^T kron Abar^T Abar) to", sp.Eq(sp.Symbol("difference"), 0,
                                                                                     evaluate=False))
    lam_min, lam_max, e = sp.symbols("lambda_min lambda_max e", positive=True)
    d.step("The Hessian's eigenvalues are 2 sigma_i(Abar)^2 sigma_j(x)^2, so its condition number is",
           sp.Eq(sp.Symbol("lambda_max/lambda_min"), kappa**2), name="hessian_condition")
    d.step("GD multiplies the error along an eigenvector by", sp.Eq(sp.Symbol("e_(t+1)/e_t"), 1 - eta * lam_max))
    d.step("which is stable iff eta < 2/lambda_max = 1/(sigma_max(Abar)^2 sigma_max(x)^2):",
           sp.Eq(sp.Symbol("eta_max"), 2 / lam_max), name="max_lr")
    eta_opt = sp.solve(sp.Eq(1 - eta * lam_min, -(1 - eta * lam_max)), eta)[0]
    d.step("The best constant step balances the two extreme eigenvalues:", sp.Eq(sp.Symbol("eta^*"), eta_opt),
           name="optimal_lr")
    rate = sp.simplify((1 - eta_opt * lam_min).subs(lam_max, kappa**2 * lam_min))
    d.step("and contracts the error by (kappa = kappa(Abar) kappa(x))", sp.Eq(sp.Symbol("rate"), rate), name="rate")
    d.result = rate
    return d


def gd_rate(condition) -> np.ndarray:
    """(kappa^2 - 1)/(kappa^2 + 1): the error contraction per step of GD at the optimal constant step."""
    value = check_real_array(condition, "condition (a condition number kappa)", low=1.0)
    inverse = sp.Symbol("u", positive=True)  # u = 1/kappa keeps kappa^2 from overflowing
    rate = sp.cancel(derive_one_layer_gd()["rate"].subs(kappa, 1 / inverse))
    return sp.lambdify(inverse, rate, "numpy", cse=True)(1 / value)


def max_stable_lr(abar: np.ndarray, x: np.ndarray) -> float:
    """2 / lambda_max = 1/(sigma_max(Abar)^2 sigma_max(x)^2): the largest stable GD step on ||Abar A_1 x - y||^2."""
    abar, x = check_real_array(abar, "Abar (p, n)"), check_real_array(x, "x (n, m)")
    if abar.ndim != 2 or x.ndim != 2 or abar.shape[1] != x.shape[0]:
        raise ValueError(f"Abar (p, n) and x (n, m) must be matrices that chain, got {abar.shape} and {x.shape}")
    lam_max = 2 * np.linalg.norm(abar, 2) ** 2 * np.linalg.norm(x, 2) ** 2
    if lam_max == 0:
        raise ValueError("Abar x = 0: the loss does not depend on A_1, every step is stable")
    lam = sp.Symbol("lambda_max", positive=True)
    return float(derive_one_layer_gd()["max_lr"].subs(lam, lam_max))
