"""Speed of the two Monte Carlo samplers of bnsym.sim: explicit weights vs exact conditional (Gram) sampling.

Times forward + backward passes (bnsym.sim.simulate_gradients) and forward only (simulate_forward) of M
networks of width N, batch B, depth L, for each sampler, prints the speed ratios and writes them with the
machine description to a JSON file (default benchmarks/results/sampler_speed.json) that the book shows.

    python benchmarks/sampler_speed.py --width 1024 --batch 32 --networks 32 --depth 10
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from bnsym.sim import default_device, inputs_with_gram, simulate_forward
from bnsym.sim.gradients import simulate_gradients

RESULT = Path(__file__).resolve().parent / "results" / "sampler_speed.json"


def _best_time(run, repeats: int) -> float:
    """Fastest of ``repeats`` wall-clock timings (the least disturbed by other processes)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def _machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average_1_5_15_min": load,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(default_device()),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", "-N", type=int, default=1024)
    parser.add_argument("--batch", "-B", type=int, default=32)
    parser.add_argument("--networks", "-M", type=int, default=32)
    parser.add_argument("--depth", "-L", type=int, default=10)
    parser.add_argument("--phi", default="relu")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch CPU thread counts to time")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", type=Path, default=RESULT)
    args = parser.parse_args(argv)

    device = default_device()
    x0 = inputs_with_gram(np.eye(args.batch), args.width, args.networks, seed=0, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    timings = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        row = {"threads": threads}
        for sampler in ("weights", "gram"):
            def both(sampler=sampler):
                simulate_gradients(args.phi, x0, args.depth, sampler=sampler, seed=1, device=device, progress=False)
                sync()

            def forward(sampler=sampler):
                simulate_forward(args.phi, x0, args.depth, sampler=sampler, seed=1, device=device, progress=False)
                sync()

            row[f"{sampler}_forward_backward_s"] = _best_time(both, args.repeats)
            row[f"{sampler}_forward_s"] = _best_time(forward, args.repeats)
        row["ratio_forward_backward"] = row["weights_forward_backward_s"] / row["gram_forward_backward_s"]
        row["ratio_forward"] = row["weights_forward_s"] / row["gram_forward_s"]
        timings.append(row)
        print(f"threads={threads}: forward+backward weights {row['weights_forward_backward_s']:.3f} s, "
              f"gram {row['gram_forward_backward_s']:.3f} s, ratio {row['ratio_forward_backward']:.1f}x; "
              f"forward only ratio {row['ratio_forward']:.1f}x")
    result = {
        "config": {"width": args.width, "batch": args.batch, "networks": args.networks, "depth": args.depth,
                   "phi": args.phi, "dtype": "float64", "repeats": args.repeats,
                   "timing": "best of repeats, wall clock"},
        "machine": _machine(),
        "timings": timings,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")
    return result


if __name__ == "__main__":
    main()
