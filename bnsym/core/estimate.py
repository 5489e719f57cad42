"""One result type for every numeric route: a value, its absolute error and the route that computed it.

Modelled on SciPy's ``CubatureResult``. An :class:`Estimate` unpacks as ``value, error`` so that
``value, error = bnsym.bn_kernel(phi, Sigma, with_error=True)`` reads as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np


@dataclass(frozen=True)
class Estimate:
    """``value`` (a float or an array), its absolute ``error`` >= 0 entrywise, and ``method``, the route's name.

    ``error`` has the shape of ``value`` (a scalar error is broadcast). It bounds ``|value - exact|`` for the
    quadratures and series, and is a standard error for (quasi-)Monte Carlo; 0 means the route is exact up
    to float64 rounding (a closed form). A NaN value or error is a bug of the
    route and raises ValueError; an infinite value is allowed (e.g. a depth scale at lambda = 1). ``note`` says
    why a value is not a plain number (e.g. inf because the quantity it inverts is not resolved from zero).
    """

    value: float | np.ndarray
    error: float | np.ndarray
    method: str
    note: str = ""

    def __post_init__(self) -> None:
        value = np.asarray(self.value, dtype=float)
        error = np.asarray(self.error, dtype=float)
        if error.shape != value.shape:
            if error.ndim:
                raise ValueError(f"route {self.method!r}: error of shape {error.shape} for a value of shape "
                                 f"{value.shape}")
            error = np.full(value.shape, float(error))
        if np.isnan(value).any() or np.isnan(error).any():
            raise ValueError(f"route {self.method!r} returned NaN (value {self.value!r}, error {self.error!r})")
        if (error < 0).any():
            raise ValueError(f"route {self.method!r} returned a negative error {self.error!r}")
        object.__setattr__(self, "value", float(value) if value.ndim == 0 else value)
        object.__setattr__(self, "error", float(error) if error.ndim == 0 else error)

    def __iter__(self) -> Iterator[float | np.ndarray]:
        """``value, error = estimate``."""
        return iter((self.value, self.error))


ROUNDING = 8 * np.finfo(float).eps
"""Relative rounding of a float64 route's value, added to its error wherever a value is compared with a limit."""


def within_error(estimate: Estimate, target: float) -> np.ndarray:
    """Where ``estimate`` cannot be told apart from ``target``: abs(value - target) <= error + rounding.

    A quantity that divides by value - target (a depth scale 1/log(lambda), a crossing) is not resolved there:
    its size would be rounding noise, different on every CPU and BLAS kernel.
    """
    value = np.asarray(estimate.value, dtype=float)  # an infinite value (lambda_G at B = 3) is never within
    close = np.abs(value - target) <= np.asarray(estimate.error) + ROUNDING * np.maximum(np.abs(value), abs(target))
    return close & np.isfinite(value)


def unresolved_note(quantity: str, target: float, where: np.ndarray, estimate: Estimate) -> str:
    """The ``note`` of a result reported as inf because, ``where`` true, ``quantity`` (``estimate``) is within its
    error of ``target``; "" where nothing is."""
    if not np.any(where):
        return ""
    at = "" if np.ndim(where) == 0 else f" at entries {np.flatnonzero(where).tolist()}"
    error = float(np.max(np.broadcast_to(estimate.error, np.shape(where))[where]))
    return (f"{quantity} is within its error ({error:.1e}, plus rounding) of {target:g}{at}: a quantity that "
            f"divides by its distance from {target:g} would be rounding noise there, so it is reported as inf")
