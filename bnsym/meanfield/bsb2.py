"""BSB2 fixed points: a batch split into a dominant block and the rest (Yang et al. 2019, App. K, Defn K.1).

Beyond the transition alpha*(B) of relu^alpha the BSB1 point repels along L and a deep network's covariance
settles into a state where B' samples of the batch dominate. A BSB2 matrix is symmetric under permutations within
the dominant block (the first B' samples) and within the rest (B'' = B - B'), so it has five entries:

    d1 (dominant diagonal), o1 (dominant off-diagonal), d2, o2 (the rest), x (the cross block).

Its centred form G Sigma G has four eigenspaces (:func:`derive_bsb2_eigenvalues`): the vectors that sum to zero
within the dominant block (eigenvalue d1 - o1), within the rest (d2 - o2), the vector q = 1_1/B' - 1_2/B''
((B' B''/B)(r1 + r2 - 2x), r_k the mean row sum of block k) and the constant vector (0). The batch-norm map
depends on Sigma only through G Sigma G up to scale, so on BSB2 matrices it is a two-parameter dynamics (the
three eigenvalues up to scale); the permutation symmetry keeps its image BSB2. Its fixed point has no closed form
(App. K): :func:`bsb2_fixed_point` iterates the map (the kernel by :func:`bn_kernel_laplace`) from a BSB2 start.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ..core.activations import Activation
from ..core.derivation import Derivation
from ..core.lazy import lazy_module
from .laplace import bn_kernel_laplace

sp = lazy_module("sympy")

#: The five entries of a BSB2 matrix, in the order of :func:`bsb2_matrix`.
ENTRIES = ("d1", "o1", "d2", "o2", "x")


def bsb2_matrix(batch_size: int, dominant: int, entries: np.ndarray | tuple[float, ...]) -> np.ndarray:
    """The B x B BSB2 matrix with the first ``dominant`` samples as one block and ``entries`` = (d1, o1, d2, o2, x)."""
    d1, o1, d2, o2, x = entries
    sigma = np.full((batch_size, batch_size), float(x))
    sigma[:dominant, :dominant], sigma[dominant:, dominant:] = o1, o2
    diagonal = np.arange(batch_size)
    sigma[diagonal, diagonal] = np.where(diagonal < dominant, d1, d2)
    return sigma


def bsb2_entries(sigma: np.ndarray, dominant: int) -> np.ndarray:
    """(d1, o1, d2, o2, x): the block averages of ``sigma`` (..., B, B), the projection onto BSB2 matrices. A block
    of one sample has no off-diagonal entry; its diagonal stands in (its projection is then exact)."""
    diagonal = np.diagonal(sigma, axis1=-2, axis2=-1)

    def off(block: np.ndarray) -> np.ndarray:
        n = block.shape[-1]
        if n == 1:
            return block[..., 0, 0]
        return (block.sum((-2, -1)) - np.trace(block, axis1=-2, axis2=-1)) / (n * (n - 1))

    first, rest = slice(None, dominant), slice(dominant, None)
    return np.stack([diagonal[..., first].mean(-1), off(sigma[..., first, first]), diagonal[..., rest].mean(-1),
                     off(sigma[..., rest, rest]), sigma[..., first, rest].mean((-2, -1))], axis=-1)


@cache
def derive_bsb2_eigenvalues(batch_size: int = 8, dominant: int = 3) -> Derivation:
    """The eigen-decomposition of G Sigma G for a BSB2 matrix (App. K, Thm K.2), checked on a symbolic
    ``batch_size`` x ``batch_size`` matrix with a block of ``dominant`` samples."""
    d = Derivation("BSB2 matrices: the eigenvalues of G Sigma G")
    d1, o1, d2, o2, x = sp.symbols("d_1 o_1 d_2 o_2 x", real=True)
    b1, b2 = dominant, batch_size - dominant
    block = lambda i, j: 0 if i < b1 else 1  # noqa: E731

    def entry(i: int, j: int) -> sp.Expr:
        if block(i, 0) != block(j, 0):
            return x
        return (d1, o1, d2, o2)[2 * block(i, 0) + (i != j)]

    sigma = sp.Matrix(batch_size, batch_size, entry)
    g = sp.eye(batch_size) - sp.ones(batch_size, batch_size) / batch_size
    centred = g * sigma * g
    e = lambda k: sp.Matrix([1 if i == k else 0 for i in range(batch_size)])  # noqa: E731
    indicator_1 = sum((e(i) for i in range(b1)), sp.zeros(batch_size, 1))
    indicator_2 = sum((e(i) for i in range(b1, batch_size)), sp.zeros(batch_size, 1))
    r1, r2 = (d1 + (b1 - 1) * o1) / b1, (d2 + (b2 - 1) * o2) / b2
    spaces = (("a vector summing to zero in the dominant block, $e_1 - e_2$", e(0) - e(1), d1 - o1),
              ("a vector summing to zero in the rest, $e_{B'+1} - e_{B'+2}$", e(b1) - e(b1 + 1), d2 - o2),
              ("$q = 1_1/B' - 1_2/B''$", indicator_1 / b1 - indicator_2 / b2, sp.Rational(b1 * b2, batch_size)
               * (r1 + r2 - 2 * x)),
              ("the constant vector", sp.ones(batch_size, 1), sp.Integer(0)))
    for words, vector, value in spaces:
        residual = sp.simplify(centred * vector - value * vector)
        assert residual == sp.zeros(batch_size, 1), words
        d.step(f"B = {batch_size}, B' = {dominant}: $G\\Sigma G v = \\lambda v$ for {words}, with",
               sp.Eq(sp.Symbol("lambda"), sp.factor(value)))
    d.step("so the map, which sees $G\\Sigma G$ up to scale, has two parameters, e.g.",
           sp.Tuple((d1 - o1) / (r1 + r2 - 2 * x), (d2 - o2) / (r1 + r2 - 2 * x)))
    d.result = centred
    return d


@dataclass(frozen=True)
class BSB2Point:
    """A BSB2 fixed point normalised to mean diagonal 1: ``entries`` (d1, o1, d2, o2, x), ``error`` a bound on
    their distance to the limit (the last step times r/(1 - r), r the last ratio of steps), ``layers`` iterated."""

    batch_size: int
    dominant: int
    entries: np.ndarray
    error: float
    layers: int

    @property
    def matrix(self) -> np.ndarray:
        return bsb2_matrix(self.batch_size, self.dominant, self.entries)


def bsb2_fixed_point(phi: Activation, batch_size: int, dominant: int, start: tuple[float, ...] | None = None,
                     tol: float = 1e-5, max_layers: int = 200) -> BSB2Point:
    """Iterate Sigma -> V_{B_phi}(Sigma), projected onto BSB2 matrices and scaled to mean diagonal 1, from a BSB2
    start (default: the dominant samples at three times the variance of the rest, uncorrelated) until a step
    changes no entry by more than ``tol`` and the geometric tail of the steps is below ``tol``. The kernel's quadrature
    is converged to 1e-8 of its largest entry, far below ``tol``.

    ValueError when ``dominant`` is not in 1..B-1, phi is not positive-homogeneous (the Laplace kernel), or the
    iteration does not settle within ``max_layers`` (the dominant block is then not attracting from this start).
    """
    if not 1 <= dominant < batch_size:
        raise ValueError(f"the dominant block must have 1 to B - 1 = {batch_size - 1} samples, got {dominant}")
    if not phi.is_homogeneous:
        raise ValueError(f"the BSB2 iteration uses the Laplace kernel, which needs a positive-homogeneous phi, "
                         f"got {phi}")
    entries = np.array(start if start is not None else (3.0, 0.0, 1.0, 0.0, 0.0), dtype=float)
    steps = []
    for layer in range(1, max_layers + 1):
        kernel = bn_kernel_laplace(phi, bsb2_matrix(batch_size, dominant, entries), rtol=1e-8).value
        new = bsb2_entries(kernel / np.diagonal(kernel).mean(), dominant)
        steps.append(float(np.abs(new - entries).max()))
        entries = new
        if len(steps) > 1 and steps[-1] <= tol and steps[-1] < steps[-2]:
            ratio = steps[-1] / steps[-2]
            tail = steps[-1] * ratio / (1 - ratio)
            if tail <= tol:
                return BSB2Point(batch_size, dominant, entries, tail, layer)
    raise ValueError(f"the BSB2 iteration of {phi} at B = {batch_size}, B' = {dominant} did not settle within "
                     f"{max_layers} layers (last steps {steps[-3:]}): the block is not attracting from this start")
