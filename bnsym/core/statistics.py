"""Estimators with standard errors for theory-vs-simulation comparisons.

Independent networks give independent estimates, so every standard error here is taken across
networks (never across layers of one network, which are correlated).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr
from scipy.stats import kstwo
from scipy.stats import t as student_t

from .estimate import Estimate
from .validation import check_whole_number


def mean_and_se(samples: np.ndarray, axis: int = 0) -> Estimate:
    """The sample mean along ``axis`` with its standard error std / sqrt(n) (ddof = 1), as an :class:`Estimate`.

    It unpacks as ``mean, se = mean_and_se(samples)``; ``log.check`` takes it whole.
    """
    samples = np.asarray(samples, dtype=float)
    n = samples.shape[axis]
    if n < 2:
        raise ValueError(f"a standard error needs at least 2 samples along axis {axis}, got {n}")
    return Estimate(samples.mean(axis=axis), samples.std(axis=axis, ddof=1) / np.sqrt(n), "sample mean")


def extrapolate_to_infinite_width(widths: np.ndarray, means: np.ndarray, ses: np.ndarray) -> tuple[float, float, float]:
    """Weighted least-squares fit of mean(N) = a + b / N; returns (a, standard error of a, b).

    Finite-width corrections to a smooth function of the layer covariances are O(1/N): the empirical
    Gram matrix fluctuates by O(N^(-1/2)) around its mean, and the second-order term of the layer map
    turns that variance into an O(1/N) bias. The intercept a is the infinite-width estimate.
    """
    widths, means, ses = (np.asarray(v, dtype=float) for v in (widths, means, ses))
    if widths.size < 3:
        raise ValueError("need at least 3 widths to fit a + b/N and still estimate the scatter")
    design = np.stack([np.ones_like(widths), 1 / widths], axis=1)
    weights = 1 / ses**2
    covariance = np.linalg.inv(design.T @ (weights[:, None] * design))
    intercept, slope = covariance @ design.T @ (weights * means)
    return float(intercept), float(np.sqrt(covariance[0, 0])), float(slope)


def squared_bias(samples: np.ndarray, target: np.ndarray, n_groups: int = 10) -> Estimate:
    r"""The squared distance :math:`\|\mathbb E[s] - t\|^2` of the mean of ``samples`` (draws along axis 0) from
    ``target``, unbiased, with its jackknife standard error.

    The draws are split into ``n_groups`` groups of equal size (a remainder is dropped); with :math:`d_g` the
    mean of group g minus the target, :math:`S = \sum_{g \ne h} d_g \cdot d_h / (G(G-1))` has expectation exactly
    the squared distance, since different groups are independent (the plain :math:`\|\bar s - t\|^2` is biased
    up by the noise of the mean, and subtracting the summed squared standard errors ignores correlations
    between the entries). The error is the jackknife standard error over the groups. Near zero distance S can be
    negative: the distance is not resolved there.
    """
    samples = np.asarray(samples, dtype=float)
    groups = check_whole_number(n_groups, "n_groups", 3, max(3, samples.shape[0]),
                                "the jackknife leaves out one of at least 3 groups, each of at least one draw")
    if np.shape(target) != samples.shape[1:]:
        raise ValueError(f"target must have the shape of one draw, {samples.shape[1:]}, got {np.shape(target)}")
    size = samples.shape[0] // groups
    d = (samples[: groups * size].reshape(groups, size, -1).mean(1) - np.ravel(target))
    total = d.sum(0)
    squares = np.einsum("gi,gi->g", d, d)

    def cross(tot: np.ndarray, sq: float, m: int) -> float:
        return float((tot @ tot - sq) / (m * (m - 1)))

    value = cross(total, squares.sum(), groups)
    left_out = np.array([cross(total - d[j], squares.sum() - squares[j], groups - 1) for j in range(groups)])
    error = np.sqrt((groups - 1) / groups * np.sum((left_out - left_out.mean()) ** 2))
    return Estimate(value, float(error), "cross-group products, jackknife")


def mc_tolerance(n_draws: int, n_comparisons: int = 1, false_alarm: float = 1e-3) -> float:
    """k such that ``|mean - truth| < k SE`` holds for all of a family with probability at least 1 - false_alarm.

    Each of ``n_comparisons`` independent comparisons is a mean of ``n_draws`` independent draws whose standard
    error comes from the draws themselves, so (mean - truth) / SE is Student-t with n_draws - 1 degrees of freedom
    (for normal draws; close to it for means of many neurons). Bonferroni splits ``false_alarm`` over the family:
    k is the t quantile at 1 - false_alarm / (2 n_comparisons). Where an SE comes from a large sample
    (quadrature, many draws), pass a large ``n_draws``: k tends to the normal quantile.
    """
    if n_draws < 2:
        raise ValueError(f"a standard error needs at least 2 draws, got {n_draws}")
    if n_comparisons < 1:
        raise ValueError(f"n_comparisons must be >= 1, got {n_comparisons}")
    if not 0 < false_alarm < 1:
        raise ValueError(f"false_alarm is a probability in (0, 1), got {false_alarm}")
    return float(student_t.ppf(1 - false_alarm / (2 * n_comparisons), n_draws - 1))


def ks_normal(z: np.ndarray) -> tuple[float, float]:
    r"""The Kolmogorov-Smirnov statistic of ``z`` against the standard normal, with its p-value.

    :math:`D = \sup_x |F_n(x) - \Phi(x)|`, attained at a sample point: for the sorted :math:`z_{(i)}`,
    :math:`D = \max_i \max(i/n - \Phi(z_{(i)}), \Phi(z_{(i)}) - (i-1)/n)`; the p-value is the exact
    one-sample law of :math:`D` for ``n`` draws (scipy's ``kstwo``). A calibrated set of checks has
    z-scores that look standard normal; a set much narrower than that has overstated standard errors.
    """
    z = np.sort(np.asarray(z, dtype=float).ravel())
    n = z.size
    if n < 1 or not np.all(np.isfinite(z)):
        raise ValueError(f"the KS statistic needs at least one finite z-score, got {n} values")
    cdf = ndtr(z)
    ranks = np.arange(1, n + 1)
    statistic = float(max(np.max(ranks / n - cdf), np.max(cdf - (ranks - 1) / n)))
    return statistic, float(kstwo.sf(statistic, n))


#: The three verdicts on an empirical claim: its direction resolved, the paper's effect excluded, or neither.
VERDICTS = ("holds", "does not hold", "not resolved")
#: Independent networks per arm below which no claim is resolved, whatever its standard error says.
MIN_NETWORKS = 8
#: The family-wise error of the book's verdicts on training claims: the chance that noise alone decides some
#: verdict of a chapter's family.
FAMILY_ERROR = 0.05


@dataclass(frozen=True)
class Verdict:
    r"""A three-way verdict on a claim that two arms differ by the paper's ``effect`` (>= 0, in the claim's
    direction; 0 where the paper states a direction without a size), from the mean ``difference`` of ``networks``
    paired per-network differences and its standard error ``se``; ``k`` is the family's t quantile. The claim
    **holds** when :math:`\bar d - k\,SE > 0`, **does not hold** when :math:`\bar d + k\,SE < \text{effect}` (the
    paper's effect is excluded), and is **not resolved** otherwise. ``needed_se`` = effect / (2k) is the SE at which
    the interval :math:`\bar d \pm k\,SE` can no longer hold both 0 and the effect, so that every outcome resolves.
    With effect 0 the claim does not hold only where the opposite direction is resolved, and a difference too small
    to resolve stays not resolved at any SE."""

    verdict: str
    difference: float
    se: float
    k: float
    effect: float
    networks: int
    n_comparisons: int
    false_alarm: float

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.verdict != "not resolved" and self.networks < MIN_NETWORKS:
            raise ValueError(f"a claim is {self.verdict!r} only on at least {MIN_NETWORKS} networks per arm, "
                             f"got {self.networks}")

    @property
    def needed_se(self) -> float:
        """The standard error at which every outcome resolves: effect / (2k)."""
        return self.effect / (2 * self.k)

    @property
    def resolution(self) -> str:
        """One line: the difference with its SE and networks, the family's k, the paper's effect, the SE needed."""
        paper = (f"paper's effect {self.effect:.3g}, resolved at SE ≤ {self.needed_se:.2g}" if self.effect > 0
                 else "the paper gives a direction, no size")
        return (f"{self.difference:+.3g} ± {self.se:.2g} (SE, {self.networks} networks per arm), k = {self.k:.2f} "
                f"({self.n_comparisons} comparisons at {self.false_alarm:g} family-wise); {paper}")

    def negated(self) -> "Verdict":
        """The verdict on the opposite claim, "the arms differ by less than the effect": the paper's effect excluded
        holds it, a resolved difference refutes it."""
        swap = {"holds": "does not hold", "does not hold": "holds", "not resolved": "not resolved"}
        return Verdict(swap[self.verdict], self.difference, self.se, self.k, self.effect, self.networks,
                       self.n_comparisons, self.false_alarm)


def paired_verdict(differences: np.ndarray, effect: float, n_comparisons: int = 1,
                   false_alarm: float = FAMILY_ERROR) -> Verdict:
    r"""The :class:`Verdict` on a claim from per-network differences :math:`d_i = a_i - b_i` of its two arms, signed
    so that the claim predicts :math:`d > 0`, and the paper's ``effect`` (> 0, in the units of d; 0 where the paper
    states a direction without a size).

    Network i of both arms shares its seed (initial weights, minibatches) where the experiment allows; arms of
    independent networks paired by index are still a valid test, only a less sharp one. :math:`\bar d / SE` is
    Student-t with n - 1 degrees of freedom, and k (``mc_tolerance``) holds the family of ``n_comparisons``
    verdicts at ``false_alarm``. With fewer than ``MIN_NETWORKS`` networks per arm the verdict is "not
    resolved", whatever the numbers.
    """
    d = np.asarray(differences, dtype=float)
    if d.ndim != 1 or not np.all(np.isfinite(d)):
        raise ValueError(f"differences must be a 1-d array of finite per-network values, got shape {d.shape}"
                         + ("" if d.ndim != 1 else " with a non-finite value (a diverged network?)"))
    if not (np.isfinite(effect) and effect >= 0):
        raise ValueError(f"effect is the paper's effect size in the claim's direction, >= 0 (0: a direction without "
                         f"a size), got {effect}")
    mean, se = mean_and_se(d)
    k = mc_tolerance(d.size, n_comparisons, false_alarm)
    if d.size < MIN_NETWORKS:
        verdict = "not resolved"
    elif mean - k * se > 0:
        verdict = "holds"
    elif mean + k * se < effect:
        verdict = "does not hold"
    else:
        verdict = "not resolved"
    return Verdict(verdict, float(mean), float(se), k, float(effect), int(d.size), int(n_comparisons),
                   float(false_alarm))
