"""The batch-norm chain of Daneshmand et al. 2020 (eqs. 1, 36-37), Lemma 7's delta_F and Prop. 8, Theorem 14.

A linear batch-norm network without centring, H_{l+1} = BN(H_l + gamma W_l H_l), H d features x N samples,
BN(H) = diag(M(H))^(-1/2) H (every row rescaled to norm sqrt N), W_l with i.i.d. N(0, 1) entries, gamma = oo the
network without skip connections. The chain closes on M = H H^T / N:
M_{l+1} = corr((I + gamma W) M_l (I + gamma W)^T), corr(A) = diag(A)^(-1/2) A diag(A)^(-1/2) (eqs. 36-37).

* :func:`bn_chain` runs it as an H-chain or an M-chain, many chains at once (one batched matmul per layer);
* :func:`delta_F` is Lemma 7's second-order drift of ||M||_F^2 (eq. 43), :func:`delta_F_spectral` Prop. 8's form;
* :func:`second_order_drift` estimates E[d^2/dgamma^2 ||M_+||_F^2 / 2] at gamma = 0 by Monte Carlo, exactly (no
  finite-gamma remainder), to check Lemma 7;
* :func:`chain_statistics` gives the ergodic averages behind Theorem 14 and Figs. 3a, 8, 9;
* :func:`bn_lyapunov` is the Lyapunov spectrum of the chain's factors diag(.)(I + gamma W), by the QR method.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Callable

import numpy as np
import sympy as sp
import torch

from ..core.derivation import Derivation
from ..core.device import generator
from ..core.estimate import Estimate
from ..core.statistics import mean_and_se
from ..core.symbols import alpha_reg as alpha
from ..core.symbols import d
from ..core.symbols import diag_m2_sq as D2
from ..core.symbols import frob2 as F
from ..core.symbols import trace_m3 as T3
from ..core.validation import (
    check_choice,
    check_device,
    check_draws,
    check_float_dtype,
    check_gamma,
    check_layers,
    check_memory,
    check_real_array,
    check_seed,
    check_whole_number,
    check_width,
)
from ..products.lyapunov import qr_step
from .measures import as_features, differentiable_rank_bound, second_moment


def _rescaled(x: torch.Tensor, name: str) -> torch.Tensor:
    """x times the power of 2 that brings max abs(x) into [1/2, 1): exact, and the chain and corr are scale free."""
    largest = float(x.abs().max())
    if largest == 0:
        raise ValueError(f"{name} = 0: batch norm of a zero row divides by zero")
    return x * 2.0 ** -math.frexp(largest)[1]


def check_second_moment(M: np.ndarray | torch.Tensor) -> torch.Tensor:
    """M as float64 (..., d, d): finite, symmetric and positive semi-definite (ValueError naming the defect)."""
    m = as_features(M, "M").to(torch.float64)
    if m.shape[-1] != m.shape[-2]:
        raise ValueError(f"M must be square (..., d, d), got shape {tuple(m.shape)}")
    scale = max(m.abs().max().item(), 1e-300)
    if (m - m.mT).abs().max().item() > 1e-10 * scale:
        raise ValueError("M must be symmetric (it is H H^T / N)")
    smallest = torch.linalg.eigvalsh(m).min().item()
    if smallest < -1e-9 * scale:
        raise ValueError(f"M must be positive semi-definite (it is H H^T / N); its smallest eigenvalue is "
                         f"{smallest:.3g}")
    return m


def correlation(a: torch.Tensor) -> torch.Tensor:
    """diag(A)^(-1/2) A diag(A)^(-1/2): what batch norm without centring does to M (eq. 36)."""
    scale = a.diagonal(0, -2, -1).rsqrt()
    return a * scale.unsqueeze(-1) * scale.unsqueeze(-2)


def normalise_rows(h: torch.Tensor) -> torch.Tensor:
    """BN_{0,1}(H) = diag(M(H))^(-1/2) H: every row rescaled to norm sqrt N (eq. 2, no centring)."""
    return h * (h.shape[-1] / h.square().sum(-1, keepdim=True)).sqrt()


def _factor(w: torch.Tensor, gamma_value: float) -> torch.Tensor:
    """I + gamma W up to a positive factor, which BN (a row rescaling) is blind to: W for gamma = oo, I / gamma + W
    for gamma > 1 (gamma W would overflow for gamma near 1e300), else I + gamma W."""
    if math.isinf(gamma_value):
        return w
    identity = torch.eye(w.shape[-1], dtype=w.dtype, device=w.device)
    return identity / gamma_value + w if gamma_value > 1 else identity + gamma_value * w


def bn_chain(start: np.ndarray | torch.Tensor, depth: int, gamma: float = math.inf, n_chains: int = 1,
             seed: int = 0, kind: str = "H", every: int = 1,
             statistic: Callable[[torch.Tensor], torch.Tensor] | None = None,
             dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu",
             law: str = "gaussian") -> torch.Tensor:
    """Run ``n_chains`` batch-norm chains for ``depth`` layers; return ``statistic`` every ``every`` layers.

    ``kind="H"``: ``start`` is H_0 = X, d features x N samples, and the state is H_l (eq. 1 with no centring).
    ``kind="M"``: ``start`` is M_0 = X X^T / N and the state is M_l (eqs. 36-37).
    Both draw the same W_l for the same seed, so they can be compared path by path. ``statistic`` maps the state
    (n_chains, d, .) to a tensor; the default is M_l itself. Returns shape (depth // every, n_chains, ...).
    ``law`` is the entry law of W (Definition 1): ``"gaussian"`` N(0, 1), or ``"uniform"`` U[-sqrt 3, sqrt 3], the
    bounded support of Lemmas 5 and 6 (B = sqrt 3).
    """
    kind = check_choice(kind, "kind", ("H", "M"))
    law = check_choice(law, "law", ("gaussian", "uniform"))
    depth = check_layers(depth, "depth")
    every = check_whole_number(every, "every", 1, depth, "the layers between records, at most depth")
    n_chains, gamma, seed = check_draws(n_chains, "n_chains", 1), check_gamma(gamma), check_seed(seed)
    if statistic is not None and not callable(statistic):
        raise ValueError(f"statistic must be a function of the state or None, got {statistic!r}")
    dtype, device = check_float_dtype(dtype), check_device(device)
    state = _rescaled(as_features(start, "start").to(dtype=dtype, device=device), "start")
    if state.shape[:-2] not in ((), (1,), (n_chains,)):
        raise ValueError(f"start must be one (d, N) matrix or one per chain, (n_chains = {n_chains}, d, N); got shape "
                         f"{tuple(state.shape)}")
    check_memory(n_chains, state.shape[-2], max(state.shape[-2:]), "n_chains x d x max(d, N)")
    if kind == "M":
        state = check_second_moment(state).to(dtype)
    width = state.shape[-2]
    state = state.expand(n_chains, *state.shape[-2:]).clone()
    if statistic is None:
        statistic = second_moment if kind == "H" else (lambda m: m)
    gen = generator(seed, device)
    records = []
    for layer in range(1, depth + 1):
        if law == "gaussian":
            w = torch.randn(n_chains, width, width, generator=gen, device=device, dtype=torch.float64)
        else:
            w = (2 * torch.rand(n_chains, width, width, generator=gen, device=device, dtype=torch.float64) - 1) * 3**0.5
        a = _factor(w.to(dtype), gamma)
        state = normalise_rows(a @ state) if kind == "H" else correlation(a @ state @ a.mT)
        if layer % every == 0:
            records.append(statistic(state))
    return torch.stack(records)


def bn_lyapunov(width: int, gamma: float, depth: int, burn: int, n_chains: int = 8, samples: int | None = None,
                seed: int = 0, device: torch.device | str = "cpu") -> Estimate:
    """Lyapunov spectrum of the BN chain's factors A_l = D_l (I + gamma W_l), D_l the row rescaling of BN.

    H_l = A_l ... A_1 X, so ln sigma_i(H_l) grows like l mu_i. The top exponent is 0 (rows keep norm sqrt N);
    ``burn`` layers bring the chain and the QR frame to their invariant law before the logs are averaged, so each
    step's expected log is the exponent itself. SE across independent chains.
    """
    width, gamma = check_width(width), check_gamma(gamma)
    depth, burn = check_layers(depth, "depth"), check_layers(burn, "burn", 0)
    n_chains, seed, device = check_draws(n_chains, "n_chains"), check_seed(seed), check_device(device)
    samples = width if samples is None else check_draws(samples, "samples N", 1)
    check_memory(n_chains, width, max(width, samples), "n_chains x d x max(d, N)")
    gen = generator(seed, device)
    h = normalise_rows(torch.randn(n_chains, width, samples, generator=gen, device=device, dtype=torch.float64))
    frame = torch.eye(width, dtype=torch.float64, device=device).expand(n_chains, width, width)
    total = torch.zeros(n_chains, width, dtype=torch.float64, device=device)
    for layer in range(burn + depth):
        a = _factor(torch.randn(n_chains, width, width, generator=gen, device=device, dtype=torch.float64), gamma)
        pre = a @ h
        rescale = (samples / pre.square().sum(-1)).sqrt()
        h = pre * rescale.unsqueeze(-1)
        frame, logs = qr_step(frame, rescale.unsqueeze(-1) * a)  # the frame burns in with the chain
        if layer >= burn:
            total += logs
    return Estimate(*mean_and_se((total / depth).cpu().numpy()), "QR method on the BN chain")


# --- Lemma 7, Prop. 8, Example 9, Lemma 13 / Theorem 14: derivations --------------------------------------------


def _pair_drift() -> tuple[sp.Expr, dict[str, sp.Symbol]]:
    """Eq. 74: the second-order expected change of g_ij = M_ij^2 / (M_ii M_jj), from the moments of Delta M."""
    m, p_i, p_j, q = sp.symbols("M_ij (M^2)_ii (M^2)_jj (M^2)_ij", real=True)
    x_ii, x_ij, x_jj = sp.symbols("Delta_ii Delta_ij Delta_jj", real=True)
    g = (m + x_ij) ** 2 / ((1 + x_ii) * (1 + x_jj))
    xs = (x_ii, x_ij, x_jj)
    grad = [sp.diff(g, x).subs(dict.fromkeys(xs, 0)) for x in xs]
    hess = sp.Matrix(3, 3, lambda a, b: sp.diff(g, xs[a], xs[b]).subs(dict.fromkeys(xs, 0)))
    mean = [d, 0, d]  # E[Delta] / gamma^2: E (W M W^T)_ii = Tr M = d, off-diagonal 0
    cov = sp.Matrix([[4 * p_i, 2 * q, 0], [2 * q, p_i + p_j, 2 * q], [0, 2 * q, 4 * p_j]])  # E[x x^T] / gamma^2
    drift = sp.expand(sum(gr * mu for gr, mu in zip(grad, mean)) + sum(hess[a, b] * cov[a, b]
                                                                        for a in range(3) for b in range(3)) / 2)
    return drift, {"m": m, "p_i": p_i, "p_j": p_j, "q": q}


def _unit_diagonal(width: int) -> sp.Matrix:
    """A symbolic symmetric d x d matrix with unit diagonal (a correlation matrix)."""
    entries = {(i, j): sp.Symbol(f"m_{i + 1}{j + 1}", real=True) for i in range(width) for j in range(i + 1, width)}
    return sp.Matrix(width, width, lambda i, j: 1 if i == j else entries[(min(i, j), max(i, j))])


def _invariants(m: sp.Matrix) -> dict[sp.Symbol, sp.Expr]:
    m2 = m * m
    return {F: sum(x**2 for x in m), T3: (m2 * m).trace(), D2: sum(m2[i, i] ** 2 for i in range(m.shape[0]))}


def _expected_quadratic(expr: sp.Expr, ws: list[sp.Symbol]) -> sp.Expr:
    """E over i.i.d. zero-mean unit-variance w of a polynomial of degree <= 2 in w."""
    poly = sp.Poly(sp.expand(expr), *ws)
    return sum(coeff for monom, coeff in poly.terms() if all(e in (0, 2) for e in monom))


def derive_delta_F() -> Derivation:
    """Lemma 7: E[||M_+||_F^2 - ||M||_F^2] = gamma^2 delta_F(M) + O(gamma^3), for unit-diagonal M (eq. 43).

    General d: Taylor expansion of g_ij to second order in Delta M = gamma (W M + M W^T) + gamma^2 W M W^T, with
    the moments of Delta M (checked symbolically at d = 3), then the sum over pairs i != j. Independent check at
    d = 3: the full map corr((I + gamma W) M (I + gamma W)^T), expanded in gamma and averaged over W.
    """
    out = Derivation("Lemma 7: the second-order drift delta_F of ||M||_F^2")
    drift, s = _pair_drift()
    out.step("Per pair i != j (eq. 74), E[g_ij(M_+) - g_ij(M)] / gamma^2 with g_ij = M_ij^2 / (M_ii M_jj):",
             sp.Eq(sp.Symbol("E[Delta g_ij]/gamma^2"), drift), name="pair_drift")
    # the moments of Delta M used above, for a symbolic d = 3 correlation matrix
    width = 3
    m = _unit_diagonal(width)
    ws = sp.symbols(f"w_1:{width * width + 1}", real=True)
    w = sp.Matrix(width, width, ws)
    first = w * m + m * w.T
    m2 = m * m
    checks = [_expected_quadratic((w * m * w.T)[0, 0], list(ws)) - width,
              _expected_quadratic((w * m * w.T)[0, 1], list(ws)),
              _expected_quadratic(first[0, 1] ** 2, list(ws)) - (m2[0, 0] + m2[1, 1]),
              _expected_quadratic(first[0, 1] * first[0, 0], list(ws)) - 2 * m2[0, 1],
              _expected_quadratic(first[0, 0] ** 2, list(ws)) - 4 * m2[0, 0],
              _expected_quadratic(first[0, 0] * first[1, 1], list(ws))]
    out.step("The moments of Delta M used there, E(WMW^T)_ii = d, E(WMW^T)_ij = 0, K_ij,ij = (M^2)_ii + (M^2)_jj, "
             "K_ij,ii = 2(M^2)_ij, K_ii,ii = 4(M^2)_ii, K_ii,jj = 0: the sum of the squared differences from their "
             "values at d = 3",
             sp.Eq(sp.Symbol("sum (moment - stated)^2"), sp.expand(sum(c**2 for c in checks))),
             name="moment_residuals")
    # sum over pairs: at d = 3 the sum of eq. 74 over i != j equals delta_F written with the invariants
    delta = 2 * d**2 - 2 * F - 8 * T3 + 8 * D2
    pair_sum = sum(drift.subs({s["m"]: m[i, j], s["p_i"]: m2[i, i], s["p_j"]: m2[j, j], s["q"]: m2[i, j]})
                   for i in range(width) for j in range(width) if i != j)
    residual = sp.expand((pair_sum - delta.subs(_invariants(m))).subs(d, width))
    out.step("Summed over i != j with Tr M = d, (M^2)_ii summing to ||M||_F^2: the sum of eq. 74 minus delta_F at "
             "d = 3 is", sp.Eq(sp.Symbol("sum_{i!=j} eq74 - delta_F"), residual), name="pair_sum_residual")
    out.step("Lemma 7's delta_F (eq. 43):", sp.Eq(sp.Symbol("delta_F"), delta), name="delta_F")
    t = sp.Symbol("t", real=True)
    laplacian = 0
    for k in range(width):
        for l in range(width):
            a = (sp.eye(width) + t * sp.Matrix(width, width, lambda i, j: int((i, j) == (k, l))))
            a = a * m * a.T
            frob = sum(a[i, j] ** 2 / (a[i, i] * a[j, j]) for i in range(width) for j in range(width))
            laplacian += sp.diff(frob, t, 2).subs(t, 0)
    brute = sp.simplify(laplacian / 2 - delta.subs(_invariants(m)).subs(d, width))
    out.step("Independent check at d = 3: E[d^2/dgamma^2 ||corr((I + gamma W)M(I + gamma W)^T)||_F^2] / 2 at "
             "gamma = 0 (a sum of second derivatives along each W_kl; E over W kills the first order and the "
             "cross terms) minus delta_F:", sp.Eq(sp.Symbol("brute force - delta_F"), brute), name="brute_residual")
    out.result = delta
    return out


def derive_spectral_delta_F() -> Derivation:
    """Prop. 8: with equal row norms, delta_F(lambda) = 2 d^2 - 2||l||_2^2 - 8||l||_3^3 + 8||l||_2^4 / d (eq. 45).

    Checked symbolically on the circulant correlation matrix circ(1, a, b, a) (d = 4), whose rows share one norm.
    Example 9 then expands it at a near-rank-one spectrum lambda = (d - (d-1) eps, eps, ..., eps).
    """
    out = Derivation("Prop. 8: delta_F in terms of the spectrum; Example 9")
    a, b, eps = sp.symbols("a b epsilon", real=True)
    m = sp.Matrix(4, 4, lambda i, j: [1, a, b, a][(j - i) % 4])
    inv = _invariants(m)
    out.step("For circ(1, a, b, a), Tr(diag(M^2)^2) - ||M||_F^4 / d:",
             sp.Eq(sp.Symbol("Tr(diag(M^2)^2) - ||M||_F^4/d"), sp.simplify(inv[D2] - inv[F] ** 2 / 4)),
             name="equal_row_norm_residual")
    lam = sp.IndexedBase("lambda")
    i = sp.Symbol("i", integer=True, positive=True)
    s2, s3 = sp.Sum(lam[i] ** 2, (i, 1, d)), sp.Sum(lam[i] ** 3, (i, 1, d))
    spectral = 2 * d**2 - 2 * s2 - 8 * s3 + 8 * s2**2 / d
    out.step("Hence (eq. 45; Tr M^k = sum lambda^k):", sp.Eq(sp.Symbol("delta_F(lambda)"), spectral), name="spectral")
    near = {s2: (d - (d - 1) * eps) ** 2 + (d - 1) * eps**2, s3: (d - (d - 1) * eps) ** 3 + (d - 1) * eps**3}
    series = sp.factor(sp.series(spectral.subs(near), eps, 0, 2).removeO())
    out.step("Example 9, lambda = (d - (d-1) eps, eps, ..., eps), to first order in eps (the paper's eps is "
             "gamma^2):", sp.Eq(sp.Symbol("delta_F"), series), name="near_rank_one")
    out.step("The paper's expansion (eq. 78) keeps ||lambda||_2^2 ~ d^2 - 2 eps d; the true first-order term is",
             sp.Eq(sp.Symbol("||lambda||_2^2 - d^2"), sp.factor(sp.series(near[s2], eps, 0, 2).removeO() - d**2)),
             name="norm_first_order")
    return out


def derive_rank_bound() -> Derivation:
    """Lemma 13 and Theorem 14: from invariance, E||M||_F^2 <= d^(3/2) / (2 sqrt(1 - alpha)), E r >= 2 sqrt(1-a) sqrt d.

    The paper states the bounds with constants 1 in place of 2: its eq. 55 drops the factor 8 / 2 = 4.
    """
    out = Derivation("Lemma 13 and Theorem 14: the Omega(sqrt d) rank bound")
    f_bar, t3_bar = sp.symbols("E||M||_F^2 E||lambda||_3^3", positive=True)
    gap = sp.Symbol("kappa", positive=True)  # 1 - alpha > 0, so that square roots simplify

    def tidy(expr: sp.Expr) -> sp.Expr:
        return sp.simplify(expr.subs(alpha, 1 - gap)).subs(gap, 1 - alpha)

    stationarity = sp.Eq(0, 2 * d**2 - 2 * f_bar - 8 * (1 - alpha) * t3_bar)
    out.step("Invariance, E_nu[Delta ||M||_F^2] = 0, with Lemma 7 and alpha = E Tr(diag(M^2)^2) / E Tr M^3 "
             "(eq. 52-53), to leading order in gamma:", stationarity)
    t3 = sp.solve(stationarity, t3_bar)[0]
    out.step("Solved for E||lambda||_3^3; dropping -2 E||M||_F^2 <= 0 gives the bound d^2 / (4 (1 - alpha)):",
             sp.Eq(t3_bar, t3), name="third_moment")
    bound_t3 = sp.limit(t3, f_bar, 0)
    out.step("Lemma 13's constant, ours over the paper's (eq. 55 prints d^2 / (1 - alpha)):",
             sp.Eq(sp.Symbol("ratio"), tidy(bound_t3 / (d**2 / (1 - alpha)))), name="third_moment_ratio")
    frob = tidy(sp.sqrt(d * bound_t3))
    out.step("Cauchy-Schwarz, ||lambda||_2^2 <= sqrt(||lambda||_1 ||lambda||_3^3) with ||lambda||_1 = d, and "
             "Jensen (sqrt is concave):", sp.Eq(sp.Symbol("E||M||_F^2 <="), frob), name="frobenius")
    rank = tidy(d**2 / frob)
    out.step("Jensen again (1/x is convex), E r = E d^2 / ||M||_F^2 >= d^2 / E||M||_F^2:",
             sp.Eq(sp.Symbol("E r(H) >="), rank), name="rank_bound")
    out.step("The paper's Theorem 14 bound (eq. 58) is half of it:",
             sp.Eq(sp.Symbol("ours / paper"), tidy(rank / (sp.sqrt(1 - alpha) * sp.sqrt(d)))),
             name="rank_bound_ratio")
    return out


@cache
def _delta_kernel():
    return sp.lambdify((d, F, T3, D2), derive_delta_F().result, modules="numpy", cse=True)


@cache
def _spectral_kernel():
    expr = 2 * d**2 - 2 * F - 8 * T3 + 8 * F**2 / d  # eq. 45 in the invariants ||l||_2^2 = F, ||l||_3^3 = T3
    return sp.lambdify((d, F, T3), expr, modules="numpy", cse=True)


def matrix_invariants(M: np.ndarray | torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(||M||_F^2, Tr M^3, Tr(diag(M^2)^2)) of (..., d, d) matrices, in float64."""
    m = torch.as_tensor(M, dtype=torch.float64)
    m2 = m @ m
    return ((m.square().sum((-2, -1))).numpy(), (m2 * m).sum((-2, -1)).numpy(),
            m2.diagonal(0, -2, -1).square().sum(-1).numpy())


def delta_F(M: np.ndarray | torch.Tensor) -> np.ndarray:
    """delta_F(M) = 2 d^2 - 2||M||_F^2 - 8 Tr M^3 + 8 Tr(diag(M^2)^2) for unit-diagonal PSD M (Lemma 7, eq. 43)."""
    m = check_second_moment(M)
    if (m.diagonal(0, -2, -1) - 1).abs().max().item() > 1e-8:
        raise ValueError("delta_F needs M with unit diagonal (a batch-norm output: every row of H has norm sqrt N)")
    return _delta_kernel()(m.shape[-1], *matrix_invariants(m))


def delta_F_spectral(eigenvalues: np.ndarray) -> np.ndarray:
    """Prop. 8's delta_F(lambda) = 2 d^2 - 2||l||_2^2 - 8||l||_3^3 + 8||l||_2^4 / d, for eigenvalues (..., d)."""
    lam = check_real_array(eigenvalues, "eigenvalues (..., d)", min_ndim=1)
    if np.any(lam < -1e-9 * np.abs(lam).max()):
        raise ValueError("eigenvalues must be those of a PSD matrix (all >= 0)")
    with np.errstate(over="ignore", invalid="ignore"):
        value = _spectral_kernel()(lam.shape[-1], np.square(lam).sum(-1), (lam**3).sum(-1))
    if not np.all(np.isfinite(value)):
        largest = float(np.abs(lam).max())
        raise ValueError(f"delta_F of these eigenvalues is beyond float64's range: its term 8 ||lambda||_2^4 / d grows "
                         f"like lambda^4, about 10^{4 * math.log10(largest):.0f} for the largest, {largest:.3g} "
                         "(Prop. 8 concerns a batch-norm output M, whose d eigenvalues sum to d)")
    return value


def second_order_drift(M: np.ndarray | torch.Tensor, n_draws: int = 4000, seed: int = 0) -> Estimate:
    """E_W[(1/2) d^2/dgamma^2 ||corr((I + gamma W) M (I + gamma W)^T)||_F^2 at gamma = 0], by Monte Carlo.

    Lemma 7 says this equals delta_F(M). With A(gamma) = M + gamma A1 + gamma^2 A2 and g = A_ij^2 / (A_ii A_jj),
    g'' at 0 is u'' - 2 u' v' - u v'' + 2 u v'^2 with u = A_ij^2, v = A_ii A_jj, exact in closed form per draw, so
    the estimate has no finite-gamma remainder. SE over the ``n_draws`` independent W.
    """
    m = check_second_moment(M)
    n_draws, seed = check_draws(n_draws, "n_draws"), check_seed(seed)
    check_memory(n_draws, m.shape[-1], m.shape[-1], "n_draws x d x d")
    if m.ndim != 2 or not (m.diagonal() > 0).all():
        raise ValueError("M must be one d x d matrix with a positive diagonal (corr divides by it)")
    m = _rescaled(m, "M")  # keeps the drift's terms (up to 6th powers of M) in range
    width = m.shape[-1]
    w = torch.randn(n_draws, width, width, generator=generator(seed, "cpu"), dtype=torch.float64)
    a1 = w @ m + m @ w.mT
    a2 = w @ m @ w.mT
    diag0, diag1, diag2 = m.diagonal(), a1.diagonal(0, -2, -1), a2.diagonal(0, -2, -1)
    u0, u1, u2 = m**2, 2 * m * a1, 2 * a1**2 + 4 * m * a2
    v0 = diag0[:, None] * diag0[None, :]
    v1 = diag1[..., :, None] * diag0[None, :] + diag0[:, None] * diag1[..., None, :]
    v2 = (2 * diag2[..., :, None] * diag0[None, :] + 2 * diag1[..., :, None] * diag1[..., None, :]
          + 2 * diag0[:, None] * diag2[..., None, :])
    second = u2 / v0 - 2 * u1 * v1 / v0**2 - u0 * v2 / v0**2 + 2 * u0 * v1**2 / v0**3
    return Estimate(*mean_and_se(second.sum((-2, -1)).numpy() / 2), "Monte Carlo, exact second derivative")


def chain_statistics(width: int, gamma: float, depth: int, burn: int, n_chains: int = 8, every: int = 4,
                     samples: int | None = None, seed: int = 0) -> dict[str, Estimate]:
    """Ergodic averages over the invariant law of the BN chain, with SE across independent chains.

    Each chain (N = ``samples`` = d by default, its own Gaussian X) runs ``burn`` + ``depth`` layers; its averages
    over the last ``depth`` layers (every ``every``-th) are one draw. Keys: ``r`` (eq. 4), ``rank_half`` (eq. 3,
    tau = 1/2), ``frobenius`` (||M||_F^2), ``tr_m3``, ``tr_diag_m2_sq``, ``alpha`` (Def. 3, ratio of the chain's
    averages), ``m12`` and ``m12_m13`` (Lemma 4: both vanish).
    """
    width, gamma = check_width(width, 3), check_gamma(gamma)  # the statistics read M_12 and M_13
    every = check_layers(every, "every")
    depth, burn = check_layers(depth, f"depth (at least every = {every})", every), check_layers(burn, "burn", 0)
    n_chains, seed = check_draws(n_chains, "n_chains"), check_seed(seed)
    samples = width if samples is None else check_draws(samples, "samples N", 1)
    check_memory(n_chains, width, max(width, samples), "n_chains x d x max(d, N)")
    # an independent Gaussian X per chain, so the chains' averages stay independent even where mixing is slow
    x = torch.randn(n_chains, width, samples, generator=generator(seed + 1, "cpu"), dtype=torch.float64)

    def stats(h: torch.Tensor) -> torch.Tensor:
        m = second_moment(h)
        lam = torch.linalg.eigvalsh(m)
        m2 = m @ m
        return torch.stack([differentiable_rank_bound(h), (lam >= 0.5).sum(-1).to(m.dtype),
                            m.square().sum((-2, -1)), (m2 * m).sum((-2, -1)),
                            m2.diagonal(0, -2, -1).square().sum(-1), m[..., 0, 1], m[..., 0, 1] * m[..., 0, 2]], -1)

    if burn % every:
        raise ValueError(f"burn ({burn}) must be a multiple of every ({every})")
    trace = bn_chain(x, burn + depth, gamma, n_chains, seed, "H", every, stats)[burn // every:]
    per_chain = trace.mean(0).numpy()
    names = ["r", "rank_half", "frobenius", "tr_m3", "tr_diag_m2_sq", "m12", "m12_m13"]
    out = {name: Estimate(*mean_and_se(per_chain[:, i]), "ergodic average") for i, name in enumerate(names)}
    out["alpha"] = Estimate(*mean_and_se(per_chain[:, 4] / per_chain[:, 3]), "ergodic average")
    return out
