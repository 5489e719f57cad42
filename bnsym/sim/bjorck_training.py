"""Training digit ResNets with parts of batch norm switched off (Bjorck et al. 2018, Sec. 3, Table 2, App. G, J).

The network is the fully connected ResNet-v1 of :mod:`bnsym.sim.bjorck` (whose digit ResNets are initialised by
:func:`init_params` here): W_in (64 -> n), L blocks
x' = ReLU(x + N(W_2 ReLU(N(W_1 x)))), a linear read-out with bias. N is batch norm as eq. (1) has it,

    N(h) = gamma (h - mu) / sqrt(sigma^2 + eps) + beta,   mu, sigma^2 the batch mean and (biased) variance per unit,

and a :class:`Norm` says which of its four parts a network keeps (Table 2: a dropped gamma is 1, a dropped beta 0,
a dropped mu 0, a dropped sigma^2 leaves h unscaled), where it sits (``top``: only in the top k blocks; ``head``:
one more after the last block, before the read-out, App. G) and how its statistics are taken (``alternate``:
recomputed only every other step, the other steps reuse the last ones as constants, App. J). The normalisation is
:func:`bnsym.core.batchnorm.batch_norm_forward`, the one forward of the book.

:func:`train_networks` trains many networks at once, one learning rate each, by SGD with the paper's momentum
0.9, weight decay 5e-4 and batch 128, the rate divided by 10 at 50 % and 75 % of training (App. B); a run that
reaches a minibatch loss above 10^3 (or a non-finite one) has diverged and is parked (Sec. 3.4). ``warm_epochs``
at ``warm_lr`` come first (the warm start of App. J). Test predictions use the statistics of the whole training
set (population statistics) in place of the running averages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..core.batchnorm import batch_norm_forward
from ..core.device import configure_torch, generator
from ..core.digits import N_CLASSES, Digits
from ..train.loop import Optimizer

DIVERGED_LOSS = 1e3  # the paper's divergence criterion: a minibatch loss above 10^3
EPS = 1e-5  # batch norm's epsilon (PyTorch's default, the paper's framework)
MOMENTUM, WEIGHT_DECAY, BATCH = 0.9, 5e-4, 128  # the paper's SGD (App. B)
PARTS = ("gamma", "beta", "mu", "sigma")


@dataclass(frozen=True)
class Norm:
    """Which parts of batch norm a network keeps, where and how. ``top``: BN in the top ``top`` blocks only (None:
    every block); ``head``: one more BN after the last block; ``alternate``: statistics recomputed every other
    step only."""

    gamma: bool = True
    beta: bool = True
    mu: bool = True
    sigma: bool = True
    top: int | None = None
    head: bool = False
    alternate: bool = False

    @classmethod
    def keeping(cls, parts: Sequence[str], **where: object) -> Norm:
        """The norm that keeps ``parts`` (a subset of gamma, beta, mu, sigma); ``where``: top, head, alternate."""
        return cls(**{part: part in parts for part in PARTS}, **where)

    @property
    def normalises(self) -> bool:
        """Whether N touches h at all (a BN without mu and sigma^2 is an affine map at most)."""
        return self.mu or self.sigma

    def sites(self, blocks: int) -> list[bool]:
        """Per normalisation site (two per block, then the head): whether it has a BN."""
        first = 0 if self.top is None else max(blocks - self.top, 0)
        return [block >= first for block in range(blocks) for _ in (0, 1)] + [self.head]


def normalise(h: torch.Tensor, norm: Norm, gamma: torch.Tensor, beta: torch.Tensor,
              reference: torch.Tensor | None) -> torch.Tensor:
    """N(h) for h (C, B, n) with the parts ``norm`` keeps, gamma and beta (C, n); statistics of ``reference``
    (C, B', n; population or stale statistics) in place of h's own when given."""
    if norm.normalises:
        y, s = batch_norm_forward(h, EPS, -2, reference=reference)
        h = y if norm.sigma and norm.mu else (h / s if norm.sigma else y * s)
    if norm.gamma:
        h = gamma[:, None, :] * h
    return h + beta[:, None, :] if norm.beta else h


def init_params(n_networks: int, blocks: int, width: int, gen: torch.Generator, device) -> list[torch.Tensor]:
    """Xavier-normal W_in (C, n, 64), blocks (C, L, 2, n, n), W_out (C, 10, n), zero b_out; gamma = 1 and beta = 0
    per site (C, 2L + 1, n)."""
    def xavier(*shape):
        return torch.randn(n_networks, *shape, generator=gen, device=device) * (2 / (shape[-1] + shape[-2])) ** 0.5

    sites = (n_networks, 2 * blocks + 1, width)
    return [xavier(width, 64), xavier(blocks, 2, width, width), xavier(N_CLASSES, width),
            torch.zeros(n_networks, N_CLASSES, device=device), torch.ones(sites, device=device),
            torch.zeros(sites, device=device)]


def forward(params: Sequence[torch.Tensor], x: torch.Tensor, norm: Norm,
            references: Sequence[torch.Tensor | None] | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits (C, B, 10) for inputs x (B, 64) and the pre-normalisation h of every BN site, in order; the sites
    normalise with the statistics of ``references`` (one per site, as returned here) when given."""
    w_in, w_blocks, w_out, b_out, gamma, beta = params
    blocks = w_blocks.shape[1]
    has_bn = norm.sites(blocks)
    taken: list[torch.Tensor] = []

    def site(h, k):
        if not has_bn[k]:
            return h
        taken.append(h)
        reference = None if references is None else references[len(taken) - 1]
        return normalise(h, norm, gamma[:, k], beta[:, k], reference)

    h = x @ w_in.mT
    for block in range(blocks):
        branch = torch.relu(site(h @ w_blocks[:, block, 0].mT, 2 * block)) @ w_blocks[:, block, 1].mT
        h = torch.relu(h + site(branch, 2 * block + 1))
    return site(h, 2 * blocks) @ w_out.mT + b_out[:, None, :], taken


@torch.no_grad()
def accuracies(params: Sequence[torch.Tensor], data: Digits, norm: Norm) -> tuple[torch.Tensor, torch.Tensor]:
    """Train and test accuracy (C,) each, every site normalised with the training set's statistics."""
    logits_train, references = forward(params, data.x_train, norm)
    logits_test, _ = forward(params, data.x_test, norm, references)
    return tuple((logits.nan_to_num().argmax(-1) == y).float().mean(-1)
                 for logits, y in ((logits_train, data.y_train), (logits_test, data.y_test)))


def decay(done: float) -> float:
    """The factor of the learning rate after the fraction ``done`` of training: 1, then 0.1 from 50 % and 0.01 from
    75 % (App. B)."""
    return 1.0 if done < 0.5 else 0.1 if done < 0.75 else 0.01


@dataclass(frozen=True)
class Training:
    """Per network (axis 0): its learning rate, whether it diverged, and train and test accuracy at each
    evaluation (axis 1, after ``epochs[i]`` epochs; NaN once diverged)."""

    lr: np.ndarray
    diverged: np.ndarray
    epochs: np.ndarray
    train_accuracy: np.ndarray
    test_accuracy: np.ndarray


def train_networks(data: Digits, blocks: int, width: int, norm: Norm, lrs: Sequence[float], epochs: int,
                   seed: int, n_evals: int = 1, warm_epochs: int = 0, warm_lr: float = 1e-4) -> Training:
    """Train one network per entry of ``lrs`` (fresh Xavier weights each) for ``epochs`` epochs after
    ``warm_epochs`` at ``warm_lr``; evaluate ``n_evals`` times, evenly spaced, the last at the end."""
    configure_torch()
    device = data.x_train.device
    gen = generator(seed, device)
    lr = torch.as_tensor(np.asarray(lrs, dtype=np.float32), device=device)
    params = [p.requires_grad_() for p in init_params(len(lr), blocks, width, gen, device)]
    opt = Optimizer(params, "momentum", lr, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY, limit=DIVERGED_LOSS)
    per_epoch = len(data.y_train) // BATCH
    warm, total = warm_epochs * per_epoch, (warm_epochs + epochs) * per_epoch
    evals = {warm + round((i + 1) * epochs / n_evals) * per_epoch: i for i in range(n_evals)}
    curves = torch.full((2, len(lr), n_evals), float("nan"), device=device)
    stale = None
    for step in range(total):
        opt.rate = torch.full_like(lr, warm_lr) if step < warm else lr * decay((step - warm) / (total - warm))
        index = torch.randperm(len(data.y_train), generator=gen, device=device)[:BATCH]
        recompute = not norm.alternate or stale is None or step % 2 == 0
        logits, taken = forward(params, data.x_train[index], norm, None if recompute else stale)
        if recompute:
            stale = [h.detach() for h in taken]
        opt.step(F.cross_entropy(logits.transpose(1, 2), data.y_train[index].expand(len(lr), -1),
                                 reduction="none").mean(1))  # a dropped gamma or beta gets a zero gradient
        if step + 1 in evals:
            for row, accuracy in enumerate(accuracies(params, data, norm)):
                curves[row, :, evals[step + 1]] = torch.where(opt.alive, accuracy, float("nan"))
    done_epochs = np.array([round((i + 1) * epochs / n_evals) for i in range(n_evals)])
    train_acc, test_acc = curves.cpu().numpy()
    return Training(np.asarray(lrs, dtype=float), ~opt.alive.cpu().numpy(), done_epochs, train_acc, test_acc)
