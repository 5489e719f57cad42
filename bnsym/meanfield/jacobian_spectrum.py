"""The spectrum of one batch-normed layer's Jacobian (Yang et al. 2019, the corollary of Sec. 3.1.2; App. J).

Ioffe and Szegedy conjectured that batch norm keeps a layer's Jacobian singular values near 1. For the linear
network (phi = id, eps = 0) at its fixed point Sigma* = B/(B-1) G the spectrum has a closed form. Neuron a's block
of J = K (W (x) I_B) is K_a = (sqrt(B)/r_a) G (I - v_a v_a^T) G, r_a^2 = mu* chi^2_(B-1), mu* = B/(B-1): B - 2 equal
squared singular values B/r_a^2 = (B-1)/chi^2_(B-1) and one 0 (the direction v_a) on the B - 1 centred directions.

* Orthogonal W: J J^T = K K^T exactly, so over the N (B-1) centred output directions the squared singular values
  are 0 with probability 1/(B-1) and (B-1)/u, u ~ chi^2_(B-1), otherwise (:func:`derive_linear_spectrum`). A plain
  linear layer with orthogonal W has every singular value 1.
* The mean is (B-2)/(B-3) = lambda_G of the linear network, infinite at B = 3, where the law still exists.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp
from scipy.special import gammaincc

from ..core.derivation import Derivation
from ..core.symbols import B, u
from ..core.symbols import x_sq as x_sym  # a squared singular value
from .backward import cancel_gammas

REGULARISED_UPPER_GAMMA = sp.Function("Q")  # Q(a, z) = Gamma(a, z) / Gamma(a) (scipy.special.gammaincc)


@cache
def derive_linear_spectrum() -> Derivation:
    """The law of the squared singular values of one linear batch-norm layer at Sigma* (orthogonal W): the atom
    at 0, the CDF of the rest, and the first two moments (results "atom", "cdf", "mean", "second"). At B = 3 the
    mean is infinite (App. J)."""
    d = Derivation("The spectrum of a linear batch-norm layer's Jacobian")
    k = B - 1
    d.step("Each neuron's block has rank $B - 2$ on the $B - 1$ centred directions: an atom at 0 of mass",
           sp.Eq(sp.Symbol("P(sigma^2 = 0)"), 1 / k), "atom")
    b_pos = sp.Symbol("b", positive=True)
    density = (u ** (k / 2 - 1) * sp.exp(-u / 2) / (2 ** (k / 2) * sp.gamma(k / 2))).subs(B, b_pos)
    d.step("the others are $B/r^2 = (B-1)/u$, $u \\sim \\chi^2_{B-1}$ ($r^2 = \\mu^* u$, $\\mu^* = B/(B-1)$); "
           "$P(\\sigma^2 \\le x) = P(u \\ge (B-1)/x)$, $Q$ the regularised upper incomplete gamma function:",
           sp.Eq(sp.Symbol("F(x)"), 1 / k + (B - 2) / k * REGULARISED_UPPER_GAMMA(k / 2, k / (2 * x_sym))), "cdf")
    inverse = [sp.gammasimp(sp.integrate(density / u**power, (u, 0, sp.oo), conds="none")).subs(b_pos, B)
               for power in (1, 2)]
    mean = cancel_gammas((B - 2) / k * k * inverse[0])
    d.step("its mean over the $N(B-1)$ directions is the gradient rate of the linear network (Thm 9's minimum):",
           sp.Eq(sp.Symbol("E[sigma^2]"), mean), "mean")
    second = cancel_gammas((B - 2) / k * k**2 * inverse[1])
    d.step("and its second moment (finite for $B > 5$; a plain orthogonal layer has 1):",
           sp.Eq(sp.Symbol("E[sigma^4]"), second), "second")
    d.result = d["cdf"]
    return d


def linear_spectrum_cdf(x: float | np.ndarray, batch_size: int) -> float | np.ndarray:
    """P(sigma^2 <= x) over the N (B-1) centred directions of a linear BN layer at Sigma*, orthogonal W (x > 0)."""
    cdf = sp.lambdify((x_sym, B), derive_linear_spectrum()["cdf"], [{"Q": gammaincc}, "numpy"], cse=True)
    return cdf(np.asarray(x, dtype=float), batch_size)


def linear_spectrum_moments(batch_size: int) -> dict[str, float]:
    """{"mean", "second"} of :func:`derive_linear_spectrum` at one B (inf where they diverge: B <= 3, B <= 5)."""
    d = derive_linear_spectrum()
    return {name: float(d[name].subs(B, batch_size)) if batch_size > {"mean": 3, "second": 5}[name] else np.inf
            for name in ("mean", "second")}
