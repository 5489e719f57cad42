"""bnsym.arch at B = 32: the three speed targets of the architectures issue, each on two inputs; and the networks
without batch norm against a plain numpy loop of the same closed form.

* the output kernel of a 50-block BN -> relu network (target 0.5 s): Laplace route per block;
* one phi -> BN layer to 1e-4 relative (target 1 s): at an exchangeable input the closed form (B p / (B - 1)) G,
  at a general input randomised quasi-Monte Carlo, whose relative error (max standard error / max |K|) is reported
  at each number of points;
* the signal propagation of a 50-block pre-activation ResNet (target 5 s): the stream is Gaussian and its kernel
  exact; the gradient through each block's BN -> relu is exact at a BSB1 input and by quasi-Monte Carlo (summed in
  closed form over the samples) at a general one.

Inputs: BSB1 is (1 - c) I + c 11^T with c = 0.3 (exchangeable); general is a Wishart Gram F F^T / (B + 8), F a
B x (B + 8) standard normal matrix (no symmetry). Timings are wall clock on one thread, cases interleaved.

Without batch norm (issue 44's speed table), at the general input: the kernel and NTK of [Dense(2, 0.1), relu] x 10
at B = 32 and 256 and of [Dense(1, 0.1), erf] x 3 at B = 16, each interleaved with a plain numpy loop of the same
closed forms (``benchmarks/arch_closed_forms.py``, which runs these alone). Target: within 5x of the loop in CPU
time (the best of the repeats), and the same values to 1e-12 of the largest entry (``ours_error``). The CPU time is
the measure here: the machine these records come from is shared, and wall clock counts the other jobs.
neural-tangents is not installed in this environment (it is no dependency of bnsym), so it is not timed here.

    python benchmarks/arch_speed.py
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from arch_closed_forms import closed_form_rows
from harness import parse, row, threads, time_interleaved, write

from bnsym import arch
from bnsym.arch import Activation, BatchNorm, Dense, Residual, repeat, serial

SIZES = {"default": {"batch": 32, "blocks": 50, "points": "1024,4096,16384", "relu_batches": "32,256",
                     "relu_depth": 10, "erf_batch": 16, "erf_depth": 3, "closed_repeats": 25},
         "smoke": {"batch": 8, "blocks": 3, "points": "256", "relu_batches": "8", "relu_depth": 2, "erf_batch": 8,
                   "erf_depth": 2, "closed_repeats": 2}}


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=3)
    batch, blocks = args.size["batch"], args.size["blocks"]
    points = [int(p) for p in args.size["points"].split(",")]
    factor = np.random.default_rng(0).standard_normal((batch, batch + 8))
    inputs = {"BSB1 input": 0.7 * np.eye(batch) + 0.3, "general input": factor @ factor.T / (batch + 8)}
    mlp = repeat([Dense(), BatchNorm(), Activation("relu")], blocks)
    phi_bn = [Dense(), Activation("relu"), BatchNorm()]
    resnet = serial(Dense(), repeat(Residual([BatchNorm(), Activation("relu"), Dense()]), blocks))
    rows = []
    with threads(args.threads[0]) as used:
        for label, sigma in inputs.items():
            cases = {"kernel": lambda sigma=sigma: arch.kernel(mlp, sigma, with_error=True)}
            phi_points = points if label == "general input" else points[:1]
            spp_points = points[:2] if label == "general input" else points[:1]
            cases.update({f"phi-bn {p}": (lambda sigma=sigma, p=p: arch.kernel(phi_bn, sigma, points=p,
                                                                                 with_error=True)) for p in phi_points})
            cases.update({f"spp {p}": (lambda sigma=sigma, p=p: arch.signal_propagation(resnet, sigma, points=p))
                          for p in spp_points})
            times = time_interleaved(cases, args.repeats)
            result = cases["kernel"]()
            median = float(np.median(times["kernel"]))
            rows.append(row(f"kernel of a {blocks}-block BN -> relu net, B = {batch}, {label}", "bnsym.arch.kernel",
                            times["kernel"], threads=used, ours_cpu=times.cpu["kernel"],
                            ours_error=float(result.error.max() / np.abs(result.value).max()), method=result.method,
                            target="under 0.5 s", met=median < 0.5))
            for p in phi_points:
                name = f"phi-bn {p}"
                result = cases[name]()
                error = float(result.error.max() / np.abs(result.value).max())
                rows.append(row(f"one relu -> BN layer, B = {batch}, {label}, {p} points x 16 replicates",
                                "bnsym.arch.kernel", times[name], threads=used, ours_cpu=times.cpu[name],
                                ours_error=error, method=result.method, target="1e-4 relative in under 1 s",
                                met=bool(error <= 1e-4 and np.median(times[name]) < 1)))
            for p in spp_points:
                name = f"spp {p}"
                result = cases[name]()
                error = float(np.max(result.gradient.error / result.gradient.value))
                rows.append(row(f"signal propagation of a {blocks}-block pre-activation ResNet, B = {batch}, {label}, "
                                f"{p} points x 16 replicates", "bnsym.arch.signal_propagation", times[name],
                                threads=used, ours_cpu=times.cpu[name], ours_error=error,
                                method=result.gradient.method, target="under 5 s",
                                met=bool(np.median(times[name]) < 5)))
        rows += closed_form_rows(args.size, used, args.size["closed_repeats"])
    question = (f"How fast are bnsym.arch's kernel, one phi -> BN layer and a whole signal propagation at B = {batch}, "
                "and how accurate (relative error: max error over max value)? Without batch norm, how far is it from "
                "a plain numpy loop of the same closed form?")
    return write("arch_speed", question, args, rows,
                 neural_tangents="not installed in this environment (no dependency of bnsym): not timed")


if __name__ == "__main__":
    main()
