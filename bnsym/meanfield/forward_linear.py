"""The forward linearization at the BSB1 fixed point: how fast Sigma^l -> Sigma* (Yang et al. 2019, Sec. 3, App. F.3).

J = dV_{B_phi}/dSigma at Sigma* is ultrasymmetric, so G J G has the eigenspaces R G, L, M of
:mod:`bnsym.meanfield.ultrasymmetric` (eq. (17), Prop F.14, Lemma F.17: J and G J G share their nonzero eigenvalues).
lambda_G = 0 because V_{B_phi} is scale invariant (eps = 0). Two routes to lambda_L, lambda_M:

* closed form (Thm 6 for ReLU, Thm F.33 for phi positive-homogeneous of degree alpha): differentiate the
  Laplace integral (eq. (11)) at Sigma^G = mu* G; :func:`derive_homogeneous_eigenvalues`;
* spherical (any phi; Lemma F.18, Sec. F.3.1): for Lam in H^G with tr Lam = 0,
      dV{Lam} = (B-1)/(2 B mu*) E[phi(x) phi(x)^T (x^T Lam x)],   x uniform on the BN sphere,
  an ultrasymmetric operator with classes T_{ab|cd} = E[phi(x_a) phi(x_b) x_c x_d]. Since sum_c x_c = 0 and
  |x|^2 = B, the 11 classes are combinations of five moments of two coordinates
  (:func:`derive_class_reduction`); the spherical route integrates those exactly (:func:`sphere_moments`),
  the Gegenbauer route (:mod:`bnsym.meanfield.gegenbauer`) sums them as series.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Mapping

import numpy as np
from scipy.special import ndtri

from ..core.activations import Activation
from ..core.batchnorm import batch_norm
from ..core.derivation import Derivation
from ..core.estimate import Estimate, unresolved_note, within_error
from ..core.geometry import centring, eigen_directions
from ..core.kernels import lambdified
from ..core.lazy import lazy_module
from .forward import default_fixed_point
from .kernels import (
    arccos_kernel,
    arccos_kernel_derivative,
    arccos_kernel_symbolic,
    c_alpha_symbolic,
    phi_kernel,
    phi_kernel_derivative,
)
from .laplace import bn_kernel_laplace, euler_beta
from .sphere import expect_pair_with_error
from .ultrasymmetric import CLASSES, class_symbols, derive_eigenvalues, dos_classes, projected_eigenvalues

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use

optimize = lazy_module("scipy.optimize")

torch = lazy_module("torch")
stats = lazy_module("scipy.stats")

EIGENSPACES = ("G", "L", "M")


def _tidy(expr: sp.Expr) -> sp.Expr:
    """Simplify products of powers and Gamma ratios (B, alpha > 0, so powers of products split)."""
    expr = sp.powsimp(sp.expand_power_base(sp.expand_power_base(expr, force=True), force=True), force=True)
    return sp.factor(sp.simplify(sp.gammasimp(expr)))


def _s_integral(integrand: sp.Expr, power: sp.Expr, decay: sp.Expr) -> sp.Expr:
    """int_0^oo integrand ds for integrand = f * s^(power-1) (1 + 2 mu s)^(-decay), f free of s (Beta integral)."""
    from ..core.symbols import mu, s

    factor = sp.simplify(integrand / (s ** (power - 1) * (1 + 2 * mu * s) ** (-decay)))
    if factor.has(s):
        raise RuntimeError(f"the integrand is not of Beta form in s: left over {factor}")
    beta = (2 * mu) ** (-power) * euler_beta(power, decay - power).rhs  # u = 2 mu s
    return sp.gammasimp(sp.powsimp(factor * beta, force=True))


def _laplace_derivative_factors(d: Derivation) -> tuple[sp.Expr, sp.Expr]:
    """Differentiate the Laplace integrand (eq. (11)) at Sigma^G = mu G + t Lam, Lam in H^G, and integrate over s.

    dV{Lam} = P_1 DV_phi(G){Lam} - P_2 tr(Lam) V_phi(G); returns (P_1, P_2) / kappa_{alpha,B}, functions of mu.
    """
    from ..core.symbols import B, alpha, ell, mu, s, t

    p = mu + t * ell  # an eigenvalue of Sigma^G along an eigenvector of Lam (eigenvalue ell)
    a_eig = sp.simplify(sp.diff(p / (1 + 2 * s * p), t).subs(t, 0))
    d.step("$\\Sigma^G(I + 2s\\Sigma^G)^{-1}$ has eigenvalues $p/(1+2sp)$; along $\\Lambda$ ($p = \\mu + t\\ell$) "
           "they move by", sp.Eq(sp.Derivative(sp.Symbol("A_k"), t), a_eig))
    log_det = sp.simplify(sp.diff(-sp.log(1 + 2 * s * p) / 2, t).subs(t, 0))
    d.step("and $\\log\\det(I + 2s\\Sigma^G)^{-1/2}$ moves by (summed over eigenvalues: "
           "$\\ell \\to \\mathrm{tr}\\,\\Lambda$)", sp.Eq(sp.Derivative(sp.Symbol("log det^(-1/2)"), t), log_det))
    # V_phi is alpha-homogeneous: V_phi(m G) = m^alpha V_phi(G), DV_phi(m G) = m^(alpha-1) DV_phi(G)
    m = mu / (1 + 2 * s * mu)
    prefactor = B**alpha / sp.gamma(alpha) * s ** (alpha - 1) * (1 + 2 * s * mu) ** (-(B - 1) / 2)
    decay = (B - 1) / 2 + alpha + 1
    p1 = _s_integral(prefactor * m ** (alpha - 1) * a_eig / ell, alpha, decay)  # coefficient of DV_phi(G){Lam}
    p2 = _s_integral(-prefactor * m**alpha * log_det / ell, alpha + 1, decay)  # coefficient of -tr(Lam) V_phi(G)
    d.step("Integrating over $s$ (Beta integrals) gives $dV_{\\mathcal{B}_\\phi}\\{\\Lambda\\} = "
           "P_1\\,DV_\\phi(G)\\{\\Lambda\\} - P_2\\,\\mathrm{tr}(\\Lambda)\\,V_\\phi(G)$ with",
           sp.Tuple(sp.Eq(sp.Symbol("P_1"), p1), sp.Eq(sp.Symbol("P_2"), p2)))
    kappa = (B / 2) ** alpha * sp.gamma((B - 1) / 2) / sp.gamma((B - 1) / 2 + alpha)
    r1, r2 = _tidy(p1 / kappa), _tidy(p2 / kappa)
    d.step("In units of $\\kappa_{\\alpha,B} = (B/2)^\\alpha\\Gamma(\\frac{B-1}2)/\\Gamma(\\frac{B-1}2+\\alpha)$, "
           "where $\\Sigma^* = \\kappa V_\\phi(G)$:",
           sp.Tuple(sp.Eq(sp.Symbol("P_1/kappa"), r1), sp.Eq(sp.Symbol("P_2/kappa"), r2)))
    return r1, r2


def _dos_at_g(d: Derivation) -> dict[str, sp.Expr]:
    """DV_phi(G) = DOS(u, v, w) by Price/Stein derivatives of V_phi (Prop E.10), and its projected eigenvalues.

    V_phi(Sigma)_ij = c_alpha (S_ii S_jj)^(alpha/2) J_phi(S_ij / sqrt(S_ii S_jj)), differentiated at G (diagonal
    g, correlation rho); returns {"G", "L", "M"} in g, rho, alpha, J_phi(1), J_phi(rho), J_phi'(rho).
    """
    from ..core.symbols import J1, Jrho, alpha, c, dJrho, g, rho

    sii, sjj, sij = sp.symbols("Sigma_ii Sigma_jj Sigma_ij", positive=True)
    jfun = sp.Function("J_phi")
    v_diag = c_alpha_symbolic(alpha) * sii**alpha * jfun(1)
    v_off = c_alpha_symbolic(alpha) * (sii * sjj) ** (alpha / 2) * jfun(sij / sp.sqrt(sii * sjj))
    d.step("$V_\\phi$ of a positive-homogeneous $\\phi$ (Prop E.10):",
           sp.Tuple(sp.Eq(sp.Symbol("V_ii"), v_diag), sp.Eq(sp.Symbol("V_ij"), v_off)))

    def at_g(expr: sp.Expr) -> sp.Expr:
        expr = expr.doit().subs({sii: g, sjj: g, sij: g * rho})
        expr = sp.simplify(expr.replace(lambda e: isinstance(e, sp.Subs), lambda e: e.doit()))
        replaced = expr.subs({sp.Derivative(jfun(c), c).subs(c, rho): dJrho}).subs({jfun(rho): Jrho, jfun(1): J1})
        return _tidy(sp.simplify(replaced.replace(lambda e: isinstance(e, sp.Subs), lambda e: dJrho)))

    dos_u, dos_v, dos_w = (at_g(sp.diff(expr, var)) for expr, var in ((v_diag, sii), (v_off, sii), (v_off, sij)))
    d.step("$DV_\\phi(G) = \\mathrm{DOS}(u, v, w)$ with the partial derivatives at $G$ (diagonal $(B-1)/B$, "
           "correlation $\\rho = -1/(B-1)$):",
           sp.Tuple(sp.Eq(sp.Symbol("u"), dos_u), sp.Eq(sp.Symbol("v"), dos_v), sp.Eq(sp.Symbol("w"), dos_w)))
    u, v, w = sp.symbols("u v w")
    dos = derive_eigenvalues(dos_classes(u, v, w))
    return {key: dos[key].subs({u: dos_u, v: dos_v, w: dos_w}) for key in EIGENSPACES}


@cache
def derive_homogeneous_eigenvalues() -> Derivation:
    """Thm F.33 (Thm 6 at alpha = 1): lambda_G, lambda_L, lambda_M of G J G for phi of degree alpha.

    Named results "G", "L", "M" in B, alpha and J_phi(1), J_phi(rho), J_phi'(rho), rho = -1/(B-1); "L_first" is
    lambda_L's first term alpha (B-2)/(B-1+2 alpha), the whole of lambda_L when J_phi'(rho) = 0.
    """
    from ..core.symbols import J1, B, Jrho, alpha, dJrho, g, mu, rho

    d = Derivation("Forward eigenvalues of a positive-homogeneous phi (Laplace route)")
    r1, r2 = _laplace_derivative_factors(d)
    dos = _dos_at_g(d)
    mu_star = sp.simplify(c_alpha_symbolic(alpha) * g**alpha * (J1 - Jrho))  # mu* / kappa
    d.step("At the fixed point $\\mu = \\mu^* = \\kappa\\, c_\\alpha g^\\alpha (\\mathcal{J}_\\phi(1) - "
           "\\mathcal{J}_\\phi(\\rho))$ (Thm F.8):", sp.Eq(sp.Symbol("mu^*/kappa"), mu_star))
    scale = r1.subs(mu, 1) / mu_star  # P_1 / mu* with mu* in units of kappa
    at_bsb1 = {g: (B - 1) / B, rho: -1 / (B - 1)}

    def final(expr: sp.Expr) -> sp.Expr:
        return sp.factor(sp.gammasimp(sp.expand_func(_tidy(expr).subs(at_bsb1))))

    lam = {"L": final(scale * dos["L"]), "M": final(scale * dos["M"])}
    # G direction: tr G = B - 1 and G V_phi(G) G = (mu*/kappa) G
    lam["G"] = final(scale * dos["G"] - r2.subs(mu, 1) * (B - 1))
    d.step("$\\mathbb{L}$, $\\mathbb{M}$ are traceless, so only $P_1$ and the projected DOS eigenvalues enter "
           "($\\rho = -1/(B-1)$):",
           sp.Tuple(sp.Eq(sp.Symbol("lambda_L"), lam["L"]), sp.Eq(sp.Symbol("lambda_M"), lam["M"])), name=("L", "M"))
    d.step("The part of $\\lambda_{\\mathbb L}$ without $\\mathcal{J}_\\phi'(\\rho)$:",
           sp.Eq(sp.Symbol("lambda_L|J'=0"), sp.factor(lam["L"].subs(dJrho, 0))), name="L_first")
    d.step("On $\\mathbb{R}G$ ($\\mathrm{tr}\\,G = B-1$, $GV_\\phi(G)G = (\\mu^*/\\kappa)G$) the two terms cancel: "
           "scale invariance", sp.Eq(sp.Symbol("lambda_G"), lam["G"]), name="G")
    return d


def derive_relu_eigenvalues() -> Derivation:
    """Thm 6: ReLU (alpha = 1, J_phi = J_1, J_1(1) = 1) in closed form, and the printed formula read both ways.

    Named results "L", "M" (ours), "printed_L", "printed_M" (the paper's, in its symbol v^*).
    """
    from ..core.symbols import J1, B, Jrho, alpha, c, dJrho, v_star

    d = Derivation("Forward eigenvalues of ReLU (Thm 6)")
    general = derive_homogeneous_eigenvalues()
    j1 = arccos_kernel_symbolic(1)
    rho_b = -1 / (B - 1)
    values = {alpha: 1, J1: 1, Jrho: j1.subs(c, rho_b), dJrho: sp.diff(j1, c).subs(c, rho_b)}
    lam = {key: sp.simplify(general[key].subs(values)) for key in ("L", "M")}
    d.step("Substituting $\\alpha = 1$ and $\\mathcal{J}_1$:",
           sp.Tuple(*(sp.Eq(sp.Symbol(f"lambda_{k}"), v) for k, v in lam.items())), name=tuple(lam))
    ratio = sp.gamma(sp.Rational(3, 2)) * sp.gamma((B + 1) / 2) / sp.gamma((B + 3) / 2)
    printed_m = B / (2 * sp.sqrt(sp.pi) * v_star) * ratio * values[dJrho]
    printed_l = ratio / (2 * sp.sqrt(sp.pi) * v_star) * ((B - 2) * (1 - values[Jrho]) + B / (B - 1) * values[dJrho])
    d.step("The paper's Theorem 6 as printed, in terms of its $v^*$:",
           sp.Tuple(sp.Eq(sp.Symbol("lambda_M^printed"), sp.gammasimp(printed_m)),
                    sp.Eq(sp.Symbol("lambda_L^printed"), sp.gammasimp(printed_l))),
           name=("printed_M", "printed_L"))
    return d


@lambdified()
def _closed_form_kernel():
    """(B, alpha, J_phi(1), J_phi(rho), J_phi'(rho)) -> (lambda_L, lambda_M), lambdified from the derivation."""
    from ..core.symbols import J1, B, Jrho, alpha, dJrho

    lam = derive_homogeneous_eigenvalues()
    return (B, alpha, J1, Jrho, dJrho), (lam["L"], lam["M"])


def _check_closed_form(phi: Activation) -> None:
    """ValueError unless Thm F.33's closed form applies: phi positive-homogeneous of degree alpha > 1/2."""
    if not phi.is_homogeneous:
        raise ValueError(f"the closed form (Thm F.33) needs a positive-homogeneous phi; "
                         f"{phi} is not: use method='spherical'")
    if not phi.degree > 0.5:
        raise ValueError(f"the closed form needs degree alpha > 1/2 (J_alpha' is singular otherwise), "
                         f"got {phi.degree}: use method='spherical'")


def homogeneous_eigenvalues(phi: Activation, batch_size: int | np.ndarray) -> dict[str, Estimate]:
    """{"G", "L", "M"} by Thm F.33, vectorised over B; phi positive-homogeneous of degree alpha > 1/2.

    lambda_G = 0 exactly (scale invariance, the last step of :func:`derive_homogeneous_eigenvalues`). The
    formulas are derived exactly, so the errors are 0: only float64 rounding remains.
    """
    _check_closed_form(phi)
    batch = np.asarray(batch_size, dtype=float)
    rho = -1.0 / (batch - 1)
    lam_l, lam_m = _closed_form_kernel()(batch, phi.degree, phi_kernel(phi, 1.0), phi_kernel(phi, rho),
                                         phi_kernel_derivative(phi, rho))
    values = {"G": np.zeros_like(batch), "L": lam_l, "M": lam_m}
    return {key: Estimate(value, 0.0, "closed_form") for key, value in values.items()}


def _large_batch_taylor(d: Derivation) -> dict[str, sp.Expr]:
    """The B -> oo limits of Thm F.33 and their 1/B terms, in alpha and J_phi, J_phi', J_phi'' at 0 (steps of d)."""
    from ..core.symbols import J0, B, Jrho, d2J0, dJ0, dJrho

    lam = derive_homogeneous_eigenvalues()
    rho_b = -1 / (B - 1)
    taylor = {Jrho: J0 + dJ0 * rho_b + d2J0 * rho_b**2 / 2, dJrho: dJ0 + d2J0 * rho_b}
    d.step("Thm F.33 depends on $B$ directly and through $\\rho = -1/(B-1) \\to 0$; Taylor about 0 (remainders "
           "$O(B^{-3})$, $O(B^{-2})$, below the $1/B$ terms):",
           sp.Tuple(*(sp.Eq(key, value) for key, value in taylor.items())))
    expanded = {key: lam[key].subs(taylor) for key in ("L", "M")}
    limits = {key: sp.factor(sp.limit(value, B, sp.oo)) for key, value in expanded.items()}
    d.step("As $B \\to \\infty$:", sp.Tuple(*(sp.Eq(sp.Limit(sp.Symbol(f"lambda_{key}"), B, sp.oo), value)
                                                 for key, value in limits.items())), name=("L_limit", "M_limit"))
    slopes = {key: sp.factor(sp.limit(B * (expanded[key] - limits[key]), B, sp.oo)) for key in limits}
    d.step("and the next order, $\\lambda_X = \\lambda_X^\\infty + s_X/B + O(B^{-2})$:",
           sp.Tuple(*(sp.Eq(sp.Symbol(f"s_{key}"), value) for key, value in slopes.items())),
           name=("L_slope", "M_slope"))
    return {"L_limit": limits["L"], "M_limit": limits["M"], "L_slope": slopes["L"], "M_slope": slopes["M"]}


def _kernel_at_zero(d: Derivation) -> dict[sp.Symbol, sp.Expr]:
    """J_phi(1) and J_phi, J_phi', J_phi'' at 0 for phi = a rho_alpha(z) - b rho_alpha(-z) (Cor E.19); a step of d."""
    from ..core.symbols import J0, J1, alpha, c, d2J0, dJ0, phi_a, phi_b

    j_alpha = arccos_kernel_symbolic(alpha)
    j_phi = (phi_a**2 + phi_b**2) * j_alpha - 2 * phi_a * phi_b * j_alpha.subs(c, -c)
    values = {J1: phi_a**2 + phi_b**2, J0: j_phi.subs(c, 0), dJ0: sp.diff(j_phi, c).subs(c, 0),
              d2J0: sp.diff(j_phi, c, 2).subs(c, 0)}
    values = {key: sp.factor(sp.gammasimp(sp.simplify(value))) for key, value in values.items()}
    d.step("For $\\phi = a\\rho_\\alpha(z) - b\\rho_\\alpha(-z)$, "
           "$\\mathcal J_\\phi(c) = (a^2+b^2)\\mathcal J_\\alpha(c) - 2ab\\mathcal J_\\alpha(-c)$ (Cor E.19) "
           "with $\\mathcal J_\\alpha$'s hypergeometric form gives",
           sp.Tuple(*(sp.Eq(key, value) for key, value in values.items())),
           name=("J1_ab", "J0_ab", "dJ0_ab", "d2J0_ab"))
    return values


def _gaussian_moment_ratio() -> sp.Expr:
    """(E phi'(z))^2 / Var phi(z), z ~ N(0, 1), for phi = a rho_alpha(z) - b rho_alpha(-z), by direct integration."""
    from ..core.symbols import alpha, phi_a, phi_b

    z_pos = sp.Symbol("z", positive=True)

    def half_moment(power: sp.Expr) -> sp.Expr:  # E[rho_power(z)] = int_0^oo z^power N(z) dz
        return sp.integrate(z_pos**power * sp.exp(-z_pos**2 / 2) / sp.sqrt(2 * sp.pi), (z_pos, 0, sp.oo))

    mean_slope = alpha * (phi_a + phi_b) * half_moment(alpha - 1)
    variance = (phi_a**2 + phi_b**2) * half_moment(2 * alpha) - ((phi_a - phi_b) * half_moment(alpha)) ** 2
    return mean_slope**2 / variance


@cache
def derive_large_batch_limits() -> Derivation:
    """Prop F.34: the B -> oo limits of Thm F.33's lambda_L, lambda_M, with their 1/B terms.

    lambda_L -> alpha and lambda_M -> J_phi'(0) / (J_phi(1) - J_phi(0)) = (E phi')^2 / Var phi (the paper states
    the limits in words; this is their form); lambda_X = lambda_X^oo + s_X / B + O(B^-2). Named results
    "L_limit", "M_limit", "L_slope", "M_slope" (in alpha, J_phi(1) and J_phi, J_phi', J_phi'' at 0); "J1_ab",
    "J0_ab", "dJ0_ab", "d2J0_ab" (those values for phi = a rho_alpha(z) - b rho_alpha(-z)); "L_limit_ab",
    "M_limit_ab"; ReLU's "relu_L_limit", "relu_M_limit" (pi / (2 (pi - 1))), "relu_L_slope", "relu_M_slope".
    """
    from ..core.symbols import alpha, phi_a, phi_b

    d = Derivation("Forward eigenvalues as B -> infinity (Prop F.34)")
    general = _large_batch_taylor(d)
    values = _kernel_at_zero(d)
    in_ab = {key: sp.factor(sp.gammasimp(general[key].subs(values))) for key in ("L_limit", "M_limit")}
    d.step("so, in $\\alpha$, $a$, $b$:", sp.Tuple(*(sp.Eq(sp.Symbol(key), value) for key, value in in_ab.items())),
           name=tuple(f"{key}_ab" for key in in_ab))
    ratio = _gaussian_moment_ratio()
    difference = sp.simplify(sp.gammasimp(ratio - in_ab["M_limit"]))
    if difference != 0:
        raise RuntimeError(f"lambda_M's limit is not (E phi')^2 / Var phi: they differ by {difference}")
    d.step("Integrating against $\\mathcal N(0, 1)$ directly, $(\\mathbb E\\phi')^2/\\mathrm{Var}\\,\\phi$ is "
           "the same (Prop F.34's form; the difference simplifies to 0):",
           sp.Eq(sp.Symbol("(E phi')^2/Var phi"), sp.factor(sp.gammasimp(ratio))))
    relu = {f"relu_{key}": sp.factor(sp.simplify(value.subs(values).subs({alpha: 1, phi_a: 1, phi_b: 0})))
            for key, value in general.items()}
    d.step("ReLU ($\\alpha = 1$, $a = 1$, $b = 0$):",
           sp.Tuple(*(sp.Eq(sp.Symbol(key), value) for key, value in relu.items())), name=tuple(relu))
    return d


@lambdified()
def _large_batch_kernel():
    """(alpha, a, b) -> (lambda_L^oo, s_L, lambda_M^oo, s_M), lambdified from :func:`derive_large_batch_limits`."""
    from ..core.symbols import J0, J1, alpha, d2J0, dJ0, phi_a, phi_b

    d = derive_large_batch_limits()
    values = {symbol: d[f"{name}_ab"] for symbol, name in ((J1, "J1"), (J0, "J0"), (dJ0, "dJ0"), (d2J0, "d2J0"))}
    return (alpha, phi_a, phi_b), tuple(d[key].subs(values) for key in ("L_limit", "L_slope", "M_limit", "M_slope"))


def large_batch_eigenvalues(phi: Activation) -> dict[str, float]:
    """Prop F.34 for phi positive-homogeneous of degree alpha > 1/2: {"L", "M"} the B -> oo limits of Thm F.33's
    eigenvalues (alpha and (E phi')^2 / Var phi) and {"L_slope", "M_slope"} their 1/B terms s_X,
    lambda_X(B) = lambda_X^oo + s_X / B + O(B^-2) (:func:`derive_large_batch_limits`)."""
    _check_closed_form(phi)
    a, b = phi.ab
    values = _large_batch_kernel()(float(phi.degree), a, b)
    return {key: float(value) for key, value in zip(("L", "L_slope", "M", "M_slope"), values)}


def relu_power_eigenvalues(alpha_values: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(lambda_L, lambda_M) of relu^alpha (J_phi = J_alpha) vectorised over alpha > 1/2 (Thm F.33)."""
    alphas = np.asarray(alpha_values, dtype=float)
    rho = -1.0 / (batch_size - 1)
    j_rho = np.array([arccos_kernel(a, rho) for a in alphas.ravel()]).reshape(alphas.shape)
    dj_rho = np.array([arccos_kernel_derivative(a, rho) for a in alphas.ravel()]).reshape(alphas.shape)
    lam_l, lam_m = _closed_form_kernel()(float(batch_size), alphas, 1.0, j_rho, dj_rho)
    return np.asarray(lam_l, dtype=float), np.asarray(lam_m, dtype=float)


def derive_class_reduction() -> Derivation:
    """The 11 classes of T_{ab|cd} = E[phi(x_a) phi(x_b) x_c x_d] from one- and two-coordinate moments.

    The BN output satisfies sum_c x_c = 0 and |x|^2 = B, and its coordinates are exchangeable; multiplying
    these constraints by phi_1^2, phi_1^2 x_1, phi_1 phi_2 or phi_1 phi_2 x_1 and taking expectations gives one
    linear equation per class that involves a third coordinate.
    """
    from ..core.symbols import P00, P11, P20, S0, S2, B

    T = class_symbols()
    d = Derivation("Moments of the batch-norm output that reach beyond two coordinates")
    known = {T["11|11"]: S2, T["12|11"]: P20, T["12|12"]: P11, T["12|21"]: P11}
    d.step("By definition (and $x_1 x_2 = x_2 x_1$)", sp.Eq(sp.Matrix([T["11|11"], T["12|11"], T["12|12"], T["12|21"]]),
                                                         sp.Matrix([S2, P20, P11, P11]), evaluate=False))
    equations = [
        ("$E[\\phi_1^2 x_1 \\sum_c x_c] = 0$", sp.Eq(S2 + (B - 1) * T["11|12"], 0)),
        ("$E[\\phi_1^2 |x|^2] = B\\,E[\\phi_1^2]$", sp.Eq(S2 + (B - 1) * T["11|22"], B * S0)),
        ("$E[\\phi_1^2 (\\sum_c x_c)^2] = 0$",
         sp.Eq(B * S0 + 2 * (B - 1) * T["11|12"] + (B - 1) * (B - 2) * T["11|23"], 0)),
        ("$E[\\phi_1\\phi_2 x_1 \\sum_c x_c] = 0$", sp.Eq(P20 + P11 + (B - 2) * T["12|13"], 0)),
        ("$E[\\phi_1\\phi_2 |x|^2] = B\\,E[\\phi_1\\phi_2]$", sp.Eq(2 * P20 + (B - 2) * T["12|33"], B * P00)),
        ("$E[\\phi_1\\phi_2 (\\sum_c x_c)^2] = 0$",
         sp.Eq(B * P00 + 2 * P11 + 2 * (B - 2) * (T["12|13"] + T["12|23"]) + (B - 2) * (B - 3) * T["12|34"], 0)),
        ("exchanging coordinates 1 and 2", sp.Eq(T["12|23"], T["12|13"])),
    ]
    for text, equation in equations:
        d.step(text + ":", equation)
    unknowns = [T[name] for name in ("11|12", "11|22", "11|23", "12|13", "12|23", "12|33", "12|34")]
    solution = sp.solve([eq for _, eq in equations], unknowns, dict=True)[0]
    solution.update(known)
    d.result = {name: sp.factor(solution[T[name]]) for name in CLASSES}
    d.step("Solving:", sp.Eq(sp.Matrix([T[name] for name in CLASSES]), sp.Matrix([d.result[name] for name in CLASSES]),
                             evaluate=False))
    return d


@dataclass(frozen=True)
class ForwardMoments:
    """The five moments of two BN coordinates that fix the forward Jacobian at the BSB1 point (R7 with
    :func:`derive_class_reduction`): s0 = E[phi_1^2], s2 = E[phi_1^2 x_1^2], p00 = E[phi_1 phi_2],
    p20 = E[phi_1 x_1^2 phi_2], p11 = E[phi_1 x_1 phi_2 x_2]. ``errors`` bounds each (same order)."""

    s0: float
    s2: float
    p00: float
    p20: float
    p11: float
    errors: tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0)

    @property
    def vector(self) -> np.ndarray:
        return np.array([self.s0, self.s2, self.p00, self.p20, self.p11])

    @property
    def mu(self) -> float:
        """mu* = q* (1 - c*) = E[phi_1^2] - E[phi_1 phi_2]."""
        return self.s0 - self.p00


@lambdified()
def _class_reduction():
    """Each of the 11 classes as a function of (B, s0, s2, p00, p20, p11) (:func:`derive_class_reduction`)."""
    from ..core.symbols import P00, P11, P20, S0, S2, B

    return {name: ((B, S0, S2, P00, P20, P11), expr) for name, expr in derive_class_reduction().result.items()}


@cache
def moment_weights(batch_size: int) -> dict[str, np.ndarray]:
    """lambda_X mu* = sum_k w_Xk m_k (+ the tr(Lam) term for G) for m = (s0, s2, p00, p20, p11): R7 is linear in
    the moments, so the weights are the images of the unit moment vectors under (B-1)/(2B) x (projected
    ultrasymmetric eigenvalue, Thm E.62)."""
    weights = {"G": np.zeros(5), "L": np.zeros(5), "M": np.zeros(5)}
    for k, unit in enumerate(np.eye(5)):
        classes = {name: float(f(batch_size, *unit)) for name, f in _class_reduction().items()}
        eigen = projected_eigenvalues(classes, batch_size)
        for key in weights:
            weights[key][k] = (batch_size - 1) * eigen[key] / (2 * batch_size)
    return weights


def forward_eigenvalues_from_moments(moments: ForwardMoments,
                                     batch_size: int) -> tuple[dict[str, float], dict[str, float]]:
    """lambda_G, lambda_L, lambda_M = (B-1)/(2 B mu*) x (projected eigenvalues of T) (R7), and error bounds.

    lambda_G carries the extra term -(B-1)/2 of tr(Lam) Sigma*; theory says it is 0, so its computed value
    checks the moments. Errors: sum_k |w_Xk| err_k / mu* plus the effect of the error of mu* = s0 - p00.
    """
    m, err = moments.vector, np.abs(np.array(moments.errors))
    mu, mu_err = moments.mu, err[0] + err[2]
    values, errors = {}, {}
    for key, w in moment_weights(batch_size).items():
        scaled = float(w @ m) / mu
        values[key] = scaled - (batch_size - 1) / 2 if key == "G" else scaled
        errors[key] = float(np.abs(w) @ err) / mu + abs(scaled) * mu_err / mu
    return values, errors


def sphere_moments(phi: Activation, batch_size: int, n: int = 64) -> ForwardMoments:
    """The five moments of :class:`ForwardMoments` by the exact pair quadrature on the BN sphere (any phi)."""
    f = phi.numpy
    integrands = (lambda u, v: f(u) ** 2, lambda u, v: (f(u) * u) ** 2, lambda u, v: f(u) * f(v),
                  lambda u, v: f(u) * u * u * f(v), lambda u, v: f(u) * u * f(v) * v)
    values, errors = zip(*(expect_pair_with_error(g, batch_size, phi.kinks, n) for g in integrands))
    return ForwardMoments(*values, errors=tuple(errors))


def spherical_eigenvalues(phi: Activation, batch_size: int, n: int = 64) -> dict[str, Estimate]:
    """{"G", "L", "M"}: the eigenvalues of G J G by spherical integration (any phi, eps = 0), with error bounds.

    The 11 classes reduce to five pair moments (:func:`derive_class_reduction`), each an exact 2-D quadrature.
    lambda_G is returned as computed (theory: 0), a check of the quadrature.
    """
    values, errors = forward_eigenvalues_from_moments(sphere_moments(phi, batch_size, n), batch_size)
    return {key: Estimate(values[key], errors[key], "spherical") for key in values}


def finite_difference_eigenvalues(phi: Activation, batch_size: int, step: float = 1e-4, n_points: int = 2**14,
                                  n_replicates: int = 16, seed: int = 0) -> dict[str, Estimate]:
    """<Lam_X, (V(Sigma* + h Lam_X) - V(Sigma* - h Lam_X)) / 2h> for unit Lam_X, X in {"G", "L", "M"}.

    Positive-homogeneous phi: the Laplace kernel (error = truncation h^2 estimate from h and 2h plus
    quadrature error / h). Other phi: randomised QMC with common random numbers, h = L(Sigma) z with the
    Cholesky factor L (smooth in Sigma) and the same scrambled points at +h and -h; error = standard error
    of the difference quotient over independent scramblings.
    """
    sigma = default_fixed_point(phi, batch_size).matrix
    directions = eigen_directions(batch_size)
    results = {}
    for key, lam in directions.items():
        if phi.is_homogeneous:
            def quotient(h):
                (plus, e1), (minus, e2) = (bn_kernel_laplace(phi, sigma + sgn * h * lam) for sgn in (1, -1))
                return float(np.sum(lam * (plus - minus)) / (2 * h)), float((np.abs(e1).max() + np.abs(e2).max()) / h)
            value, quad_error = quotient(step)
            coarse, _ = quotient(2 * step)
            results[key] = Estimate(value, abs(coarse - value) / 3 + batch_size * quad_error, "finite_differences")
        else:
            estimates = _crn_quotients(phi, sigma, lam, step, n_points, n_replicates, seed)
            error = estimates.std(ddof=1) / np.sqrt(n_replicates)
            results[key] = Estimate(estimates.mean(), error, "finite_differences")
    return results


def _crn_quotients(phi: Activation, sigma: np.ndarray, lam: np.ndarray, step: float, n_points: int,
                   n_replicates: int, seed: int) -> np.ndarray:
    """Difference quotients of <Lam, V_{B_phi}> along Lam, one per scrambling, with common random numbers."""
    batch = sigma.shape[0]
    g = centring(batch)
    factors = [np.linalg.cholesky(sigma + sgn * step * lam) for sgn in (1, -1)]
    rng = np.random.default_rng(seed)
    quotients = []
    for _ in range(n_replicates):
        z = ndtri(stats.qmc.Sobol(d=batch, scramble=True, seed=rng).random(n_points))
        values = []
        for factor in factors:
            y = z @ factor.T @ g
            x = phi.numpy(batch_norm(torch.from_numpy(y), centre=False).numpy())  # y = G h is centred
            values.append(np.einsum("na,ab,nb->n", x, lam, x).mean())
        quotients.append((values[0] - values[1]) / (2 * step))
    return np.array(quotients)


def alpha_transition_value(batch_size: int, alpha_max: float = 40.0) -> float | None:
    """alpha*(B): the smallest alpha where max(lambda_L, lambda_M) of relu^alpha reaches 1 (None if below alpha_max)."""
    grid = np.linspace(0.55, alpha_max, 800)
    lam_l, lam_m = relu_power_eigenvalues(grid, batch_size)
    excess = np.maximum(lam_l, lam_m) - 1
    above = np.nonzero(excess > 0)[0]
    if above.size == 0:
        return None
    k = above[0]
    if k == 0:
        raise ValueError(f"BSB1 is already unstable at alpha = {grid[0]} for B = {batch_size}")

    def f(a: float) -> float:
        lam_l, lam_m = relu_power_eigenvalues(np.array([a]), batch_size)
        return float(max(lam_l[0], lam_m[0]) - 1)

    return float(optimize.brentq(f, grid[k - 1], grid[k], xtol=1e-12, rtol=1e-14))


def depth_scales(eigenvalues: Mapping[str, float | Estimate]) -> dict[str, Estimate]:
    """xi_X = -1/log abs(lambda_X) (eq. (17)): layers for a perturbation along X to shrink by a factor e.

    0 where lambda_X = 0 (reset in one layer); inf where abs(lambda_X) >= 1 (no convergence along X) or is within
    its error of 1 (:func:`~bnsym.core.estimate.within_error`: -1/log would be rounding noise; the ``note`` says
    so). A plain float counts as exact up to rounding. A negative eigenvalue decays with alternating sign.
    """
    def shrink_scale(size: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return -1 / np.log(size)  # 0 at size 0

    scales = {}
    for key, lam in eigenvalues.items():
        lam = lam if isinstance(lam, Estimate) else Estimate(lam, 0.0, "value")
        size, error = np.abs(lam.value), np.asarray(lam.error)
        unresolved = within_error(Estimate(size, error, lam.method), 1.0)
        stays = unresolved | (size + error >= 1)  # the interval of abs(lambda_X) reaches 1
        value = np.where(unresolved | (size >= 1), np.inf, shrink_scale(np.minimum(size, 1.0)))
        change = np.maximum(*(np.abs(shrink_scale(np.clip(end, 0.0, 1.0)) - value)
                              for end in (size - error, size + error)))
        scales[key] = Estimate(value, np.where(stays, np.inf, change), lam.method,
                               unresolved_note(f"abs(lambda_{key})", 1.0, unresolved, lam))
    return scales
