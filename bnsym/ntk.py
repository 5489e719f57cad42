"""The BN-NTK of a data set: the neural tangent kernel of the BN-NNGP's network (:mod:`bnsym.nngp`), over a data
set cut into batches.

The network is the BN-NNGP's, [Dense, BN, phi] * depth with f = v . x^L / sqrt(N) (weight variance 1, no bias,
eps = 0), every W^l and v trained in the NTK parametrisation; the training points are batched as
:func:`bnsym.nngp.fill_batches` does. The block of two batches is :func:`bnsym.arch.ntk_cross` on their joint input
Gram X X^T / d; within a batch, :func:`bnsym.arch.ntk`.
"""

from __future__ import annotations

import numpy as np

from .arch.network import check_sampling
from .arch.ntk import ntk_route
from .core.activations import Activation, parse_activation
from .core.layers import Activation as Layer
from .core.layers import BatchNorm, Dense, repeat
from .core.validation import (
    check_activation,
    check_batch_size,
    check_covariance,
    check_real_array,
    check_whole_number,
)
from .nngp import BatchedPrior, fill_batches


def bn_ntk(phi: str | Activation, X: np.ndarray, depth: int, batch_size: int, points: int = 2**12,
           replicates: int = 16, seed: int = 0) -> BatchedPrior:
    """The NTK over the m = k B training copies of ``X`` (n, d) cut into k batches of ``batch_size`` (``train``,
    with their rows ``train_rows``), the network and batching of the module docstring. One joint 2B x 2B tangent
    propagation per pair of batches (sampled: seconds each at B = 8); routes, arguments and errors as for
    :func:`bnsym.arch.ntk_cross`, whose error check every block passes."""
    X = check_real_array(X, "X (n, d)", 2)
    batch = check_batch_size(batch_size)
    activation = check_activation(parse_activation(phi), batch, slope=True)
    depth = check_whole_number(depth, "depth", 1, 10**4)
    sampling = check_sampling(points, replicates, seed)
    net = repeat([Dense(), BatchNorm(), Layer(activation)], depth)
    rows = fill_batches(len(X), batch)
    k = len(rows)
    full = np.zeros((k, batch, k, batch))
    for i in range(k):
        for j in range(i, k):
            x = X[np.concatenate([rows[i], rows[j]])] if j > i else X[rows[i]]
            gram = check_covariance(x @ x.T / X.shape[1])
            if j == i:
                full[i, :, i, :] = ntk_route(net, gram, sampling).value
            else:
                block = ntk_route(net, gram, sampling, (batch, batch)).value[:batch, batch:]
                full[i, :, j, :], full[j, :, i, :] = block, block.T
    return BatchedPrior(rows.ravel(), train=full.reshape(k * batch, k * batch))
