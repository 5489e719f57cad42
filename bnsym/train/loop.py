"""Training S seeds of one BN MLP at once on digits, by SGD or RMSProp, and their test accuracies.

The loss of each seed is the mean cross-entropy over its mini-batch; the seeds' losses are summed, so one
backward pass gives every seed its own gradient and the optimiser (elementwise) treats them independently.
Each epoch shuffles the training set afresh for each seed and drops the last incomplete mini-batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F

from ..core.activations import Activation, parse_activation
from ..core.digits import N_CLASSES, Digits, digits
from ..core.validation import check_eps
from .networks import forward, init_weights, predict

OPTIMIZERS = {"sgd": torch.optim.SGD, "rmsprop": torch.optim.RMSprop}


@dataclass(frozen=True)
class Run:
    """Test accuracies (S,) and final training losses (S,) of the S seeds; ``chance``: the majority-class rate."""

    test_accuracy: torch.Tensor
    train_loss: torch.Tensor
    chance: float


def minibatches(n_examples: int, batch: int, n_seeds: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Index tensors (S, batch), epoch after epoch: a fresh permutation per seed and epoch, remainders dropped."""
    while True:
        order = torch.stack([torch.randperm(n_examples, generator=gen) for _ in range(n_seeds)])
        yield from order[:, :n_examples - n_examples % batch].split(batch, dim=1)


def steps_per_epoch(n_examples: int, batch: int) -> int:
    return n_examples // batch


def batch_loss(weights: Sequence[torch.Tensor], data: Digits, index: torch.Tensor, phi: Activation, eps: float,
               group: int | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Per-seed mean cross-entropy (S,) on the examples ``index`` (S, batch), and the pre-activations."""
    logits, preactivations = forward(weights, data.x_train[index].mT, phi, eps, group)
    losses = F.cross_entropy(logits, data.y_train[index], reduction="none").mean(-1)
    return losses, preactivations


def check_training(depth: int, width: int, batch_size: int, step_batch: int, optimizer: str, lr: float,
                   epochs: int, n_seeds: int) -> None:
    """ValueError naming the argument that no network could be trained with."""
    for name, value in (("depth", depth), ("width", width), ("epochs", epochs), ("n_seeds", n_seeds)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    if not (isinstance(batch_size, int) and batch_size >= 2):
        raise ValueError(f"batch_size must be a whole number >= 2 (batch norm of one example is 0), got {batch_size!r}")
    if step_batch % batch_size:
        raise ValueError(f"ghost_batch = {step_batch} must be a multiple of batch_size = {batch_size} "
                         "(the BN sub-batches tile the step's batch)")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    if not (lr > 0):
        raise ValueError(f"lr must be > 0, got {lr!r}")


def train(phi: str | Activation, depth: int, width: int, batch_size: int, *, lr: float, epochs: int,
          optimizer: str = "sgd", eps: float = 1e-3, ghost_batch: int | None = None, n_seeds: int = 1,
          seed: int = 0, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> Run:
    """Train ``n_seeds`` independent BN MLPs (L = ``depth`` BN layers of width N) on digits; their test accuracies.

    ``batch_size`` is the batch norm's batch B. With ``ghost_batch`` each step takes that many examples and
    normalises every consecutive B of them separately (ghost batch norm); else a step takes B examples.
    """
    activation, eps = parse_activation(phi), check_eps(eps)
    step_batch = ghost_batch or batch_size
    check_training(depth, width, batch_size, step_batch, optimizer, lr, epochs, n_seeds)
    data = digits(dtype, device)
    gen = torch.Generator().manual_seed(seed)
    weights = init_weights(n_seeds, depth, width, data.n_features, N_CLASSES, gen, dtype, device)
    opt = OPTIMIZERS[optimizer](weights, lr=lr)
    losses = torch.full((n_seeds,), float("nan"))
    stream = minibatches(len(data.y_train), step_batch, n_seeds, gen)
    for index in islice(stream, epochs * steps_per_epoch(len(data.y_train), step_batch)):
        losses, _ = batch_loss(weights, data, index.to(device), activation, eps, batch_size)
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        opt.step()
    logits = predict(weights, data.x_train, data.x_test, activation, eps).nan_to_num()
    accuracy = (logits.argmax(1) == data.y_test).double().mean(-1)
    return Run(accuracy.cpu(), losses.detach().double().cpu(), data.chance)
