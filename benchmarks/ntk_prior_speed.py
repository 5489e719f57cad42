"""The NTK of 1000 digits against the BN-NNGP prior of the same data: batches of 32, depth 10, relu.

* ours, :func:`bnsym.nngp.ntk.ntk_blocks_laplace`: every within-batch block and every pair of batches' cross block of
  the NTK, one pass through the cross-batch Laplace integral and its derivative per layer (the kernel and the tangent
  kernel together), at its default rule (``tangent_nodes``) and at the prior's (``nodes``);
* the reference, :func:`bnsym.nngp.block_prior`: the same blocks of the BN-NNGP prior K^L, its default rule.

The digits (scikit-learn, scaled to [0, 1]) are cut into k = ceil(n / B) batches, the last wrapping around, and all
k (k - 1) / 2 pairs are mapped, as :func:`bnsym.nngp.bn_nngp_prior` does. ``relative_change`` is the largest change
of the NTK from the prior's rule to the default one, over its largest entry. Wall clock and process CPU time on one
thread (the CPU time is the steadier on a shared machine).

    python benchmarks/ntk_prior_speed.py
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from harness import parse, row, threads, time_interleaved, write
from sklearn.datasets import load_digits

from bnsym.meanfield.ntk_laplace import tangent_nodes
from bnsym.nngp import block_prior, default_nodes, fill_batches
from bnsym.nngp.ntk import ntk_blocks_laplace

SIZES = {"default": {"n": 1000, "batch": 32, "depth": 10},
         "smoke": {"n": 64, "batch": 16, "depth": 2}}


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=1)
    n, batch, depth = args.size["n"], args.size["batch"], args.size["depth"]
    x = load_digits().data[:n] / 16
    batches = x[fill_batches(n, batch)]
    k = len(batches)
    pairs = np.array([(i, j) for i in range(k) for j in range(i + 1, k)], dtype=int).reshape(-1, 2)
    prior_nodes = default_nodes(batch)
    results = {}
    cases = {"ntk": lambda: results.__setitem__("ntk", ntk_blocks_laplace("relu", batches, pairs, depth)),
             "ntk at the prior's rule": lambda: results.__setitem__(
                 "coarse", ntk_blocks_laplace("relu", batches, pairs, depth, nodes=prior_nodes)),
             "prior": lambda: block_prior("relu", batches, pairs, [depth])}
    with threads(args.threads[0]) as used:
        times = time_interleaved(cases, args.repeats, warmup=False)
    fine, coarse = (np.concatenate([w.ravel(), c.ravel()]) for w, c in (results["ntk"], results["coarse"]))
    change = float(np.abs(fine - coarse).max() / np.abs(fine).max())
    case = f"{n} digits, {k} batches of {batch} ({len(pairs)} pairs), depth {depth}, relu"
    peer = f"BN-NNGP prior blocks (block_prior, {prior_nodes} nodes)"
    rows = [row(case, f"NTK blocks (ntk_blocks_laplace, {nodes} nodes)", times[name], peer, times["prior"],
                threads=used, ours_cpu=times.cpu[name], peer_cpu=times.cpu["prior"], relative_change=change,
                target="at most 2x the prior's time", met=bool(np.median(times.cpu[name])
                                                               <= 2 * np.median(times.cpu["prior"])))
            for name, nodes in (("ntk", tangent_nodes(batch)), ("ntk at the prior's rule", prior_nodes))]
    question = (f"How long does the NTK of {n} digits (B = {batch}, depth {depth}) take against the BN-NNGP prior of "
                "the same data?")
    return write("ntk_prior_speed", question, args, rows)


if __name__ == "__main__":
    main()
