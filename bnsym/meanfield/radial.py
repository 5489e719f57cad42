"""The radial-angular factorisation of batch norm with epsilon (Yang et al. 2019, R16; Sec. E.3).

For a BSB1 input with G Sigma G = mu G the centred pre-activation is y = G h = sqrt(mu) r v, with r ~ chi_{B-1}
independent of v uniform on the unit sphere of 1^perp. Batch norm with epsilon,
n_eps(y) = sqrt(B) y / sqrt(|y|^2 + B eps), therefore outputs kappa x with x = sqrt(B) v on the BN sphere and

    kappa^2 = tau = mu r^2 / (mu r^2 + B eps) in [0, 1],

a function of the radius alone. Every expectation is then a one-dimensional radial quadrature (:func:`chi2_rule`)
of angular moments at the scale kappa, and those do not depend on eps. :func:`angular_moments` tabulates the nine
moments of two BN coordinates that the fixed point, the forward eigenvalues and the gradient rate need, as
functions of tau, once per (phi, B): exactly for positive-homogeneous phi (a power of tau times the moment at
tau = 1), else as a Chebyshev interpolant in tau on [0, 1] through exact pair quadratures (:mod:`.sphere`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.polynomial import chebyshev

from ..core.activations import Activation
from ..core.quadrature import chi2_rule
from .sphere import expect_pair_with_error

# phi_a = phi(kappa x_a), phi'_a = phi'(kappa x_a); x_a unscaled coordinates of the BN sphere
MOMENTS = ("s0", "s2", "p00", "p20", "p11",  # E[phi_1^2], E[phi_1^2 x_1^2], E[phi_1 phi_2], E[phi_1 phi_2 x_1^2],
           "m11", "m12", "n11", "n12",  # E[phi_1 phi_2 x_1 x_2]; E[phi'_1^2], E[phi'_1 phi'_2], E[x_1^2 phi'_1^2], ...
           "m_tau")  # m / tau, m = s0 - p00 the centred scale: finite at tau = 0, where m itself is 0
FORWARD = slice(0, 5)  # the moments of :class:`~bnsym.meanfield.forward_linear.ForwardMoments`
N_TABLE = 40  # Chebyshev nodes in tau; the tail of the coefficients is the interpolation error estimate


def _integrands(phi: Activation, kappa: float):
    """The nine moments' integrands of the scaled pair (a, b) = (kappa x_1, kappa x_2), stacked."""
    f, df = phi.numpy, phi.numpy_derivative

    def stack(a, b):
        x1, x2 = a / kappa, b / kappa
        fa, fb, da, db = f(a), f(b), df(a), df(b)
        return np.stack([fa * fa, fa * fa * x1 * x1, fa * fb, fa * fb * x1 * x1, fa * fb * x1 * x2,
                         da * da, da * db, da * da * x1 * x1, da * db * x1 * x2, (fa * fa - fa * fb) / kappa**2])
    return stack


def _pair_moments(phi: Activation, batch_size: int, kappa: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    return expect_pair_with_error(_integrands(phi, kappa), batch_size, phi.kinks, n, kappa)


@dataclass(frozen=True)
class AngularMoments:
    """The ten :data:`MOMENTS` as functions of tau = kappa^2 for one (phi, B); call it with an array of tau.

    ``degree`` set: exact, moments = tau^alpha (phi moments), tau^(alpha - 1) (phi' moments, m / tau) times
    ``at_one``. Else ``coefficients`` (N_TABLE, 10) of the Chebyshev interpolant in 2 tau - 1. ``error`` (10,)
    bounds the absolute error of each moment: quadrature error at the nodes plus the last two Chebyshev
    coefficients.
    """

    at_one: np.ndarray
    error: np.ndarray
    degree: float | None = None
    coefficients: np.ndarray | None = None

    def __call__(self, tau: np.ndarray, rows: slice | list[int] = slice(None)) -> np.ndarray:
        """Moments ``rows`` (default all) at tau, shape (rows, *tau.shape)."""
        tau = np.asarray(tau, dtype=float)
        if self.degree is not None:
            return self._homogeneous(self.at_one, tau, rows)
        return chebyshev.chebval(2 * tau - 1, self.coefficients[:, rows])

    def error_at(self, tau: np.ndarray, rows: slice | list[int] = slice(None)) -> np.ndarray:
        """The bound on the absolute error of moments ``rows`` at tau, shape (rows, *tau.shape): ``error`` for a
        table; for a homogeneous phi ``error`` scales with tau like the moments (the moments at tau are those at
        tau = 1 times a power of tau, exactly), so the relative error stays that at tau = 1 as tau -> 0."""
        tau = np.asarray(tau, dtype=float)
        if self.degree is not None:
            return self._homogeneous(self.error, tau, rows)
        error = self.error[rows]
        return np.broadcast_to(error.reshape(error.shape + (1,) * tau.ndim), error.shape + tau.shape)

    def _homogeneous(self, at_one: np.ndarray, tau: np.ndarray, rows: slice | list[int]) -> np.ndarray:
        powers = np.array([self.degree] * 5 + [self.degree - 1] * 5)[rows]
        powers = powers.reshape(powers.shape + (1,) * tau.ndim)
        with np.errstate(divide="ignore", invalid="ignore"):
            scaled = np.where(powers == 0, 1.0, tau**powers)  # 0^0 = 1 (relu' does not see the scale)
        return at_one[rows].reshape(powers.shape) * scaled


_TABLES: dict[tuple[Activation, int], AngularMoments] = {}


def angular_moments(phi: Activation, batch_size: int, n: int = 32) -> AngularMoments:
    """The table of :class:`AngularMoments` for (phi, B), built once (0.1-0.3 s) and cached.

    Each node is an exact pair quadrature with n and 2n nodes per piece (:func:`expect_pair_with_error`): the
    value is the 2n one, the error the n-vs-2n difference (an overestimate: the 2n rule is far more accurate).
    """
    key = (phi, batch_size)  # an activation is hashed by identity (parse_activation gives one object per string)
    if key not in _TABLES:
        if phi.is_homogeneous:
            at_one, error = _pair_moments(phi, batch_size, 1.0, n)
            _TABLES[key] = AngularMoments(at_one, error, degree=phi.degree)
        else:
            nodes = np.cos(np.pi * (np.arange(N_TABLE) + 0.5) / N_TABLE)  # first kind: tau = 0 is never a node
            values, errors = zip(*(_pair_moments(phi, batch_size, float(np.sqrt((x + 1) / 2)), n) for x in nodes))
            coefficients = chebyshev.chebfit(nodes, np.array(values), N_TABLE - 1)
            error = np.max(errors, axis=0) + np.abs(coefficients[-2:]).sum(axis=0)
            _TABLES[key] = AngularMoments(chebyshev.chebval(1.0, coefficients), error, coefficients=coefficients)
    return _TABLES[key]


def shrink(mu: np.ndarray, scaled_eps: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """tau = mu s / (mu s + B eps) at radial nodes s (last axis), ``scaled_eps`` = B eps; tau = 1 where B eps = 0."""
    mu_s = np.asarray(mu, dtype=float)[..., None] * nodes
    bt = np.asarray(scaled_eps, dtype=float)[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(bt == 0, 1.0, np.where(mu_s == 0, 0.0, mu_s / (mu_s + bt)))


def radial_image(phi: Activation, batch_size: int, mu: float, eps: float,
                 n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(E[phi_1^2], E[phi_1 phi_2]) of the BN output for a BSB1 input with G Sigma G = mu G, and their errors.

    E over s = r^2 ~ chi^2_{B-1} of the table at tau(s); error: n vs n/2 radial nodes plus the table's error.
    """
    table = angular_moments(phi, batch_size)
    rows = [MOMENTS.index("s0"), MOMENTS.index("p00")]
    values = []
    for nodes, weights in (chi2_rule(batch_size - 1, n), chi2_rule(batch_size - 1, n // 2)):
        values.append(table(shrink(np.array(mu), np.array(batch_size * eps), nodes), rows) @ weights)
    return values[0], np.abs(values[0] - values[1]) + table.error[rows]
