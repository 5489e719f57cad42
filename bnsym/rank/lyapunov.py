"""Lyapunov spectra of products of random matrices: why vanilla (residual) linear networks collapse (Lemma 3).

For B_l = A_l ... A_1 with i.i.d. d x d factors, (1/l) ln sigma_i(B_l) -> mu_i, the i-th Lyapunov exponent, so
sigma_2 / sigma_1 ~ exp(-(mu_1 - mu_2) l): a gap mu_1 > mu_2 collapses B_l X to rank one (Lemma 3, Bougerol).

* Real Ginibre factors (entries N(0, s^2), the no-skip network gamma = oo): by Bartlett's decomposition
  |R_ii|^2 ~ s^2 chi^2_{d-i+1} in W = Q R, so mu_i = (1/2)[ln(2 s^2) + psi((d - i + 1)/2)] from
  E ln chi^2_n = psi(n/2) + ln 2 (:func:`derive_log_chi_square`, :func:`ginibre_lyapunov`).
* Residual factors I + gamma W, W Gaussian: (I + gamma W) x / ||x|| has the law of e_1 + gamma g, so
  mu_1 = (1/2) E ln[(1 + gamma g)^2 + gamma^2 chi^2_{d-1}] exactly (:func:`residual_top_exponent`, quadrature).
* Any factor law: the QR method (:func:`lyapunov_exponents`), batched over independent products.
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
from ..core.device import generator
from ..core.estimate import Estimate
from ..core.statistics import mean_and_se
from ..core.symbols import d, n_dof

Sampler = Callable[[torch.Generator, int], torch.Tensor]


def derive_log_chi_square() -> Derivation:
    """E ln X = psi(n/2) + ln 2 for X ~ chi^2_n, from the Mellin moment E X^s, then the Ginibre exponents."""
    out = Derivation("Lyapunov exponents of products of Gaussian matrices")
    x = sp.Symbol("x", positive=True)
    s = sp.Symbol("s", real=True)
    density = x ** (n_dof / 2 - 1) * sp.exp(-x / 2) / (2 ** (n_dof / 2) * sp.gamma(n_dof / 2))
    moment = sp.simplify(sp.integrate(x**s * density, (x, 0, sp.oo), conds="none"))
    out.step("The Mellin moment of the chi-square density with n degrees of freedom:",
             sp.Eq(sp.Symbol("E[X^s]"), moment))
    log_moment = sp.simplify(sp.diff(moment, s).subs(s, 0))
    out.step("E ln X is its derivative at s = 0:", sp.Eq(sp.Symbol("E[ln X]"), log_moment), name="log_chi_square")
    i, s2 = sp.Symbol("i", integer=True, positive=True), sp.Symbol("s^2", positive=True)
    mu = sp.expand((sp.log(s2) + log_moment.subs(n_dof, d - i + 1)) / 2)
    out.step("Bartlett: |R_ii|^2 ~ s^2 chi^2_{d-i+1} in the QR decomposition of W, so "
             "mu_i = E ln|R_ii| (the QR method is exact in law for rotation-invariant factors):",
             sp.Eq(sp.Symbol("mu_i"), mu), name="mu")
    out.step("The gap between the top two exponents:",
             sp.Eq(sp.Symbol("mu_1 - mu_2"), sp.simplify(mu.subs(i, 1) - mu.subs(i, 2))), name="gap")
    return out


@cache
def _mu_kernel():
    """mu_i(d, i, s^2), lambdified (scipy for the digamma) from :func:`derive_log_chi_square`."""
    mu = derive_log_chi_square()["mu"]
    return sp.lambdify(sorted(mu.free_symbols, key=str), mu, modules="scipy", cse=True)


def ginibre_lyapunov(width: int, s2: float = 1.0) -> np.ndarray:
    """(mu_1, ..., mu_d) of products of d x d matrices with i.i.d. N(0, s2) entries, decreasing."""
    if int(width) != width or width < 2:
        raise ValueError(f"width d must be a whole number >= 2, got {width}")
    if not (np.isfinite(s2) and s2 > 0):
        raise ValueError(f"s2 is an entry variance, so it must be > 0, got {s2}")
    # arguments in the sorted symbol order: d, i, s^2
    return _mu_kernel()(width, np.arange(1, width + 1), s2)


def residual_top_exponent(width: int, gamma: float, nodes: int = 80) -> Estimate:
    """mu_1 of products of I + gamma W, W with i.i.d. N(0, 1) entries: (1/2) E ln[(1 + gamma g)^2 + gamma^2 chi^2].

    Gauss-Hermite in g ~ N(0, 1) times generalised Gauss-Laguerre in chi^2_{d-1} / 2 ~ Gamma((d-1)/2); the error
    is the change from ``nodes`` to ``nodes // 2`` nodes per axis.
    """
    if int(width) != width or width < 3:
        raise ValueError(f"width d must be a whole number >= 3, got {width}")
    if not (np.isfinite(gamma) and gamma > 0):
        raise ValueError(f"gamma must be a finite number > 0 (gamma = oo is ginibre_lyapunov), got {gamma}")

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
    def sample(gen: torch.Generator, n: int) -> torch.Tensor:
        w = math.sqrt(s2) * torch.randn(n, width, width, generator=gen, device=gen.device, dtype=dtype)
        return w if math.isinf(gamma) else torch.eye(width, dtype=dtype, device=gen.device) + gamma * w
    return sample


def qr_step(frame: torch.Tensor, factor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of the QR method: (Q', ln|diag R|) with factor @ frame = Q' R, signs fixed so diag R > 0."""
    q, r = torch.linalg.qr(factor @ frame)
    diagonal = r.diagonal(0, -2, -1)
    return q * diagonal.sign().unsqueeze(-2), diagonal.abs().log()


def lyapunov_samples(sample: Sampler, width: int, depth: int, n_products: int = 8, seed: int = 0,
                     device: torch.device | str = "cpu") -> np.ndarray:
    """(n_products, d): each independent product's (1/depth) sum_l ln|R_ii^l| by the QR method, decreasing in i."""
    if depth < 1 or n_products < 2:
        raise ValueError(f"need depth >= 1 and n_products >= 2, got {depth}, {n_products}")
    gen = generator(seed, device)
    frame = torch.eye(width, dtype=torch.float64, device=device).expand(n_products, width, width)
    total = torch.zeros(n_products, width, dtype=torch.float64, device=device)
    for _ in range(depth):
        frame, logs = qr_step(frame, sample(gen, n_products).to(torch.float64))
        total += logs
    return (total / depth).cpu().numpy()


def lyapunov_exponents(sample: Sampler, width: int, depth: int, n_products: int = 8, seed: int = 0,
                       device: torch.device | str = "cpu") -> Estimate:
    """The Lyapunov spectrum of i.i.d. products by the QR method, one estimate per exponent (decreasing).

    The value is the mean of :func:`lyapunov_samples` over independent products, the error its standard error.
    """
    mean, se = mean_and_se(lyapunov_samples(sample, width, depth, n_products, seed, device))
    return Estimate(mean, se, "QR method")


def predicted_numerical_rank(exponents: np.ndarray, depth: np.ndarray | int, rtol: float) -> np.ndarray:
    """#{i : depth (mu_1 - mu_i) < ln(1 / rtol)}: directions whose singular value has not decayed below rtol."""
    mu = np.asarray(exponents, dtype=float)
    if not 0 < rtol < 1:
        raise ValueError(f"rtol must lie in (0, 1), got {rtol}")
    depth = np.asarray(depth, dtype=float)[..., None]
    return (depth * (mu[0] - mu) < np.log(1 / rtol)).sum(-1)
