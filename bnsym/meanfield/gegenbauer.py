"""The Gegenbauer basis of functions of one batch-norm coordinate (Yang et al. 2019, Defn E.40-E.46, Thm F.13, Thm 9).

One coordinate of the batch-norm output is x = sqrt(B-1) t, where t = <e, v> is one coordinate of v uniform on
the unit sphere S^(B-2); t has density proportional to (1 - t^2)^((B-4)/2) on [-1, 1]. The Gegenbauer
polynomials C_l^(lambda), lambda = (B-3)/2, are orthogonal for exactly this weight, so

    psi_l(x) = C_l^(lambda)(x / sqrt(B-1)) / n_l,    n_l^2 = E[C_l(t)^2] = lambda C_l(1) / (l + lambda),

is an orthonormal basis of functions of x, phi = sum_l a_l psi_l with a_l = E[phi(x) psi_l(x)].
Funk-Hecke (the zonal reproducing property, Fact E.46) gives, for two unit vectors u, w with u.w = rho,

    E_v[psi_l(sqrt(B-1) u.v) psi_m(sqrt(B-1) w.v)] = delta_lm C^_l(rho),    C^_l = C_l / C_l(1),

and two BN coordinates have rho = -1/(B-1). Hence the fixed point (Thm F.13)

    q* = sum_l a_l^2,    q* c* = sum_l a_l^2 C^_l(-1/(B-1)),    mu* = sum_l c_l a_l^2,  c_l = 1 - C^_l(-1/(B-1)),

and the gradient explosion rate (Thm 9, eq. 27)

    lambda_G = sum_l l (l+B-3)/(B-3) c_l a_l^2 / sum_l c_l a_l^2.

Truncation. The tails of the two series are known exactly without computing more coefficients: Parseval,
sum_l a_l^2 = E[phi(x)^2], and the Dirichlet energy on the sphere (the Laplace-Beltrami eigenvalue of degree
l is l(l+B-3)), sum_l l(l+B-3) a_l^2 = E[(B-1-x^2) phi'(x)^2]. Since c_l -> 1 (|C^_l(rho)| -> 0), the series
are summed to l = L and the tails added with c_l = 1; the error is the tail times sup_{l>L} |C^_l(rho)|.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy.special import roots_legendre

from ..core.activations import Activation
from ..core.derivation import Derivation
from ..core.estimate import Estimate
from ..core.lazy import lazy_module
from ..core.quadrature import gauss_jacobi
from .forward_linear import ForwardMoments, forward_eigenvalues_from_moments, moment_weights

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use



def _lambda_symbol() -> sp.Symbol:
    """lambda = (B-3)/2 > 0 for B >= 4: the symbolic derivations run in lambda (a symbol private to this module)."""
    return sp.Symbol("lambda", positive=True)


def _lam(batch_size):
    """lambda = (B-3)/2; symbolic batch sizes use the positive symbol ``lam``."""
    lam = _lambda_symbol()
    if batch_size is None:
        return lam
    return sp.Rational(batch_size - 3, 2) if isinstance(batch_size, int) else (batch_size - 3) / 2


def _simplify(expr: sp.Expr) -> sp.Expr:
    """simplify, after factoring the radicands so that sqrt((lambda + 1)^2) becomes lambda + 1 (lambda > 0)."""
    roots = lambda e: e.replace(lambda p: p.is_Pow and p.exp.is_Rational and p.exp.q == 2,  # noqa: E731
                                lambda p: sp.factor(p.base) ** p.exp)
    return sp.simplify(roots(sp.simplify(roots(expr))))


def in_batch_size(expr: sp.Basic) -> sp.Basic:
    """Rewrite an expression (or matrix) in lambda as one in B (lambda = (B-3)/2), simplified, for display."""
    lam = _lambda_symbol()
    from ..core.symbols import B

    tidy = lambda e: sp.factor(sp.simplify(e.subs(lam, (B - 3) / 2)))  # noqa: E731
    return expr.applyfunc(tidy) if isinstance(expr, sp.MatrixBase) else tidy(expr)


def psi_symbolic(l: int, batch_size: int | None = None, var: sp.Symbol | None = None) -> sp.Expr:
    """psi_l as a polynomial in t = x / sqrt(B-1): C_l^(lambda)(t) / n_l, n_l^2 = lambda C_l(1) / (l + lambda)."""
    from ..core.symbols import t

    lm, var = _lam(batch_size), t if var is None else var
    c_at_one = sp.rf(2 * lm, l) / sp.factorial(l)
    return sp.expand_func(sp.gegenbauer(l, lm, var)) / sp.sqrt(lm * c_at_one / (l + lm))


def sphere_moment(k: int, batch_size: int | None = None) -> sp.Expr:
    """E[t^k] for one coordinate of v uniform on S^(B-2): (1/2)_(k/2) / (lambda+1)_(k/2) for even k, else 0."""
    if k % 2:
        return sp.Integer(0)
    return sp.rf(sp.Rational(1, 2), k // 2) / sp.rf(_lam(batch_size) + 1, k // 2)


def _expect_one(poly: sp.Expr, batch_size: int | None) -> sp.Expr:
    """E[p(t)] for a polynomial p, by the moments of :func:`sphere_moment`."""
    from ..core.symbols import t

    p = sp.Poly(sp.expand(poly), t)
    return sum(coeff * sphere_moment(k, batch_size) for (k,), coeff in p.terms())


def _pair_moment(i: int, j: int, batch_size: int | None) -> sp.Expr:
    """E[v_1^i v_2^j], v uniform on S^(B-2): (1/2)_(i/2) (1/2)_(j/2) / (lambda+1)_((i+j)/2) for even i, j, else 0."""
    if i % 2 or j % 2:
        return sp.Integer(0)
    return (sp.rf(sp.Rational(1, 2), i // 2) * sp.rf(sp.Rational(1, 2), j // 2)
            / sp.rf(_lam(batch_size) + 1, (i + j) // 2))


def expect_pair_polynomial(f: sp.Expr, g: sp.Expr, batch_size: int | None = None,
                           correlation: sp.Expr | None = None) -> sp.Expr:
    """E[f(u.v) g(w.v)] for polynomials f, g in t, v uniform on S^(B-2), unit u, w with u.w = rho (exact).

    Writes w = rho u + sqrt(1 - rho^2) u_perp, so u.v = v_1 and w.v = rho v_1 + sqrt(1 - rho^2) v_2.
    """
    from ..core.symbols import rho, t

    correlation = rho if correlation is None else correlation
    v1, v2 = sp.symbols("v_1 v_2", real=True)
    s = sp.sqrt(1 - correlation**2)
    product = sp.Poly(sp.expand(f.subs(t, v1) * g.subs(t, correlation * v1 + s * v2)), v1, v2)
    return sp.expand(sum(coeff * _pair_moment(i, j, batch_size) for (i, j), coeff in product.terms()))


def normalised_gegenbauer_symbolic(l: int, var: sp.Expr | None = None, batch_size: int | None = None) -> sp.Expr:
    """C^_l(var) = C_l^(lambda)(var) / C_l^(lambda)(1), in var = rho by default."""
    from ..core.symbols import rho

    lm, var = _lam(batch_size), rho if var is None else var
    return sp.expand_func(sp.gegenbauer(l, lm, var)) / (sp.rf(2 * lm, l) / sp.factorial(l))


def _matrix(size: int, entry) -> sp.Matrix:
    return sp.Matrix(size, size, lambda i, j: sp.factor(sp.simplify(entry(i, j))))


def derive_basis(max_degree: int = 3) -> Derivation:
    """Orthonormality and the zonal reproducing property of psi_l, symbolically in B (Defn E.40-E.46).

    All steps run in lambda = (B-3)/2 > 0 and are displayed in B.
    """
    from ..core.symbols import B

    d = Derivation("The Gegenbauer basis of one batch-norm coordinate")
    k = sp.Symbol("k", integer=True, nonnegative=True)
    d.step("One coordinate $t$ of $v$ uniform on $S^{B-2}$ has density $\\propto (1-t^2)^{(B-4)/2}$ "
           "and moments (Beta integrals)",
           sp.Eq(sp.Symbol("E[t^{2k}]"), sp.rf(sp.Rational(1, 2), k) / sp.rf((B - 1) / 2, k)))
    size = max_degree + 1
    d.step("The first basis functions $\\psi_l = C_l^{((B-3)/2)}(t)/n_l$, "
           "$n_l^2 = \\lambda C_l(1)/(l+\\lambda)$, $t = x/\\sqrt{B-1}$:",
           sp.Eq(sp.Symbol("psi_l"),
                 sp.Matrix([sp.factor(in_batch_size(sp.simplify(psi_symbolic(l)))) for l in range(size)]),
                 evaluate=False))
    gram = _matrix(size, lambda i, j: _expect_one(psi_symbolic(i) * psi_symbolic(j), None))
    d.step("Their Gram matrix $E[\\psi_l \\psi_m]$ from the moments, for symbolic $B$, is the identity:",
           sp.Eq(sp.Symbol("E[psi_l psi_m]"), gram, evaluate=False), name="gram")
    pair = _matrix(size, lambda i, j: expect_pair_polynomial(psi_symbolic(i), psi_symbolic(j)))
    d.step("Two coordinates at correlation $\\rho$ (Funk-Hecke): "
           "$E[\\psi_l(u\\cdot v)\\psi_m(w\\cdot v)]$ is diagonal,",
           sp.Eq(sp.Symbol("E[psi_l(u.v) psi_m(w.v)]"), in_batch_size(pair), evaluate=False), name="pair")
    d.result = sp.Matrix([sp.factor(sp.simplify(normalised_gegenbauer_symbolic(l))) for l in range(size)])
    d.step("and its diagonal is the normalised Gegenbauer polynomial $\\hat C_l(\\rho) = C_l(\\rho)/C_l(1)$:",
           sp.Eq(sp.Symbol("hat C_l(rho)"), in_batch_size(d.result), evaluate=False))
    return d


def coefficients_symbolic(phi: sp.Expr, var: sp.Symbol, max_degree: int,
                          batch_size: int | None = None) -> list[sp.Expr]:
    """Exact a_l = E[phi(x) psi_l(x)] for a polynomial phi(var), x = sqrt(B-1) t = sqrt(2 lambda + 2) t,
    l <= max_degree."""
    from ..core.symbols import t

    phi_t = sp.expand(phi.subs(var, sp.sqrt(2 * _lam(batch_size) + 2) * t))
    return [_simplify(_expect_one(phi_t * psi_symbolic(l, batch_size), batch_size)) for l in range(max_degree + 1)]


def derive_coefficient_normalisation() -> Derivation:
    """The prefactor of eq. (26): E_{p_1}[phi^2] = prefactor * int phi(z)^2 ((B-1) - z^2)^((B-4)/2) dz.

    The printed prefactor carries (B-1)^(+(B-3)/2); the mass of the weight fixes the exponent to -(B-3)/2.
    """
    lam = _lambda_symbol()
    from ..core.symbols import B, z

    d = Derivation("The normalisation of eq. (26)")
    n = 2 * lam + 2  # B - 1
    weight = (n - z**2) ** (lam - sp.Rational(1, 2))
    mass = sp.gammasimp(sp.integrate(weight, (z, -sp.sqrt(n), sp.sqrt(n)), conds="none"))
    d.step("The weight of one BN coordinate, $((B-1) - z^2)^{(B-4)/2}$ on $|z| < \\sqrt{B-1}$, has mass",
           sp.Eq(sp.Integral(in_batch_size(weight), (z, -sp.sqrt(B - 1), sp.sqrt(B - 1))), in_batch_size(mass)))
    d.result = sp.simplify(in_batch_size(1 / mass))
    d.step("so the prefactor that makes the left side of eq. (26) an expectation is",
           sp.Eq(sp.Symbol("prefactor"), d.result))
    return d


def derive_dirichlet_identity(degree: int = 3) -> Derivation:
    """Thm E.47 for a generic polynomial phi of the given degree, symbolically in B:

    E_{p_2}[(B-1-x_1^2) phi'(x_1)^2 + (1 + x_1 x_2) phi'(x_1) phi'(x_2)] = sum_k k (k+B-3) c_k a_k^2.
    """
    lam = _lambda_symbol()
    from ..core.symbols import t, z

    d = Derivation("The Dirichlet-form identity (Thm E.47)")
    b = sp.symbols(f"b_1:{degree + 1}", real=True)
    phi = sum(bj * z ** (j + 1) for j, bj in enumerate(b))
    d.step("Take a generic polynomial", sp.Eq(sp.Function("phi")(z), phi))
    root = sp.sqrt(2 * lam + 2)  # sqrt(B - 1): x = sqrt(B-1) t
    slope = sp.diff(phi, z).subs(z, root * t)
    single = _expect_one((2 * lam + 2) * (1 - t**2) * slope**2, None)
    corr = -1 / (2 * lam + 2)
    pair = (expect_pair_polynomial(slope, slope, None, corr)
            + (2 * lam + 2) * expect_pair_polynomial(t * slope, t * slope, None, corr))
    left = sp.factor(sp.simplify(single + pair))
    d.step("The left side of Thm E.47, by the exact moments of one and two coordinates, is",
           sp.Eq(sp.Symbol("D(phi)"), in_batch_size(left)))
    a = coefficients_symbolic(phi, z, degree, None)
    right = sum(k * (k + 2 * lam) * (1 - normalised_gegenbauer_symbolic(k, corr, None)) * a[k] ** 2
                for k in range(1, degree + 1))
    d.step("The right side, from the exact Gegenbauer coefficients $a_k$ and $c_k = 1 - \\hat C_k(-1/(B-1))$, is",
           sp.Eq(sp.Symbol("sum_k k(k+B-3) c_k a_k^2"), in_batch_size(sp.factor(sp.simplify(right)))))
    d.result = _simplify(left - right)
    d.step("and the difference vanishes identically in $B$ and in the coefficients:",
           sp.Eq(sp.Symbol("difference"), d.result))
    return d


def derive_rate_minimum() -> Derivation:
    """Thm 9: lambda_G - (B-2)/(B-3) = sum_k (k-1)(k+B-2) c_k a_k^2 / ((B-3) sum_k c_k a_k^2) >= 0."""
    from ..core.symbols import B

    d = Derivation("Linear phi minimises the gradient explosion rate (Thm 9)")
    k = sp.Symbol("k", integer=True, positive=True)
    weight = k * (k + B - 3) / (B - 3)
    d.step("Thm 9 weighs $c_k a_k^2$ by", sp.Eq(sp.Symbol("w_k"), weight))
    gap = sp.factor(weight - (B - 2) / (B - 3))
    d.step("and its excess over the value at $k = 1$ factors as", sp.Eq(sp.Symbol("w_k - w_1"), gap))
    d.result = gap
    d.step("which is $\\ge 0$ for $k \\ge 1$, zero only at $k = 1$; "
           "with $c_k > 0$ (since $|\\hat C_k(\\rho)| < 1$ for $|\\rho| < 1$), "
           "$\\lambda_G \\ge (B-2)/(B-3)$ with equality iff $a_k = 0$ for all $k \\ge 2$, i.e. phi is linear.",
           sp.Eq(sp.Symbol("w_1"), weight.subs(k, 1)), name="linear")
    return d


# --- numeric --------------------------------------------------------------------------------------------

def psi(l_max: int, batch_size: int, x: np.ndarray) -> np.ndarray:
    """psi_0..psi_{l_max} at BN coordinates x, shape (l_max + 1, *x.shape), by the three-term recurrence.

    psi_{l+1} = [2 (l+lambda) t psi_l - (l+2 lambda-1) psi_{l-1} / r_{l-1}] / ((l+1) r_l), t = x/sqrt(B-1),
    r_l = n_{l+1}/n_l = sqrt((l+2 lambda)(l+lambda) / ((l+1)(l+1+lambda))): no C_l(1) (which overflows) appears.
    """
    lam = (batch_size - 3) / 2
    tt = np.asarray(x, dtype=float) / np.sqrt(batch_size - 1)
    out = np.empty((l_max + 1, *tt.shape))
    out[0] = 1.0
    if l_max >= 1:
        out[1] = tt * np.sqrt(2 * (1 + lam))
    for l in range(1, l_max):
        r_prev = np.sqrt((l - 1 + 2 * lam) * (l - 1 + lam) / (l * (l + lam)))
        r = np.sqrt((l + 2 * lam) * (l + lam) / ((l + 1) * (l + 1 + lam)))
        out[l + 1] = (2 * (l + lam) * tt * out[l] - (l + 2 * lam - 1) * out[l - 1] / r_prev) / ((l + 1) * r)
    return out


def normalised_gegenbauer(l_max: int, batch_size: int, value: float) -> np.ndarray:
    """C^_0..C^_{l_max} at one point: C^_{l+1} = [2 (l+lambda) s C^_l - l C^_{l-1}] / (l + 2 lambda)."""
    lam = (batch_size - 3) / 2
    out = np.empty(l_max + 1)
    out[0] = 1.0
    if l_max >= 1:
        out[1] = value
    for l in range(1, l_max):
        out[l + 1] = (2 * (l + lam) * value * out[l] - l * out[l - 1]) / (l + 2 * lam)
    return out


def coefficient_weights(l_max: int, batch_size: int) -> np.ndarray:
    """c_l = 1 - C^_l(-1/(B-1)) for l = 0..l_max (c_0 = 0, c_l > 0 for l >= 1; eq. 27)."""
    return 1.0 - normalised_gegenbauer(l_max, batch_size, -1.0 / (batch_size - 1))


def _half_piece(n: int, lo: float, hi: float, special: float, a: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes t and log-weights for int_lo^hi f(t) (1 - t^2)^a dt, accurate at the endpoint ``special``.

    At t = +-1 only the fractional part of a (0, or 1/2 for odd B) goes into a Gauss-Jacobi weight; the
    bell-shaped rest is part of the integrand, so a weight concentrated near t = 0 (large B) stays resolved.
    At a kink the rule is graded, t = special -+ (hi - lo) s^2, which turns a power |t - kink|^alpha into
    |s|^(2 alpha) (smooth for alpha = 1/2, 1, 3/2, ...).
    """
    h = hi - lo
    if abs(special) == 1.0:
        frac = a - np.floor(a)
        exponents = (frac, 0.0) if special == 1.0 else (0.0, frac)
        s, w = gauss_jacobi(n, *exponents)
        tt = lo + h * (s + 1) / 2
        in_weight = frac * np.log1p(-special * tt)  # (1 -+ t)^frac, already in the Jacobi weight
        # mass of (1 -+ s)^frac on [-1, 1] is 2^(frac+1)/(frac+1); dt = h/2 ds; (1 -+ t) = (h/2)(1 -+ s)
        return tt, np.log(w) + (frac + 1) * np.log(h) - np.log1p(frac) + a * np.log1p(-tt * tt) - in_weight
    x, w = roots_legendre(n)
    u = (x + 1) / 2
    tt = special + np.sign((lo + hi) / 2 - special) * h * u**2
    return tt, np.log(w * h * u) + a * np.log1p(-tt * tt)  # dt = 2 h u du, du = dx/2


@lru_cache(maxsize=64)
def _gauss_jacobi_coordinate(batch_size: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The n-point Gauss rule for one BN coordinate, weights w_i = 1 / sum_{k<n} psi_k(x_i)^2 (Christoffel function).

    Golub-Welsch weights (squared eigenvector components) are accurate only to about 1e-16 absolutely, while psi_l
    grows like sqrt(C_l(1)) towards t = +-1 (1e52 at l = 64, B = 1024): at large B their products spoilt the high
    coefficients (tanh at B = 1024, n = 320: |a_l| of 2e23 for l near 128, where they are 2e-8). The Christoffel
    weights are accurate relative to themselves, so w_i psi_l(x_i)^2 <= 1 holds; nodes whose weight underflows
    (the sum overflows) carry nothing and are dropped.
    """
    a = (batch_size - 4) / 2
    t_nodes, _ = gauss_jacobi(n, a, a)
    x = np.sqrt(batch_size - 1) * t_nodes
    with np.errstate(over="ignore", invalid="ignore"):
        inverse = np.concatenate([(psi(n - 1, batch_size, part) ** 2).sum(axis=0)
                                  for part in np.array_split(x, max(1, n // 256))])
    keep = np.isfinite(inverse)
    nodes, weights = x[keep], 1.0 / inverse[keep]
    weights /= weights.sum()
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights  # cached (read-only): each degree asks for the same rules again


def one_coordinate_rule(batch_size: int, kinks: tuple[float, ...] = (), n: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """Nodes x and weights (summing to 1) for E[f(x)], x one BN coordinate, density prop. to (B-1-x^2)^((B-4)/2).

    Without kinks: Gauss-Jacobi for (1-t^2)^a, a = (B-4)/2, t = x/sqrt(B-1) (:func:`_gauss_jacobi_coordinate`).
    With kinks, [-1, 1] is split at t = kink/sqrt(B-1) and each piece is halved, every half with a rule adapted to
    its one special end (:func:`_half_piece`). Weights are formed in log space and normalised by their sum (the
    exact mass).
    """
    a = (batch_size - 4) / 2
    root = np.sqrt(batch_size - 1)
    cuts = sorted({-1.0, 1.0, *(k / root for k in kinks if -root < k < root)})
    if len(cuts) == 2:
        return _gauss_jacobi_coordinate(batch_size, n)
    nodes, log_w = [], []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        mid = (lo + hi) / 2
        for part in (_half_piece(n, lo, mid, lo, a), _half_piece(n, mid, hi, hi, a)):
            nodes.append(part[0])
            log_w.append(part[1])
    log_w = np.concatenate(log_w)
    weights = np.exp(log_w - log_w.max())
    return root * np.concatenate(nodes), weights / weights.sum()


def coefficients(phi: Activation, batch_size: int, l_max: int, n: int | None = None) -> np.ndarray:
    """a_l = E[phi(x) psi_l(x)], l = 0..l_max, by the kink-split rule of :func:`one_coordinate_rule`."""
    x, w = one_coordinate_rule(batch_size, phi.kinks, n or 2 * l_max + 64)
    return psi(l_max, batch_size, x) @ (w * phi.numpy(x))


@dataclass(frozen=True)
class GegenbauerSums:
    """Tail-corrected sums of the Gegenbauer series of phi at batch size B, truncated at degree ``terms``.

    ``energy`` = sum_l a_l^2 = E[phi^2] and ``dirichlet`` = sum_l l(l+B-3) a_l^2 = E[(B-1-x^2) phi'^2] (exact),
    ``cross`` ~ sum_l a_l^2 C^_l(rho), ``weighted`` ~ sum_l c_l a_l^2, ``weighted_dirichlet`` ~
    sum_l l(l+B-3) c_l a_l^2. Their errors add two parts: the tail's (tail x sup |C^_l(rho)| beyond ``terms``)
    and the quadrature's (the change from a rule with half the nodes): ``cross_error`` for cross,
    ``energy_error`` for energy, ``dirichlet_error`` for weighted_dirichlet; weighted = energy - cross errs by at
    most ``cross_error + energy_error``.
    """

    terms: int
    energy: float
    dirichlet: float
    cross: float
    weighted: float
    weighted_dirichlet: float
    cross_tail: float
    dirichlet_tail: float
    cross_rule: float = 0.0
    dirichlet_rule: float = 0.0
    energy_rule: float = 0.0

    @property
    def cross_error(self) -> float:
        return self.cross_tail + self.cross_rule

    @property
    def dirichlet_error(self) -> float:
        return self.dirichlet_tail + self.dirichlet_rule

    @property
    def energy_error(self) -> float:
        return self.energy_rule

    def rule_part(self) -> GegenbauerSums:
        """These sums with the tails' errors dropped: what the quadrature alone contributes."""
        return replace(self, cross_tail=0.0, dirichlet_tail=0.0)


def sphere_laplacian_eigenvalues(terms: int, batch_size: int) -> np.ndarray:
    """l (l + B - 3), l = 0..terms: the eigenvalues of -Laplace-Beltrami on S^(B-2) for degree-l harmonics."""
    l = np.arange(terms + 1)
    return l * (l + batch_size - 3.0)


def rate_contributions(phi: Activation, batch_size: int, terms: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-degree terms of Thm 9: (l(l+B-3)/(B-3) c_l a_l^2, c_l a_l^2) for l = 0..terms (no tail)."""
    a2 = coefficients(phi, batch_size, terms) ** 2
    weighted = coefficient_weights(terms, batch_size) * a2
    return sphere_laplacian_eigenvalues(terms, batch_size) / (batch_size - 3) * weighted, weighted


def _sums_on_rule(phi: Activation, batch_size: int, terms: int, n: int) -> GegenbauerSums:
    """The sums of :func:`gegenbauer_sums` with an n-node rule, errors from the tails alone."""
    a = coefficients(phi, batch_size, terms, n)
    x, w = one_coordinate_rule(batch_size, phi.kinks, n)
    energy = float(w @ phi.numpy(x) ** 2)
    dirichlet = float(w @ ((batch_size - 1 - x**2) * phi.numpy_derivative(x) ** 2))
    laplacian = sphere_laplacian_eigenvalues(terms, batch_size)
    c_hat = normalised_gegenbauer(4 * terms, batch_size, -1.0 / (batch_size - 1))
    beyond = float(np.abs(c_hat[terms + 1:]).max())  # sup |C^_l(rho)| over l in (L, 4L]: the tail's c_l - 1
    a2 = a**2
    tail_energy = max(energy - a2.sum(), 0.0)
    tail_dirichlet = max(dirichlet - laplacian @ a2, 0.0)
    c_hat = c_hat[: terms + 1]
    return GegenbauerSums(
        terms=terms,
        energy=energy,
        dirichlet=dirichlet,
        cross=float(a2 @ c_hat),
        weighted=float(a2 @ (1 - c_hat) + tail_energy),
        weighted_dirichlet=float(laplacian @ (a2 * (1 - c_hat)) + tail_dirichlet),
        cross_tail=float(tail_energy * beyond),
        dirichlet_tail=float(tail_dirichlet * beyond),
    )


def gegenbauer_sums(phi: Activation, batch_size: int, terms: int) -> GegenbauerSums:
    """The sums behind Thm F.13 and Thm 9 from a_0..a_L (L = ``terms``), tails added with c_l = 1.

    The coefficients and the exact tails are integrals over one BN coordinate, whose law narrows like
    1/sqrt(B) in t = x/sqrt(B-1): at large B a steep phi needs many more nodes than degrees. They are computed
    with n = 2L + 64 and n/2 nodes; the value is the n rule's, and each change joins its field's error.
    """
    n = 2 * terms + 64
    coarse, fine = _sums_on_rule(phi, batch_size, terms, n // 2), _sums_on_rule(phi, batch_size, terms, n)
    return replace(fine, cross_rule=abs(fine.cross - coarse.cross), energy_rule=abs(fine.energy - coarse.energy),
                   dirichlet_rule=abs(fine.weighted_dirichlet - coarse.weighted_dirichlet))


MAX_RULE_NODES = 2048  # the one-coordinate rule of gegenbauer_sums, 2 L + 64 nodes, stays below this where it errs


def _converged_sums(phi: Activation, batch_size: int, tol: float, max_terms: int, error_of) -> GegenbauerSums:
    """Double the truncation degree from 16 until ``error_of(sums) <= tol``; say why when it cannot.

    It cannot when the degree reaches ``max_terms`` (algebraically decaying coefficients) or when the quadrature
    alone errs by more than tol / 2 and the next rule would pass ``MAX_RULE_NODES`` (phi steeper than the rule
    resolves on the narrow law of a coordinate at large B): ValueError naming the spherical route, whose rules
    split the BN sphere instead.
    """
    terms = 16
    while True:
        sums = gegenbauer_sums(phi, batch_size, terms)
        if error_of(sums) <= tol:
            return sums
        unresolved = error_of(sums.rule_part()) > tol / 2 and 4 * terms + 64 > MAX_RULE_NODES
        if terms >= max_terms or unresolved:
            reason = ("its coefficients decay only algebraically" + (" because phi has a kink" if phi.kinks else "")
                      if not unresolved else
                      f"the one-coordinate rule does not resolve phi within {MAX_RULE_NODES} nodes (the law of a "
                      f"BN coordinate narrows like 1/sqrt(B) in t = x/sqrt(B-1), a steep phi varies faster)")
            raise ValueError(
                f"the Gegenbauer series of {phi} at B = {batch_size} does not reach tol = {tol:g} at degree {terms} "
                f"(error estimate {error_of(sums):.2g}): {reason}; pass a larger tol or max_terms, or use "
                "method='spherical'")
        terms *= 2


def fixed_point_gegenbauer(phi: Activation, batch_size: int, tol: float = 1e-8, max_terms: int = 2048):
    """BSB1 fixed point from the Gegenbauer series (Thm F.13): q* = sum a_l^2, q* c* = sum a_l^2 C^_l(-1/(B-1)).

    The truncation degree doubles until the error bound on q* c* is below ``tol`` (absolute).
    """
    from .forward import FixedPoint

    sums = _converged_sums(phi, batch_size, tol, max_terms, lambda s: max(s.cross_error, s.energy_error))
    return FixedPoint(q=sums.energy, c=sums.cross / sums.energy, batch_size=batch_size, method="gegenbauer",
                      error=max(sums.cross_error, sums.energy_error))


def gradient_rate_gegenbauer(phi: Activation, batch_size: int, tol: float = 1e-8, max_terms: int = 2048) -> Estimate:
    """lambda_G of Thm 9 (eq. 27) with its absolute error bound (lambda_G times the relative bound of the ratio);
    the degree doubles until the relative bound is below ``tol``."""
    def relative_error(s: GegenbauerSums) -> float:
        return s.dirichlet_error / s.weighted_dirichlet + (s.cross_error + s.energy_error) / s.weighted

    sums = _converged_sums(phi, batch_size, tol, max_terms, relative_error)
    rate = sums.weighted_dirichlet / ((batch_size - 3) * sums.weighted)
    return Estimate(rate, rate * relative_error(sums), "gegenbauer")


# --- forward eigenvalues in the Gegenbauer basis (Thms F.22, F.24) -----------------------------------------

def jacobi_matrix(size: int, batch_size: int) -> np.ndarray:
    """E[x psi_l(x) psi_m(x)], l, m < size: multiplication by x in the psi basis (symmetric, tridiagonal).

    From the recurrence, x psi_l = sqrt(B-1) [(l+1) r_l psi_{l+1} + (l+2 lambda-1)/r_{l-1} psi_{l-1}] / (2 (l+lambda)).
    """
    lam_ = (batch_size - 3) / 2
    l = np.arange(size - 1)
    r = np.sqrt((l + 2 * lam_) * (l + lam_) / ((l + 1) * (l + 1 + lam_)))
    off = np.sqrt(batch_size - 1) * (l + 1) * r / (2 * (l + lam_))
    return np.diag(off, 1) + np.diag(off, -1)


def pair_moments(a: np.ndarray, batch_size: int) -> tuple[float, float, float]:
    """(p00, p20, p11) for phi = sum_l a_l psi_l: E[phi_1 phi_2], E[phi_1 x_1^2 phi_2], E[phi_1 x_1 phi_2 x_2].

    x psi_l is a combination of psi_{l-1}, psi_{l+1} (the Jacobi matrix J), and two coordinates see each degree
    separately (Funk-Hecke): E[psi_l(x_1) psi_m(x_2)] = delta_lm C^_l(-1/(B-1)).
    """
    padded = np.concatenate([a, np.zeros(2)])  # x^2 reaches two degrees further
    jac = jacobi_matrix(padded.size, batch_size)
    c_hat = normalised_gegenbauer(padded.size - 1, batch_size, -1.0 / (batch_size - 1))
    ja = jac @ padded
    return float(padded @ (c_hat * padded)), float((jac @ ja) @ (c_hat * padded)), float(ja @ (c_hat * ja))


def forward_quadratic_forms(terms: int, batch_size: int) -> dict[str, np.ndarray]:
    """Thms F.22 / F.24 in matrix form: lambda_X = a^T Q_X a / a^T C a for phi = sum_{l<=terms} a_l psi_l.

    Each moment is a quadratic form in a: s0 = a^T a, s2 = a^T J^2 a, p00 = a^T D a, p20 = a^T (J^2 D) a,
    p11 = a^T J D J a (J: :func:`jacobi_matrix`, D = diag C^_l(-1/(B-1))); Q_X weighs them as R7 does, and
    C = diag(c_l) = I - D. Q_X is symmetric with bandwidth 2 (degrees l and l +- 2 couple): its diagonal and
    second off-diagonal are the paper's w_l and u_l/2 (up to the normalisation the paper does not print).
    The forms are exact for a polynomial phi of degree <= terms.
    """
    size = terms + 3  # J^2 reaches two degrees beyond; cut back to terms + 1 at the end
    jac = jacobi_matrix(size, batch_size)
    d = np.diag(normalised_gegenbauer(size - 1, batch_size, -1.0 / (batch_size - 1)))
    j2 = jac @ jac
    forms = (np.eye(size), j2, d, (j2 @ d + d @ j2) / 2, jac @ d @ jac)
    keep = slice(0, terms + 1)
    result = {key: sum(wk * form for wk, form in zip(w, forms))[keep, keep]
              for key, w in moment_weights(batch_size).items() if key != "G"}
    result["C"] = (np.eye(size) - d)[keep, keep]
    return result


def forward_eigenvalues_gegenbauer(phi: Activation, batch_size: int, tol: float = 1e-8,
                                   max_terms: int = 2048) -> dict[str, Estimate]:
    """lambda_G (computed; theory: 0), lambda_L, lambda_M from the Gegenbauer series (Thms F.22, F.24, coefficients
    derived here), each with an error estimate: its change when the degree doubles (from 16 until the changes of
    lambda_L and lambda_M are below ``tol``)."""
    previous, terms = None, 16
    while True:
        a = coefficients(phi, batch_size, terms)
        x, w = one_coordinate_rule(batch_size, phi.kinks, 2 * terms + 64)
        f2 = phi.numpy(x) ** 2
        moments = ForwardMoments(float(w @ f2), float(w @ (f2 * x**2)), *pair_moments(a, batch_size))
        current, _ = forward_eigenvalues_from_moments(moments, batch_size)
        if previous is not None:
            changes = {key: abs(current[key] - previous[key]) for key in current}
            change = max(changes["L"], changes["M"])
            if change <= tol:
                return {key: Estimate(current[key], changes[key], "gegenbauer") for key in current}
            if terms >= max_terms:
                raise ValueError(f"the Gegenbauer series of the forward eigenvalues of {phi} at B = {batch_size} "
                                 f"does not reach tol = {tol:g} within {max_terms} terms (last change {change:.2g}); "
                                 "pass a larger tol or max_terms, or use another method")
        previous, terms = current, 2 * terms
