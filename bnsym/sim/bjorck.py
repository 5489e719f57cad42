"""Torch Monte Carlo for Bjorck et al. (2018): Gaussian products, minibatch noise, residual nets, digits training.

Everything is batched: many products, draws or networks in one tensor op (float64 for theory checks, float32
for training), on :func:`~bnsym.core.device.default_device`. Residual networks are fully connected ResNet-v1
blocks, x' = ReLU(x + W_2 ReLU(W_1 x)) or, with batch norm, x' = ReLU(x + BN(W_2 ReLU(BN(W_1 x)))), with Xavier
normal weights and BN without affine parameters (gamma = 1, beta = 0): :func:`~bnsym.core.batchnorm.batch_norm`
over the batch axis -2 of the rows (..., B, n).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core import batchnorm
from ..core.device import configure_torch, default_device, generator
from ..core.digits import Digits
from ..train.loop import Optimizer
from .bjorck_training import DIVERGED_LOSS, init_params


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


def simulate_residual(width: int, batch: int, blocks: int, n_networks: int, batch_norm: bool, seed: int,
                      device=None) -> ResidualRun:
    """Fresh Xavier networks on Gaussian inputs x_0 ~ N(0, 1) of shape (B, n); statistics after every block."""
    configure_torch()
    device = device or default_device()
    gen = generator(seed, device)
    x = torch.randn(n_networks, batch, width, generator=gen, device=device, dtype=torch.float64)
    stats = []
    for block in range(blocks + 1):
        if block:
            w = torch.randn(2, n_networks, width, width, generator=gen, device=device, dtype=torch.float64)
            x = residual_block(x, w[0] / width**0.5, w[1] / width**0.5, batch_norm)
        stats.append(torch.stack([x.square().mean((-2, -1)), x.mean(-2).abs().mean(-1), x.var(-2).mean(-1)]))
    q, abs_mean, variance = torch.stack(stats, -1).cpu().numpy()
    return ResidualRun(q, abs_mean, variance)


# --- digits (the split of bnsym.core.digits) ------------------------------------------------------------------


def init_resnets(configs: int, blocks: int, width: int, seed: int, device=None) -> list[torch.Tensor]:
    """Xavier-normal parameters of ``configs`` digit ResNets: W_in (64 -> n), blocks (n -> n), W_out, b_out; the
    first four of :func:`bnsym.sim.bjorck_training.init_params` (the one initialisation of the digit ResNet)."""
    device = device or default_device()
    return init_params(configs, blocks, width, generator(seed, device), device)[:4]


def resnet_logits(params: list[torch.Tensor], x: torch.Tensor, batch_norm: torch.Tensor,
                  record: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits (C, B, 10) of C networks on inputs x (B, 64) or (C, B, 64); ``batch_norm`` (C,) bool picks BN per
    network. With ``record``, the per-block mean x^2 of each network, (C,) each."""
    w_in, w_blocks, w_out, b_out = params
    h = x @ w_in.mT
    bn = batch_norm[:, None, None]
    moments = []
    for block in range(w_blocks.shape[1]):
        w1, w2 = w_blocks[:, block, 0], w_blocks[:, block, 1]
        h = residual_block(h, w1, w2, bn)
        if record:
            moments.append(h.square().mean((-2, -1)))
    return h @ w_out.mT + b_out[:, None, :], moments


def _loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per network, (C,)."""
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2), y.expand(logits.shape[0], -1),
                                             reduction="none").mean(1)


@dataclass(frozen=True)
class TrainingGrid:
    """Per configuration: learning rate, BN flag, seed, whether it diverged (loss > 10^3 or not finite),
    and final train/test accuracy (NaN if diverged)."""

    lr: np.ndarray
    batch_norm: np.ndarray
    seed: np.ndarray
    diverged: np.ndarray
    train_accuracy: np.ndarray
    test_accuracy: np.ndarray


def train_grid(data: Digits, blocks: int, width: int, lrs: np.ndarray, n_networks: int, steps: int,
               batch: int = 128, momentum: float = 0.9, weight_decay: float = 5e-4, seed: int = 0) -> TrainingGrid:
    """SGD (the paper's momentum and weight decay, :class:`bnsym.train.loop.Optimizer`; a diverged network is parked)
    on ``n_networks`` networks per (lr, BN or not), all at once as one
    batched net."""
    x_train, y_train, x_test, y_test = data.x_train, data.y_train, data.x_test, data.y_test
    device = x_train.device
    grid = np.array([(lr, bn, s) for bn in (False, True) for lr in lrs for s in range(n_networks)], dtype=object)
    lr_t = torch.as_tensor(grid[:, 0].astype(float), dtype=torch.float32, device=device)
    bn_t = torch.as_tensor(grid[:, 1].astype(bool), device=device)
    params = [p.requires_grad_() for p in init_resnets(len(grid), blocks, width, seed, device)]
    opt = Optimizer(params, "momentum", lr_t, momentum=momentum, weight_decay=weight_decay, limit=DIVERGED_LOSS)
    gen = generator(seed + 1, device)
    for _ in range(steps):
        index = torch.randint(len(y_train), (batch,), generator=gen, device=device)
        opt.step(_loss(resnet_logits(params, x_train[index], bn_t)[0], y_train[index]))
    alive = opt.alive
    with torch.no_grad():
        accuracy = [(resnet_logits(params, xs, bn_t)[0].argmax(-1) == ys).float().mean(1) for xs, ys in
                    ((x_train, y_train), (x_test, y_test))]
    nan = torch.tensor(float("nan"), device=device)
    train_acc, test_acc = (torch.where(alive, a, nan).cpu().numpy() for a in accuracy)
    return TrainingGrid(grid[:, 0].astype(float), grid[:, 1].astype(bool), grid[:, 2].astype(int),
                        ~alive.cpu().numpy(), train_acc, test_acc)


def loss_along_step(data: Digits, blocks: int, width: int, lr: float, batch_norm: bool, ts: np.ndarray,
                    batch: int = 128, seed: int = 0) -> tuple[np.ndarray, np.ndarray, float]:
    """Batch loss l(t) = L(theta - t lr g) and the per-block mean x^2 along the step, at initialisation.

    Returns (loss (T,), block moments (T, blocks), |g|^2) for one network; the first-order prediction is
    l(0) - t lr |g|^2.
    """
    x_train, y_train = data.x_train, data.y_train
    device = x_train.device
    index = torch.randint(len(y_train), (batch,), generator=generator(seed + 1, device), device=device)
    xb, yb = x_train[index], y_train[index]
    bn = torch.tensor([batch_norm], device=device)
    params = [p.requires_grad_() for p in init_resnets(1, blocks, width, seed, device)]
    grads = torch.autograd.grad(_loss(resnet_logits(params, xb, bn)[0], yb).sum(), params)
    t = torch.as_tensor(np.asarray(ts, dtype=np.float32), device=device)
    with torch.no_grad():
        path = [p.detach() - t.view((-1,) + (1,) * (p.ndim - 1)) * lr * g for p, g in zip(params, grads)]
        logits, moments = resnet_logits(path, xb, bn.expand(len(t)), record=True)
        losses = _loss(logits, yb)
    squared_norm = float(sum(g.square().sum() for g in grads))
    block_moments = torch.stack(moments, -1).cpu().numpy() if moments else np.zeros((len(t), 0))
    return losses.cpu().numpy(), block_moments, squared_norm


def loss_along_gradient(data: Digits, blocks: int, width: int, lr: dict[bool, float], distances: np.ndarray,
                        n_networks: int, probe_batches: tuple[int, ...] = (1, 5), batch: int = 128,
                        momentum: float = 0.9, weight_decay: float = 5e-4, seed: int = 0) -> dict:
    """Fig. 24: the minibatch loss L(theta - s g/|g|) along the gradient direction of that minibatch, at distances
    s, for the minibatches ``probe_batches`` (1 = at initialisation) of SGD with the paper's momentum and weight
    decay, ``n_networks`` networks without and with BN, each trained at its ``lr[batch_norm]``.

    Returns {(batch_norm, probe): losses (n_networks, S)}; the loss at s = 0 is the batch's loss itself.
    """
    x_train, y_train = data.x_train, data.y_train
    device = x_train.device
    flags = [False] * n_networks + [True] * n_networks
    bn_t = torch.tensor(flags, device=device)
    lr_t = torch.tensor([lr[f] for f in flags], dtype=torch.float32, device=device)
    params = [p.requires_grad_() for p in init_resnets(len(flags), blocks, width, seed, device)]
    opt = Optimizer(params, "momentum", lr_t, momentum=momentum, weight_decay=weight_decay)
    s = torch.as_tensor(np.asarray(distances, dtype=np.float32), device=device)
    gen = generator(seed + 1, device)
    found = {}
    for step in range(1, max(probe_batches) + 1):
        index = torch.randint(len(y_train), (batch,), generator=gen, device=device)
        grads = torch.autograd.grad(_loss(resnet_logits(params, x_train[index], bn_t)[0], y_train[index]).sum(),
                                    params)
        with torch.no_grad():
            if step in probe_batches:
                norm = torch.sqrt(sum(g.square().flatten(1).sum(1) for g in grads))  # (C,)
                path = [(p[:, None] - s.view((1, -1) + (1,) * (p.ndim - 1))
                         * (g / norm.view((-1,) + (1,) * (g.ndim - 1)))[:, None]).flatten(0, 1)
                        for p, g in zip(params, grads)]
                losses = _loss(resnet_logits(path, x_train[index], bn_t.repeat_interleave(len(s)))[0],
                               y_train[index]).view(len(flags), len(s)).cpu().numpy()
                for bn in (False, True):
                    found[bn, step] = losses[bn * n_networks:(bn + 1) * n_networks]
        opt.apply(grads)
    return found
