"""The BN-NNGP prior over a dataset: every pair of batches through every layer, in batched tensor operations.

Times ``bnsym.nngp.bn_nngp_priors`` on the first n standardised scikit-learn digits, cut into batches of B, at
depth L: k = ceil(n / B) batches, k (k - 1) / 2 cross blocks and k within-batch blocks per layer, each a 2-D
Gauss-Jacobi Laplace integral (bnsym.meanfield.crossbatch). The target (issue 13) is under a minute for
n = 1000, B = 32, L = 10 on 2 CPU cores. For scale, the same network without batch norm (the arc-cosine NNGP,
one n x n kernel per layer) is timed alongside; and at a small size, the batched recursion against one call of
``cross_batch_kernel_laplace`` per pair of batches and layer (what batching buys).

    python benchmarks/nngp_prior.py                       # n = 1000, B = 32, L = 10, 2 threads (--threads 1 2: both)
    python benchmarks/nngp_prior.py --device cuda         # on a GPU
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from harness import parse, row, synchronizer, threads, time_interleaved, write
from sklearn.datasets import load_digits

from bnsym.core.activations import parse_activation
from bnsym.meanfield.crossbatch import cross_batch_kernel_laplace
from bnsym.nngp import arccos_nngp_kernel, bn_nngp_priors, default_nodes, fill_batches

SIZES = {"default": {"n": 1000, "batch": 32, "depth": 10, "n_small": 192, "depth_small": 2},
         "smoke": {"n": 64, "batch": 16, "depth": 2, "n_small": 48, "depth_small": 1}}
TARGET_SECONDS = 60.0


def digits(n: int) -> np.ndarray:
    """The first n scikit-learn digits, each pixel standardised over the whole set (constant pixels stay 0)."""
    x = load_digits().data
    return ((x - x.mean(0)) / np.where(x.std(0) > 0, x.std(0), 1.0))[:n]


def pair_by_pair(x: np.ndarray, batch: int, depth: int, device: str) -> None:
    """The same recursion with one Laplace call per pair of batches and layer (the within-batch blocks as well)."""
    phi = parse_activation("relu")
    batches = torch.as_tensor(x[fill_batches(len(x), batch)], device=device)
    k = len(batches)
    gram = torch.cat(list(batches)) @ torch.cat(list(batches)).T / x.shape[1]
    for _ in range(depth):
        new = torch.empty_like(gram)
        for i in range(k):
            for j in range(i, k):
                rows = torch.cat([torch.arange(i * batch, (i + 1) * batch), torch.arange(j * batch, (j + 1) * batch)])
                block = cross_batch_kernel_laplace(phi, gram[rows][:, rows], batch, nodes=default_nodes(batch),
                                                   blocks="cross")
                new[i * batch:(i + 1) * batch, j * batch:(j + 1) * batch] = block
                new[j * batch:(j + 1) * batch, i * batch:(i + 1) * batch] = block.T
        gram = new


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(2,), default_repeats=1)  # the target is on 2 cores
    n, batch, depth = args.size["n"], args.size["batch"], args.size["depth"]
    small, depth_small = args.size["n_small"], args.size["depth_small"]
    device, sync = args.device, synchronizer(args.device)
    x, x_small = digits(n), digits(small)
    bn_nngp_priors("relu", x[: 2 * batch], [1], batch, device=device)  # untimed: derive and lambdify the kernels
    k = -(-n // batch)
    rows = []
    for count in args.threads if device == "cpu" else [torch.get_num_threads()]:
        with threads(count) as used:
            big = time_interleaved({"bn": lambda: bn_nngp_priors("relu", x, [depth], batch, device=device),
                                    "arccos": lambda: arccos_nngp_kernel("relu", x, None, depth)},
                                   args.repeats, sync, warmup=False)
            rows.append(row(f"prior of n = {n} digits, B = {batch}, depth {depth} ({k} batches, "
                            f"{k * (k + 1) // 2} blocks per layer)", "BN-NNGP, batched", big["bn"],
                            "arc-cosine NNGP without batch norm (for scale)", big["arccos"], threads=used,
                            ours_cpu=big.cpu["bn"], peer_cpu=big.cpu["arccos"],
                            target=f"median < {TARGET_SECONDS:g} s",
                            met=bool(np.median(big["bn"]) < TARGET_SECONDS)))
            few = time_interleaved({"batched": lambda: bn_nngp_priors("relu", x_small, [depth_small], batch,
                                                                      device=device),
                                    "pairs": lambda: pair_by_pair(x_small, batch, depth_small, device)},
                                   args.repeats, sync, warmup=False)
            rows.append(row(f"prior of n = {small} digits, B = {batch}, depth {depth_small}", "BN-NNGP, batched",
                            few["batched"], "one Laplace call per pair of batches and layer", few["pairs"],
                            threads=used, ours_cpu=few.cpu["batched"], peer_cpu=few.cpu["pairs"]))
    question = f"How long does the BN-NNGP prior of {n} inputs take, B = {batch}, depth {depth}?"
    return write("nngp_prior", question, args, rows)


if __name__ == "__main__":
    main()
