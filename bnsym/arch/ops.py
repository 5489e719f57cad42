"""The per-neuron ops of :mod:`bnsym.arch.graph`: what one neuron's batch vector x in R^B goes through between two
Dense layers, each with its forward map on samples and its vector-Jacobian product (the tangent kernel will add
the Jacobian-vector product beside it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core.activations import Activation as Phi
from ..core.batchnorm import batch_norm


@dataclass(frozen=True)
class Elementwise:
    """x -> phi(x) coordinatewise."""

    phi: Phi

    def apply(self, x: np.ndarray) -> np.ndarray:
        return self.phi.numpy(x)

    def vjp(self, x: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
        """J^T g for samples x, y = phi(x) (..., B) and cotangents g (..., B, k)."""
        return self.phi.numpy_derivative(x)[..., None] * g


@dataclass(frozen=True)
class TrainBN:
    """x -> (x - mean x) / sqrt(var x + eps) over the batch (last axis), biased variance; a constant input (eps = 0)
    maps to 0, the eps -> 0+ limit. ``sizes``: the last axis holds several batches, each normalised on its own (one
    neuron's vector over two batches, for the kernels across batches)."""

    eps: float
    sizes: tuple[int, ...] | None = None

    def apply(self, x: np.ndarray) -> np.ndarray:
        out = batch_norm(torch.from_numpy(np.ascontiguousarray(x, dtype=float)), self.eps, self.sizes).numpy()
        return np.where(np.isfinite(out), out, 0.0)

    def vjp(self, x: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
        """J^T g with J = (G - y y^T / B) / s, s = sqrt(norm(G x)^2 / B + eps) (J is symmetric); 0 where s = 0; per
        batch (J block diagonal) with ``sizes``. x, y (..., B), g (..., B, k)."""
        if self.sizes is not None:
            cuts = np.cumsum(self.sizes)[:-1]
            parts = zip(np.split(x, cuts, -1), np.split(y, cuts, -1), np.split(g, cuts, -2))
            return np.concatenate([TrainBN(self.eps).vjp(*part) for part in parts], -2)
        centred = x - x.mean(-1, keepdims=True)
        s = np.sqrt(np.mean(centred * centred, -1, keepdims=True) + self.eps)[..., None]
        inner = np.mean(y[..., None] * g, -2, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (g - g.mean(-2, keepdims=True) - y[..., None] * inner) / s
        return np.where(s > 0, out, 0.0)


@dataclass(frozen=True, eq=False)
class Affine:
    """x_a -> (x_a - shift_a) / scale_a with constants (R, B): LayerNorm (``centred``: shift = the mean) and eval-mode
    BatchNorm at infinite width. scale = inf maps to 0 (eps = 0 and a zero variance, the eps -> 0+ limit)."""

    shift: np.ndarray
    scale: np.ndarray
    centred: bool

    def apply(self, x: np.ndarray) -> np.ndarray:
        return (x - self.shift[:, None, :]) / self.scale[:, None, :]

    def vjp(self, x: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
        return g / self.scale[:, None, :, None]


Op = Elementwise | TrainBN | Affine
