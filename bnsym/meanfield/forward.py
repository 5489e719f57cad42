"""The BSB1 fixed point of the forward recursion Sigma^l = V_{B_phi}(Sigma^{l-1}) (Yang et al. 2019, Sec. 3).

The fixed point is Sigma* = q [(1 - c) I + c 11^T] (BSB1: one diagonal value, one off-diagonal value).

* Laplace route (positive-homogeneous phi of degree alpha, eps = 0; Thm F.8, Thm 5 for ReLU): every BSB1
  input maps in one step to K_{alpha,B} BSB1(J_phi(1), J_phi(-1/(B-1))), with
  K_{alpha,B} = c_alpha ((B-1)/2)^alpha Gamma((B-1)/2) / Gamma((B-1)/2 + alpha). For ReLU q* = 1/2,
  c* = J_1(-1/(B-1)).
* Spherical route (any phi; Thm 4 / F.5): q* = E[phi(x_1)^2], q* c* = E[phi(x_1) phi(x_2)] for two
  coordinates of a vector uniform on the sphere of radius sqrt(B) in 1^perp.
* eps > 0: the BN output of a BSB1 input with G Sigma G = mu G is kappa(r) x, x as above,
  kappa(r) = (1 + B eps / (mu r^2))^(-1/2), r ~ chi_{B-1} (:mod:`.radial`); the fixed point, which now depends
  on the scale, is in :mod:`.epsilon`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.activations import Activation
from ..core.derivation import Derivation
from ..core.estimate import Estimate
from ..core.geometry import bsb1_matrix, bsb1_mu
from ..core.kernels import lambdified
from ..core.lazy import lazy_module
from .kernels import arccos_kernel_symbolic, c_alpha_symbolic, phi_kernel
from .laplace import derive_bsb1_scale
from .radial import radial_image
from .sphere import expect_pair_with_error

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use


@dataclass(frozen=True)
class FixedPoint:
    """Sigma* = q ((1 - c) I + c 11^T) for batch size B; ``error`` bounds the quadrature error of q and q c.

    The closed form takes an array of B: q, c and batch_size are then arrays of one shape.
    """

    q: float | np.ndarray
    c: float | np.ndarray
    batch_size: int | np.ndarray
    eps: float = 0.0
    method: str = "closed_form"
    error: float = 0.0
    collapsed: bool = False  # eps past the collapse: mu* = 0 and Sigma* = phi(0)^2 11^T (not an error)
    sigma_w2: float = 1.0  # the weight variance; with eps > 0 only eps / sigma_w2 matters

    @property
    def mu(self) -> float:
        """mu* = q (1 - c), the coefficient of I: G Sigma* G = mu* G."""
        return self.q * (1 - self.c)

    def estimates(self) -> dict[str, Estimate]:
        """{"q", "c", "mu"}: q*, c* and mu* as Estimates, with ``error`` (a bound on q* and q* c*) propagated.

        mu* = q* - q* c* errs by at most 2 error, c* = q* c* / q* by error (1 + abs(c*)) / (q* - error) (inf where
        error >= q*). Past the collapse c* = 1 and mu* = 0 by definition: their errors are 0.
        """
        if self.collapsed:
            c_error, mu_error = 0.0, 0.0
        else:
            q, spread = np.asarray(self.q, dtype=float), self.error * (1 + np.abs(np.asarray(self.c, dtype=float)))
            with np.errstate(divide="ignore", invalid="ignore"):
                c_error = np.where(q > self.error, spread / (q - self.error), np.inf)
            mu_error = 2 * self.error
        return {"q": Estimate(self.q, self.error, self.method), "c": Estimate(self.c, c_error, self.method),
                "mu": Estimate(self.mu, mu_error, self.method)}

    @property
    def matrix(self) -> np.ndarray:
        """The B x B matrix Sigma* (one batch size only)."""
        if np.ndim(self.batch_size):
            raise ValueError("Sigma* is one matrix per batch size, and this FixedPoint holds an array of B: "
                             "compute the fixed point for one B to get its matrix")
        return bsb1_matrix(self.batch_size, self.q, self.c)


@lambdified(modules="scipy")
def _bsb1_constant_kernel():
    """K_{alpha,B} lambdified from :func:`derive_homogeneous_fixed_point`.

    The ratio Gamma(x)/Gamma(x + alpha), x = (B-1)/2, is written as 1/(x)_alpha (rising factorial, scipy's
    ``poch``), which stays accurate at large B where log-Gamma differences cancel.
    """
    from ..core.symbols import B, alpha

    constant = derive_bsb1_constant().result
    x = (B - 1) / 2
    stable = sp.gammasimp(constant * sp.gamma(x + alpha) / sp.gamma(x)) / sp.rf(x, alpha)
    return (alpha, B), stable


def bsb1_constant(phi: Activation, batch_size: np.ndarray) -> np.ndarray:
    """K_{alpha,B}, vectorised over B: V_{B_phi}(BSB1) = K_{alpha,B} BSB1(J_phi(1), J_phi(-1/(B-1))) (Thm F.8)."""
    return _bsb1_constant_kernel()(phi.degree, np.asarray(batch_size, dtype=float))


def fixed_point_closed_form(phi: Activation, batch_size: int | np.ndarray) -> FixedPoint:
    """Closed-form BSB1 fixed point for positive-homogeneous phi (Thm F.8, Cor F.9-F.11), vectorised over B.

    Exact up to float64 rounding, so ``error`` = 0.
    """
    k = bsb1_constant(phi, batch_size)
    q = k * phi_kernel(phi, 1.0)
    qc = k * phi_kernel(phi, -1.0 / (np.asarray(batch_size, dtype=float) - 1))
    if np.ndim(batch_size):
        return FixedPoint(q=q, c=qc / q, batch_size=np.asarray(batch_size), method="closed_form")
    return FixedPoint(q=float(q), c=float(qc / q), batch_size=int(batch_size), method="closed_form")


def _pair_moments(phi: Activation, batch_size: int, scale: float, n: int) -> np.ndarray:
    """(E[phi(s x_1)^2], E[phi(s x_1) phi(s x_2)], their two errors) on the BN sphere, output scaled by s."""
    q, e1 = expect_pair_with_error(lambda a, b: phi.numpy(a) ** 2, batch_size, phi.kinks, n, scale)
    qc, e2 = expect_pair_with_error(lambda a, b: phi.numpy(a) * phi.numpy(b), batch_size, phi.kinks, n, scale)
    return np.array([q, qc, e1, e2])


def bsb1_image(phi: Activation, batch_size: int, mu: float = 1.0, eps: float = 0.0, n: int = 64,
               n_radial: int = 64) -> dict[str, Estimate]:
    """{"q": q, "qc": q c}: V_{B_phi}(Sigma) = BSB1(q, q c) for any BSB1 Sigma with G Sigma G = mu G.

    For eps = 0 the result does not depend on mu. For eps > 0 it is the radial quadrature of the tabulated
    angular moments (:func:`~bnsym.meanfield.radial.radial_image`, ``n_radial`` Gauss nodes in r^2 ~ chi^2_{B-1});
    its error adds the change from n_radial / 2 nodes to the table's error.
    """
    if eps == 0:
        q, qc, e_q, e_qc = _pair_moments(phi, batch_size, 1.0, n)
    else:
        (q, qc), (e_q, e_qc) = radial_image(phi, batch_size, mu, eps, n_radial)
    return {"q": Estimate(q, e_q, "spherical"), "qc": Estimate(qc, e_qc, "spherical")}


def bn_kernel_spherical(phi: Activation, sigma: np.ndarray, eps: float = 0.0) -> Estimate:
    """V_{B_phi}(Sigma) for a BSB1-type Sigma (G Sigma G = mu G) by :func:`bsb1_image`, with entrywise errors."""
    mu = bsb1_mu(sigma)
    if mu is None:
        raise ValueError("the spherical route needs G Sigma G = mu G (a BSB1-type input)")
    batch = sigma.shape[0]
    image = bsb1_image(phi, batch, mu, eps)
    q, qc = image["q"], image["qc"]
    error = np.full((batch, batch), qc.error)
    np.fill_diagonal(error, q.error)
    return Estimate(bsb1_matrix(batch, q.value, qc.value / q.value), error, "spherical")


def _from_image(image: dict[str, Estimate], batch_size: int, eps: float) -> FixedPoint:
    """The FixedPoint of a BSB1 image BSB1(q, q c), its error the larger of the two."""
    q, qc = image["q"], image["qc"]
    return FixedPoint(q=q.value, c=qc.value / q.value, batch_size=batch_size, eps=eps, method="spherical",
                      error=max(q.error, qc.error))


def fixed_point_spherical(phi: Activation, batch_size: int, n: int = 64) -> FixedPoint:
    """BSB1 fixed point by spherical integration for any phi at eps = 0 (Thm 4 / F.5): one step from any BSB1 input.

    eps > 0: :func:`bnsym.meanfield.epsilon.fixed_point_radial`.
    """
    return _from_image(bsb1_image(phi, batch_size, n=n), batch_size, 0.0)


def default_fixed_point(phi: Activation, batch_size: int) -> FixedPoint:
    """Sigma* at eps = 0 by the most accurate route: closed form (Laplace) for positive-homogeneous phi,
    else spherical."""
    return fixed_point_closed_form(phi, batch_size) if phi.is_homogeneous else fixed_point_spherical(phi, batch_size)


def derive_bsb1_constant() -> Derivation:
    """K_{alpha,B} = c_alpha ((B-1)/B)^alpha times the Laplace factor of :func:`derive_bsb1_scale`.

    V_phi(G) has diagonal c_alpha g^alpha J_phi(1) and off-diagonal c_alpha g^alpha J_phi(-1/(B-1)),
    g = (B-1)/B the diagonal of G; the Laplace integral multiplies it by
    (B/2)^alpha Gamma((B-1)/2)/Gamma((B-1)/2+alpha).
    """
    from ..core.symbols import B, alpha

    d = Derivation("The constant of the BSB1 image")
    constant = sp.simplify(c_alpha_symbolic(alpha) * ((B - 1) / B) ** alpha * derive_bsb1_scale().result)
    d.step("$K_{\\alpha,B} = c_\\alpha\\,((B-1)/B)^\\alpha \\times$ the Laplace factor:",
           sp.Eq(sp.Symbol("K_{alpha,B}"), constant))
    d.result = constant
    return d


def derive_homogeneous_fixed_point() -> Derivation:
    """Thm F.8 and Thm 5 in SymPy: K_{alpha,B}, then ReLU's q* = 1/2 and c* = J_1(-1/(B-1))."""
    from ..core.symbols import J1, B, Jrho, alpha, c

    d = Derivation("The BSB1 fixed point of a positive-homogeneous phi")
    constant_derivation = derive_bsb1_constant()
    d.steps.extend(constant_derivation.steps)
    constant = constant_derivation.result
    d.step("Diagonal of $\\Sigma^*$ (Thm F.8):", sp.Eq(sp.Symbol("q^*"), constant * J1))
    d.step("Off-diagonal, with $\\rho = -1/(B-1)$ the correlation of two entries of $G$:",
           sp.Eq(sp.Symbol("q^* c^*"), constant * Jrho))
    relu_constant = sp.simplify(constant.subs(alpha, 1))
    d.step("ReLU ($\\alpha = 1$, $\\mathcal{J}_\\phi = \\mathcal{J}_1$, $\\mathcal{J}_1(1) = 1$): "
           "$K_{1,B}$ is the same for every $B$,",
           sp.Eq(sp.Symbol("q^*_relu"), relu_constant))
    c_relu = sp.simplify(arccos_kernel_symbolic(1).subs(c, -1 / (B - 1)))
    d.step("and $c^* = \\mathcal{J}_1(-1/(B-1))$:", sp.Eq(sp.Symbol("c^*_relu"), c_relu))
    d.step("As $B \\to \\infty$ the batch decorrelates to the i.i.d. Gaussian value $\\mathcal{J}_1(0)$:",
           sp.Eq(sp.Limit(sp.Symbol("c^*_relu"), B, sp.oo), sp.limit(c_relu, B, sp.oo)))
    d.result = c_relu
    return d
