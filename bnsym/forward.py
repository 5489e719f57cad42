"""The BSB1 fixed point of the forward recursion Sigma^l = V_{B_phi}(Sigma^{l-1}) (Yang et al. 2019, Sec. 3).

The fixed point is Sigma* = q [(1 - c) I + c 11^T] (BSB1: one diagonal value, one off-diagonal value).

* Laplace route (positive-homogeneous phi of degree alpha, eps = 0; Thm F.8, Thm 5 for ReLU): every BSB1
  input maps in one step to K_{alpha,B} BSB1(J_phi(1), J_phi(-1/(B-1))), with
  K_{alpha,B} = c_alpha ((B-1)/2)^alpha Gamma((B-1)/2) / Gamma((B-1)/2 + alpha). For ReLU q* = 1/2,
  c* = J_1(-1/(B-1)).
* Spherical route (any phi; Thm 4 / F.5): q* = E[phi(x_1)^2], q* c* = E[phi(x_1) phi(x_2)] for two
  coordinates of a vector uniform on the sphere of radius sqrt(B) in 1^perp.
* eps > 0: the BN output of a BSB1 input with G Sigma G = mu G is kappa(r) x, x as above,
  kappa(r) = (1 + B eps / (mu r^2))^(-1/2), r ~ chi_{B-1}; the fixed point solves mu = q(mu) - q c(mu).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import roots_genlaguerre

from .activations import Activation
from .kernels import c_alpha, phi_kernel
from .laplace import bsb1_scale
from .sphere import expect_pair_with_error


@dataclass(frozen=True)
class FixedPoint:
    """Sigma* = q ((1 - c) I + c 11^T) for batch size B; ``error`` bounds the quadrature error of q and q c."""

    q: float
    c: float
    batch_size: int
    eps: float = 0.0
    method: str = "laplace"
    error: float = 0.0

    @property
    def mu(self) -> float:
        """mu* = q (1 - c), the coefficient of I: G Sigma* G = mu* G."""
        return self.q * (1 - self.c)

    @property
    def matrix(self) -> np.ndarray:
        """The B x B matrix Sigma*."""
        b = self.batch_size
        return self.q * ((1 - self.c) * np.eye(b) + self.c * np.ones((b, b)))


def bsb1_constant(phi: Activation, batch_size: np.ndarray) -> np.ndarray:
    """K_{alpha,B} = c_alpha ((B-1)/B)^alpha kappa_{alpha,B}: V_{B_phi}(BSB1) = K BSB1(J_phi(1), J_phi(rho))."""
    b = np.asarray(batch_size, dtype=float)
    return c_alpha(phi.degree) * ((b - 1) / b) ** phi.degree * bsb1_scale(phi.degree, b)


def fixed_point_laplace(phi: Activation, batch_size: int) -> FixedPoint:
    """Closed-form BSB1 fixed point for positive-homogeneous phi (Thm F.8, Cor F.9-F.11)."""
    k = float(bsb1_constant(phi, batch_size))
    q = k * float(phi_kernel(phi, 1.0))
    qc = k * float(phi_kernel(phi, -1.0 / (batch_size - 1)))
    return FixedPoint(q=q, c=qc / q, batch_size=batch_size, method="laplace")


def _pair_moments(phi: Activation, batch_size: int, scale: float, n: int) -> tuple[float, float, float]:
    """(E[phi(s x_1)^2], E[phi(s x_1) phi(s x_2)], error) on the BN sphere, output scaled by s."""
    q, e1 = expect_pair_with_error(lambda a, b: phi.numpy(a) ** 2, batch_size, phi.kinks, n, scale)
    qc, e2 = expect_pair_with_error(lambda a, b: phi.numpy(a) * phi.numpy(b), batch_size, phi.kinks, n, scale)
    return q, qc, max(e1, e2)


def bsb1_image(phi: Activation, batch_size: int, mu: float = 1.0, eps: float = 0.0, n: int = 64,
               n_radial: int = 48) -> tuple[float, float, float]:
    """(q, q c, error): V_{B_phi}(Sigma) = BSB1(q, q c) for any BSB1 Sigma with G Sigma G = mu G.

    For eps = 0 the result does not depend on mu. For eps > 0 the radius r ~ chi_{B-1} is integrated with
    generalised Gauss-Laguerre in r^2 / 2 ~ Gamma((B-1)/2).
    """
    if eps == 0:
        return _pair_moments(phi, batch_size, 1.0, n)
    shape = (batch_size - 1) / 2
    nodes, weights = roots_genlaguerre(n_radial, shape - 1)
    weights = weights / weights.sum()
    kappa = (1 + batch_size * eps / (2 * mu * nodes)) ** -0.5
    moments = np.array([_pair_moments(phi, batch_size, k, n) for k in kappa])
    q, qc = weights @ moments[:, 0], weights @ moments[:, 1]
    return float(q), float(qc), float(weights @ moments[:, 2])


def fixed_point_spherical(phi: Activation, batch_size: int, eps: float = 0.0, n: int = 64) -> FixedPoint:
    """BSB1 fixed point by spherical integration for any phi (Thm 4 / F.5); eps > 0 solves for mu*."""
    if eps == 0:
        q, qc, error = bsb1_image(phi, batch_size, n=n)
        return FixedPoint(q=q, c=qc / q, batch_size=batch_size, method="spherical", error=error)

    def excess(log_mu: float) -> float:
        q, qc, _ = bsb1_image(phi, batch_size, np.exp(log_mu), eps, n=32, n_radial=32)
        return np.log(q - qc) - log_mu

    lo, hi = -30.0, 10.0
    if not (excess(lo) > 0 > excess(hi)):
        raise ValueError(f"no BSB1 fixed point with mu > 0 for {phi} at eps = {eps}: the batch collapses (mu* = 0)")
    mu = float(np.exp(brentq(excess, lo, hi, xtol=1e-13)))
    q, qc, error = bsb1_image(phi, batch_size, mu, eps, n=n)
    return FixedPoint(q=q, c=qc / q, batch_size=batch_size, eps=eps, method="spherical", error=error)
