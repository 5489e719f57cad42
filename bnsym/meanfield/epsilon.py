"""Batch norm with epsilon: fixed point, collapse, forward eigenvalues and gradient rate (Yang et al. 2019, R16).

Premises: h^l = W^l x^{l-1} + b^l, W ~ N(0, sigma_w^2/N), b ~ N(0, sigma_b^2), x^l = phi(n_eps(G h^l)) with
n_eps(y) = sqrt(B) y / sqrt(|y|^2 + B eps). The fixed point is that of the output covariance Sigma of x,
Sigma -> V_{B_phi}(sigma_w^2 Sigma + sigma_b^2 11^T). Two exact reductions (:func:`derive_premises`):

* the bias adds sigma_b^2 11^T, which G removes: sigma_b^2 drops out of everything;
* n_eps(sigma_w y) = n_{eps/sigma_w^2}(y): the network is a function of t = eps / sigma_w^2 alone.

With mu the centred scale of the output (G Sigma G = mu G) and s = r^2 ~ chi^2_{B-1}, the BN output is
sqrt(tau) x with tau = mu s / (mu s + B t) (:mod:`.radial`). The scalar map mu -> E_s[m(tau)],
m = E[phi_1^2] - E[phi_1 phi_2], has a positive fixed point iff t < sup_w H(w), H(w) = E_s[m(tau)] / (B w) at
w = mu / (B t) (:func:`derive_fixed_point_equation`); above that t the centred covariance collapses (mu* = 0).
The gradient rate (:func:`derive_rate`) is

    lambda_G = B E_{s ~ chi^2_{B-3}}[s / (mu s + B t) (A(tau) - tau (2 - tau) C(tau))] / ((B - 1)(B - 3)),

A = ((B-1)^2 M11 + (B-1) M12) / B, C = (B-1)(N11 - N12) / B; it stays finite at mu = 0 (collapsed regime).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from ..core.activations import Activation
from ..core.derivation import Derivation
from ..core.estimate import ROUNDING, Estimate
from ..core.lazy import lazy_module
from ..core.quadrature import chi2_rule
from .forward import FixedPoint
from .forward_linear import moment_weights
from .radial import FORWARD, MOMENTS, angular_moments, shrink

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use

optimize = lazy_module("scipy.optimize")

N_RADIAL = 64  # Gauss nodes of the radial rule; the error estimate compares with N_RADIAL / 2
LOG_W = np.linspace(-9.0, 17.0, 521)  # log10 w grid on which H(w) is tabulated to bracket the fixed point
_S0, _P00, _M_TAU = MOMENTS.index("s0"), MOMENTS.index("p00"), MOMENTS.index("m_tau")


# ----------------------------------------------------------------------------------------------- derivations


def derive_premises() -> Derivation:
    """sigma_b^2 drops out and only t = eps / sigma_w^2 matters: the two reductions, checked in SymPy."""
    from ..core.symbols import B, epsilon, sigma_b2, sigma_w2

    d = Derivation("Batch norm with epsilon: what the weight and bias scales do")
    one = sp.Symbol("1 1^T")
    d.step("The bias is one number per neuron, shared by the batch: it adds $\\sigma_b^2\\mathbf{1}\\mathbf{1}^T$ to "
           "the pre-activation covariance, and $G\\mathbf{1} = 0$ removes it before batch norm sees it:",
           sp.Eq(sp.Symbol("G (sigma_w^2 Sigma + sigma_b^2 1 1^T) G"), sigma_w2 * sp.Symbol("G Sigma G")
                 + sigma_b2 * sp.Symbol("G") * one * sp.Symbol("G")).subs(one, 0))
    y = sp.Symbol("|y|", positive=True)
    scaled = sp.sqrt(B) * sp.sqrt(sigma_w2) * y / sp.sqrt(sigma_w2 * y**2 + B * epsilon)
    effective = sp.sqrt(B) * y / sp.sqrt(y**2 + B * epsilon / sigma_w2)
    d.step("Scaling the weights by $\\sigma_w$ scales $y = Gh$; batch norm then sees only $\\epsilon/\\sigma_w^2$ "
           "(the difference of the two sides):",
           sp.Eq(sp.Symbol("n_eps(sigma_w y) - n_{eps/sigma_w^2}(y)"), sp.simplify(scaled - effective)),
           name="scale_gap")
    return d


def derive_jacobian(batch_size: int = 3) -> Derivation:
    """d n_eps / dy = sqrt(B)/S (I - y y^T / S^2), S^2 = |y|^2 + B eps, checked entrywise in SymPy at one B."""
    from ..core.symbols import epsilon, kappa

    d = Derivation("The Jacobian of batch norm with epsilon")
    y = sp.Matrix(sp.symbols(f"y1:{batch_size + 1}", real=True))
    norm2 = (y.T * y)[0]
    big_s = sp.sqrt(norm2 + batch_size * epsilon)
    jac = (sp.sqrt(batch_size) * y / big_s).jacobian(y)
    claimed = sp.sqrt(batch_size) / big_s * (sp.eye(batch_size) - y * y.T / big_s**2)
    d.step(f"Quotient rule (residual at $B = {batch_size}$):",
           sp.Eq(sp.Symbol("residual"), sp.simplify(jac - claimed), evaluate=False), name="residual")
    v = sp.Symbol("v")
    d.step("With $y = |y| v$ and $\\kappa = |y|/S$ this is $\\sqrt B\\,\\kappa/|y|\\,(I - \\kappa^2 vv^T)$, so "
           "$J_h = \\sqrt B\\,\\kappa/|y|\\,D(G - \\kappa^2 vv^T)$ with $D = \\mathrm{diag}\\,\\phi'(\\kappa x)$; "
           "and since $v^Tv = 1$, $Gv = v$:",
           sp.Eq(sp.Symbol("(G - kappa^2 v v^T)^2"),
                 sp.Symbol("G") - sp.expand(2 * kappa**2 - kappa**4) * sp.Symbol("v v^T")))
    d.result = v
    return d


def derive_fixed_point_equation() -> Derivation:
    """The scalar fixed point, its collapse threshold and collapse factor (closed form for degree-1 phi)."""
    from ..core.symbols import B, epsilon, mu, s, sigma_w2

    d = Derivation("The fixed point with epsilon, and the collapse")
    t = sp.Symbol("t", positive=True)
    w = sp.Symbol("w", positive=True)
    tau = mu * s / (mu * s + B * t)
    d.step("With $t = \\epsilon/\\sigma_w^2$, $s = r^2 \\sim \\chi^2_{B-1}$, the BN output is "
           "$\\sqrt\\tau\\,x$ and the centred scale of the next layer is $E_s[m(\\tau)]$, "
           "$m(\\tau) = E[\\phi(\\sqrt\\tau x_1)^2] - "
           "E[\\phi(\\sqrt\\tau x_1)\\phi(\\sqrt\\tau x_2)]$, with",
           sp.Eq(sp.Symbol("tau"), tau))
    d.step("Writing $\\mu = Btw$, $\\tau = ws/(ws + 1)$ no longer involves $t$, and the fixed point "
           "$\\mu = E_s[m(\\tau)]$ reads",
           sp.Eq(t, sp.Symbol("H(w)")), name="H")
    m1 = sp.Symbol("mu_0^*", positive=True)
    h_degree1 = m1 * s / (w * s + 1) / B  # inside E_s; m(tau) = m1 tau for degree-1 phi
    d.step("Degree-1 positive-homogeneous $\\phi$ (ReLU, leaky ReLU, identity): $m(\\tau) = \\mu_0^*\\tau$ "
           "($\\mu_0^*$ the $\\epsilon = 0$ value), so inside $E_s$",
           sp.Eq(sp.Symbol("H(w)"), h_degree1))
    h0 = sp.simplify(h_degree1.subs(w, 0).subs(s, B - 1))  # E[s] = B - 1
    d.step("$H$ decreases in $w$; its supremum is at $w \\to 0$, where $E[s] = B-1$: the collapse threshold",
           sp.Eq(sp.Symbol("eps^*/sigma_w^2"), h0), name="degree1_threshold")
    d.step("Above it only $\\mu = 0$ is a fixed point; near it $\\tau \\approx ws$ and "
           "$\\mu' = \\mu_0^* E[\\tau] \\approx \\mu_0^* (B-1)\\mu/(Bt)$: per layer $\\mu$ shrinks by",
           sp.Eq(sp.Symbol("mu'/mu"), sp.Symbol("eps^*") / epsilon), name="degree1_factor")
    phi0 = sp.Symbol("phi'(0)", real=True)
    d.step("For $\\phi$ differentiable at 0, $m(\\tau) = \\phi'(0)^2 \\tau B/(B-1) + O(\\tau^2)$ ($E[x_1^2] = 1$, "
           "$E[x_1 x_2] = -1/(B-1)$), so $H(0) = \\phi'(0)^2$: $\\mu = 0$ attracts for $\\epsilon$ above",
           sp.Eq(sp.Symbol("eps_lin"), sigma_w2 * phi0**2), name="smooth_threshold")
    d.step("and there batch norm acts linearly, $n_\\epsilon(y) \\approx y/\\sqrt\\epsilon$: per layer",
           sp.Eq(sp.Symbol("mu'/mu"), sigma_w2 * phi0**2 / epsilon), name="smooth_factor")
    d.result = h0
    return d


@cache
def derive_rate() -> Derivation:
    """lambda_G with epsilon as a radial quadrature of angular moments (R16), and its collapsed limit."""
    from ..core.symbols import M11, M12, N11, N12, B, sigma_w2

    d = Derivation("The gradient rate with epsilon")
    t = sp.Symbol("t", positive=True)
    d.step("Rayleigh quotient on $\\mathbb{R}G$, the $\\sigma_w^2$ of the backward weights included:",
           sp.Eq(sp.Symbol("lambda_G"), sigma_w2 * sp.Symbol("E tr(J^T G J)") / (B - 1)))
    a_expr = ((B - 1) ** 2 * M11 + (B - 1) * M12) / B
    c_expr = (B - 1) * (N11 - N12) / B
    d.step("$E_v\\,\\mathrm{tr}(DGD(G - \\kappa^2(2-\\kappa^2)vv^T))$ over the exchangeable coordinates, at scale "
           "$\\kappa$, is $A - \\kappa^2(2-\\kappa^2)C$ with",
           sp.Tuple(sp.Eq(sp.Symbol("A"), a_expr), sp.Eq(sp.Symbol("C"), c_expr)), name=("A", "C"))
    d.step("$|J_h|^2$ carries $B\\kappa^2/|y|^2 = B/S^2$, $S^2 = \\sigma_w^2\\mu s + B\\epsilon$, "
           "$s \\sim \\chi^2_{B-1}$:",
           sp.Eq(sp.Symbol("lambda_G"), B * sigma_w2 / (B - 1) * sp.Symbol("E_s[(A - kappa^2 (2-kappa^2) C)/S^2]")))
    d.step("With $\\sigma_w^2/S^2 = s^{-1}\\cdot s/(\\mu s + Bt)$, $t = \\epsilon/\\sigma_w^2$:",
           sp.Eq(sp.Symbol("lambda_G"), B / (B - 1) * sp.Symbol("E_s[s^-1 s/(mu s + B t) (A - tau(2 - tau) C)]")))
    d.step("and $E_{\\chi^2_{B-1}}[f(s)/s] = E_{\\chi^2_{B-3}}[f(s)]/(B-3)$ (the densities differ by $s$):",
           sp.Eq(sp.Symbol("lambda_G"), B * sp.Symbol("E_{chi^2_{B-3}}[s/(mu s + B t) (A - tau(2 - tau) C)]")
                 / ((B - 1) * (B - 3))))
    collapsed = sp.simplify(B / ((B - 1) * (B - 3)) * (B - 3) * sp.Symbol("A(0)") / (B * t))
    d.step("At $\\mu = 0$ ($\\tau = 0$, $E[s] = B - 3$) the rate stays finite:",
           sp.Eq(sp.Symbol("lambda_G^collapsed"), collapsed), name="collapsed")
    phi0 = sp.Symbol("phi'(0)", real=True)
    a0 = sp.simplify(a_expr.subs({M11: phi0**2, M12: phi0**2}))
    d.step("For $\\phi$ differentiable at 0, $A(0) = $" f"${sp.latex(a0)}$" ": batch norm is linear and",
           sp.Eq(sp.Symbol("lambda_G^collapsed"), sp.simplify(collapsed.subs(sp.Symbol("A(0)"), a0))),
           name="collapsed_smooth")
    d.result = collapsed
    return d


# -------------------------------------------------------------------------------------------------- numerics


@dataclass(frozen=True)
class _Rules:
    """Radial Gauss rules (nodes, weights) for chi^2 with B - 1, B - 3 and B + 1 degrees of freedom."""

    fixed: tuple[np.ndarray, np.ndarray]
    rate: tuple[np.ndarray, np.ndarray]
    forward: tuple[np.ndarray, np.ndarray]


@cache
def _rules(batch_size: int, n: int) -> _Rules:
    return _Rules(chi2_rule(batch_size - 1, n), chi2_rule(batch_size - 3, n), chi2_rule(batch_size + 1, n))


def _h_values(phi: Activation, batch_size: int, w: np.ndarray, n: int) -> np.ndarray:
    """H(w) = E_s[m(tau)] / (B w) = E_s[(m/tau)(tau) s / (w s + 1)] / B, tau = w s / (w s + 1); w = 0 allowed."""
    nodes, weights = _rules(batch_size, n).fixed
    ws = np.asarray(w)[..., None] * nodes
    m_tau = angular_moments(phi, batch_size)(ws / (ws + 1), [_M_TAU])[0]
    return (m_tau * nodes / (ws + 1)) @ weights / batch_size


_H_GRIDS: dict[tuple[Activation, int, int], np.ndarray] = {}


def _h_grid(phi: Activation, batch_size: int, n: int) -> np.ndarray:
    """H on the grid 10^LOG_W, preceded by H(0)."""
    key = (phi, batch_size, n)
    if key not in _H_GRIDS:
        _H_GRIDS[key] = _h_values(phi, batch_size, np.concatenate([[0.0], 10.0**LOG_W]), n)
    return _H_GRIDS[key]


def _sup_h(phi: Activation, batch_size: int, n: int) -> float:
    """sup_w H(w): inf for degree < 1 (H grows without bound as w -> 0), else the grid maximum, refined."""
    if phi.is_homogeneous and phi.degree < 1:
        return np.inf
    grid = _h_grid(phi, batch_size, n)
    k = int(np.argmax(grid))
    if k == 0:  # H is largest at w = 0 (degree 1 and phi smooth at 0: H(0) = phi'(0)^2)
        return float(grid[0])
    best = optimize.minimize_scalar(lambda lw: -_h_values(phi, batch_size, np.array(10.0**lw), n), method="bounded",
                           bounds=(LOG_W[max(k - 2, 0)], LOG_W[min(k, len(LOG_W) - 1)]), options={"xatol": 1e-10})
    return float(max(-best.fun, grid[k]))


def _solve_w(phi: Activation, batch_size: int, t: np.ndarray, n: int) -> np.ndarray:
    """w with H(w) = t on the branch connected to eps = 0 (the last crossing), NaN where t >= sup H (collapse)."""
    grid = _h_grid(phi, batch_size, n)[1:]
    # within the table's error bound of H(0) below the threshold counts as collapsed, as it is exactly at it
    # (tanh at eps = sigma_w^2 phi'(0)^2): the positive root there would be below what the table resolves
    margin = angular_moments(phi, batch_size).error[_M_TAU] * (batch_size - 1) / batch_size
    collapsed = t >= _sup_h(phi, batch_size, n) - margin
    above = grid[None, :] >= t[:, None]
    last = np.where(above.any(1), len(LOG_W) - 1 - np.argmax(above[:, ::-1], axis=1), 0)
    lo = np.where(above.any(1), LOG_W[last], LOG_W[0] - 30)  # below the grid: H(0) > t >= H(10^-9), w is tiny
    if phi.is_homogeneous and phi.degree < 1:  # H(w) -> inf like w^(alpha - 1) as w -> 0: w may be far smaller
        with np.errstate(divide="ignore"):
            tail = LOG_W[0] + np.log10(np.maximum(t, 1e-300) / grid[0]) / (phi.degree - 1)
        lo = np.where(above.any(1), lo, tail - 3)
        lost = ~above.any(1) & ~collapsed & (lo < np.log10(np.finfo(float).tiny) + 3)
        if np.any(lost):
            raise ValueError(_underflow_reason(phi, batch_size, t[lost][0], tail[lost][0]))
    m_tau = np.abs(angular_moments(phi, batch_size)(np.linspace(0, 1, 65), [_M_TAU]))
    m_tau_max = float(m_tau[np.isfinite(m_tau)].max())  # degree < 1: m/tau = inf at tau = 0, where w is not large
    beyond = np.log10(np.maximum(2 * m_tau_max * batch_size / np.maximum(t, 1e-300), 10.0 ** LOG_W[-1]))
    hi = np.where(last == len(LOG_W) - 1, beyond, LOG_W[np.minimum(last + 1, len(LOG_W) - 1)])
    hi = np.where(above.any(1), hi, LOG_W[0])
    f_lo = _h_values(phi, batch_size, 10.0**lo, n) - t
    f_hi = _h_values(phi, batch_size, 10.0**hi, n) - t
    side = np.zeros_like(t)  # which end the last step replaced: +1 lo, -1 hi
    for _ in range(60):  # Illinois (regula falsi) on log10 w, bracket kept: f(lo) >= 0 > f(hi)
        mid = np.clip(hi - f_hi * (hi - lo) / np.where(f_hi == f_lo, -1.0, f_hi - f_lo), lo, hi)
        f_mid = _h_values(phi, batch_size, 10.0**mid, n) - t
        up = f_mid >= 0
        f_hi = np.where(up & (side > 0), f_hi / 2, f_hi)  # the same end twice: halve the stale one
        f_lo = np.where(~up & (side < 0), f_lo / 2, f_lo)
        lo, f_lo = np.where(up, mid, lo), np.where(up, f_mid, f_lo)
        hi, f_hi = np.where(up, hi, mid), np.where(up, f_hi, f_mid)
        side = np.where(up, 1.0, -1.0)
        converged = (np.abs(f_mid) <= 1e-14 * np.maximum(t, 1e-300)) | (hi - lo < 1e-12) | collapsed
        if np.all(converged):
            break
    lo = hi = np.where(np.abs(f_lo) < np.abs(f_hi), lo, hi)
    return np.where(collapsed, np.nan, 10.0 ** ((lo + hi) / 2))


def _underflow_reason(phi: Activation, batch_size: int, t: float, log_w: float) -> str:
    """Why the fixed point at t = eps / sigma_w^2 is refused: w = mu* / (B t) ~ 10^log_w underflows float64."""
    log_mu = log_w + math.log10(batch_size * t)
    where = (f"mu* itself, about 10^{log_mu:.0f}, is below float64's smallest number (about 1e-308)"
             if log_mu < math.log10(np.finfo(float).tiny) else
             f"mu* is about 10^{log_mu:.0f}, but this route solves for w = mu* / (B eps), about 10^{log_w:.0f}, "
             "which underflows float64")
    return (f"the fixed point of {phi} at B = {batch_size} and eps / sigma_w^2 = {t:.3g} is below float64's range: "
            f"{where} ({phi} never collapses: mu* falls like a power of eps and never reaches 0)")


@dataclass(frozen=True)
class EpsilonPoint:
    """Arrays over t = eps / sigma_w^2: output moments q = E[phi^2], q c, centred scale mu = q (1 - c), collapse."""

    q: np.ndarray
    qc: np.ndarray
    mu: np.ndarray
    collapsed: np.ndarray
    error: np.ndarray


def _fixed_points_n(phi: Activation, batch_size: int, t: np.ndarray, n: int) -> EpsilonPoint:
    nodes, weights = _rules(batch_size, n).fixed
    w = _solve_w(phi, batch_size, t, n)
    collapsed = np.isnan(w)
    zero = t == 0
    at_one = angular_moments(phi, batch_size).at_one
    mu_x = np.where(collapsed, 0.0, np.where(zero, at_one[_S0] - at_one[_P00], batch_size * t * np.nan_to_num(w)))
    tau = shrink(mu_x, batch_size * t, nodes)
    moments = angular_moments(phi, batch_size)(tau, [_S0, _P00])
    q, qc = moments[0] @ weights, moments[1] @ weights
    table_error = angular_moments(phi, batch_size).error_at(tau, [_S0, _P00]).sum(0) @ weights
    return EpsilonPoint(q, qc, np.where(collapsed, 0.0, q - qc), collapsed, table_error)


def fixed_points(phi: Activation, batch_size: int, eps: np.ndarray, sigma_w2: float = 1.0,
                 n: int = N_RADIAL) -> EpsilonPoint:
    """The attracting BSB1 fixed point for each eps, vectorised; error = radial (n vs n/2) + moment table errors."""
    t = np.atleast_1d(np.asarray(eps, dtype=float)) / sigma_w2
    fine, coarse = _fixed_points_n(phi, batch_size, t, n), _fixed_points_n(phi, batch_size, t, n // 2)
    error = np.maximum(np.abs(fine.q - coarse.q), np.abs(fine.qc - coarse.qc)) + fine.error
    return EpsilonPoint(fine.q, fine.qc, fine.mu, fine.collapsed, error)


def _collapsed(phi: Activation, batch_size: int, point: EpsilonPoint) -> bool:
    """Whether the fixed point of one eps is the collapsed one: past the threshold, or at the threshold itself (sin
    at eps = sigma_w^2 phi'(0)^2), where mu* -> 0 continuously and a mu* within its own error of 0 is rounding
    noise, not a scale to divide by (it gave q = 2e-16, c = -0.28 < -1/(B-1) and forward eigenvalues 5.2 for 1 at
    B = 9). Only a phi that collapses at all (finite sup H): relu^0.75's tiny mu* at a huge eps is real."""
    return bool(point.collapsed[0]) or bool(abs(point.mu[0]) <= point.error[0]
                                            and math.isfinite(_sup_h(phi, batch_size, N_RADIAL)))


def fixed_point_radial(phi: Activation, batch_size: int, eps: float, sigma_w2: float = 1.0) -> FixedPoint:
    """Sigma* for one eps (any phi) as a :class:`FixedPoint`; past the collapse q = phi(0)^2, c = 1, collapsed."""
    point = fixed_points(phi, batch_size, np.array([eps]), sigma_w2)
    q, qc, collapsed = float(point.q[0]), float(point.qc[0]), _collapsed(phi, batch_size, point)
    if collapsed:  # tau = 0: every output is phi(0), exactly
        q, qc = (float(phi.numpy(np.zeros(1))[0] ** 2),) * 2
    c = 1.0 if q == 0 else qc / q
    return FixedPoint(q=q, c=c, batch_size=batch_size, eps=eps, method="radial", error=float(point.error[0]),
                      collapsed=collapsed, sigma_w2=sigma_w2)


def collapse_eps(phi: Activation, batch_size: int, sigma_w2: float = 1.0) -> float:
    """eps* = sigma_w^2 sup_w H(w): above it the centred covariance collapses (mu* = 0); inf if it never does.

    Degree-1 positive-homogeneous phi: eps* = sigma_w^2 mu_0^* (B-1)/B (:func:`derive_fixed_point_equation`).
    """
    sup_h = _sup_h(phi, batch_size, N_RADIAL)
    with np.errstate(over="ignore"):
        threshold = float(sigma_w2 * sup_h)
    if math.isinf(threshold) and math.isfinite(sup_h):
        raise ValueError(f"the collapse eps* = sigma_w2 sup H = {sigma_w2:g} x {sup_h:.6g} is beyond float64's range "
                         f" (it is finite: {phi} collapses at B = {batch_size}); only eps / sigma_w2 matters, so "
                         "give a smaller sigma_w2 and scale eps alike")
    return threshold


def _rate_terms(phi: Activation, batch_size: int, mu_x: np.ndarray, t: np.ndarray,
                n: int) -> tuple[np.ndarray, np.ndarray]:
    """(lambda_G, the bound on its error from the moment table) at output scale mu_x and t = eps / sigma_w^2
    (:func:`derive_rate`), vectorised."""
    nodes, weights = _rules(batch_size, n).rate
    b, bt = batch_size, batch_size * np.asarray(t)
    mu_x = np.asarray(mu_x)
    tau = shrink(mu_x, bt, nodes)
    table = angular_moments(phi, batch_size)
    m11, m12, n11, n12 = table(tau, slice(5, 9))
    a = ((b - 1) ** 2 * m11 + (b - 1) * m12) / b
    c = (b - 1) * (n11 - n12) / b
    e11, e12, f11, f12 = table.error_at(tau, slice(5, 9))
    moment_error = ((b - 1) ** 2 * e11 + (b - 1) * e12 + 2 * (b - 1) * (f11 + f12)) / b
    with np.errstate(divide="ignore"):
        factor = np.where(bt[..., None] == 0, 1 / mu_x[..., None], nodes / (mu_x[..., None] * nodes + bt[..., None]))
    scale = (b - 1) * (b - 3) / b
    return (factor * (a - tau * (2 - tau) * c)) @ weights / scale, (factor * moment_error) @ weights / scale


def rate_radial(phi: Activation, batch_size: int, eps: float | np.ndarray, sigma_w2: float = 1.0) -> Estimate:
    """lambda_G at the attracting fixed point for each eps (vectorised over eps), in both regimes.

    Error: the change from n/2 to n radial nodes plus the moment table errors carried through the formula
    (the fixed point's own error moves the rate by the same order; it is not added).
    """
    t = np.ravel(np.asarray(eps, dtype=float)) / sigma_w2  # any shape of eps: computed flat, answered in its shape
    (fine, moment_error), (coarse, _) = (_rate_terms(phi, batch_size, _fixed_points_n(phi, batch_size, t, n).mu,
                                                     t, n) for n in (N_RADIAL, N_RADIAL // 2))
    error = np.abs(fine - coarse) + moment_error
    if np.ndim(eps):
        return Estimate(fine.reshape(np.shape(eps)), error.reshape(np.shape(eps)), "radial")
    return Estimate(fine[0], error[0], "radial")


def rate_trajectory(phi: Activation, batch_size: int, eps: float, mu_start: float, depth: int,
                    sigma_w2: float = 1.0, n: int = N_RADIAL) -> dict[str, np.ndarray]:
    """The mean-field layers from a BSB1 input of centred scale ``mu_start``: {"mu", "q", "rate"}.

    "mu"[l] and "q"[l] (l = 0..depth) are the centred scale and diagonal of layer l's output ("q"[0] is NaN, the
    input's diagonal is not a function of mu); "rate"[l - 1] (l = 1..depth) is lambda_G of layer l, whose input
    has scale mu[l - 1]: the factor by which back-propagation through layer l grows the squared gradient.
    Far from the fixed point (near the collapse, where mu* -> 0 only algebraically) these are the finite-depth
    transients that a network of that depth shows.
    """
    t = np.array([eps / sigma_w2])
    nodes, weights = _rules(batch_size, n).fixed
    table = angular_moments(phi, batch_size)
    mus, qs, rates = [float(mu_start)], [np.nan], []
    for _ in range(depth):
        mu_in = np.array([mus[-1]])
        rates.append(float(_rate_terms(phi, batch_size, mu_in, t, n)[0][0]))
        s0, p00 = table(shrink(mu_in, batch_size * t, nodes), [_S0, _P00]) @ weights
        mus.append(float(s0[0] - p00[0]))
        qs.append(float(s0[0]))
    return {"mu": np.array(mus), "q": np.array(qs), "rate": np.array(rates)}


def _forward_at(phi: Activation, batch_size: int, mu_in: float, t: float, n: int) -> dict[str, float]:
    """lambda_G, lambda_L, lambda_M of G dV/dSigma G at a BSB1 input of centred scale mu_in > 0.

    dV{Lam} = (1/(2 mu_in)) ((B-1)/B E_{chi^2_{B+1}}[T(tau)]{Lam} - tr(Lam) E_{chi^2_{B-1}}[V(tau)]) (Gaussian
    derivative with y = sqrt(mu) r v, r^2 ~ chi^2_{B-1}; r^2 times that density is chi^2_{B+1}), so lambda_X is the
    eps = 0 moment formula (:func:`~bnsym.meanfield.forward_linear.moment_weights`) with the five moments
    averaged over chi^2_{B+1}, and on RG minus (B-1)/2 mu_out/mu_in.
    """
    b, bt, mu = batch_size, np.array([batch_size * t]), np.array([mu_in])
    nodes_f, weights_f = _rules(b, n).forward
    table = angular_moments(phi, b)
    moments = table(shrink(mu, bt, nodes_f), FORWARD)[:, 0] @ weights_f
    nodes, weights = _rules(b, n).fixed
    tau = shrink(mu, bt, nodes)[0]
    ratio = float((tau * table(tau, [_M_TAU])[0]) @ weights) / mu_in  # mu_out / mu_in
    values = {key: float(w @ moments) / mu_in for key, w in moment_weights(b).items()}
    values["G"] -= (b - 1) / 2 * ratio
    return values


def forward_eigenvalues_radial(phi: Activation, batch_size: int, eps: float, sigma_w2: float = 1.0,
                               limit_step: float = 1e-5) -> dict[str, Estimate]:
    """{"G", "L", "M"} at the attracting fixed point with eps; lambda_G = the slope of mu -> mu' (no longer 0).

    Past the collapse the fixed point is mu* = 0, where the formula is 0/0: its limit mu_in -> 0 is taken by
    Richardson extrapolation from mu_in = h B t and 2 h B t (h = ``limit_step``); the error is the size of the
    extrapolation step. For positive-homogeneous phi of degree alpha > 1 the limit is 0 exactly: near mu = 0 the
    BN output is y / sqrt(eps), so V grows like mu^alpha and each eigenvalue like mu^(alpha - 1) (a power that
    Richardson's linear step cannot remove: 0.022 +- 0.016 for relu^1.5). Else the error is the change from n/2
    to n radial nodes.
    """
    t = eps / sigma_w2
    point = fixed_points(phi, batch_size, np.array([eps]), sigma_w2)
    coarse_mu = float(_fixed_points_n(phi, batch_size, np.array([t]), N_RADIAL // 2).mu[0])
    collapsed = _collapsed(phi, batch_size, point) or coarse_mu == 0  # the coarser rule may already call it so
    if collapsed and phi.is_homogeneous and phi.degree > 1:
        return {key: Estimate(0.0, 0.0, "radial") for key in moment_weights(batch_size)}
    if collapsed:
        near, far = (_forward_at(phi, batch_size, h * batch_size * t, t, N_RADIAL)
                     for h in (limit_step, 2 * limit_step))
        return {key: Estimate(2 * near[key] - far[key], abs(near[key] - far[key]), "radial") for key in near}
    mu_x = float(point.mu[0])
    fine = _forward_at(phi, batch_size, mu_x, t, N_RADIAL)
    coarse = _forward_at(phi, batch_size, coarse_mu, t, N_RADIAL // 2)
    return {key: Estimate(fine[key], abs(fine[key] - coarse[key]), "radial") for key in fine}


def rate_crossing_eps(phi: Activation, batch_size: int, sigma_w2: float = 1.0,
                      with_error: bool = False) -> float | Estimate | None:
    """eps_1: the smallest eps where lambda_G(eps) falls to 1 (explosion turns into vanishing); None if never.

    lambda_G is evaluated on a grid of eps from 10^-6 to 10^4 and the first crossing refined by Brent's method.
    With ``with_error=True`` an Estimate whose error bounds how far eps_1 can move within the rate's own error e:
    the distance from eps_1 to the first point of a geometric ladder, on either side, where abs(lambda_G - 1) > e,
    at least Brent's bracket; inf (with a ``note``) where the band spans a factor 2 of eps.
    That is about e / abs(lambda_G') where the crossing is transversal (relu), but eps* sqrt(e / c) where
    lambda_G - 1 ~ c (1 - eps/eps*)^2 only touches 1 (phi smooth at 0, at its collapse eps*).
    """
    def excess(eps: np.ndarray) -> np.ndarray:
        t = np.atleast_1d(eps) / sigma_w2
        mu_x = _fixed_points_n(phi, batch_size, t, N_RADIAL).mu
        return _rate_terms(phi, batch_size, mu_x, t, N_RADIAL)[0] - 1

    grid = np.logspace(-6, 4, 121)
    values = excess(grid)
    below = np.nonzero(values <= 0)[0]
    if below.size == 0:
        return None
    k = below[0]
    if k == 0 or values[k] == 0:
        crossing = float(grid[k])
    else:
        crossing = float(optimize.brentq(lambda e: float(excess(np.array([e]))[0]), grid[k - 1], grid[k], xtol=1e-12,
                                rtol=1e-10))  # the error below starts from this bracket
    if not with_error:
        return crossing
    rate = rate_radial(phi, batch_size, crossing, sigma_w2)
    steps = crossing * 2.0 ** -np.arange(1.0, 60.0)  # from eps_1 / 2 down to 1e-18 eps_1
    resolution = rate.error + ROUNDING
    width = 1e-12 + 1e-10 * crossing  # Brent's bracket: xtol + rtol eps_1
    for side in (-1, 1):
        inside = np.nonzero(np.abs(excess(crossing + side * steps)) <= resolution)[0]
        if inside.size and inside[0] == 0:  # flat within its error over a factor 2: the crossing is not resolved
            return Estimate(crossing, np.inf, "radial", "lambda_G stays within its error of 1 from eps_1 / 2 to "
                            "3 eps_1 / 2: the crossing is not resolved")
        if inside.size:  # the ladder's largest step inside the band; the next larger one is outside
            width = max(width, steps[inside[0] - 1])
    return Estimate(crossing, width, "radial")
