"""The stable public face of bnsym: each function takes an activation (name or Activation), B, eps, method."""

from __future__ import annotations

import numpy as np

from .core.activations import Activation, parse_activation
from .core.geometry import bsb1_matrix, bsb1_mu
from .meanfield.backward import depth_scale as _depth_scale
from .meanfield.backward import operator_eigenvalues, rate_closed_form, rate_spherical
from .meanfield.forward import FixedPoint, bsb1_image, fixed_point_laplace, fixed_point_spherical
from .meanfield.forward_linear import alpha_transition_value, homogeneous_eigenvalues, spherical_eigenvalues
from .meanfield.gegenbauer import fixed_point_gegenbauer, forward_eigenvalues_gegenbauer, gradient_rate_gegenbauer
from .meanfield.laplace import bn_kernel_laplace
from .meanfield.qmc import bn_kernel_qmc
from .core.validation import MIN_BATCH_SIZE, WHY_MIN_BATCH, check_batch_size, check_covariance, check_eps

FIXED_POINT_METHODS = ("laplace", "spherical", "gegenbauer")
BN_KERNEL_METHODS = ("laplace", "spherical", "qmc")


def _check_method(method: str | None, known: tuple[str, ...]) -> None:
    if method is not None and method not in known:
        raise ValueError(f"unknown method {method!r}; known methods: {', '.join(known)}")


def _check_laplace(phi: Activation, eps: float) -> None:
    if not phi.is_homogeneous:
        raise ValueError(f"method 'laplace' needs a positive-homogeneous phi (relu, relu^alpha, leaky_relu, identity); {phi} is not")
    if eps != 0:
        raise ValueError("method 'laplace' needs eps = 0: with eps > 0 batch norm is no longer scale invariant")


def _check_gegenbauer(eps: float, tol: float) -> None:
    if eps != 0:
        raise ValueError("method 'gegenbauer' needs eps = 0: the BN output is then uniform on its sphere, which the basis is built on")
    if not tol > 0:
        raise ValueError(f"tol must be a positive number, got {tol!r}")


def fixed_point(phi: str | Activation, B: int, eps: float = 0.0, method: str | None = None,
                tol: float = 1e-8) -> FixedPoint:
    """The BSB1 fixed point Sigma* = q ((1 - c) I + c 11^T) of Sigma -> V_{B_phi}(Sigma).

    ``method``: "laplace" (closed form, positive-homogeneous phi, eps = 0; Thm F.8), "spherical"
    (quadrature on the BN sphere, any phi; Thm 4) or "gegenbauer" (series in the Gegenbauer basis, any phi,
    eps = 0; Thm F.13; truncated where the error bound on q* c* is below ``tol``, else ValueError).
    Default: "laplace" where it applies, else "spherical".
    """
    phi = parse_activation(phi)
    batch_size = check_batch_size(B)
    eps = check_eps(eps)
    _check_method(method, FIXED_POINT_METHODS)
    if method is None:
        method = "laplace" if phi.is_homogeneous and eps == 0 else "spherical"
    if method == "laplace":
        _check_laplace(phi, eps)
        return fixed_point_laplace(phi, batch_size)
    if method == "gegenbauer":
        _check_gegenbauer(eps, tol)
        return fixed_point_gegenbauer(phi, batch_size, tol)
    return fixed_point_spherical(phi, batch_size, eps)



def bn_kernel(phi: str | Activation, Sigma: np.ndarray, eps: float = 0.0, method: str | None = None,
              with_error: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """V_{B_phi}(Sigma) = E[B_phi(h) B_phi(h)^T], h ~ N(0, Sigma): the next layer's B x B covariance.

    This is the infinite-width (NNGP) kernel of one batch-normed layer, for any PSD Sigma. Methods:

    * "laplace": eq. (11) with Gauss-Jacobi quadrature, for positive-homogeneous phi and eps = 0;
      error estimate = difference between the last two quadrature rules (about 1e-12).
    * "spherical": exact spherical integral, any phi, only for inputs with G Sigma G = mu G (BSB1 type).
    * "qmc": randomised quasi-Monte Carlo over h, any phi, any Sigma, any eps; error estimate = standard
      error over independent scramblings (about 1e-5 for smooth phi).

    Default: "laplace" where it applies, else "spherical" where it applies, else "qmc".
    With ``with_error=True`` returns (V, elementwise error estimate).
    """
    phi = parse_activation(phi)
    sigma = check_covariance(Sigma)
    eps = check_eps(eps)
    _check_method(method, BN_KERNEL_METHODS)
    mu = bsb1_mu(sigma)
    if method is None:
        method = "laplace" if phi.is_homogeneous and eps == 0 else "spherical" if mu is not None else "qmc"
    if method == "laplace":
        _check_laplace(phi, eps)
        value, error = bn_kernel_laplace(phi, sigma)
    elif method == "spherical":
        if mu is None:
            raise ValueError("method 'spherical' needs G Sigma G = mu G (a BSB1-type input); use 'qmc' or 'laplace' for general Sigma")
        q, qc, err = bsb1_image(phi, sigma.shape[0], mu, eps)
        batch = sigma.shape[0]
        value = bsb1_matrix(batch, q, qc / q)
        error = np.full((batch, batch), err)
    else:
        value, error = bn_kernel_qmc(phi, sigma, eps)
    return (value, error) if with_error else value


GRADIENT_RATE_METHODS = ("closed_form", "spherical", "gegenbauer")


def _check_batch_sizes(batch_sizes: object) -> np.ndarray:
    """An array of batch sizes: whole numbers >= 4 (vectorised :func:`check_batch_size`)."""
    try:
        batch = np.asarray(batch_sizes, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"batch sizes must be whole numbers, got {batch_sizes!r}") from None
    if np.asarray(batch_sizes).dtype == bool or not np.all(np.isfinite(batch)) or np.any(batch != np.round(batch)):
        raise ValueError("batch sizes must be whole numbers")
    if np.any(batch < MIN_BATCH_SIZE):
        raise ValueError(f"batch size {batch.min():g} is below {MIN_BATCH_SIZE}: {WHY_MIN_BATCH}")
    return batch


def gradient_rate(phi: str | Activation, B: int | np.ndarray, eps: float = 0.0, method: str | None = None,
                  tol: float = 1e-8) -> float | np.ndarray:
    """lambda_G: the factor by which squared gradient norms grow per layer towards the input (Thms 7, 8).

    ``method``: "closed_form" (Thm 8, positive-homogeneous phi of degree alpha > 1/2; ``B`` may be a numpy
    array, the result is then an array) or "spherical" (Thm 7 by exact quadrature over two batch-norm
    coordinates, any phi, one B) or "gegenbauer" (Thm 9, any phi, one B: the series in the Gegenbauer
    coefficients with exact Parseval and Dirichlet tails, summed until the relative error bound is below
    ``tol``, else ValueError). Default: "closed_form" where it applies. Only eps = 0 is supported so far.
    """
    phi = parse_activation(phi)
    eps = check_eps(eps)
    _check_method(method, GRADIENT_RATE_METHODS)
    if eps != 0:
        raise ValueError("gradient_rate supports eps = 0 only so far: with eps > 0 batch norm is not scale invariant and "
                         "the rate depends on the fixed point's scale (not implemented yet)")
    if method is None:
        method = "closed_form" if phi.is_homogeneous else "spherical"
    if method == "closed_form":
        batch = _check_batch_sizes(B)
        value = rate_closed_form(phi, batch)
        return value if np.ndim(B) else float(value)
    if np.ndim(B):
        raise ValueError(f"method {method!r} takes one batch size at a time; arrays of B need method 'closed_form' "
                         "(positive-homogeneous phi)")
    if method == "gegenbauer":
        _check_gegenbauer(eps, tol)
        return gradient_rate_gegenbauer(phi, check_batch_size(B), tol)[0]
    return rate_spherical(phi, check_batch_size(B))[0]


def backward_eigenvalues(phi: str | Activation, B: int) -> dict[str, float]:
    """Eigenvalues {"G", "L", "M"} of the backward operator at the BSB1 fixed point (eps = 0), any phi.

    "G" is :func:`gradient_rate`; "L" and "M" come from the operator's 11 ultrasymmetric entries, each an
    exact two-coordinate quadrature (see :mod:`bnsym.meanfield.backward`).
    """
    phi = parse_activation(phi)
    batch_size = check_batch_size(B)
    values, _ = operator_eigenvalues(phi, batch_size)
    return {"G": gradient_rate(phi, batch_size), "L": values["L"], "M": values["M"]}


def depth_scale(phi: str | Activation, B: int | np.ndarray) -> float | np.ndarray:
    """xi = 1 / log(lambda_G): gradient norms grow by a factor e every xi layers (Sec. 4).

    Infinite only where lambda_G = 1, which batch norm never reaches at finite B (Thm 9: lambda_G > 1).
    """
    value = _depth_scale(gradient_rate(phi, B))
    return value if np.ndim(B) else float(value)


FORWARD_EIGENVALUE_METHODS = ("closed_form", "spherical", "gegenbauer")


def forward_eigenvalues(phi: str | Activation, B: int, eps: float = 0.0, method: str | None = None,
                        tol: float = 1e-8) -> dict[str, float]:
    """Eigenvalues {"G", "L", "M"} of the forward Jacobian G dV_{B_phi}/dSigma G at the BSB1 fixed point.

    A perturbation of the batch covariance along eigenspace X shrinks by lambda_X per layer (eq. (17)).
    lambda_G = 0 exactly (scale invariance, eps = 0). ``method``: "closed_form" (Thm 6 / F.33, positive-
    homogeneous phi of degree > 1/2), "spherical" (any phi, 2-D quadrature on the BN sphere, Sec. F.3.1) or
    "gegenbauer" (any phi; banded quadratic forms in the Gegenbauer coefficients, Thms F.22/F.24, the degree
    doubled until the eigenvalues change by less than ``tol``). Default: closed form where it applies.
    """
    phi = parse_activation(phi)
    batch_size = check_batch_size(B)
    eps = check_eps(eps)
    _check_method(method, FORWARD_EIGENVALUE_METHODS)
    if eps != 0:
        raise ValueError("forward eigenvalues are derived for eps = 0 only: with eps > 0 batch norm is not scale invariant "
                         "and lambda_G is no longer 0 (not covered yet)")
    if method == "gegenbauer":
        _check_gegenbauer(eps, tol)
        lam, _ = forward_eigenvalues_gegenbauer(phi, batch_size, tol)
        return {"G": 0.0, "L": lam["L"], "M": lam["M"]}
    if method is None:
        method = "closed_form" if phi.is_homogeneous and phi.degree > 0.5 else "spherical"
    if method == "closed_form":
        lam_l, lam_m = homogeneous_eigenvalues(phi, batch_size)
        return {"G": 0.0, "L": float(lam_l), "M": float(lam_m)}
    lam, _ = spherical_eigenvalues(phi, batch_size)
    return {"G": 0.0, "L": lam["L"], "M": lam["M"]}


def alpha_transition(B: int) -> float | None:
    """alpha*(B): the power where relu^alpha's BSB1 fixed point stops attracting (largest forward eigenvalue = 1).

    None where no alpha up to 40 destabilises it (B = 4: lambda_L -> 2 alpha/(3 + 2 alpha) < 1).
    """
    return alpha_transition_value(check_batch_size(B))
