"""Conditioning of products of Gaussian matrices (Bjorck et al. 2018, section 4, Figs. 11-12, App. C).

* Lyapunov exponents: QR accumulation X_i Q_(i-1) = Q_i R_i of X = X_M ... X_1 gives independent stretches
  r_jj^2 ~ s^2 chi^2_(N-j+1) per factor, so E log r_jj = (1/2)[log(2 s^2) + psi((N-j+1)/2)] and the condition
  number grows by (1/2)[psi(N/2) - psi(1/2)] nats per factor (:func:`derive_lyapunov`).
* The condition number itself, without float64 saturation: kappa = sigma_max(X) sigma_max(X^-1), both products
  accumulated with rescaling (:func:`log_condition_number`); a plain SVD of X floors sigma_min near 1e-16
  sigma_max.
* Proposition 1 (App. C): with every matrix but A_1 fixed, a linear net is a least-squares problem; gradient
  descent on A_1 sees the Hessian 2 (x x^T kron Abar^T Abar) (:func:`derive_one_layer_gd`).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp
import torch

from ..core.derivation import Derivation
from ..core.symbols import N_width, eta, kappa
from ..core.validation import check_range, check_real_array, check_real_tensor, check_whole_number

MAX_SIZE = 10**7  # N: one exponent per direction


def _check_size(n: object) -> int:
    return check_whole_number(n, "N (the matrix size)", 2, MAX_SIZE, "one exponent per direction")


@cache
def derive_lyapunov() -> Derivation:
    """E log chi^2_nu = psi(nu/2) + log 2, hence the Lyapunov exponents and the slope of log kappa."""
    d = Derivation("Lyapunov exponents of a product of Ginibre matrices")
    a, nu, s2, j = sp.symbols("a nu s^2 j", positive=True)
    mellin = 2**a * sp.gamma(nu / 2 + a) / sp.gamma(nu / 2)
    d.step("Moments of t ~ chi^2_nu (Euler's integral int_0^oo t^(s-1) e^(-t/2) dt = 2^s Gamma(s)):",
           sp.Eq(sp.Symbol("E[t^a]"), mellin))
    log_moment = sp.expand_log(sp.diff(mellin, a).subs(a, 0), force=True)
    d.step("so E log t is its a-derivative at a = 0:", sp.Eq(sp.Symbol("E[log t]"), log_moment), name="log_chi2")
    d.step("Bartlett: the QR of an N x N Ginibre matrix (entry variance s^2) has independent r_jj^2 ~ s^2 "
           "chi^2_(N-j+1); X_i Q_(i-1) is Ginibre again, so every factor adds an independent stretch",
           sp.Eq(sp.Symbol("mu_j"), sp.expand_log(log_moment.subs(nu, N_width - j + 1) + sp.log(s2), force=True) / 2),
           name="lyapunov")
    mu = d["lyapunov"]
    d.step("log kappa grows per factor by mu_1 - mu_N:", sp.Eq(sp.Symbol("mu_1 - mu_N"),
                                                               sp.simplify(mu.subs(j, 1) - mu.subs(j, N_width))),
           name="slope")
    half = (sp.polygamma(0, N_width / 2) - sp.polygamma(0, sp.Rational(1, 2), evaluate=False)) / 2
    if sp.expand(sp.expand_func(half) - d["slope"]) != 0:
        raise RuntimeError("the slope is not (1/2)[psi(N/2) - psi(1/2)]")
    d.step("that is, with psi(1/2) = -gamma - 2 log 2,", sp.Eq(sp.Symbol("mu_1 - mu_N"), half, evaluate=False))
    d.result = d["slope"]
    return d


def lyapunov_exponents(n: int, s2: float = None) -> np.ndarray:
    """mu_j, j = 1..N, the mean log stretch per factor of direction j (entry variance s2, default 1/N)."""
    n = _check_size(n)
    s2 = 1.0 / n if s2 is None else check_range(s2, "s2", 0.0, open_low=True, why="an entry variance")
    j, s = sp.Symbol("j", positive=True), sp.Symbol("s^2", positive=True)
    kernel = sp.lambdify((N_width, j, s), derive_lyapunov()["lyapunov"], "scipy", cse=True)
    return kernel(n, np.arange(1, n + 1), s2)


def lyapunov_slope(n: int) -> float:
    """(1/2)[psi(N/2) - psi(1/2)], the growth of log kappa per factor (nats) as M -> infinity."""
    return float(derive_lyapunov()["slope"].subs(N_width, _check_size(n)).evalf(17))


def _as_factors(factors) -> torch.Tensor:
    x = check_real_tensor(factors, "factors (..., M, N, N)", min_ndim=3)
    if x.shape[-1] != x.shape[-2]:
        raise ValueError(f"factors must have shape (..., M, N, N) (M square factors), got {tuple(x.shape)}")
    return x


def _log_top_singular_value(matrices: list[torch.Tensor]) -> torch.Tensor:
    """log sigma_max of the product matrices[0] @ matrices[1] @ ..., rescaled after each product."""
    product, log_scale = matrices[0], torch.zeros(matrices[0].shape[:-2], dtype=matrices[0].dtype,
                                                  device=matrices[0].device)
    for factor in matrices[1:]:
        product = product @ factor
        norm = torch.linalg.matrix_norm(product, keepdim=True)
        product, log_scale = product / norm, log_scale + norm[..., 0, 0].log()
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
    m = x.shape[-3]
    q = torch.eye(x.shape[-1], dtype=x.dtype, device=x.device).expand_as(x[..., 0, :, :])
    stretches = []
    for i in range(m - 1, -1, -1):
        q, r = torch.linalg.qr(x[..., i, :, :] @ q)
        stretches.append(r.diagonal(0, -2, -1).abs().log())
    result = torch.stack(stretches[::-1], dim=-2)
    if not torch.isfinite(result).all():
        raise ValueError("factors give a stretch log |r_jj| that is not finite in their float type: a factor is "
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
