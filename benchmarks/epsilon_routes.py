"""The eps > 0 routes (bnsym.meanfield.epsilon): a fixed point, a gradient rate and a 200-eps rate line.

For each activation and batch size the first call builds the angular moments of (phi, B) once (timed apart, as
``warm_up_s``); then ``fixed_point(phi, B, eps)``, ``gradient_rate(phi, B, eps)`` and ``gradient_rate(phi, B,
eps=array of 200)`` are timed, interleaved. Targets (issues 11 and 18): under 50 ms per fixed point or rate after
the warm-up, under 1 s for the 200-eps line.

    python benchmarks/epsilon_routes.py
    python benchmarks/epsilon_routes.py --set "phis=relu,tanh" --set batches=32
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np
from harness import parse, row, threads, time_interleaved, write

import bnsym

SIZES = {"default": {"phis": "relu,tanh,relu(beta=2)", "batches": "32,1024", "eps": 0.1},
         "smoke": {"phis": "relu", "batches": "32", "eps": 0.1}}
TARGETS = {"fixed_point": 0.050, "gradient_rate": 0.050, "rate_line_200_eps": 1.0}
LINE = np.logspace(-4, 1, 200)


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=5)
    eps = args.size["eps"]
    rows = []
    for count in args.threads:
        with threads(count) as used:
            for spec in args.size["phis"].split(","):
                for batch in map(int, args.size["batches"].split(",")):
                    start = time.perf_counter()
                    bnsym.fixed_point(spec, batch, eps=eps)  # builds the angular moments of (phi, B) once
                    warm_up = time.perf_counter() - start
                    cases = {"fixed_point": lambda: bnsym.fixed_point(spec, batch, eps=eps),
                             "gradient_rate": lambda: bnsym.gradient_rate(spec, batch, eps=eps),
                             "rate_line_200_eps": lambda: bnsym.gradient_rate(spec, batch, eps=LINE)}
                    times = time_interleaved(cases, args.repeats)
                    for name, target in TARGETS.items():
                        rows.append(row(f"{name}({spec!r}, B = {batch}, eps = {eps:g})", "bnsym radial route",
                                        times[name], threads=used, ours_cpu=times.cpu[name], warm_up_s=warm_up,
                                        target=f"median < {target * 1e3:g} ms",
                                        met=bool(np.median(times[name]) < target)))
    question = "How long does a fixed point or a gradient rate at eps > 0 take once (phi, B) has been seen?"
    return write("epsilon_routes", question, args, rows)


if __name__ == "__main__":
    main()
