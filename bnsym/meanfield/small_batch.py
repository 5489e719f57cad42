"""Small batches, outside the standard regime (Yang et al. 2019, App. J): B = 2 and B = 3.

Batch norm divides the centred pre-activation y = G h of each neuron by its length r = abs(y) (times sqrt(B)),
so its Jacobian is sqrt(B) / r (I - v v^T) G with v = y / r, and a centred gradient of one neuron is scaled, on
average over its direction, by (B / r^2) (B - 2) / (B - 1) (:func:`derive_small_batches`).

* B = 2: G = v v^T, so the Jacobian vanishes: BN(h) = sign(h_1 - h_2) (1, -1) is piecewise constant and every
  gradient through batch norm is 0.
* B = 3: for linear phi at its fixed point r^2 = mu* chi^2_(B-1) with mu* = B/(B-1), and E[1/chi^2_2] = oo: the
  mean-field rate lambda_G = (B-2)/(B-3) is infinite. The mean truncated at T is finite and grows like log T.
  For any phi, r and v are independent and lambda_G = B E[1/r^2] E_v[tr(P D G D P)] / (B-1), P = G - v v^T: infinite
  wherever the angular factor is positive (:func:`small_batch_rate`).
"""

from __future__ import annotations

from functools import cache

import numpy as np
from scipy.special import expn

from ..core.activations import Activation
from ..core.derivation import Derivation
from ..core.estimate import Estimate
from ..core.geometry import centring
from ..core.lazy import lazy_module
from ..core.validation import MIN_RELATIVE_VARIANCE
from .forward import FixedPoint

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use


@cache
def derive_small_batches() -> Derivation:
    """The B = 2 Jacobian (zero), E[1/chi^2_(B-1)] and the linear rate (B-2)/(B-3), infinite at B = 3, and the
    truncated mean E[min((B/r^2)(B-2)/(B-1), T)] at B = 3 (results "jacobian_2", "inverse_moment", "rate",
    "rate_3", "truncated_3")."""
    from ..core.symbols import B, mu, u, x1, x2

    d = Derivation("Batch norm at B = 2 and B = 3")
    gap = sp.Symbol("d", positive=True)  # h_1 - h_2 > 0 (the other sign is the mirror image)
    y = sp.Matrix([gap / 2, -gap / 2])
    out = sp.sqrt(2) * y / sp.sqrt(y.dot(y))
    h = sp.Matrix([x1, x2])
    bn2 = out.subs(gap, x1 - x2)
    d.step("$B = 2$, $h_1 > h_2$: the batch-norm output",
           sp.Eq(sp.MatrixSymbol("BN", 2, 1), sp.simplify(out), evaluate=False))
    jacobian = sp.simplify(bn2.jacobian(h).subs(x1, x2 + gap))
    d.step("its Jacobian: every gradient through batch norm vanishes",
           sp.Eq(sp.MatrixSymbol("J", 2, 2), jacobian, evaluate=False), "jacobian_2")
    k = B - 1
    chi_density = u ** (k / 2 - 1) * sp.exp(-u / 2) / (2 ** (k / 2) * sp.gamma(k / 2))
    inverse = sp.simplify(sp.integrate((chi_density / u).subs(B, sp.Symbol("b", positive=True)), (u, 0, sp.oo),
                                       conds="none").subs(sp.Symbol("b", positive=True), B))
    d.step("$E[1/\\chi^2_{B-1}]$ (for $B > 3$):", sp.Eq(sp.Symbol("E[1/chi^2]"), inverse), "inverse_moment")
    rate = sp.factor(sp.expand_func(sp.gammasimp(B / (B / (B - 1)) * inverse * (B - 2) / (B - 1))))
    d.step("$\\lambda_G$ of linear $\\phi$: $E[(B/r^2)(B-2)/(B-1)]$, $r^2 = \\mu^*\\chi^2_{B-1}$, $\\mu^* = B/(B-1)$",
           sp.Eq(sp.Symbol("lambda_G"), rate), "rate")
    at_three = sp.integrate((chi_density / u).subs(B, 3), (u, 0, sp.oo))
    d.step("at $B = 3$ the integral diverges at $r \\to 0$", sp.Eq(sp.Symbol("E[1/chi^2_2]"), at_three), "rate_3")
    threshold = sp.Symbol("T", positive=True)
    ratio_scale = sp.Rational(3, 2) / mu  # (B/r^2)(B-2)/(B-1) = (3/2) / (mu chi^2) at B = 3
    density = chi_density.subs(B, 3)
    cut = ratio_scale / threshold  # chi^2 below this gives a ratio above T
    truncated = (threshold * sp.integrate(density, (u, 0, cut))
                 + sp.integrate(ratio_scale / u * density, (u, cut, sp.oo)))
    # SymPy answers with Ei on the polar branch: Ei(x e^(i pi)) = -E_1(x) + i pi for x > 0
    truncated = sp.expand(truncated.replace(
        lambda e: isinstance(e, sp.Ei), lambda e: -sp.expint(1, -sp.unpolarify(e.args[0])) + sp.I * sp.pi))
    d.step("truncated at $T$ (B = 3, $r^2 = \\mu\\chi^2_2$): finite, growing like $\\log T$",
           sp.Eq(sp.Symbol("E[min(X, T)]"), truncated), "truncated_3")
    d.result = rate
    return d


def truncated_rate_three(threshold: float | np.ndarray, mu_value: float = 1.5) -> float | np.ndarray:
    """E[min(X, T)] at B = 3 for X = (B/r^2)(B-2)/(B-1), r^2 = mu chi^2_2 (mu = mu* = 3/2 for linear phi)."""
    from ..core.symbols import mu

    threshold_symbol = sp.Symbol("T", positive=True)
    f = sp.lambdify((threshold_symbol, mu), derive_small_batches()["truncated_3"], [{"expint": expn}, "numpy"],
                    cse=True)
    return f(np.asarray(threshold, dtype=float), mu_value)


SMALL_BATCH_SIZES = (2, 3)  # below the theory's B >= 4, where lambda_G at eps = 0 is still determined
ANGLES = 4096  # points on the circle of BN directions at B = 3 (the angular factor's sign needs no precision)


def small_batch_size(batch_size: object) -> int | None:
    """``batch_size`` as an int if it is one whole number in SMALL_BATCH_SIZES, else None."""
    if isinstance(batch_size, (bool, np.bool_)) or np.ndim(batch_size) or not np.isreal(batch_size):
        return None
    try:
        value = float(batch_size)
    except (TypeError, ValueError, OverflowError):
        return None
    return int(value) if value in SMALL_BATCH_SIZES else None


def angular_factor_three(phi: Activation) -> float:
    """E_v[tr(P D G D P)] at B = 3, P = G - v v^T, D = diag(phi'(sqrt(3) v)), v uniform on the circle in 1^perp."""
    g = centring(3)
    basis = np.linalg.eigh(g)[1][:, 1:]  # an orthonormal basis of 1^perp
    theta = np.arange(ANGLES) * (2 * np.pi / ANGLES)
    v = np.cos(theta)[:, None] * basis[:, 0] + np.sin(theta)[:, None] * basis[:, 1]  # (n, 3)
    p = g - v[:, :, None] * v[:, None, :]
    d = phi.numpy_derivative(np.sqrt(3.0) * v)
    inner = d[:, :, None] * g * d[:, None, :]
    return float(np.einsum("nab,nbc,nca->n", p, inner, p).mean())


def small_batch_rate(phi: Activation, batch_size: int) -> Estimate:
    """lambda_G at eps = 0 below B = 4 (App. J): 0 at B = 2 (every gradient through batch norm is exactly 0,
    :func:`derive_small_batches`); inf at B = 3 (E[1/r^2] = oo and the angular factor is positive). ValueError where
    the angular factor vanishes at B = 3 (phi' = 0 on [-sqrt 2, sqrt 2]): 0 x oo is undefined."""
    if batch_size == 2:
        return Estimate(0.0, 0.0, "small_batch")
    if angular_factor_three(phi) > 0:
        return Estimate(np.inf, 0.0, "small_batch")
    raise ValueError(f"at B = 3 the rate of {phi} is 0 x infinity, undefined: phi' vanishes on the BN outputs' "
                     "range [-sqrt(2), sqrt(2)] while E[1/r^2] is infinite")


def small_batch_fixed_point(phi: Activation, batch_size: int) -> FixedPoint:
    """The BSB1 fixed point (eps = 0) at B = 2 and 3: q* = E[phi(x_1)^2], q* c* = E[phi(x_1) phi(x_2)] over the BN
    output x. B = 2: x = +-(1, -1), exact (every input with h_1 != h_2 lands there in one layer). B = 3:
    x_k = sqrt(2) cos(theta - 2 pi k / 3), theta uniform, by the trapezoidal rule with ANGLES and ANGLES / 2
    points (their difference is the error)."""
    if batch_size == 2:
        plus, minus = phi.numpy(np.array([1.0, -1.0]))
        point = FixedPoint(q=float((plus**2 + minus**2) / 2), c=float(plus * minus / ((plus**2 + minus**2) / 2)),
                           batch_size=2, method="small_batch") if plus or minus else None
        return _resolved(point, phi, batch_size)

    def moments(n: int) -> np.ndarray:
        theta = np.arange(n) * (2 * np.pi / n)
        first, second = (phi.numpy(np.sqrt(2.0) * np.cos(theta - shift)) for shift in (0.0, 2 * np.pi / 3))
        return np.array([np.mean(first**2), np.mean(first * second)])

    fine, coarse = moments(ANGLES), moments(ANGLES // 2)
    point = FixedPoint(q=float(fine[0]), c=float(fine[1] / fine[0]), batch_size=3, method="small_batch",
                       error=float(np.abs(fine - coarse).max())) if fine[0] > 0 else None
    return _resolved(point, phi, batch_size)


def _resolved(point: FixedPoint | None, phi: Activation, batch_size: int) -> FixedPoint:
    """``point`` unless phi is (numerically) constant on the BN outputs: then mu* = 0 and batch norm's next layer
    divides by 0 (ValueError), as for B >= 4 (``MIN_RELATIVE_VARIANCE``)."""
    if point is None or not np.isfinite(point.q) or point.mu <= MIN_RELATIVE_VARIANCE * point.q:
        raise ValueError(f"activation {phi} is constant on the batch-norm outputs at B = {batch_size} (mu* = 0 to "
                         "float64 precision): the next batch norm would divide by zero")
    return point
