"""The new layer maps of :mod:`bnsym.arch`, derived in SymPy: each a few lines of algebra on expectations.

A layer's kernel map needs, of the law of one neuron's batch vector x, only its kernel K_ab = E[x_a x_b] and its
mean m_a = E[x_a] where the map is affine in x; :func:`expect` applies that linearity to a polynomial in the
coordinates. The derived forms are lambdified (``cse=True``) and are the only place these maps are written.

* LayerNorm (:func:`derive_layer_norm`): neural-tangents' rule K_ab / sqrt((K_aa + eps)(K_bb + eps)) for a
  Gaussian input, and (K_ab - m_a m_b) / sqrt((K_aa - m_a^2 + eps)(K_bb - m_b^2 + eps)) after an activation.
* BatchNorm in eval mode (:func:`derive_eval_batch_norm`): the same affine map with population statistics.
* The residual sum (:func:`derive_residual_sum`): K_x + alpha^2 K_y + alpha (m_x m_y^T + m_y m_x^T).
* The depth law of a residual stream whose branches are normalised (:func:`derive_depth_downscaling`): variance
  v_0 + l alpha^2 c after l blocks, so the branch's share of the standard deviation falls like 1/sqrt(l) (De &
  Smith 2020).
* phi -> BN at an exchangeable input (:func:`derive_phi_batch_norm_exchangeable`): (B p / (B - 1)) G.
* The mean of a positive-homogeneous activation of a Gaussian (:func:`derive_gaussian_mean`), which LayerNorm
  after phi needs.
* The gradient through BN -> phi at a BSB1 input, for any Pi = a I + b 11^T (:func:`derive_bsb1_backward`),
  which at Pi = G is Yang et al.'s Thm 7.
* The NTK's forward tangent map and the per-entry backward map are adjoint (:func:`derive_ntk_adjoint`).
"""

from __future__ import annotations

from functools import cache
from typing import Mapping

import sympy as sp

from ..core.derivation import Derivation
from ..core.symbols import (
    M11,
    M12,
    N11,
    N12,
    B,
    K_aa,
    K_ab,
    K_bb,
    L_ab,
    a_pi,
    alpha,
    b_pi,
    c_a,
    c_b,
    epsilon,
    m_a,
    m_b,
    m_pop,
    mu,
    mu_star,
    n_a,
    n_b,
    p_const,
    s_a,
    s_b,
    v_pop,
    x_a,
    x_b,
    y_a,
    y_b,
    z,
)
from ..meanfield.backward import derive_trace_identity


def expect(poly: sp.Expr, moments: Mapping[sp.Expr, sp.Expr]) -> sp.Expr:
    """E[poly] by linearity: expand ``poly`` in the coordinates and replace each monomial by its moment."""
    coordinates = sorted({symbol for monomial in moments for symbol in monomial.free_symbols}, key=str)
    total = sp.Integer(0)
    for powers, coefficient in sp.Poly(sp.expand(poly), *coordinates).terms():
        monomial = sp.Mul(*(symbol**power for symbol, power in zip(coordinates, powers)))
        total += coefficient * (1 if monomial == 1 else moments[monomial])
    return total


def _affine(d: Derivation) -> sp.Expr:
    """The kernel of x' = (x - c)/s for a per-example shift c and scale s, as a step of ``d``."""
    kernel = expect((x_a - c_a) * (x_b - c_b) / (s_a * s_b), {x_a * x_b: K_ab, x_a: m_a, x_b: m_b})
    d.step("A per-example affine map $x'_a = (x_a - c_a)/s_a$ with constant $c, s$ maps kernel and mean as",
           sp.Eq(sp.Symbol("K'_ab"), kernel), name="affine")
    d.step("and", sp.Eq(sp.Symbol("m'_a"), (m_a - c_a) / s_a), name="mean")
    return kernel


@cache
def derive_gaussian_mean() -> Derivation:
    """E[rho_alpha(h)] for h ~ N(0, K_aa), rho_alpha(z) = max(z, 0)^alpha; phi = a rho_alpha(z) - b rho_alpha(-z) has
    mean (a - b) times it. Named result "E_rho"."""
    d = Derivation("The mean of rho_alpha of a Gaussian")
    density = sp.exp(-z**2 / 2) / sp.sqrt(2 * sp.pi)
    unit = sp.gammasimp(sp.integrate(z**alpha * density, (z, 0, sp.oo), conds="none"))
    d.step("For $z \\sim \\mathcal N(0, 1)$:", sp.Eq(sp.Symbol("E[rho_alpha(z)]"), unit))
    d.result = unit * K_aa ** (alpha / 2)
    d.step("and by homogeneity, for $h \\sim \\mathcal N(0, K_{aa})$:", sp.Eq(sp.Symbol("E[rho_alpha(h)]"), d.result),
           name="E_rho")
    return d


def _normalisation(title: str, text: str, statistics: sp.Tuple, shift: sp.Expr, scale: sp.Expr, rule_text: str,
                   name: str) -> Derivation:
    """A normalisation whose statistics concentrate: ``statistics`` in the limit, then the affine map with c_a =
    ``shift``, s_a = ``scale`` (and b's by a -> b), named ``name``."""
    d = Derivation(title)
    d.step(text, statistics)
    kernel = _affine(d)
    other = {m_a: m_b, K_aa: K_bb}
    rule = sp.factor(sp.simplify(kernel.subs({c_a: shift, c_b: shift.subs(other, simultaneous=True), s_a: scale,
                                              s_b: scale.subs(other, simultaneous=True)})))
    d.step(rule_text, sp.Eq(sp.Symbol("K'_ab"), rule), name=name)
    d.result = rule
    return d


@cache
def derive_layer_norm() -> Derivation:
    """LayerNorm's kernel map in the infinite-width limit (neural-tangents' rule, and the rule after phi).

    LN(x)_ia = (x_ia - mean_j x_ja) / sqrt(var_j x_ja + eps) normalises example a over the n features. The
    features are i.i.d. given the inputs, so as n -> infinity the statistics are those of one neuron's law,
    mean_j x_ja -> m_a and var_j x_ja -> K_aa - m_a^2 (law of large numbers): LN becomes the deterministic affine
    map with c_a = m_a, s_a = sqrt(K_aa - m_a^2 + eps), and its output has mean 0. Named results "layer_norm",
    "gaussian" (m = 0: neural-tangents' rule) and "mean".
    """
    d = _normalisation("LayerNorm as a kernel map",
                       "Over infinitely many i.i.d. features, the statistics of example $a$ are those of one neuron:",
                       sp.Tuple(sp.Eq(sp.Symbol("mean_a"), m_a), sp.Eq(sp.Symbol("var_a"), K_aa - m_a**2)),
                       m_a, sp.sqrt(K_aa - m_a**2 + epsilon),
                       "With $c_a = m_a$, $s_a = \\sqrt{K_{aa} - m_a^2 + \\epsilon}$ (the output mean is $0$):",
                       "layer_norm")
    d.step("A Gaussian input has $m = 0$: neural-tangents' LayerNorm rule",
           sp.Eq(sp.Symbol("K'_ab"), d.result.subs({m_a: 0, m_b: 0})), name="gaussian")
    return d


@cache
def derive_eval_batch_norm() -> Derivation:
    """BatchNorm in eval mode: the affine map with the population statistics of the layer's input.

    The population is the batch's examples and the layer's neurons: its mean is mbar = (1/B) sum_a m_a and its
    variance vbar = (1/B) sum_a K_aa - mbar^2, the limits of the statistics over all n x B entries. They are the
    same for every example and, being population constants, carry no gradient. Named results "eval_batch_norm"
    and "mean".
    """
    return _normalisation("BatchNorm in eval mode as a kernel map",
                          "Population statistics over the batch's examples and the layer's neurons:",
                          sp.Tuple(sp.Eq(m_pop, sp.Symbol("(1/B) sum_a m_a")),
                                   sp.Eq(v_pop, sp.Symbol("(1/B) sum_a K_aa") - m_pop**2)),
                          m_pop, sp.sqrt(v_pop + epsilon),
                          "With $c_a = \\bar m$ and $s_a = \\sqrt{\\bar v + \\epsilon}$ for every example:",
                          "eval_batch_norm")


@cache
def derive_residual_sum() -> Derivation:
    """The kernel of x + alpha y for independent x and y (a residual branch that contains a Dense).

    A Dense draws fresh weights, so the branch's output y at one neuron is independent of the skip's x there
    (given the kernels): E[x_a y_b] = m_a n_b. Named results "kernel", "mean" and "gaussian" (means 0).
    """
    d = Derivation("The residual sum as a kernel map")
    moments = {x_a * x_b: K_ab, y_a * y_b: L_ab, x_a * y_b: m_a * n_b, y_a * x_b: n_a * m_b,
               x_a: m_a, x_b: m_b, y_a: n_a, y_b: n_b}
    d.step("Independence of the skip $x$ and the branch $y$ at one neuron:",
           sp.Eq(sp.Symbol("E[x_a y_b]"), m_a * n_b))
    kernel = expect((x_a + alpha * y_a) * (x_b + alpha * y_b), moments)
    d.step("so the kernel of $x + \\alpha y$ is", sp.Eq(sp.Symbol("K'_ab"), kernel), name="kernel")
    d.step("its mean", sp.Eq(sp.Symbol("m'_a"), expect(x_a + alpha * y_a, moments)), name="mean")
    d.step("and for centred parts (a Gaussian skip, or a branch ending in a Dense)",
           sp.Eq(sp.Symbol("K'_ab"), kernel.subs({m_a: 0, m_b: 0})), name="gaussian")
    d.result = kernel
    return d


@cache
def derive_depth_downscaling() -> Derivation:
    """The residual stream x^(l+1) = x^l + alpha y^l with branch outputs y^l of a fixed variance c (a branch that
    starts with batch norm forgets the stream's scale), independent of the stream (a branch ending in a Dense): by
    the sum rule (:func:`derive_residual_sum`, "gaussian"), V_(l+1) = V_l + alpha^2 c for any quantity linear in
    the kernel (the diagonal, the channel variance), so V_l = V_0 + l alpha^2 c, and the branch's standard deviation
    relative to the stream's, sqrt(alpha^2 c / V_l), falls like 1/sqrt(l) (De & Smith 2020, Sec. 2). Named results
    "stream" (V_l), "share" (the ratio of standard deviations) and "limit" (sqrt(l) times it as l -> infinity)."""
    d = Derivation("Batch norm downscales the residual branch by about sqrt(depth)")
    depth = sp.Symbol("l", integer=True, nonnegative=True)
    branch, start = sp.symbols("c V_0", positive=True)
    stream = sp.Function("V")
    step = derive_residual_sum()["gaussian"].subs({K_ab: stream(depth), L_ab: branch})
    d.step("The sum rule for a branch of fixed variance $c$, block by block:", sp.Eq(stream(depth + 1), step))
    solution = sp.rsolve(stream(depth + 1) - step, stream(depth), {stream(0): start})
    d.step("so after $l$ blocks", sp.Eq(stream(depth), solution), name="stream")
    share = sp.sqrt(alpha**2 * branch / solution)
    d.step("and the branch's standard deviation relative to the stream's is", sp.Eq(sp.Symbol("share_l"), share),
           name="share")
    d.step("which falls like $1/\\sqrt{l}$:", sp.Eq(sp.Symbol("lim sqrt(l) share_l"),
                                                  sp.limit(sp.sqrt(depth) * share, depth, sp.oo)), name="limit")
    d.result = solution
    return d


@cache
def derive_phi_batch_norm_exchangeable() -> Derivation:
    """phi -> BN with eps = 0 at an exchangeable input K = sigma^2 I + beta 11^T: K' = (B p / (B - 1)) G.

    phi(h) is then exchangeable, so K' = a I + b 11^T. Every BN output sums to 0 over the batch (K' 1 = 0) and has
    squared norm B, or 0 where batch norm maps a constant input to 0 (probability 1 - p): tr K' = B p. Named
    results "a" and "b"; p = 1 unless phi is constant on a set of positive Gaussian probability (relu: p = 1 -
    P(all B pre-activations <= 0)).
    """
    d = Derivation("phi -> BN at an exchangeable input")
    a_, b_ = sp.symbols("a b", real=True)
    rows = sp.Eq(a_ + B * b_, 0)
    trace = sp.Eq(B * a_ + B * b_, B * p_const)
    d.step("Exchangeability gives $K' = aI + b\\mathbf{1}\\mathbf{1}^T$; every output sums to 0 and has "
           "$|BN(x)|^2 = B$ where $x$ is not constant:", sp.Tuple(rows, trace))
    solution = sp.solve([rows, trace], [a_, b_], dict=True)[0]
    d.step("so", sp.Tuple(sp.Eq(a_, solution[a_]), sp.Eq(b_, solution[b_])), name=("a", "b"))
    d.result = solution[a_]
    d.step("that is $K' = \\frac{Bp}{B-1} G$, with $G = I - \\mathbf{1}\\mathbf{1}^T/B$:",
           sp.Eq(sp.Symbol("K'"), sp.factor(solution[a_]) * sp.Symbol("G")))
    return d


def _between(d: Derivation) -> sp.Expr:
    """The gradient's squared norm between BN and phi, S = tr E[D Pi D], as steps of ``d``.

    Premises: the cotangent g at phi's output has second moment Pi = a I + b 11^T (a BSB1 input keeps every
    cotangent in span{I, 11^T}; b != 0 wherever a BN or a Dense above feeds back, e.g. Pi = c G below a BN) and is
    independent of D = diag(phi'(x)), x = BN(h) (gradient independence: W^T g behind a Dense is a fresh Gaussian);
    the coordinates of x are exchangeable, E[phi'(x_a)^2] = M11. The gradient at BN's output is D g, and
    E[|D g|^2] = tr E[D Pi D] = sum_a E[phi'(x_a)^2] Pi_aa: a diagonal sandwich reads only Pi's diagonal a + b, so
    M12 = E[phi'(x_1) phi'(x_2)] does not enter (it would for (1^T D g)^2, which is not this norm).
    """
    size = 3
    slopes = sp.symbols(f"d_1:{size + 1}", real=True)
    generic = sp.Matrix(size, size, lambda i, j: sp.Symbol(f"Pi_{min(i, j) + 1}{max(i, j) + 1}"))
    sandwich = sp.expand((sp.diag(*slopes) * generic * sp.diag(*slopes)).trace())
    d.step(f"$\\mathrm{{tr}}(D\\Pi D) = \\sum_a \\phi'(x_a)^2\\Pi_{{aa}}$ reads only the diagonal of $\\Pi$ "
           f"(any symmetric $\\Pi$, shown at $B = {size}$):", sp.Eq(sp.Symbol("tr(D Pi D)"), sandwich))
    invariant = sp.expand((sp.diag(*slopes) * (a_pi * sp.eye(size) + b_pi * sp.ones(size, size))
                           * sp.diag(*slopes)).trace())
    per_coordinate = sp.factor(expect(invariant, {slope**2: M11 for slope in slopes}) / size)
    d.step("At $\\Pi = aI + b\\mathbf 1\\mathbf 1^T$, each of the $B$ exchangeable coordinates gives "
           "$E[\\phi'(x_a)^2]\\,\\Pi_{aa}$:", sp.Eq(sp.Symbol("E[phi'(x_a)^2] Pi_aa"), per_coordinate))
    between = sp.expand(B * per_coordinate)
    d.step("Between BN and $\\phi$ the gradient's squared norm is $\\mathrm{tr}\\,E[D\\Pi D]$:",
           sp.Eq(sp.Symbol("S_between"), between), name="between")
    return between


@cache
def derive_bsb1_backward() -> Derivation:
    """E[J^T Pi J] for J the Jacobian of BN -> phi (eps = 0) at a BSB1 input, Pi = a I + b 11^T (Yang et al. 2019,
    eqs 21-24 and Thm 7, extended from Pi = G to the invariant Pi).

    J = sqrt(B)/r D (G - v v^T), y = G h, r = norm(y), v = y/r, D = diag(phi'(sqrt(B) v)); with G Sigma G = mu G, v is
    uniform on the unit sphere of 1^perp and independent of r^2 ~ mu chi^2_{B-1}, E[1/r^2] = 1/(mu (B - 3)). The
    image of an invariant Pi is invariant with zero row sums, hence c G with c = tr E[J^T Pi J] / (B - 1), and
    P = G - v v^T is a projector, so tr(P M P) = tr(P M). Named results "fused" (c), "alone" (c for BN alone,
    phi = identity), "between" (tr E[D Pi D], the gradient's squared norm between BN and phi; see
    ``_between``) and "minus_thm7".
    """
    d = Derivation("The gradient through BN -> phi at a BSB1 input, for Pi = a I + b 11^T")
    d.step("$D \\Pi D = a D^2 + b\\,dd^T$ with $d = \\phi'(x)$, and $\\mathrm{tr}(P M P) = \\mathrm{tr}(GM) - "
           "v^TMv$:", sp.Eq(sp.Symbol("tr(P D Pi D P)"),
                            a_pi * sp.Symbol("(tr(G D^2) - v^T D^2 v)") + b_pi * sp.Symbol("(d^T G d - (v.d)^2)")))
    # exchangeable coordinates of x = sqrt(B) v: B equal diagonal terms, B (B - 1) equal off-diagonal ones
    part_a = B * (B - 1) / B * M11 - B * N11 / B
    part_b = B * M11 - (B * M11 + B * (B - 1) * M12) / B - (B * N11 + B * (B - 1) * N12) / B
    expected = sp.expand(a_pi * part_a + b_pi * part_b)
    d.step("Averaging over the sphere:", sp.Eq(sp.Symbol("E_v tr(P D Pi D P)"), sp.collect(expected, [a_pi, b_pi])))
    fused = sp.factor(B / (mu * (B - 3)) * expected / (B - 1), a_pi, b_pi)
    d.step("With $E[r^{-2}] = 1/(\\mu(B-3))$, $E[J^T \\Pi J] = c\\,G$ where", sp.Eq(sp.Symbol("c"), fused),
           name="fused")
    alone = sp.factor(fused.subs({M11: 1, M12: 1, N11: 1, N12: -1 / (B - 1)}))
    d.step("Batch norm alone ($\\phi' = 1$, $E[x_1^2] = 1$, $E[x_1 x_2] = -1/(B-1)$):",
           sp.Eq(sp.Symbol("c_BN"), alone), name="alone")
    _between(d)
    thm7 = derive_trace_identity().result.subs(mu_star, mu)
    gap = sp.simplify(fused.subs({a_pi: 1, b_pi: -1 / B}) - thm7)
    d.step("At $\\Pi = G$ ($a = 1$, $b = -1/B$) this is Thm 7's $\\lambda_G$:",
           sp.Eq(sp.Symbol("c(G) - lambda_G"), gap), name="minus_thm7")
    d.result = fused
    return d


@cache
def derive_ntk_adjoint(batch_size: int = 3) -> Derivation:
    """The NTK's forward tangent map T(Theta) = J Theta J^T and the per-entry backward map T*(Pi) = J^T Pi J
    (Yang 2020's reference computation) are adjoint, so the two routes give one NTK, shown at a small B with
    generic symbolic matrices (expectation over J is linear, so per sample suffices).

    Forward: Theta^l = Sigma^l + T_l(Theta^(l-1)), Theta_f = K + Theta^L. Backward, one recursion per entry (a, b):
    Delta^L = (e_a e_b^T + e_b e_a^T) / 2, Delta^(l-1) = T*_l(Delta^l), Theta_ab = K_ab + sum_l tr(Sigma^l Delta^l).
    Named results "adjoint" (tr(Pi T(Theta)) - tr(T*(Pi) Theta)) and "two_layers" (the number of NTK entries
    where the two routes differ over a two-layer composition), both 0.
    """
    d = Derivation("The forward tangent map and the per-entry backward map are adjoint")
    size = batch_size

    def generic(name: str, symmetric: bool) -> sp.Matrix:
        return sp.Matrix(size, size, lambda i, j: sp.Symbol(f"{name}_{min(i, j) if symmetric else i}"
                                                            f"{max(i, j) if symmetric else j}"))

    jacobian, theta, pi = generic("J", False), generic("Theta", True), generic("Pi", True)
    gap = sp.expand((pi * jacobian * theta * jacobian.T).trace() - (jacobian.T * pi * jacobian * theta).trace())
    d.step(f"For any B x B Jacobian J and symmetric Theta, Pi (B = {size}):",
           sp.Eq(sp.Symbol("tr(Pi J Theta J^T) - tr(J^T Pi J Theta)"), gap), name="adjoint")
    first, second = generic("J1", False), generic("J2", False)
    sigma1, sigma2, kernel, theta0 = (generic(name, True) for name in ("S1", "S2", "K", "T0"))
    forward = kernel + sigma2 + second * (sigma1 + first * theta0 * first.T) * second.T
    differing = 0
    for a in range(size):
        for b in range(a, size):
            delta = sp.zeros(size, size)
            delta[a, b] += sp.Rational(1, 2)
            delta[b, a] += sp.Rational(1, 2)
            delta1 = second.T * delta * second
            delta0 = first.T * delta1 * first
            backward = kernel[a, b] + (sigma2 * delta).trace() + (sigma1 * delta1).trace() + (theta0 * delta0).trace()
            differing += sp.expand(forward[a, b] - backward) != 0
    d.step("Two layers: the entries (a <= b) where the forward Theta_f and the per-entry backward sum differ",
           sp.Eq(sp.Symbol("count"), sp.Integer(differing)), name="two_layers")
    d.result = gap
    return d


@cache
def lambdified(name: str):
    """The numeric form of one derived map, by name: "affine" (K_ab, m_a, m_b, c_a, c_b, s_a, s_b), "gaussian_mean"
    (alpha, K_aa), "layer_norm" (K_ab, K_aa, K_bb, m_a, m_b, eps),
    "eval_batch_norm" (K_ab, m_a, m_b, mbar, vbar, eps), "residual" (K_ab, L_ab, m_a, m_b, n_a, n_b, alpha),
    "fused", "alone", "between" (a_Pi, b_Pi, B, mu, M11, M12, N11, N12), "exchangeable" (B, p),
    "depth_downscaling" (l, V_0, c, alpha)."""
    table = {
        "affine": ((K_ab, m_a, m_b, c_a, c_b, s_a, s_b), lambda: derive_layer_norm()["affine"]),
        "gaussian_mean": ((alpha, K_aa), lambda: derive_gaussian_mean()["E_rho"]),
        "layer_norm": ((K_ab, K_aa, K_bb, m_a, m_b, epsilon), lambda: derive_layer_norm()["layer_norm"]),
        "eval_batch_norm": ((K_ab, m_a, m_b, m_pop, v_pop, epsilon),
                            lambda: derive_eval_batch_norm()["eval_batch_norm"]),
        "residual": ((K_ab, L_ab, m_a, m_b, n_a, n_b, alpha), lambda: derive_residual_sum()["kernel"]),
        "exchangeable": ((B, p_const), lambda: derive_phi_batch_norm_exchangeable()["a"]),
        "depth_downscaling": ((sp.Symbol("l", integer=True, nonnegative=True), sp.Symbol("V_0", positive=True),
                               sp.Symbol("c", positive=True), alpha), lambda: derive_depth_downscaling()["stream"]),
        **{key: ((a_pi, b_pi, B, mu, M11, M12, N11, N12), lambda key=key: derive_bsb1_backward()[key])
           for key in ("fused", "alone", "between")},
    }
    arguments, expression = table[name]
    return sp.lambdify(arguments, expression(), modules=["scipy", "numpy"], cse=True)
