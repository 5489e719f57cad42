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

OPTIMIZERS = {"sgd": torch.optim.SGD, "rmsprop": torch.optim.RMSprop}
MAX_DEPTH = 10**4  # one batch-norm layer after another: the forward and backward passes are sequential
MAX_WIDTH = 2**14  # a layer holds N^2 weights per seed
MAX_EPOCHS = 10**5
MAX_SEEDS = 10**4  # seeds train side by side in one tensor
MAX_WEIGHTS = 2**30  # n_seeds x depth x N^2 weights (4 GiB in float32) held and trained at once
MAX_LR = float(torch.finfo(torch.float32).max)  # a larger lr is not a float32 number


@dataclass(frozen=True)
class Run:
    """Test accuracies (S,) and final training losses (S,) of the S seeds; ``chance``: the majority-class rate.

    A seed whose training diverged (too large a learning rate) has a training loss of inf or NaN: the loss is not a
    number then, and its test accuracy is that of its non-finite logits read as 0."""

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
