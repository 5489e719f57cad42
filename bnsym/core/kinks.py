"""The kinks of an activation a user brings: where phi or phi' is not smooth, so that the quadratures split there.

The spherical and radial rules are spectrally accurate on each smooth piece of phi, but only algebraically across a
kink: relu passed as a formula, with no kink known, gave lambda_G at B = 4 0.5 % off with an error estimate 60 times
too small. Two ways to find them:

* **A SymPy expression** (:func:`symbolic_kinks`): the real zeros of every switching function, a - b of
  ``Max(a, b)``/``Min``, u of ``Abs(u)``, ``sign(u)``, ``Heaviside(u)``, lhs - rhs of a ``Piecewise`` condition
  (by ``solveset``; None where they are not a finite set, and the numeric scan is used instead).
* **A callable** (:func:`numeric_kinks`): on a grid of spacing ``SCAN_STEP`` over |z| <= ``SCAN_REACH``, a cell where
  phi or phi' changes by 1.5 times more than in either cell two away (a smooth function changes alike in
  nearby cells) is bisected, keeping the half that changes more, down to float64 resolution; it holds a kink
  where the change there does not vanish like the cell's width (a smooth bump as steep as tanh(1e4 z) does).

:func:`kink_power` then reads how phi behaves at each: 0 where it jumps, below 1 where phi' is unbounded
(relu^0.5: E[phi'^2] is infinite for a power <= 1/2), else 1. A kink with a continuous phi' whose phi'' diverges
more slowly than |z - k|^-0.26 (relu^alpha with alpha >= 1.74) is not seen by the scan; the quadratures converge
there anyway, and their n-versus-2n error estimate covers what is left.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .lazy import lazy_module

sp = lazy_module("sympy")

SCAN_REACH = 40.0  # |z| scanned: the BN coordinates and N(0, 1) put below e^-800 of their mass beyond it
SCAN_STEP = 1 / 256
MAX_KINKS = 32  # more in the scanned range (a staircase, torch.round) is refused: the rules cannot split at each
STEP_FUNCTIONS = ("floor", "ceiling", "frac", "round")

Function = Callable[[np.ndarray], np.ndarray]


def symbolic_kinks(expr: sp.Expr, z: sp.Symbol) -> tuple[float, ...] | None:
    """The real points where a piece of ``expr`` switches, or None where they cannot be listed exactly."""
    switches: list[sp.Expr] = []
    for node in sp.preorder_traversal(expr):
        if isinstance(node, (sp.Max, sp.Min)):
            switches += [a - b for i, a in enumerate(node.args) for b in node.args[i + 1:]]
        elif isinstance(node, (sp.Abs, sp.sign, sp.Heaviside)):
            switches.append(node.args[0])
        elif isinstance(node, sp.Piecewise):
            for _, condition in node.args:
                relations = condition.atoms(sp.core.relational.Relational) if condition is not sp.true else ()
                switches += [r.lhs - r.rhs for r in relations]
    points: set[float] = set()
    for switch in switches:
        if z not in switch.free_symbols:
            continue
        zeros = sp.solveset(switch, z, sp.S.Reals)
        if not isinstance(zeros, sp.FiniteSet):
            return None
        points |= {float(point) for point in zeros}
    return tuple(sorted(points))


def numeric_kinks(value: Function, slope: Function, name: str, resolution: float = 0.0,
                  noise: float = 1e-13) -> tuple[float, ...]:
    """Points in [-SCAN_REACH, SCAN_REACH] where ``value`` or ``slope`` (phi, phi') is not smooth (module docstring).

    ``slope`` may be a finite difference, smooth at scales below its step: then pass a ``resolution`` well above the
    step, to which the kinks are located, and its relative rounding ``noise``.
    """
    x = np.arange(-SCAN_REACH, SCAN_REACH + SCAN_STEP / 2, SCAN_STEP)
    halvings = 60 if resolution == 0 else int(np.ceil(np.log2(SCAN_STEP / resolution)))
    found: list[float] = []
    for f in (value, slope):
        with np.errstate(all="ignore"):
            y = np.asarray(f(x), dtype=float)
        found += [float(k) for k in x[~np.isfinite(y)]]
        change = np.abs(np.diff(np.where(np.isfinite(y), y, 0.0)))
        size = max(np.max(np.abs(y[np.isfinite(y)]), initial=0.0), 1e-300)
        # two cells away: a jump at a grid point (or smeared by a finite difference) spreads over two cells
        neighbours = np.maximum(np.concatenate([[0.0, 0.0], change[:-2]]), np.concatenate([change[2:], [0.0, 0.0]]))
        cells = np.flatnonzero((change > 1.5 * neighbours) & (change > 1e-9 * size))
        if cells.size > MAX_KINKS:
            raise ValueError(f"activation {name} has more than {MAX_KINKS} kinks or jumps in [-{SCAN_REACH:g}, "
                             f"{SCAN_REACH:g}] (a staircase or a fast oscillation): the quadratures cannot split at "
                             "each")
        found += _bisected(f, x[cells], x[cells + 1], halvings, noise * size)
    return distinct(found)


def _bisected(f: Function, lo: np.ndarray, hi: np.ndarray, halvings: int, floor: float) -> list[float]:
    """Halve each cell [lo, hi] ``halvings`` times, keeping the half where f changes more; a kink is where the
    change shrank by less than (width ratio)^(3/4): a jump keeps it, |z - k|^p keeps (width ratio)^p, smooth f
    loses it like the width."""
    if not lo.size:
        return []
    start = np.abs(_at(f, hi) - _at(f, lo))
    for _ in range(halvings):
        mid = (lo + hi) / 2
        f_lo, f_mid, f_hi = _at(f, lo), _at(f, mid), _at(f, hi)
        left = np.abs(f_mid - f_lo) >= np.abs(f_hi - f_mid)
        lo, hi = np.where(left, lo, mid), np.where(left, mid, hi)
    end = np.abs(_at(f, hi) - _at(f, lo))
    kink = (end > floor) & (end > 2.0 ** (-0.75 * halvings) * start)
    return [float(k) for k in ((lo + hi) / 2)[kink]]


def _at(f: Function, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        y = np.asarray(f(x), dtype=float)
    return np.where(np.isfinite(y), y, 1e300)


def distinct(points: list[float]) -> tuple[float, ...]:
    """Sorted, one per kink (a jump of phi is also seen in phi'), 0 where within 1e-12 of it."""
    out: list[float] = []
    for point in sorted(0.0 if abs(p) < 1e-12 else p for p in points):
        if not out or point - out[-1] > 1e-9 * max(1.0, abs(point)):
            out.append(point)
    return tuple(out)


def kink_power(value: Function, slope: Function, kinks: tuple[float, ...]) -> float:
    """The smallest p with phi ~ |z - k|^p on a side of a kink k: 0 where phi jumps, 1 - g where phi' grows like
    |z - k|^-g (g > 0), else 1 (a corner, or smoother: only whether p exceeds 1/2 matters)."""
    power = 1.0
    for k in kinks:
        delta = 1e-9 * max(1.0, abs(k))
        sides = np.array([k - delta, k + delta, k - 1e4 * delta, k + 1e4 * delta])
        with np.errstate(all="ignore"):
            f, d = np.asarray(value(sides), dtype=float), np.abs(np.asarray(slope(sides), dtype=float))
        if not (np.all(np.isfinite(f)) and np.all(np.isfinite(d))):
            return 0.0
        if abs(f[1] - f[0]) > 10 * delta * (d[0] + d[1]) + 1e-12 * np.max(np.abs(f)):
            return 0.0  # phi jumps at k: phi' holds a Dirac delta there
        for near, far in ((d[0], d[2]), (d[1], d[3])):
            if near > 1.01 * far > 0:  # phi' grows towards k like |z - k|^-g
                power = min(power, 1 - float(np.log(near / far)) / np.log(1e4))
    return power


def refined_corner(value: Function, kink: float, step: float = 1e-3) -> float:
    """A corner located to about 1e-6 (a bisection on a finite-difference slope) located again to about
    step^3 |phi'''| / |jump of phi'|: where the quadratics through phi at 3 points on each side cross.

    Returns ``kink`` unchanged where phi' does not jump there (nothing to intersect)."""
    offsets = step * np.arange(1, 4) * max(1.0, abs(kink))
    left = np.polyfit(-offsets, np.asarray(value(kink - offsets), dtype=float), 2)
    right = np.polyfit(offsets, np.asarray(value(kink + offsets), dtype=float), 2)
    difference = left - right  # a quadratic in t = z - kink
    if abs(difference[1]) <= 1e-6 * max(abs(left[1]), abs(right[1]), 1e-300):
        return kink
    roots = np.roots(difference)
    real = roots[np.isreal(roots)].real
    if not real.size:
        return kink
    t = real[np.argmin(np.abs(real))]
    return kink + float(t) if abs(t) < offsets[0] else kink
