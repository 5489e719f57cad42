"""Torch Monte Carlo for Bjorck et al. (2018): Gaussian products, minibatch noise, residual nets at initialisation.

The digit ResNet is :mod:`bnsym.sim.digit_resnet` (``init_resnets`` and ``resnet_logits`` are importable from
here too) and its training :mod:`bnsym.train.bjorck`.

Everything is batched: many products, draws or networks in one tensor op (float64 for theory checks, float32
for training), on :func:`~bnsym.core.device.default_device`. Residual networks are fully connected ResNet-v1
blocks, x' = ReLU(x + W_2 ReLU(W_1 x)) or, with batch norm, x' = ReLU(x + BN(W_2 ReLU(BN(W_1 x)))), with Xavier
normal weights and BN without affine parameters (gamma = 1, beta = 0): :func:`~bnsym.core.batchnorm.batch_norm`
over the batch axis -2 of the rows (..., B, n); :func:`simulate_residual` runs them as a description
(:func:`residual_description`) through the twin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core import batchnorm
from ..core.device import Normals, configure_torch, default_device, generator
from ..core.layers import Activation, BatchNorm, Dense, Residual, Serial, serial
from .arch import torch_network
from .digit_resnet import init_resnets, resnet_logits
from .networks import chunk_budget

__all__ = ["ResidualRun", "gaussian_factors", "init_resnets", "minibatch_noise", "residual_block",
           "residual_description", "resnet_logits", "simulate_residual", "squared_singular_values"]


def gaussian_factors(n_networks: int, m: int, n: int, seed: int, device=None) -> torch.Tensor:
    """(n_networks, M, N, N) independent factors with i.i.d. N(0, 1/N) entries (float64): the layers of
    ``n_networks`` deep linear networks of depth M."""
    configure_torch()
    device = device or default_device()
    return torch.randn(n_networks, m, n, n, generator=generator(seed, device), device=device,
                       dtype=torch.float64) / n**0.5


def squared_singular_values(factors: torch.Tensor) -> torch.Tensor:
    """Eigenvalues of X X^T for X = X_1 ... X_M, factors (..., M, N, N); shape (..., N)."""
    product = factors[..., 0, :, :]
    for i in range(1, factors.shape[-3]):
        product = product @ factors[..., i, :, :]
    return torch.linalg.svdvals(product).square()


def minibatch_noise(per_example: torch.Tensor, batch: int, n_draws: int, replacement: bool, seed: int) -> np.ndarray:
    """||mean of a minibatch - full mean||^2 for ``n_draws`` random minibatches of per-example gradients (N, d)."""
    gen = generator(seed, per_example.device)
    n = per_example.shape[0]
    if replacement:
        index = torch.randint(n, (n_draws, batch), generator=gen, device=per_example.device)
    else:
        index = torch.rand(n_draws, n, generator=gen, device=per_example.device).argsort(dim=1)[:, :batch]
    error = per_example[index].mean(1) - per_example.mean(0)
    return error.square().sum(-1).cpu().numpy()


def residual_block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, batch_norm: bool | torch.Tensor,
                   eps: float = 1e-5) -> torch.Tensor:
    """One block on rows x (..., B, n) with weights (..., n, n); ``batch_norm`` a bool or a mask that
    broadcasts against x (BN in some networks of the batch only)."""
    def norm(h):
        if torch.is_tensor(batch_norm):
            return torch.where(batch_norm, batchnorm.batch_norm(h, eps, dim=-2), h)
        return batchnorm.batch_norm(h, eps, dim=-2) if batch_norm else h

    h = torch.relu(norm(x @ w1.mT)) @ w2.mT
    return torch.relu(x + norm(h))


@dataclass(frozen=True)
class ResidualRun:
    """Per network (axis 0) and block l = 0..L (axis 1): q = mean x^2, and per-unit batch |mean| and variance
    averaged over units."""

    q: np.ndarray
    abs_mean: np.ndarray
    variance: np.ndarray


def residual_description(blocks: int, batch_norm: bool, eps: float = 1e-5) -> Serial:
    """Bjorck et al.'s fully connected ResNet-v1 as a description: ``blocks`` times [Residual(branch), relu] with
    branch [Dense, BN, relu, Dense, BN] (without BN: [Dense, relu, Dense]); Dense at weight_var 1 is Xavier normal on
    square layers (variance 2 / (n + n) = 1 / n), BN in train mode without affine map (:func:`residual_block`)."""
    norm = [BatchNorm(eps)] if batch_norm else []
    branch = [Dense(), *norm, Activation("relu"), Dense(), *norm]
    return serial([Residual(branch), Activation("relu")] * blocks)


def simulate_residual(width: int, batch: int, blocks: int, n_networks: int, batch_norm: bool, seed: int,
                      device=None) -> ResidualRun:
    """Fresh networks of :func:`residual_description` (the twin, :func:`bnsym.sim.arch.torch_network`) on Gaussian
    inputs x_0 ~ N(0, 1) of shape (B, n); statistics after every block. Networks are built ``chunk`` at a time,
    their weights within the simulators' memory budget."""
    configure_torch()
    device = torch.device(device or default_device())
    net = residual_description(blocks, batch_norm)
    chunk = max(1, chunk_budget(device) // (8 * 2 * max(blocks, 1) * width * width))
    x = Normals(seed, device)(n_networks, batch, width)
    stats = []
    for start in range(0, n_networks, chunk):
        part = x[start:start + chunk]
        with torch.no_grad():
            outputs = torch_network(net, width, len(part), seed=seed + 1 + start, device=device).layer_outputs(part)
        states = torch.stack([part, *outputs[1::2]], 1)  # (M, blocks + 1, B, n): the input and every block's output
        stats.append(torch.stack([states.square().mean((-2, -1)), states.mean(-2).abs().mean(-1),
                                  states.var(-2).mean(-1)]))
    q, abs_mean, variance = torch.cat(stats, 1).cpu().numpy()
    return ResidualRun(q, abs_mean, variance)
