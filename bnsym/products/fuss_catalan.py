"""Theorem 1 of Bjorck et al. (2018): squared singular values of a product of M Gaussian matrices.

X = X_1 ... X_M with independent N x N factors of i.i.d. N(0, 1/N) entries. As N -> infinity the eigenvalues
x of X X^T (the *squared* singular values of X) have the Fuss-Catalan density, in the paper's parametric form
(eqs. 5, 9, 10; Liu, Wang & Zhang 2016)

    x(phi) = sin((M+1) phi)^(M+1) / (sin(phi) sin(M phi)^M),
    rho(x) = sin((M+1) phi) sin(phi) / (pi x sin(M phi)),          0 < phi < pi/(M+1).

Two derivations meet here: the moments from free probability (S-transform and Lagrange inversion,
:func:`derive_moments`), and the edges and closed forms from the parametric form and the algebraic equation of
the Green's function (:func:`derive_density`). The numeric density (:func:`fuss_catalan_density`) inverts
x(phi) by vectorised bisection in a logistic variable that resolves both edges.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp
from scipy.special import expit, roots_legendre

from ..core.derivation import Derivation
from ..core.symbols import M_factors as M
from ..core.symbols import k_moment as k
from ..core.symbols import varphi, vartheta
from ..core.symbols import x_sq as x
from ..core.validation import check_finite_result, check_range, check_real_array, check_whole_number

_BISECTION_STEPS = 64  # the logistic variable v lies in [-64, 64]; 64 halvings reach its float64 spacing
_V_RANGE = 30.0  # quadrature range of v: the moment integrands are below 1e-13 of their peak outside [-30, 30]
MAX_FACTORS = 10**4  # M: the soft edge (M+1)^(M+1) / M^M is evaluated exactly (0.2 s at M = 1e4)
MAX_ORDER = 10**4  # k: the exact moment binomial((M+1)k, k)/(Mk+1) has about k log10(e (M+1)) digits
MAX_NODES = 10**5  # Gauss-Legendre nodes of density_moment


def _tidy_powers(expr: sp.Basic) -> sp.Basic:
    """Combine powers of a common base (positive symbols) and cancel their exponents."""
    expr = sp.powsimp(sp.powdenest(sp.expand_power_base(expr, force=True), force=True), force=True)
    return expr.replace(lambda e: e.is_Pow, lambda e: sp.Pow(e.base, sp.cancel(e.exp)))


def check_factors(m: object) -> int:
    """M, the number of factors, must be a whole number in [1, MAX_FACTORS]."""
    return check_whole_number(m, "M (the number of Gaussian factors)", 1, MAX_FACTORS,
                              "the soft edge (M+1)^(M+1) / M^M is evaluated exactly")


@cache
def derive_moments() -> Derivation:
    """The moments E[x^k] = binomial((M+1)k, k)/(Mk+1), the algebraic equation of G and the soft edge.

    Premises (free probability): X X^T of one factor is Marchenko-Pastur with ratio 1, whose S-transform is
    S(z) = 1/(1+z); the S-transform of a product of free factors is the product of theirs.
    """
    d = Derivation("Fuss-Catalan moments from the S-transform (Theorem 1)")
    z, u, psi, w = sp.symbols("z u psi w")
    d.step("S-transform of M free Marchenko-Pastur factors:", sp.Eq(sp.Symbol("S_X(z)"), (1 + z) ** (-M)))
    chi = z * (1 + z) ** (-M) / (1 + z)
    d.step("chi = z S(z)/(1+z) is the inverse function of the moment series psi(z) = sum_k m_k z^k:",
           sp.Eq(sp.Symbol("chi(z)"), chi))
    d.step("so psi solves psi = z (1+psi)^(M+1):", sp.Eq(psi, sp.Symbol("z") * (1 + psi) ** (M + 1)),
           name="functional_equation")
    lagrange = sp.binomial((M + 1) * k, k - 1) / k
    d.step("Lagrange inversion, [z^k] psi = (1/k) [u^(k-1)] (1+u)^((M+1)k):", sp.Eq(sp.Symbol("m_k"), lagrange))
    moment = sp.binomial((M + 1) * k, k) / (M * k + 1)
    ratio = sp.gammasimp(sp.expand_func(lagrange / moment))
    if ratio != 1:
        raise RuntimeError(f"Lagrange inversion does not simplify to the Fuss-Catalan numbers: ratio {ratio}")
    d.step("which is the Fuss-Catalan number (the ratio of the two forms simplifies to 1):",
           sp.Eq(sp.Symbol("m_k"), moment), name="moment")
    green = w ** (M + 1) - x * w + x
    d.step("With G(x) = w/x and w = 1 + psi(1/x), the functional equation is the algebraic equation",
           sp.Eq(green, 0, evaluate=False), name="algebraic")
    x_double = sp.solve(sp.diff(green, w), x, simplify=False)[0]
    d.step("The soft edge is where two roots w meet: dP/dw = 0 gives", sp.Eq(x, x_double))
    reduced = sp.factor(sp.powsimp(sp.expand(green.subs(x, x_double)), force=True))
    d.step("and then P = 0 reads", sp.Eq(reduced, 0, evaluate=False))
    w_edge = sp.solve(sp.cancel(reduced / w**M), w, simplify=False)
    if len(w_edge) != 1:
        raise RuntimeError(f"expected one double root of the algebraic equation, got {w_edge}")
    d.step("so w = (M+1)/M and", sp.Eq(sp.Symbol("x_max"), _tidy_powers(x_double.subs(w, w_edge[0]))),
           name="soft_edge")
    d.step("and it grows like e (M+1):", sp.Eq(sp.Symbol("x_max/(M+1)"),
                                                sp.limit((1 + 1 / M) ** M, M, sp.oo)), name="edge_over_m")
    d.result = moment
    return d


@cache
def derive_density() -> Derivation:
    """The parametric density (eqs. 9, 10), its soft and hard edges, and the closed forms for M = 1 and 2."""
    d = Derivation("Fuss-Catalan density: parametric form, edges and closed forms (Theorem 1)")
    x_of = sp.sin((M + 1) * varphi) ** (M + 1) / (sp.sin(varphi) * sp.sin(M * varphi) ** M)
    rho_paper = sp.sin((M + 1) * varphi) * sp.sin(varphi) / (sp.pi * x * sp.sin(M * varphi))
    d.step("Eq. (9):", sp.Eq(x, x_of), name="x_of_phi")
    d.step("Eq. (10):", sp.Eq(sp.Symbol("rho"), rho_paper))
    rho_phi = sp.powsimp(rho_paper.subs(x, x_of), force=True)
    haagerup = sp.sin(varphi) ** 2 * sp.sin(M * varphi) ** (M - 1) / (sp.pi * sp.sin((M + 1) * varphi) ** M)
    if sp.simplify(sp.powsimp(rho_phi / haagerup, force=True)) != 1:
        raise RuntimeError("eq. (10) with x(phi) substituted is not the Haagerup-Moller form")
    d.step("Substituting x(phi) gives the Haagerup-Moller form (used by the kernel):",
           sp.Eq(sp.Symbol("rho(phi)"), haagerup), name="rho_of_phi")
    lead = {sp.sin((M + 1) * varphi): (M + 1) * varphi, sp.sin(M * varphi): M * varphi, sp.sin(varphi): varphi}
    d.step("Soft edge, phi -> 0 (each sine by its argument):",
           sp.Eq(sp.Symbol("x_max"), _tidy_powers(x_of.subs(lead))), name="soft_edge")
    # hard edge: phi = pi/(M+1) - vartheta; sin((M+1)phi) = sin((M+1) vartheta), sin(M phi) = sin(phi0 + M vartheta)
    phi0 = sp.pi / (M + 1)
    near = {sp.sin((M + 1) * varphi): (M + 1) * vartheta, sp.sin(M * varphi): sp.sin(phi0),
            sp.sin(varphi): sp.sin(phi0)}
    x_near = _tidy_powers(x_of.subs(near))
    d.step("Hard edge, phi = pi/(M+1) - vartheta, to leading order in vartheta:", sp.Eq(x, x_near))
    rho_near = _tidy_powers(haagerup.subs(near))
    d.step("and the density there:", sp.Eq(sp.Symbol("rho"), rho_near))
    theta_of_x = sp.solve(sp.Eq(x, x_near), vartheta)
    if len(theta_of_x) != 1:
        raise RuntimeError(f"expected one positive vartheta(x), got {theta_of_x}")
    rho_hard = _tidy_powers(rho_near.subs(vartheta, theta_of_x[0]))
    d.step("Eliminating vartheta: rho ~ c x^(-M/(M+1)), with coefficient", sp.Eq(
        sp.Symbol("c_M"), _tidy_powers(rho_hard * x ** (M / (M + 1)))), name="hard_edge_coefficient")
    d.step("and exponent", sp.Eq(sp.Symbol("d log rho / d log x"), sp.cancel(x * sp.diff(rho_hard, x) / rho_hard)),
           name="hard_edge_exponent")
    # closed forms from the algebraic equation w^(M+1) - x w + x = 0 and rho = |Im w| / (pi x)
    d.step("M = 1: w^2 - x w + x = 0 has Im w = sqrt(4x - x^2)/2 on (0, 4), so rho = |Im w|/(pi x) is "
           "Marchenko-Pastur:", sp.Eq(sp.Symbol("rho_1"), sp.sqrt(4 * x - x**2) / (2 * sp.pi * x)), name="rho_1")
    root = sp.sqrt(x**2 / 4 - x**3 / 27)
    rho_2 = sp.sqrt(3) / (2 * sp.pi * x) * (sp.cbrt(x / 2 + root) - sp.cbrt(x / 2 - root))
    d.step("M = 2: Cardano for w^3 - x w + x = 0 (discriminant x^2/4 - x^3/27 > 0 on (0, 27/4)); the complex roots "
           "have |Im w| = (sqrt(3)/2)(a - b), a, b the real cube roots of x/2 +- sqrt(x^2/4 - x^3/27):",
           sp.Eq(sp.Symbol("rho_2"), rho_2), name="rho_2")
    d.result = haagerup
    return d


@cache
def _closed_form_kernels() -> dict[int, object]:
    d = derive_density()
    return {1: sp.lambdify(x, d["rho_1"], "numpy", cse=True), 2: sp.lambdify(x, d["rho_2"], "numpy", cse=True)}


def closed_form_density(x_values: np.ndarray, m: int) -> np.ndarray:
    """rho_1 (Marchenko-Pastur) or rho_2 (Cardano), lambdified from :func:`derive_density`, on the open support."""
    m = check_factors(m)
    if m not in (1, 2):
        raise ValueError(f"closed forms are derived for M = 1 and M = 2 only, got M = {m}")
    values = check_real_array(x_values, "x", low=0.0, high=soft_edge(m), open_low=True, open_high=True,
                              why="the closed form holds inside the support")
    return _closed_form_kernels()[m](values)


def fuss_catalan_moment(order: int, m: int) -> int:
    """E[x^k] = binomial((M+1)k, k)/(Mk+1), exactly, as an int (k >= 0; the derivation's result)."""
    m = check_factors(m)
    order = check_whole_number(order, "the moment order k", 0, MAX_ORDER,
                               "the exact integer has about k log10(e (M+1)) digits")
    if order == 0:
        return 1
    value = derive_moments()["moment"].subs({k: int(order), M: m})
    if not value.is_Integer:
        raise RuntimeError(f"the Fuss-Catalan moment k={order}, M={m} is not an integer: {value}")
    return int(value)


def soft_edge(m: int) -> float:
    """The right end of the support, (M+1)^(M+1)/M^M (the largest squared singular value)."""
    return float(derive_moments()["soft_edge"].subs(M, check_factors(m)))


def hard_edge(m: int) -> tuple[float, float]:
    """(c, a) with rho(x) ~ c x^a as x -> 0: c = sin(pi/(M+1))/pi, a = -M/(M+1)."""
    d = derive_density()
    m = check_factors(m)
    return float(d["hard_edge_coefficient"].subs(M, m)), float(d["hard_edge_exponent"].subs(M, m))


def _angles(v: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """phi = phi0 expit(v) and sin, cot of (M+1) phi, with phi0 = pi/(M+1).

    (M+1) phi = pi - (M+1) vartheta with vartheta = phi0 expit(-v); the sine and cotangent are taken of whichever
    of phi, vartheta is smaller, so neither edge loses digits to the rounding of pi.
    """
    phi0 = np.pi / (m + 1)
    phi, theta = phi0 * expit(v), phi0 * expit(-v)
    small = np.minimum(phi, theta)
    return phi, np.sin((m + 1) * small), np.where(phi <= theta, 1.0, -1.0) / np.tan((m + 1) * small)


def _log_x(v: np.ndarray, m: int) -> np.ndarray:
    """log x(phi) (eq. 9) at phi = phi0 expit(v)."""
    phi, sin_top, _ = _angles(v, m)
    return (m + 1) * np.log(sin_top) - np.log(np.sin(phi)) - m * np.log(np.sin(m * phi))


def _log_rho(v: np.ndarray, m: int) -> np.ndarray:
    """log rho (the Haagerup-Moller form of eq. 10) at phi = phi0 expit(v)."""
    phi, sin_top, _ = _angles(v, m)
    return 2 * np.log(np.sin(phi)) + (m - 1) * np.log(np.sin(m * phi)) - m * np.log(sin_top) - np.log(np.pi)


def fuss_catalan_density(x_values: np.ndarray, m: int) -> np.ndarray:
    """Theorem 1's density rho(x) of a squared singular value, for any array x and M >= 1.

    x(phi) is decreasing on (0, pi/(M+1)); it is inverted by bisection in v = log(phi/vartheta), in which both
    edges are resolved (phi and vartheta = pi/(M+1) - phi are never computed as a difference). The density is
    the Haagerup-Moller form of :func:`derive_density`, in logs. rho = 0 outside (0, x_max], rho(0) = inf.
    """
    m = check_factors(m)
    values = check_real_array(x_values, "x", empty_ok=True)  # entry by entry: an empty x gives an empty rho
    inside = (values > 0) & (values < soft_edge(m))
    log_target = np.log(np.where(inside, values, 1.0))
    low, high = np.full(values.shape, -64.0), np.full(values.shape, 64.0)
    for _ in range(_BISECTION_STEPS):
        mid = (low + high) / 2
        above = _log_x(mid, m) > log_target  # x decreases in v
        low, high = np.where(above, mid, low), np.where(above, high, mid)
    log_rho = _log_rho((low + high) / 2, m)
    return np.where(inside, np.exp(log_rho), np.where(values == 0, np.inf, 0.0))


def density_moment(order: int, m: int, nodes: int = 600) -> float:
    """E[x^k] by Gauss-Legendre quadrature of the parametric density in v (an independent route to the moments).

    int x^k rho(x) dx = int x(v)^k rho(v) abs(dx/dv) dv with v the logistic variable of
    :func:`fuss_catalan_density`; the integrand decays like exp(-abs(v)) at both ends, so a rule on [-30, 30]
    converges fast (the poles of expit lie at distance pi from the real axis).
    """
    m = check_factors(m)
    order = check_range(order, "the moment order k", 0.0)
    nodes = check_whole_number(nodes, "nodes", 2, MAX_NODES, "Gauss-Legendre nodes in v")
    t, weights = roots_legendre(nodes)
    v = _V_RANGE * t
    phi, _, cot_top = _angles(v, m)
    # d log x / d phi = (M+1)^2 cot((M+1) phi) - cot(phi) - M^2 cot(M phi);  d phi / d v = phi (1 - expit(v))
    dlogx_dphi = (m + 1) ** 2 * cot_top - 1 / np.tan(phi) - m**2 / np.tan(m * phi)
    log_x = _log_x(v, m)
    with np.errstate(over="ignore"):
        integrand = np.exp((order + 1) * log_x + _log_rho(v, m)) * np.abs(dlogx_dphi) * phi * expit(-v)
        moment = float(_V_RANGE * np.sum(weights * integrand))
    return check_finite_result(moment, f"E[x^k] for the moment order k = {order:g} and M = {m}")
