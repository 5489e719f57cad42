"""How far to trust bnsym.arch at a finite width: the reliability grid, a record measured once (chapter 15).

Every probe of ``bnsym.reliability.PROBES`` (each layer kind twice, after a Dense) on the three input Grams of
``GRAMS``, at batch sizes 4, 16 and 128 and widths 64 to 4096 (B n^2 at most 4 x 4096^2: width 4096 at B = 4,
up to 1024 at B = 16, up to 256 at B = 128; gelu at B <= 16, its quadrature's memory), ``networks_per_width``
twins per width (work 1e8: 6104 networks at width 64 and B = 4, at least 4 at every width): one sweep cell per
(probe, Gram, B) through ``bnsym.sweep`` (a local Dask cluster of four single-threaded workers), each cached under
``_build/sweeps/prediction_reliability`` so that an interrupted run resumes. The record
(``benchmarks/records/prediction_reliability.json``) holds every cell's theory, the twin's means and standard errors
per width, and the sweep's wall-clock and CPU time; the chapter reads it and reruns a small slice live. A first
record at work 1e6 and two Grams (80 s of CPU) left noise floors of 10-300 %: at 4 networks per width the t
quantile of the floor is large. ``--set key=value`` changes a size; the record's command repeats every change.

    python benchmarks/prediction_reliability.py          # the record
    python benchmarks/prediction_reliability.py --smoke  # a tiny grid, cache in a temporary folder
"""

from __future__ import annotations

import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from harness import HERE, parse, row, write

from bnsym import reliability, sweep

SIZES = {"default": {"batch_sizes": "4,16,128", "widths": "64,128,256,1024,4096", "grams": 3, "work": 1e8,
                     "max_square": 4 * 4096**2, "probes": 4, "workers": 4},
         "smoke": {"batch_sizes": "4", "widths": "16,32,64", "grams": 1, "work": 2e5, "max_square": 4 * 64**2,
                   "probes": 2, "workers": 1}}
CACHE = HERE.parent / "_build" / "sweeps" / "prediction_reliability"
RECORD = HERE / "records" / "prediction_reliability.json"


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=1)
    args.output = args.output or RECORD
    size = args.size
    cells = reliability.grid([int(b) for b in size["batch_sizes"].split(",")],
                             [int(w) for w in size["widths"].split(",")], size["work"], size["max_square"],
                             grams=reliability.GRAMS[:size["grams"]], backward_passes=size["probes"])
    cells.sort(key=lambda c: -c["batch_size"] * max(c["widths"]) ** 2)  # the long cells first
    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(scratch) if args.smoke else CACHE
        started = datetime.now(timezone.utc)
        start = time.perf_counter()
        with sweep.connect(n_workers=size["workers"]) as client:
            result = sweep.run(reliability.run_cell, cells, cache, client=client)
        wall = time.perf_counter() - start
    assert not result.failures, result.failures
    rows = [row(f"{r['config']['probe']}, {r['config']['gram']}, B = {r['config']['batch_size']}",
                "theory and twins at every width", [r["seconds"]], ours_cpu=[r["cpu_seconds"]],
                **r["config"], **r["result"]) for r in result.records]
    question = ("How far is bnsym.arch's forward variance, covariance and gradient statistic from finite twins, per "
                "layer kind, over input Grams, batch sizes and widths?")
    command = " ".join(["python benchmarks/prediction_reliability.py", *(["--smoke"] if args.smoke else []),
                        *(f"--set {item}" for item in args.set)])
    return write("prediction_reliability", question, args, rows, command=command,
                 started_utc=started.isoformat(timespec="seconds"), sweep_wall_s=wall, executed=result.executed,
                 cached=result.cached, worker_seconds=sum(r["seconds"] for r in result.records),
                 worker_cpu_seconds=sum(r["cpu_seconds"] for r in result.records))


if __name__ == "__main__":
    main()
