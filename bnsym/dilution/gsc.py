"""Gradient scale, dilution and residual networks (Philipp, Song & Carbonell 2018, arXiv 1712.05577).

Conventions of the paper (opposite of the usual ordering): layers are counted from the error layer.
f_0 is the error (a scalar), f_1 the prediction, f_L the lowest layer (applied first to the input
x = f_{L+1}); J_k^l = d f_l / d f_k for l <= k.

Definitions (numpy, any leading axes):

* quadratic expectation Q[X] = E[X^2]^(1/2) (:func:`quadratic_mean`);
* qm norm of an m x n matrix ||A||_qm = ||A||_F / sqrt(n) = Q_u ||A u||_2, u uniform on the unit
  sphere of R^n (Definition 1; :func:`qm_norm`, derived in :func:`derive_qm_norm`);
* gradient scale coefficient GSC(k, l) = ||J_k^l||_qm ||f_k||_2 / ||f_l||_2 (Definition 2, unsquared as
  in every proof and table; :func:`datapoint_gsc`);
* exploding gradients with rate r and intercept c: GSC(k, l) >= c r^(k - l) (Definition 3;
  :func:`fit_explosion` fits log GSC(l, 0) = log c + l log r);
* k-dilution: f(v) = S v + rho(v) with Q||S v|| / Q||rho(v)|| = k (Definition 4);
* effective depth: the largest lambda whose lambda-residual gradient terms are not negligible, here with
  Veit's bound on their size (:func:`residual_tail_bound`, :func:`effective_depth`).

Every function checks its arguments by the input contract of :mod:`bnsym.core.validation` and returns finite values;
ratios r, k lie in [``MIN_RATIO``, ``MAX_RATIO``] and depths L in [0, ``MAX_DEPTH``] (their docstrings say why).

Results, each derived in SymPy from its premises and lambdified (cse=True):

* Theorem 3: a k-diluted block with undiluted rate r grows the GSC by sqrt((k^2 + r^2)/(k^2 + 1))
  (:func:`diluted_rate`), to first order 1 + (r - 1)/(k^2 + 1) (:func:`first_order_diluted_rate`);
* Proposition 7: blocks k_b-diluted compose to a ((prod_b (1 + k_b^-2)) - 1)^(-1/2)-diluted block
  (:func:`composed_dilution`);
* the mean-field per-unit GSC rate of [linear, batch norm, phi], r^2 = E[phi'(z)^2] / Var phi(z)
  (pi/(pi - 1) for ReLU), and E[phi'^2]/E[phi^2] for layer norm (:func:`normalised_gsc_rate`).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
from scipy.special import gammaln

from ..core.activations import Activation, parse_activation
from ..core.derivation import Derivation
from ..core.estimate import ROUNDING
from ..core.kernels import lambdified
from ..core.lazy import lazy_module
from ..core.validation import check_activation, check_number, check_real_array, check_whole_number, shown
from ..meanfield.kernels import c_alpha, hermite_nodes

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use

HERMITE_NODES = 512  # Gauss-Hermite nodes of a smooth phi's moments (tanh: 256 and 512 agree to 3e-15, 128 to 2e-11)
integrate = lazy_module("scipy.integrate")  # quad, for a kinked phi without closed forms (about 0.2 s of CPU to import)

MIN_RATIO, MAX_RATIO = 1e-150, 1e150  # the formulas square r and k and add or multiply two squares: all stay normal
MAX_DEPTH = 10**8  # the tail sums cost O(L) time and memory (0.8 GB at 1e8); residual networks are far shallower

# --------------------------------------------------------------------------------------------
# definitions


def _root_mean_square(x: np.ndarray, axis) -> np.ndarray:
    """sqrt(mean(x^2)) along ``axis``, scaled by max |x| so that x^2 neither overflows nor underflows."""
    scale = np.max(np.abs(x), axis=axis, keepdims=True)
    unit = np.divide(x, scale, out=np.zeros_like(x), where=scale > 0)
    return np.squeeze(scale, axis=axis) * np.sqrt(np.mean(np.square(unit), axis=axis))


def _finite(value: np.ndarray, what: str) -> np.ndarray:
    if not np.all(np.isfinite(value)):
        raise ValueError(f"{what} overflows float64 for these arguments")
    return value


def quadratic_mean(x: np.ndarray, axis: int | tuple[int, ...] | None = None) -> np.ndarray:
    """Q[X] = E[X^2]^(1/2), the quadratic expectation of the samples along ``axis`` (finite, at least one)."""
    return _root_mean_square(check_real_array(x, "x", min_ndim=1), axis)


def qm_norm(a: np.ndarray) -> np.ndarray:
    """||A||_qm = ||A||_F / sqrt(n) for (..., m, n) matrices A (n = input dimension; Definition 1)."""
    a = check_real_array(a, "A (qm_norm needs matrices (..., m, n))", min_ndim=2)
    return _root_mean_square(a.reshape(*a.shape[:-2], -1), -1) * math.sqrt(a.shape[-2])


def datapoint_gsc(jacobian: np.ndarray, f_k: np.ndarray, f_l: np.ndarray) -> np.ndarray:
    """GSC(k, l) = ||J_k^l||_qm ||f_k||_2 / ||f_l||_2 for one datapoint (Definition 2, unsquared).

    ``jacobian`` is J_k^l = d f_l / d f_k, shape (..., d_l, d_k); f_k (..., d_k); f_l (..., d_l).
    """
    jacobian = check_real_array(jacobian, "jacobian", min_ndim=2)
    f_k, f_l = check_real_array(f_k, "f_k", min_ndim=1), check_real_array(f_l, "f_l", min_ndim=1)
    if jacobian.shape[-2:] != (f_l.shape[-1], f_k.shape[-1]):
        raise ValueError(f"jacobian = d f_l / d f_k must have shape (..., d_l, d_k) = (..., {f_l.shape[-1]}, "
                         f"{f_k.shape[-1]}) for these f_l and f_k, got {jacobian.shape}")
    try:
        np.broadcast_shapes(jacobian.shape[:-2], f_k.shape[:-1], f_l.shape[:-1])
    except ValueError:
        raise ValueError(f"the leading axes of jacobian {jacobian.shape}, f_k {f_k.shape} and f_l {f_l.shape} "
                         "do not broadcast") from None
    norm_l = _root_mean_square(f_l, -1)
    if np.any(norm_l == 0):
        raise ValueError("GSC(k, l) is undefined where f_l = 0 (it divides by ||f_l||)")
    with np.errstate(over="ignore"):
        return _finite(qm_norm(jacobian) * (_root_mean_square(f_k, -1) / norm_l)
                       * math.sqrt(f_k.shape[-1] / f_l.shape[-1]), "GSC(k, l)")


def derive_qm_norm() -> Derivation:
    """Q_u ||A u||_2 = ||A||_F / sqrt(n) for a symbolic 2 x 2 A, u uniform on the unit circle.

    This is why the GSC is *unsquared*: Proposition 2's relative sensitivity to a random perturbation
    eps u is Q_u ||J u|| ||f_k|| / ||f_l||, linear in J, i.e. ||J||_qm to the first power.
    """
    d = Derivation("qm norm = quadratic expectation of ||A u|| over unit vectors u (n = 2)")
    t = sp.Symbol("t", real=True)
    a = sp.Matrix(2, 2, sp.symbols("a_11 a_12 a_21 a_22", real=True))
    u = sp.Matrix([sp.cos(t), sp.sin(t)])
    squared = sp.expand(((a * u).T * (a * u))[0])
    d.step("Squared length of A u for u = (cos t, sin t):", sp.Eq(sp.Symbol("||Au||^2"), squared))
    mean = sp.simplify(sp.integrate(squared, (t, 0, 2 * sp.pi)) / (2 * sp.pi))
    frobenius = sum(entry**2 for entry in a) / 2
    d.step("Average over the circle:", sp.Eq(sp.Symbol("E_u||Au||^2"), mean))
    d.step("minus ||A||_F^2 / n:", sp.Eq(sp.Symbol("E_u||Au||^2 - ||A||_F^2/n"), sp.simplify(mean - frobenius)),
           name="minus_frobenius")
    d.result = sp.sqrt(mean)
    return d


def fit_explosion(gsc_to_error: np.ndarray, layers: np.ndarray | None = None) -> tuple[float, float]:
    """(r, c) of the least-squares line log GSC(l, 0) = log c + l log r (Definition 3, "exploding").

    ``gsc_to_error[i]`` is GSC(layers[i], 0); default layers 1, 2, ...
    """
    values = check_real_array(gsc_to_error, "gsc_to_error", min_ndim=1)
    if values.ndim != 1 or values.size < 2 or np.any(values <= 0):
        raise ValueError("fit_explosion needs gsc_to_error to hold at least two positive GSC values")
    layers = np.arange(1, values.size + 1.0) if layers is None else check_real_array(layers, "layers", min_ndim=1)
    if layers.shape != values.shape or np.ptp(layers) == 0:
        raise ValueError(f"layers must be {values.size} layer indices, not all equal, one per GSC value; got {layers}")
    with np.errstate(all="ignore"):
        centred = layers - layers.mean()
        slope = np.sum(centred * (np.log(values) - np.log(values).mean())) / np.sum(centred**2)
        rate, intercept = np.exp(slope), np.exp(np.log(values).mean() - slope * layers.mean())
    if not (np.isfinite(rate) and np.isfinite(intercept) and rate > 0 and intercept > 0):
        raise ValueError("the fitted rate or intercept of fit_explosion over- or underflows float64 for these "
                         "layers and gsc_to_error")
    return float(rate), float(intercept)


def _log_tails(depth: int, p: float) -> np.ndarray:
    """log sum_{l=lam}^{L} p^l C(L, l) for lam = 0..L (-inf for p = 0, lam > 0): O(L), summed in log space."""
    ls = np.arange(depth + 1.0)
    with np.errstate(divide="ignore"):
        log_terms = gammaln(depth + 1) - gammaln(ls + 1) - gammaln(depth - ls + 1) + ls * np.log(p)
    log_terms[0] = 0.0  # p^0 = 1, also for p = 0
    return np.logaddexp.accumulate(log_terms[::-1])[::-1]


def _depth_arguments(depth: object, p: object) -> tuple[int, float]:
    depth = check_whole_number(depth, "depth L", 0, MAX_DEPTH, "the tail sums cost O(L) time and memory")
    p = check_number(p, "p")
    if not (math.isfinite(p) and p >= 0):
        raise ValueError(f"p bounds operator norms, so it must be a finite number >= 0; got {p}")
    return depth, p


def residual_tail_bound(depth: int, p: float, lam: int) -> float:
    """sum_{l=lam}^{L} p^l C(L, l): Veit's bound on ||res^lambda|| / ||d f_0 / d f_1|| (section 4.1).

    res^lambda sums the gradient terms with at least lambda residual Jacobians, each of operator norm < p.
    """
    depth, p = _depth_arguments(depth, p)
    lam = check_whole_number(lam, "lambda", 0, MAX_DEPTH)
    if lam > depth:
        return 0.0
    with np.errstate(over="ignore"):
        return float(_finite(np.exp(_log_tails(depth, p)[lam]), "residual_tail_bound (at most (1 + p)^L)"))


def effective_depth(depth: int, p: float, threshold: float) -> int:
    """The largest lambda whose lambda-residual terms are not negligible: residual_tail_bound >= threshold
    (Veit et al.); 0 if none is. O(L): the tails are non-increasing in lambda and summed once. A tail equal to
    the threshold up to the rounding of its O(L) sum counts as reaching it."""
    depth, p = _depth_arguments(depth, p)
    threshold = check_number(threshold, "threshold h")
    if not (math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"the threshold h must be a finite number > 0, got {threshold}")
    # the log tails carry about L roundings: a tail within that of the threshold counts as reaching it (a tie,
    # e.g. p = 1 and h = 1 at lambda = L, must not be decided by the CPU's last bit)
    log_tails, log_h = _log_tails(depth, p), math.log(threshold)
    slack = 4 * (depth + 1) * ROUNDING * np.maximum(1.0, np.maximum(abs(log_h), np.abs(log_tails)))
    above = np.nonzero(log_tails >= log_h - slack)[0]
    return int(above[-1]) if above.size else 0


# --------------------------------------------------------------------------------------------
# Theorem 3: dilution reduces the growth of the GSC


@cache
def derive_diluted_rate() -> Derivation:
    """Theorem 3 (F.3) from its premises: the GSC growth of f(u) = S u + rho(u), rho k-diluted by S."""
    from ..core.symbols import k, r, r_d

    d = Derivation("Theorem 3: GSC growth rate of a k-diluted block")
    q_u, q_g, q_rho, q_s, q_grho, q_gs = sp.symbols(
        r"Q\|u\| Q\|g\| Q\|\rho(u)\| Q\|Su\| Q\|gR\| Q\|gS\|", positive=True
    )
    dil = d.step("k-dilution (Definition 4):", sp.Eq(k, q_s / q_rho))
    rate = d.step("undiluted rate of rho (R = Jacobian of rho, g the incoming gradient):",
                  sp.Eq(r, q_grho * q_u / (q_rho * q_g)))
    unit = d.step("S alone preserves the GSC (third assumption):", sp.Eq(1, q_gs * q_u / (q_s * q_g)))
    solved = sp.solve([dil, rate, unit], [q_s, q_grho, q_gs], dict=True)[0]
    forward_sq = q_rho**2 + q_s**2
    backward_sq = q_grho**2 + q_gs**2
    d.step(
        "E (Su).rho(u) = 0 and E (gR).(gS) = 0 make the squared norms add (Pythagoras):",
        sp.Eq(sp.Symbol(r"Q\|\rho(u)+Su\|^2"), forward_sq),
    )
    d.step("likewise backward:", sp.Eq(sp.Symbol(r"Q\|gR+gS\|^2"), backward_sq))
    diluted = sp.sqrt(backward_sq) * q_u / (sp.sqrt(forward_sq) * q_g)
    result = sp.simplify(sp.factor(diluted.subs(solved)))
    d.step("the block's rate, after substituting the three premises:", sp.Eq(r_d, result))
    d.result = result
    return d


@cache
def derive_first_order_diluted_rate() -> Derivation:
    """Theorem 3's main-text form: the expansion of the exact rate around r = 1."""
    from ..core.symbols import r, r_d

    d = Derivation("Theorem 3, first order in r - 1")
    eps = sp.Symbol("epsilon", real=True)
    exact = derive_diluted_rate().result
    series = sp.expand(sp.series(exact.subs(r, 1 + eps), eps, 0, 3).removeO())
    coefficients = [sp.factor(sp.simplify(series.coeff(eps, n))) for n in range(3)]
    d.step(
        "expand in epsilon = r - 1 (to second order):",
        sp.Eq(r_d, sum((c * eps**n for n, c in enumerate(coefficients)), sp.Integer(0)) + sp.Order(eps**3)),
    )
    first = coefficients[0] + coefficients[1] * (r - 1)
    d.step("keep the first order:", sp.Eq(r_d, first))
    d.step("second-order coefficient (>= 0: the first order underestimates):", sp.Eq(sp.Symbol("c_2"), coefficients[2]),
           name="second_order")
    inverse = [s for s in sp.solve(sp.Eq(r_d, exact), r) if s.is_positive is not False]
    d.step("exact inverse (undo the dilution):", sp.Eq(r, inverse[0]), name="inverse")
    d.result = first
    return d


@cache
def _rate_kernels():
    """Lambdified exact rate, first-order rate and exact inverse (numpy, cse=True)."""
    from ..core.symbols import k, r, r_d

    exact = sp.lambdify((r, k), derive_diluted_rate().result, modules="numpy", cse=True)
    first = sp.lambdify((r, k), derive_first_order_diluted_rate().result, modules="numpy", cse=True)
    inverse = sp.lambdify((r_d, k), derive_first_order_diluted_rate()["inverse"], modules="numpy", cse=True)
    return exact, first, inverse


def _positive(name: str, value, why: str) -> np.ndarray:
    """A ratio of norms: finite, in [MIN_RATIO, MAX_RATIO]."""
    try:
        array = check_real_array(value, name)
    except ValueError as error:
        raise ValueError(f"{error} ({why})") from None
    if np.any(array <= 0):
        raise ValueError(f"{name} must be finite and > 0 ({why}), got {shown(value)}")
    if np.any(array < MIN_RATIO) or np.any(array > MAX_RATIO):
        raise ValueError(f"{name} must lie in [{MIN_RATIO:g}, {MAX_RATIO:g}] (the formulas square it and add or "
                         f"multiply two squares, which must stay normal float64 numbers), got {shown(value)}")
    return array


def _rate_arguments(rate, dilution) -> tuple[np.ndarray, np.ndarray]:
    rate = _positive("r", rate, "a GSC growth rate is a ratio of norms")
    dilution = _positive("k", dilution, "k is a ratio of norms; k <= 0 is no dilution")
    return rate, dilution


def diluted_rate(r: float | np.ndarray, k: float | np.ndarray) -> np.ndarray:
    """sqrt((k^2 + r^2)/(k^2 + 1)): Theorem 3's exact rate of a k-diluted block of undiluted rate r."""
    rate, dilution = _rate_arguments(r, k)
    return _finite(_rate_kernels()[0](rate, dilution), "diluted_rate")


def first_order_diluted_rate(r: float | np.ndarray, k: float | np.ndarray) -> np.ndarray:
    """1 + (r - 1)/(k^2 + 1): Theorem 3 to first order in r - 1 (main text)."""
    rate, dilution = _rate_arguments(r, k)
    return _finite(_rate_kernels()[1](rate, dilution), "first_order_diluted_rate")


def undiluted_rate(rd: float | np.ndarray, k: float | np.ndarray) -> np.ndarray:
    """sqrt((k^2 + 1) r_d^2 - k^2): the exact inverse of :func:`diluted_rate` (r_d >= 1 for r >= 1)."""
    rate, dilution = _rate_arguments(rd, k)
    with np.errstate(over="ignore"):
        radicand = (dilution**2 + 1) * rate**2 - dilution**2
        if np.any(radicand <= 0):
            raise ValueError("r_d is too small for this k: no undiluted rate r > 0 gives it")
        return _finite(_rate_kernels()[2](rate, dilution), "undiluted_rate")


# --------------------------------------------------------------------------------------------
# Proposition 7: composition of diluted blocks


def two_block_dilution(k_outer: sp.Expr, k_inner: sp.Expr) -> sp.Expr:
    """Dilution of f_1 o f_2 (f_2 applied first), derived from the premises of Proposition 7.

    Each block f_b(v) = S_b v + rho_b(v) scales Q||v||^2 by c_b^2 along S_b and by c_b^2 / k_b^2 along
    rho_b; the pieces are orthogonal in expectation (rho_b SSD: its direction is uniform and
    independent of everything else), so squared norms add.
    """
    c1, c2, qu = sp.symbols("c_1 c_2 Q_u", positive=True)
    skip_sq = c1**2 * c2**2 * qu**2  # Q||S_1 S_2 u||^2
    inner_out_sq = c2**2 * (1 + k_inner**-2) * qu**2  # Q||f_2(u)||^2
    residual_sq = c1**2 * c2**2 * qu**2 / k_inner**2 + c1**2 * inner_out_sq / k_outer**2  # S_1 rho_2 + rho_1(f_2)
    return sp.sqrt(sp.simplify(skip_sq / residual_sq))


@cache
def derive_composed_dilution() -> Derivation:
    """Proposition 7 (E.7) by induction on the number of blocks."""
    from ..core.symbols import P_n

    d = Derivation("Proposition 7: dilution of a composition of diluted blocks")
    k1, k2, k3, kn = sp.symbols("k_1 k_2 k_3 k_{n+1}", positive=True)
    two = two_block_dilution(k1, k2)
    d.step("two blocks (squared norms of S_1 rho_2(u) and rho_1(f_2(u)) add):", sp.Eq(sp.Symbol("k_{12}"), two))
    law = (sp.Mul(1 + k1**-2, 1 + k2**-2, evaluate=False) - 1) ** sp.Rational(-1, 2)
    d.step("minus the claimed law for B = 2, inverse squares:",
           sp.Eq(sp.Symbol("k_{12}^{-2} - law^{-2}"), sp.simplify(two**-2 - law**-2)))
    three = two_block_dilution(two_block_dilution(k1, k2), k3)
    three_law = ((1 + k1**-2) * (1 + k2**-2) * (1 + k3**-2) - 1) ** sp.Rational(-1, 2)
    d.step("three blocks by nesting, minus the 3-fold law:",
           sp.Eq(sp.Symbol("k_{123}^{-2} - law^{-2}"), sp.simplify(three**-2 - three_law**-2)))
    hypothesis = (P_n - 1) ** sp.Rational(-1, 2)
    d.step("induction hypothesis, P_n = prod_{b<=n} (1 + k_b^-2):", sp.Eq(sp.Symbol("k_{1..n}"), hypothesis))
    step = two_block_dilution(hypothesis, kn)
    target = (P_n * (1 + kn**-2) - 1) ** sp.Rational(-1, 2)
    d.step("inductive step: one more block, minus the law for n + 1:",
           sp.Eq(sp.Symbol("k_{1..n+1}^{-2} - law^{-2}"), sp.simplify(step**-2 - target**-2)))
    d.result = hypothesis
    return d


@cache
def _composition_kernel():
    """The composed dilution as a function of P_n - 1, lambdified from :func:`derive_composed_dilution`."""
    from ..core.symbols import P_n

    excess = sp.Symbol("P_n - 1", positive=True)
    return sp.lambdify(excess, derive_composed_dilution().result.subs(P_n, excess + 1), modules="numpy", cse=True)


def composed_dilution(ks) -> np.ndarray:
    """((prod_b (1 + 1/k_b^2)) - 1)^(-1/2) over the last axis of ``ks`` (Proposition 7).

    P_n - 1 is evaluated as expm1(sum_b log1p(k_b^-2)), which keeps its digits where every k_b is large.
    """
    array = _positive("every k_b", ks, "each block's dilution is a ratio of norms")
    if array.ndim == 0:
        raise ValueError(f"ks must be a sequence of dilutions k_b (one per block), got one number {shown(ks)}")
    with np.errstate(over="ignore"):
        excess = np.expm1(np.sum(np.log1p(array**-2.0), axis=-1))
    if not np.all(np.isfinite(excess)):
        raise ValueError("the composed dilution of these ks underflows float64: prod_b (1 + k_b^-2) overflows")
    return _composition_kernel()(excess)


# --------------------------------------------------------------------------------------------
# the mean-field per-unit GSC rate with normalisation


@cache
def derive_normalised_gsc_rate() -> Derivation:
    """Squared GSC rate of one unit [linear W, norm, phi] at the mean-field stationary state.

    Width N, W_ij ~ N(0, s^2/N); input x = phi(z') of the previous unit; z = norm(W x) ~ N(0, 1)
    per neuron. Batch norm divides by the per-neuron std over the batch, sigma^2 = s^2 Var phi;
    layer norm by the per-vector std, sigma^2 = s^2 E phi^2 (a random W leaves no common mean).
    Backward, with g independent of z: ||g_x||^2 = s^2 ||g_h||^2 = s^2 ||g||^2 E[phi'^2] / sigma^2.
    """
    from ..core.symbols import E_dphi2, E_phi, E_phi2, r, z

    d = Derivation("Mean-field GSC rate of [linear, normalisation, phi]")
    n, s, g2 = sp.symbols("N s g^2", positive=True)
    sigma2 = sp.Symbol(r"\sigma^2", positive=True)
    x_sq = n * E_phi2  # ||x||^2, x = phi(z') of the previous unit
    y_sq = n * E_phi2  # ||y||^2, y = phi(z)
    gx_sq = s**2 * g2 * E_dphi2 / sigma2  # ||g_x||^2 = ||W^T g_h||^2
    rate_sq = (gx_sq / n) * x_sq / ((g2 / n) * y_sq)
    d.step("squared rate ||g_x||_qm^2 ||x||^2 / (||g_y||_qm^2 ||y||^2):", sp.Eq(r**2, rate_sq))
    batch = sp.simplify(rate_sq.subs(sigma2, s**2 * (E_phi2 - E_phi**2)))
    layer = sp.simplify(rate_sq.subs(sigma2, s**2 * E_phi2))
    d.step("batch norm, sigma^2 = s^2 Var phi(z):", sp.Eq(sp.Symbol("r^2_batch"), batch), name="batch")
    d.step("layer norm, sigma^2 = s^2 E phi(z)^2:", sp.Eq(sp.Symbol("r^2_layer"), layer), name="layer")
    relu = sp.Max(z, 0)
    density = sp.exp(-(z**2) / 2) / sp.sqrt(2 * sp.pi)
    moments = {
        E_phi: sp.integrate(z * density, (z, 0, sp.oo)),
        E_phi2: sp.integrate(z**2 * density, (z, 0, sp.oo)),
        E_dphi2: sp.integrate(density, (z, 0, sp.oo)),
    }
    for symbol, value in moments.items():
        d.step(f"ReLU, {relu}: Gaussian integral", sp.Eq(symbol, value))
    relu_batch = sp.simplify(batch.subs(moments))
    d.step("batch-ReLU:", sp.Eq(sp.Symbol("r^2_batch-ReLU"), relu_batch), name="batch_relu")
    d.result = batch
    return d


def gaussian_moments(phi: Activation) -> tuple[float, float, float]:
    """(E phi(z), E phi(z)^2, E phi'(z)^2) for z ~ N(0, 1): closed forms for positive-homogeneous phi
    (:func:`homogeneous_moments`); Gauss-Hermite for a phi without kinks where ``HERMITE_NODES`` nodes and half
    as many agree to 1e-12 of E phi^2 (:func:`hermite_moments`: gelu, tanh, erf, silu, ...); else adaptive
    quadrature split at the kinks, to the same relative tolerance."""
    if phi.is_homogeneous:
        return homogeneous_moments(phi)
    if not phi.kinks:
        fine, coarse = hermite_moments(phi, HERMITE_NODES), hermite_moments(phi, HERMITE_NODES // 2)
        if np.all(np.isfinite(fine)) and np.max(np.abs(fine - coarse)) <= 1e-12 * abs(fine[1]):
            return float(fine[0]), float(fine[1]), float(fine[2])
    edges = [-np.inf, *sorted(phi.kinks), np.inf]
    weight = lambda t: math.exp(-t * t / 2) / math.sqrt(2 * math.pi)  # noqa: E731

    def integrand(f, t: float) -> float:  # where the weight underflows to 0, phi may overflow (a user's formula)
        w = weight(t)
        with np.errstate(all="ignore"):
            return float(f(t)) * w if w > 0 else 0.0

    def expect(f) -> float:
        return sum(integrate.quad(lambda t: integrand(f, t), lo, hi, epsabs=1e-13, epsrel=1e-12)[0]
                   for lo, hi in zip(edges, edges[1:]))

    return (
        expect(phi.numpy),
        expect(lambda t: phi.numpy(t) ** 2),
        expect(lambda t: phi.numpy_derivative(t) ** 2),
    )


def hermite_moments(phi: Activation, nodes: int) -> np.ndarray:
    """(E phi, E phi^2, E phi'^2) by the probabilists' Gauss-Hermite rule with ``nodes`` nodes (exact for polynomials
    of degree < 2 nodes, geometric convergence for smooth phi); non-finite where phi overflows at the outer nodes."""
    x, w = hermite_nodes(nodes)
    with np.errstate(all="ignore"):
        value, slope = phi.numpy(x), phi.numpy_derivative(x)
        return np.array([w @ value, w @ value**2, w @ slope**2])


def homogeneous_moments(phi: Activation) -> tuple[float, float, float]:
    """(E phi, E phi^2, E phi'^2) for phi = a rho_alpha(z) - b rho_alpha(-z) (Prop E.17), z ~ N(0, 1).

    E[rho_alpha(z)^p] = c_(alpha p / 2) with c_alpha = E[rho_alpha(z)^2] (Defn E.7), and the two parts have disjoint
    supports, so E phi = (a - b) c_(alpha/2), E phi^2 = (a^2 + b^2) c_alpha and, with phi' = alpha (a rho_(alpha-1)(z)
    + b rho_(alpha-1)(-z)), E phi'^2 = alpha^2 (a^2 + b^2) c_(alpha-1), finite for alpha > 1/2 and infinite below
    (E[z^(2 alpha - 2); z > 0] diverges at 0, where c_(alpha-1)'s Gamma formula would continue to a finite value).
    """
    alpha, (a, b) = phi.degree, phi.ab
    slope = alpha**2 * (a * a + b * b) * c_alpha(alpha - 1) if alpha > 0.5 else math.inf
    return float((a - b) * c_alpha(alpha / 2)), float((a * a + b * b) * c_alpha(alpha)), float(slope)


@lambdified()
def _normalised_rate_kernels():
    """The rate of each normalisation as a function of (E phi, E phi^2, E phi'^2), from the derivation."""
    from ..core.symbols import E_dphi2, E_phi, E_phi2

    derivation = derive_normalised_gsc_rate()
    return {name: ((E_phi, E_phi2, E_dphi2), derivation[name]) for name in ("batch", "layer")}


def normalised_gsc_rate(phi: str | Activation, norm: str = "batch") -> float:
    """Mean-field per-unit GSC rate r (not squared) of [linear, ``norm``, phi]: sqrt(E phi'^2 / Var phi) for batch."""
    kernels = _normalised_rate_kernels()
    if norm not in kernels:
        raise ValueError(f"unknown normalisation {norm!r}; the mean-field rate is derived for {tuple(kernels)}")
    moments = gaussian_moments(check_activation(parse_activation(phi), slope=True))
    return float(_finite(np.sqrt(kernels[norm](*moments)), f"the GSC rate of activation {phi}"))
