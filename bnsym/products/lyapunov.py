"""Lyapunov spectra of products of random matrices, shared by Bjorck et al. 2018 (the slope of log kappa, section 4)
and Daneshmand et al. 2020 (why vanilla and residual linear networks collapse, Lemma 3).

For B_l = A_l ... A_1 with i.i.d. square factors, (1/l) ln sigma_i(B_l) -> mu_i, the i-th Lyapunov exponent, so
sigma_2 / sigma_1 ~ exp(-(mu_1 - mu_2) l): a gap mu_1 > mu_2 collapses B_l X to rank one (Lemma 3, Bougerol), and
log kappa(B_l) grows by mu_1 - mu_N per factor.

* Real Ginibre factors (entries N(0, s^2); the no-skip network, gamma = oo): by Bartlett's decomposition
  abs(R_jj)^2 ~ s^2 chi^2_(N-j+1) in W = Q R, and E ln chi^2_nu = psi(nu/2) + ln 2, so
  mu_j = (1/2)[ln(2 s^2) + psi((N - j + 1)/2)] (:func:`derive_lyapunov`, :func:`ginibre_lyapunov_exponents`,
  :func:`lyapunov_slope`).
* Residual factors I + gamma W, W Gaussian: (I + gamma W) x / ||x|| has the law of e_1 + gamma g, so
  mu_1 = (1/2) E ln[(1 + gamma g)^2 + gamma^2 chi^2_(N-1)] exactly (:func:`residual_top_exponent`, quadrature).
* Any factor law: the QR method (:func:`qr_step`), batched over independent products, as a Monte Carlo
  :class:`~bnsym.core.estimate.Estimate` (:func:`qr_lyapunov_exponents`).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Callable

import numpy as np
import sympy as sp
import torch
from scipy.special import roots_genlaguerre, roots_hermitenorm

from ..core.derivation import Derivation
from ..core.device import generator, signed_qr
from ..core.estimate import Estimate
from ..core.statistics import mean_and_se
from ..core.symbols import N_width, n_dof
from ..core.validation import (
    check_device,
    check_draws,
    check_float_dtype,
    check_gamma,
    check_layers,
    check_memory,
    check_range,
    check_seed,
    check_whole_number,
    check_width,
)

Sampler = Callable[[torch.Generator, int], torch.Tensor]
LARGEST_WIDTH = 10**6  # the closed forms: one exponent per direction
LARGEST_SLOPE_WIDTH = 10**300  # lyapunov_slope: one number, psi(N/2) in float64
WIDTH = "the width N (the factors are N x N)"


@cache
def derive_lyapunov(width: sp.Symbol = N_width) -> Derivation:
    """E ln chi^2_nu = psi(nu/2) + ln 2 from the Mellin moment, hence the Ginibre exponents mu_j, the gap
    mu_1 - mu_2 and the slope mu_1 - mu_N of log kappa, for N x N factors (``width``: N, or Daneshmand's d)."""
    out = Derivation("Lyapunov exponents of products of Ginibre matrices")
    x = sp.Symbol("x", positive=True)
    a = sp.Symbol("a", real=True)
    density = x ** (n_dof / 2 - 1) * sp.exp(-x / 2) / (2 ** (n_dof / 2) * sp.gamma(n_dof / 2))
    moment = sp.simplify(sp.integrate(x**a * density, (x, 0, sp.oo), conds="none"))
    out.step("The Mellin moment of the chi-square density with nu degrees of freedom:",
             sp.Eq(sp.Symbol("E[X^a]"), moment))
    log_moment = sp.simplify(sp.diff(moment, a).subs(a, 0))
    out.step("E ln X is its derivative at a = 0:", sp.Eq(sp.Symbol("E[ln X]"), log_moment), name="log_chi_square")
    j, s2 = sp.Symbol("j", integer=True, positive=True), sp.Symbol("s^2", positive=True)
    mu = sp.expand((sp.log(s2) + log_moment.subs(n_dof, width - j + 1)) / 2)
    out.step(f"Bartlett: the QR decomposition W = Q R of a {width} x {width} Ginibre matrix (entry variance s^2) has "
             f"independent |R_jj|^2 ~ s^2 chi^2_({width}-j+1), and W Q_(l-1) is Ginibre again, so every factor adds "
             "an independent stretch (the QR method is exact in law for rotation-invariant factors):",
             sp.Eq(sp.Symbol("mu_j"), mu), name="mu")
    out.step("The gap between the top two exponents (the rate of rank collapse):",
             sp.Eq(sp.Symbol("mu_1 - mu_2"), sp.simplify(mu.subs(j, 1) - mu.subs(j, 2))), name="gap")
    slope = sp.simplify(mu.subs(j, 1) - mu.subs(j, width))
    out.step(f"log kappa grows per factor by mu_1 - mu_{width}:", sp.Eq(sp.Symbol(f"mu_1 - mu_{width}"), slope),
             name="slope")
    half = (sp.polygamma(0, width / 2) - sp.polygamma(0, sp.Rational(1, 2), evaluate=False)) / 2
    if sp.expand(sp.expand_func(half) - slope) != 0:
        raise RuntimeError(f"the slope is not (1/2)[psi({width}/2) - psi(1/2)]")
    out.step("that is, with psi(1/2) = -gamma - 2 ln 2,", sp.Eq(sp.Symbol(f"mu_1 - mu_{width}"), half, evaluate=False))
    out.result = slope
    return out


@cache
def _mu_kernel() -> Callable:
    """mu_j(N, j, s^2), lambdified (scipy for the digamma) from :func:`derive_lyapunov`."""
    mu = derive_lyapunov()["mu"]
    return sp.lambdify(sorted(mu.free_symbols, key=str), mu, modules="scipy", cse=True)


def _check_width(width: object, minimum: int = 2) -> int:
    return check_whole_number(width, WIDTH, minimum, LARGEST_WIDTH,
                              "one exponent per direction")


def ginibre_lyapunov_exponents(width: int, s2: float) -> np.ndarray:
    """The closed-form (mu_1, ..., mu_N) of products of N x N matrices with i.i.d. N(0, s2) entries, decreasing."""
    width, s2 = _check_width(width), check_range(s2, "s2", 0.0, open_low=True, why="an entry variance")
    # arguments in the sorted symbol order: N, j, s^2
    return _mu_kernel()(width, np.arange(1, width + 1), s2)


def lyapunov_slope(width: int) -> float:
    """(1/2)[psi(N/2) - psi(1/2)] = mu_1 - mu_N, the growth of log kappa per Ginibre factor (nats) as M -> infinity.

    One number for any width N >= 2 whose half is a float64 number (N up to 1e300: no exponent per direction is
    formed, so the closed forms' LARGEST_WIDTH does not apply)."""
    width = check_whole_number(width, WIDTH, 2, LARGEST_SLOPE_WIDTH, "psi(N/2) is evaluated in float64")
    return float(_slope()(float(width)))


@cache
def _slope() -> Callable[[float], float]:
    """The slope of :func:`derive_lyapunov`, lambdified (SciPy's digamma): sympy's own psi(N/2) at an integer N sums
    N/2 terms exactly, over a minute at N = 1e5."""
    return sp.lambdify(N_width, derive_lyapunov()["slope"], "scipy", cse=True)


def residual_top_exponent(width: int, gamma: float, nodes: int = 80) -> Estimate:
    """mu_1 of products of I + gamma W, W with i.i.d. N(0, 1) entries: (1/2) E ln[(1 + gamma g)^2 + gamma^2 chi^2].

    Gauss-Hermite in g ~ N(0, 1) times generalised Gauss-Laguerre in chi^2_(N-1) / 2 ~ Gamma((N-1)/2); the error
    is the change from ``nodes`` to ``nodes // 2`` nodes per axis.
    """
    width = _check_width(width, 3)
    gamma = check_range(gamma, "gamma", 0.0, 1e150, open_low=True,
                        why="the rule squares gamma; as gamma -> oo, mu_1 - ln gamma tends to "
                            "ginibre_lyapunov_exponents(N, 1)[0]")
    nodes = check_whole_number(nodes, "nodes", 2, 4096, "Gauss nodes per axis, nodes^2 points in all")

    def rule(n: int) -> float:
        g, wg = roots_hermitenorm(n)
        y, wy = roots_genlaguerre(n, (width - 1) / 2 - 1)
        wg, wy = wg / wg.sum(), wy / wy.sum()
        inner = np.log((1 + gamma * g[:, None]) ** 2 + 2 * gamma**2 * y[None, :])
        return float(0.5 * wg @ inner @ wy)

    fine, coarse = rule(nodes), rule(nodes // 2)
    return Estimate(fine, abs(fine - coarse), "quadrature")


def ginibre_sampler(width: int, s2: float = 1.0, gamma: float = math.inf, dtype=torch.float64) -> Sampler:
    """A sampler of n factors: W with N(0, s2) entries (gamma = oo), or I + gamma W."""
    width, gamma, dtype = check_width(width, name=WIDTH), check_gamma(gamma), check_float_dtype(dtype)
    s2 = check_range(s2, "s2", 0.0, open_low=True, why="an entry variance")
    scale = math.sqrt(s2) * (1.0 if math.isinf(gamma) else max(gamma, 1.0))
    if not scale <= torch.finfo(dtype).max ** 0.5:
        raise ValueError(f"factors of entry scale sqrt(s2) max(gamma, 1) = {scale:.3g} overflow {dtype} (products of "
                         f"two entries must stay below {torch.finfo(dtype).max:.3g})")

    def sample(gen: torch.Generator, n: int) -> torch.Tensor:
        w = math.sqrt(s2) * torch.randn(n, width, width, generator=gen, device=gen.device, dtype=dtype)
        return w if math.isinf(gamma) else torch.eye(width, dtype=dtype, device=gen.device) + gamma * w
    return sample


def qr_step(frame: torch.Tensor, factor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of the QR method: (Q', ln abs(diag R)) with factor @ frame = Q' R, signs fixed so diag R > 0."""
    q, diagonal = signed_qr(factor @ frame)
    return q, diagonal.abs().log()


def lyapunov_samples(sample: Sampler, width: int, depth: int, n_products: int = 8, seed: int = 0,
                     device: torch.device | str = "cpu") -> np.ndarray:
    """(n_products, N): each independent product's (1/depth) sum_l ln abs(R_jj^l) by the QR method, decreasing in
    j."""
    if not callable(sample):
        raise ValueError(f"sample must be a sampler of factors, sample(generator, n) (see ginibre_sampler), got "
                         f"{sample!r}")
    width, depth = check_width(width, name=WIDTH), check_layers(depth, "depth")
    n_products, seed, device = check_draws(n_products, "n_products"), check_seed(seed), check_device(device)
    check_memory(n_products, width, width, "n_products x N x N")
    gen = generator(seed, device)
    frame = torch.eye(width, dtype=torch.float64, device=device).expand(n_products, width, width)
    total = torch.zeros(n_products, width, dtype=torch.float64, device=device)
    for _ in range(depth):
        factors = sample(gen, n_products)
        if not (isinstance(factors, torch.Tensor) and factors.shape == (n_products, width, width)
                and torch.isfinite(factors).all()):
            raise ValueError(f"sample(generator, n) must return n finite N x N factors, a tensor of shape "
                             f"({n_products}, {width}, {width}); got {factors!r:.80}")
        frame, logs = qr_step(frame, factors.to(torch.float64))
        total += logs
    return (total / depth).cpu().numpy()


def qr_lyapunov_exponents(sample: Sampler, width: int, depth: int, n_products: int = 8, seed: int = 0,
                          device: torch.device | str = "cpu") -> Estimate:
    """The Lyapunov spectrum of i.i.d. products by the QR method (Monte Carlo), one estimate per exponent.

    The value is the mean of :func:`lyapunov_samples` over independent products, the error its standard error.
    """
    return Estimate(*mean_and_se(lyapunov_samples(sample, width, depth, n_products, seed, device)), "QR method")
