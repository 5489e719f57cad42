"""The correlation map of a normalised activation and its four convergence cases (Joudaki & Hofmann 2025), with the
normalisation and residual variants; the isometry rate of Joudaki, Daneshmand & Bach (2023).

Write phi(X) = sum_k c_k He_k(X) / sqrt(k!) for X ~ N(0, 1) (probabilists' Hermite polynomials, c_k = E[phi(X)
He_k(X)] / sqrt(k!)). For two unit-variance Gaussians of correlation rho, Mehler's formula E[He_j(X) He_k(Y)] = k!
rho^k delta_jk gives E[phi(X) phi(Y)] = sum_k c_k^2 rho^k, so the correlation after phi of a normalised layer is

    kappa(rho) = sum_k c_k^2 rho^k / q,   q = E[phi(X)^2] = sum_k c_k^2            (:func:`derive_kernel_map`)

a power series with non-negative coefficients, kappa(1) = 1, convex on [0, 1]. A network [Dense, phi, RMSNorm]
(or [Dense, RMSNorm, phi, ...]) maps the correlation of two inputs by kappa at infinite width; with LayerNorm after
phi it is (kappa - kappa(0)) / (1 - kappa(0)); a residual block r x + sqrt(1 - r^2) W phi~(x) maps it by (1 - r^2)
kappa(rho) + r^2 rho. Which fixed point attracts, and how fast, is read from kappa(0) = c_0^2 / q and kappa'(1) =
E[phi'(X)^2] / q (:func:`convergence_case`).

The coefficients are integrals against the Gaussian density, computed by a composite Gauss-Legendre rule split at
phi's kinks (each piece smooth: the rule converges geometrically) and bounded by the change from a rule of half the
nodes; kappa(rho) adds the series' tail, at most abs(rho)^(K+1) (1 - sum_(k <= K) c_k^2 / q), since the tail's
coefficients are non-negative and sum to that. Nothing here is Monte Carlo.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ..core.activations import Activation as Phi
from ..core.activations import parse_activation
from ..core.derivation import Derivation
from ..core.estimate import Estimate
from ..core.lazy import lazy_module
from ..core.quadrature import gauss_legendre
from ..core.validation import check_whole_number

sp = lazy_module("sympy")

REACH = 40.0  # the Gaussian weight beyond |x| = 40 is below e^-800: the integrals stop there
PANEL = 0.5  # width of a Gauss-Legendre panel
NODES = 24  # nodes per panel (the error bound: the change from 12)
MAX_TERMS = 400  # Hermite coefficients computed at most (the normalised polynomials stay finite up to there)
FLAT = 1e-9  # kappa'(1) within this of 1 counts as 1 (a quadrature rounding, not a rate)
ZERO = 1e-15  # kappa(0) below this counts as 0 (c_0^2 of an odd phi, rounding; SELU's 8e-11 does not)
BRACKET = 1e-4  # an interior fixed point is sought in [0, 1 - BRACKET]: kappa(rho) < rho there when kappa'(1) > 1


@cache
def derive_kernel_map() -> Derivation:
    """kappa(rho) from the Hermite coefficients, its value at 0 and slope at 1 (eq. (4) of Joudaki & Hofmann 2025),
    the LayerNorm-after-phi and residual maps, and the isometry constant beta_0 of Joudaki, Daneshmand & Bach
    (2023). Named results: "kappa", "kappa_0", "slope_1", "slope_1_phi", "layer_norm", "layer_norm_slope_1",
    "residual", "residual_slope_1", "beta_0"."""
    from ..core.symbols import rho

    k = sp.Symbol("k", integer=True, nonnegative=True)  # the Hermite index (local: the table's k is a GSC ratio)
    c = sp.IndexedBase("c")
    x, y = sp.symbols("X Y", real=True)
    r_skip = sp.Symbol("r", nonnegative=True)  # the residual's skip weight (local: the table's r is a GSC rate)
    q = sp.Symbol("q", positive=True)  # E[phi(X)^2]
    q_slope = sp.Symbol("q'", positive=True)  # E[phi'(X)^2]
    he = sp.Function("He")
    d = Derivation("The correlation map of a normalised activation")
    d.step("Expand $\\phi$ in the normalised Hermite polynomials of $X \\sim \\mathcal N(0, 1)$:",
           sp.Eq(sp.Function("phi")(x), sp.Sum(c[k] * he(k, x) / sp.sqrt(sp.factorial(k)), (k, 0, sp.oo))))
    d.step("Mehler's formula for unit Gaussians of correlation $\\rho$:",
           sp.Eq(sp.Symbol("E[He_j(X) He_k(Y)]"), sp.factorial(k) * rho**k * sp.KroneckerDelta(sp.Symbol("j"), k)))
    series = sp.Sum(c[k]**2 * rho**k, (k, 0, sp.oo))
    d.step("so the products' cross terms vanish:", sp.Eq(sp.Symbol("E[phi(X) phi(Y)]"), series))
    total = series.subs(rho, 1)
    d.step("At $\\rho = 1$ this is the second moment:", sp.Eq(q, total))
    kappa = series / q
    d.step("Normalised by it (a LayerNorm or RMSNorm before or after $\\phi$), the correlation map is",
           sp.Eq(sp.Symbol("kappa(rho)"), kappa), name="kappa")
    d.step("Its value at 0, where only the constant term survives:",
           sp.Eq(sp.Symbol("kappa(0)"), c[0]**2 / q), name="kappa_0")
    slope = sp.diff(series, rho).subs(rho, 1) / q
    d.step("Its slope at 1, differentiating the series term by term:", sp.Eq(sp.Symbol("kappa'(1)"), slope),
           name="slope_1")
    d.step("$\\phi'$ has coefficients $\\sqrt{k+1}\\,c_{k+1}$ (He$_k' = k$ He$_{k-1}$), so the sum is a second moment:",
           sp.Eq(sp.Symbol("kappa'(1)"), q_slope / q), name="slope_1_phi")
    kappa_rho, kappa_0, slope_1 = sp.symbols("kappa(rho) kappa(0) kappa'(1)", real=True)
    ln_map = (kappa_rho - kappa_0) / (1 - kappa_0)
    d.step("LayerNorm after $\\phi$ removes the mean $c_0$ of each example (the variance $q - c_0^2$):",
           sp.Eq(sp.Symbol("rho'"), ln_map), name="layer_norm")
    d.step("its slope at 1:", sp.Eq(sp.Symbol("rho'_rho(1)"), sp.diff(ln_map, kappa_rho) * slope_1),
           name="layer_norm_slope_1")
    residual = (1 - r_skip**2) * kappa_rho + r_skip**2 * rho
    d.step("A residual block $r x + \\sqrt{1 - r^2}\\,W\\tilde\\phi(x)$ (fresh $W$: no cross term) maps it by",
           sp.Eq(sp.Symbol("rho'"), residual), name="residual")
    d.step("with slope at 1", sp.Eq(sp.Symbol("rho'_rho(1)"), (1 - r_skip**2) * slope_1 + r_skip**2),
           name="residual_slope_1")
    d.step("Joudaki, Daneshmand & Bach's constant (their $\\beta_0$; they estimate it by Monte Carlo):",
           sp.Eq(sp.Symbol("beta_0"), 2 - c[1]**2 / (q - c[0]**2)), name="beta_0")
    j = sp.Symbol("j", integer=True, positive=True)
    ln_series = (c[1]**2 * rho + sp.Sum(c[j + 1]**2 * rho**(j + 1), (j, 1, sp.oo))) / (q - c[0]**2)
    d.step("LayerNorm after $\\phi$ in terms of the series (the constant term $c_0^2$ removed):",
           sp.Eq(sp.Symbol("rho'"), ln_series))
    termwise = sp.diff(ln_series, rho).replace(  # rho^(j+1) / rho as rho^j, so that rho = 0 zeroes each term
        lambda e: isinstance(e, sp.Sum), lambda e: sp.Sum(sp.powsimp(sp.expand(e.function), force=True), *e.limits))
    ln_slope_0 = termwise.subs(rho, 0).doit()
    d.step("Its slope at 0: every term but $k = 1$ keeps a factor $\\rho$; this is $2 - \\beta_0$:",
           sp.Eq(sp.Symbol("alpha"), ln_slope_0), name="layer_norm_slope_0")
    e = sp.Symbol("e", real=True)
    two = sp.Matrix([[1, e], [e, 1]])
    gap_2 = -sp.log(two.det()) / 2
    d.step("The isometry gap of a Gram $C$ with unit diagonal, $\\log(\\mathrm{tr}\\,C/n) - \\log\\det(C)/n$, "
           "is $-\\log\\det(C)/n$; for two inputs at correlation $e$ it is",
           sp.Eq(sp.Symbol("I"), gap_2), name="isometry_gap_2")
    d.step("to leading order $\\|C - I\\|_F^2 / (2n)$ ($-\\log\\det(I + E) = -\\mathrm{tr}\\,E + "
           "\\mathrm{tr}\\,E^2/2 + O(E^3)$, $\\mathrm{tr}\\,E = 0$):",
           sp.Eq(sp.Symbol("I"), sp.series(gap_2, e, 0, 4).removeO()), name="isometry_gap_order_2")
    d.step("Each off-diagonal entry shrinks by $\\alpha$ per block near 0, so the gap shrinks by $\\alpha^2$:",
           sp.Eq(sp.Symbol("I_(l+1) / I_l"), ln_slope_0**2), name="isometry_ratio")
    d.result = kappa
    return d


@cache
def derive_examples() -> Derivation:
    """kappa(0) and kappa'(1) of relu, and kappa of exp, by symbolic integration against the Gaussian density (an
    independent route to what the quadrature computes). Named results "relu_kappa_0", "relu_slope_1", "exp_c_k",
    "exp_kappa", "exp_slope_1"."""
    from ..core.symbols import rho

    k = sp.Symbol("k", integer=True, nonnegative=True)
    x = sp.Symbol("x", real=True)
    density = sp.exp(-x**2 / 2) / sp.sqrt(2 * sp.pi)
    d = Derivation("kappa of relu and of exp, exactly")
    c0 = sp.integrate(x * density, (x, 0, sp.oo))
    second = sp.integrate(x**2 * density, (x, 0, sp.oo))
    slope_second = sp.integrate(density, (x, 0, sp.oo))
    d.step(r"relu: $c_0 = E[\mathrm{relu}(X)]$, $q = E[\mathrm{relu}(X)^2]$, $E[\mathrm{relu}'(X)^2] = P(X > 0)$:",
           sp.Tuple(sp.Eq(sp.Symbol("c_0"), c0), sp.Eq(sp.Symbol("q"), second), sp.Eq(sp.Symbol("q'"), slope_second)))
    d.step("so", sp.Eq(sp.Symbol("kappa(0)"), c0**2 / second), name="relu_kappa_0")
    d.step("and ReLU's slope at 1 is exactly one:", sp.Eq(sp.Symbol("kappa'(1)"), slope_second / second),
           name="relu_slope_1")
    # E[e^X He_k(X)] = e^(1/2) E[He_k(X + 1)] = e^(1/2) (the shifted Gaussian's k-th Hermite moment is 1^k)
    d.step(r"exp: $E[e^X \mathrm{He}_k(X)] = e^{1/2} E[\mathrm{He}_k(X + 1)] = e^{1/2}$, so",
           sp.Eq(sp.Symbol("c_k"), sp.exp(sp.Rational(1, 2)) / sp.sqrt(sp.factorial(k))), name="exp_c_k")
    kappa = sp.simplify(sp.summation(sp.exp(1) * rho**k / sp.factorial(k), (k, 0, sp.oo)) / sp.exp(2))
    d.step("and $q = e^2$:", sp.Eq(sp.Symbol("kappa(rho)"), kappa), name="exp_kappa")
    d.step("whose slope at 1 is one too:", sp.Eq(sp.Symbol("kappa'(1)"), sp.diff(kappa, rho).subs(rho, 1)),
           name="exp_slope_1")
    return d


@cache
def lambdified(name: str):
    """The numeric form of one derived map: "layer_norm" (kappa(rho), kappa(0)), "residual" (kappa(rho), rho, r),
    "residual_slope_1" (kappa'(1), r), "layer_norm_slope_1" (kappa'(1), kappa(0)), "beta_0" (c_0, c_1, q),
    "isometry_ratio" (c_0, c_1, q), "slope_1_phi" (E[phi'^2], q)."""
    from ..core.symbols import rho

    kappa_rho, kappa_0, slope_1 = sp.symbols("kappa(rho) kappa(0) kappa'(1)", real=True)
    r_skip, q, q_slope, c = (sp.Symbol("r", nonnegative=True), sp.Symbol("q", positive=True),
                             sp.Symbol("q'", positive=True), sp.IndexedBase("c"))
    c0, c1 = sp.symbols("c_0 c_1", real=True)
    arguments = {"layer_norm": (kappa_rho, kappa_0), "residual": (kappa_rho, rho, r_skip),
                 "residual_slope_1": (slope_1, r_skip), "layer_norm_slope_1": (slope_1, kappa_0),
                 "beta_0": (c0, c1, q), "isometry_ratio": (c0, c1, q), "slope_1_phi": (q_slope, q)}[name]
    expression = derive_kernel_map()[name].subs({c[0]: c0, c[1]: c1})
    return sp.lambdify(arguments, expression, modules="numpy", cse=True)


def _panels(kinks: tuple[float, ...], nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of E[f(X)], X ~ N(0, 1), on [-REACH, REACH]: Gauss-Legendre panels of width about PANEL,
    with a panel edge at every kink."""
    edges = [-REACH, *sorted(k for k in kinks if -REACH < k < REACH), REACH]
    base, weights = gauss_legendre(nodes)
    points, masses = [], []
    for left, right in zip(edges[:-1], edges[1:]):
        cuts = np.linspace(left, right, max(1, int(np.ceil((right - left) / PANEL))) + 1)
        half = np.diff(cuts)[:, None] / 2
        points.append((cuts[:-1, None] + half * (base + 1)).ravel())
        masses.append((half * weights).ravel())
    x = np.concatenate(points)
    return x, np.concatenate(masses) * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)


def _hermite_rows(x: np.ndarray, terms: int) -> np.ndarray:
    """He_k(x) / sqrt(k!) for k < terms (rows), by the stable recurrence h_(k+1) = (x h_k - sqrt(k) h_(k-1)) /
    sqrt(k + 1)."""
    rows = np.empty((terms, x.size))
    rows[0] = 1.0
    if terms > 1:
        rows[1] = x
    for j in range(1, terms - 1):
        rows[j + 1] = (x * rows[j] - np.sqrt(j) * rows[j - 1]) / np.sqrt(j + 1)
    return rows


@dataclass(frozen=True)
class HermiteMoments:
    """Of an activation phi at X ~ N(0, 1): ``c`` the Hermite coefficients c_0..c_(K-1) (an Estimate, errors the
    quadrature's bound), ``second`` q = E[phi^2] and ``slope_second`` E[phi'^2] (Estimates)."""

    name: str
    c: Estimate
    second: Estimate
    slope_second: Estimate

    def kappa(self, rho: object) -> Estimate:
        """kappa(rho) = sum_k c_k^2 rho^k / q, with the bound of its quadrature and of the series' tail abs(rho)^K
        (1 - sum_(k < K) c_k^2 / q)."""
        rho = np.asarray(rho, dtype=float)
        if np.any(np.abs(rho) > 1) or not np.all(np.isfinite(rho)):
            raise ValueError("rho is a correlation: it must lie in [-1, 1]")
        weights, terms = self.c.value**2 / self.second.value, len(self.c.value)
        powers = rho[..., None] ** np.arange(terms)
        missing = max(1.0 - weights.sum(), 0.0)
        quadrature = (2 * np.abs(self.c.value) * self.c.error).sum() / self.second.value \
            + self.second.error / self.second.value
        return Estimate(powers @ weights, np.abs(rho) ** terms * (missing + quadrature) + quadrature, "series")

    def gap(self, gap: object) -> Estimate:
        """1 - kappa(1 - gap) for gap in [0, 1], without the cancellation of 1 - kappa near rho = 1: sum_k c_k^2
        (1 - (1 - gap)^k) / q; the tail's share is at most min(1, K gap) times the missing mass (1 - (1 - gap)^k <=
        k gap), plus the quadrature's bound."""
        gap = np.asarray(gap, dtype=float)
        if np.any(gap < 0) or np.any(gap > 1) or not np.all(np.isfinite(gap)):
            raise ValueError("gap = 1 - rho must lie in [0, 1]")
        weights, terms = self.c.value**2 / self.second.value, np.arange(len(self.c.value))
        lost = -np.expm1(terms * np.log1p(-gap)[..., None])
        quadrature = (2 * np.abs(self.c.value) * self.c.error).sum() / self.second.value \
            + self.second.error / self.second.value
        missing = max(1.0 - weights.sum(), 0.0)
        return Estimate(lost @ weights, np.minimum(gap * len(terms), 1.0) * missing + quadrature, "series")

    def slope(self, rho: object) -> np.ndarray:
        """kappa'(rho) = sum_k k c_k^2 rho^(k-1) / q, the series differentiated (rho in [0, 1); at 1 use
        ``slope_1``, whose series converges slowly for kinked phi)."""
        rho = np.asarray(rho, dtype=float)
        terms = np.arange(1, len(self.c.value))
        return rho[..., None] ** (terms - 1) @ (terms * self.c.value[1:] ** 2) / self.second.value

    @property
    def kappa_0(self) -> Estimate:
        """kappa(0) = c_0^2 / q."""
        c0, q = self.c.value[0], self.second.value
        return Estimate(c0**2 / q, 2 * abs(c0) * self.c.error[0] / q + c0**2 * self.second.error / q**2, "quadrature")

    @property
    def slope_1(self) -> Estimate:
        """kappa'(1) = E[phi'^2] / q (:func:`derive_kernel_map`, "slope_1_phi")."""
        value = lambdified("slope_1_phi")(self.slope_second.value, self.second.value)
        return Estimate(value, value * (self.slope_second.error / self.slope_second.value
                                        + self.second.error / self.second.value), "quadrature")

    @property
    def beta_0(self) -> Estimate:
        """beta_0 = 2 - c_1^2 / (q - c_0^2) of Joudaki, Daneshmand & Bach (2023)."""
        c0, c1, q = self.c.value[0], self.c.value[1], self.second.value
        return Estimate(lambdified("beta_0")(c0, c1, q), self._alpha_error, "quadrature")

    @property
    def isometry_ratio(self) -> Estimate:
        """alpha^2 = (c_1^2 / (q - c_0^2))^2 = (2 - beta_0)^2: the factor by which a LayerNorm-after-phi block shrinks
        the isometry gap of a nearly orthogonal Gram (:func:`derive_kernel_map`, "isometry_ratio")."""
        c0, c1, q = self.c.value[0], self.c.value[1], self.second.value
        value = lambdified("isometry_ratio")(c0, c1, q)
        return Estimate(value, 2 * np.sqrt(value) * self._alpha_error, "quadrature")

    @property
    def _alpha_error(self) -> float:
        """The quadrature's bound on c_1^2 / (q - c_0^2) (and so on beta_0)."""
        c0, c1, spread = self.c.value[0], self.c.value[1], self.second.value - self.c.value[0]**2
        return float((2 * abs(c1) * self.c.error[1] + c1**2 * (self.second.error + 2 * abs(c0) * self.c.error[0])
                      / spread) / spread)


@cache
def _moments(phi: Phi, terms: int) -> HermiteMoments:
    fine, coarse = _panels(phi.kinks, NODES), _panels(phi.kinks, NODES // 2)

    def integrals(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # a phi that overflows makes the result inf: refused below
            value, slope = phi.numpy(x), phi.numpy_derivative(x)
            value, slope = np.where(w > 0, value, 0.0), np.where(w > 0, slope, 0.0)  # no inf * 0 far out
            return np.concatenate([_hermite_rows(x, terms) @ (w * value), [w @ value**2, w @ slope**2]])

    high, low = integrals(*fine), integrals(*coarse)
    if not np.all(np.isfinite(high)):
        raise ValueError(f"the Hermite coefficients of {phi.name} are not finite: phi or phi' grows too fast for a "
                         "Gaussian second moment")
    error = np.abs(high - low)
    return HermiteMoments(phi.name, Estimate(high[:terms], error[:terms], "quadrature"),
                          Estimate(high[terms], error[terms], "quadrature"),
                          Estimate(high[terms + 1], error[terms + 1], "quadrature"))


def hermite_moments(phi: object, terms: int = 200) -> HermiteMoments:
    """The Hermite coefficients c_0..c_(terms-1) of ``phi`` at a standard Gaussian, E[phi^2] and E[phi'^2]
    (:class:`HermiteMoments`), by quadrature split at phi's kinks; ValueError for an activation whose second
    moments are not finite."""
    return _moments(parse_activation(phi), check_whole_number(terms, "terms", 2, MAX_TERMS))


def isometry_gap(gram: object) -> np.ndarray:
    """log(mean eigenvalue) - mean log(eigenvalue) of positive semi-definite Grams (..., n, n) (Joudaki, Daneshmand &
    Bach 2023): 0 exactly for a multiple of the identity, > 0 otherwise, scale free; inf for a singular Gram.
    ValueError for a non-symmetric, non-finite or indefinite matrix (an eigenvalue below -n eps max)."""
    gram = np.asarray(gram, dtype=float)
    if gram.ndim < 2 or gram.shape[-1] != gram.shape[-2] or not np.all(np.isfinite(gram)):
        raise ValueError(f"gram must be finite square matrices (..., n, n), got shape {gram.shape}")
    scale = np.abs(gram).max((-2, -1), keepdims=True)
    if np.any(scale == 0) or not np.allclose(gram, np.swapaxes(gram, -1, -2), rtol=0, atol=1e-12 * scale.max()):
        raise ValueError("gram must be symmetric and not zero")
    eig = np.linalg.eigvalsh(gram / scale)
    floor = gram.shape[-1] * np.finfo(float).eps
    if np.any(eig < -floor):
        raise ValueError(f"gram must be positive semi-definite, its smallest eigenvalue is {eig.min():.3g} (relative)")
    with np.errstate(divide="ignore"):
        logs = np.where(eig > floor, np.log(np.maximum(eig, floor)), -np.inf)
    return np.log(eig.mean(-1)) - logs.mean(-1)


@dataclass(frozen=True)
class Convergence:
    """Where the correlation under a map kappa converges from a start in (0, 1), and how fast (Joudaki & Hofmann
    2025, Thm 1).

    ``case``: "zero" (kappa(0) = 0 and kappa'(1) > 1: rho* = 0, geometric at the rate kappa'(0)), "one" (kappa'(1)
    < 1: rho* = 1, 1 - rho geometric at the rate kappa'(1)), "one, power law" (kappa'(1) = 1: rho* = 1, 1 - rho
    falls like a power of 1/l, not geometrically; ``rate`` 1) or "interior" (kappa(0) > 0 and kappa'(1) > 1: rho*
    in (0, 1), rate kappa'(rho*))."""

    case: str
    fixed_point: float
    rate: float


def convergence_case(kappa_0: float, slope_1: float, kappa, slope) -> Convergence:
    """The case of a map with kappa(0) = ``kappa_0`` and kappa'(1) = ``slope_1``, its fixed point and rate; ``kappa``
    and ``slope`` are the map and its derivative (callables on rho), e.g. a :class:`HermiteMoments`' ``kappa`` and
    ``slope`` values, or the LayerNorm-after-phi map built from them."""
    if abs(slope_1 - 1) <= FLAT:
        return Convergence("one, power law", 1.0, 1.0)
    if slope_1 < 1:
        return Convergence("one", 1.0, float(slope_1))
    if kappa_0 <= ZERO:
        return Convergence("zero", 0.0, float(slope(0.0)))
    from scipy.optimize import brentq

    point = brentq(lambda rho: kappa(rho) - rho, 0.0, 1 - BRACKET, xtol=1e-14)
    return Convergence("interior", float(point), float(slope(point)))
