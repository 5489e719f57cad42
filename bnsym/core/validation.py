"""Input checks shared by the Python API and the CLI: bad input raises ValueError saying what and why."""

from __future__ import annotations

import math
import numbers

import numpy as np

MIN_BATCH_SIZE = 4
WHY_MIN_BATCH = (
    "the mean field theory of this book needs B >= 4: for B = 2 batch norm outputs are +-(1, -1) and "
    "all gradients vanish, and for B = 3 the gradient moments diverge (E[1/r^2] is infinite for r^2 ~ chi^2 with 2 degrees of freedom)"
)


def check_batch_size(batch_size: object) -> int:
    """B must be an integer >= 4."""
    if isinstance(batch_size, bool):
        raise ValueError(f"batch size must be a whole number, got {batch_size!r}")
    if not isinstance(batch_size, numbers.Integral):
        if isinstance(batch_size, numbers.Real) and float(batch_size).is_integer():
            batch_size = int(batch_size)
        else:
            raise ValueError(f"batch size must be a whole number, got {batch_size!r}")
    batch_size = int(batch_size)
    if batch_size < 1:
        raise ValueError(f"batch size must be positive, got {batch_size}")
    if batch_size < MIN_BATCH_SIZE:
        raise ValueError(f"batch size {batch_size} is below {MIN_BATCH_SIZE}: {WHY_MIN_BATCH}")
    return batch_size


def check_eps(eps: object) -> float:
    """eps (the batch-norm stabiliser) must be a finite number >= 0."""
    try:
        if isinstance(eps, bool):
            raise TypeError
        value = float(eps)
    except (TypeError, ValueError):
        raise ValueError(f"eps must be a number, got {eps!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"eps must be a finite number >= 0 (it is added to a variance), got {eps!r}")
    return value


def check_covariance(sigma: object) -> np.ndarray:
    """Sigma must be a finite, symmetric, positive semi-definite B x B matrix with B >= 4 and G Sigma G != 0."""
    try:
        matrix = np.asarray(sigma, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"Sigma must be a numeric B x B matrix, got {type(sigma).__name__}") from None
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"Sigma must be a square B x B matrix, got shape {matrix.shape}")
    check_batch_size(matrix.shape[0])
    if not np.all(np.isfinite(matrix)):
        raise ValueError("Sigma has non-finite entries")
    scale = max(np.abs(matrix).max(), 1e-300)
    if np.abs(matrix - matrix.T).max() > 1e-10 * scale:
        raise ValueError("Sigma must be symmetric (it is a covariance matrix)")
    eigenvalues = np.linalg.eigvalsh((matrix + matrix.T) / 2)
    if eigenvalues.min() < -1e-10 * scale:
        raise ValueError(f"Sigma must be positive semi-definite (a covariance matrix); its smallest eigenvalue is {eigenvalues.min():.3g}")
    batch = matrix.shape[0]
    g = np.eye(batch) - 1.0 / batch
    if np.abs(g @ matrix @ g).max() <= 1e-12 * scale:
        raise ValueError("G Sigma G = 0: every input of the batch has the same pre-activation, so the batch variance is 0 and batch norm divides by zero")
    return (matrix + matrix.T) / 2
