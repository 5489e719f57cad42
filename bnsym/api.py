"""The stable public face of bnsym: each function takes an activation (name or Activation), B, eps, method.

Every function with a batch size ``B`` also takes it as ``batch_size=`` (the estimators' and the command line's
spelling); giving both is a ValueError.

Each quantity has one table of routes, method name -> :class:`Route`: the function, the check that says why it
does not apply, and whether it takes an array of B (or of eps). The table is the dispatch: a name it lacks is a
ValueError "unknown method", and ``method=None`` picks the first route of the table that applies.

One answer shape: a quantity is a float for one B and an array of B's shape for an array of B (every route takes
one: those that take one B at a time are looped), and with ``with_error=True`` the route's
:class:`~bnsym.core.estimate.Estimate` instead. A quantity with parts (the eigenvalues "G", "L", "M") is a dict of
such answers; the fixed point is a :class:`~bnsym.meanfield.forward.FixedPoint` whose q* and c* follow the rule
(its ``estimates()`` gives them as Estimates). A kernel answers a torch tensor with a tensor on its device.

A function that builds on another quantity
validates its arguments once and calls that quantity's routes, not its public function.
"""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass, replace
from typing import Callable, Mapping, TypeVar

import numpy as np

from .core.activations import Activation, parse_activation
from .core.estimate import ROUNDING, Estimate
from .core.geometry import bsb1_mu
from .core.lazy import is_tensor, lazy_module
from .core.validation import (
    check_activation,
    check_batch_size,
    check_covariance,
    check_eps,
    check_joint_covariance,
    check_resolved,
    check_tol,
    check_variance,
    check_whole_number,
)
from .meanfield.backward import (
    MAX_TRAINABLE_DEPTH_FACTOR,
    operator_eigenvalues,
    operator_eigenvalues_eps,
    rate_closed_form,
    rate_spherical,
)
from .meanfield.backward import depth_scale as _depth_scale
from .meanfield.crossbatch import (
    cross_batch_kernel_laplace,
    cross_fixed_point_closed_form,
    cross_fixed_point_spherical,
    cross_rate_closed_form,
    cross_rate_spherical,
)
from .meanfield.epsilon import collapse_eps as _collapse_eps
from .meanfield.epsilon import fixed_point_radial, forward_eigenvalues_radial, rate_radial
from .meanfield.forward import FixedPoint, bn_kernel_spherical, fixed_point_closed_form, fixed_point_spherical
from .meanfield.forward_linear import (
    alpha_transition_value,
    depth_scales,
    homogeneous_eigenvalues,
    spherical_eigenvalues,
)
from .meanfield.fourier import bn_kernel_fourier, centred_spectrum
from .meanfield.gegenbauer import fixed_point_gegenbauer, forward_eigenvalues_gegenbauer, gradient_rate_gegenbauer
from .meanfield.laplace import bn_kernel_laplace
from .meanfield.qmc import bn_kernel_qmc
from .meanfield.small_batch import small_batch_fixed_point, small_batch_rate, small_batch_size

torch = lazy_module("torch")
_products = lazy_module("bnsym.products")  # Bjorck et al.'s products import torch and scipy.stats

DEFAULT_TOL = 1e-8  # the error target of the series routes where a function takes no ``tol``
MAX_FIXED_NODES = 1024  # a fixed Gauss-Jacobi rule of cross_batch_kernel: nodes^2 points per entry


_F = TypeVar("_F", bound=Callable[..., object])


def _batch_size_alias(function: _F) -> _F:
    """Let ``function`` take its batch size ``B`` also as ``batch_size=`` (the spelling of the estimators and the
    command line; None, its default, is not giving it): ValueError if both are given, TypeError (as Python's own) if
    neither is."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if "batch_size" in kwargs:
            batch_size = kwargs.pop("batch_size")
            if "B" not in signature.bind_partial(*args, **kwargs).arguments:
                kwargs["B"] = batch_size  # checked as B is (None: "must be a whole number")
            elif batch_size is not None:
                raise ValueError("give the batch size once, as B or as batch_size, not both")
        return function(*args, **kwargs)

    alias = inspect.Parameter("batch_size", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="int | None")
    wrapper.__signature__ = signature.replace(parameters=[*signature.parameters.values(), alias])
    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class Route:
    """One method for one quantity.

    ``compute(phi, x, eps, tol, **options)`` with x = B (the validated Sigma for :func:`bn_kernel` and
    :func:`cross_batch_kernel`, whose further arguments are the ``options``) returns an Estimate, a dict of them
    or a FixedPoint; ``check(name, phi, x, eps, tol)`` raises ValueError saying why the method ``name`` does not
    apply; ``vectorised``: ``compute`` takes a numpy array of B; ``eps_arrays``: it takes a numpy array of eps.
    """

    compute: Callable[..., object]
    check: Callable[..., None]
    vectorised: bool = False
    eps_arrays: bool = False


def _always(name: str, phi: Activation, x: object, eps: float, tol: float | None) -> None:
    """The route applies to every phi and eps."""


def _eps_zero(name: str, phi: Activation, x: object, eps: float | np.ndarray, tol: float | None) -> None:
    if np.any(eps != 0):
        raise ValueError(f"method {name!r} needs eps = 0 (the BN output is then uniform on its sphere); "
                         "use 'radial' for eps > 0")


def _eps_zero_slope_bounded(name: str, phi: Activation, x: object, eps: float | np.ndarray, tol: float | None
                            ) -> None:
    """eps = 0, and phi' bounded at phi's kinks: where phi ~ |z - k|^p, p < 1, the quadrature of phi'^2 converges
    algebraically and its n-versus-2n estimate does not bound its error (relu^0.75 at B = 8: 6.65e-3 off, 6.62e-3)."""
    _eps_zero(name, phi, x, eps, tol)
    if phi.kinks and phi.kink_power < 1:
        raise ValueError(f"method {name!r} integrates phi'^2, which is unbounded at the kink of {phi} (phi ~ "
                         f"|z - kink|^{phi.kink_power:.3g}), so its error estimate would not bound its error")


def _homogeneous(name: str, phi: Activation, x: object, eps: float | np.ndarray, tol: float | None) -> None:
    if not phi.is_homogeneous:
        raise ValueError(f"method {name!r} needs a positive-homogeneous phi (relu, relu^alpha, leaky_relu, identity); "
                         f"{phi} is not")
    if np.any(eps != 0):
        raise ValueError(f"method {name!r} needs eps = 0: with eps > 0 batch norm is no longer scale invariant")


def _homogeneous_above_half(name: str, phi: Activation, x: object, eps: float, tol: float | None) -> None:
    _homogeneous(name, phi, x, eps, tol)
    if not phi.degree > 0.5:
        raise ValueError(f"method {name!r} needs degree alpha > 1/2 (J_alpha' is singular otherwise); "
                         f"{phi} has alpha = {phi.degree:g}")


def _gegenbauer(name: str, phi: Activation, x: object, eps: float | np.ndarray, tol: float | None) -> None:
    if np.any(eps != 0):
        raise ValueError(f"method {name!r} needs eps = 0: the BN output is then uniform on its sphere, which the "
                         "basis is built on")


def _bsb1_input(name: str, phi: Activation, sigma: np.ndarray, eps: float, tol: float | None) -> None:
    if bsb1_mu(sigma) is None:
        raise ValueError(f"method {name!r} needs G Sigma G = mu G (a BSB1-type input); use 'qmc' or 'laplace' for "
                         "general Sigma")


def _fourier_input(name: str, phi: Activation, sigma: np.ndarray, eps: float, tol: float | None) -> None:
    if eps != 0:
        raise ValueError(f"method {name!r} needs eps = 0 (the BN output is then sqrt(B) y / abs(y)); use 'qmc'")
    centred_spectrum(sigma)


def _one_joint_covariance(name: str, phi: Activation, sigma: np.ndarray, eps: float, tol: float | None) -> None:
    if sigma.ndim != 2:
        raise ValueError(f"method {name!r} takes one joint covariance at a time, got a stack of shape {sigma.shape}")


def _cross_batch_kernel_laplace(phi: Activation, sigma: np.ndarray, eps: float, tol: float | None, *,
                                original: np.ndarray | torch.Tensor, batch1: int, nodes: int | None, blocks: str,
                                with_error: bool) -> np.ndarray | torch.Tensor | Estimate:
    """The Laplace route on Sigma as given (a torch tensor stays one, on its device)."""
    return cross_batch_kernel_laplace(phi, original, batch1, nodes, with_error, blocks)


def _cross_batch_kernel_qmc(phi: Activation, sigma: np.ndarray, eps: float, tol: float | None, *,
                            original: np.ndarray | torch.Tensor, batch1: int, nodes: int | None, blocks: str,
                            with_error: bool) -> np.ndarray | Estimate:
    """The joint covariance (or its cross block) by randomised QMC, one matrix at a time (numpy)."""
    estimate = bn_kernel_qmc(phi, sigma, eps, sizes=(batch1, sigma.shape[-1] - batch1))
    if blocks == "cross":
        estimate = Estimate(estimate.value[:batch1, batch1:], estimate.error[:batch1, batch1:], "qmc")
    return estimate if with_error else estimate.value


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
    "fourier": Route(lambda phi, sigma, eps, tol: bn_kernel_fourier(phi, sigma), _fourier_input),
}
CROSS_FIXED_POINT_ROUTES = {
    "closed_form": Route(lambda phi, b, eps, tol: cross_fixed_point_closed_form(phi, b), _homogeneous,
                         vectorised=True),
    "spherical": Route(lambda phi, b, eps, tol: cross_fixed_point_spherical(phi, b), _always),
}
CROSS_RATE_ROUTES = {
    "closed_form": Route(lambda phi, b, eps, tol: cross_rate_closed_form(phi, b), _homogeneous, vectorised=True),
    "spherical": Route(lambda phi, b, eps, tol: cross_rate_spherical(phi, b), _always),
}
CROSS_BATCH_KERNEL_ROUTES = {
    "laplace": Route(_cross_batch_kernel_laplace, _homogeneous),
    "qmc": Route(_cross_batch_kernel_qmc, _one_joint_covariance),
}
GRADIENT_RATE_ROUTES = {
    "closed_form": Route(lambda phi, b, eps, tol: rate_closed_form(phi, b), _homogeneous, vectorised=True),
    "spherical": Route(lambda phi, b, eps, tol: rate_spherical(phi, b), _eps_zero_slope_bounded),
    "gegenbauer": Route(lambda phi, b, eps, tol: gradient_rate_gegenbauer(phi, b, tol), _gegenbauer),
    "radial": Route(lambda phi, b, eps, tol: rate_radial(phi, b, eps), _always, eps_arrays=True),
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
        reasons = []
        for name in table:
            reason = _why_not(table, name, phi, x, eps, tol)
            if reason is None:
                return name, table[name]
            reasons.append(reason)
        raise ValueError("no method applies: " + "; ".join(reasons))
    name = aliases.get(method, method)
    if name not in table:
        known = [label for key in table for label in (key, *(a for a, target in aliases.items() if target == key))]
        also = "".join(f" ({alias!r} is an alias of {target!r})" for alias, target in aliases.items())
        raise ValueError(f"unknown method {method!r}; known methods: {', '.join(known)}{also}")
    table[name].check(method, phi, x, eps, tol)
    return name, table[name]


def _values_and_errors(result: object) -> tuple[np.ndarray, np.ndarray]:
    """All values and errors of a route's result (an Estimate, a dict of them, or a FixedPoint's q* and q* c*)."""
    if isinstance(result, FixedPoint):
        return np.array([result.q, result.q * result.c]).ravel(), np.array([result.error]).ravel()
    parts = list(result.values()) if isinstance(result, dict) else [result]
    return (np.concatenate([np.ravel(part.value) for part in parts]),
            np.concatenate([np.ravel(part.error) for part in parts]))


def _stacked(results: list, shape: tuple[int, ...]):
    """One answer for an array of B from the answers at each B: Estimates, dicts of them, or FixedPoints (whose
    ``error``, one bound for q* and q* c*, becomes the largest), with arrays of ``shape``."""
    first = results[0]
    if isinstance(first, dict):
        return {key: _stacked([result[key] for result in results], shape) for key in first}
    if isinstance(first, Estimate):
        notes = sorted({result.note for result in results if result.note})
        return Estimate(np.reshape([r.value for r in results], shape), np.reshape([r.error for r in results], shape),
                        first.method, "; ".join(notes))
    if len({result.collapsed for result in results}) > 1:
        raise ValueError("these batch sizes lie on both sides of the collapse eps (collapse_eps), where the fixed "
                         "point changes kind; ask for them apart")
    return replace(first, q=np.reshape([r.q for r in results], shape), c=np.reshape([r.c for r in results], shape),
                   batch_size=np.reshape([r.batch_size for r in results], shape),
                   error=max(r.error for r in results))


def _resolved(name: str, route: Route, phi: Activation, x: object, eps: float, tol: float | None):
    """The route's result, if finite and resolved (:func:`~bnsym.core.validation.check_resolved`)."""
    result = route.compute(phi, x, eps, tol)
    where = f"at B = {x}" if np.ndim(x) < 2 else f"for this Sigma (B = {np.shape(x)[0]})"
    check_resolved(*_values_and_errors(result), f"method {name!r} for activation {phi} {where}")
    return result


def _compute(table: Mapping[str, Route], method: str | None, phi: Activation, batch: int | np.ndarray,
             eps: float | np.ndarray, tol: float | None, aliases: Mapping[str, str] | None = None,
             batched: bool | None = None):
    """Choose the route, refuse an array of B or of eps where it is not vectorised (naming those that are), compute.

    A named method must resolve phi; by default the first applicable route that resolves it answers, and where
    none does, the first one's reason is raised. ``batched``: ``batch`` is an array of B (default: it has axes).
    An array of eps takes the routes marked ``eps_arrays`` (the default picks among them) and one B.
    """
    batched = bool(np.ndim(batch)) if batched is None else batched
    if np.ndim(eps):
        takers = {name: route for name, route in table.items() if route.eps_arrays}
        if batched:
            raise ValueError("an array of eps needs one batch size: no method takes arrays of B and of eps together")
        name = (aliases or {}).get(method, method)
        if name in table and name not in takers:
            raise ValueError(f"method {method!r} takes one eps at a time; arrays of eps need method "
                             + " or ".join(map(repr, takers)))
        table = table if method is not None else takers
    if method is not None or batched:
        name, route = _choose(table, method, phi, batch, eps, tol, aliases)
        if batched and not route.vectorised:  # looped, one B at a time, into the vectorised routes' answer shape
            return _stacked([_resolved(name, route, phi, int(b), eps, tol) for b in np.ravel(batch)], np.shape(batch))
        return _resolved(name, route, phi, batch, eps, tol)
    failures = []
    for name, route in table.items():
        if _why_not(table, name, phi, batch, eps, tol) is None:
            try:
                return _resolved(name, route, phi, batch, eps, tol)
            except ValueError as error:
                failures.append(error)
    raise failures[0]


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


@_batch_size_alias
def fixed_point(phi: str | Activation, B: int | np.ndarray, eps: float = 0.0, sigma_w2: float = 1.0,
                sigma_b2: float = 0.0, method: str | None = None, tol: float = DEFAULT_TOL,
                with_error: bool = False) -> FixedPoint | dict[str, Estimate]:
    """The attracting BSB1 fixed point Sigma* = q ((1 - c) I + c 11^T) of the layer output's covariance.

    The layer is h = W x + b, W ~ N(0, sigma_w2 / N), b ~ N(0, sigma_b2), x' = phi(BN_eps(h)). sigma_b2 never
    matters (centring removes it) and sigma_w2 enters only through eps / sigma_w2. ``method``: "closed_form"
    (alias "laplace"; positive-homogeneous phi, eps = 0; Thm F.8; ``B`` may be a numpy array, q and c are then
    arrays), "spherical" (quadrature on the BN sphere, any phi, eps = 0; Thm 4), "gegenbauer" (series in the
    Gegenbauer basis, any phi, eps = 0; Thm F.13; truncated where the error bound on q* c* is below ``tol``, else
    ValueError) or "radial" (any phi and eps: radial quadrature of tabulated angular moments, R16). Default: the
    first of these that applies. Past the collapse (eps above :func:`collapse_eps`) the attracting fixed point has
    mu* = 0: Sigma* = phi(0)^2 11^T, ``collapsed`` is True and c = 1 (this is not an error).
    The :class:`FixedPoint` carries the route's ``error`` (a bound on q* and q* c*); with ``with_error=True`` the
    result is instead {"q", "c", "mu"} as Estimates, that error propagated (:meth:`FixedPoint.estimates`).
    At eps = 0 and one B of 2 or 3 (App. J) the fixed point over the BN outputs' two points or circle
    (``method`` ignored).
    """
    small = small_batch_size(B)
    if small is not None:  # App. J: B = 2 and 3 at eps = 0
        phi = check_activation(parse_activation(phi), None)  # the sphere checks need B >= 4
        eps, t = _effective_eps(eps, sigma_w2, sigma_b2)
        if t != 0:
            raise ValueError(f"at B = {small} with eps > 0 the fixed point is not derived here: the radial route "
                             "needs B >= 4")
        point = small_batch_fixed_point(phi, small)
        return point.estimates() if with_error else point
    batch = check_batch_size(B, array_ok=True)
    phi = check_activation(parse_activation(phi), batch)
    tol = check_tol(tol)
    eps, t = _effective_eps(eps, sigma_w2, sigma_b2)
    point = _compute(FIXED_POINT_ROUTES, method, phi, batch, t, tol, FIXED_POINT_ALIASES)
    point = replace(point, eps=eps, sigma_w2=float(sigma_w2))
    return point.estimates() if with_error else point


@_batch_size_alias
def collapse_eps(phi: str | Activation, B: int, sigma_w2: float = 1.0) -> float:
    """eps*: above it the only attracting fixed point has mu* = 0 and the centred covariance shrinks every layer.

    Closed forms (derived in ``bnsym.meanfield.epsilon.derive_fixed_point_equation``): sigma_w2 mu_0* (B-1)/B
    for degree-1 positive-homogeneous phi (mu_0* at eps = 0); sigma_w2 phi'(0)^2 for phi smooth at 0 whose
    H(w) is largest at w = 0 (tanh(gamma z): gamma^2 sigma_w2). inf for degree < 1 (it never collapses).
    """
    batch = check_batch_size(B)
    phi = check_activation(parse_activation(phi), batch)
    return _collapse_eps(phi, batch, check_variance(sigma_w2, "sigma_w2", positive=True))


def bn_kernel(phi: str | Activation, Sigma: np.ndarray | torch.Tensor, eps: float = 0.0, method: str | None = None,
              with_error: bool = False) -> np.ndarray | torch.Tensor | Estimate:
    """V_{B_phi}(Sigma) = E[B_phi(h) B_phi(h)^T], h ~ N(0, Sigma): the next layer's B x B covariance.

    This is the infinite-width (NNGP) kernel of one batch-normed layer, for any PSD Sigma. Methods:

    * "laplace": eq. (11) with Gauss-Jacobi quadrature, for positive-homogeneous phi and eps = 0;
      error estimate = difference between the last two quadrature rules (about 1e-12).
    * "spherical": exact spherical integral, any phi, only for inputs with G Sigma G = mu G (BSB1 type).
    * "qmc": randomised quasi-Monte Carlo over h, any phi, any Sigma, any eps; error estimate = standard
      error over independent scramblings (about 1e-5 for smooth phi).
    * "fourier": the Fourier method (Thm 3, eq. (12)), any phi, eps = 0, G Sigma G of full rank B - 1 and
      condition number at most 1e3 on 1^perp; deterministic quadrature of the pair densities, error estimate =
      difference from a rule with half the nodes (about 1e-5 at B = 4, 1e-7 at B = 8).

    Default: "laplace" where it applies, else "spherical" where it applies, else "qmc" ("fourier" only by name).
    With ``with_error=True`` returns the Estimate (V and its elementwise error; it unpacks as ``V, error``). A torch
    tensor Sigma gives V as a tensor of its dtype and device (computed in float64 numpy; an Estimate holds numpy
    arrays, as cross_batch_kernel's does).
    """
    sigma = check_covariance(Sigma)
    phi = check_activation(parse_activation(phi), sigma.shape[0])
    eps = check_eps(eps)
    # batch norm sees (Sigma, eps) only through Sigma / eps: dividing both by a power of 2 near max |Sigma| is exact
    # and keeps the routes' intermediate numbers away from overflow and underflow
    scale = math.ldexp(1.0, math.frexp(np.abs(sigma).max())[1] - 1)
    estimate = _compute(BN_KERNEL_ROUTES, method, phi, sigma / scale, eps / scale, None, batched=False)
    if with_error:
        return estimate
    if is_tensor(Sigma):  # a tensor in, a tensor out, on its device, as cross_batch_kernel does
        return torch.as_tensor(estimate.value, dtype=Sigma.dtype, device=Sigma.device)
    return estimate.value


@_batch_size_alias
def gradient_rate(phi: str | Activation, B: int | np.ndarray, eps: float | np.ndarray = 0.0, sigma_w2: float = 1.0,
                  method: str | None = None, tol: float = DEFAULT_TOL,
                  with_error: bool = False) -> float | np.ndarray | Estimate:
    """lambda_G: the factor by which squared gradient norms grow per layer towards the input (Thms 7, 8; R16).

    ``method``: "closed_form" (Thm 8, positive-homogeneous phi of degree alpha > 1/2, eps = 0; ``B`` may be a
    numpy array, the result is then an array), "spherical" (Thm 7 by exact quadrature over two batch-norm
    coordinates, any phi, eps = 0, one B), "gegenbauer" (Thm 9, any phi, eps = 0, one B: the series in the
    Gegenbauer coefficients with exact Parseval and Dirichlet tails, summed until the relative error bound is
    below ``tol``, else ValueError) or "radial" (any phi and eps, one B; ``eps`` may be a numpy array: the rate at
    the attracting fixed point of each eps, finite also past the collapse, where it tends to
    sigma_w2 phi'(0)^2 / eps for phi smooth at 0). Default: the first that applies. Below 1 gradients vanish.
    At eps = 0 and one B below 4 (App. J): 0.0 at B = 2 (batch norm's Jacobian vanishes), inf at B = 3
    (E[1/r^2] diverges); ``method`` is then ignored. With ``with_error=True`` returns the Estimate (absolute error).
    """
    small = small_batch_size(B)
    if small is not None:  # App. J: B = 2 and 3 at eps = 0
        phi = check_activation(parse_activation(phi), None, slope=True)  # the sphere checks need B >= 4
        eps, t = _effective_eps(eps, sigma_w2, array_ok=True)
        if np.any(t != 0):
            raise ValueError(f"at B = {small} with eps > 0 the rate is finite but not derived here: the radial "
                             "route averages over chi^2 with B - 3 degrees of freedom and needs B >= 4")
        estimate = small_batch_rate(phi, small)
        return estimate if with_error else estimate.value
    batch = check_batch_size(B, array_ok=True)
    phi = check_activation(parse_activation(phi), batch, slope=True)
    tol = check_tol(tol)
    eps, t = _effective_eps(eps, sigma_w2, array_ok=True)
    estimate = _compute(GRADIENT_RATE_ROUTES, method, phi, batch, t, tol)
    _check_thm9_bound(estimate, phi, batch, t)
    return estimate if with_error else estimate.value


def _check_thm9_bound(estimate: Estimate, phi: Activation, batch: int | np.ndarray, t: float | np.ndarray) -> None:
    """Thm 9: at eps = 0, lambda_G >= (B-2)/(B-3) for every non-constant phi (equality iff phi is linear); a
    result below it (beyond its error and rounding) means the quadratures did not see phi: refuse it."""
    bound = (np.asarray(batch, dtype=float) - 2) / (np.asarray(batch, dtype=float) - 3)
    below = (np.asarray(t) == 0) & (np.asarray(estimate.value) + np.asarray(estimate.error)
                                    < bound * (1 - ROUNDING))
    if np.any(below):
        raise ValueError(f"the gradient rate of activation {phi} came out {np.min(estimate.value):.6g}, below Thm 9's "
                         f"bound (B-2)/(B-3) = {np.min(bound):.6g}: phi varies on a scale the quadratures do not "
                         "resolve (e.g. tanh(1e300 z)), so no rate is given")


@_batch_size_alias
def backward_eigenvalues(phi: str | Activation, B: int, eps: float = 0.0, sigma_w2: float = 1.0,
                         with_error: bool = False) -> dict[str, float | Estimate]:
    """Eigenvalues {"G", "L", "M"} of the backward operator at the attracting BSB1 fixed point, any phi.

    "G" is :func:`gradient_rate`; "L" and "M" come from the operator's 11 ultrasymmetric entries, each an
    exact two-coordinate quadrature (see :mod:`bnsym.meanfield.backward`); at eps > 0 with P = G - tau v v^T and a
    radial quadrature over tau (``operator_eigenvalues_eps``; only eps / sigma_w2 matters). Past the collapse
    (eps >= :func:`collapse_eps`) ValueError: every output is phi(0) there and L, M are not derived. An array of
    B is looped (eps = 0). With ``with_error=True`` the values are Estimates.
    """
    batch_size = check_batch_size(B, array_ok=True)
    phi = check_activation(parse_activation(phi), batch_size, slope=True)
    eps, t = _effective_eps(eps, sigma_w2)
    if np.ndim(batch_size):  # the operator's entries take one B at a time
        eigenvalues = _stacked([backward_eigenvalues(phi, int(b), eps, sigma_w2, with_error=True)
                                for b in np.ravel(batch_size)], np.shape(batch_size))
        return eigenvalues if with_error else {key: estimate.value for key, estimate in eigenvalues.items()}
    operator = operator_eigenvalues(phi, batch_size) if t == 0 else operator_eigenvalues_eps(phi, batch_size, t)
    check_resolved(*_values_and_errors(operator), f"the backward operator of activation {phi} at B = {batch_size}")
    eigenvalues = {**operator, "G": _compute(GRADIENT_RATE_ROUTES, None, phi, batch_size, t, DEFAULT_TOL)}
    _check_thm9_bound(eigenvalues["G"], phi, batch_size, t)
    return eigenvalues if with_error else {key: estimate.value for key, estimate in eigenvalues.items()}


@_batch_size_alias
def depth_scale(phi: str | Activation, B: int | np.ndarray, eps: float | np.ndarray = 0.0, sigma_w2: float = 1.0,
                method: str | None = None, tol: float = 1e-8,
                with_error: bool = False) -> float | np.ndarray | Estimate:
    """xi = 1 / log(lambda_G): gradient norms grow by a factor e every xi layers (Sec. 4).

    At eps = 0 lambda_G > 1 at every finite B (Thm 9); with eps > 0 lambda_G can fall below 1 and xi is then
    negative (gradients vanish). inf where lambda_G is within the rate's own error of 1 (e.g. tanh at its collapse
    eps = 1, where lambda_G = 1 exactly): 1/log(lambda_G) would be rounding noise there, and the Estimate's ``note``
    says so. ``eps``, ``method``, ``tol`` and arrays as for :func:`gradient_rate`, whose error is propagated.
    """
    estimate = _depth_scale(gradient_rate(phi, B, eps, sigma_w2, method=method, tol=tol, with_error=True))
    return estimate if with_error else estimate.value


@_batch_size_alias
def max_trainable_depth(phi: str | Activation, B: int | np.ndarray, eps: float | np.ndarray = 0.0,
                        sigma_w2: float = 1.0, method: str | None = None, tol: float = 1e-8,
                        with_error: bool = False) -> float | np.ndarray | Estimate:
    """The predicted deepest trainable network, 16 xi = 16 / abs(log lambda_G) layers (Sec. 4, Fig 3, Fig 5; R19).

    The factor 16 is ``MAX_TRAINABLE_DEPTH_FACTOR`` of :mod:`bnsym.meanfield.backward`: the paper's empirical
    finding that SGD trains networks up to about 16 depth scales deep. gamma and beta enter through the
    activation (``"tanh(gamma=0.5)"``, ``"relu(beta=2)"``), eps and sigma_w2 as arguments. abs(log lambda_G): where
    eps makes gradients vanish (lambda_G < 1) they limit the depth as well. ``method``, ``tol`` and arrays of B or
    of eps as for :func:`gradient_rate`; inf where lambda_G is within the rate's own error of 1, as for
    :func:`depth_scale`. With ``with_error=True`` returns the Estimate, whose ``note`` says where and why.
    """
    xi = _depth_scale(gradient_rate(phi, B, eps, sigma_w2, method=method, tol=tol, with_error=True))
    depth = Estimate(MAX_TRAINABLE_DEPTH_FACTOR * np.abs(xi.value), MAX_TRAINABLE_DEPTH_FACTOR * xi.error, xi.method,
                     xi.note)
    return depth if with_error else depth.value


@_batch_size_alias
def forward_eigenvalues(phi: str | Activation, B: int | np.ndarray, eps: float = 0.0, sigma_w2: float = 1.0,
                        method: str | None = None, tol: float = DEFAULT_TOL,
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
    batch = check_batch_size(B, array_ok=True)
    phi = check_activation(parse_activation(phi), batch)
    tol = check_tol(tol)
    eps, t = _effective_eps(eps, sigma_w2)
    eigenvalues = _compute(FORWARD_EIGENVALUE_ROUTES, method, phi, batch, t, tol)
    if t == 0:
        lam_l = eigenvalues["L"]  # the routes' lambda_G is a computed check of theory's exact 0
        eigenvalues = {**eigenvalues, "G": Estimate(np.zeros_like(lam_l.value), 0.0, lam_l.method)}
    return eigenvalues if with_error else {key: estimate.value for key, estimate in eigenvalues.items()}


def forward_depth_scales(eigenvalues: Mapping[str, float | Estimate],
                         with_error: bool = False) -> dict[str, float | Estimate]:
    """xi_X = -1/log abs(lambda_X) for the result of :func:`forward_eigenvalues`: layers for a perturbation along X
    to shrink by a factor e; 0.0 where lambda_X = 0, inf where abs(lambda_X) >= 1 or is within its error of 1
    (pass the eigenvalues ``with_error=True`` to use their errors; a float counts as exact up to rounding).
    With ``with_error=True`` the values are Estimates, whose ``note`` says where a scale is unresolved."""
    scales = depth_scales(eigenvalues)
    return scales if with_error else {key: scale.value for key, scale in scales.items()}


@_batch_size_alias
def alpha_transition(B: int) -> float | None:
    """alpha*(B): the power where relu^alpha's BSB1 fixed point stops attracting (largest forward eigenvalue = 1).

    None where no alpha up to 40 destabilises it (B = 4: lambda_L -> 2 alpha/(3 + 2 alpha) < 1).
    """
    return alpha_transition_value(check_batch_size(B))


@_batch_size_alias
def cross_batch_fixed_point(phi: str | Activation, B: int | np.ndarray, method: str | None = None,
                            with_error: bool = False) -> float | np.ndarray | Estimate:
    """c*_cross: the constant cross block c 11^T of two batches at the CBSB1 fixed point (Defn H.2, Thm H.3).

    The centrings remove any constant cross block, so the batches' outputs are independent and
    c*_cross = (E phi(x_1))^2, x_1 one coordinate of the BN output (eps = 0). ``method``: "closed_form"
    (positive-homogeneous phi; ``B`` may be an array) or "spherical" (quadrature, any phi, one B).
    """
    batch = check_batch_size(B, array_ok=True)
    phi = check_activation(parse_activation(phi), batch)
    estimate = _compute(CROSS_FIXED_POINT_ROUTES, method, phi, batch, 0.0, None)
    return estimate if with_error else estimate.value


@_batch_size_alias
def cross_batch_rate(phi: str | Activation, B: int | np.ndarray, method: str | None = None,
                     with_error: bool = False) -> float | np.ndarray | Estimate:
    """lambda_x^2: the per-layer factor of the centred cross block G Xi G near CBSB1 (Thms H.13-H.14, eps = 0).

    lambda_x^2 = B (B-2)^2 a_1^2 Gamma(B/2 - 1)^2 / (2 (B-1)^2 mu* Gamma((B-1)/2)^2), a_1 = E[x_1 phi(x_1)];
    at most Gamma(B/2)^2 / (Gamma((B-1)/2) Gamma((B+1)/2)) < 1, with equality for linear phi. ``method``:
    "closed_form" (positive-homogeneous phi; ``B`` may be an array) or "spherical" (any phi, one B).
    """
    batch = check_batch_size(B, array_ok=True)
    phi = check_activation(parse_activation(phi), batch)
    estimate = _compute(CROSS_RATE_ROUTES, method, phi, batch, 0.0, None)
    return estimate if with_error else estimate.value


def cross_batch_kernel(phi: str | Activation, Sigma: np.ndarray | torch.Tensor, B1: int, eps: float = 0.0,
                       method: str | None = None, nodes: int | None = None, blocks: str = "all",
                       with_error: bool = False) -> np.ndarray | torch.Tensor | Estimate:
    """The joint covariance of two batches after one batch-normed layer (Yang et al. 2019, eq. 54, Defn H.1).

    Batches of sizes B1 and B2 = n - B1 share the weights; batch norm normalises each on its own. ``Sigma`` is
    the joint pre-activation covariance, (n, n) or a stack (..., n, n), a numpy array or a torch tensor; the
    result has the same shape and kind: [[V_{B_phi}(Sigma_11), C], [C^T, V_{B_phi}(Sigma_22)]] with the cross
    block C = E[B_phi(h1) B_phi(h2)^T] ((..., B1, B2) alone with ``blocks="cross"``). Iterate it for depth.

    * "laplace": the two-dimensional Laplace integral (Lemma H.5) with a tensor Gauss-Jacobi rule, for
      positive-homogeneous phi and eps = 0; stacks and torch tensors (CUDA included) are computed in batched
      float64 ops. ``nodes`` per axis: None doubles them until the relative change is below 1e-9 (that change
      is the error); a fixed number (6 is about 1e-10 at B = 32) is faster, its error the change from nodes // 2.
    * "qmc": randomised quasi-Monte Carlo, any phi, any eps, one matrix at a time (numpy); error = standard
      error over scramblings.

    Default: "laplace" where it applies, else "qmc". ValueError for a non-PSD Sigma, B1 or B2 below 4, a
    stack for "qmc", unknown ``blocks``.
    """
    matrix, batch1 = check_joint_covariance(Sigma, B1)
    phi = check_activation(parse_activation(phi), [batch1, matrix.shape[-1] - batch1])
    eps = check_eps(eps)
    if blocks not in ("all", "cross"):
        raise ValueError(f"blocks must be 'all' (the joint covariance) or 'cross' (the B1 x B2 block), got {blocks!r}")
    if nodes is not None:
        nodes = check_whole_number(nodes, "nodes (Gauss-Jacobi nodes per axis)", 2, MAX_FIXED_NODES,
                                   "the tensor rule has nodes^2 points per entry of the cross block")
    name, route = _choose(CROSS_BATCH_KERNEL_ROUTES, method, phi, matrix, eps, None)
    if matrix.size == 0:  # an empty stack (0, ..., n, n): an empty answer of the result's shape
        return _empty_cross_batch_kernel(Sigma, matrix.shape, batch1, blocks, name, with_error)
    result = route.compute(phi, matrix, eps, None, original=Sigma, batch1=batch1, nodes=nodes, blocks=blocks,
                           with_error=with_error)
    return result.to(Sigma.dtype) if is_tensor(result) else result  # computed in float64


def _empty_cross_batch_kernel(sigma: np.ndarray | torch.Tensor, shape: tuple[int, ...], batch1: int, blocks: str,
                              method: str, with_error: bool) -> np.ndarray | torch.Tensor | Estimate:
    """:func:`cross_batch_kernel`'s answer to an empty stack: empty, of Sigma's kind (or an Estimate)."""
    if blocks == "cross":
        shape = (*shape[:-2], batch1, shape[-1] - batch1)
    if with_error:
        return Estimate(np.zeros(shape), np.zeros(shape), method)
    if is_tensor(sigma):
        return torch.zeros(shape, dtype=sigma.dtype, device=sigma.device)
    return np.zeros(shape)


# Bjorck et al. (2018): products of Gaussian matrices (Theorem 1) and gradient descent on them (Prop. 1)


def fuss_catalan_density(x: float | np.ndarray, M: int) -> float | np.ndarray:
    """Theorem 1's density rho(x) of a squared singular value of a product of M N x N Gaussian matrices with
    entries of variance 1/N, as N -> infinity (Bjorck et al. 2018, eqs. 9-10; x is an eigenvalue of X X^T).

    0 outside (0, (M+1)^(M+1)/M^M], inf at x = 0; a float for a number, an array of x's shape for an array (an
    empty array for an empty one).
    ValueError for a non-finite x or M not a whole number in [1, 10^4]. Computed by
    :func:`bnsym.products.fuss_catalan_density`.
    """
    values = _products.fuss_catalan_density(x, M)
    return float(values) if np.ndim(values) == 0 else values


def fuss_catalan_moment(k: int, M: int) -> int:
    """E[x^k] = binomial((M+1)k, k)/(Mk+1) of Theorem 1's density, exactly (the Fuss-Catalan numbers; M = 1 gives
    the Catalan numbers). ValueError for k or M not a whole number (k in [0, 10^4], M in [1, 10^4])."""
    return _products.fuss_catalan_moment(k, M)


def fuss_catalan_edges(M: int) -> dict[str, float]:
    """The edges of Theorem 1's density for M factors: ``soft`` = (M+1)^(M+1)/M^M, the largest squared singular
    value (about e (M+1) for large M, so the largest singular value grows like sqrt(M)), and the hard edge
    rho(x) ~ ``hard_coefficient`` x^``hard_exponent`` as x -> 0, with coefficient sin(pi/(M+1))/pi and exponent
    -M/(M+1). ValueError for M not a whole number in [1, 10^4]."""
    coefficient, exponent = _products.hard_edge(M)
    return {"soft": _products.soft_edge(M), "hard_coefficient": coefficient, "hard_exponent": exponent}


def log_condition_number(factors: np.ndarray | torch.Tensor) -> float | np.ndarray | torch.Tensor:
    """log kappa (natural log) of the product X_1 X_2 ... X_M of square factors, shape (..., M, N, N), without
    float64 saturation: kappa = sigma_max(X) sigma_max(X^-1), both products accumulated with rescaling
    (:func:`bnsym.products.log_condition_number`), so it is right far beyond 1e16.

    A torch tensor gives a tensor of shape (...) on its device; a numpy array or a list gives a float for one
    product and an array for a stack. ValueError for a non-finite entry, fewer than three axes, non-square
    factors or a singular factor (kappa is infinite).
    """
    result = _products.log_condition_number(factors)
    if is_tensor(factors):
        return result
    values = result.cpu().numpy()
    return float(values) if values.ndim == 0 else values


def max_stable_lr(Abar: np.ndarray, x: np.ndarray) -> float:
    """The largest stable gradient-descent step on ||Abar A_1 x - y||^2 over A_1 (Proposition 1): 2/lambda_max of
    the Hessian 2 (x x^T kron Abar^T Abar), i.e. 1/(sigma_max(Abar)^2 sigma_max(x)^2). ``Abar`` is (p, n), ``x``
    (n, m). ValueError for non-finite entries, matrices that do not chain, or Abar x = 0 (the loss does not
    depend on A_1)."""
    return _products.max_stable_lr(Abar, x)
