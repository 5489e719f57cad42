"""The empirical NTK of finite BN MLPs against the infinite-width theory, and how the gap scales with the width.

For each network ([Dense, BN, phi] * depth, B = 8 inputs with a Wishart Gram), ``seeds`` networks per width
(:func:`bnsym.sim.ntk.empirical_ntk`, exact per-example gradients over every parameter) give the mean NTK and its
standard error; against :func:`bnsym.arch.ntk` each width gives the largest |z| over the B (B + 1) / 2 entries, and
the fit mean(n) = a + b / n per entry (:func:`~bnsym.core.statistics.extrapolate_to_infinite_width`) gives the
extrapolated a and its |z|. The finite-width bias: its size per width, the Frobenius norm of (mean - theory) with
the sampling noise sum(SE^2) removed, and the slope of its logarithm against log n (-1 for a 1/n bias, -1/2 for
1/sqrt(n)). The timing is the simulation's (all widths and seeds), one thread.

    python benchmarks/ntk_finite_width.py
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np
from harness import parse, row, threads, write

from bnsym import arch
from bnsym.arch import Activation, BatchNorm, Dense, repeat
from bnsym.core.statistics import extrapolate_to_infinite_width, mc_tolerance
from bnsym.sim.ntk import empirical_ntk

SIZES = {"default": {"batch": 8, "widths": "256,512,1024,2048", "seeds": 32, "points": 16384},
         "smoke": {"batch": 8, "widths": "64,128,256", "seeds": 4, "points": 4096}}
NETWORKS = {"BN -> relu, depth 1": repeat([Dense(), BatchNorm(), Activation("relu")], 1),
            "BN -> relu, depth 2": repeat([Dense(), BatchNorm(), Activation("relu")], 2),
            "BN -> tanh, depth 2, eps 0.1, bias 0.5": repeat([Dense(bias_var=0.5), BatchNorm(eps=0.1),
                                                              Activation("tanh")], 2)}


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=1)
    batch, seeds = args.size["batch"], args.size["seeds"]
    widths = np.array([int(w) for w in args.size["widths"].split(",")])
    x = np.random.default_rng(1).standard_normal((batch, 16))
    sigma0 = x @ x.T / x.shape[1]
    upper = np.triu_indices(batch)
    rows = []
    with threads(args.threads[0]) as used:
        for label, net in NETWORKS.items():
            theory = arch.ntk(net, sigma0, with_error=True, points=args.size["points"])
            start = time.perf_counter()
            means, ses = [], []
            for width in widths:
                samples = np.stack([empirical_ntk(net, x, int(width), seed, device=args.device)
                                    for seed in range(seeds)])
                means.append(samples.mean(0)[upper])
                ses.append(samples.std(0, ddof=1)[upper] / np.sqrt(seeds))
            elapsed = time.perf_counter() - start
            means, ses, target, target_se = np.array(means), np.array(ses), theory.value[upper], theory.error[upper]
            z = np.abs(means - target) / np.sqrt(ses**2 + target_se**2)
            fits = [extrapolate_to_infinite_width(widths, means[:, i], ses[:, i]) for i in range(len(target))]
            intercept, intercept_se = np.array([f[0] for f in fits]), np.array([f[1] for f in fits])
            z_extrapolated = np.abs(intercept - target) / np.sqrt(intercept_se**2 + target_se**2)
            bias = np.sqrt(np.clip(np.sum((means - target) ** 2 - ses**2 - target_se**2, -1), 0.0, None))
            resolved = bias > 0
            slope = (float(np.polyfit(np.log(widths[resolved]), np.log(bias[resolved]), 1)[0])
                     if resolved.sum() >= 2 else None)
            k = mc_tolerance(seeds, n_comparisons=len(target) * len(widths))
            rows.append(row(f"{label}, B = {batch}, widths {[int(w) for w in widths]}, {seeds} seeds each",
                            "empirical NTK (autograd) vs bnsym.arch.ntk", [elapsed], threads=used,
                            max_abs_z_per_width=[float(v) for v in z.max(1)],
                            max_abs_z_extrapolated=float(z_extrapolated.max()),
                            bias_frobenius_per_width=[float(v) for v in bias],
                            bias_log_log_slope=slope, theory_relative_error=float(theory.error.max() /
                                                                                   np.abs(theory.value).max()),
                            target=f"every |z| below the Bonferroni t tolerance {k:.2f}",
                            met=bool(z.max() <= k)))
    question = ("Does the empirical NTK of finite BN MLPs converge to bnsym.arch.ntk, and does the finite-width bias "
                "scale like 1/n or 1/sqrt(n)?")
    return write("ntk_finite_width", question, args, rows)


if __name__ == "__main__":
    main()
