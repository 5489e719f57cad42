"""Activation growth in residual networks at initialisation, with and without batch norm (Fig. 3 analogue).

Block (ResNet-v1, fully connected, width n -> infinity, Xavier weights of variance 1/n):

    no BN:  x' = ReLU(x + W_2 ReLU(W_1 x)),       with BN:  x' = ReLU(x + BN(W_2 ReLU(BN(W_1 x)))).

Given one unit's value x, the branch is Gaussian and independent of x in the mean-field limit: N(0, q/2) without
BN (q = E x^2: W_1 x ~ N(0, q), E ReLU^2 = q/2), and of variance 1 with BN. So one unit's law follows the
population recursion x_(l+1) = ReLU(x_l + sigma_l xi) (:func:`residual_growth`): without BN the second moment
grows geometrically (the per-block factor tends to a constant near 1.395), with BN it grows by about 1 per block.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp
from scipy.special import ndtr

from ..core.derivation import Derivation
from ..core.validation import check_finite_result, check_flag, check_range, check_whole_number

_GRID_POINTS = 1500
_GRID_END = 14.0  # the grid covers u = x / sqrt(q) in (0, 14]; the normalised law has a Gaussian-like tail
# each block convolves the grid's law with the branch Gaussian (a 1500 x 1500 kernel, about 20 ms of CPU), and the
# grid moves the per-block growth without BN by about 1e-6 a block: 500 blocks are 10 s and a drift of 5e-4
MAX_BLOCKS = 500
WHY_MAX_BLOCKS = ("each block convolves the law on a 1500-point grid (about 20 ms of CPU a block) and the grid's "
                  "discretisation moves the per-block growth by about 1e-6 a block; the growth settles within a few "
                  "dozen blocks (a factor about 1.395 per block without BN, an increment about 1 with BN)")


@cache
def derive_relu_shift_moment() -> Derivation:
    """E ReLU(x + sigma xi)^2 for a fixed x: the one-unit second moment after a block."""
    d = Derivation("Second moment of ReLU(x + sigma xi), xi ~ N(0, 1)")
    xi, xv = sp.Symbol("xi", real=True), sp.Symbol("x", real=True)
    sigma, c = sp.Symbol("sigma", positive=True), sp.Symbol("c", real=True)
    gauss = sp.exp(-xi**2 / 2) / sp.sqrt(2 * sp.pi)
    square = sp.Poly(sp.expand((xv + sigma * xi) ** 2), xi)
    d.step("ReLU(x + sigma xi)^2 is this polynomial in xi where xi > -x/sigma, and 0 elsewhere:",
           sp.Eq(sp.Symbol("(x + sigma xi)^2"), square.as_expr()))
    moment = sum(coefficient * sp.integrate(xi**power * gauss, (xi, -c, sp.oo)) for (power,), coefficient
                 in square.terms())
    moment = sp.expand(moment.subs(c, xv / sigma))
    d.step("Integrating over xi > -x/sigma:", sp.Eq(sp.Symbol("E ReLU(x + sigma xi)^2"), moment), name="moment")
    d.step("No BN: sigma^2 = q/2 with q = E x^2 (the branch W_2 ReLU(W_1 x) of a unit of second moment q);",
           sp.Eq(sp.Symbol("sigma^2"), sp.Symbol("q") / 2))
    d.step("with BN the branch is standardised:", sp.Eq(sp.Symbol("sigma^2"), 1))
    d.result = moment
    return d


@cache
def _moment_kernel():
    xv, sigma = sp.Symbol("x", real=True), sp.Symbol("sigma", positive=True)
    return sp.lambdify((xv, sigma), derive_relu_shift_moment()["moment"], "scipy", cse=True)


def residual_growth(blocks: int, batch_norm: bool = False, q0: float = 1.0) -> np.ndarray:
    """q_l = E x_l^2 for l = 0..blocks of the mean-field recursion, x_0 ~ N(0, q0) (no ReLU before block 1).

    The law of x_l / sqrt(q_l) (an atom at 0 plus a density) is carried on a grid in u = x / sqrt(q) with the
    trapezoidal rule; each block convolves it with the branch Gaussian, clips at 0 and rescales by the new q,
    which comes from the derived moment E ReLU(x + sigma xi)^2 integrated against the law.
    """
    blocks = check_whole_number(blocks, "blocks", 0, MAX_BLOCKS, WHY_MAX_BLOCKS)
    batch_norm = check_flag(batch_norm, "batch_norm")
    q0 = check_range(q0, "q0 (the input second moment)", 0.0, open_low=True)
    moment = _moment_kernel()
    u = np.linspace(0.0, _GRID_END, _GRID_POINTS)
    weights = np.full_like(u, u[1])
    weights[[0, -1]] /= 2
    q = [q0]
    if blocks == 0:
        return np.array(q)
    # block 1: x_0 + branch is N(0, q0 + sigma^2); after ReLU an atom 1/2 and a half-normal
    total = q0 * 1.5 if not batch_norm else q0 + 1.0
    q.append(total / 2)
    scale = np.sqrt(total / q[-1])  # std of the pre-ReLU Gaussian in units of sqrt(q_1)
    atom, density = 0.5, np.exp(-(u / scale) ** 2 / 2) / (np.sqrt(2 * np.pi) * scale)
    for _ in range(blocks - 1):
        sigma = np.sqrt(0.5) if not batch_norm else np.sqrt(1.0 / q[-1])  # branch std in units of sqrt(q)
        growth = np.sum(weights * density * moment(u, sigma)) + atom * sigma**2 / 2
        s = np.sqrt(growth)
        diff = s * u[:, None] - u[None, :]
        kernel = np.exp(-(diff / sigma) ** 2 / 2) / (np.sqrt(2 * np.pi) * sigma)
        new_density = s * (kernel @ (weights * density) + atom * np.exp(-(s * u / sigma) ** 2 / 2)
                           / (np.sqrt(2 * np.pi) * sigma))
        atom = np.sum(weights * density * ndtr(-u / sigma)) + atom / 2
        density = new_density
        q.append(q[-1] * growth)
    return check_finite_result(np.array(q), f"q_l for q0 = {q0:g} over these blocks")
