"""The NTK of a depth-10 BN -> relu MLP at B = 32: forward tangent propagation against per-entry backward recursions.

* ours, :func:`bnsym.arch.ntk`: one B x B tangent block per layer, Theta' = Sigma' + E[J Theta J^T];
* the peer, Yang's (2020) reference method (the Tensor Programs II notebook), ported: one backward recursion per
  entry (a, b), Delta <- E[J^T Delta J] from Delta = (e_a e_b^T + e_b e_a^T) / 2, Theta_ab = K^out_ab + sum over the
  layers of tr(K^h Delta^h); B (B + 1) / 2 recursions.

Both evaluate every layer's expectation over the same quasi-Monte Carlo samples of the same graph (the same
per-sample Jacobians, :func:`bnsym.arch.ntk.chain_jacobian`, the same closed-form sums over them), so they have the
same accuracy: their entries agree to rounding (``max_relative_difference``), and the relative error of both
(``ours_error``: the largest standard error over the largest entry) is the sampling's. The per-entry route is timed
on ``entries`` of the B (B + 1) / 2 entries (every entry costs the same) and extrapolated: its setup (the graph,
the kernels and the samples, timed with no entry) plus the per-entry time times B (B + 1) / 2. The input Gram is a
Wishart F F^T / (B + 8), F a B x (B + 8) standard normal matrix. Wall clock on one thread, cases interleaved.

    python benchmarks/ntk_speed.py
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from harness import parse, row, threads, time_interleaved, write

from bnsym import arch
from bnsym.arch import Activation, BatchNorm, Dense, repeat
from bnsym.arch.backward import _sandwich
from bnsym.arch.graph import Sampling
from bnsym.arch.network import build
from bnsym.arch.ntk import chain_jacobian

SIZES = {"default": {"batch": 32, "depth": 10, "points": 4096, "replicates": 16, "entries": 6},
         "smoke": {"batch": 8, "depth": 2, "points": 2048, "replicates": 8, "entries": 2}}


def per_entry(net, sigma: np.ndarray, sampling: Sampling, entries: list[tuple[int, int]]) -> np.ndarray:
    """Yang's route for a [Dense, BN, relu] * depth MLP (weight_var 1, no bias): the entries (R, len(entries))."""
    graph, outputs, _ = build(net, sigma, sampling)
    layers = [(outputs[3 * i], [outputs[3 * i + 1], outputs[3 * i + 2]]) for i in range(len(outputs) // 3)]
    factors = [(dense, chain_jacobian(chain)) for dense, chain in layers]
    kernels = [dense.kernel().value for dense, _ in layers]
    out = outputs[-1].kernel().value
    values = []
    for a, b in entries:
        delta = np.zeros((1, len(sigma), len(sigma)))
        delta[0, a, b] += 0.5
        delta[0, b, a] += 0.5
        total = out[:, a, b]
        for (dense, (before, norm, after)), kernel in zip(reversed(factors), reversed(kernels)):
            delta = _sandwich(delta, before, norm, after)  # E[J^T Delta J]: the gradient's moment at the Dense output
            total = total + np.sum(delta * kernel, (-2, -1))
        values.append(total)
    return np.stack(values, -1) if values else np.zeros((sampling.replicates, 0))


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=2)
    batch, depth = args.size["batch"], args.size["depth"]
    sampling = Sampling(args.size["points"], args.size["replicates"], 0)
    factor = np.random.default_rng(0).standard_normal((batch, batch + 8))
    sigma = factor @ factor.T / (batch + 8)
    net = repeat([Dense(), BatchNorm(), Activation("relu")], depth)
    pairs = [(a, b) for a in range(batch) for b in range(a, batch)]
    timed = [pairs[i] for i in np.random.default_rng(1).choice(len(pairs), args.size["entries"], replace=False)]
    forward = lambda: arch.ntk(net, sigma, with_error=True, points=sampling.points,  # noqa: E731
                               replicates=sampling.replicates)
    cases = {"forward": forward, "setup": lambda: per_entry(net, sigma, sampling, []),
             "entries": lambda: per_entry(net, sigma, sampling, timed)}
    with threads(args.threads[0]) as used:
        times = time_interleaved(cases, args.repeats)
    result = forward()
    first, second = zip(*timed)
    backward = per_entry(net, sigma, sampling, timed).mean(0)
    difference = float(np.max(np.abs(backward - result.value[first, second]) / np.abs(result.value).max()))
    setup = np.array(times["setup"])
    each = (np.array(times["entries"]) - setup) / len(timed)
    extrapolated = list(setup + each * len(pairs))
    setup_cpu = np.array(times.cpu["setup"])
    cpu = list(setup_cpu + (np.array(times.cpu["entries"]) - setup_cpu) / len(timed) * len(pairs))
    rows = [row(f"NTK of a depth-{depth} BN -> relu MLP, B = {batch}, general input, {sampling.points} points x "
                f"{sampling.replicates} replicates", "forward tangent propagation (bnsym.arch.ntk)", times["forward"],
                f"per-entry backward recursions (Yang's method, {len(pairs)} entries; {len(timed)} timed, "
                "extrapolated)", extrapolated, threads=used, ours_cpu=times.cpu["forward"], peer_cpu=cpu,
                ours_error=float(result.error.max() / np.abs(result.value).max()), peer_error="the same samples",
                max_relative_difference=difference, seconds_per_entry=float(np.median(each)),
                setup_s=float(np.median(setup)), target="at least 50x faster at equal accuracy",
                met=bool(difference < 1e-10 and np.median(extrapolated) >= 50 * np.median(times["forward"])))]
    question = (f"How much faster is the forward tangent propagation than one backward recursion per entry for the "
                f"B = {batch} NTK of a depth-{depth} BN -> relu MLP, on the same samples (equal accuracy)?")
    return write("ntk_speed", question, args, rows)


if __name__ == "__main__":
    main()
