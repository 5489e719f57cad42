"""The one training loop of the book (:class:`Optimizer`: SGD, momentum with weight decay, RMSProp, Adam, one step
size per network or per network and layer, divergence parking), and on it Yang et al.'s trainability runs: S seeds
of one BN MLP at once on digits, by SGD or RMSProp, and their test accuracies.

Every experiment that trains a network (:mod:`bnsym.train`, chapters 07c, 09b, 11, 12, 12c) steps it with
:class:`Optimizer`; the experiment only says how its networks compute their losses. In :func:`train` the loss of
each seed is the mean cross-entropy over its mini-batch; the seeds' losses are summed, so one backward pass gives
every seed its own gradient and the optimiser (elementwise) treats them independently.
Each epoch shuffles the training set afresh for each seed and drops the last incomplete mini-batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import islice
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F

from ..core.activations import Activation, parse_activation
from ..core.digits import N_CLASSES, Digits, digits, n_train
from ..core.validation import (
    MAX_BATCH_SIZE,
    MIN_BATCH_SIZE,
    check_activation,
    check_choice,
    check_device,
    check_eps,
    check_float_dtype,
    check_range,
    check_seed,
    check_whole_number,
)
from .networks import forward, init_weights, predict

OPTIMIZERS = ("sgd", "rmsprop")  # the rules of Optimizer that train() offers
MAX_DEPTH = 10**4  # one batch-norm layer after another: the forward and backward passes are sequential
MAX_WIDTH = 2**14  # a layer holds N^2 weights per seed
MAX_EPOCHS = 10**5
MAX_SEEDS = 10**4  # seeds train side by side in one tensor
MAX_WEIGHTS = 2**30  # n_seeds x depth x N^2 weights (4 GiB in float32) held and trained at once
MAX_LR = float(torch.finfo(torch.float32).max)  # a larger lr is not a float32 number


RULES = ("sgd", "momentum", "rmsprop", "adam")


class Optimizer:
    """The one training loop's step for M networks side by side: every parameter (M, ...) holds network m's own
    parameters at index m, and every network is trained on its own loss (the losses are summed: one backward pass
    gives each network its gradient, and every rule below is elementwise).

    Rules, with g the gradient plus ``weight_decay`` x p:

    * ``"sgd"``: p <- p - c g;
    * ``"momentum"``: v <- mu v + g, p <- p - c v (the momentum of torch's SGD);
    * ``"rmsprop"``: s <- alpha s + (1 - alpha) g^2, p <- p - c g / (sqrt(s) + eps);
    * ``"adam"``: m <- beta1 m + (1 - beta1) g, s <- beta2 s + (1 - beta2) g^2 (step t),
      p <- p - c / (1 - beta1^t) m / (sqrt(s) / sqrt(1 - beta2^t) + eps).

    The step size c is a float (the step of ``torch.optim``'s SGD, RMSprop or Adam on the CPU, to the last bit; the
    momentum rule forms g + weight_decay x p as Bjorck et al.'s runs do, which may differ from torch's fused weight
    decay in the last bit), a tensor (M,) of one step size per network, or (M, G) of one per network and parameter
    group (layer-wise steps; ``groups`` gives each parameter's group, default its index). Divergence parking: with
    a ``limit``, a network whose loss is not finite or exceeds it stops updating from that step on (``alive``
    is False; its gradient is not taken), so it never feeds a NaN into a later step and is reported by its caller
    as diverged.
    """

    def __init__(self, params: Sequence[torch.Tensor], rule: str = "sgd", rate: float | torch.Tensor = 0.1, *,
                 groups: Sequence[int] | None = None, momentum: float = 0.9, weight_decay: float = 0.0,
                 alpha: float = 0.99, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 limit: float | None = None):
        self.params = list(params)
        self.rule = check_choice(rule, "rule", RULES)
        self.groups = list(range(len(self.params))) if groups is None else list(groups)
        if len(self.groups) != len(self.params):
            raise ValueError(f"groups names {len(self.groups)} groups for {len(self.params)} parameters: one each")
        if not self.params or any(p.ndim == 0 or len(p) != len(self.params[0]) for p in self.params):
            raise ValueError("every parameter must hold the M networks along its first axis (M, ...), the same M")
        self.rate, self.momentum, self.weight_decay = self._checked_rate(rate), momentum, weight_decay
        self.alpha, self.betas, self.eps, self.limit = alpha, betas, eps, limit
        n_states = {"sgd": 0, "momentum": 1, "rmsprop": 1, "adam": 2}[self.rule]
        self.state = [[torch.zeros_like(p) for _ in range(n_states)] for p in self.params]
        self.steps = 0
        self.alive = torch.ones(len(self.params[0]), dtype=torch.bool, device=self.params[0].device)

    def _checked_rate(self, rate: float | torch.Tensor) -> float | torch.Tensor:
        """``rate`` if it is a float, a tensor (M,) or (M, G) with G > every group; ValueError naming the shape."""
        if not torch.is_tensor(rate):
            return check_range(rate, "rate (the step size)", 0.0, open_low=False)
        networks, groups = len(self.params[0]), max(self.groups, default=-1) + 1
        if rate.ndim > 2 or (rate.ndim and len(rate) != networks) or (rate.ndim == 2 and rate.shape[1] < groups):
            raise ValueError(f"rate must be a float, one step size per network ({networks},) or per network and "
                             f"group ({networks}, {groups}), got shape {tuple(rate.shape)}")
        return rate

    def step(self, losses: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One step on the networks' losses (M,): park the diverged ones (with a ``limit``), take the gradients of
        the others and move them; returns the gradients."""
        if self.limit is not None:
            self.alive &= torch.isfinite(losses) & (losses <= self.limit)
        grads = torch.autograd.grad(torch.where(self.alive, losses, 0.0).sum(), self.params, allow_unused=True,
                                    materialize_grads=True)  # a parameter a network does not use gets 0
        self.apply(grads)
        return grads

    def apply(self, grads: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
        """Move every parameter by its gradient (without tracking); returns the updates subtracted, c times the
        rule's direction, for tensor step sizes (None for a float one, whose step is torch's fused one)."""
        self.steps += 1
        updates = []
        with torch.no_grad():
            for p, g, state, group in zip(self.params, grads, self.state, self.groups):
                moved, update = self._move(p, g, state, group)
                if self.limit is None:
                    p.copy_(moved)
                else:
                    p.copy_(torch.where(self.alive.view((-1,) + (1,) * (p.ndim - 1)), moved, p))
                updates.append(update)
        return updates

    def _rate(self, p: torch.Tensor, group: int) -> torch.Tensor:
        """The tensor step size of parameter p's networks, viewed to broadcast against p."""
        rate = self.rate if self.rate.ndim < 2 else self.rate[:, group]
        return rate.view((-1,) + (1,) * (p.ndim - 1)) if rate.ndim else rate

    def _move(self, p: torch.Tensor, g: torch.Tensor, state: list[torch.Tensor],
              group: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(p after the step, the update c x direction or None for a float c): the rule's arithmetic, in torch.optim's
        order of operations where c is a float."""
        if self.weight_decay:
            g = g + self.weight_decay * p if self.rule == "momentum" else g.add(p, alpha=self.weight_decay)
        numerator, denominator = g, None
        if self.rule == "momentum":
            numerator = state[0].mul_(self.momentum).add_(g)
        elif self.rule == "rmsprop":
            denominator = state[0].mul_(self.alpha).addcmul_(g, g, value=1 - self.alpha).sqrt().add_(self.eps)
        elif self.rule == "adam":
            beta1, beta2 = self.betas
            numerator = state[0].lerp_(g, 1 - beta1)
            state[1].mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denominator = (state[1].sqrt() / (1 - beta2**self.steps) ** 0.5).add_(self.eps)
        correction = 1 - self.betas[0] ** self.steps if self.rule == "adam" else 1.0
        if not torch.is_tensor(self.rate):
            size = self.rate / correction
            if denominator is None:
                return p.add(numerator, alpha=-size), None
            return p.addcdiv(numerator, denominator, value=-size), None
        rate = self._rate(p, group)
        update = rate * numerator if correction == 1.0 else rate / correction * numerator
        if denominator is not None:
            update = update / denominator
        return p - update, update


@dataclass(frozen=True)
class Run:
    """Test accuracies (S,) and final training losses (S,) of the S seeds; ``chance``: the majority-class rate.

    A seed whose training diverged (too large a learning rate: a loss that is not finite) is parked there; its
    training loss is NaN, and its test accuracy is that of logits read as 0 (not-a-number logits, as unparked
    training would have reached)."""

    test_accuracy: torch.Tensor
    train_loss: torch.Tensor
    chance: float


def minibatches(n_examples: int, batch: int, n_seeds: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Index tensors (S, batch), epoch after epoch: a fresh permutation per seed and epoch, remainders dropped.

    ValueError (at the call, before any step) if a step would take more examples than there are."""
    if batch > n_examples:
        raise ValueError(f"a step takes batch_size (or ghost_batch) = {batch} examples, more than the {n_examples} "
                         "training examples")

    def epochs() -> Iterator[torch.Tensor]:
        while True:
            order = torch.stack([torch.randperm(n_examples, generator=gen) for _ in range(n_seeds)])
            yield from order[:, :n_examples - n_examples % batch].split(batch, dim=1)
    return epochs()


def steps_per_epoch(n_examples: int, batch: int) -> int:
    return n_examples // batch


def batch_loss(weights: Sequence[torch.Tensor], data: Digits, index: torch.Tensor, phi: Activation, eps: float,
               group: int | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Per-seed mean cross-entropy (S,) on the examples ``index`` (S, batch), and the pre-activations."""
    logits, preactivations = forward(weights, data.x_train[index].mT, phi, eps, group)
    losses = F.cross_entropy(logits, data.y_train[index], reduction="none").mean(-1)
    return losses, preactivations


def check_training(depth: object, width: object, batch_size: object, step_batch: object, optimizer: object,
                   lr: object, epochs: object, n_seeds: object) -> tuple[int, int, int, int, str, float, int, int]:
    """The arguments checked (ints for the whole numbers), in this order; ValueError naming the argument that no
    network could be trained with. ``step_batch``: the examples per step, ``ghost_batch`` (or ``batch_size``)."""
    depth = check_whole_number(depth, "depth", 1, MAX_DEPTH, "the layers run one after another")
    width = check_whole_number(width, "width", 1, MAX_WIDTH, "a layer holds width^2 weights per seed")
    epochs = check_whole_number(epochs, "epochs", 1, MAX_EPOCHS)
    n_seeds = check_whole_number(n_seeds, "n_seeds", 1, MAX_SEEDS, "the seeds train side by side in one tensor")
    batch_size = check_whole_number(batch_size, "batch_size", 2, MAX_BATCH_SIZE, "batch norm of one example is 0")
    step_batch = check_whole_number(step_batch, "ghost_batch (examples per step)", batch_size, MAX_BATCH_SIZE,
                                    "a step normalises sub-batches of batch_size")
    if step_batch > n_train():
        raise ValueError(f"{'ghost_batch' if step_batch != batch_size else 'batch_size'} = {step_batch} examples per "
                         f"step, more than the {n_train()} training examples: no step could be taken")
    if step_batch % batch_size:
        raise ValueError(f"ghost_batch = {step_batch} must be a multiple of batch_size = {batch_size} "
                         "(the BN sub-batches tile the step's batch)")
    optimizer = check_choice(optimizer, "optimizer", OPTIMIZERS)
    lr = check_range(lr, "lr", 0.0, MAX_LR, open_low=True, why="the optimiser multiplies float32 gradients by it")
    if n_seeds * depth * width**2 > MAX_WEIGHTS:
        raise ValueError(f"n_seeds x depth x width^2 = {n_seeds * depth * width**2:,} weights exceed {MAX_WEIGHTS:,} "
                         "(4 GiB of float32)")
    return depth, width, batch_size, step_batch, optimizer, lr, epochs, n_seeds


def check_network(phi: object, batch_size: int, eps: object, seed: object, dtype: object,
                  device: object) -> tuple[Activation, float, int, torch.dtype, torch.device]:
    """(phi, eps, seed, dtype, device) checked: phi usable on the BN sphere of ``batch_size`` (on N(0, 1) below
    B = 4, where the sphere is a few points)."""
    batch = batch_size if batch_size >= MIN_BATCH_SIZE else None
    return (check_activation(parse_activation(phi), batch), check_eps(eps), check_seed(seed), check_float_dtype(dtype),
            check_device(device))


def train(phi: str | Activation, depth: int, width: int, batch_size: int, *, lr: float, epochs: int,
          optimizer: str = "sgd", eps: float = 1e-3, ghost_batch: int | None = None, n_seeds: int = 1,
          seed: int = 0, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> Run:
    """Train ``n_seeds`` independent BN MLPs (L = ``depth`` BN layers of width N) on digits; their test accuracies.

    ``batch_size`` is the batch norm's batch B. With ``ghost_batch`` each step takes that many examples and
    normalises every consecutive B of them separately (ghost batch norm); else a step takes B examples.
    """
    step_batch = batch_size if ghost_batch is None else ghost_batch
    depth, width, batch_size, step_batch, optimizer, lr, epochs, n_seeds = check_training(
        depth, width, batch_size, step_batch, optimizer, lr, epochs, n_seeds)
    activation, eps, seed, dtype, device = check_network(phi, batch_size, eps, seed, dtype, device)
    data = digits(dtype, device)
    gen = torch.Generator().manual_seed(seed)
    weights = init_weights(n_seeds, depth, width, data.n_features, N_CLASSES, gen, dtype, device)
    opt = Optimizer(weights, optimizer, lr, limit=math.inf)
    losses = torch.full((n_seeds,), float("nan"))
    stream = minibatches(len(data.y_train), step_batch, n_seeds, gen)
    for index in islice(stream, epochs * steps_per_epoch(len(data.y_train), step_batch)):
        losses, _ = batch_loss(weights, data, index.to(device), activation, eps, batch_size)
        opt.step(losses)
    diverged = ~opt.alive[:, None, None]
    logits = predict(weights, data.x_train, data.x_test, activation, eps).nan_to_num().masked_fill(diverged, 0.0)
    accuracy = (logits.argmax(1) == data.y_test).double().mean(-1)
    losses = losses.detach().masked_fill(diverged.flatten(), float("nan"))
    return Run(accuracy.cpu(), losses.double().cpu(), data.chance)
