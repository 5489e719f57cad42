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

from ..core.activations import identity
from ..core.derivation import Derivation
from ..core.estimate import Estimate
from ..core.geometry import centring
from ..core.symbols import B, delta_k, delta_sum, rank_c, s, sigma0
from ..core.symbols import t as _t
from .laplace import bn_kernel_laplace

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


def linear_trajectory(sigma: np.ndarray, depth: int) -> Estimate:
    """Sigma^0..Sigma^depth of a linear batch-norm network at infinite width: V iterated by the Laplace route
    (eq. (11)), shape (depth + 1, B, B), with the sum of the routes' error bounds up to each layer."""
    phi = identity()
    values, errors, bound = [np.asarray(sigma, dtype=float)], [np.zeros_like(sigma, dtype=float)], 0.0
    for _ in range(depth):
        step = bn_kernel_laplace(phi, values[-1])
        bound = bound + step.error
        values.append(step.value)
        errors.append(bound)
    return Estimate(np.stack(values), np.stack(errors), "laplace")
