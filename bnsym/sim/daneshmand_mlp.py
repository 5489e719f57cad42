"""Daneshmand et al.'s MLPs (2020): n networks at once, H d features x N samples as in the paper, weights
(n, d_out, d_in); the init of one layer and the forward of a whole network. The networks at initialisation are
:mod:`bnsym.sim.daneshmand`, their training :mod:`bnsym.train.daneshmand`.

Inits (fan_in = layer input size):

* ``"torch"``: nn.Linear's default, weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in));
* ``"asymmetric"``: weights U(0, 2/sqrt(fan_in)) (same variance, mean 1/sqrt(fan_in); Fig. 5), default biases;
* ``"he"``: weights N(0, 2/fan_in), no bias; ``"gaussian"``: weights N(0, 1/fan_in), no bias (linear nets).
"""

from __future__ import annotations

import math

import torch

from ..core.batchnorm import batch_norm

INITS = ("torch", "asymmetric", "he", "gaussian")


def init_layer(gen: torch.Generator, n: int, fan_in: int, fan_out: int, init: str, dtype: torch.dtype
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weights (n, fan_out, fan_in) and biases (n, fan_out, 1) or None, for the named init."""
    shape, bound = (n, fan_out, fan_in), 1 / math.sqrt(fan_in)
    device = gen.device
    if init in ("torch", "asymmetric"):
        u = torch.rand(shape, generator=gen, device=device, dtype=dtype)
        w = (2 * u - 1) * bound if init == "torch" else 2 * u * bound
        b = (2 * torch.rand(n, fan_out, 1, generator=gen, device=device, dtype=dtype) - 1) * bound
        return w, b
    variance = {"he": 2.0, "gaussian": 1.0}[init] / fan_in
    return math.sqrt(variance) * torch.randn(shape, generator=gen, device=device, dtype=dtype), None


def forward(params: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor, bn: bool, centre: bool = True
             ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(logits (n, 10, N), the hidden layers [(n, d, N)] from the first to the last) of every network on x (64, N)."""
    h, hidden = x, []
    for w, b in params[:-1]:
        h = w @ h + b
        h = torch.relu(batch_norm(h, centre=centre) if bn else h)
        hidden.append(h)
    w, b = params[-1]
    return w @ h + b, hidden
