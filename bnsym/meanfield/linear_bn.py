"""Linear batch norm converges globally (Yang et al. 2019, Lemma F.1, Thm F.2, Cor F.3).

With phi = id and eps = 0 one layer maps Sigma to V(Sigma) = B E[y y^T / abs(y)^2], y = G h, h ~ N(0, Sigma).
In the eigenbasis of Sigma^G = G Sigma G (eigenvalues sigma_k on its range, rank C) Schwinger's parametrisation
(Lemma E.1, as in :mod:`bnsym.meanfield.laplace`) gives a diagonal map of the spectrum,

    V(Sigma) = B U diag(F_k) U^T,   F_k = int_0^oo sigma_k / (1 + 2 s sigma_k) prod_j (1 + 2 s sigma_j)^(-1/2) ds,

with sum_k F_k = 1. Its only fixed point on the range is Sigma* = (B/C) P (P the projector on the range of
Sigma^G; full rank C = B - 1: Sigma* = B/(B-1) G, Cor F.11), every input of rank C reaches it (Thm F.2,
Cor F.3), and a traceless perturbation of the spectrum shrinks by C/(C+2) per layer
(:func:`derive_linear_rate`; (B-1)/(B+1) at full rank, the forward eigenvalues lambda_L = lambda_M of linear phi).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp

from ..core.derivation import Derivation
from ..core.estimate import Estimate
from ..core.geometry import centring
from ..core.quadrature import gauss_jacobi
from ..core.symbols import B, delta_k, delta_sum, rank_c, s, sigma0
from ..core.symbols import t as _t

RANK_RTOL = 1e-10  # an eigenvalue of Sigma^G below this fraction of the largest is outside its range


@cache
def derive_linear_rate() -> Derivation:
    """The per-layer factor C/(C+2) of a traceless perturbation of the spectrum of Sigma^G (Lemma F.1).

    Perturb sigma_j = sigma_0 + t delta_j (sum_j delta_j = S_delta = 0) at the fixed point sigma_0 = B/C and
    differentiate F_k at t = 0: the product's derivative is proportional to S_delta and drops out.
    """
    d = Derivation("Linear batch norm: the rate of Lemma F.1")
    sigma_k = sigma0 + _t * delta_k
    own = sigma_k / (1 + 2 * s * sigma_k)
    log_product = -sp.Rational(1, 2) * (rank_c * sp.log(1 + 2 * s * sigma0)
                                        + _t * 2 * s * delta_sum / (1 + 2 * s * sigma0))
    d.step("$F_k$'s integrand along the perturbation, the product to first order in $t$:",
           sp.Eq(sp.Symbol("f_k"), own * sp.exp(log_product)))
    slope = sp.simplify(sp.diff(own * sp.exp(log_product), _t).subs(_t, 0).subs(delta_sum, 0))
    d.step("Its $t$-derivative at $t = 0$ with $\\sum_j \\delta_j = 0$:", sp.Eq(sp.Symbol("df_k/dt"), slope), "slope")
    integral = sp.simplify(sp.integrate(slope, (s, 0, sp.oo), conds="none"))
    d.step("Integrated over $s$:", sp.Eq(sp.Symbol("dF_k/dt"), integral), "dF")
    rate = sp.simplify(B * integral.subs(sigma0, B / rank_c) / delta_k)
    d.step("$V = B\\,\\mathrm{diag}(F_k)$ at $\\sigma_0 = B/C$: the factor per layer", sp.Eq(sp.Symbol("lambda"), rate),
           "rate")
    d.result = rate
    return d


def linear_rate(rank: int | np.ndarray) -> float | np.ndarray:
    """C/(C+2): the per-layer factor of the distance to Sigma* for Sigma^G of rank C >= 2 (Lemma F.1)."""
    return sp.lambdify(rank_c, derive_linear_rate().result, "numpy", cse=True)(np.asarray(rank, dtype=float))


def centred_rank(sigma: np.ndarray) -> int:
    """The rank C of Sigma^G = G Sigma G (eigenvalues above RANK_RTOL times the largest)."""
    lam = np.linalg.eigvalsh(centring(sigma.shape[0]) @ sigma @ centring(sigma.shape[0]))
    return int(np.sum(lam > RANK_RTOL * lam.max()))


def linear_limit(sigma: np.ndarray) -> np.ndarray:
    """Sigma* = (B/C) P, P the projector on the range of Sigma^G: where linear batch norm takes Sigma (Cor F.3)."""
    batch = sigma.shape[0]
    g = centring(batch)
    lam, vecs = np.linalg.eigh(g @ sigma @ g)
    keep = vecs[:, lam > RANK_RTOL * lam.max()]
    return batch / keep.shape[1] * keep @ keep.T


def spectral_map(sigma: np.ndarray, rtol: float = 1e-13, max_nodes: int = 4096) -> Estimate:
    """F_k of eq. (11) for the eigenvalues ``sigma`` (> 0, C of them) of Sigma^G on its range: the eigenvalues of
    V(Sigma) / B. With r_k = sigma_k / mean(sigma) and s = x / (2 mean(sigma) (1 - x)),

        F_k = (r_k / 2) int_0^1 (1 - x)^(C/2 - 1) (1 - x + x r_k)^(-1) prod_j (1 - x + x r_j)^(-1/2) dx,

    by Gauss-Jacobi rules for the weight (1 - x)^(C/2 - 1) (mass 2 / C), doubled until two agree to ``rtol``; that
    difference is the error."""
    ratio = np.asarray(sigma, dtype=float) / np.mean(sigma)
    rank = ratio.size

    def rule(n: int) -> np.ndarray:
        nodes, weights = gauss_jacobi(n, rank / 2 - 1, 0.0)
        x = (1 + nodes[:, None]) / 2
        denominator = 1 - x + x * ratio  # (n, C)
        product = np.exp(-0.5 * np.log(denominator).sum(axis=1))
        return ratio / rank * ((weights * product) @ (1 / denominator))

    n, previous = 16, rule(16)
    while True:
        n *= 2
        current = rule(n)
        error = np.abs(current - previous)
        if error.max() <= rtol or n >= max_nodes:
            return Estimate(current, error, "spectral")
        previous = current


def linear_trajectory(sigma: np.ndarray, depth: int) -> Estimate:
    """Sigma^0..Sigma^depth of a linear batch-norm network at infinite width, shape (depth + 1, B, B): the
    eigenvectors of Sigma^G stay, its spectrum follows B F_k (:func:`spectral_map`); the error is the sum of the
    maps' error bounds up to each layer (times B)."""
    sigma = np.asarray(sigma, dtype=float)
    batch = sigma.shape[0]
    g = centring(batch)
    lam, vecs = np.linalg.eigh(g @ sigma @ g)
    keep = lam > RANK_RTOL * lam.max()
    spectrum, vecs = lam[keep], vecs[:, keep]
    values, errors, bound = [sigma], [np.zeros_like(sigma)], 0.0
    for _ in range(depth):
        step = spectral_map(spectrum)
        spectrum = batch * step.value
        bound = bound + batch * step.error.max()
        values.append((vecs * spectrum) @ vecs.T)
        errors.append(np.full_like(sigma, bound))
    return Estimate(np.stack(values), np.stack(errors), "spectral")
