"""Speed of the eps > 0 routes (bnsym.meanfield.epsilon): fixed point, gradient rate, a 200-eps rate line.

For each activation and batch size: the one-off build of the angular table (warm-up), then the best of a few
timings of ``fixed_point(phi, B, eps)``, ``gradient_rate(phi, B, eps)`` and ``gradient_rate(phi, B, eps=array of
200)``. Targets (issue #11): under 50 ms per fixed point or rate after warm-up, under 1 s for the 200-eps line.
Writes JSON with the machine description (default benchmarks/results/epsilon_routes.json).

    python benchmarks/epsilon_routes.py --batch 32 1024 --phi relu tanh "relu(beta=2)"
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

import bnsym

RESULT = Path(__file__).resolve().parent / "results" / "epsilon_routes.json"


def _best_time(run, repeats: int) -> float:
    """Fastest of ``repeats`` wall-clock timings (the least disturbed by other processes)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def _machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "load_average_1_5_15_min": os.getloadavg() if hasattr(os, "getloadavg") else None}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", "-B", type=int, nargs="+", default=[32, 1024])
    parser.add_argument("--phi", nargs="+", default=["relu", "tanh", "relu(beta=2)"])
    parser.add_argument("--eps", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULT)
    args = parser.parse_args(argv)

    line = np.logspace(-4, 1, 200)
    timings = []
    for spec in args.phi:
        for batch in args.batch:
            start = time.perf_counter()
            bnsym.fixed_point(spec, batch, eps=args.eps)  # builds the angular table of (phi, B) once
            row = {"phi": spec, "batch": batch, "eps": args.eps, "warm_up_s": time.perf_counter() - start}
            row["fixed_point_ms"] = 1e3 * _best_time(lambda: bnsym.fixed_point(spec, batch, eps=args.eps),
                                                     args.repeats)
            row["gradient_rate_ms"] = 1e3 * _best_time(lambda: bnsym.gradient_rate(spec, batch, eps=args.eps),
                                                       args.repeats)
            row["rate_line_200_eps_s"] = _best_time(lambda: bnsym.gradient_rate(spec, batch, eps=line), args.repeats)
            timings.append(row)
            print(", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
    config = {"eps": args.eps, "repeats": args.repeats, "line": "logspace(-4, 1, 200)"}
    result = {"machine": _machine(), "config": config, "timings": timings}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
