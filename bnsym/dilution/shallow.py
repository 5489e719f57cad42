"""Gradients explode and deep networks are shallow (Philipp, Song & Carbonell 2018, arXiv 1712.05577).

The first two thirds of the paper, beside :mod:`bnsym.dilution` (its "ResNet explained" third). Layers are
counted from the error layer as there. Each result is derived in SymPy where it is algebra and lambdified
(cse=True) or evaluated in closed form:

* Theorem 1 / Corollary 1 (F.1): the lambda-residual gradient terms of a network whose residual weights have
  relative operator norms p_n are bounded order by order by the coefficients e_j(p) of prod_n (1 + p_n t)
  (:func:`residual_orders`; Veit's bound is the equal-p case). Under Theorem 1's premise 2, T updates of relative
  size <= 1/(c r^n) give p_n <= x r^-n, x = T/c, and at any depth e_j <= x^j r^(-j(j+1)/2) / prod_{i<=j}(1 - r^-i)
  (Euler; :func:`derive_trace_orders`, :func:`infinite_depth_orders`): the effective depth is bounded by a
  function of T alone (:func:`orders_effective_depth`). The printed bound on T is :func:`theorem1_update_bound`.
* Theorem 2 (F.2): E s^2 = (E|s|)^2 + Var|s| >= 1 + delta eps^2, so the GSC grows at least with
  r = sqrt(1 + delta eps^2) (:func:`derive_theorem2`, :func:`theorem2_rate`, :func:`theorem2_bound`).
* Proposition 3 (E.3): Q^-1 of ||W||_F ||x|| / (||W x|| sqrt(d_in)) is 1 for rotation-invariant W
  (:func:`derive_parameter_sensitivity`, :func:`parameter_ratio`).
* Proposition 5 (E.5): E||A B||_qm^2 = E||A||_qm^2 E||B||_qm^2 for independent A and isotropic B
  (:func:`derive_qm_multiplicativity`).
* Section 4.5: a batch-norm output computed with minibatch statistics of b points moves by a relative
  E Delta^2 = 3/(2b) + O(b^-2) (exactly :func:`minibatch_noise`), so the error moves by about GSC sqrt(3/(2b))
  (:func:`minibatch_noise_ratio`; training fails where it exceeds 1).
* B.1.1: the mean-field per-layer GSC rate of a bias-free MLP, r^2 = q E phi'(sqrt q z)^2 / E phi(sqrt q z)^2
  with q_{l+1} = sigma_w^2 E phi(sqrt q_l z)^2 (:func:`unnormalised_gsc_rate`, :func:`variance_map`): identically
  1 for ReLU, -> 1 for tanh with sigma_w <= 1.
* B.1.2: an identity-skip ResNet of B normalised blocks, residual branches scaled by alpha, has by Theorem 3
  GSC^2 = prod_b (a/alpha^2 + b - 1 + r^2)/(a/alpha^2 + b) (:func:`derive_resnet_gsc`, :func:`resnet_gsc`):
  a power law B^((r^2-1)/2) for alpha = 1, bounded by ((a + 1)/a)^((r^2-1)/2) for alpha = 1/sqrt(B).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import sympy as sp
from scipy.special import gammaln

from ..core.activations import Activation, parse_activation
from ..core.derivation import Derivation
from ..core.validation import check_activation, check_finite_result, check_range, check_real_array, check_whole_number

MAX_ORDERS = 10_000  # coefficient lists cost O(N^2); the networks here have at most a few hundred layers
_HERMITE = np.polynomial.hermite_e.hermegauss(160)

# --------------------------------------------------------------------------------------------
# Theorem 1 and Corollary 1: residual orders and the effective depth


def residual_orders(p) -> np.ndarray:
    """e_0..e_N of prod_n (1 + p_n t): e_j bounds ||sum of the gradient terms with exactly j residual factors||
    / ||d f_0 / d f_1|| when the n-th residual Jacobian has operator norm <= p_n and the initial ones <= 1
    (triangle inequality and submultiplicativity; Veit's C(L, j) p^j for equal p_n; D.2's array)."""
    p = check_real_array(p, "p (relative operator norms of the residual factors)", min_ndim=1, low=0.0)
    if p.ndim != 1 or p.size > MAX_ORDERS:
        raise ValueError(f"p must be one list of at most {MAX_ORDERS} norms (one per residual layer), got {p.shape}")
    orders = np.ones(1)
    with np.errstate(over="ignore", invalid="ignore"):
        for value in p:
            orders = np.convolve(orders, [1.0, value])
    return check_finite_result(orders, "the residual orders of these norms p")


@cache
def derive_trace_orders() -> Derivation:
    """e_j of prod_{n=1}^N (1 + x q^n t) is x^j q^(j(j+1)/2) [N choose j]_q; as N -> oo, [N choose j]_q ->
    1 / prod_{i<=j} (1 - q^i) (Euler). With q = 1/r, x = T/c: Theorem 1's premise 2 summed over T updates."""
    d = Derivation("Theorem 1: the residual orders at any depth")
    x, q, t = sp.symbols("x q t", positive=True)
    n_, j_ = sp.symbols("N j", integer=True, nonnegative=True)

    def q_binomial(n: int, j: int) -> sp.Expr:
        if j < 0 or j > n:
            return sp.Integer(0)
        return sp.prod([(1 - q ** (n - i)) / (1 - q ** (i + 1)) for i in range(j)])

    def claimed(n: int, j: int) -> sp.Expr:
        return x**j * q ** sp.Rational(j * (j + 1), 2) * q_binomial(n, j)

    d.step("claim: e_j(N) = x^j q^(j(j+1)/2) [N, j]_q, the Gaussian binomial:",
           sp.Eq(sp.Symbol("e_j(N)"), x**j_ * q ** (j_ * (j_ + 1) / 2) * sp.Symbol("[N, j]_q")))
    gaps = []
    for n in range(1, 5):
        product = sp.expand(sp.prod([1 + x * q**m * t for m in range(1, n + 1)]))
        gaps.extend(sp.cancel(product.coeff(t, j) - claimed(n, j)) for j in range(n + 1))
    d.step("coefficients of the expanded product minus the claim, N = 1..4 (sum of squares):",
           sp.Eq(sp.Symbol("gap"), sum(g**2 for g in gaps)), name="gap")
    d.step("the q-Pascal rule e_j(N+1) = e_j(N) + x q^(N+1) e_{j-1}(N) keeps it for every N (N = 7, j = 3):",
           sp.Eq(sp.Symbol("gap_7"), sp.cancel(claimed(7, 3) - claimed(6, 3) - x * q**7 * claimed(6, 2))))
    limit = x**j_ * q ** (j_ * (j_ + 1) / 2) / sp.Product(1 - q**n_, (n_, 1, j_))
    d.step("N -> oo (q < 1: q^(N-i) -> 0 in [N, j]_q):", sp.Eq(sp.Symbol("e_j(oo)"), limit), name="limit")
    d.result = limit
    return d


def infinite_depth_orders(x: float, r: float, n_orders: int) -> np.ndarray:
    """e_0..e_{n-1} of prod_{n>=1} (1 + x r^-n t) = x^j r^(-j(j+1)/2) / prod_{i<=j} (1 - r^-i) (Euler):
    the order-j bound of Theorem 1's networks (x = T/c updates of relative size 1/(c r^n)) at any depth."""
    x = check_range(x, "x = T / c (updates over the GSC intercept)", 0.0, open_low=True)
    r = check_range(r, "r (GSC rate)", 1.0, open_low=True, why="Theorem 1 needs exploding gradients, r > 1")
    n_orders = check_whole_number(n_orders, "n_orders", 1, MAX_ORDERS)
    j = np.arange(n_orders)
    log_q = -math.log(r)
    log_den = np.concatenate([[0.0], np.cumsum(np.log(-np.expm1(log_q * np.arange(1, n_orders))))])
    with np.errstate(over="ignore"):
        orders = np.exp(j * math.log(x) + log_q * j * (j + 1) / 2 - log_den)
    return check_finite_result(orders, f"the orders for x = {x:g}, r = {r:g}")


def orders_effective_depth(orders, threshold: float) -> int:
    """The largest lambda with sum_{j >= lambda} orders[j] >= threshold (0 if none): the effective depth that
    order bounds (or exact order norms) allow (Veit; D.1 with first-order contributions)."""
    orders = check_real_array(orders, "orders", min_ndim=1, low=0.0)
    threshold = check_range(threshold, "threshold h", 0.0, open_low=True)
    tails = np.cumsum(orders[::-1])[::-1]
    above = np.nonzero(tails >= threshold)[0]
    return int(above[-1]) if above.size else 0


def theorem1_update_bound(depth: float, r: float, c: float = 1.0, c_prime: float = 1.0, h: float = 1.0) -> float:
    """Theorem 1's premise 4: T <= c h^(1/Lambda) (ln r)^3 r^(Lambda/4) / (32 r c') updates keep the relative
    Lambda-contribution below h (printed r^(lambda/r) in the main text; the appendix's r^(Lambda/4))."""
    depth = check_range(depth, "Lambda", 1.0)
    r = check_range(r, "r (GSC rate)", 1.0, open_low=True)
    c, c_prime, h = (check_range(v, n, 0.0, open_low=True) for v, n in ((c, "c"), (c_prime, "c'"), (h, "h")))
    log_bound = (math.log(c) + math.log(h) / depth + 3 * math.log(math.log(r)) + (depth / 4 - 1) * math.log(r)
                 - math.log(32 * c_prime))  # in logs: r^(Lambda/4) alone may overflow
    with np.errstate(over="ignore"):
        return float(check_finite_result(np.exp(log_bound), f"the update bound for Lambda = {depth:g}, r = {r:g}"))


# --------------------------------------------------------------------------------------------
# Theorem 2: why gradients explode


@cache
def derive_theorem2() -> Derivation:
    """Theorem 2 (F.2): unit expected |det| and spread singular values force E s^2 > 1."""
    d = Derivation("Theorem 2: the determinant against the qm norm")
    m1, var, delta, eps, dim = sp.symbols(r"E|s| Var|s| delta epsilon d", positive=True)
    d.step("a surjective endomorphism of the sphere has E|det J| >= 1; with d - 1 IID singular values:",
           sp.Eq(sp.Symbol("E|det J|"), m1 ** (dim - 1)))
    d.step("so E|s| >= 1; and Chebyshev: P(||s| - E|s|| > eps) > delta gives", sp.Eq(var, delta * eps**2 + sp.Symbol(
        "slack")))
    second = d.step("E s^2 = (E|s|)^2 + Var|s|, at its least:", sp.Eq(sp.Symbol("E s^2"), (1 + delta * eps**2)),
                    name="second_moment")
    rate = d.step("the per-layer GSC rate Q(||J||_qm) on the sphere (||f_k|| = ||f_l||):",
                  sp.Eq(sp.Symbol("r"), sp.sqrt(second.rhs)), name="rate")
    d.step("k - l layers, d - 1 nonzero singular values out of d:",
           sp.Eq(sp.Symbol("Q GSC(k, l)"), sp.sqrt((dim - 1) / dim) * rate.rhs ** sp.Symbol("k - l")), name="bound")
    d.result = rate.rhs
    return d


def theorem2_rate(delta, eps) -> np.ndarray:
    """r(delta, eps) = sqrt(1 + delta eps^2) (Theorem 2)."""
    delta = check_real_array(delta, "delta (a probability)", low=0.0, high=1.0)
    eps = check_real_array(eps, "eps (a spread of singular values)", low=0.0)
    return np.hypot(1.0, np.sqrt(delta) * eps)  # eps^2 alone may overflow


def theorem2_bound(dim: int, delta, eps, layers) -> np.ndarray:
    """sqrt((d - 1)/d) r(delta, eps)^(k - l): Theorem 2's lower bound on Q GSC(k, l) over k - l = ``layers``."""
    dim = check_whole_number(dim, "d (dimension)", 2, 10**9)
    layers = check_real_array(layers, "k - l", low=0.0)
    with np.errstate(over="ignore"):
        bound = math.sqrt((dim - 1) / dim) * theorem2_rate(delta, eps) ** layers
    return check_finite_result(bound, "Theorem 2's bound for these delta, eps and k - l")


def spread_probability(singular_values, eps) -> np.ndarray:
    """delta(eps) = P(||s| - E|s|| > eps) of samples of singular values (Theorem 2's condition 3)."""
    s = np.abs(check_real_array(singular_values, "singular values", min_ndim=1))
    eps = check_real_array(eps, "eps", low=0.0)
    return np.mean(np.abs(s - s.mean())[..., None] > np.ravel(eps), axis=0).reshape(np.shape(eps))


# --------------------------------------------------------------------------------------------
# Propositions 3 and 5


@cache
def derive_parameter_sensitivity() -> Derivation:
    """Proposition 3 (E.3): E[||W x||^2 / ||W||_F^2] = ||x||^2 / d_in for W = length x rotation-invariant direction."""
    d = Derivation("Proposition 3: the Q^-1 identity")
    m, n = 2, 3
    w = sp.Matrix(m, n, lambda i, j: sp.Symbol(f"w_{i}{j}", real=True))
    x = sp.Matrix(n, 1, sp.symbols("x_0:3", real=True))
    s2 = sp.Symbol("s^2", positive=True)
    squared = sp.expand((w * x).norm() ** 2)
    second = {entry_a * entry_b: (s2 if entry_a == entry_b else 0) for entry_a in w for entry_b in w}
    mean_wx = sp.expand(squared).subs({key: value for key, value in second.items()})
    d.step("E||W x||^2 with E w_ij w_kl = s^2 [ij = kl] (2 x 3):", sp.Eq(sp.Symbol("E||Wx||^2"), sp.factor(mean_wx)))
    mean_f = sp.expand(sum(e**2 for e in w)).subs(second)
    d.step("E||W||_F^2:", sp.Eq(sp.Symbol("E||W||_F^2"), mean_f))
    ratio = sp.simplify(mean_wx * n / (mean_f * (x.norm() ** 2)))
    d.step("orientation independent of length: E[||Wx||^2 / ||W||_F^2] = E||Wx||^2 / E||W||_F^2; times d_in/||x||^2:",
           sp.Eq(sp.Symbol("Q^-1[...]^-2"), ratio), name="identity")
    d.result = ratio
    return d


def parameter_ratio(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """||W||_F ||x|| / (||W x|| sqrt(d_in)) for (..., m, n) matrices W and vectors x (..., n) (Prop. 3)."""
    w = check_real_array(w, "W", min_ndim=2)
    x = check_real_array(x, "x", min_ndim=1)
    # the ratio is scale free in W and in x: powers of 2 bring their largest entries near 1, exactly (no overflow)
    w = w * np.ldexp(1.0, -np.frexp(np.abs(w).max((-2, -1), keepdims=True))[1])
    x = x * np.ldexp(1.0, -np.frexp(np.abs(x).max(-1, keepdims=True))[1])
    wx = np.einsum("...ij,...j->...i", w, x)
    norm_wx = np.linalg.norm(wx, axis=-1)
    if np.any(norm_wx == 0):
        raise ValueError("W x = 0: the ratio divides by ||W x||")
    return np.linalg.norm(w, axis=(-2, -1)) * np.linalg.norm(x, axis=-1) / (norm_wx * math.sqrt(w.shape[-1]))


@cache
def derive_qm_multiplicativity() -> Derivation:
    """Proposition 5 (E.5) in quadratic expectation: E||A B||_qm^2 = E||A||_qm^2 E||B||_qm^2 (B with iid entries)."""
    d = Derivation("Proposition 5: the qm norm is multiplicative in quadratic expectation")
    a = sp.Matrix(2, 2, lambda i, j: sp.Symbol(f"a_{i}{j}", real=True))
    b = sp.Matrix(2, 3, lambda i, j: sp.Symbol(f"b_{i}{j}", real=True))
    s2 = sp.Symbol("s^2", positive=True)
    moments = {e1 * e2: (s2 if e1 == e2 else 0) for e1 in b for e2 in b}
    product = sp.expand(sum(e**2 for e in a * b) / 3).subs(moments)
    factors = sp.expand(sum(e**2 for e in a) / 2 * sum(e**2 for e in b) / 3).subs(moments)
    d.step("E_B ||A B||_qm^2 - ||A||_qm^2 E||B||_qm^2 (A 2 x 2, B 2 x 3 with E b_ij b_kl = s^2 [ij = kl]):",
           sp.Eq(sp.Symbol("gap"), sp.simplify(product - factors)), name="gap")
    d.result = sp.simplify(product - factors)
    return d


# --------------------------------------------------------------------------------------------
# Section 4.5: minibatch noise of batch norm


@cache
def derive_minibatch_noise() -> Derivation:
    """E Delta^2 for Delta = (x - mu_b)/sigma_b - x: x ~ N(0, 1) normalised with the statistics of b other iid
    N(0, 1) points instead of the population's (0, 1). mu_b and sigma_b are independent, b sigma_b^2 ~ chi^2_{b-1}."""
    d = Derivation("Section 4.5: relative perturbation of a batch-norm output by minibatch statistics")
    b, t = sp.symbols("b t", positive=True)
    nu, m, z = sp.symbols("nu m z", positive=True)
    moment = 2 ** (m / 2) * sp.gamma((nu + m) / 2) / sp.gamma(nu / 2)
    d.step("chi moments E chi_nu^m:", sp.Eq(sp.Symbol("E chi_nu^m"), moment))
    ratio = sp.Function("G")(b)  # Gamma((b - 2)/2) / Gamma((b - 1)/2)
    inv1 = sp.sqrt(b / 2) * ratio
    inv2 = sp.simplify(sp.expand_func(b * moment.subs({nu: b - 1, m: -2})))
    d.step("E 1/sigma_b and E 1/sigma_b^2, G(b) = Gamma((b-2)/2) / Gamma((b-1)/2):",
           sp.Tuple(sp.Eq(sp.Symbol("E 1/sigma_b"), inv1), sp.Eq(sp.Symbol("E 1/sigma_b^2"), inv2)))
    exact = (1 + 1 / b) * inv2 - 2 * inv1 + 1  # E(x - mu_b)^2 = 1 + 1/b, E x (x - mu_b) = 1
    d.step("E Delta^2 = E(x - mu_b)^2 E sigma_b^-2 - 2 E x(x - mu_b) E sigma_b^-1 + 1:",
           sp.Eq(sp.Symbol("E Delta^2"), exact), name="exact")
    tricomi = z ** sp.Rational(-1, 2) * (1 + 1 / (8 * z))  # Gamma(z)/Gamma(z + 1/2), Tricomi-Erdelyi, O(z^-2)
    series = sp.series(exact.subs(ratio, tricomi.subs(z, (b - 2) / 2)).subs(b, 1 / t), t, 0, 2).removeO()
    d.step("Gamma(z)/Gamma(z + 1/2) = z^(-1/2) (1 + 1/(8z) + O(z^-2)) (Tricomi-Erdelyi), to first order in 1/b:",
           sp.Eq(sp.Symbol("E Delta^2"), sp.expand(series.subs(t, 1 / b))), name="leading")
    d.result = exact
    return d


@cache
def _noise_kernel():
    b = sp.Symbol("b", positive=True)
    ratio = sp.exp(sp.loggamma((b - 2) / 2) - sp.loggamma((b - 1) / 2))  # Gamma(b/2) overflows at b ~ 340
    exact = derive_minibatch_noise()["exact"].subs(sp.Function("G")(b), ratio)
    return sp.lambdify(b, exact, modules=["scipy", "numpy"], cse=True)


def minibatch_noise(b) -> np.ndarray:
    """sqrt(E Delta^2): the relative change of a batch-norm output (a unit-variance coordinate) when its
    statistics come from a minibatch of b points, exactly; 1/sqrt(b) times sqrt(3/2) for large b."""
    b = check_real_array(b, "minibatch size b", low=4.0, why="E 1/sigma_b^2 needs b > 3")
    if b.max() > 1e7:
        raise ValueError("minibatch size b must be at most 1e7 (the exact form cancels to O(1/b))")
    return np.sqrt(_noise_kernel()(b))


def minibatch_noise_ratio(gsc, b) -> np.ndarray:
    """GSC(first batch norm, 0) times :func:`minibatch_noise`: by Prop. 2 the relative change of the error that
    minibatch statistics cause; above 1 the noise swamps the signal (section 4.5: GSC > sqrt(b), up to sqrt(3/2))."""
    gsc = check_real_array(gsc, "GSC", low=0.0)
    return gsc * minibatch_noise(b)


# --------------------------------------------------------------------------------------------
# B.1.1: the mean-field GSC rate without normalisation


def _gaussian_mean(values: np.ndarray) -> np.ndarray:
    nodes, weights = _HERMITE
    return values @ weights / math.sqrt(2 * math.pi)


def variance_map(phi: str | Activation, sigma_w: float, q) -> np.ndarray:
    """q_{l+1} = sigma_w^2 E phi(sqrt(q_l) z)^2: the pre-activation second moment of a bias-free MLP (B.1.1)."""
    f = check_activation(parse_activation(phi))
    sigma_w = check_range(sigma_w, "sigma_w", 0.0, open_low=True)
    q = check_real_array(q, "q", low=0.0)
    z = np.sqrt(q)[..., None] * _HERMITE[0]
    with np.errstate(over="ignore", invalid="ignore"):
        moment = np.float64(sigma_w) ** 2 * _gaussian_mean(f.numpy(z) ** 2)
    return check_finite_result(moment, f"q_(l+1) for sigma_w = {sigma_w:g} and these q")


def unnormalised_gsc_rate(phi: str | Activation, q) -> np.ndarray:
    """r(q) = sqrt(q E phi'(sqrt q z)^2 / E phi(sqrt q z)^2): per-layer GSC rate of [linear, phi] at input
    second moment q (mean field, B.1.1); 1 for ReLU at every q (positive homogeneity)."""
    f = check_activation(parse_activation(phi), slope=True)
    q = check_real_array(q, "q", low=0.0, open_low=True)
    z = np.sqrt(q)[..., None] * _HERMITE[0]
    with np.errstate(all="ignore"):
        rate = np.sqrt(q * _gaussian_mean(f.numpy_derivative(z) ** 2) / _gaussian_mean(f.numpy(z) ** 2))
    return check_finite_result(rate, f"the GSC rate of {f} at these q (E phi^2 underflows or overflows there)")


def mean_field_gsc_curve(phi: str | Activation, sigma_w: float, q0: float, depth: int) -> np.ndarray:
    """GSC(l, 0)-style cumulative product of the mean-field per-layer rates r(q_l), l = 1..depth, of a bias-free
    MLP whose first pre-activations have second moment q0 (the lowest layer first)."""
    depth = check_whole_number(depth, "depth", 1, MAX_ORDERS)
    q, rates = check_range(q0, "q0", 0.0, open_low=True), []
    for _ in range(depth):
        rates.append(float(unnormalised_gsc_rate(phi, q)))
        q = float(variance_map(phi, sigma_w, q))
    return np.cumprod(rates)


# --------------------------------------------------------------------------------------------
# B.1.2: scaled residual branches


@cache
def derive_resnet_gsc() -> Derivation:
    """GSC^2 of B identity-skip blocks, block b (from the input) k_b-diluted with k_b^2 = A + b - 1, A = a/alpha^2,
    each of undiluted squared rate r^2: Theorem 3's product, a ratio of Gamma functions."""
    d = Derivation("B.1.2: the GSC of a ResNet with scaled residual branches")
    a, alpha, r2, big_a, x, bb = sp.symbols("a alpha r^2 A x B", positive=True)
    b = sp.Symbol("b", integer=True, positive=True)
    d.step("each normalised block adds the same squared norm alpha^2 q_rho; a = q_0 / q_rho:",
           sp.Eq(sp.Symbol("k_b^2"), a / alpha**2 + b - 1))
    product = sp.Product((big_a + b - 1 + r2) / (big_a + b), (b, 1, bb))
    closed = sp.gamma(big_a + r2 + bb) * sp.gamma(big_a + 1) / (sp.gamma(big_a + r2) * sp.gamma(big_a + bb + 1))
    d.step("Theorem 3 per block, (k_b^2 + r^2)/(k_b^2 + 1), multiplied:", sp.Eq(sp.Symbol("GSC^2"), product))
    check = sp.simplify(sp.gammasimp(closed.subs(bb, 4) / product.subs(bb, 4).doit()))
    d.step("= Gamma ratio (checked at B = 4: ratio of the two):", sp.Eq(sp.Symbol("ratio"), check), name="check")
    d.step("closed form:", sp.Eq(sp.Symbol("GSC^2"), closed), name="closed")
    d.step("alpha = 1 (A = a), large B, Gamma(B + u)/Gamma(B + v) ~ B^(u - v): a power law",
           sp.Eq(sp.Symbol("GSC^2"), sp.gamma(a + 1) / sp.gamma(a + r2) * bb ** (r2 - 1)), name="power_law")
    bounded = sp.simplify((((a + 1) * x) / (a * x)) ** (r2 - 1))
    d.step("alpha^2 = 1/B (A = a B), same law with z = a B: ((a + 1) B / (a B))^(r^2 - 1), bounded in B:",
           sp.Eq(sp.Symbol("GSC^2_oo"), bounded), name="bounded")
    d.result = closed
    return d


def resnet_gsc(a: float, r2: float, n_blocks, alpha: float | None = 1.0) -> np.ndarray:
    """GSC of ``n_blocks`` identity-skip blocks by :func:`derive_resnet_gsc` (Gamma ratio, log space);
    ``alpha`` None scales each branch by 1/sqrt(n_blocks)."""
    a = check_range(a, "a = q_0 / q_rho (the first block's squared dilution)", 0.0, open_low=True)
    r2 = check_range(r2, "r^2 (undiluted squared rate of a block)", 0.0, open_low=True)
    blocks = check_real_array(n_blocks, "n_blocks", low=0.0)
    with np.errstate(all="ignore"):
        scale = 1 / blocks if alpha is None else np.float64(check_range(alpha, "alpha", 0.0, open_low=True)) ** 2
        big_a = a / scale
        log2 = gammaln(big_a + r2 + blocks) + gammaln(big_a + 1) - gammaln(big_a + r2) - gammaln(big_a + blocks + 1)
        gsc = np.exp(log2 / 2)
    return check_finite_result(gsc, f"the GSC for a = {a:g}, r^2 = {r2:g} and these n_blocks, alpha (a Gamma "
                               "function overflows float64)")


def resnet_gsc_limit(a: float, r2: float) -> float:
    """((a + 1)/a)^((r^2 - 1)/2): the GSC of infinitely many blocks scaled by 1/sqrt(B) (B.1.2)."""
    a = check_range(a, "a", 0.0, open_low=True)
    r2 = check_range(r2, "r^2", 0.0, open_low=True)
    with np.errstate(over="ignore"):
        limit = np.float64((a + 1) / a) ** ((r2 - 1) / 2)
    return float(check_finite_result(limit, f"the GSC limit for a = {a:g}, r^2 = {r2:g}"))
