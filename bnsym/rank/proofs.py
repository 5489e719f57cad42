"""The proof steps of Daneshmand et al. 2020 around Theorem 14: Lemmas 5, 6, 10, 16, Examples 11, 12, Cor. 15.

* :func:`derive_rank_one_step` (Lemma 6, App. D): a rank-one H stays rank one, M(H) = s s^T with s_i = +-1, and
  for gamma < 1/(B d) one layer keeps every sign, so M is frozen; the paper's bound abs(Delta M_ij) <= 4 gamma B lacks
  a factor d. With Lemma 4 (E_nu M_ij = 0) this is Lemma 5's contradiction: the chain keeps rank >= 2.
* :func:`derive_regularity` (Lemma 10, Examples 11 and 12): under equal row norms alpha <= 1, with equality only
  for equal nonzero eigenvalues; a dominant eigenvalue Theta(d^beta), beta < 1, gives alpha -> 0; and invariance
  (E_nu delta_F = 0) with rank >= 2 gives 1 - alpha = (d^2 - E||M||_F^2) / (4 E Tr M^3) > 0.
* :func:`derive_finite_depth` (Lemma 16 behind Corollary 15): a non-increasing integer sequence whose Cesaro mean
  exceeds a never falls below it.
* :func:`residual_gap_series`: the small-gamma Lyapunov gap of products of I + gamma W (claim 4), gamma^2 + O(gamma^4);
* :func:`derive_centring` (claim 9): with linear layers, centring after the first layer changes nothing;
* :func:`derive_invariant_union` (Example 17): a set of matrices that is not strongly irreducible.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp
import torch

from ..core.derivation import Derivation
from ..core.symbols import alpha_reg as alpha
from ..core.symbols import d, gamma
from ..core.symbols import weight_bound as B
from ..core.validation import check_finite_result, check_gamma, check_range, check_real_array, check_width


def derive_rank_one_step(width: int = 3) -> Derivation:
    """Lemma 6: for rank-one H = s v^T (rows of norm sqrt N), M = s s^T, one layer maps s to sign((I + gamma W) s).

    Shown for d = ``width`` with symbolic W and signs s_i (s_i^2 = 1). ``delta_m_bound`` is the worst case of
    abs(Delta M_ij) over W with entries in [-B, B], attained at W = B s s^T; ``paper_bound_ratio`` compares it with the
    paper's 4 gamma B (App. D); ``sign_threshold`` is the largest gamma for which no sign can flip.
    """
    out = Derivation("Lemma 6: a rank-one H stays rank one, and M(H) has entries +-1")
    n = width
    s = sp.Matrix(sp.symbols(f"s_1:{n + 1}", real=True))
    w = sp.Matrix(n, n, lambda i, j: sp.Symbol(f"W_{i + 1}{j + 1}", real=True))
    unit = {si**2: 1 for si in s}
    m = s * s.T
    c = sp.Matrix(n, n, lambda i, j: 1 if i == j else sp.Symbol(f"M_{min(i, j) + 1}{max(i, j) + 1}", real=True))
    off = sp.Add(*[1 - c[i, j] ** 2 for i in range(n) for j in range(n) if i != j])
    out.step("Rank one means r(H) <= 1 (Lemma 1): ||M||_F^2 >= (Tr M)^2 = d^2. For unit diagonal, d^2 - ||M||_F^2 = "
             "sum_{i != j} (1 - M_ij^2) (residual shown), each term >= 0 as |M_ij| <= 1: all |M_ij| = 1, M = s s^T",
             sp.Eq(sp.Symbol("d^2 - ||M||_F^2 - sum_{i!=j} (1 - M_ij^2)"),
                   sp.expand(n**2 - sum(x**2 for x in c) - off)), name="rank_one_residual")
    t = (sp.eye(n) + gamma * w) * s
    half = (sp.eye(n) + gamma * w) * m * (sp.eye(n) + gamma * w).T
    out.step("Half a layer, M_{l+1/2} = (I + gamma W) s s^T (I + gamma W)^T, is t t^T with t = (I + gamma W) s "
             "(residual):", sp.Eq(sp.Symbol("M_{l+1/2} - t t^T"), sp.expand(half - t * t.T).norm()),
             name="half_step_residual")
    out.step("BN divides row i and column i by |t_i|, so M_{l+1} = sign(t) sign(t)^T: rank one, entries +-1. "
             "Sign i is kept iff s_i t_i > 0:",
             sp.Eq(sp.Symbol("s_1 t_1"), sp.expand(s[0] * t[0]).subs(unit)))
    worst = w.subs({w[i, j]: B * s[i] * s[j] for i in range(n) for j in range(n)})
    delta = sp.expand(((sp.eye(n) + gamma * worst) * m * (sp.eye(n) + gamma * worst).T - m)[0, 0]).subs(unit)
    general = (1 + gamma * B * d) ** 2 - 1  # t = (1 + gamma B d) s at W = B s s^T
    out.step("|(W s)_i| <= B d, attained at W = B s s^T; there Delta M_11 = (1 + gamma B d)^2 - 1 "
             f"(residual at d = {n}):",
             sp.Eq(sp.Symbol("Delta M_11 - ((1 + gamma B d)^2 - 1)"), sp.expand(delta - general.subs(d, n))),
             name="delta_m_residual")
    out.step("so the worst case over the support is", sp.Eq(sp.Symbol("max |Delta M_ij|"), sp.expand(general)),
             name="delta_m_bound")
    bound = out["delta_m_bound"]
    out.step("At the paper's gamma = 1/(8 B d) that is below 1/2, so no sign flips (App. D):",
             sp.Eq(sp.Symbol("max |Delta M_ij|"), bound.subs(gamma, 1 / (8 * B * d))), name="bound_at_paper_gamma")
    out.step("The paper prints |Delta M_ij| <= 4 gamma B; the true worst case over it grows with d:",
             sp.Eq(sp.Symbol("worst / (4 gamma B)"), sp.expand(bound / (4 * gamma * B))), name="paper_bound_ratio")
    threshold = sp.solve(sp.Eq(1 - gamma * B * d, 0), gamma)[0]
    out.step("Sign i survives whenever 1 - gamma B d > 0: the sharp sufficient condition is",
             sp.Eq(sp.Symbol("gamma <"), threshold), name="sign_threshold")
    return out


def derive_regularity() -> Derivation:
    """Lemma 10, Examples 11 and 12: the regularity constant alpha = E Tr(diag(M^2)^2) / E Tr M^3 is below 1.

    Under equal row norms Tr(diag(M^2)^2) = ||lambda||_2^4 / d (Prop. 8), so alpha <= 1 follows from
    d ||lambda||_3^3 - ||lambda||_2^4 = (1/2) sum_ij lambda_i lambda_j (lambda_i - lambda_j)^2 (Tr M = d), shown for
    4 eigenvalues. Example 12's family: lambda_1 = d^beta, the rest equal, alpha -> 0 for beta = 1/2 and 3/4.
    Lemma 10: invariance (E delta_F = 0) solved for alpha.
    """
    out = Derivation("Lemma 10, Examples 11 and 12: the regularity constant alpha < 1")
    lam = sp.symbols("lambda_1:5", nonnegative=True)
    s1, s2, s3 = sum(lam), sum(x**2 for x in lam), sum(x**3 for x in lam)
    pairs = sp.Rational(1, 2) * sum(lam[i] * lam[j] * (lam[i] - lam[j]) ** 2 for i in range(4) for j in range(4))
    out.step("With ||lambda||_1 = d, the gap d ||lambda||_3^3 - ||lambda||_2^4 is a sum of non-negative terms "
             "(residual, 4 eigenvalues):", sp.Eq(sp.Symbol("gap - (1/2) sum_ij l_i l_j (l_i - l_j)^2"),
                                                 sp.expand(s1 * s3 - s2**2 - pairs)), name="gap_identity")
    out.step("Example 11: each matrix has ||lambda||_2^4 / d <= ||lambda||_3^3, so alpha <= 1, and alpha >= 1 forces "
             "every term to vanish: the nonzero eigenvalues are equal. E.g. two equal, two zero:",
             sp.Eq(sp.Symbol("gap"), sp.expand((s1 * s3 - s2**2).subs({lam[0]: 2, lam[1]: 2, lam[2]: 0, lam[3]: 0}))))
    beta = sp.Symbol("beta", positive=True)
    top = d**beta
    rest = (d - top) / (d - 1)
    ratio = (top**2 + (d - 1) * rest**2) ** 2 / (d * (top**3 + (d - 1) * rest**3))
    out.step("Example 12: lambda_1 = d^beta and d - 1 equal others (Tr M = d); the per-matrix alpha is",
             sp.Eq(sp.Symbol("alpha(d)"), ratio))
    limits = [sp.limit(ratio.subs(beta, b), d, sp.oo) for b in (sp.Rational(1, 2), sp.Rational(3, 4))]
    out.step("and it tends to 0 as d -> oo (beta = 1/2, beta = 3/4), below 0.9 for large d:",
             sp.Eq(sp.Symbol("lim alpha"), sp.Tuple(*limits)), name="example12_limits")
    f_bar, t3_bar = sp.symbols("E||M||_F^2 E||lambda||_3^3", positive=True)
    stationarity = sp.Eq(0, 2 * d**2 - 2 * f_bar - 8 * t3_bar + 8 * alpha * t3_bar)
    out.step("Lemma 10: invariance, E_nu delta_F = 0 to leading order in gamma, with "
             "E Tr(diag(M^2)^2) = alpha E Tr M^3:",
             stationarity)
    solved = sp.solve(stationarity, alpha)[0]
    out.step("solved for 1 - alpha; Lemma 5 gives rank >= 2, so lambda_max < d and ||M||_F^2 <= lambda_max d < d^2: "
             "1 - alpha > 0", sp.Eq(1 - alpha, sp.factor(1 - solved)), name="one_minus_alpha")
    return out


def stationary_alpha(width: int, frobenius: np.ndarray, trace_m3: np.ndarray) -> np.ndarray:
    """Lemma 10's alpha from invariance at leading order: 1 - (d^2 - E||M||_F^2) / (4 E Tr M^3)."""
    width = check_width(width)
    f = check_real_array(frobenius, "E||M||_F^2")
    t3 = check_real_array(trace_m3, "E Tr M^3")
    if np.any(t3 <= 0):
        raise ValueError("E Tr M^3 must be positive (M is a correlation matrix)")
    with np.errstate(all="ignore"):
        alpha = 1 - _one_minus_alpha_kernel()(width, f, t3)
    return check_finite_result(alpha, "alpha for these E||M||_F^2 and E Tr M^3")


@cache
def _one_minus_alpha_kernel():
    return sp.lambdify((d, sp.Symbol("E||M||_F^2", positive=True), sp.Symbol("E||lambda||_3^3", positive=True)),
                       derive_regularity()["one_minus_alpha"], modules="numpy", cse=True)


def derive_finite_depth() -> Derivation:
    """Lemma 16 (App. E), the step of Corollary 15: a non-increasing bounded integer sequence y_k with Cesaro mean
    above a has y_k >= a for every k. If y_n < a, then y_m <= y_n for m > n and the mean tends to at most y_n."""
    out = Derivation("Lemma 16: a non-increasing sequence stays above its Cesaro limit")
    n_big, n, head, y_n = sp.symbols("N n S_n y_n", positive=True)
    mean_bound = (head + (n_big - n) * y_n) / n_big
    out.step("For N > n, with S_n the sum of the first n terms and y_m <= y_n after n, the mean is at most",
             sp.Eq(sp.Symbol("(1/N) sum_{k<=N} y_k <="), mean_bound))
    out.step("whose limit is y_n: a limit above a contradicts y_n < a (eqs. 90-92).",
             sp.Eq(sp.Symbol("lim_N"), sp.limit(mean_bound, n_big, sp.oo)), name="cesaro_limit")
    return out


def residual_gap_series(width: int, gamma_value: float) -> float:
    """Claim 4: mu_1 - mu_2 of products of I + gamma W, W i.i.d. N(0, 1), to leading order: gamma^2.

    Small gamma makes ln sigma_i a diffusion with drift mu_i = gamma^2 (d - 2i) / 2 + O(gamma^4) (sum:
    E ln|det(I + gamma W)| = -gamma^2 d / 2 + O(gamma^4)); see :func:`derive_residual_gap`.
    """
    width = check_width(width, 2)
    gamma_value = check_range(gamma_value, "gamma", 0.0, open_low=True, why="the residual strength")
    with np.errstate(over="ignore"):
        gap = _residual_gap()(width, np.float64(gamma_value))
    return float(check_finite_result(gap, f"the gap gamma^2 for gamma = {gamma_value:g}"))


@cache
def _residual_gap():
    return sp.lambdify((d, gamma), derive_residual_gap()["gap"], modules="numpy", cse=True)


def derive_residual_gap() -> Derivation:
    """Claim 4: the top exponent of I + gamma W is (1/2) E ln[(1 + gamma g)^2 + gamma^2 chi^2_(d-1)]; expanded to
    gamma^2 it is gamma^2 (d - 2) / 2. With the sum rule E ln|det| = -gamma^2 d / 2 and the exponents of the small-
    gamma diffusion evenly spaced, mu_i = gamma^2 (d - 2i) / 2 and the gap is gamma^2."""
    out = Derivation("Claim 4: the Lyapunov gap of residual products is gamma^2 to leading order")
    g, chi = sp.symbols("g chi^2", real=True)
    x = 2 * gamma * g + gamma**2 * (g**2 + chi)
    series = sp.expand(sp.series(sp.log(1 + sp.Symbol("x")), sp.Symbol("x"), 0, 3).removeO().subs(sp.Symbol("x"), x))
    second = sp.expand(series).coeff(gamma, 2)
    out.step("ln[(1 + gamma g)^2 + gamma^2 chi^2] to order gamma^2 (its gamma term has mean 0):",
             sp.Eq(sp.Symbol("[gamma^2]"), second))
    mu1 = sp.expand(gamma**2 * second.subs({g**2: 1, chi: d - 1}) / 2)
    out.step("E g^2 = 1 and E chi^2_(d-1) = d - 1 give the top exponent", sp.Eq(sp.Symbol("mu_1"), mu1), name="mu1")
    i = sp.Symbol("i", integer=True, positive=True)
    total = sp.summation(gamma**2 * (d - 2 * i) / 2, (i, 1, d))
    out.step("mu_i = gamma^2 (d - 2i) / 2 matches mu_1 and the sum rule E ln|det(I + gamma W)| = "
             "-gamma^2 E Tr W^2 / 2:",
             sp.Eq(sp.Symbol("sum_i mu_i"), sp.factor(total)), name="sum_rule")
    out.step("so the gap, and ln(sigma_1 / sigma_2) after L layers, gamma^2 L: collapse unless gamma = O(1/sqrt L)",
             sp.Eq(sp.Symbol("mu_1 - mu_2"), sp.simplify(mu1 - gamma**2 * (d - 4) / 2)), name="gap")
    return out


def uniform_sampler(width: int, gamma_value: float):
    """Factors I + gamma W (W for gamma = oo) with W_ij ~ U[-sqrt 3, sqrt 3] (Lemma 3 (b)), for the QR method of
    :func:`bnsym.products.lyapunov_samples`."""
    width, gamma_value = check_width(width, 2), check_gamma(gamma_value)

    def sample(gen: torch.Generator, n: int) -> torch.Tensor:
        w = (2 * torch.rand(n, width, width, generator=gen, device=gen.device, dtype=torch.float64) - 1) * 3**0.5
        if np.isinf(gamma_value):
            return w
        return torch.eye(width, dtype=torch.float64, device=gen.device) + gamma_value * w
    return sample


def derive_centring(samples: int = 4) -> Derivation:
    """Claim 9 (App. C): with linear layers, centring is redundant after the first layer. G = I - 1 1^T / N is a
    projector acting on the samples (right), W and BN's row scaling D act on the features (left), so
    BN_centred(W H G) = D W H G G = D W H G: the centred network from X is the uncentred chain from X G."""
    out = Derivation("Claim 9: centring commutes with linear layers and batch norm's row scaling")
    ones = sp.ones(samples, 1)
    g = sp.eye(samples) - ones * ones.T / samples
    out.step(f"G is a projector (N = {samples}): G^2 - G =", sp.Eq(sp.Symbol("||G^2 - G||"), (g * g - g).norm()),
             name="projector_residual")
    h = sp.Matrix(2, samples, lambda i, j: sp.Symbol(f"h_{i + 1}{j + 1}", real=True))
    w = sp.Matrix(2, 2, lambda i, j: sp.Symbol(f"W_{i + 1}{j + 1}", real=True))
    dd = sp.diag(*sp.symbols("D_1 D_2", positive=True))
    centred_layer = dd * ((w * h * g) * g)  # a layer on a centred input H G, then centring, then row scaling
    out.step("so a centred layer on a centred input is the uncentred layer (d = 2):",
             sp.Eq(sp.Symbol("||D (W H G) G - D W (H G)||"), sp.expand(centred_layer - dd * w * (h * g)).norm()),
             name="layer_residual")
    return out


def derive_invariant_union() -> Derivation:
    """Example 17 (App. F): T = {a P}, P the swap of two coordinates, maps span(e_1) and span(e_2) onto each other,
    so their union is invariant and T is not strongly irreducible (Def. 6); its products a^n P^n keep rank 2 and
    never contract to rank one, which is why Bougerol's theorem (Lemma 18) needs both properties."""
    out = Derivation("Example 17: a set that is not strongly irreducible")
    a = sp.Symbol("a", positive=True)
    p = sp.Matrix([[0, 1], [1, 0]])
    e1, e2 = sp.Matrix([1, 0]), sp.Matrix([0, 1])
    out.step("a P e_1 - a e_2 and a P e_2 - a e_1: V_1 = span(e_2) and V_2 = span(e_1) are swapped",
             sp.Eq(sp.Symbol("residuals"), sp.Tuple((a * p * e1 - a * e2).norm(), (a * p * e2 - a * e1).norm())),
             name="swap_residuals")
    out.step("P^2 = I, so every product a^n P^n has both singular values a^n: no contraction to rank one",
             sp.Eq(sp.Symbol("||P^2 - I||"), (p * p - sp.eye(2)).norm()), name="square_minus_identity")
    return out
