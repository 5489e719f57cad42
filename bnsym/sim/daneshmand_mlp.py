"""Daneshmand et al.'s MLPs (2020): n networks at once, H d features x N samples as in the paper, weights
(n, d_out, d_in); the init of one layer, the network as a description (:func:`description`, the twin's layout) and
its forward in the paper's. The networks at initialisation are
:mod:`bnsym.sim.daneshmand`, their training :mod:`bnsym.train.daneshmand`.

Inits (fan_in = layer input size), each a Dense description (:func:`dense`) whose twin draws the layer
(:func:`bnsym.sim.arch.dense_parameters`):

* ``"torch"``: nn.Linear's default, weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)): ``Dense(1/3,
  1/(3 fan_in), init="uniform")``;
* ``"asymmetric"``: weights U(0, 2/sqrt(fan_in)) (same variance, mean 1/sqrt(fan_in); Fig. 5), default biases:
  ``init="uniform_positive"``, which the infinite-width theory refuses (a non-zero mean);
* ``"he"``: weights N(0, 2/fan_in), no bias; ``"gaussian"``: weights N(0, 1/fan_in), no bias (linear nets).
"""

from __future__ import annotations

import torch

from ..core.batchnorm import batch_norm
from ..core.layers import Activation, BatchNorm, Dense, Serial, serial
from .arch import dense_parameters

INITS = ("torch", "asymmetric", "he", "gaussian")
INIT_VARIANCES = {"torch": (1 / 3, 1 / 3), "he": (2.0, 0.0), "gaussian": (1.0, 0.0)}  # (s_w^2, s_b^2 fan_in)
DENSE_INITS = {"torch": "uniform", "asymmetric": "uniform_positive", "he": "gaussian", "gaussian": "gaussian"}


def dense(init: str, fan_in: int) -> Dense:
    """The Dense layer of the named init on ``fan_in`` inputs: weight_var s_w^2, bias_var s_b^2 / fan_in of
    :data:`INIT_VARIANCES` (the asymmetric init: the variances of nn.Linear's), weights as :data:`DENSE_INITS`."""
    s_w2, s_b2 = INIT_VARIANCES["torch" if init == "asymmetric" else init]
    return Dense(s_w2, s_b2 / fan_in, DENSE_INITS[init])


def init_layer(gen: torch.Generator, n: int, fan_in: int, fan_out: int, init: str, dtype: torch.dtype
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weights (n, fan_out, fan_in) and biases (n, fan_out, 1) or None (no bias), drawn by the twin of
    :func:`dense`."""
    layer = dense(init, fan_in)
    w, b = dense_parameters(layer, fan_in, fan_out, n, gen, gen.device, dtype)
    return w, (b[..., None] if layer.bias_var else None)


def description(depth: int, width: int, init: str, bn: bool, centre: bool = True, n_features: int = 64) -> Serial:
    """The MLP as a description: ``depth`` x [:func:`dense` of ``init``, BatchNorm (uncentred without ``centre``;
    eps 0) if ``bn``, relu] on ``n_features`` inputs, then the read-out ``dense("torch", width)`` (the twin's
    ``out_features``): what :func:`forward` computes, in the twin's layout."""
    layers, fan_in = [], n_features
    for _ in range(depth):
        layers += [dense(init, fan_in), *([BatchNorm(centre=centre)] if bn else []), Activation("relu")]
        fan_in = width
    return serial(layers, dense("torch", width))


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
