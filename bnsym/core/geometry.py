"""The geometry of a batch that theory and simulator share (Yang et al. 2019, Sec. 2 and Thm 3.6).

* The centring G = I - 11^T / B projects onto the batch-mean-zero subspace 1^perp; batch norm sees
  the pre-activations only through y = G h.
* BSB1 matrices q ((1 - c) I + c 11^T): one diagonal value q, one off-diagonal value q c. The fixed
  point Sigma* of the forward recursion is one, and G Sigma G = mu G with mu = q (1 - c).
* The eigenspaces of an ultrasymmetric operator projected by G (Thm 3.6 / E.62) are spanned by
  G itself (R G), by G diag(v) G with v in 1^perp (L, multiplicity B - 1), and by the matrices with zero
  diagonal and zero row sums (M, multiplicity B (B - 3) / 2). :func:`eigen_directions` gives one
  unit-norm representative of each.
"""

from __future__ import annotations

import numpy as np

from .validation import check_batch_size


def centring(batch_size: int) -> np.ndarray:
    """G = I - 11^T / B, the projector onto the batch-mean-zero subspace."""
    return np.eye(batch_size) - np.full((batch_size, batch_size), 1.0 / batch_size)


def bsb1_matrix(batch_size: int, q: float, c: float) -> np.ndarray:
    """q ((1 - c) I + c 11^T): the B x B BSB1 matrix with diagonal q and off-diagonal q c."""
    return q * ((1 - c) * np.eye(batch_size) + c * np.ones((batch_size, batch_size)))


def bsb1_mu(sigma: np.ndarray, rtol: float = 1e-12) -> float | None:
    """mu if G Sigma G = mu G (to ``rtol`` relative to max |Sigma|), else None."""
    g = centring(sigma.shape[0])
    projected = g @ sigma @ g
    mu = np.trace(projected) / (sigma.shape[0] - 1)
    return float(mu) if np.abs(projected - mu * g).max() <= rtol * np.abs(sigma).max() else None


def m_direction(batch_size: int) -> np.ndarray:
    """Lam_M = E12 + E21 + E34 + E43 - E13 - E31 - E24 - E42: zero diagonal and zero row sums (needs B >= 4)."""
    lam = np.zeros((batch_size, batch_size))
    for (i, j), sign in {(0, 1): 1.0, (2, 3): 1.0, (0, 2): -1.0, (1, 3): -1.0}.items():
        lam[i, j] = lam[j, i] = sign
    return lam


def eigen_directions(batch_size: int) -> dict[str, np.ndarray]:
    """Unit-Frobenius-norm representatives of R G, L and M: G, G diag(1, -1, 0, ...) G and Lam_M."""
    batch_size = check_batch_size(batch_size)
    g = centring(batch_size)
    d = np.zeros(batch_size)
    d[:2] = (1.0, -1.0)
    raw = {"G": g, "L": g @ np.diag(d) @ g, "M": m_direction(batch_size)}
    return {key: value / np.linalg.norm(value) for key, value in raw.items()}
