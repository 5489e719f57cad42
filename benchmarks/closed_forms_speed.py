"""The closed forms of bnsym, vectorised over batch sizes: one call for 1e5 values of B.

The BSB1 fixed point (Thm F.8), the gradient explosion rate (Thm 8) and the forward eigenvalues (Thm F.33) of
positive-homogeneous phi are lambdified SymPy derivations that take a numpy array of B. Times one public call
(``bnsym.fixed_point``, ``bnsym.gradient_rate``, ``bnsym.forward_eigenvalues``) over B = 4 .. 4 + count - 1,
input checks included; the target is under 20 ms each.

    python benchmarks/closed_forms_speed.py
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from harness import parse, row, threads, time_interleaved, write

import bnsym

SIZES = {"default": {"count": 100_000, "phis": "relu,leaky_relu(0.2),relu^1.5",
                     "functions": "fixed_point,gradient_rate,forward_eigenvalues"},
         "smoke": {"count": 1_000, "phis": "relu", "functions": "fixed_point"}}  # the others' first call derives them
TARGET_SECONDS = 0.020
FUNCTIONS = {"fixed_point": bnsym.fixed_point, "gradient_rate": bnsym.gradient_rate,
             "forward_eigenvalues": bnsym.forward_eigenvalues}


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=20)
    batches = np.arange(4, 4 + args.size["count"])
    rows = []
    for count in args.threads:
        with threads(count) as used:
            for spec in args.size["phis"].split(","):
                cases = {name: (lambda f=FUNCTIONS[name]: f(spec, batches))
                         for name in args.size["functions"].split(",")}
                times = time_interleaved(cases, args.repeats)
                for name in cases:
                    rows.append(row(f"{name}({spec!r}, {batches.size} values of B)", "bnsym closed form",
                                    times[name], threads=used, ours_cpu=times.cpu[name],
                                    target=f"median < {TARGET_SECONDS * 1e3:g} ms",
                                    met=bool(np.median(times[name]) < TARGET_SECONDS)))
    question = f"How long does one vectorised closed-form call take for {batches.size} batch sizes?"
    return write("closed_forms_speed", question, args, rows)


if __name__ == "__main__":
    main()
