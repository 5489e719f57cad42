"""Training small ReLU MLPs on scikit-learn's digits, many networks at once: Figs. 1 (right), 4 and 6 in miniature.

The networks of one call share depth and architecture and differ in learning rate and seed; their weights are
(n, d_out, d_in) tensors, so one batched matmul runs a layer of every network and the summed loss gives each
network its own gradient. Batch norm is train-mode with centring and no affine parameters (their initial
values, gain 1 and shift 0, are what the paper's analysis assumes). Rank pre-training is Algorithm 1: Adam
steps that maximise r(H_L) (eq. 4) of the last hidden layer on fresh minibatches, before plain SGD.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import torch

from ..core.device import generator
from .networks import _layer, batch_norm_rows


@cache
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 8 x 8 digits (1797 samples, 64 features, 10 classes): features standardised, (64, 1797)."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.as_tensor(data.data, dtype=torch.float32)
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    return x.T.contiguous(), torch.as_tensor(data.target)


@dataclass(frozen=True)
class TrainingRun:
    """Per-network results: ``loss`` (n, epochs + 1) full-batch training loss per epoch (index 0: before SGD; inf
    once a network has diverged),
    ``accuracy`` (n,) final training accuracy, ``rank_bound`` (n, epochs + 1) r(H_L) on the whole set."""

    loss: np.ndarray
    accuracy: np.ndarray
    rank_bound: np.ndarray
    lrs: np.ndarray


def _soft_rank_bound(h: torch.Tensor) -> torch.Tensor:
    """r(H) = Tr(M)^2 / ||M||_F^2 for H (n, d, N), differentiable (eq. 4)."""
    m = h @ h.mT / h.shape[-1]
    return m.diagonal(0, -2, -1).sum(-1).square() / m.square().sum((-2, -1))


def _forward(params: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor, bn: bool
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (n, 10, N), last hidden layer (n, d, N)) of every network on inputs x (64, N)."""
    h = x
    for w, b in params[:-1]:
        h = w @ h + b
        h = torch.relu(batch_norm_rows(h) if bn else h)
    w, b = params[-1]
    return w @ h + b, h


def train_digits(depth: int, bn: bool, lrs: list[float], epochs: int, width: int = 128, batch: int = 128,
                 seeds: int = 1, pretrain_steps: int = 0, init: str = "torch", n_samples: int | None = None,
                 seed: int = 0) -> TrainingRun:
    """SGD on the first ``n_samples`` digits for networks with ``depth`` hidden layers, one per (lr, seed) pair."""
    if depth < 1 or epochs < 0 or not lrs:
        raise ValueError(f"need depth >= 1, epochs >= 0 and some learning rates; got {depth}, {epochs}, {lrs}")
    x, y = digits()
    x, y = x[:, :n_samples], y[:n_samples]
    gen = generator(seed, "cpu")
    rates = torch.tensor(np.repeat(lrs, seeds), dtype=torch.float32)
    n = len(rates)
    sizes = [x.shape[0]] + [width] * depth + [10]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        w, b = _layer(gen, n, fan_in, fan_out, init if fan_out != 10 else "torch", torch.float32)
        params.append((w.requires_grad_(), (b if b is not None else torch.zeros(n, fan_out, 1)).requires_grad_()))
    flat = [p for pair in params for p in pair]
    if pretrain_steps:
        adam = torch.optim.Adam(flat, lr=1e-3)
        for _ in range(pretrain_steps):
            idx = torch.randperm(x.shape[1], generator=gen)[:64]
            adam.zero_grad()
            (-_soft_rank_bound(_forward(params, x[:, idx], bn)[1]).sum()).backward()
            adam.step()
    losses, ranks = [], []

    def record() -> torch.Tensor:
        with torch.no_grad():
            logits, h = _forward(params, x, bn)
            losses.append(torch.nn.functional.cross_entropy(logits, y.expand(n, -1), reduction="none").mean(-1))
            ranks.append(_soft_rank_bound(h.double()))
            return (logits.argmax(1) == y).float().mean(-1)

    accuracy = record()
    for _ in range(epochs):
        order = torch.randperm(x.shape[1], generator=gen)
        for start in range(0, x.shape[1] - batch + 1, batch):
            idx = order[start:start + batch]
            logits, _ = _forward(params, x[:, idx], bn)
            loss = torch.nn.functional.cross_entropy(logits, y[idx].expand(n, -1), reduction="none").mean(-1)
            grads = torch.autograd.grad(loss.sum(), flat)
            with torch.no_grad():
                for p, g in zip(flat, grads):
                    p -= rates.view(-1, *[1] * (p.ndim - 1)) * g  # a diverged network only spoils itself
        accuracy = record()
    return TrainingRun(torch.stack(losses, 1).nan_to_num(nan=np.inf).numpy(), accuracy.numpy(),
                       torch.stack(ranks, 1).numpy(), rates.numpy())
