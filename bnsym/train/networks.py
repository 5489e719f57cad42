"""Batch-normalized MLPs of the trainability experiments (Yang et al. 2019, Sec. 4), many seeds in one tensor.

Layer l = 1..L computes h^l = W^l x^{l-1}, then batch norm per neuron over the batch (eps, the affine map fixed
at gamma = 1, beta = 0), then phi; a linear read-out W^{L+1} gives the 10 logits. W^l_{ab} ~ N(0, 1/fan_in), no
biases. The gain gamma and shift beta of the paper's Fig 5 are part of phi (``tanh(gamma=0.5)``,
``relu(beta=2)``), as in the theory. Tensors are laid out as in :mod:`bnsym.sim`: activations (S, N, B) for S
independent networks (seeds) of width N on a batch of B examples, weights (S, fan_out, fan_in), so that one
batched product serves all seeds.

The network is the description :func:`description` (Dense() -> BatchNorm(eps) -> phi, L times, then a Dense
read-out), its weights drawn by the twin's Dense layers (:func:`bnsym.sim.arch.dense_parameters`); :func:`forward`
and :func:`predict` run it in the (S, N, B) layout above, equal to the twin :func:`bnsym.sim.arch.torch_network` of
the description with the same weights (``tests/test_converted_networks.py``). Batch norm is
:func:`bnsym.sim.batch_norm`, the simulators' own forward, differentiated by torch autograd.
Ghost batch norm (Fig 3b): with ``group = b`` the batch is cut into consecutive sub-batches of b examples and
each is normalised with its own statistics. For evaluation each neuron is normalised with its mean and variance
over the whole training set (``statistics="reference"`` in the description, a trained network's eval mode: not the
description's "population" statistics over all neurons), so a test prediction does not depend on the other test
examples.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..core.activations import Activation
from ..core.layers import Activation as PhiLayer
from ..core.layers import BatchNorm, Dense, Serial, repeat, serial
from ..sim import batch_norm
from ..sim.arch import dense_parameters


def init_weights(n_seeds: int, depth: int, width: int, n_features: int, n_classes: int,
                 gen: torch.Generator, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> list[torch.Tensor]:
    """W^1..W^L and the read-out W^{L+1}, each (S, fan_out, fan_in) with entries N(0, 1/fan_in), requiring grad:
    the weights of the twin of ``Dense()`` (:func:`bnsym.sim.arch.dense_parameters`), layer by layer."""
    shapes = [(width, n_features)] + [(width, width)] * (depth - 1) + [(n_classes, width)]
    return [dense_parameters(Dense(), fan_in, out, n_seeds, gen, device, dtype)[0].requires_grad_()
            for out, fan_in in shapes]


def description(depth: int, phi: Activation | str, eps: float, statistics: str = "batch") -> Serial:
    """The MLP as a description: [Dense(), BatchNorm(eps, statistics), phi] ``depth`` times, then the Dense read-out
    (the twin's ``out_features`` its width). ``statistics`` "batch" trains it; "reference" is :func:`predict`'s
    evaluation with the training set's per-neuron statistics."""
    block = [Dense(), BatchNorm(eps, statistics=statistics), PhiLayer(phi)]
    return serial(repeat(block, depth), Dense())


def forward(weights: Sequence[torch.Tensor], x: torch.Tensor, phi: Activation, eps: float,
            group: int | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits (S, classes, B) for inputs x (S, features, B), and the pre-activations h^1..h^L (S, N, B).

    ``group``: ghost batch norm over consecutive sub-batches of that many examples (it must divide B).
    """
    sizes = None if group is None else (group,) * (x.shape[-1] // group)
    preactivations = []
    for weight in weights[:-1]:
        h = weight @ x
        preactivations.append(h)
        x = phi.torch(batch_norm(h, eps, sizes))
    return weights[-1] @ x, preactivations


@torch.no_grad()
def predict(weights: Sequence[torch.Tensor], x_reference: torch.Tensor, x: torch.Tensor, phi: Activation,
            eps: float) -> torch.Tensor:
    """Logits (S, classes, n) for x (n, features), each layer normalised with the statistics of x_reference.

    Each neuron normalised with its mean and (biased) variance over the reference set (the training set): the
    description's ``statistics="reference"``.
    """
    reference, x = x_reference.T.expand(len(weights[0]), -1, -1), x.T.expand(len(weights[0]), -1, -1)
    for weight in weights[:-1]:
        h_reference, h = weight @ reference, weight @ x
        reference, x = phi.torch(batch_norm(h_reference, eps)), phi.torch(batch_norm(h, eps, reference=h_reference))
    return weights[-1] @ x
