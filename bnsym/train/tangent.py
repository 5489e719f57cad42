"""Gradient descent of finite twins in the kernel regime (chapter 09b): the networks of
:func:`bnsym.sim.arch.torch_network` with the read-out of :func:`bnsym.sim.ntk.empirical_ntk`, trained on fixed BN
batches by the one loop (:class:`bnsym.train.loop.Optimizer`)."""

from __future__ import annotations

import numpy as np
import torch

from ..core.device import READOUT_STREAM, generator
from ..core.validation import check_whole_number
from ..sim.arch import torch_network
from .loop import Optimizer


def train_on_batches(net: object, train_batches: np.ndarray, targets: np.ndarray, test_batches: np.ndarray,
                     width: int, n_networks: int, learning_rate: float, steps: int, seed: int = 0, centred: bool = True,
                     stochastic: bool = False, device: torch.device | str = "cpu") -> np.ndarray:
    """Gradient descent of ``n_networks`` finite twins of ``net`` (width ``width``, weights from ``seed``) on fixed BN
    batches; their outputs on the test batches after training (M, kt, B, outputs).

    f = V^T x_out / sqrt(width) as in :func:`empirical_ntk` (every weight and the readout V (width, outputs) trained).
    ``centred``: the model is g(x) = f(x; theta) - f(x; theta_0), which starts at 0, so its kernel-regime limit is the
    mean over initialisations of the trained f without the initial outputs' noise. ``train_batches`` (k, B, d), each
    passed through the network on its own (so are the test batches (kt, B, d), train mode), targets (k, B, outputs);
    loss sum (g - targets)^2 / 2 over the batches' copies. Full batch: each of the ``steps`` steps of size
    ``learning_rate`` takes every batch (gradient flow to time t = learning_rate x steps); ``stochastic``: each step
    takes the next batch in turn (SGD over the fixed batches).
    """
    width = check_whole_number(width, "width", 1, 2**20)
    n_networks = check_whole_number(n_networks, "n_networks", 1, 2**20)
    steps = check_whole_number(steps, "steps", 0, 10**7)
    seed = check_whole_number(seed, "seed", 0, 2**60)
    train = torch.as_tensor(np.asarray(train_batches, dtype=float), device=device)
    test = torch.as_tensor(np.asarray(test_batches, dtype=float), device=device)
    y = torch.as_tensor(np.asarray(targets, dtype=float), device=device)
    module = torch_network(net, width, n_networks, in_features=train.shape[-1], seed=seed, device=device)
    readout = torch.randn(n_networks, width, y.shape[-1], generator=generator(READOUT_STREAM + seed, device),
                          dtype=torch.float64, device=device).requires_grad_()
    params = [*module.parameters(), readout]

    def outputs(batches: torch.Tensor) -> torch.Tensor:
        """f on each batch (M, k, B, outputs)."""
        return torch.stack([module(batch.expand(n_networks, *batch.shape)) @ readout / np.sqrt(width)
                            for batch in batches], 1)

    with torch.no_grad():
        start_train = outputs(train) if centred else torch.zeros(())
        start_test = outputs(test) if centred else torch.zeros(())
    sgd = Optimizer(params, "sgd", torch.full((n_networks,), float(learning_rate), dtype=torch.float64, device=device))
    for step in range(steps):
        chosen = [step % len(train)] if stochastic else slice(None)
        residual = outputs(train[chosen]) - start_train[:, chosen] if centred else outputs(train[chosen])
        loss = ((residual - y[chosen]) ** 2).sum() / 2  # the networks' losses add: each its own gradient
        sgd.apply(torch.autograd.grad(loss, params))
    with torch.no_grad():
        return (outputs(test) - start_test).cpu().numpy()
