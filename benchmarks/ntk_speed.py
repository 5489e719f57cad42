"""The NTK of a depth-10 BN -> relu MLP at B = 32: forward tangent propagation against per-entry backward recursions,
both at the Laplace route's accuracy (about 1e-10 relative).

* ours, :func:`bnsym.meanfield.ntk_laplace.ntk_blocks` (what :func:`bnsym.arch.ntk` runs for this network): one
  B x B tangent block per layer, Theta' = K' + T(Theta), T the derivative of the cross-batch Laplace integral in the
  cross covariance (Price), written out alongside the integral, one pass per layer;
* the peer, Yang's (2020) reference method (the Tensor Programs II notebook), ported onto the same integrals
  (:func:`bnsym.meanfield.ntk_laplace.ntk_per_entry`): one backward recursion per entry (a, b),
  Pi <- E[J^T Pi J] by reverse mode from Pi = (e_a e_b^T + e_b e_a^T) / 2, Theta_ab = sum_l tr(Pi_l K^(x_l));
  B (B + 1) / 2 recursions. Its setup (the forward kernels and every layer's recorded integral, kept for all the
  entries) is timed with no entry; the per-entry time is timed on ``entries`` of them (each costs the same) and
  extrapolated to B (B + 1) / 2.

Both use the same Gauss-Jacobi rule (``nodes`` per axis), so they have the same accuracy: their entries agree to
rounding (``max_relative_difference``); the accuracy itself (``relative_error``) is the largest change of the NTK
against the rule with ``reference_nodes``, over its largest entry. The input Gram is a Wishart F F^T / (B + 8), F a
B x (B + 8) standard normal matrix. Wall clock on one thread, cases interleaved.

    python benchmarks/ntk_speed.py
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from harness import parse, row, threads, time_interleaved, write

from bnsym.core.activations import parse_activation
from bnsym.meanfield.ntk_laplace import ntk_blocks, ntk_per_entry

SIZES = {"default": {"batch": 32, "depth": 10, "nodes": 8, "reference_nodes": 16, "entries": 4},
         "smoke": {"batch": 16, "depth": 2, "nodes": 8, "reference_nodes": 12, "entries": 2}}


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=3)
    batch, depth, nodes = args.size["batch"], args.size["depth"], args.size["nodes"]
    factor = np.random.default_rng(0).standard_normal((batch, batch + 8))
    sigma = torch.as_tensor(factor @ factor.T / (batch + 8))
    phi = parse_activation("relu")
    pairs = [(a, b) for a in range(batch) for b in range(a, batch)]
    timed = [pairs[i] for i in np.random.default_rng(1).choice(len(pairs), args.size["entries"], replace=False)]
    none = np.zeros((0, 2))

    def forward(rule: int = nodes) -> np.ndarray:
        return ntk_blocks(phi, sigma[None], sigma.new_zeros(0, batch, batch), none, depth, rule)[0][0].numpy()

    cases = {"forward": forward, "setup": lambda: ntk_per_entry(phi, sigma, depth, [], nodes),
             "entries": lambda: ntk_per_entry(phi, sigma, depth, timed, nodes)}
    with threads(args.threads[0]) as used:
        times = time_interleaved(cases, args.repeats)
        value, reference = forward(), forward(args.size["reference_nodes"])
        backward = ntk_per_entry(phi, sigma, depth, timed, nodes).detach().numpy()
    first, second = zip(*timed)
    scale = np.abs(value).max()
    difference = float(np.max(np.abs(backward - value[first, second])) / scale)
    error = float(np.abs(value - reference).max() / scale)
    setup = np.array(times["setup"])
    each = (np.array(times["entries"]) - setup) / len(timed)
    extrapolated = list(setup + each * len(pairs))
    setup_cpu = np.array(times.cpu["setup"])
    cpu = list(setup_cpu + (np.array(times.cpu["entries"]) - setup_cpu) / len(timed) * len(pairs))
    rows = [row(f"NTK of a depth-{depth} BN -> relu MLP, B = {batch}, general input, Laplace route with {nodes} "
                "Gauss-Jacobi nodes per axis", "forward tangent propagation (Laplace, written-out derivative)",
                times["forward"],
                f"per-entry backward recursions (Yang's method on the same integrals, reverse mode; {len(pairs)} "
                f"entries, {len(timed)} timed, extrapolated)", extrapolated, threads=used,
                ours_cpu=times.cpu["forward"], peer_cpu=cpu, relative_error=error, peer_error="the same rule",
                max_relative_difference=difference, seconds_per_entry=float(np.median(each)),
                setup_s=float(np.median(setup)), target="at least 50x faster at equal accuracy (1e-8 relative)",
                met=bool(error < 1e-8 and difference < 1e-10
                         and np.median(extrapolated) >= 50 * np.median(times["forward"])))]
    question = (f"How much faster is the forward tangent propagation than one backward recursion per entry for the "
                f"B = {batch} NTK of a depth-{depth} BN -> relu MLP, at equal accuracy (1e-8)?")
    return write("ntk_speed", question, args, rows)


if __name__ == "__main__":
    main()
