"""The size arguments of :mod:`bnsym.rank` (widths, depths, counts) and the skip strength gamma, checked.

Each is a whole number (:func:`bnsym.core.validation.check_whole_number`) bounded above where the cost grows with
it, so that a mistyped size is a ValueError naming it rather than hours of work or an out-of-memory error.
"""

from __future__ import annotations

from ..core.validation import check_range, check_whole_number

MAX_WIDTH = 4096  # d: every layer multiplies d x d matrices, O(d^3) per chain or product
MAX_LAYERS = 10**6  # depth and burn: one batched product per layer
MAX_DRAWS = 10**7  # chains, products, samples N and Monte Carlo draws: each holds its own d x d (or d x N) matrix
MAX_ENTRIES = 2**30  # float64 entries of the matrices held at once (8 GiB)


def check_width(width: object, minimum: int = 1) -> int:
    """d, the number of features (rows of H, the size of the factors)."""
    return check_whole_number(width, "width d", minimum, MAX_WIDTH, "every layer multiplies d x d matrices")


def check_layers(value: object, name: str, minimum: int = 1) -> int:
    """A number of layers (``depth``, ``burn``)."""
    return check_whole_number(value, name, minimum, MAX_LAYERS, "the chain runs one product per layer")


def check_draws(value: object, name: str, minimum: int = 2) -> int:
    """A number of chains, products, samples or draws; at least 2 where a standard error is taken across them."""
    why = "each holds its own matrix" + ("; a standard error needs 2" if minimum == 2 else "")
    return check_whole_number(value, name, minimum, MAX_DRAWS, why)


def check_memory(copies: int, rows: int, columns: int, names: str) -> None:
    """``copies`` matrices of rows x columns float64 entries must fit in MAX_ENTRIES; ``names`` the three sizes."""
    if copies * rows * columns > MAX_ENTRIES:
        raise ValueError(f"{names} = {copies} x {rows} x {columns} entries exceed {MAX_ENTRIES:.2g} (8 GiB of float64)")


def check_gamma(gamma: object) -> float:
    """gamma, the strength of the residual branch: > 0, or inf for no skip connection."""
    return check_range(gamma, "gamma", 0.0, open_low=True, infinite_ok=True,
                       why="the strength of the residual branch (inf: no skip connection)")
