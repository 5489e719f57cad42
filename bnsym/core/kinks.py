"""The kinks of an activation a user brings: where phi or phi' is not smooth, so that the quadratures split there.

The spherical and radial rules are spectrally accurate on each smooth piece of phi, but only algebraically across a
kink: relu passed as a formula, with no kink known, gave lambda_G at B = 4 0.5 % off with an error estimate 60 times
too small. Two ways to find them:

* **A SymPy expression** (:func:`symbolic_kinks`): the real zeros of every switching function, a - b of
  ``Max(a, b)``/``Min``, u of ``Abs(u)``, ``sign(u)``, ``Heaviside(u)``, lhs - rhs of a ``Piecewise`` condition
  (by ``solveset``; None where they are not a finite set, and the numeric scan is used instead).
* **A callable** (:func:`numeric_kinks`): on a grid of spacing ``SCAN_STEP`` over |z| <= ``SCAN_REACH``, a cell where
  phi, phi' or phi'' changes by 1.2 times more than in either cell two away (a smooth function changes alike in
  nearby cells) is bisected, keeping the half that changes more, down to float64 resolution (phi'', a difference,
  to ``CURVATURE_RESOLUTION``, then refined); it holds a kink where the change there does not vanish like the
  cell's width (a smooth bump as steep as tanh(1e4 z) does).

:func:`kink_power` then reads how phi behaves at each: 0 where it jumps, below 1 where phi' is unbounded
(relu^0.5: E[phi'^2] is infinite for a power <= 1/2), else 1. A kink where phi, phi' and phi'' are continuous
(relu^alpha with alpha > 2) is not looked for: the quadratures converge fast there anyway, and their
n-versus-2n error estimate covers what is left.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .lazy import lazy_module

sp = lazy_module("sympy")

SCAN_REACH = 40.0  # |z| scanned: the BN coordinates and N(0, 1) put below e^-800 of their mass beyond it
SCAN_STEP = 1 / 256
CORE_REACH = 10.0  # the BN coordinates and N(0, 1) put below 1e-22 of their mass beyond it
CURVATURE_RESOLUTION = 1e-4  # a jump of phi'' is first located to this, on a difference of phi'
MAX_KINKS = 32  # more in the scanned range (a staircase, torch.round) is refused: the rules cannot split at each
STEP_FUNCTIONS = ("floor", "ceiling", "frac", "round")

Function = Callable[[np.ndarray], np.ndarray]


def switching_functions() -> tuple[type, ...]:
    """The SymPy functions that switch between pieces (SymPy is imported on first use)."""
    return sp.Max, sp.Min, sp.Abs, sp.sign, sp.Heaviside, sp.Piecewise


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
    """Points in [-SCAN_REACH, SCAN_REACH] where phi (``value``), phi' (``slope``) or phi'' jumps (module docstring).

    ``slope`` may be a finite difference, smooth at scales below its step: then pass a ``resolution`` well above the
    step, to which the kinks are located, and its rounding ``noise`` relative to it; phi'' is not scanned then. Else
    phi'' is a central difference of phi', so a jump of phi'' (ELU, softsign) is found to
    ``CURVATURE_RESOLUTION`` and then to about 1e-9 where the quadratics through phi' on either side cross.
    """
    # the rounding of a difference of phi is relative to phi there, that of an exact phi or phi' to its size
    kinks = distinct(_scan(value, resolution, noise) + _scan(slope, resolution, noise, value if resolution else None))
    if resolution:  # phi' is a difference already: a difference of it would be rounding noise
        return _at_most(kinks, name)

    def step(t):
        return 1e-5 * np.maximum(1.0, np.abs(t))

    def curvature(t):
        return (slope(t + step(t)) - slope(t - step(t))) / (2 * step(t))

    def rounding(t):  # of the difference: 1e-16 (|phi'| + |phi|) / step (1 - tanh^2 cancels), with a margin of 1e7
        return (np.abs(slope(t)) + np.abs(value(t))) / step(t)

    smoother = [refined_corner(slope, k, within=2 * CURVATURE_RESOLUTION)
                for k in distinct(_scan(curvature, CURVATURE_RESOLUTION, 1e-9, rounding), 2 * CURVATURE_RESOLUTION)
                if min((abs(k - j) for j in kinks), default=np.inf) > 2 * CURVATURE_RESOLUTION]
    return _at_most(distinct([*kinks, *smoother]), name)


def _at_most(kinks: tuple[float, ...], name: str) -> tuple[float, ...]:
    if len(kinks) > MAX_KINKS:
        raise ValueError(f"activation {name} has {len(kinks)} kinks or jumps in [-{SCAN_REACH:g}, {SCAN_REACH:g}], "
                         f"more than {MAX_KINKS} (a staircase or a fast oscillation): the quadratures cannot split at "
                         "each")
    return kinks


def _scan(f: Function, resolution: float, noise: float, scale: Function | None = None) -> list[float]:
    """The points where f jumps (or is not finite at one grid point: phi' of relu^0.5 at 0), located to
    ``resolution`` (0: to float64). Where f overflows over a stretch (cosh(20 z) beyond |z| = 35) nothing is
    looked for: the batch-norm sphere of that B does not reach there, or phi is refused as overflowing."""
    x = np.arange(-SCAN_REACH, SCAN_REACH + SCAN_STEP / 2, SCAN_STEP)
    halvings = 60 if resolution == 0 else int(np.ceil(np.log2(SCAN_STEP / resolution)))
    with np.errstate(all="ignore"):
        y = np.asarray(f(x), dtype=float)
        finite = np.isfinite(y)
        isolated = ~finite & np.concatenate([[False], finite[:-2] & finite[2:], [False]])
        change = np.where(finite[:-1] & finite[1:], np.abs(np.diff(np.where(finite, y, 0.0))), 0.0)
        local = np.maximum(np.abs(y[:-1]), np.abs(y[1:]))
        # two cells away: a jump at a grid point (or smeared by a finite difference) spreads over two cells
        neighbours = np.maximum(np.concatenate([[0.0, 0.0], change[:-2]]), np.concatenate([change[2:], [0.0, 0.0]]))
        cells = np.flatnonzero((change > 1.2 * neighbours) & (change > 1e-9 * local))
    # rounding: noise times the size of ``scale`` (f itself by default) at the cell, and at least noise times its
    # largest size over |z| <= CORE_REACH (cancellation: torch's GELU is 1e-15 off near z = -8, where it is 1e-14)
    scale = scale or f
    with np.errstate(all="ignore"):
        sizes = np.abs(np.asarray(scale(x[np.abs(x) <= CORE_REACH]), dtype=float))
    tiny = noise * max(np.max(sizes[np.isfinite(sizes)], initial=0.0), 1e-300)
    return [float(k) for k in x[isolated]] + _bisected(f, x[cells], x[cells + 1], halvings, noise, scale, tiny)


def _bisected(f: Function, lo: np.ndarray, hi: np.ndarray, halvings: int, noise: float, scale: Function,
              tiny: float) -> list[float]:
    """Halve each cell [lo, hi] ``halvings`` times, keeping the half where f changes more; a kink is where the
    change shrank by less than (width ratio)^0.9: a jump keeps it, |z - k|^p keeps (width ratio)^p, smooth f
    loses it like the width (or faster). A change below ``noise`` max |scale| at the ends, or ``tiny``, is rounding."""
    if not lo.size:
        return []
    start = np.abs(_at(f, hi) - _at(f, lo))
    for _ in range(halvings):  # (the 1e300 that _at puts for an inf or nan does not overflow a difference)
        mid = (lo + hi) / 2
        f_lo, f_mid, f_hi = _at(f, lo), _at(f, mid), _at(f, hi)
        left = np.abs(f_mid - f_lo) >= np.abs(f_hi - f_mid)
        lo, hi = np.where(left, lo, mid), np.where(left, mid, hi)
    f_lo, f_hi = _at(f, lo), _at(f, hi)
    end = np.abs(f_hi - f_lo)
    rounding = noise * np.maximum(np.abs(_at(scale, lo)), np.abs(_at(scale, hi))) + tiny
    kink = (end > rounding) & (end > 2.0 ** (-0.9 * halvings) * start)
    return [float(k) for k in ((lo + hi) / 2)[kink]]


def _at(f: Function, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        y = np.asarray(f(x), dtype=float)
    return np.where(np.isfinite(y), y, 1e300)


def distinct(points: list[float], apart: float = 1e-9) -> tuple[float, ...]:
    """Sorted, one per kink (a jump of phi is also seen in phi'; points closer than ``apart`` times max(1, |k|)
    are one), 0 where within 1e-12 of it."""
    out: list[float] = []
    for point in sorted(0.0 if abs(p) < 1e-12 else p for p in points):
        if not out or point - out[-1] > apart * max(1.0, abs(point)):
            out.append(point)
    return tuple(out)


def kink_power(value: Function, slope: Function, kinks: tuple[float, ...], nearest: float = 1e-9,
               ratio: float = 100.0) -> float:
    """The smallest p with phi ~ |z - k|^p on a side of a kink k: 0 where phi jumps, 1 - g where phi' grows like
    |z - k|^-g (read at distances ``nearest``, ``ratio`` and ``ratio``^2 times it, from a kink located to well within
    ``nearest``: the smaller of the two growths, and only above g = 0.05, so that a smooth phi' or a point near
    but not at a kink shows none), else 1 (a corner, or smoother: only whether p exceeds 1/2 matters)."""
    power = 1.0
    for k in kinks:
        scale = max(1.0, abs(k))
        distances = scale * nearest * np.array([1.0, ratio, ratio**2])
        points = np.concatenate([k - distances, k + distances])
        with np.errstate(all="ignore"):
            f, d = np.asarray(value(points), dtype=float), np.abs(np.asarray(slope(points), dtype=float))
        d = np.where(np.isnan(d), 0.0, d)  # 0 * inf in a discarded branch (Heaviside(z) z^(-1/4) at z < 0)
        if not (np.all(np.isfinite(f)) and np.all(np.isfinite(d))):
            return 0.0
        if nearest < 1e-6 and abs(f[3] - f[0]) > 10 * distances[0] * (d[0] + d[3]) + 1e-12 * np.max(np.abs(f)):
            return 0.0  # phi jumps at k: phi' holds a Dirac delta there
        for near, middle, far in (d[:3], d[3:]):
            if near > 0 and middle > 0 and far > 0:
                growth = min(np.log(near / middle), np.log(middle / far)) / np.log(ratio)
                if growth > 0.05:  # phi' grows towards k like |z - k|^-g
                    power = min(power, 1 - float(growth))
    return power


def refined_corner(value: Function, kink: float, within: float = 1e-4) -> float:
    """A kink located to ``within`` (a bisection on a finite difference) located again: a corner where the
    quadratics through phi at 3 points on each side cross (each checked on a 4th point), 1e-3 apart, then 1e-5
    apart around that crossing: to about 1e-15 |phi'''| / |jump of phi'| plus rounding. Anything else (a cusp
    such as |z|^0.75) is left where it was found."""
    for step in (1e-3, 1e-5):
        crossing = _crossing(value, kink, step * max(1.0, abs(kink)), within)
        if crossing is None:
            return kink
        kink, within = crossing, step / 10 * max(1.0, abs(kink))
    return kink


def _crossing(value: Function, kink: float, step: float, within: float) -> float | None:
    """Where the quadratics through phi at kink -+ step, 2 step, 3 step cross, if within ``within`` of kink."""
    offsets = step * np.arange(1, 5)
    with np.errstate(all="ignore"):
        sides = [(np.asarray(value(kink + sign * offsets), dtype=float), sign) for sign in (-1.0, 1.0)]
        fits = [np.polyfit(sign * offsets[:3], f[:3], 2) for f, sign in sides]
    size = max(max(np.max(np.abs(f)) for f, _ in sides), 1e-300)
    smooth = all(abs(np.polyval(fit, sign * offsets[3]) - f[3]) <= 1e-6 * size for fit, (f, sign) in zip(fits, sides))
    difference = fits[0] - fits[1]  # a quadratic in t = z - kink
    if not (smooth and abs(difference[1]) > 1e-6 * max(abs(fits[0][1]), abs(fits[1][1]), 1e-300)):
        return None
    real = [r.real for r in np.roots(difference) if abs(r.imag) <= 1e-12 * abs(r) and abs(r.real) <= within]
    return kink + float(min(real, key=abs)) if real else None


def homogeneous_degree(value: Function) -> float | None:
    """alpha where phi(z) = phi(1) z^alpha for z > 0 and phi(-1) |z|^alpha for z < 0 (a rho_alpha(z) - b rho_alpha(-z),
    so the closed forms apply), checked to 1e-12 relative at 400 points over 1e-4 <= |z| <= SCAN_REACH; else None."""
    with np.errstate(all="ignore"):
        ends = np.asarray(value(np.array([1.0, 2.0, -1.0, -2.0])), dtype=float)
        side = 0 if ends[0] != 0 else 2
        alpha = float(f"{np.log2(ends[side + 1] / ends[side]):.12g}")  # 1.5, not 1.4999999999999998
        if not (np.isfinite(alpha) and alpha > 0):
            return None
        r = np.geomspace(1e-4, SCAN_REACH, 200)
        z = np.concatenate([r, -r])
        expected = np.concatenate([ends[0] * r**alpha, ends[2] * r**alpha])
        got = np.asarray(value(z), dtype=float)
    scale = np.maximum(np.abs(expected), 1e-300)
    return alpha if np.all(np.abs(got - expected) <= 1e-12 * scale) else None
