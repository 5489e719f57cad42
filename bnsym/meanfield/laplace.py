"""The Laplace method (Yang et al. 2019, Thm 2 / Thm 3.2, Lemmas E.1-E.2) for positive-homogeneous phi.

Batch norm with eps = 0 is B_phi(h) = phi(sqrt(B) y / |y|), y = G h, G = I - 11^T / B. If phi is
positive-homogeneous of degree alpha, B_phi(h) = B^(alpha/2) |y|^(-alpha) phi(y), and Schwinger's
parametrisation |y|^(-2 alpha) = Gamma(alpha)^-1 int_0^oo s^(alpha-1) exp(-s |y|^2) ds turns the
normalisation into a Gaussian integral:

    V_{B_phi}(Sigma) = B^alpha / Gamma(alpha) int_0^oo s^(alpha-1) det(I + 2 s Sigma^G)^(-1/2)
                       V_phi(Sigma^G (I + 2 s Sigma^G)^(-1)) ds,            Sigma^G = G Sigma G.   (eq. 11)
"""

from __future__ import annotations

from functools import cache

import numpy as np
from scipy.special import gammaln

from ..core.activations import Activation
from ..core.derivation import Derivation
from ..core.estimate import Estimate
from ..core.geometry import centring
from ..core.lazy import lazy_module
from ..core.quadrature import gauss_jacobi
from .kernels import pair_kernel

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use


@cache
def _euler_beta_ab() -> sp.Equality:
    from ..core.symbols import u

    a_, b_ = sp.symbols("a b", positive=True)
    integrand = u ** (a_ - 1) * (1 + u) ** (-a_ - b_)
    return sp.Eq(sp.Integral(integrand, (u, 0, sp.oo)), sp.integrate(integrand, (u, 0, sp.oo), conds="none"))


def euler_beta(a: sp.Expr, b: sp.Expr) -> sp.Equality:
    """Euler's Beta integral int_0^oo u^(a-1) (1 + u)^(-a-b) du = Gamma(a) Gamma(b) / Gamma(a + b), by SymPy."""
    a_, b_ = sp.symbols("a b", positive=True)
    return _euler_beta_ab().subs({a_: a, b_: b})


def derive_bsb1_scale() -> Derivation:
    """K_{alpha,B}: the Laplace integral at a BSB1 input, where Sigma^G = mu G (Thm F.8).

    Sigma^G (I + 2s Sigma^G)^(-1) = mu/(1 + 2 s mu) G and det(I + 2 s Sigma^G) = (1 + 2 s mu)^(B-1), so
    V_{B_phi}(Sigma) = B^alpha/Gamma(alpha) V_phi(G) int s^(alpha-1) (mu/(1+2 s mu))^alpha (1+2 s mu)^(-(B-1)/2) ds
    (V_phi is alpha-homogeneous). The result is independent of mu: every BSB1 input maps to the same matrix.
    """
    from ..core.symbols import B, alpha, mu, s, u

    d = Derivation("The Laplace integral at a BSB1 input")
    integrand = (B**alpha / sp.gamma(alpha) * s ** (alpha - 1) * (mu / (1 + 2 * s * mu)) ** alpha
                 * (1 + 2 * s * mu) ** (-(B - 1) / 2))
    d.step("Scalar factor multiplying $V_\\phi(G)$ in eq. (11) when $\\Sigma^G = \\mu G$:",
           sp.Eq(sp.Symbol("I"), sp.Integral(integrand, (s, 0, sp.oo))))
    substituted = sp.powsimp(sp.expand_power_base(integrand.subs(s, u / (2 * mu)) / (2 * mu), force=True), force=True)
    d.step("Substitute $s = u / (2\\mu)$: $\\mu$ drops out.",
           sp.Eq(sp.Symbol("I"), sp.Integral(substituted, (u, 0, sp.oo))))
    d.step("Euler's Beta integral:", euler_beta(*sp.symbols("a b", positive=True)))
    prefactor = sp.simplify(substituted / (u ** (alpha - 1) * (1 + u) ** (-alpha - (B - 1) / 2)))
    if prefactor.has(u):
        raise RuntimeError(f"the substituted integrand is not of Beta form: prefactor {prefactor}")
    scale = sp.gammasimp(prefactor * euler_beta(alpha, (B - 1) / 2).rhs)
    d.result = scale
    d.step("With $a = \\alpha$, $b = (B-1)/2$:", sp.Eq(sp.Symbol("I"), scale))
    return d



def bn_kernel_laplace(phi: Activation, sigma: np.ndarray, rtol: float = 1e-11, max_nodes: int = 4096) -> Estimate:
    """V_{B_phi}(Sigma) by eq. (11) with Gauss-Jacobi quadrature, with an entrywise error estimate.

    With Sigma^G = U diag(lam) U^T (r nonzero eigenvalues) and a reference scale m = mean(lam), the
    change of variables s = x / (2 m (1 - x)) maps eq. (11) to

        (B/(2m))^alpha / Gamma(alpha) int_0^1 x^(alpha-1) (1-x)^(r/2-1) F(x) dx,
        F(x) = prod_k (1 - x + x lam_k/m)^(-1/2) V_phi(U diag(lam_k / (1 - x + x lam_k/m)) U^T),

    with F smooth on [0, 1] (constant for BSB1 inputs). Gauss-Jacobi with weight x^(alpha-1)(1-x)^(r/2-1)
    integrates the endpoint singularities exactly; nodes double until two rules agree to ``rtol``
    (relative to max |V|), and that difference is the error estimate.
    """
    batch = sigma.shape[0]
    alpha_value = phi.degree
    g = centring(batch)
    projected = g @ sigma @ g
    lam, vecs = np.linalg.eigh(projected / np.abs(projected).max())  # V_{B_phi} is scale invariant (eps = 0)
    keep = lam > 1e-12 * max(lam.max(), 0.0)
    lam, vecs = lam[keep], vecs[:, keep]
    rank = lam.size
    m = lam.mean()
    ratio = lam / m
    rows, cols = np.triu_indices(batch)  # V is symmetric: the upper triangle, diagonal included
    products = vecs[rows] * vecs[cols]  # (P, r): Sigma_ij at a node is products @ (lam / denom)

    def rule(n: int) -> np.ndarray:
        t, w = gauss_jacobi(n, rank / 2 - 1, alpha_value - 1)  # weight (1-t)^(r/2-1) (1+t)^(alpha-1), normalised
        x = (1 + t) / 2
        denom = (1 - x)[:, None] + x[:, None] * ratio[None, :]  # (n, r)
        det_factor = np.exp(-0.5 * np.log(denom).sum(axis=1))
        entries = (lam / denom) @ products.T  # (n, P): the covariance U diag(lam / denom) U^T, upper triangle
        diagonal = entries[:, rows == cols]  # (n, B)
        return w @ (det_factor[:, None] * pair_kernel(phi, diagonal[:, rows], diagonal[:, cols], entries))

    # prefactor times Beta(alpha, r/2) = int_0^1 x^(alpha-1) (1-x)^(r/2-1) dx, the mass of the normalised rule
    log_pref = alpha_value * np.log(batch / (2 * m)) + gammaln(rank / 2) - gammaln(alpha_value + rank / 2)
    n = 16
    previous = rule(n)
    while True:
        n *= 2
        current = rule(n)
        error = np.abs(current - previous)
        if error.max() <= rtol * np.abs(current).max() or n >= max_nodes:
            break
        previous = current
    if error.max() > rtol * np.abs(current).max() * 1e3:
        raise ValueError(f"Laplace quadrature did not converge (error {error.max():.2e} with {n} nodes): "
                         "Sigma^G is too ill-conditioned; use method='qmc'")
    prefactor = np.exp(log_pref)
    value, bound = np.empty((batch, batch)), np.empty((batch, batch))
    for full, upper in ((value, prefactor * current), (bound, prefactor * error)):
        full[rows, cols] = upper
        full[cols, rows] = upper
    return Estimate(value, bound, "laplace")
