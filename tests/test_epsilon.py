"""Batch norm with epsilon, the tanh gain gamma and the relu shift beta (Yang et al. 2019, R16, R19, Fig 5)."""

from __future__ import annotations

import numpy as np

import bnsym
from bnsym.meanfield.backward import MAX_TRAINABLE_DEPTH_FACTOR


def test_max_trainable_depth_at_eps_zero():
    """16 xi, vectorised over B on the closed form, equal to 16 / log of the spherical quadrature's rate."""
    batch = np.array([8, 32, 128])
    depth = bnsym.max_trainable_depth("relu", batch)
    assert isinstance(depth, np.ndarray) and depth.shape == batch.shape
    spherical = [bnsym.gradient_rate("relu", int(b), method="spherical") for b in batch]
    np.testing.assert_allclose(depth, MAX_TRAINABLE_DEPTH_FACTOR / np.log(spherical), rtol=1e-9)
    for spec in ("tanh(gamma=0.5)", "relu(beta=2)"):
        value, error = bnsym.max_trainable_depth(spec, 16, with_error=True)
        rate = bnsym.gradient_rate(spec, 16, method="spherical")
        assert isinstance(value, float) and error >= 0
        np.testing.assert_allclose(value, MAX_TRAINABLE_DEPTH_FACTOR / np.log(rate), rtol=1e-8)
