"""Input checks shared by the Python API and the CLI: bad input raises ValueError saying what and why."""

from __future__ import annotations

import math
import numbers

import numpy as np

MIN_BATCH_SIZE = 4
WHY_MIN_BATCH = (
    "the mean field theory of this book needs B >= 4: for B = 2 batch norm outputs are +-(1, -1) and "
    "all gradients vanish, and for B = 3 the gradient moments diverge (E[1/r^2] is infinite for r^2 ~ chi^2 "
    "with 2 degrees of freedom)"
)


def check_batch_size(batch_size: object, array_ok: bool = False) -> int | np.ndarray:
    """B must be a whole number >= 4; with ``array_ok`` a numpy array (or list) of them is accepted too.

    Returns an int, or an int array of the same shape. Scalars and arrays share one set of checks and messages.
    """
    many = np.ndim(batch_size) > 0
    if many and not array_ok:
        raise ValueError(f"batch size must be one whole number here, got an array of shape {np.shape(batch_size)}")
    whole = (f"batch sizes must be whole numbers, got {batch_size!r}" if many
             else f"batch size must be a whole number, got {batch_size!r}")
    if isinstance(batch_size, np.ndarray) and batch_size.dtype.kind in "iuf" and batch_size.size:
        values = batch_size.astype(float).ravel()  # a numeric array: no per-item checks (1e5 B in microseconds)
    else:
        items = np.asarray(batch_size, dtype=object).ravel().tolist()
        if not items or any(isinstance(b, (bool, np.bool_)) or not isinstance(b, numbers.Real) for b in items):
            raise ValueError(whole)
        values = np.array(items, dtype=float)
    if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
        raise ValueError(whole)
    if values.min() < 1:
        raise ValueError(f"batch size must be positive, got {values.min():g}")
    if values.min() < MIN_BATCH_SIZE:
        raise ValueError(f"batch size {values.min():g} is below {MIN_BATCH_SIZE}: {WHY_MIN_BATCH}")
    return values.astype(int).reshape(np.shape(batch_size)) if many else int(values[0])


def check_eps(eps: object, array_ok: bool = False) -> float | np.ndarray:
    """eps (the batch-norm stabiliser) must be a finite number >= 0; with ``array_ok`` a float array of them too."""
    if array_ok and np.ndim(eps) > 0:
        values = [check_eps(item) for item in np.asarray(eps, dtype=object).ravel().tolist()]
        return np.array(values, dtype=float).reshape(np.shape(eps))
    try:
        if isinstance(eps, (bool, np.bool_)):
            raise TypeError
        value = float(eps)
    except (TypeError, ValueError):
        raise ValueError(f"eps must be a number, got {eps!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"eps must be a finite number >= 0 (it is added to a variance), got {eps!r}")
    return value


def check_variance(value: object, name: str, positive: bool) -> float:
    """A weight or bias variance (``name``): a finite number, > 0 if ``positive`` else >= 0."""
    try:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "> 0 (a zero weight variance cuts the network)" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite variance {bound}, got {value!r}")
    return number


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
        raise ValueError(f"Sigma must be positive semi-definite (a covariance matrix); "
                         f"its smallest eigenvalue is {eigenvalues.min():.3g}")
    batch = matrix.shape[0]
    g = np.eye(batch) - 1.0 / batch
    if np.abs(g @ matrix @ g).max() <= 1e-12 * scale:
        raise ValueError("G Sigma G = 0: every input of the batch has the same pre-activation, "
                         "so the batch variance is 0 and batch norm divides by zero")
    return (matrix + matrix.T) / 2


def check_joint_covariance(sigma: object, batch1: object) -> tuple[np.ndarray, int]:
    """A joint covariance of two batches: (..., B1 + B2, B1 + B2), each matrix symmetric PSD, B1, B2 >= 4.

    ``sigma`` may be a numpy array (or nested list) or a torch tensor; the checks run in float64 on the CPU and
    return it as a numpy array (the caller keeps its own tensor). Every stacked matrix must have G_k Sigma_kk G_k
    != 0 for both batches (batch norm divides by the batch's standard deviation).
    """
    try:
        matrix = np.asarray(sigma.detach().cpu() if hasattr(sigma, "detach") else sigma, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"Sigma must be a numeric (B1 + B2) x (B1 + B2) matrix, got {type(sigma).__name__}") from None
    if matrix.ndim < 2 or matrix.shape[-1] != matrix.shape[-2]:
        raise ValueError(f"Sigma must be a square (B1 + B2) x (B1 + B2) matrix or a stack (..., B1 + B2, B1 + B2) "
                         f"of them, got shape {matrix.shape}")
    if isinstance(batch1, (bool, np.bool_)) or not isinstance(batch1, numbers.Integral):
        raise ValueError(f"B1 (the size of the first batch) must be a whole number, got {batch1!r}")
    batch1 = int(batch1)
    batch2 = matrix.shape[-1] - batch1
    for name, size in (("B1", batch1), ("B2 = Sigma.shape[-1] - B1", batch2)):
        if size < MIN_BATCH_SIZE:
            raise ValueError(f"{name} = {size} is below {MIN_BATCH_SIZE} (Sigma has shape {matrix.shape}): "
                             f"{WHY_MIN_BATCH}")
    if not np.all(np.isfinite(matrix)):
        raise ValueError("Sigma has non-finite entries")
    scale = np.maximum(np.abs(matrix).max((-2, -1)), 1e-300)[..., None, None]
    if np.any(np.abs(matrix - np.swapaxes(matrix, -1, -2)) > 1e-10 * scale):
        raise ValueError("Sigma must be symmetric (it is a covariance matrix)")
    smallest = np.linalg.eigvalsh((matrix + np.swapaxes(matrix, -1, -2)) / 2)[..., 0]
    if np.any(smallest < -1e-10 * scale[..., 0, 0]):
        raise ValueError(f"Sigma must be positive semi-definite (a joint covariance of two batches); its smallest "
                         f"eigenvalue is {smallest.min():.3g}")
    for lo, hi in ((0, batch1), (batch1, matrix.shape[-1])):
        g = np.eye(hi - lo) - 1.0 / (hi - lo)
        projected = g @ matrix[..., lo:hi, lo:hi] @ g
        if np.any(np.abs(projected).max((-2, -1)) <= 1e-12 * scale[..., 0, 0]):
            raise ValueError(f"G Sigma G = 0 for the batch of rows {lo}..{hi - 1}: all its inputs have the same "
                             "pre-activation, so the batch variance is 0 and batch norm divides by zero")
    return matrix, batch1
