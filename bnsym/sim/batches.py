"""Several batches through one wide random network: the empirical Gram of all their outputs.

The network of :mod:`bnsym.nngp`: h^1 = W^1 x / sqrt(d), x^l = phi(BN(h^l)) with batch norm over each batch of
``batch_size`` consecutive points separately, h^{l+1} = W^{l+1} x^l / sqrt(N), W i.i.d. N(0, 1). Given x^l, the rows
of h^{l+1} are i.i.d. N(0, K) with K = x^{l T} x^l / N, so they are drawn as Z R^T with R R^T = K (the "gram"
sampler of :mod:`bnsym.sim.networks`: same law as explicit weights, cost O(N n^2) for n points).
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.activations import Activation, parse_activation
from ..core.device import configure_torch, default_device, generator
from .networks import _psd_factor, batch_norm, gram


def simulate_batched_gram(phi: str | Activation, inputs: np.ndarray, depth: int, batch_size: int, width: int,
                          n_networks: int, seed: int = 0, device: torch.device | str | None = None) -> torch.Tensor:
    """Gram matrices x^{L T} x^L / N (M, n, n) of M networks for the n rows of ``inputs`` (n, d), n a multiple of B.

    Rows k B .. (k + 1) B - 1 form batch k. Networks are independent given the seed; the result is float64.
    """
    phi = parse_activation(phi) if isinstance(phi, str) else phi
    x = torch.as_tensor(np.asarray(inputs, dtype=float))
    n, d = x.shape
    if n % batch_size:
        raise ValueError(f"the number of inputs ({n}) must be a multiple of batch_size ({batch_size})")
    configure_torch()
    device = torch.device(device) if device is not None else default_device()
    gen = generator(seed, device)
    kernel = (x @ x.T / d).to(device).expand(n_networks, n, n)
    for _ in range(depth):
        root = _psd_factor(kernel)  # eigendecomposition: the input Gram may be singular (d < n)
        h = torch.randn(n_networks, width, n, generator=gen, device=device, dtype=root.dtype) @ root.mT
        h = batch_norm(h, sizes=(batch_size,) * (n // batch_size))
        kernel = gram(phi.torch(h))
    return kernel
