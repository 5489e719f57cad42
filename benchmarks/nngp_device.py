"""The BN-NNGP prior at data-set scale on one device (a GPU where there is one): all of digits, and up to n = 20,000.

Times ``bnsym.nngp.bn_nngp_priors("relu", x, [depth], B, device=...)`` with no cluster: first the prior of all
1797 scikit-learn digits (standardised pixels) at each ``chunks`` setting (batches per task; 0: the library's
default, which on a GPU is the largest tile that fits, and 4 is the CPU's default), then synthetic standard normal
inputs (d = 64; the cost does not depend on their values) at each n of ``n`` with the last ``chunks`` setting, up
to the time ``budget``: a size whose predicted time (the last one's times (n / n_last)^2, since k = n / B batches
make k (k - 1) / 2 pairs) would pass it is not run, and the JSON says so. Reported: seconds per size, pair-layers
per second, the fitted exponent of time against n (about 2 once the pairs dominate), and the GPU's peak memory
where there is one. The kernel matrix (n^2 float64) stays in host memory.

    python benchmarks/nngp_device.py --device cuda    # the committed GPU record
    python benchmarks/nngp_device.py                  # the same on the CPU (small sizes: --set n=1024,2048)
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import torch
from harness import fitted_exponent, parse, row, synchronizer, threads, write
from sklearn.datasets import load_digits

from bnsym.nngp import bn_nngp_priors

SIZES = {"default": {"n": "2048,4096,8192,20000", "batch": 32, "depth": 10, "chunks": "4,0", "budget": 300.0},
         "smoke": {"n": "64,128", "batch": 16, "depth": 2, "chunks": "0,4", "budget": 60.0}}
FEATURES = 64


def prior_seconds(x: np.ndarray, batch: int, depth: int, device: str, chunk: int) -> float:
    """Wall-clock seconds of one prior (``chunk`` 0: the library's default batches per task)."""
    sync = synchronizer(device)
    start = time.perf_counter()
    bn_nngp_priors("relu", x, [depth], batch, device=device, chunk_batches=chunk or None, max_memory=2**40)
    sync()
    return time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(2,), default_repeats=1)
    batch, depth, budget = args.size["batch"], args.size["depth"], args.size["budget"]
    chunks = [int(c) for c in args.size["chunks"].split(",")]
    digits = load_digits().data
    digits = (digits - digits.mean(0)) / np.where(digits.std(0) > 0, digits.std(0), 1.0)
    if args.smoke:
        digits = digits[:96]
    rows, skipped, times = [], [], {}
    cuda = args.device.startswith("cuda")
    with threads(args.threads[0]) as used:
        prior_seconds(digits[: 2 * batch], batch, 1, args.device, 0)  # untimed: kernels lambdified, device warmed
        for chunk in chunks:
            seconds = [prior_seconds(digits, batch, depth, args.device, chunk) for _ in range(args.repeats)]
            k = -(-len(digits) // batch)
            rows.append(row(f"{len(digits)} digits, B = {batch}, depth {depth} ({k} batches), "
                            f"chunk_batches {chunk or 'default'}", "bn_nngp_priors, no cluster", seconds,
                            threads=used, n=len(digits), chunk_batches=chunk or None))
        x = np.random.default_rng(0).standard_normal((max(int(n) for n in args.size["n"].split(",")), FEATURES))
        start, last = time.perf_counter(), None
        for n in (int(n) for n in args.size["n"].split(",")):
            if last is not None:
                predicted = min(times[last]) * args.repeats * (n / last) ** 2
                if time.perf_counter() - start + predicted > budget:
                    skipped.append({"n": n, "predicted_s": predicted})
                    continue
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            times[n] = [prior_seconds(x[:n], batch, depth, args.device, chunks[-1]) for _ in range(args.repeats)]
            k = -(-n // batch)
            pair_layers = (k * (k - 1) // 2 + k) * depth
            rows.append(row(f"n = {n} synthetic inputs, B = {batch}, depth {depth} ({k} batches, "
                            f"{k * (k - 1) // 2} pairs)", "bn_nngp_priors, no cluster", times[n], threads=used, n=n,
                            chunk_batches=chunks[-1] or None, pair_layers_per_s=pair_layers / min(times[n]),
                            gpu_peak_memory_gib=torch.cuda.max_memory_allocated() / 2**30 if cuda else None))
            last = n
    question = (f"How long does the BN-NNGP prior take on one {'GPU' if cuda else 'CPU'} for all of digits and for up "
                f"to {max(int(n) for n in args.size['n'].split(','))} points (B = {batch}, depth {depth})?")
    return write("nngp_device", question, args, rows, fitted_exponent=fitted_exponent(times), expected_exponent=2.0,
                 not_run=skipped, budget_s=budget)


if __name__ == "__main__":
    main()
