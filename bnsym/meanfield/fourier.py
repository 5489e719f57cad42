"""The Fourier method (Yang et al. 2019, Thm 3, eq. (12); camera-ready Thm E.25) for any phi and any Sigma.

Batch norm with eps = 0 is x = phi(y / sqrt(s)), y = G h, s = abs(y)^2 / B. Inserting 1 = int ds delta(s - abs(y)^2/B)
and writing the delta function as a Fourier (Bromwich) integral, delta(s - X) = (1/2 pi) int dlambda e^(p (s - X)),
p = c + i lambda for any real c, turns the normalisation into a Gaussian integral (complete the square):

    V_{B_phi}(Sigma) = int_0^oo ds int dlambda/(2 pi) e^(p s) det(I + 2 p Sigma^G / B)^(-1/2) V_phi(C(p) / s),
    C(p) = Sigma^G (I + 2 p Sigma^G / B)^(-1),                                                          (eq. 12)

V_phi taken at a complex covariance by its Gaussian integral (analytic continuation, eq. 32). S3 prints
G (Sigma^-1 + 2 i lambda G / B) G for C(i lambda): the inverse is missing (the catalogue's R3).

Numerically we take one more step. For the pair (x_i, x_j) of BN coordinates the radial integral over s is
elementary, int_0^oo s e^(-s (w/2 - p)) ds = (w/2 - p)^(-2) with w = (a, b) C_2(p)^(-1) (a, b)^T, once the
contour sits at c < 0 (then Re(w/2 - p) >= -c > 0 and every integral converges absolutely). What is left is the
density of the pair as one integral over lambda of an elementary function,

    rho_ij(a, b) = (1/pi) Re int_0^oo dlambda det(I + 2 p Sigma^G/B)^(-1/2) / (2 pi sqrt(det C_2(p))) (w/2 - p)^(-2),

and V_ij = E[phi(x_i) phi(x_j)] integrates phi(a) phi(b) against it. At a BSB1 input the lambda integral is a
residue and rho is the uniform law on the BN sphere of Thm 4 (:func:`derive_fourier_density`); in general
rho / rho_uniform is smooth on the pair's ellipse, so the kink-splitting rules of :func:`~.sphere.expect_pair`
integrate phi(a) phi(b) rho / rho_uniform with spectral accuracy, and a double-exponential (exp-sinh) rule does
the lambda integral.
"""

from __future__ import annotations

import numpy as np

from ..core.activations import Activation
from ..core.derivation import Derivation
from ..core.estimate import Estimate
from ..core.geometry import centring
from ..core.lazy import lazy_module
from .sphere import expect_pair

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use

MAX_CONDITION = 1e3  # the largest eigenvalue ratio of Sigma^G on 1^perp the route resolves at its default rules


def derive_fourier_density() -> Derivation:
    """The Fourier method's steps, symbolically: complete the square, the radial integral, the BSB1 residue.

    The last step shows that at a BSB1 input (Sigma^G = mu G) the Fourier density of a pair of BN coordinates is
    the uniform law on the BN sphere of Thm 4, (B-3)/(2 pi sqrt(B (B-2))) (1 - u)^((B-5)/2) in the pair's plane.
    """
    from ..core.symbols import B, mu, p_f, s, u, w_q, y_a, zeta

    d = Derivation("The Fourier method (Thm 3): the density of two batch-norm coordinates")
    exponent = -y_a**2 / (2 * mu) - p_f * y_a**2 / B
    shifted = mu / (1 + 2 * p_f * mu / B)
    if sp.simplify(exponent + y_a**2 / (2 * shifted)) != 0:
        raise RuntimeError("completing the square failed")
    d.step("Along an eigendirection of $\\Sigma^G$ (eigenvalue $\\mu$) the Fourier factor $e^{-p y^2/B}$ "
           "completes the square: $y$ stays Gaussian, with the complex variance",
           sp.Eq(sp.Symbol("C(p)"), shifted), name="variance")
    p_real = sp.Symbol("p_r", positive=True)  # the Gaussian integral for real p > 0, continued analytically
    norm = sp.integrate(sp.exp(exponent.subs(p_f, p_real)), (y_a, -sp.oo, sp.oo)) / sp.sqrt(2 * sp.pi * mu)
    if sp.simplify(norm - sp.sqrt(shifted / mu).subs(p_f, p_real)) != 0:
        raise RuntimeError(f"the normalisation {norm} is not sqrt(C(p) / mu)")
    d.step("and the normalisation $\\int e^{-y^2/(2\\mu) - p y^2/B} dy / \\sqrt{2\\pi\\mu}$, the factor of "
           "$\\det(I + 2p\\Sigma^G/B)^{-1/2}$:",
           sp.Eq(sp.Symbol("D(p)"), sp.sqrt(shifted / mu)), name="determinant")
    radial = sp.integrate(s * sp.exp(-s * w_q), (s, 0, sp.oo))
    d.step("A pair $(a, b) = (y_i, y_j)/\\sqrt{s}$ has density $s\\,e^{-s w/2}/(2\\pi\\sqrt{\\det C_2})$ with "
           "$w = (a, b) C_2^{-1} (a, b)^T$; the radial integral (here with $w/2 - p \\to w$) is elementary:",
           sp.Eq(sp.Integral(s * sp.exp(-s * w_q), (s, 0, sp.oo)), radial), name="radial")
    # BSB1 input: C_2 = mu / zeta R, det(I + 2 p Sigma^G / B) = zeta^(B-1), w = B u zeta / mu, zeta = 1 + 2 p mu / B
    beta = 2 * mu / B
    det_r = (B - 2) / B  # det of the 2 x 2 block R of G
    p_of_zeta = (zeta - 1) / beta
    integrand = zeta ** (-(B - 1) / 2) * zeta / (2 * sp.pi * mu * sp.sqrt(det_r)) \
        / (B * u * zeta / (2 * mu) - p_of_zeta) ** 2 / beta  # dlambda/(2 pi) = dzeta / (2 pi i beta)
    simplified = sp.factor(sp.simplify(integrand))
    d.step("At a BSB1 input, $\\Sigma^G = \\mu G$, in the variable $\\zeta = 1 + 2p\\mu/B$ "
           "($u \\in [0, 1]$ the pair's squared radius on its ellipse), $\\rho$ is "
           "$\\frac{1}{2\\pi i}\\int d\\zeta$ of",
           sp.Eq(sp.Symbol("f(zeta)"), simplified), name="bsb1 integrand")
    pole = 1 / (1 - u)
    order = (B - 3) / 2
    # f = K zeta^(-order) / (1 - (1 - u) zeta)^2: closing the contour to the right picks -Res at the double pole
    coefficient = sp.simplify(simplified * zeta**order * (1 - (1 - u) * zeta) ** 2)
    if coefficient.has(zeta):
        raise RuntimeError(f"the BSB1 integrand is not K zeta^-k (1 - (1-u) zeta)^-2: {coefficient}")
    residue = coefficient * sp.diff(zeta ** (-order), zeta).subs(zeta, pole) / (1 - u) ** 2
    density = (B - 3) / (2 * sp.pi * sp.sqrt(B * (B - 2))) * (1 - u) ** ((B - 5) / 2)
    m = sp.Symbol("m", positive=True)  # B = 4 + m: the signs of B - 2, B - 3 and 1 - u known to SymPy
    if sp.simplify(sp.factor(sp.powsimp(-residue / density, force=True).subs(B, 4 + m))) != 1:
        raise RuntimeError(f"the residue {-residue} is not {density}")
    d.step("The only singularity right of the contour is a double pole at $\\zeta = 1/(1-u)$; its residue gives",
           sp.Eq(sp.Symbol("rho_BSB1"), density), name="bsb1 density")
    theta0_sin = sp.sqrt(1 - 1 / (B - 1) ** 2)
    uniform = (B - 3) / (2 * sp.pi * (B - 1) * theta0_sin) * (1 - u) ** ((B - 5) / 2)
    if sp.simplify(sp.factor(sp.powsimp(density / uniform, force=True).subs(B, 4 + m))) != 1:
        raise RuntimeError(f"the Fourier density at a BSB1 input is not Thm 4's uniform law {uniform}")
    d.step("which is the law of two coordinates uniform on the BN sphere (Thm 4), "
           "$\\frac{B-3}{2\\pi (B-1)\\sin\\theta_0}(1-u)^{(B-5)/2}$ with $\\cos\\theta_0 = -1/(B-1)$:",
           sp.Eq(sp.Symbol("rho_Thm4"), uniform))
    d.result = density
    return d


def _exp_sinh(step: float, span: float = 4.0, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the exp-sinh rule for int_0^oo: lambda = scale exp(pi/2 sinh t), trapezoid in t.

    ``span`` 4 cuts the rule at lambda = scale e^(-43) and scale e^(43): the cut-off pieces are below rounding
    (at span 3, scale e^(-15.7) times the integrand at 0 is lost, about 1e-7, unseen by the step-halving error).
    """
    t = np.arange(-span, span + step / 2, step)
    nodes = scale * np.exp(np.pi / 2 * np.sinh(t))
    return nodes, step * nodes * np.pi / 2 * np.cosh(t)


class _PairDensities:
    """rho_ij / rho_uniform for every pair i < j of BN coordinates, on the lambda rule of one step."""

    def __init__(self, lam: np.ndarray, vecs: np.ndarray, batch: int, step: float):
        self.batch = batch
        self.rows, self.cols = np.triu_indices(batch, 1)
        shift = -batch / 4  # c: half way to the nearest branch point p = -B / (2 max lam) (max lam = 1)
        freq, weight = _exp_sinh(step, scale=batch / 2)
        p = shift + 1j * freq  # (L,)
        factor = 1 + 2 * p[:, None] * lam[None, :] / batch  # (L, r)
        det_factor = np.prod(1 / np.sqrt(factor), axis=1)  # principal roots: each factor has Re > 0
        cov = lambda a, b: (vecs[a] * vecs[b]) @ (lam[:, None] / factor.T)  # noqa: E731  (P, L) entries of C(p)
        c11, c22, c12 = cov(self.rows, self.rows), cov(self.cols, self.cols), cov(self.rows, self.cols)
        det = c11 * c22 - c12**2  # det C_2(p): Re C_2^-1 > 0, so arg(det) in (-pi, pi) and the principal root fits
        self.p = p
        self.quad = np.stack([c22 / det, -2 * c12 / det, c11 / det], axis=-1)  # (P, L, 3): w = q . (a^2, ab, b^2)
        self.amplitude = weight * det_factor / (2 * np.pi * np.sqrt(det)) / np.pi  # (P, L)
        self.uniform = (batch - 3) / (2 * np.pi * np.sqrt(batch * (batch - 2)))

    def ratio(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(P, *shape): rho_ij(a, b) / rho_uniform(a, b) at points (a, b) of the pair's ellipse."""
        n = self.batch
        u = np.clip(((n - 1) * (a * a + b * b) + 2 * a * b) / (n * (n - 2)), 0.0, 1.0)
        monomials = np.stack([a.ravel() ** 2, a.ravel() * b.ravel(), b.ravel() ** 2])  # (3, points)
        total = np.zeros((self.rows.size, a.size))
        for k in range(self.p.size):  # one lambda node at a time, in place: (P, points) complex arrays
            z = self.quad[:, k] @ monomials
            z *= 0.5
            z -= self.p[k]
            z *= z
            total += np.divide(self.amplitude[:, k, None], z, out=z).real
        return total.reshape(self.rows.size, *a.shape) / (self.uniform * (1 - u) ** ((n - 5) / 2))


def _kernel(phi: Activation, densities: _PairDensities, n: int) -> np.ndarray:
    """V_{B_phi} from the pair densities with n nodes per piece of :func:`~.sphere.expect_pair`."""
    batch, rows, cols = densities.batch, densities.rows, densities.cols

    def integrands(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ratio = densities.ratio(a, b)
        fa, fb = phi.numpy(a), phi.numpy(b)
        return np.concatenate([fa * fb * ratio, fa * fa * ratio, fb * fb * ratio])

    moments = np.asarray(expect_pair(integrands, batch, phi.kinks, n)).reshape(3, rows.size)
    value = np.empty((batch, batch))
    value[rows, cols] = value[cols, rows] = moments[0]
    value[cols, cols] = moments[2]  # every j > 0 is the second member of pair (0, j)
    value[rows, rows] = moments[1]  # every i < B-1 is the first member of pair (i, B-1); the same law twice
    return value


def centred_spectrum(sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (largest 1) and eigenvectors of G Sigma G on 1^perp, where the Fourier route resolves it.

    ValueError for a rank below B - 1 or a condition number above ``MAX_CONDITION``: the pair densities are then
    too peaked (or degenerate) for the route's rules.
    """
    g = centring(sigma.shape[0])
    lam, vecs = np.linalg.eigh(g @ sigma @ g)
    lam, vecs = lam[1:], vecs[:, 1:]  # the null direction 1 of G has the smallest eigenvalue, 0
    if not lam[0] > lam[-1] / MAX_CONDITION:
        condition = lam[-1] / lam[0] if lam[0] > 0 else np.inf
        raise ValueError(f"method 'fourier' needs G Sigma G of full rank B - 1 with condition number at most "
                         f"{MAX_CONDITION:g} on 1^perp (got {condition:.3g}); use 'qmc' "
                         "(or 'laplace' for positive-homogeneous phi)")
    return lam / lam[-1], vecs  # eps = 0: batch norm is scale invariant


def bn_kernel_fourier(phi: Activation, sigma: np.ndarray, n: int = 24, step: float = 0.125) -> Estimate:
    """V_{B_phi}(Sigma) by the Fourier method (eq. 12): any phi, eps = 0, Sigma as :func:`centred_spectrum` takes.

    The value uses 2n nodes per smooth piece of the pair's ellipse and lambda-step step/2; the error estimate is
    its difference from n nodes and step ``step``.
    """
    batch = sigma.shape[0]
    lam, vecs = centred_spectrum(sigma)
    coarse = _kernel(phi, _PairDensities(lam, vecs, batch, step), n)
    fine = _kernel(phi, _PairDensities(lam, vecs, batch, step / 2), 2 * n)
    return Estimate(fine, np.abs(fine - coarse), "fourier")
