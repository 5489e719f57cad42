"""Rank notions of Daneshmand et al. 2020 (eqs. 3-4, Lemma 1), for H of shape (..., d, N).

H is d features x N samples, as in the paper (columns are samples), with any leading axes (networks, layers).
M(H) = H H^T / N is the d x d second-moment matrix of the features, with eigenvalues lambda_i = sigma_i^2 / N.

* soft rank rank_tau(H) = #{i : lambda_i >= tau} (eq. 3; :func:`rank_tau`);
* rank lower bound r(H) = Tr(M)^2 / ||M||_F^2 = ||lambda||_1^2 / ||lambda||_2^2 (eq. 4; :func:`rank_lower_bound`,
  and :func:`differentiable_rank_bound` for training);
* numerical rank: singular values above sigma_max max(d, N) eps of H's float type, torch's default and the
  paper's footnote 2 (:func:`numerical_rank`), and its prediction from a Lyapunov spectrum
  (:func:`predicted_numerical_rank`).

Lemma 1, rank(H) >= r(H) and, when Tr M = d (batch-norm outputs), rank_tau(H) >= (1 - tau)^2 r(H), is derived
with its equality cases in :func:`derive_rank_bounds`.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
import torch

from ..core.derivation import Derivation
from ..core.symbols import d, tau
from ..core.validation import check_range, check_real_array, check_real_tensor


def as_features(H: np.ndarray | torch.Tensor, name: str = "H") -> torch.Tensor:
    """H as a torch tensor of shape (..., d, N) with finite entries (ValueError otherwise); keeps float32/64. A
    boolean H (an activation pattern, a 0/1 design) is its 0/1 matrix in float64."""
    if isinstance(H, torch.Tensor) and H.dtype == torch.bool:
        H = H.to(torch.float64)
    elif isinstance(H, np.ndarray) and H.dtype == np.bool_:
        H = H.astype(np.float64)
    return check_real_tensor(H, f"{name} (a matrix (..., d, N) of d features x N samples)", min_ndim=2)


def second_moment(H: np.ndarray | torch.Tensor) -> torch.Tensor:
    """M(H) = H H^T / N, shape (..., d, d), for H of shape (..., d, N) (eq. 2)."""
    h = as_features(H)
    m = h @ h.mT / h.shape[-1]
    if not torch.isfinite(m).all():
        raise ValueError(f"M(H) = H H^T / N overflows {h.dtype}: H's entries are too large for its float type")
    return m


def _unit_scaled(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(H / s, s) per matrix, s the power of 2 that brings max abs(H) into [1/2, 1) (1 for H = 0): exact, and
    products of H / s (its SVD, M(H / s)) never overflow."""
    largest = h.abs().amax((-2, -1))
    scale = torch.ldexp(torch.ones_like(largest), torch.frexp(largest)[1])
    return h / scale[..., None, None], scale


def _singular_values(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sigma_i(H) / s, s) per matrix, s as in :func:`_unit_scaled`: the SVD of H / s is exact up to rounding and
    never overflows, and the ratios of singular values are those of H."""
    unit, scale = _unit_scaled(h)
    return torch.linalg.svdvals(unit), scale


def _eigenvalues(H) -> torch.Tensor:
    """lambda_i = sigma_i(H)^2 / N, the eigenvalues of M(H), in float64 (inf where that overflows)."""
    h = as_features(H).to(torch.float64)
    sigma, scale = _singular_values(h)
    return (sigma * scale[..., None]).square() / h.shape[-1]


def rank_tau(H: np.ndarray | torch.Tensor, tau: float = 0.5) -> np.ndarray:
    """The soft rank #{i : sigma_i(H)^2 / N >= tau} of H (d features x N samples; eq. 3)."""
    tau = check_range(tau, "tau", 0.0, open_low=True, why="a threshold on sigma^2 / N")
    return (_eigenvalues(H) >= tau).sum(-1).numpy()


def differentiable_rank_bound(H: torch.Tensor) -> torch.Tensor:
    """r(H) = Tr(M)^2 / ||M||_F^2 = ||lambda||_1^2 / ||lambda||_2^2 with M = H H^T / N (eq. 4), in H's float type and
    differentiable in H (Algorithm 1 maximises it). No checks: a diverged H gives NaN (see :func:`rank_lower_bound`)."""
    m = H @ H.mT / H.shape[-1]
    return m.diagonal(0, -2, -1).sum(-1).square() / m.square().sum((-2, -1))


def rank_lower_bound(H: np.ndarray | torch.Tensor) -> np.ndarray:
    """r(H) = Tr(M)^2 / ||M||_F^2 with M = H H^T / N, H d features x N samples (eq. 4), in float64."""
    h = as_features(H).detach().to(torch.float64)
    if (h == 0).all(-1).all(-1).any():
        raise ValueError("r(H) is undefined for H = 0 (it divides by ||M||_F^2)")
    return differentiable_rank_bound(_unit_scaled(h)[0]).numpy()  # r is scale free: H / s never overflows M


def numerical_rank(H: np.ndarray | torch.Tensor, rtol: float | None = None) -> np.ndarray:
    """#{i : sigma_i(H) > rtol sigma_max} for H d features x N samples, computed in H's own float type.

    The default rtol = max(d, N) eps (eps of float32 or float64) is torch.linalg.matrix_rank's, which the paper
    uses (footnote 2): the numerical rank of a float32 representation differs from that of a float64 one.
    """
    h = as_features(H)
    if rtol is None:
        rtol = max(h.shape[-2:]) * torch.finfo(h.dtype).eps
    rtol = check_range(rtol, "rtol", 0.0, why="a threshold on sigma / sigma_max")
    s, _ = _singular_values(h)
    return (s > rtol * s[..., :1]).sum(-1).numpy()


def predicted_numerical_rank(exponents: np.ndarray, depth: np.ndarray | int, rtol: float) -> np.ndarray:
    """#{i : depth (mu_1 - mu_i) < ln(1 / rtol)}: the directions of a product of ``depth`` random factors with
    Lyapunov ``exponents`` mu_i whose singular value has not decayed below rtol sigma_max (Lemma 3)."""
    mu = check_real_array(exponents, "exponents", min_ndim=1)
    rtol = check_range(rtol, "rtol", 0.0, 1.0, open_low=True, open_high=True, why="a singular value ratio")
    depth = check_real_array(depth, "depth", low=0.0)[..., None]
    return (depth * (mu[0] - mu) < np.log(1 / rtol)).sum(-1)


def derive_rank_bounds() -> Derivation:
    """Lemma 1: rank(H) >= r(H) and rank_tau(H) >= (1 - tau)^2 r(H) when Tr M = d, with the equality cases.

    Cauchy-Schwarz on the h eigenvalues of a set S: (sum_S lambda)^2 <= h sum_S lambda^2. Its gap is Lagrange's
    identity, shown for h = 4. Part 1 takes S = the nonzero eigenvalues: equality iff they are all equal. Part 2
    takes S = {lambda_i >= tau}, whose sum is at least d - (d - h) tau >= (1 - tau) d; the bound is never attained
    for tau > 0 but is sharp: h eigenvalues equal and d - h just below tau give ratio -> 1 as d -> oo.
    """
    out = Derivation("Lemma 1: the rank lower bounds r(H) and (1 - tau)^2 r(H)")
    lam = sp.symbols("lambda_1:5", real=True)
    gap = 4 * sum(x**2 for x in lam) - sum(lam) ** 2
    pairs = sum((lam[i] - lam[j]) ** 2 for i in range(4) for j in range(i + 1, 4))
    out.step("Cauchy-Schwarz for h = 4 numbers: its gap h sum(lambda^2) - (sum lambda)^2 is Lagrange's sum of "
             "squares, hence >= 0, and 0 iff all are equal:",
             sp.Eq(sp.Symbol("gap - sum_{i<j} (lambda_i - lambda_j)^2"), sp.expand(gap - pairs)),
             name="lagrange_identity")
    a, h, eps = sp.symbols("a h epsilon", positive=True)
    equal = (h * a) ** 2 / (h * a**2)
    out.step("Part 1, equality case: h equal nonzero eigenvalues a give r = h = rank:",
             sp.Eq(sp.Symbol("r(H)"), sp.simplify(equal)), name="equal_spectrum")
    top = (d - (d - h) * (tau - eps)) / h  # h equal eigenvalues, the other d - h at tau - eps, Tr M = d
    r_family = d**2 / (h * top**2 + (d - h) * (tau - eps) ** 2)
    ratio = sp.simplify((h / ((1 - tau) ** 2 * r_family)).subs(eps, 0))
    out.step("Part 2, the near-extremal family (h eigenvalues equal, d - h just below tau, Tr M = d): "
             "rank_tau / ((1 - tau)^2 r) is",
             sp.Eq(sp.Symbol("rank_tau/((1-tau)^2 r)"), ratio), name="part2_ratio")
    out.step("It tends to 1 as d grows at fixed h: the constant (1 - tau)^2 cannot be improved.",
             sp.Eq(sp.Symbol("lim_{d->oo} rank_tau/((1-tau)^2 r)"), sp.factor(sp.limit(ratio, d, sp.oo))),
             name="part2_limit")
    return out
