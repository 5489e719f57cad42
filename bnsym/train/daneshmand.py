"""Daneshmand et al.'s small ReLU MLPs (2020, :mod:`bnsym.sim.daneshmand_mlp`) trained on digits, Figs. 4-6 in
miniature: plain SGD on the one loop (:class:`bnsym.train.loop.Optimizer`), after Algorithm 1's rank pre-training
(Adam steps that maximise r(H_L), eq. 4, of the last hidden layer on fresh minibatches) if asked. Batch norm is
train-mode with or without centring and no affine parameters. The rank bound and the gradient alignment are passed
in by the caller (:mod:`bnsym.train.rank_training` passes :mod:`bnsym.rank`'s)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..core.device import generator
from ..core.digits import digits
from ..core.validation import (
    check_choice,
    check_draws,
    check_flag,
    check_layers,
    check_memory,
    check_real_array,
    check_seed,
    check_whole_number,
    check_width,
)
from ..sim.daneshmand_mlp import INITS, forward, init_layer
from .loop import Optimizer

RankBound = Callable[[torch.Tensor], torch.Tensor]
Alignment = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
MAX_EPOCHS = 10**5  # epochs and rank pre-training steps run one after another
MAX_LR = float(torch.finfo(torch.float32).max)  # a larger learning rate is not a float32 number
PRETRAIN_BATCH = 64  # samples per step of Algorithm 1's rank pre-training
PROBE = 128  # training digits on which the alignment of per-example gradients is measured


@dataclass(frozen=True)
class TrainingRun:
    """Per-network results: ``loss`` (n, epochs + 1) full-batch training loss per epoch (index 0: before SGD; inf
    once a network has diverged),
    ``accuracy`` (n,) final training accuracy, ``rank_bound`` (n, epochs + 1) r(H_L) on all the training digits used,
    ``test_loss`` and ``test_accuracy`` (n, epochs + 1) on the test digits (batch norm over the test set),
    ``alignment`` (n, epochs + 1, ...) the ``alignment`` function's values on the first ``PROBE`` training digits
    (NaN without one)."""

    loss: np.ndarray
    accuracy: np.ndarray
    rank_bound: np.ndarray
    lrs: np.ndarray
    test_loss: np.ndarray
    test_accuracy: np.ndarray
    alignment: np.ndarray


def train_digits(depth: int, bn: bool, lrs: list[float], epochs: int, *, rank_bound: RankBound, width: int = 128,
                 batch: int = 128, n_networks: int = 1, pretrain_steps: int = 0, init: str = "torch",
                 n_samples: int | None = None, seed: int = 0, centre: bool = True, layerwise: bool = False,
                 pretrain_lr: float = 1e-3, alignment: Alignment | None = None) -> TrainingRun:
    """SGD on the first ``n_samples`` training digits (all 1437 by default) for networks with ``depth`` hidden
    layers, ``n_networks`` per learning rate; batch norm (if ``bn``) with or without centring.

    ``rank_bound`` is r(H) (eq. 4) of the last hidden layers (n, d, N) -> (n,), differentiable: Algorithm 1
    maximises it (``layerwise``: the sum of r(H_l) over every hidden layer, the paper's Fig. 6) for
    ``pretrain_steps`` Adam steps of learning rate ``pretrain_lr``, and it is recorded after every epoch.
    ``alignment`` (optional) maps the last hidden layers (n, d, P) and the loss gradients in the logits (n, 10, P)
    of ``PROBE`` training digits to values (n, ...) per network (Prop. 19's gradient alignment), recorded after
    every epoch.
    """
    depth, bn, width = check_layers(depth, "depth"), check_flag(bn, "bn"), check_width(width)
    centre, layerwise = check_flag(centre, "centre"), check_flag(layerwise, "layerwise")
    pretrain_lr = float(check_real_array(pretrain_lr, "pretrain_lr (Adam's learning rate)", 0, 0.0, MAX_LR,
                                         open_low=True, why="Adam multiplies float32 steps by it"))
    if alignment is not None and not callable(alignment):
        raise ValueError(f"alignment must be None or a function of (H (n, d, P), errors (n, 10, P)) -> (n,), got "
                         f"{alignment!r:.80}")
    lrs = check_real_array(lrs, "lrs (learning rates)", 1, 0.0, MAX_LR, open_low=True,
                           why="SGD multiplies float32 gradients by it")
    if lrs.ndim != 1:
        raise ValueError(f"lrs must be a list of learning rates, got shape {lrs.shape}")
    epochs = check_whole_number(epochs, "epochs", 0, MAX_EPOCHS, "the epochs run one after another")
    pretrain_steps = check_whole_number(pretrain_steps, "pretrain_steps", 0, MAX_EPOCHS,
                                        "the steps run one after another")
    if not callable(rank_bound):
        raise ValueError(f"rank_bound must be a function of the last hidden layers (n, d, N) -> (n,), r(H) "
                         f"(bnsym.rank.differentiable_rank_bound), got {rank_bound!r:.80}")
    n_networks, init = check_draws(n_networks, "n_networks", 1), check_choice(init, "init", INITS)
    seed, data = check_seed(seed), digits()
    n_train, smallest = len(data.y_train), 2 if bn else 1
    why_bn = " (batch norm of one sample divides by 0)" if bn else ""
    if n_samples is not None:
        n_samples = check_whole_number(n_samples, "n_samples", smallest, n_train, "the training digits" + why_bn)
    used = n_train if n_samples is None else n_samples
    batch = check_whole_number(batch, "batch", smallest, used, f"a step takes batch of the {used} training samples"
                               + why_bn)
    check_memory(len(lrs) * n_networks, depth * width, max(width, used),
                 "networks (lrs x n_networks) x depth x width x max(width, n_samples)")
    x, y = data.x_train[:n_samples].T.contiguous(), data.y_train[:n_samples]  # x: 64 features x N samples
    gen = generator(seed, "cpu")
    rates = torch.tensor(np.repeat(lrs, n_networks), dtype=torch.float32)
    n = len(rates)
    sizes = [x.shape[0]] + [width] * depth + [10]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        w, b = init_layer(gen, n, fan_in, fan_out, init if fan_out != 10 else "torch", torch.float32)
        params.append((w.requires_grad_(), (b if b is not None else torch.zeros(n, fan_out, 1)).requires_grad_()))
    flat = [p for pair in params for p in pair]
    adam = Optimizer(flat, "adam", pretrain_lr)
    for _ in range(pretrain_steps):
        idx = torch.randperm(x.shape[1], generator=gen)[:PRETRAIN_BATCH]
        hidden = forward(params, x[:, idx], bn, centre)[1]
        objective = -sum(rank_bound(h).sum() for h in (hidden if layerwise else hidden[-1:]))
        adam.apply(torch.autograd.grad(objective, flat, allow_unused=True, materialize_grads=True))  # read-out: 0
    x_test, y_test = data.x_test.T.contiguous(), data.y_test
    probe = min(PROBE, x.shape[1])
    if alignment is not None and probe < 2:
        raise ValueError("alignment compares pairs of examples: it needs n_samples >= 2")
    losses, ranks, test_losses, test_accuracies, alignments = [], [], [], [], []

    def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits, labels.expand(n, -1), reduction="none").mean(-1)

    def record() -> torch.Tensor:
        with torch.no_grad():
            logits, (*_, h) = forward(params, x, bn, centre)
            losses.append(cross_entropy(logits, y))
            ranks.append(rank_bound(h.double()))
            test_logits, _ = forward(params, x_test, bn, centre)
            test_losses.append(cross_entropy(test_logits, y_test))
            test_accuracies.append((test_logits.argmax(1) == y_test).float().mean(-1))
            if alignment is None:
                alignments.append(torch.full((n,), math.nan))
            else:
                logits_p, (*_, h_p) = forward(params, x[:, :probe], bn, centre)
                errors = logits_p.double().softmax(1) - torch.nn.functional.one_hot(y[:probe], 10).T.double()
                diverged = ~(h_p.isfinite().all(2).all(1) & errors.isfinite().all(2).all(1))
                h_p, errors = (torch.where(diverged[:, None, None], 0, a) for a in (h_p.double(), errors))
                values = alignment(h_p, errors)  # a diverged network's is NaN, like its rank bound
                alignments.append(torch.where(diverged.view(-1, *[1] * (values.ndim - 1)), math.nan, values))
            return (logits.argmax(1) == y).float().mean(-1)

    accuracy = record()
    sgd = Optimizer(flat, "sgd", rates)  # not parked: a diverged network's loss is recorded as inf
    for _ in range(epochs):
        order = torch.randperm(x.shape[1], generator=gen)
        for start in range(0, x.shape[1] - batch + 1, batch):
            idx = order[start:start + batch]
            sgd.step(cross_entropy(forward(params, x[:, idx], bn, centre)[0], y[idx]))
        accuracy = record()
    def stacked(values: list[torch.Tensor]) -> np.ndarray:
        return torch.stack(values, 1).numpy()

    return TrainingRun(torch.stack(losses, 1).nan_to_num(nan=np.inf).numpy(), accuracy.numpy(), stacked(ranks),
                       rates.numpy(), torch.stack(test_losses, 1).nan_to_num(nan=np.inf).numpy(),
                       stacked(test_accuracies), stacked(alignments))
