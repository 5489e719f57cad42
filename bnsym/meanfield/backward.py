"""Gradient propagation through batch-normalised networks (Yang et al. 2019, Sec. 3.2, App. G, App. L).

Back-propagation through layer l maps the gradient covariance Pi^l = E[delta^l delta^l^T] (B x B) by
the backward operator (eqs 21-23, gradient independence assumed)

    Pi^{l-1} = E[J_h^T Pi^l J_h],   h ~ N(0, Sigma*),   J_h = d B_phi(h) / dh = sqrt(B)/r D (G - v v^T),

with y = G h, r = |y|, v = y / r and D = diag(phi'(sqrt(B) v)). At the BSB1 fixed point the operator is
ultrasymmetric; on the zero-row-sum matrices its eigenspaces are R G, L and M, and the largest
eigenvalue lambda_G is the rate at which squared gradient norms grow per layer towards the input.

Routes implemented here (each derived in SymPy below, evaluated numerically):

* spherical (any phi; Thm 7): lambda_G = E_pair[(B-1-x_1^2) phi'_1^2 + (1 + x_1 x_2) phi'_1 phi'_2] / (mu* (B-3));
* closed form (degree-alpha positive-homogeneous phi, alpha > 1/2; Thm 8), vectorised over B;
* the whole operator for any phi: its 11 ultrasymmetric entries reduce, by exchangeability of the
  coordinates of the BN output, to expectations over two coordinates (exact quadrature), giving
  lambda_G, lambda_L and lambda_M.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ..core.activations import Activation
from ..core.derivation import Derivation
from ..core.estimate import Estimate, unresolved_note, within_error
from ..core.kernels import lambdified
from ..core.lazy import lazy_module
from ..core.quadrature import chi2_rule
from .forward import default_fixed_point, derive_bsb1_constant
from .gegenbauer import expect_pair_polynomial
from .kernels import arccos_kernel_symbolic, c_alpha_symbolic, phi_kernel, phi_kernel_derivative
from .sphere import expect_pair_with_error
from .ultrasymmetric import (
    CLASSES,
    class_indices,
    derive_eigenvalues,
    projected_eigenvalue_errors,
    projected_eigenvalues,
)

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use

MAX_TRAINABLE_DEPTH_FACTOR = 16  # the paper's prediction of the deepest trainable network: 16 xi (Sec. 4, Fig 3)
N_RADIAL_BACKWARD = 24  # Gauss nodes of the radial rule for the eps > 0 operator; the error compares with half


def shrink_symbol() -> sp.Symbol:
    """tau = |y|^2 / (|y|^2 + B eps): the radial shrink of the BN output (eps > 0)."""
    return sp.Symbol("tau", positive=True)


# ----------------------------------------------------------------------------------------------- derivations


def derive_bn_jacobian(batch_size: int = 4) -> Derivation:
    """J_h = sqrt(B)/r D (G - v v^T) for B_phi(h) = phi(sqrt(B) G h / |G h|), checked entrywise in SymPy at one B."""
    d = Derivation("The Jacobian of batch norm followed by phi")
    h = sp.Matrix(sp.symbols(f"h1:{batch_size + 1}", real=True))
    f = sp.Function("phi")
    g = sp.eye(batch_size) - sp.ones(batch_size, batch_size) / batch_size
    y = g * h
    r = sp.sqrt((y.T * y)[0])
    x = sp.sqrt(batch_size) * y / r
    out = x.applyfunc(f)
    jac = out.jacobian(h)
    v = y / r
    dphi = sp.diag(*[sp.Subs(sp.Derivative(f(sp.Symbol("u")), sp.Symbol("u")), sp.Symbol("u"), xi) for xi in x])
    claimed = sp.sqrt(batch_size) / r * dphi * (g - v * v.T)
    residual = sp.simplify((jac - claimed).doit())
    d.step(f"Chain rule through $n(y) = \\sqrt{{B}}\\,y/|y|$, $y = Gh$: "
           f"$\\partial n/\\partial y = (\\sqrt B/r)(I - vv^T)$, hence "
           f"(checked entrywise at $B = {batch_size}$, residual $J_h - \\sqrt B r^{{-1}} D(G - vv^T)$):",
           sp.Eq(sp.Symbol("residual"), residual, evaluate=False))
    d.result = residual
    return d


def derive_trace_identity() -> Derivation:
    """lambda_G = tr E[J^T G J]/(B - 1) as an expectation over two BN coordinates (Thm 7, eq. 24)."""
    from ..core.symbols import M11, M12, N11, N12, B, mu_star

    d = Derivation("The gradient explosion rate as a two-coordinate expectation")
    d.step("Eigenvalue on $\\mathbb{R}G$ (Rayleigh quotient, $\\langle G, G\\rangle = B-1$, $JG = J$):",
           sp.Eq(sp.Symbol("lambda_G"), sp.Symbol("E tr(J^T G J)") / (B - 1)))
    d.step("$P = G - vv^T$ is a projector, so $\\mathrm{tr}(P D G D P) = \\mathrm{tr}(DGDG) - v^T D G D v$ with",
           sp.Eq(sp.Symbol("tr(DGDG)"), sp.Symbol("sum_ab D_a D_b G_ab^2")))
    # exchangeable coordinates: B diagonal terms, B(B-1) off-diagonal terms; v = x / sqrt(B)
    trace_dgdg = B * ((B - 1) / B) ** 2 * M11 + B * (B - 1) / B**2 * M12
    quadratic = N11 - (B * N11 + B * (B - 1) * N12) / B**2  # E[v^T D^2 v] - E[(v^T D 1)^2] / B
    expected_trace = sp.factor(sp.expand(trace_dgdg - quadratic))
    d.step("Averaging over the exchangeable coordinates of $x = \\sqrt B v$ "
           "($B$ equal diagonal, $B(B-1)$ equal off-diagonal terms):",
           sp.Eq(sp.Symbol("E_v tr(P D G D P)"), expected_trace))
    inverse_r2 = 1 / (mu_star * (B - 3))
    d.step("$r^2 = |Gh|^2 \\sim \\mu^* \\chi^2_{B-1}$ independent of $v$, so (finite only for $B \\geq 4$)",
           sp.Eq(sp.Symbol("E[1/r^2]"), inverse_r2))
    rate = sp.factor(B * inverse_r2 * expected_trace / (B - 1))
    d.step("Collecting, $\\lambda_G = B\\,E[r^{-2}]\\,E_v[\\ldots]/(B-1)$:", sp.Eq(sp.Symbol("lambda_G"), rate))
    d.result = rate
    return d


def cancel_gammas(expr: sp.Expr) -> sp.Expr:
    """Rewrite Gamma(x + n) = (x)_n Gamma(x) for Gammas whose arguments differ by a positive integer n, then cancel."""
    from ..core.symbols import B

    gammas = sorted(expr.atoms(sp.gamma), key=sp.default_sort_key)
    for high in gammas:
        for low in gammas:
            shift = sp.simplify(high.args[0] - low.args[0])
            if shift.is_Integer and shift > 0:
                expr = expr.subs(high, sp.expand_func(sp.rf(low.args[0], shift)) * low)
    beta = sp.Symbol("beta", positive=True)  # B = beta + 3 > 3 lets (B-1)^a (B-1)^-a cancel
    expr = sp.powsimp(sp.expand_power_base(expr.subs(B, beta + 3), force=True), force=True)
    return sp.factor(sp.cancel(sp.powsimp(expr, force=True)).subs(beta, B - 3))


def _sphere_moment(gaussian_moment: sp.Expr, degree: sp.Expr) -> sp.Expr:
    """E[f(x)] on the BN sphere for f homogeneous of the given degree: B^(k/2) E[f(y)] / E|y|^k, y ~ N(0, G)."""
    from ..core.symbols import B

    # E|y|^k, |y|^2 ~ chi^2_{B-1}
    norm_moment = 2 ** (degree / 2) * sp.gamma((B - 1 + degree) / 2) / sp.gamma((B - 1) / 2)
    return B ** (degree / 2) * gaussian_moment / norm_moment


def paper_homogeneous_rate() -> sp.Expr:
    """Thm 8 (eq. 25) as printed, alpha the degree of homogeneity and J = J_phi (catalogue R12)."""
    from ..core.symbols import J1, B, Jrho, alpha, dJrho

    return ((B - 3 + 2 * alpha) * ((2 * alpha - 1) * dJrho + alpha**2 * (B - 1) * J1)
            / ((2 * alpha - 1) * (B - 3) * (B - 1) * (J1 - Jrho)) - alpha**2 / (B - 3))


@cache
def derive_homogeneous_rate() -> Derivation:
    """Thm 8 from Thm 7 by homogeneity: every sphere moment is a Gaussian moment over a chi moment."""
    from ..core.symbols import J1, M11, M12, N11, N12, B, Jrho, alpha, dJrho, mu_star

    d = Derivation("Thm 8: the rate for a degree-alpha positive-homogeneous phi")
    cst = c_alpha_symbolic(alpha)
    g = (B - 1) / B  # the diagonal of G; its off-diagonal correlation is rho = -1/(B-1)
    d.step("On the sphere $x = \\sqrt B\\,y/|y|$ with $y \\sim \\mathcal N(0, G)$ independent of $|y|$, "
           "so for $f$ homogeneous of degree $k$:",
           sp.Eq(sp.Symbol("E_sphere f"), _sphere_moment(sp.Symbol("E_N f(y)"), sp.Symbol("k"))))
    u1, u2 = sp.symbols("Sigma_11 Sigma_12", positive=True)
    kernel = cst * u1**alpha * sp.Function("J_phi")(u2 / u1)
    price = sp.simplify(sp.diff(kernel, u2))
    d.step("Price's theorem $E[\\phi'(y_1)\\phi'(y_2)] = \\partial V_\\phi/\\partial\\Sigma_{12}$ "
           "with $V_\\phi = c_\\alpha\\Sigma_{11}^\\alpha\\mathcal J_\\phi(\\Sigma_{12}/\\Sigma_{11})$:",
           sp.Eq(sp.Symbol("E[phi'(y_1) phi'(y_2)]"), price))
    d.step("Euler's identity $y\\phi'(y) = \\alpha\\phi(y)$ turns the degree-$2\\alpha$ terms into $V_\\phi$, "
           "and the ladder "
           "$(2\\alpha-1)\\mathcal J_\\alpha' = \\alpha^2\\mathcal J_{\\alpha-1}$ gives at $c = 1$:",
           sp.Eq(sp.Symbol("J'_phi(1)"), alpha**2 / (2 * alpha - 1) * J1))
    m11 = _sphere_moment(cst * g ** (alpha - 1) * alpha**2 / (2 * alpha - 1) * J1, 2 * alpha - 2)
    m12 = _sphere_moment(cst * g ** (alpha - 1) * dJrho, 2 * alpha - 2)
    n11 = _sphere_moment(alpha**2 * cst * g**alpha * J1, 2 * alpha)
    n12 = _sphere_moment(alpha**2 * cst * g**alpha * Jrho, 2 * alpha)
    mu = derive_bsb1_constant().result * (J1 - Jrho)
    d.step("The fixed point's $\\mu^* = K_{\\alpha,B}(\\mathcal J_\\phi(1) - \\mathcal J_\\phi(\\rho))$ (chapter 1):",
           sp.Eq(sp.Symbol("mu^*"), mu))
    trace = derive_trace_identity()
    rate = trace.result.subs({M11: m11, M12: m12, N11: n11, N12: n12, mu_star: mu})
    rate = cancel_gammas(rate)
    d.step("Substituting into Thm 7, the Gamma functions cancel to a rational function:",
           sp.Eq(sp.Symbol("lambda_G"), rate))
    gap = sp.simplify(rate - paper_homogeneous_rate())
    d.step("Minus the paper's eq. (25):", sp.Eq(sp.Symbol("lambda_G - lambda_G^paper"), gap), name="minus_paper")
    d.result = rate
    return d


def _for_b_above_three(expr: sp.Expr) -> sp.Expr:
    """Simplify using B > 3 (B = beta + 3, beta > 0), so that e.g. sqrt((B-2)/(B-1)^2) = sqrt(B-2)/(B-1)."""
    from ..core.symbols import B

    beta = sp.Symbol("beta", positive=True)
    expr = sp.simplify(sp.simplify(expr.subs(B, beta + 3)).subs(beta, B - 3))
    expr = expr.replace(lambda e: isinstance(e, sp.acos) and e.args[0].could_extract_minus_sign(),
                        lambda e: sp.pi - sp.acos(-e.args[0]))  # acos(-x) = pi - acos(x)
    roots = {p: sp.sqrt(sp.factor(sp.expand(p.base))) for p in expr.atoms(sp.Pow) if p.exp == sp.Rational(1, 2)}
    return sp.simplify(expr.xreplace(roots))


def _collect_terms(expr: sp.Expr, atoms: list[sp.Expr]) -> sp.Expr:
    """Numerator and denominator as sums of factored coefficients times the given atoms (display only)."""
    def tidy(part):
        groups = sp.collect(sp.expand(part), atoms, evaluate=False)
        return sp.factor_terms(sum(sp.factor(v) * k for k, v in groups.items()))
    numerator, denominator = sp.fraction(sp.together(expr))
    return tidy(numerator) / tidy(denominator)


def _relu_pieces() -> tuple[sp.Expr, sp.Expr]:
    from ..core.symbols import B, c

    kernel = arccos_kernel_symbolic(1)
    rho = -1 / (B - 1)
    return sp.simplify(kernel.subs(c, rho)), sp.simplify(sp.diff(kernel, c).subs(c, rho))


@cache
def derive_relu_rate() -> Derivation:
    """ReLU (alpha = 1, J_phi = J_1) simplified, and its B -> oo limit (the last step)."""
    from ..core.symbols import J1, B, Jrho, alpha, dJrho

    d = Derivation("ReLU")
    j_rho, j_prime = _relu_pieces()
    relu = _for_b_above_three(derive_homogeneous_rate().result.subs({alpha: 1, J1: 1, Jrho: j_rho, dJrho: j_prime}))
    relu = _collect_terms(relu, [sp.acos(1 / (B - 1)), sp.sqrt(B) * sp.sqrt(B - 2)])
    d.step("ReLU: $\\alpha = 1$, $\\mathcal J_\\phi = \\mathcal J_1$, $\\rho = -1/(B-1)$:",
           sp.Eq(sp.Symbol("lambda_G^relu"), relu))
    d.step("As $B \\to \\infty$:", sp.Eq(sp.Limit(sp.Symbol("lambda_G^relu"), B, sp.oo), sp.limit(relu, B, sp.oo)),
           name="limit")
    d.result = relu
    return d


@cache
def derive_linear_rate() -> Derivation:
    """The linear network: J_id(c) = 2c, rate (B-2)/(B-3), and its B -> oo limit (the last step)."""
    from ..core.symbols import J1, B, Jrho, alpha, c, dJrho

    d = Derivation("The linear network")
    kernel = arccos_kernel_symbolic(1)
    j_identity = sp.simplify((2 * kernel - 2 * kernel.subs(c, -c)).subs(sp.acos(-c), sp.pi - sp.acos(c)))
    d.step("Identity: $\\phi = \\rho_1(z) - \\rho_1(-z)$, "
           "so $\\mathcal J_{id}(c) = 2\\mathcal J_1(c) - 2\\mathcal J_1(-c)$ =",
           sp.Eq(sp.Symbol("J_id(c)"), j_identity))
    rho = -1 / (B - 1)
    linear = sp.factor(_for_b_above_three(derive_homogeneous_rate().result.subs(
        {alpha: 1, J1: j_identity.subs(c, 1), Jrho: j_identity.subs(c, rho),
         dJrho: sp.diff(j_identity, c).subs(c, rho)})))
    d.step("so the linear network's rate is", sp.Eq(sp.Symbol("lambda_G^id"), linear))
    d.step("which tends to", sp.Eq(sp.Limit(sp.Symbol("lambda_G^id"), B, sp.oo), sp.limit(linear, B, sp.oo)),
           name="limit")
    d.result = linear
    return d


# ------------------------------------------------------------------------------------------------- numerics


@lambdified()
def _closed_form_kernel():
    """lambda_G(alpha, B, J_phi(1), J_phi(rho), J_phi'(rho)) lambdified from :func:`derive_homogeneous_rate`."""
    from ..core.symbols import J1, B, Jrho, alpha, dJrho

    return (alpha, B, J1, Jrho, dJrho), derive_homogeneous_rate().result


def rate_closed_form(phi: Activation, batch_size: int | np.ndarray) -> Estimate:
    """Thm 8, vectorised over B: lambda_G for degree-alpha positive-homogeneous phi with alpha > 1/2.

    The formula is derived exactly (:func:`derive_homogeneous_rate`), so its error is 0: only float64
    rounding remains (a few ulp, checked against the exact SymPy value in the tests).
    """
    if not phi.is_homogeneous:
        raise ValueError(f"the closed form (Thm 8) needs a positive-homogeneous phi "
                         f"(relu, relu^alpha, leaky_relu, identity); {phi} is not")
    check_finite_rate(phi)
    batch = np.asarray(batch_size, dtype=float)
    rho = -1.0 / (batch - 1)
    value = _closed_form_kernel()(phi.degree, batch, float(phi_kernel(phi, 1.0)), phi_kernel(phi, rho),
                                  phi_kernel_derivative(phi, rho))
    return Estimate(value, 0.0, "closed_form")


def check_finite_rate(phi: Activation) -> None:
    """A positive-homogeneous phi of degree alpha <= 1/2 has E[phi'(x)^2] = infinity: no finite rate."""
    if phi.is_homogeneous and not phi.degree > 0.5:
        raise ValueError(f"the gradient rate is infinite for degree alpha <= 1/2 (E[phi'^2] diverges at 0); "
                         f"{phi} has alpha = {phi.degree:g}")


def rate_spherical(phi: Activation, batch_size: int, n: int = 64) -> Estimate:
    """Thm 7 by exact quadrature over two BN coordinates: lambda_G and its error estimate."""
    check_finite_rate(phi)
    dphi = phi.numpy_derivative

    def integrand(x1, x2):
        d1, d2 = dphi(x1), dphi(x2)
        return (batch_size - 1 - x1 * x1) * d1 * d1 + (1 + x1 * x2) * d1 * d2

    point = default_fixed_point(phi, batch_size)
    value, error = expect_pair_with_error(integrand, batch_size, phi.kinks, n)
    scale = point.mu * (batch_size - 3)
    return Estimate(value / scale, (error + abs(value) * point.error / point.mu) / scale, "spherical")


# ------------------------------------------------------------------- the whole backward operator, any phi


@cache
def derive_class_integrand(name: str, shrunk: bool = False) -> sp.Expr:
    """E_v[phi'(x_k) phi'(x_l) P_ki P_lj] = E[phi'(x_1) phi'(x_2) f(x_1, x_2)]: returns f, P = G - v v^T, x = sqrt(B) v.

    Given the coordinates (x_k, x_l) = (x_1, x_2) (or x_k = x_1 when k = l), the other m coordinates of the BN
    output are exchangeable with sum S_1 = -(x_1 + x_2) and sum of squares S_2 = B - x_1^2 - x_2^2, so
    E[x_i] = S_1/m, E[x_i^2] = S_2/m and E[x_i x_j] = (S_1^2 - S_2)/(m(m-1)) for i != j outside {k, l}.
    ``shrunk``: eps > 0, P = G - tau v v^T with tau = |y|^2 / (|y|^2 + B eps) (:func:`shrink_symbol`, in f; R16).
    """
    from ..core.symbols import B, x1, x2

    i, j, k, l = class_indices(name)
    x = {a: sp.Symbol(f"x{a}") for a in range(1, 5)}
    weight = shrink_symbol() if shrunk else 1

    def p(a, b):
        return sp.KroneckerDelta(a, b) - 1 / B - weight * x[a] * x[b] / B

    given = {k: x1, l: x2} if k != l else {k: x1}
    m = B - len(given)
    s1 = -sum(given.values())
    s2 = B - sum(v**2 for v in given.values())
    poly = sp.Poly(sp.expand(p(k, i) * p(l, j)), *[x[a] for a in sorted(x) if a not in given])
    total = sp.Integer(0)
    for powers, coeff in poly.terms():
        others = [e for e in powers if e]
        if others == []:
            moment = sp.Integer(1)
        elif others == [1]:
            moment = s1 / m
        elif others == [2]:
            moment = s2 / m
        elif others == [1, 1]:
            moment = (s1**2 - s2) / (m * (m - 1))
        else:  # pragma: no cover - P_ki P_lj has degree <= 1 in each index
            raise AssertionError(f"unexpected monomial {powers}")
        total += coeff * moment
    return sp.factor(total.subs({x[a]: v for a, v in given.items()}))


def _expect_pair_monomials(poly: sp.Expr) -> sp.Expr:
    """E[p(x_1, x_2)] over two BN coordinates for a polynomial p, symbolically in B (exact sphere moments).

    x_a = sqrt(B-1) t_a with (t_1, t_2) two coordinates of v uniform on S^(B-2) along unit vectors at correlation
    -1/(B-1), so E[x_1^a x_2^b] = (B-1)^((a+b)/2) E[t_1^a t_2^b] (zero for odd a + b).
    """
    from ..core.symbols import B, t, x1, x2

    terms = sp.Poly(sp.expand(poly), x1, x2).terms()
    return sum((coeff * (B - 1) ** ((a + b) // 2) * expect_pair_polynomial(t**a, t**b, B, -1 / (B - 1))
                for (a, b), coeff in terms if (a + b) % 2 == 0), sp.Integer(0))


@cache
def derive_linear_backward_eigenvalues() -> Derivation:
    """lambda_G, lambda_L, lambda_M of the backward operator of the linear network (phi = identity), in B.

    With phi' = 1 every class is T_{ij|kl} = B E[r^-2] E[f_{ij|kl}(x_1, x_2)] (:func:`derive_class_integrand`),
    E[r^-2] = 1/(mu* (B-3)), mu* = E[x_1^2] - E[x_1 x_2]; the pair moments are exact, and Thm E.62 gives the
    eigenvalues. Named results "G", "L", "M".
    """
    from ..core.symbols import B, mu_star, x1, x2

    d = Derivation("The linear network's backward eigenvalues")
    mu = sp.factor(_expect_pair_monomials(x1**2 - x1 * x2))
    d.step("For $\\phi = \\mathrm{id}$, $\\mu^* = E[x_1^2] - E[x_1x_2]$:", sp.Eq(mu_star, mu))
    classes = {name: sp.factor(B / (mu * (B - 3)) * _expect_pair_monomials(derive_class_integrand(name)))
               for name in CLASSES}
    d.step("$\\phi' = 1$, so each class is $B\\,E[r^{-2}]\\,E[f(x_1, x_2)]$ with exact moments of the BN sphere:",
           sp.Eq(sp.Symbol("classes"), sp.Tuple(*classes.values())))
    eigen = derive_eigenvalues(classes)
    lam = {key: sp.factor(eigen[key]) for key in ("G", "L", "M")}
    d.step("and the projected eigenvalues (Thm E.62) are",
           sp.Tuple(*(sp.Eq(sp.Symbol(f"lambda_{key}^id"), value) for key, value in lam.items())), name=tuple(lam))
    return d


@lambdified()
def _class_integrands():
    """The integrand of each class (:func:`derive_class_integrand`) as a function of (x_1, x_2, B)."""
    from ..core.symbols import B, x1, x2

    return {name: ((x1, x2, B), derive_class_integrand(name)) for name in CLASSES}


@cache
def _shrunk_class_integrands():
    """The 11 class integrands at eps > 0 as one stacked kernel f(x_1, x_2, B, tau) -> (11, ...)."""
    from ..core.symbols import B, x1, x2

    return sp.lambdify((x1, x2, B, shrink_symbol()), [derive_class_integrand(name, shrunk=True) for name in CLASSES],
                       modules="numpy", cse=True)


def operator_classes(phi: Activation, batch_size: int, n: int = 64) -> tuple[dict[str, float], dict[str, float]]:
    """The 11 entries of the backward operator F(Sigma*) at the BSB1 fixed point, with error estimates.

    Exact up to the quadrature error of :func:`expect_pair` (spectral for piecewise-smooth phi').

    T_{ij|kl} = E[(J_h)_{ki} (J_h)_{lj}] = B E[r^-2] E_v[phi'(x_k) phi'(x_l) P_ki P_lj], E[r^-2] = 1/(mu* (B - 3)).
    """
    check_finite_rate(phi)
    dphi, kernels = phi.numpy_derivative, _class_integrands()
    point = default_fixed_point(phi, batch_size)
    factor = batch_size / (point.mu * (batch_size - 3))
    diagonal = [class_indices(name)[2] == class_indices(name)[3] for name in CLASSES]  # phi'(x_k)^2 classes

    def integrand(a, b):  # the 11 classes stacked: phi' is evaluated once for all of them
        slope_a = dphi(a)
        pair, square = slope_a * dphi(b), slope_a**2
        return np.stack([(square if same else pair) * kernels[name](a, b, batch_size)
                         for name, same in zip(CLASSES, diagonal)])

    value, error = expect_pair_with_error(integrand, batch_size, phi.kinks, n)
    values = dict(zip(CLASSES, factor * value))
    errors = dict(zip(CLASSES, factor * (error + np.abs(value) * point.error / point.mu)))
    return values, errors


def operator_eigenvalues(phi: Activation, batch_size: int, n: int = 64) -> dict[str, Estimate]:
    """{"G", "L", "M"}: the eigenvalues of the backward operator at Sigma*, any phi, with error bounds."""
    values, errors = operator_classes(phi, batch_size, n)
    values, errors = projected_eigenvalues(values, batch_size), projected_eigenvalue_errors(errors, batch_size)
    return {key: Estimate(values[key], errors[key], "spherical") for key in values}


def operator_eigenvalues_eps(phi: Activation, batch_size: int, eps: float, sigma_w2: float = 1.0,
                             n: int = 32) -> dict[str, Estimate]:
    """{"G", "L", "M"} of the backward operator at the attracting fixed point with eps > 0 (R16), any phi.

    With n_eps(y) = sqrt(B) y / S, S^2 = |y|^2 + B eps, the Jacobian is J_h = sqrt(B)/S D (G - tau v v^T),
    tau = |y|^2 / S^2, D = diag(phi'(sqrt(tau) x)): each class is
    T = sigma_w^2 B E[S^-2 E_v[phi'_k phi'_l P_ki P_lj]] = B/(B-3) E_{s ~ chi^2_(B-3)}[s/(mu s + B t) g(tau(s))],
    t = eps / sigma_w^2, tau = mu s / (mu s + B t), g the class integrand (:func:`derive_class_integrand` with
    ``shrunk``) over two BN coordinates. eps = 0 gives :func:`operator_classes`. Error: the pair quadrature's
    plus the change from n/2 to n radial nodes. Past the collapse (mu* = 0) ValueError: not derived there.
    """
    from .epsilon import fixed_point_radial  # epsilon's fixed point; imported here, as epsilon builds on this module

    check_finite_rate(phi)
    point = fixed_point_radial(phi, batch_size, eps, sigma_w2)
    if point.collapsed:
        raise ValueError(f"the backward L and M eigenvalues past the collapse (eps / sigma_w2 = {eps:g} >= "
                         "collapse_eps, mu* = 0) are not derived here: every BN output is phi(0), v is undefined")
    dphi, kernel, bt = phi.numpy_derivative, _shrunk_class_integrands(), batch_size * eps / sigma_w2
    diagonal = [class_indices(name)[2] == class_indices(name)[3] for name in CLASSES]  # phi'(x_k)^2 classes

    def classes(nodes: int) -> tuple[np.ndarray, np.ndarray]:
        s, w = chi2_rule(batch_size - 3, nodes)
        tau = s * point.mu / (s * point.mu + bt)
        total, error = np.zeros(len(CLASSES)), np.zeros(len(CLASSES))
        for weight, shrink in zip(w * s / (point.mu * s + bt), tau):
            root = np.sqrt(shrink)

            def integrand(a, b, shrink=shrink, root=root):  # a, b: the BN output sqrt(tau) x
                pair, square = dphi(a) * dphi(b), dphi(a) ** 2
                f = kernel(a / root, b / root, batch_size, shrink)
                return np.stack([(square if same else pair) * np.broadcast_to(fi, a.shape)
                                 for fi, same in zip(f, diagonal)])

            value, err = expect_pair_with_error(integrand, batch_size, phi.kinks, n, scale=root)
            total += weight * value
            error += weight * err
        factor = batch_size / (batch_size - 3)
        return factor * total, factor * error

    fine, quadrature_error = classes(N_RADIAL_BACKWARD)
    coarse, _ = classes(N_RADIAL_BACKWARD // 2)
    errors = quadrature_error + np.abs(fine - coarse) + np.abs(fine) * point.error / point.mu
    values = projected_eigenvalues(dict(zip(CLASSES, fine)), batch_size)
    bounds = projected_eigenvalue_errors(dict(zip(CLASSES, errors)), batch_size)
    return {key: Estimate(values[key], bounds[key], "radial") for key in values}


def _inverse_log(rate: np.ndarray) -> np.ndarray:
    """1 / log(rate), inf at rate = 1, 0 (not -0) at rate = 0, where every gradient vanishes at once (B = 2)."""
    with np.errstate(divide="ignore"):
        return np.where(rate == 1, np.inf, 1 / np.log(np.where(rate == 1, 2.0, rate))) + 0.0  # -0.0 + 0.0 = 0.0


def depth_scale(rate: Estimate) -> Estimate:
    """xi = 1 / log(lambda_G) (Sec. 4): gradients grow by e every xi layers (negative: they vanish).

    inf where lambda_G is within its own error of 1 (:func:`~bnsym.core.estimate.within_error`), with a ``note``
    saying so: 1/log(lambda_G) would be rounding noise there. Elsewhere the error is propagated over the whole
    interval lambda_G +- error (xi is monotone on each side of 1): the larger change of xi at its two ends.
    """
    value, error = np.asarray(rate.value, dtype=float), np.asarray(rate.error, dtype=float)
    unresolved = within_error(rate, 1.0)
    xi = np.where(unresolved, np.inf, _inverse_log(value))
    with np.errstate(invalid="ignore"):
        change = np.maximum(*(np.abs(_inverse_log(end) - xi) for end in (value - error, value + error)))
    reaches_one = (value - error <= 1) & (value + error >= 1)
    return Estimate(xi, np.where(unresolved | reaches_one, np.inf, change), rate.method,
                    unresolved_note("lambda_G", 1.0, unresolved, rate))


def weight_gradient_ratio(phi: Activation, batch_size: int) -> float:
    """E||dL/dW^l||_F^2 / (N E||delta^l||^2) = mu* (App. L): <Pi, Sigma*> = mu* tr Pi for Pi with zero row sums."""
    return default_fixed_point(phi, batch_size).mu
