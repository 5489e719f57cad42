"""Gauss rules: Jacobi with normalised weights, stable for large exponents (large batch sizes), and Legendre."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.linalg import eigh_tridiagonal
from scipy.special import roots_legendre


@lru_cache(maxsize=512)
def gauss_jacobi(n: int, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights (summing to 1) of the n-point rule for the weight (1-x)^a (1+x)^b on [-1, 1].

    Golub-Welsch on the recurrence of the monic Jacobi polynomials, so the total mass
    2^(a+b+1) Beta(a+1, b+1) (which overflows for a > 1000, i.e. B > 2000) never appears.
    Rules are cached (read-only arrays): kernels ask for the same few again and again.
    """
    k = np.arange(n, dtype=float)
    s = 2 * k + a + b
    with np.errstate(invalid="ignore", divide="ignore"):
        diag = np.where(s * (s + 2) == 0, (b - a) / (a + b + 2), (b * b - a * a) / (s * (s + 2)))
        k1, s1 = k[1:], s[1:]
        beta = 4 * k1 * (k1 + a) * (k1 + b) * (k1 + a + b) / (s1**2 * (s1 + 1) * (s1 - 1))
    if n > 1:
        beta[0] = 4 * (1 + a) * (1 + b) / ((2 + a + b) ** 2 * (3 + a + b))  # k = 1, (1 + a + b) cancelled
    nodes, vectors = eigh_tridiagonal(diag, np.sqrt(beta))
    weights = vectors[0] ** 2
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


@lru_cache(maxsize=64)
def gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the n-point Gauss-Legendre rule on [-1, 1] (SciPy's), cached as read-only arrays."""
    nodes, weights = roots_legendre(n)
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


def chi2_rule(dof: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes s and weights (summing to 1) of the n-point Gauss rule for s ~ chi^2 with ``dof`` degrees of freedom.

    s = 2 x with x ~ Gamma(dof/2): generalised Gauss-Laguerre for the weight x^a e^(-x), a = dof/2 - 1, by
    Golub-Welsch on the monic recurrence (diagonal 2k + a + 1, off-diagonal sqrt(k (k + a))), so that the mass
    Gamma(a + 1), which overflows for dof > 340 (SciPy's ``roots_genlaguerre``), never appears.
    """
    a = dof / 2 - 1
    k = np.arange(n, dtype=float)
    nodes, vectors = eigh_tridiagonal(2 * k + a + 1, np.sqrt(k[1:] * (k[1:] + a)))
    return 2 * nodes, vectors[0] ** 2
