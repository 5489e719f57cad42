"""The empirical neural tangent kernel of finite networks: exact per-example gradients over every parameter
(autograd through the batch statistics of train-mode BN) of the torch twin (:func:`bnsym.sim.arch.torch_network`),
the finite-width counterpart of :func:`bnsym.arch.ntk`. Training the same twins in the kernel regime is
:func:`bnsym.train.tangent.train_on_batches`."""

from __future__ import annotations

import numpy as np
import torch

from ..core.device import READOUT_STREAM, generator
from ..core.validation import check_whole_number
from .arch import torch_network

__all__ = ["READOUT_STREAM", "empirical_ntk"]


def empirical_ntk(net: object, inputs: np.ndarray, width: int, seed: int = 0, sizes: tuple[int, ...] | None = None,
                  device: torch.device | str = "cpu") -> np.ndarray:
    """Theta_ab = sum over every parameter theta of df(x_a)/dtheta df(x_b)/dtheta for one finite twin of ``net``
    (a layer, list or Serial; width ``width``, weights from ``seed``) on the batch ``inputs`` (B, d), float64.

    f = v . x_out / sqrt(width), v standard normal and trained; every Dense's W and b are trained in the NTK
    parametrisation of :mod:`bnsym.arch` (b enters scaled by sqrt(bias_var), so it adds nothing where that is 0);
    train-mode BN couples the batch, and autograd differentiates through its statistics. ``sizes``: the inputs
    are consecutive batches of these sizes, each passed through the network on its own (default one batch).
    """
    x = torch.as_tensor(np.asarray(inputs, dtype=float), device=device)
    seed = check_whole_number(seed, "seed", 0, 2**60)
    module = torch_network(net, width, 1, in_features=x.shape[1], seed=seed, device=device)
    width = module(x[None, :1]).shape[-1]
    params = {name: p.detach() for name, p in module.named_parameters()}
    params["readout"] = torch.randn(width, generator=generator(READOUT_STREAM + seed, device), dtype=torch.float64,
                                    device=device)

    batches = x.split(list(sizes) if sizes is not None else [len(x)])

    def f(p: dict[str, torch.Tensor]) -> torch.Tensor:
        weights = {name: value for name, value in p.items() if name != "readout"}
        out = torch.cat([torch.func.functional_call(module, weights, (batch[None],))[0] for batch in batches])
        return out @ p["readout"] / np.sqrt(width)

    jacobians = torch.func.jacrev(f)(params)
    flat = torch.cat([j.reshape(len(x), -1) for j in jacobians.values()], 1)
    return (flat @ flat.T).cpu().numpy()
