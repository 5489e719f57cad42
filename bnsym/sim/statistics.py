"""Estimators with standard errors for theory-vs-simulation comparisons.

Independent networks give independent estimates, so every standard error here is taken across
networks (never across layers of one network, which are correlated).
"""

from __future__ import annotations

import numpy as np


def mean_and_se(samples: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sample mean and its standard error std / sqrt(n) (ddof = 1) along ``axis``."""
    samples = np.asarray(samples, dtype=float)
    n = samples.shape[axis]
    return samples.mean(axis=axis), samples.std(axis=axis, ddof=1) / np.sqrt(n)


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
