"""The law of a batch-normed vector and integration against it (Yang et al. 2019, Sec. E.3, Thm 4 / F.5).

With eps = 0 and G Sigma G = mu G (any BSB1 Sigma with mu > 0), y = G h is an isotropic Gaussian in the
(B-1)-dimensional subspace 1^perp, so the batch-norm output x = sqrt(B) y / |y| is uniform on the sphere
of radius sqrt(B) in 1^perp. Its coordinates are x_a = sqrt(B-1) <e_a, v> with v uniform on the unit
sphere S^(B-2) and unit vectors e_a with <e_a, e_b> = -1/(B-1).

The projection p of v onto a fixed 2-plane has density (B-3)/(2 pi) (1 - |p|^2)^((B-5)/2) on the unit
disk. In polar coordinates p = R (cos psi, sin psi) in the plane of e_1, e_2 (angle theta_0 = arccos(-1/(B-1))
between them), two coordinates are

    x_1 = sqrt(B-1) R cos(psi),    x_2 = sqrt(B-1) R cos(psi - theta_0),

with u = R^2 distributed as ((B-3)/2) (1-u)^((B-5)/2) du on [0, 1] and psi uniform. :func:`expect_pair`
integrates f(x_1, x_2) over this law with Gauss rules that split at the kinks of f, so the rule is
spectrally accurate for piecewise-smooth phi.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..core.derivation import Derivation
from ..core.lazy import lazy_module
from ..core.quadrature import gauss_jacobi, gauss_legendre

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use


def derive_marginals() -> Derivation:
    """Normalising constants and moments of one and two coordinates of the BN output (Sec. E.3)."""
    from ..core.symbols import B, R, t

    d = Derivation("Marginals of the batch-norm output on its sphere")
    n = B - 1  # ambient dimension of the sphere S^(n-1) = S^(B-2)
    one = (1 - t**2) ** ((n - 3) / 2)
    z1 = sp.gammasimp(sp.hyperexpand(sp.integrate(one, (t, -1, 1), conds="none")))
    d.step("One coordinate $t = \\langle e_1, v\\rangle$ of $v$ uniform on $S^{B-2}$ "
           "has density $\\propto (1-t^2)^{(B-4)/2}$, with total mass",
           sp.Eq(sp.Integral(one, (t, -1, 1)), z1))
    second = sp.gammasimp(sp.hyperexpand(sp.integrate(t**2 * one, (t, -1, 1), conds="none")) / z1)
    second = sp.simplify(sp.expand_func(second))
    d.step("so $E[t^2]$ is", sp.Eq(sp.Symbol("E[t^2]"), second), name="E[t^2]")
    d.step("and each BN coordinate $x_a = \\sqrt{B-1}\\,t$ has unit second moment:",
           sp.Eq(sp.Symbol("E[x_a^2]"), sp.simplify((B - 1) * second)), name="E[x_a^2]")
    m = sp.Symbol("m")
    off = sp.solve(sp.Eq(1 + (B - 1) * m, 0), m)[0]
    d.step("Since $\\sum_b x_b = 0$, $0 = E[x_a \\sum_b x_b] = E[x_a^2] + (B-1) E[x_a x_b]$, so",
           sp.Eq(sp.Symbol("E[x_a x_b]"), off), name="E[x_a x_b]")
    two = 2 * sp.pi * R * (1 - R**2) ** ((n - 4) / 2)
    z2 = sp.simplify(sp.integrate(two, (R, 0, 1), conds="none"))
    d.step("Two coordinates: the projection onto a 2-plane has density $\\propto (1-|p|^2)^{(B-5)/2}$ "
           "on the unit disk, mass",
           sp.Eq(sp.Integral(two, (R, 0, 1)), z2))
    d.result = sp.simplify(1 / z2)
    d.step("so the normalised planar density is", sp.Eq(sp.Symbol("p_2"), d.result * (1 - R**2) ** ((n - 4) / 2)))
    return d


def pair_angle(batch_size: int) -> float:
    """theta_0 = arccos(-1/(B-1)), the angle between the directions of two BN coordinates."""
    return float(np.arccos(-1.0 / (batch_size - 1)))


def _gauss_on_piece(n: int, lo: float, hi: float, a: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes u and weights for int_lo^hi g(u) (1 - u)^a du.

    The last piece (hi = 1) uses Gauss-Jacobi in t = (u - lo)/(1 - lo) with weight (1 - t)^a, which
    resolves the concentration of (1 - u)^a near u = 0 at large B. Interior pieces carry a smooth
    weight and use Gauss-Legendre after u = lo + (hi - lo) s^2, which smooths the algebraic onset of
    a kink at u = lo.
    """
    if hi == 1.0:
        x, w = gauss_jacobi(n, a, 0.0)  # normalised weights for (1 - x)^a on [-1, 1]
        return lo + (1 - lo) * (x + 1) / 2, w * (1 - lo) ** (a + 1) / (a + 1)
    x, w = gauss_legendre(n)
    s_nodes, s_weights = (x + 1) / 2, w / 2
    u = lo + (hi - lo) * s_nodes**2
    return u, s_weights * 2 * (hi - lo) * s_nodes * (1 - u) ** a


def _radius_pieces(batch_size: int, kinks: tuple[float, ...], scale: float) -> list[float]:
    """Breakpoints of u = R^2 in [0, 1] where the integrand's pieces change: where a kink k of phi first
    reaches |x_a| = sqrt(B-1) R scale, and where the lines x_1 = k, x_2 = k' cross, at radius
    |x|^2 = (k^2 + k'^2 - 2 k k' cos theta_0) / sin^2 theta_0 in the plane of the pair."""
    theta0 = pair_angle(batch_size)
    radii2 = [k * k for k in kinks]
    radii2 += [(k * k + j * j - 2 * k * j * np.cos(theta0)) / np.sin(theta0) ** 2 for k in kinks for j in kinks]
    cuts = {0.0, 1.0}
    for radius2 in radii2:
        u_k = radius2 / ((batch_size - 1) * scale**2)
        if 0 < u_k < 1:
            cuts.add(float(u_k))
    return sorted(cuts)


def expect_pair(
    f: Callable[[np.ndarray, np.ndarray], np.ndarray],
    batch_size: int,
    kinks: tuple[float, ...] = (),
    n: int = 64,
    scale: float = 1.0,
) -> float | np.ndarray:
    """E[f(s x_1, s x_2)] for two coordinates x_1, x_2 of the batch-norm output (uniform on its sphere).

    ``f`` may return a stack of integrands, shape (m, *shape of its arguments): the result is then an array of m.

    ``kinks`` are the points where f is not smooth as a function of either argument; ``scale`` = s
    multiplies the output (eps > 0 shrinks it). Uses n radial and n angular nodes per smooth piece: Gauss
    rules in u = R^2 (:func:`_gauss_on_piece`), the trapezoidal rule on the full circle when f is smooth, and
    Gauss-Legendre on each arc between kinks otherwise.
    """
    theta0 = pair_angle(batch_size)
    a = (batch_size - 5) / 2
    cuts = _radius_pieces(batch_size, kinks, scale)
    if kinks:  # the last piece starts where a kink appears (sqrt(u - lo) onset): its first 2/(a + 1) gets s^2 too
        cuts.insert(-1, cuts[-2] + min((1 - cuts[-2]) / 2, 2 / (a + 1)))
    u_nodes, u_weights = [], []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        u, w = _gauss_on_piece(n, lo, hi, a)
        u_nodes.append(u)
        u_weights.append(w * (batch_size - 3) / 2)
    u = np.concatenate(u_nodes)
    w_u = np.concatenate(u_weights)
    radius = np.sqrt(u) * np.sqrt(batch_size - 1) * scale  # |x| scale of the pair at this node

    r = radius[:, None, None]
    if not kinks:  # a smooth periodic integrand: the trapezoidal rule on the circle converges geometrically
        psi = np.arange(n) * (2 * np.pi / n)
        values = f(r * np.cos(psi), r * np.cos(psi - theta0))
        total = np.sum(w_u[:, None, None] * values, axis=(-3, -2, -1)) / n
        return float(total) if np.ndim(total) == 0 else total
    # angular breakpoints: psi where x_1 or x_2 crosses a kink (clipped arccos gives harmless extras)
    breaks = [np.zeros_like(u), np.full_like(u, 2 * np.pi)]
    for k in kinks:
        angle = np.arccos(np.clip(np.divide(k, radius, out=np.zeros_like(radius), where=radius > 0), -1, 1))
        for phase in (0.0, theta0):
            breaks += [np.mod(phase + angle, 2 * np.pi), np.mod(phase - angle, 2 * np.pi)]
    breaks = np.sort(np.stack(breaks, axis=1), axis=1)  # (n_u, n_breaks)
    lo, width = breaks[:, :-1], np.diff(breaks, axis=1)
    x, w = gauss_legendre(n)
    psi = lo[..., None] + width[..., None] * (x + 1) / 2  # (n_u, arcs, n)
    w_psi = width[..., None] * w / 2 / (2 * np.pi)
    values = f(r * np.cos(psi), r * np.cos(psi - theta0))
    total = np.sum(w_u[:, None, None] * w_psi * values, axis=(-3, -2, -1))
    return float(total) if np.ndim(total) == 0 else total


def expect_pair_with_error(f, batch_size: int, kinks: tuple[float, ...] = (), n: int = 64,
                           scale: float = 1.0) -> tuple[float | np.ndarray, float | np.ndarray]:
    """:func:`expect_pair` with n and 2n nodes: (value at 2n, |difference|) as an error estimate."""
    coarse = expect_pair(f, batch_size, kinks, n, scale)
    fine = expect_pair(f, batch_size, kinks, 2 * n, scale)
    return fine, abs(fine - coarse)
