"""The stable public face of bnsym: each function takes an activation (name or Activation), B, eps, method.

Each quantity has one table of routes, method name -> :class:`Route`: the function, the check that says why it
does not apply, and whether it takes an array of B. ``method=None`` picks the first route of the table that
applies. Functions return floats (arrays for an array of B), dicts or a FixedPoint; with ``with_error=True``
they return the route's :class:`~bnsym.core.estimate.Estimate` (or a dict of them) instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping

import numpy as np

from .core.activations import Activation, parse_activation
from .core.estimate import Estimate
from .core.geometry import bsb1_mu
from .core.validation import check_batch_size, check_covariance, check_eps, check_variance
from .meanfield.backward import MAX_TRAINABLE_DEPTH_FACTOR, operator_eigenvalues, rate_closed_form, rate_spherical
from .meanfield.backward import depth_scale as _depth_scale
from .meanfield.epsilon import collapse_eps as _collapse_eps
from .meanfield.epsilon import fixed_point_radial, forward_eigenvalues_radial, rate_radial
from .meanfield.forward import FixedPoint, bn_kernel_spherical, fixed_point_closed_form, fixed_point_spherical
from .meanfield.forward_linear import (
    alpha_transition_value,
    depth_scales,
    homogeneous_eigenvalues,
    spherical_eigenvalues,
)
from .meanfield.gegenbauer import fixed_point_gegenbauer, forward_eigenvalues_gegenbauer, gradient_rate_gegenbauer
from .meanfield.laplace import bn_kernel_laplace
from .meanfield.qmc import bn_kernel_qmc


@dataclass(frozen=True)
class Route:
    """One method for one quantity.

    ``compute(phi, x, eps, tol)`` with x = B (Sigma for :func:`bn_kernel`) returns an Estimate, a dict of them or
    a FixedPoint; ``check(name, phi, x, eps, tol)`` raises ValueError saying why the method ``name`` does not
    apply; ``vectorised``: ``compute`` takes a numpy array of B.
    """

    compute: Callable[..., object]
    check: Callable[..., None]
    vectorised: bool = False


def _always(name: str, phi: Activation, x: object, eps: float, tol: float | None) -> None:
    """The route applies to every phi and eps."""


def _eps_zero(name: str, phi: Activation, x: object, eps: float, tol: float | None) -> None:
    if eps != 0:
        raise ValueError(f"method {name!r} needs eps = 0 (the BN output is then uniform on its sphere); "
                         "use 'radial' for eps > 0")


def _homogeneous(name: str, phi: Activation, x: object, eps: float, tol: float | None) -> None:
    if not phi.is_homogeneous:
        raise ValueError(f"method {name!r} needs a positive-homogeneous phi (relu, relu^alpha, leaky_relu, identity); "
                         f"{phi} is not")
    if eps != 0:
        raise ValueError(f"method {name!r} needs eps = 0: with eps > 0 batch norm is no longer scale invariant")


def _homogeneous_above_half(name: str, phi: Activation, x: object, eps: float, tol: float | None) -> None:
    _homogeneous(name, phi, x, eps, tol)
    if not phi.degree > 0.5:
        raise ValueError(f"method {name!r} needs degree alpha > 1/2 (J_alpha' is singular otherwise); "
                         f"{phi} has alpha = {phi.degree:g}")


def _gegenbauer(name: str, phi: Activation, x: object, eps: float, tol: float | None) -> None:
    if eps != 0:
        raise ValueError(f"method {name!r} needs eps = 0: the BN output is then uniform on its sphere, which the "
                         "basis is built on")
    if not tol > 0:
        raise ValueError(f"tol must be a positive number, got {tol!r}")


def _bsb1_input(name: str, phi: Activation, sigma: np.ndarray, eps: float, tol: float | None) -> None:
    if bsb1_mu(sigma) is None:
        raise ValueError(f"method {name!r} needs G Sigma G = mu G (a BSB1-type input); use 'qmc' or 'laplace' for "
                         "general Sigma")


FIXED_POINT_ROUTES = {
    "closed_form": Route(lambda phi, b, eps, tol: fixed_point_closed_form(phi, b), _homogeneous, vectorised=True),
    "spherical": Route(lambda phi, b, eps, tol: fixed_point_spherical(phi, b), _eps_zero),
    "gegenbauer": Route(lambda phi, b, eps, tol: fixed_point_gegenbauer(phi, b, tol), _gegenbauer),
    "radial": Route(lambda phi, b, eps, tol: fixed_point_radial(phi, b, eps), _always),
}
FIXED_POINT_ALIASES = {"laplace": "closed_form"}  # the closed form is derived by the Laplace method (Thm F.8)
BN_KERNEL_ROUTES = {
    "laplace": Route(lambda phi, sigma, eps, tol: bn_kernel_laplace(phi, sigma), _homogeneous),
    "spherical": Route(lambda phi, sigma, eps, tol: bn_kernel_spherical(phi, sigma, eps), _bsb1_input),
    "qmc": Route(lambda phi, sigma, eps, tol: bn_kernel_qmc(phi, sigma, eps), _always),
}
GRADIENT_RATE_ROUTES = {
    "closed_form": Route(lambda phi, b, eps, tol: rate_closed_form(phi, b), _homogeneous, vectorised=True),
    "spherical": Route(lambda phi, b, eps, tol: rate_spherical(phi, b), _eps_zero),
    "gegenbauer": Route(lambda phi, b, eps, tol: gradient_rate_gegenbauer(phi, b, tol), _gegenbauer),
    "radial": Route(lambda phi, b, eps, tol: rate_radial(phi, b, eps), _always),
}
FORWARD_EIGENVALUE_ROUTES = {
    "closed_form": Route(lambda phi, b, eps, tol: homogeneous_eigenvalues(phi, b), _homogeneous_above_half,
                         vectorised=True),
    "spherical": Route(lambda phi, b, eps, tol: spherical_eigenvalues(phi, b), _eps_zero),
    "gegenbauer": Route(lambda phi, b, eps, tol: forward_eigenvalues_gegenbauer(phi, b, tol), _gegenbauer),
    "radial": Route(lambda phi, b, eps, tol: forward_eigenvalues_radial(phi, b, eps), _always),
}


def _why_not(table: Mapping[str, Route], name: str, phi: Activation, x: object, eps: float,
             tol: float | None) -> str | None:
    """None if method ``name`` applies, else the reason it does not."""
    try:
        table[name].check(name, phi, x, eps, tol)
    except ValueError as error:
        return str(error)
    return None


def _choose(table: Mapping[str, Route], method: str | None, phi: Activation, x: object, eps: float,
            tol: float | None, aliases: Mapping[str, str] | None = None) -> tuple[str, Route]:
    """The route ``method`` names (ValueError if unknown or not applicable), or for None the first that applies."""
    aliases = aliases or {}
    if method is None:
        name = next(name for name in table if _why_not(table, name, phi, x, eps, tol) is None)
        return name, table[name]
    name = aliases.get(method, method)
    if name not in table:
        known = [label for key in table for label in (key, *(a for a, target in aliases.items() if target == key))]
        also = "".join(f" ({alias!r} is an alias of {target!r})" for alias, target in aliases.items())
        raise ValueError(f"unknown method {method!r}; known methods: {', '.join(known)}{also}")
    table[name].check(method, phi, x, eps, tol)
    return name, table[name]


def _compute(table: Mapping[str, Route], method: str | None, phi: Activation, batch: int | np.ndarray, eps: float,
             tol: float | None, aliases: Mapping[str, str] | None = None):
    """Choose the route, refuse an array of B where it is not vectorised (naming those that are), compute."""
    name, route = _choose(table, method, phi, batch, eps, tol, aliases)
    if np.ndim(batch) and not route.vectorised:
        takers = []
        for other, candidate in table.items():
            if candidate.vectorised:
                reason = _why_not(table, other, phi, batch, eps, tol)
                takers.append(f"{other!r}" + (f" ({reason})" if reason else ""))
        raise ValueError(f"method {name!r} takes one batch size at a time; arrays of B need method "
                         + " or ".join(takers))
    return route.compute(phi, batch, eps, tol)


def _effective_eps(eps: object, sigma_w2: object, sigma_b2: object = 0.0, array_ok: bool = False):
    """(eps, t = eps / sigma_w^2): the network depends on eps and sigma_w^2 only through t, not on sigma_b^2."""
    eps = check_eps(eps, array_ok=array_ok)
    sigma_w2 = check_variance(sigma_w2, "sigma_w2", positive=True)
    check_variance(sigma_b2, "sigma_b2", positive=False)
    with np.errstate(over="ignore"):
        t = eps / sigma_w2
    if not np.all(np.isfinite(t)):
        raise ValueError(f"eps / sigma_w2 = {eps!r} / {sigma_w2!r} overflows: only the ratio matters, give it finite")
    return eps, t


def fixed_point(phi: str | Activation, B: int | np.ndarray, eps: float = 0.0, sigma_w2: float = 1.0,
                sigma_b2: float = 0.0, method: str | None = None, tol: float = 1e-8) -> FixedPoint:
    """The attracting BSB1 fixed point Sigma* = q ((1 - c) I + c 11^T) of the layer output's covariance.

    The layer is h = W x + b, W ~ N(0, sigma_w2 / N), b ~ N(0, sigma_b2), x' = phi(BN_eps(h)). sigma_b2 never
    matters (centring removes it) and sigma_w2 enters only through eps / sigma_w2. ``method``: "closed_form"
    (alias "laplace"; positive-homogeneous phi, eps = 0; Thm F.8; ``B`` may be a numpy array, q and c are then
    arrays), "spherical" (quadrature on the BN sphere, any phi, eps = 0; Thm 4), "gegenbauer" (series in the
    Gegenbauer basis, any phi, eps = 0; Thm F.13; truncated where the error bound on q* c* is below ``tol``, else
    ValueError) or "radial" (any phi and eps: radial quadrature of tabulated angular moments, R16). Default: the
    first of these that applies. Past the collapse (eps above :func:`collapse_eps`) the attracting fixed point has
    mu* = 0: Sigma* = phi(0)^2 11^T, ``collapsed`` is True and c = 1 (this is not an error).
    """
    phi = parse_activation(phi)
    batch = check_batch_size(B, array_ok=True)
    eps, t = _effective_eps(eps, sigma_w2, sigma_b2)
    point = _compute(FIXED_POINT_ROUTES, method, phi, batch, t, tol, FIXED_POINT_ALIASES)
    return replace(point, eps=eps, sigma_w2=float(sigma_w2))


def collapse_eps(phi: str | Activation, B: int, sigma_w2: float = 1.0) -> float:
    """eps*: above it the only attracting fixed point has mu* = 0 and the centred covariance shrinks every layer.

    Closed forms (derived in :func:`bnsym.meanfield.epsilon.derive_fixed_point_equation`): sigma_w2 mu_0* (B-1)/B
    for degree-1 positive-homogeneous phi (mu_0* at eps = 0); sigma_w2 phi'(0)^2 for phi smooth at 0 whose
    H(w) is largest at w = 0 (tanh(gamma z): gamma^2 sigma_w2). inf for degree < 1 (it never collapses).
    """
    phi = parse_activation(phi)
    return _collapse_eps(phi, check_batch_size(B), check_variance(sigma_w2, "sigma_w2", positive=True))


def bn_kernel(phi: str | Activation, Sigma: np.ndarray, eps: float = 0.0, method: str | None = None,
              with_error: bool = False) -> np.ndarray | Estimate:
    """V_{B_phi}(Sigma) = E[B_phi(h) B_phi(h)^T], h ~ N(0, Sigma): the next layer's B x B covariance.

    This is the infinite-width (NNGP) kernel of one batch-normed layer, for any PSD Sigma. Methods:

    * "laplace": eq. (11) with Gauss-Jacobi quadrature, for positive-homogeneous phi and eps = 0;
      error estimate = difference between the last two quadrature rules (about 1e-12).
    * "spherical": exact spherical integral, any phi, only for inputs with G Sigma G = mu G (BSB1 type).
    * "qmc": randomised quasi-Monte Carlo over h, any phi, any Sigma, any eps; error estimate = standard
      error over independent scramblings (about 1e-5 for smooth phi).

    Default: "laplace" where it applies, else "spherical" where it applies, else "qmc".
    With ``with_error=True`` returns the Estimate (V and its elementwise error; it unpacks as ``V, error``).
    """
    phi = parse_activation(phi)
    sigma = check_covariance(Sigma)
    eps = check_eps(eps)
    _, route = _choose(BN_KERNEL_ROUTES, method, phi, sigma, eps, None)
    estimate = route.compute(phi, sigma, eps, None)
    return estimate if with_error else estimate.value


def gradient_rate(phi: str | Activation, B: int | np.ndarray, eps: float | np.ndarray = 0.0, sigma_w2: float = 1.0,
                  method: str | None = None, tol: float = 1e-8,
                  with_error: bool = False) -> float | np.ndarray | Estimate:
    """lambda_G: the factor by which squared gradient norms grow per layer towards the input (Thms 7, 8; R16).

    ``method``: "closed_form" (Thm 8, positive-homogeneous phi of degree alpha > 1/2, eps = 0; ``B`` may be a
    numpy array, the result is then an array), "spherical" (Thm 7 by exact quadrature over two batch-norm
    coordinates, any phi, eps = 0, one B), "gegenbauer" (Thm 9, any phi, eps = 0, one B: the series in the
    Gegenbauer coefficients with exact Parseval and Dirichlet tails, summed until the relative error bound is
    below ``tol``, else ValueError) or "radial" (any phi and eps, one B; ``eps`` may be a numpy array: the rate at
    the attracting fixed point of each eps, finite also past the collapse, where it tends to
    sigma_w2 phi'(0)^2 / eps for phi smooth at 0). Default: the first that applies. Below 1 gradients vanish.
    With ``with_error=True`` returns the Estimate (absolute error).
    """
    phi = parse_activation(phi)
    batch = check_batch_size(B, array_ok=True)
    eps, t = _effective_eps(eps, sigma_w2, array_ok=True)
    if np.ndim(t):
        if np.ndim(batch) or method not in (None, "radial"):
            raise ValueError("an array of eps needs one batch size and method 'radial' (the default for arrays)")
        estimate = rate_radial(phi, batch, t)
    else:
        estimate = _compute(GRADIENT_RATE_ROUTES, method, phi, batch, t, tol)
    return estimate if with_error else estimate.value


def backward_eigenvalues(phi: str | Activation, B: int, with_error: bool = False) -> dict[str, float | Estimate]:
    """Eigenvalues {"G", "L", "M"} of the backward operator at the BSB1 fixed point (eps = 0), any phi.

    "G" is :func:`gradient_rate`; "L" and "M" come from the operator's 11 ultrasymmetric entries, each an
    exact two-coordinate quadrature (see :mod:`bnsym.meanfield.backward`). One B at a time.
    With ``with_error=True`` the values are Estimates.
    """
    phi = parse_activation(phi)
    if np.ndim(B):
        raise ValueError("backward_eigenvalues takes one batch size at a time; for an array of B, "
                         "gradient_rate(method='closed_form') gives lambda_G")
    batch_size = check_batch_size(B)
    eigenvalues = {**operator_eigenvalues(phi, batch_size), "G": gradient_rate(phi, batch_size, with_error=True)}
    return eigenvalues if with_error else {key: estimate.value for key, estimate in eigenvalues.items()}


def depth_scale(phi: str | Activation, B: int | np.ndarray, eps: float | np.ndarray = 0.0, sigma_w2: float = 1.0,
                method: str | None = None, tol: float = 1e-8,
                with_error: bool = False) -> float | np.ndarray | Estimate:
    """xi = 1 / log(lambda_G): gradient norms grow by a factor e every xi layers (Sec. 4).

    At eps = 0 infinite only where lambda_G = 1, which batch norm never reaches at finite B (Thm 9:
    lambda_G > 1); with eps > 0 lambda_G can fall below 1 and xi is then negative (gradients vanish).
    ``eps``, ``method``, ``tol`` and arrays as for :func:`gradient_rate`, whose error is propagated.
    """
    estimate = _depth_scale(gradient_rate(phi, B, eps, sigma_w2, method=method, tol=tol, with_error=True))
    return estimate if with_error else estimate.value


def max_trainable_depth(phi: str | Activation, B: int | np.ndarray, eps: float | np.ndarray = 0.0,
                        sigma_w2: float = 1.0, method: str | None = None, tol: float = 1e-8,
                        with_error: bool = False) -> float | np.ndarray | Estimate:
    """The predicted deepest trainable network, 16 xi = 16 / |log lambda_G| layers (Sec. 4, Fig 3, Fig 5; R19).

    The factor 16 is ``MAX_TRAINABLE_DEPTH_FACTOR`` of :mod:`bnsym.meanfield.backward`: the paper's empirical
    finding that SGD trains networks up to about 16 depth scales deep. gamma and beta enter through the
    activation (``"tanh(gamma=0.5)"``, ``"relu(beta=2)"``), eps and sigma_w2 as arguments. |log lambda_G|: where
    eps makes gradients vanish (lambda_G < 1) they limit the depth as well. ``method``, ``tol`` and arrays of B or
    of eps as for :func:`gradient_rate`; inf where lambda_G = 1. With ``with_error=True`` returns the Estimate.
    """
    rate = gradient_rate(phi, B, eps, sigma_w2, method=method, tol=tol, with_error=True)
    value, error = np.asarray(rate.value, dtype=float), np.asarray(rate.error, dtype=float)
    vanishing = value < 1  # |log lambda| = log(1/lambda); the interval lambda +- error maps into 1/lambda +- this
    with np.errstate(divide="ignore"):
        inverse_error = np.where(value - error > 0, 1 / np.maximum(value - error, 1e-300) - 1 / value, np.inf)
    xi = _depth_scale(Estimate(np.where(vanishing, 1 / value, value), np.where(vanishing, inverse_error, error),
                               rate.method))
    depth = Estimate(MAX_TRAINABLE_DEPTH_FACTOR * xi.value, MAX_TRAINABLE_DEPTH_FACTOR * xi.error, rate.method)
    return depth if with_error else depth.value


def forward_eigenvalues(phi: str | Activation, B: int | np.ndarray, eps: float = 0.0, sigma_w2: float = 1.0,
                        method: str | None = None, tol: float = 1e-8,
                        with_error: bool = False) -> dict[str, float | np.ndarray | Estimate]:
    """Eigenvalues {"G", "L", "M"} of the forward Jacobian G dV_{B_phi}/dSigma G at the attracting BSB1 fixed point.

    A perturbation of the batch covariance along eigenspace X shrinks by lambda_X per layer (eq. (17)).
    At eps = 0, lambda_G = 0 exactly (scale invariance). ``method``: "closed_form" (Thm 6 / F.33, positive-
    homogeneous phi of degree > 1/2, eps = 0; ``B`` may be a numpy array), "spherical" (any phi, eps = 0, 2-D
    quadrature on the BN sphere, Sec. F.3.1), "gegenbauer" (any phi, eps = 0; banded quadratic forms in the
    Gegenbauer coefficients, Thms F.22/F.24, the degree doubled until the eigenvalues change by less than
    ``tol``) or "radial" (any phi and eps: the five moments averaged over the radius; lambda_G > 0 is the slope
    of the scalar map mu -> mu'; past the collapse the limit at mu* = 0). Default: the first that applies.
    With ``with_error=True`` the values are Estimates.
    """
    phi = parse_activation(phi)
    batch = check_batch_size(B, array_ok=True)
    eps, t = _effective_eps(eps, sigma_w2)
    eigenvalues = _compute(FORWARD_EIGENVALUE_ROUTES, method, phi, batch, t, tol)
    if t == 0:
        lam_l = eigenvalues["L"]  # the routes' lambda_G is a computed check of theory's exact 0
        eigenvalues = {**eigenvalues, "G": Estimate(np.zeros_like(lam_l.value), 0.0, lam_l.method)}
    return eigenvalues if with_error else {key: estimate.value for key, estimate in eigenvalues.items()}


def forward_depth_scales(eigenvalues: Mapping[str, float]) -> dict[str, float | None]:
    """xi_X = -1/log|lambda_X| for the result of :func:`forward_eigenvalues`: layers for a perturbation along X to
    shrink by a factor e; 0.0 where lambda_X = 0, None (JSON null) where |lambda_X| >= 1."""
    return depth_scales(eigenvalues)


def alpha_transition(B: int) -> float | None:
    """alpha*(B): the power where relu^alpha's BSB1 fixed point stops attracting (largest forward eigenvalue = 1).

    None where no alpha up to 40 destabilises it (B = 4: lambda_L -> 2 alpha/(3 + 2 alpha) < 1).
    """
    return alpha_transition_value(check_batch_size(B))
