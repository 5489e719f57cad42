"""V_{B_phi}(Sigma) for any phi, any PSD Sigma and any eps >= 0 by randomised quasi-Monte Carlo.

The general-phi route of :func:`bnsym.bn_kernel` when neither the Laplace method (positive-homogeneous
phi, eps = 0) nor the spherical integral (BSB1 inputs) applies. With Sigma^G = G Sigma G = A A^T
(A = U sqrt(diag(lam)) over the r nonzero eigenvalues), y = G h = A g with g ~ N(0, I_r), and

    V_{B_phi}(Sigma) = E[phi(n_eps(A g)) phi(n_eps(A g))^T],   n_eps(y) = y / sqrt(|y|^2 / B + eps),

n_eps being batch norm on centred y: the simulators' own forward (:func:`bnsym.core.batchnorm.batch_norm`).

g is drawn as Phi^(-1) of a scrambled Sobol sequence; R independent scramblings give R unbiased
estimates, whose mean is returned with its standard error (std / sqrt(R)) as the error estimate.
For smooth phi the error falls roughly like 1/n (plain Monte Carlo: 1/sqrt(n)).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import block_diag
from scipy.special import ndtri

from ..core.activations import Activation
from ..core.batchnorm import batch_norm
from ..core.estimate import Estimate
from ..core.geometry import centring
from ..core.lazy import lazy_module

torch = lazy_module("torch")
stats = lazy_module("scipy.stats")


def bn_kernel_qmc(
    phi: Activation,
    sigma: np.ndarray,
    eps: float = 0.0,
    n_points: int = 2**14,
    n_replicates: int = 16,
    seed: int = 0,
    sizes: tuple[int, ...] | None = None,
) -> Estimate:
    """V_{B_phi}(Sigma) by randomised QMC, with the elementwise standard error as its error.

    ``sizes`` splits the coordinates into consecutive batches that batch norm normalises separately (several
    batches through one layer, :mod:`bnsym.meanfield.crossbatch`); default one batch.
    """
    sizes = sizes or (sigma.shape[0],)
    g = block_diag(*(centring(size) for size in sizes))
    lam, vecs = np.linalg.eigh(g @ sigma @ g)
    keep = lam > 1e-12 * lam.max()
    factor = vecs[:, keep] * np.sqrt(lam[keep])  # (B, r)
    rng = np.random.default_rng(seed)
    estimates = []
    for _ in range(n_replicates):
        points = stats.qmc.Sobol(d=factor.shape[1], scramble=True, seed=rng).random(n_points)
        y = ndtri(points) @ factor.T  # (n, B), rows ~ N(0, Sigma^G)
        # each batch of y is centred already: batch norm reduces to n_eps, no centring pass
        x = phi.numpy(batch_norm(torch.from_numpy(y), eps, sizes, centre=False).numpy())
        estimates.append(x.T @ x / n_points)
    estimates = np.stack(estimates)
    return Estimate(estimates.mean(axis=0), estimates.std(axis=0, ddof=1) / np.sqrt(n_replicates), "qmc")
