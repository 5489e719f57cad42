"""Arccosine kernels, the Gaussian kernel V_phi of positive-homogeneous activations, and V_phi of any phi
by Gauss-Hermite quadrature.

Conventions (Yang et al. 2019, Sec. E.1; Cho & Saul 2009). With rho_alpha(z) = max(z, 0)^alpha and
(u, v) standard normal with correlation c,

    c_alpha = E[rho_alpha(u)^2] = 2^(alpha-1) Gamma(alpha + 1/2) / sqrt(pi),
    J_alpha(c) = E[rho_alpha(u) rho_alpha(v)] / c_alpha,          so J_alpha(1) = 1, J_alpha(-1) = 0.

For phi(z) = a rho_alpha(z) - b rho_alpha(-z) (Prop E.17),

    J_phi(c) = (a^2 + b^2) J_alpha(c) - 2 a b J_alpha(-c),
    V_phi(Sigma)_ij = E[phi(h_i) phi(h_j)]
                    = c_alpha (Sigma_ii Sigma_jj)^(alpha/2) J_phi(Sigma_ij / sqrt(Sigma_ii Sigma_jj)).

The integer-order kernels are *derived* here in SymPy: Sheppard's orthant probability from Price's
theorem, then the ladder d/dc E[rho_n(u) rho_n(v)] = n^2 E[rho_{n-1}(u) rho_{n-1}(v)] (Prop E.14).
Real orders use the hypergeometric series (Sec. 2.1 of our catalogue), checked against the integer
closed forms and against quadrature in the tests.

erf(gamma z) has a closed form too (:func:`erf_kernel`, derived in :func:`derive_erf_kernels`): Williams' (1997)
arcsine kernel, with its slope kernel E[phi'(h) phi'(h)^T], the NTK's derivative map. Other smooth phi go to
Gauss-Hermite (:func:`gauss_hermite_kernel`).
"""

from __future__ import annotations

import weakref
from functools import cache
from typing import Callable

import numpy as np
from scipy.special import gammaln, hyp2f1, roots_hermitenorm

from ..core.activations import Activation
from ..core.derivation import Derivation
from ..core.estimate import Estimate
from ..core.kernels import lambdified
from ..core.lazy import lazy_module

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use

Function = Callable[[np.ndarray], np.ndarray]
MAX_INTEGER_ORDER = 3  # J_0 ... J_3 are evaluated from their derived closed forms
HERMITE_BLOCK = 2**22  # values of psi a Gauss-Hermite rule holds at once (32 MiB of float64 per temporary)


def derive_arccos_kernel(order: int) -> Derivation:
    """J_n(c) for integer n >= 0 by Price's theorem, step by step.

    Price: d/dc E[f(u) g(v)] = E[f'(u) g'(v)]. With f = g = rho_0 = step function, f' = delta, so
    d/dc P(u > 0, v > 0) = p_{u,v}(0, 0) = 1 / (2 pi sqrt(1 - c^2)); P = 1/4 at c = 0.
    With f = g = rho_n, f' = n rho_{n-1}, and E[rho_n(u) rho_n(-u)] = 0 fixes the constant at c = -1.
    """
    from ..core.symbols import c, t

    if order < 0:
        raise ValueError(f"order must be >= 0, got {order}")
    d = Derivation(f"Arccosine kernel J_{order} from Price's theorem")
    density_at_origin = 1 / (2 * sp.pi * sp.sqrt(1 - t**2))
    moment = sp.Rational(1, 4) + sp.integrate(density_at_origin, (t, 0, c))
    d.step("Sheppard's orthant probability, from $\\partial_c P = p_{u,v}(0,0)$ and $P|_{c=0}=1/4$:",
           sp.Eq(sp.Symbol("E[rho_0(u) rho_0(v)]"), moment))
    for n in range(1, order + 1):
        moment = n**2 * sp.integrate(moment.subs(c, t), (t, -1, c))
        moment = sp.simplify(moment)
        d.step(f"Price's ladder, $\\partial_c E[\\rho_{n}\\rho_{n}] = {n**2} E[\\rho_{n - 1}\\rho_{n - 1}]$, "
               f"zero at $c=-1$:", sp.Eq(sp.Symbol(f"E[rho_{n}(u) rho_{n}(v)]"), moment))
    normaliser = sp.simplify(moment.subs(c, 1))
    d.step("Its value at $c = 1$ is $c_n = E[\\rho_n(z)^2]$:", sp.Eq(sp.Symbol(f"c_{order}"), normaliser))
    kernel = sp.simplify((moment / normaliser).rewrite(sp.acos))
    d.result = kernel
    d.step(f"Normalised kernel $\\mathcal{{J}}_{order}(c)$:", sp.Eq(sp.Symbol(f"J_{order}(c)"), kernel))
    return d


@lambdified()
def _integer_kernels():
    """Numeric J_n for n = 0 ... MAX_INTEGER_ORDER, named by n, lambdified from the SymPy derivation."""
    from ..core.symbols import c

    return {str(order): ((c,), derive_arccos_kernel(order).result) for order in range(MAX_INTEGER_ORDER + 1)}


def c_alpha(alpha: float | np.ndarray) -> np.ndarray:
    """c_alpha = E[rho_alpha(z)^2] = 2^(alpha-1) Gamma(alpha + 1/2) / sqrt(pi), z ~ N(0, 1) (Defn E.7)."""
    alpha = np.asarray(alpha, dtype=float)
    return np.exp((alpha - 1) * np.log(2.0) + gammaln(alpha + 0.5) - 0.5 * np.log(np.pi))


@cache
def c_alpha_of(alpha: float) -> float:
    """:func:`c_alpha` of one degree, kept (the closed-form routes ask it once per layer)."""
    return float(c_alpha(alpha))


def c_alpha_symbolic(alpha: sp.Expr) -> sp.Expr:
    """SymPy form of c_alpha."""
    return 2 ** (alpha - 1) * sp.gamma(alpha + sp.Rational(1, 2)) / sp.sqrt(sp.pi)


def arccos_kernel_symbolic(alpha: sp.Expr) -> sp.Expr:
    """J_alpha(c) in SymPy: the derived closed form for integer alpha, the hypergeometric form otherwise."""
    from ..core.symbols import c

    if sp.sympify(alpha).is_Integer:
        return derive_arccos_kernel(int(alpha)).result
    even = 2**alpha * sp.gamma((alpha + 1) / 2) ** 2 / sp.pi * sp.hyper(
        [-alpha / 2, -alpha / 2], [sp.Rational(1, 2)], c**2)
    odd = 2 ** (alpha + 1) * sp.gamma(alpha / 2 + 1) ** 2 / sp.pi * c * sp.hyper(
        [(1 - alpha) / 2, (1 - alpha) / 2], [sp.Rational(3, 2)], c**2)
    return (even + odd) / (4 * c_alpha_symbolic(alpha))


def gauss_hypergeometric(a: float, b: float, c: float, x: np.ndarray) -> np.ndarray:
    """2F1(a, b; c; x), vectorised over x: the Gauss series sum_k (a)_k (b)_k / ((c)_k k!) x^k by Horner where
    |x| <= 1/4 (K terms with max|x|^K < 1e-17), SciPy's hyp2f1 elsewhere. The series is several times faster for
    the correlations of a batch, c^2 <= 1/(B-1)^2."""
    x = np.asarray(x, dtype=float)
    small = np.abs(x) <= 0.25
    every = bool(small.all())  # the usual case: no masking
    xs = x if every else x[small]
    largest = float(np.abs(xs).max()) if xs.size else 0.0
    terms = 1 if largest == 0 else int(np.ceil(np.log(1e-17) / np.log(largest)))
    coefficients = [1.0]
    for k in range(terms):
        coefficients.append(coefficients[-1] * (a + k) * (b + k) / ((c + k) * (k + 1)))
    series = np.full_like(xs, coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        series *= xs
        series += coefficient
    if every:
        return series
    out = np.empty_like(x)
    out[small] = series
    out[~small] = hyp2f1(a, b, c, x[~small])
    return out


def _clip(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """x clipped to [low, high] by two ufuncs, the second in place (np.clip's Python layer costs more than the pass
    at B = 32; a second temporary of B = 256 costs its page faults)."""
    out = np.maximum(x, low)
    return np.minimum(out, high, out=out) if isinstance(out, np.ndarray) else np.minimum(out, high)  # 0-d: a scalar


def arccos_kernel(alpha: float, corr: np.ndarray) -> np.ndarray:
    """J_alpha(c), vectorised over c in [-1, 1], for alpha > -1/2.

    E[rho_a(u) rho_a(v)] = (1/4) [ 2^a Gamma((a+1)/2)^2 / pi * 2F1(-a/2, -a/2; 1/2; c^2)
                                   + 2^(a+1) Gamma(a/2+1)^2 / pi * c * 2F1((1-a)/2, (1-a)/2; 3/2; c^2) ]
    (even part E|u|^a|v|^a plus odd part, each from Mehler's expansion); integer orders use the
    closed forms derived by :func:`derive_arccos_kernel`.
    """
    if not alpha > -0.5:
        raise ValueError(f"the arccosine kernel J_alpha needs alpha > -1/2 (E[rho_alpha^2] finite), got {alpha}")
    corr = _clip(np.asarray(corr, dtype=float), -1.0, 1.0)
    if float(alpha).is_integer() and alpha <= MAX_INTEGER_ORDER:
        return _clip(_integer_kernels()[str(int(alpha))](corr), 0.0, 1.0)  # each J_n depends on c
    x = corr**2
    even = np.exp(alpha * np.log(2.0) + 2 * gammaln((alpha + 1) / 2) - np.log(np.pi)) * gauss_hypergeometric(
        -alpha / 2, -alpha / 2, 0.5, x)
    odd = np.exp((alpha + 1) * np.log(2.0) + 2 * gammaln(alpha / 2 + 1) - np.log(np.pi)) * corr * gauss_hypergeometric(
        (1 - alpha) / 2, (1 - alpha) / 2, 1.5, x)
    return _clip((even + odd) / (4 * c_alpha(alpha)), 0.0, 1.0)


def arccos_kernel_derivative(alpha: float, corr: np.ndarray) -> np.ndarray:
    """J_alpha'(c) = alpha^2 / (2 alpha - 1) * J_{alpha-1}(c) for alpha > 1/2 (Prop E.14)."""
    if not alpha > 0.5:
        raise ValueError(f"J_alpha'(c) is finite on (-1, 1] only for alpha > 1/2, got {alpha}")
    return alpha**2 / (2 * alpha - 1) * arccos_kernel(alpha - 1, corr)


def _homogeneous_parts(phi: Activation) -> tuple[float, float, float]:
    if not phi.is_homogeneous:
        raise ValueError(f"{phi} is not positive-homogeneous: "
                         "the arccosine-kernel route needs phi = a rho_alpha(z) - b rho_alpha(-z)")
    a, b = phi.ab
    return phi.degree, a, b


def phi_kernel(phi: Activation, corr: np.ndarray) -> np.ndarray:
    """J_phi(c) = (a^2 + b^2) J_alpha(c) - 2ab J_alpha(-c) (Cor E.19); J_phi(1) = a^2 + b^2."""
    alpha, a, b = _homogeneous_parts(phi)
    value = arccos_kernel(alpha, corr)  # a new array: scaled in place
    value *= a * a + b * b
    if a * b:  # relu^alpha has b = 0: no second kernel to evaluate
        value -= 2 * a * b * arccos_kernel(alpha, -np.asarray(corr))
    return value


def phi_kernel_derivative(phi: Activation, corr: np.ndarray) -> np.ndarray:
    """J_phi'(c) = (a^2 + b^2) J_alpha'(c) + 2ab J_alpha'(-c)."""
    alpha, a, b = _homogeneous_parts(phi)
    value = arccos_kernel_derivative(alpha, corr)  # a new array: scaled in place
    value *= a * a + b * b
    if a * b:
        value += 2 * a * b * arccos_kernel_derivative(alpha, -np.asarray(corr))
    return value


def pair_kernel(phi: Activation, s11: np.ndarray, s22: np.ndarray, s12: np.ndarray) -> np.ndarray:
    """E[phi(h_1) phi(h_2)], (h_1, h_2) ~ N(0, [[s11, s12], [s12, s22]]), for positive-homogeneous phi (Prop E.10):

        c_alpha (s11 s22)^(alpha/2) J_phi(s12 / sqrt(s11 s22)),   0 where a variance is 0 (phi(0) = 0, alpha > 0).

    Broadcasts over the arrays.
    """
    alpha, _, _ = _homogeneous_parts(phi)
    scale = np.sqrt(np.maximum(s11, 0.0)) * np.sqrt(np.maximum(s22, 0.0))  # no overflow of s11 s22
    if (np.asarray(s11) > 0).all() and (np.asarray(s22) > 0).all():  # the usual case: no masking, scaled in place
        value = phi_kernel(phi, s12 / scale)
        value *= c_alpha(alpha)
        value *= scale if alpha == 1 else scale**alpha
        return value
    corr = np.divide(s12, scale, out=np.zeros(np.broadcast(s12, scale).shape), where=scale > 0)
    return np.where(scale > 0, c_alpha(alpha) * scale**alpha * phi_kernel(phi, corr), 0.0)


def gaussian_kernel(phi: Activation, sigma: np.ndarray) -> np.ndarray:
    """V_phi(Sigma) = E[phi(h) phi(h)^T], h ~ N(0, Sigma), for positive-homogeneous phi: :func:`pair_kernel`
    on every entry. Broadcasts over leading axes of ``sigma`` (..., B, B); zero-variance coordinates give zero rows.
    """
    sigma = np.asarray(sigma, dtype=float)
    diagonal = np.diagonal(sigma, axis1=-2, axis2=-1)
    return pair_kernel(phi, diagonal[..., :, None], diagonal[..., None, :], sigma)


def derive_erf_kernels() -> Derivation:
    """E[phi(h_a) phi(h_b)] and E[phi'(h_a) phi'(h_b)], (h_a, h_b) ~ N(0, [[K_aa, K_ab], [K_ab, K_bb]]), for
    phi = erf(gamma z) (each depends on gamma^2 only: -gamma flips the signs of phi and phi').

    phi' = (2 gamma / sqrt(pi)) e^(-gamma^2 z^2), and the Gaussian integral E[e^(-h^T D h)] = det(I + 2 D K)^(-1/2)
    gives the slope kernel (the NTK's derivative map). phi is odd, so E[phi phi] = 0 at K_ab = 0, and by Price's
    theorem (d/dK_ab E[phi(h_a) phi(h_b)] = E[phi'(h_a) phi'(h_b)]) it is the slope kernel's integral over K_ab from
    0: Williams' (1997) arcsine kernel. Named results "kernel" and "slope"."""
    from ..core.symbols import K_aa, K_ab, K_bb

    gamma, covariance = sp.Symbol("gamma", positive=True), sp.Symbol("t", real=True)
    variances = sp.symbols("v_a v_b", positive=True)  # K_aa, K_bb (SymPy integrates with them known positive)
    d = Derivation("The arcsine kernel of erf(gamma z) and its slope kernel")
    determinant = sp.expand((sp.eye(2) + 2 * gamma**2 * sp.Matrix([[variances[0], covariance],
                                                                   [covariance, variances[1]]])).det())
    slope = 4 * gamma**2 / sp.pi / sp.sqrt(determinant)
    positive = dict(zip(variances, (K_aa, K_bb)))
    d.step("$\\phi'(h_a) \\phi'(h_b)$ is a Gaussian factor, and $E[e^{-h^T D h}] = \\det(I + 2 D K)^{-1/2}$:",
           sp.Eq(sp.Symbol("E[phi'(h_a) phi'(h_b)]"), slope.subs(positive).subs(covariance, K_ab)), name="slope")
    kernel = sp.integrate(slope, (covariance, 0, K_ab), conds="none").subs(positive)
    d.step("Price's theorem, integrated from $K_{ab} = 0$ ($\\phi$ is odd):",
           sp.Eq(sp.Symbol("E[phi(h_a) phi(h_b)]"), kernel), name="kernel")
    d.result = {"kernel": d["kernel"], "slope": d["slope"]}
    return d


@lambdified()
def _erf_kernels():
    """Numeric forms of :func:`derive_erf_kernels`, each of (gamma, K_aa, K_bb, K_ab), named as its results; the
    product (1 + 2 gamma^2 K_aa)(1 + 2 gamma^2 K_bb) kept factored, so that on a column of K_aa and a row of K_bb
    (:func:`erf_kernel`) its factors are vectors and it is one B x B product, not four."""
    from ..core.symbols import K_aa, K_ab, K_bb

    gamma = sp.Symbol("gamma", positive=True)
    product = (1 + 2 * gamma**2 * K_aa) * (1 + 2 * gamma**2 * K_bb)
    return {key: ((gamma, K_aa, K_bb, K_ab), value.subs(sp.expand(product), product))
            for key, value in derive_erf_kernels().result.items()}


_SCALES: weakref.WeakKeyDictionary[Activation, float | None] = weakref.WeakKeyDictionary()
_UNKNOWN = object()  # not yet read


def erf_scale(phi: Activation) -> float | None:
    """|gamma| where phi's expression is erf(gamma z) (the built-in erf, or a user's formula), else None; read once
    per activation."""
    found = _SCALES.get(phi, _UNKNOWN)
    if found is _UNKNOWN:
        from ..core.symbols import z

        scale, found = sp.Wild("gamma", exclude=[z]), None
        if not (phi.is_homogeneous or phi.kinks):
            for sign in (1, -1):  # SymPy writes erf(-2 z) as -erf(2 z); both have the kernels of erf(2 z)
                match = sp.sympify(sign * phi.expr).match(sp.erf(scale * z))
                if match and match[scale].is_number and match[scale] != 0:
                    found = abs(float(match[scale]))
        _SCALES[phi] = found
    return found


_ODD: weakref.WeakKeyDictionary[Activation, bool] = weakref.WeakKeyDictionary()


def is_odd(phi: Activation) -> bool:
    """Whether phi(-z) = -phi(z) as SymPy writes phi(z) + phi(-z) (0 for tanh, erf, sin and their scalings; a
    callable's unknown expression is not), decided once per activation: then E[phi(h)] = 0 for a centred Gaussian h."""
    if phi not in _ODD:
        from ..core.symbols import z

        expression = sp.sympify(phi.expr)
        _ODD[phi] = bool(sp.expand(expression + expression.subs(z, -z)) == 0)
    return _ODD[phi]


def erf_kernel(phi: Activation, sigma: np.ndarray, slope: bool = False) -> np.ndarray | None:
    """E[phi(h) phi(h)^T] (``slope``: E[phi'(h) phi'(h)^T]), h ~ N(0, Sigma), in closed form for phi = erf(gamma z)
    (:func:`derive_erf_kernels`), vectorised over every entry and the leading axes of ``sigma`` (..., B, B); None
    for any other phi."""
    gamma = erf_scale(phi)
    if gamma is None:
        return None
    sigma = np.asarray(sigma, dtype=float)
    diagonal = np.diagonal(sigma, axis1=-2, axis2=-1)
    return _erf_kernels()["slope" if slope else "kernel"](gamma, diagonal[..., :, None], diagonal[..., None, :], sigma)


@cache
def hermite_nodes(degree: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilists' Gauss-Hermite nodes and weights, sum_k w_k f(x_k) ~ E[f(u)], u ~ N(0, 1).

    scipy's, not numpy's hermegauss, whose weights overflow to nan beyond about 360 nodes.
    """
    nodes, weights = roots_hermitenorm(degree)
    return nodes, weights / weights.sum()


def _gauss_hermite_rule(s11: np.ndarray, s22: np.ndarray, s12: np.ndarray, phi: Function, psi: Function,
                        degree: int) -> np.ndarray:
    """The tensor-product rule with `degree` nodes per axis on the (broadcast) covariance arrays, over blocks of
    entries: each entry takes degree^2 values of psi, and a block at most HERMITE_BLOCK of them, so that the
    temporaries stay within a few times HERMITE_BLOCK floats whatever the number of entries (at B = 128 and 512
    nodes, all 8256 entries at once would take 2.2e9 floats per temporary, 17 GB)."""
    nodes, weights = hermite_nodes(degree)
    s11, s22, s12 = np.broadcast_arrays(s11, s22, s12)
    shape, (s11, s22, s12) = s11.shape, (np.ravel(s) for s in (s11, s22, s12))
    out = np.empty(s11.size)
    step = max(1, HERMITE_BLOCK // degree**2)
    for start in range(0, s11.size, step):
        block = slice(start, start + step)
        a = np.sqrt(s11[block])
        b = np.divide(s12[block], a, out=np.zeros_like(a), where=a > 0)
        c = np.sqrt(np.clip(s22[block] - b * b, 0.0, None))  # clip: 0 up to rounding when the block is singular
        first = phi(a[:, None] * nodes)  # phi(h_1) at u_k
        second = psi(b[:, None, None] * nodes[:, None] + c[:, None, None] * nodes)  # psi(h_2) at (u_k, v_l)
        out[block] = np.sum(weights * first * (second @ weights), axis=-1)
    return out.reshape(shape)


def gauss_hermite_pair(phi: Activation | Function, s11: np.ndarray, s22: np.ndarray, s12: np.ndarray,
                       degree: int = 64, psi: Activation | Function | None = None,
                       coarser: np.ndarray | None = None) -> Estimate:
    """E[phi(h_1) psi(h_2)], (h_1, h_2) ~ N(0, [[s11, s12], [s12, s22]]), by Gauss-Hermite quadrature.

    Factor h_1 = a u, h_2 = b u + c v with u, v iid N(0, 1), a = sqrt(s11), b = s12 / a, c = sqrt(s22 - b^2),
    and sum over a tensor product of `degree` probabilists' Gauss-Hermite nodes per axis, which is exact for
    polynomials phi, psi with deg phi + deg psi < 2 degree. Broadcasts over the arrays s11, s22, s12; psi defaults to
    phi, and either may be an :class:`Activation` or a numpy function.

    Returns an :class:`~bnsym.core.estimate.Estimate`: the rule with `degree` nodes and, entrywise, its distance
    to the rule with degree // 2 nodes (the error of the coarser rule, so a pessimistic estimate for smooth phi).
    ``coarser``: that rule's values where the caller has them (doubling the degree), not computed again.

    Advice on `degree` (as for neural-tangents' ``ElementwiseNumerical``): meant for smooth phi, where the
    error falls geometrically, at a rate set by how steep phi is on the scale sqrt(s) of its argument (and, for
    tanh, by its poles at +-i pi/2): erf at variances ~1 is exact to 1e-11 with 96 nodes, at variances ~6 it
    still errs by 1e-5. Increase `degree` until the returned error is small enough.
    Not recommended for kinked phi (relu, leaky_relu, selu): the error then decays only algebraically
    (about 1 / degree for relu), and the estimate is no bound; use
    :func:`gaussian_kernel` for positive-homogeneous phi.
    """
    if not (isinstance(degree, (int, np.integer)) and degree >= 2):
        raise ValueError(f"degree must be an integer >= 2 (nodes per axis; the error needs degree // 2 >= 1), "
                         f"got {degree!r}")
    s11, s22, s12 = np.broadcast_arrays(*(np.asarray(s, dtype=float) for s in (s11, s22, s12)))
    if not (np.all(np.isfinite(s11)) and np.all(np.isfinite(s22)) and np.all(np.isfinite(s12))):
        raise ValueError("the covariance entries must be finite")
    if np.any(s11 < 0) or np.any(s22 < 0):
        raise ValueError(f"variances must be >= 0, got s11 min {s11.min():g}, s22 min {s22.min():g}")
    if np.any(s12 * s12 > s11 * s22 * (1 + 1e-9) + 1e-300):
        raise ValueError("s12^2 > s11 s22: the 2 x 2 block is not a covariance matrix (not positive semidefinite)")
    f = phi.numpy if isinstance(phi, Activation) else phi
    g = f if psi is None else psi.numpy if isinstance(psi, Activation) else psi
    value = _gauss_hermite_rule(s11, s22, s12, f, g, degree)
    if coarser is None:
        coarser = _gauss_hermite_rule(s11, s22, s12, f, g, degree // 2)
    return Estimate(value, np.abs(value - coarser), "gauss_hermite")


def gauss_hermite_kernel(phi: Activation | Function, sigma: np.ndarray,
                         degree: int = 64, coarser: np.ndarray | None = None) -> Estimate:
    """V_phi(Sigma)_ij = E[phi(h_i) phi(h_j)], h ~ N(0, Sigma), for any phi (Yang et al. 2019, Sec. E.1).

    Each entry needs only the 2 x 2 block of Sigma on {i, j}: :func:`gauss_hermite_pair` on the upper
    triangle, vectorised over the entries and the leading axes of ``sigma`` (..., B, B). Returns an Estimate
    whose value and error are (..., B, B), the error estimated entrywise by halving the degree (``coarser``: the
    (..., B, B) rule with degree // 2 nodes where the caller has it); see :func:`gauss_hermite_pair` for the advice on
    `degree` (smooth phi only).
    """
    sigma = np.asarray(sigma, dtype=float)
    if sigma.ndim < 2 or sigma.shape[-1] != sigma.shape[-2]:
        raise ValueError(f"Sigma must be a (..., B, B) stack of square matrices, got shape {sigma.shape}")
    if not np.all(np.isfinite(sigma)):
        raise ValueError("the covariance entries must be finite")
    if not np.allclose(sigma, np.swapaxes(sigma, -1, -2), rtol=1e-12, atol=0.0):
        raise ValueError("Sigma must be symmetric (a covariance matrix)")
    rows, cols = np.triu_indices(sigma.shape[-1])
    diagonal = np.diagonal(sigma, axis1=-2, axis2=-1)
    value, error = gauss_hermite_pair(phi, diagonal[..., rows], diagonal[..., cols], sigma[..., rows, cols], degree,
                                      coarser=None if coarser is None else coarser[..., rows, cols])
    full_value, full_error = np.empty_like(sigma), np.empty_like(sigma)
    for full, upper in ((full_value, value), (full_error, error)):
        full[..., rows, cols] = upper
        full[..., cols, rows] = upper
    return Estimate(full_value, full_error, "gauss_hermite")
