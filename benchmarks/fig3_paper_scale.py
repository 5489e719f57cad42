"""Fig 3a of Yang et al. (2019) at the paper's width and epochs on digits: a record, measured once.

The trainability chapter's Fig 3 grids run at width 64 for one epoch, so that the book builds in minutes. The paper
trains width 384 for 10 epochs (MNIST, SGD, lr = c B). This script runs one grid (SGD, relu, eps = 1e-3, the
chapter's ``LR_PER_EXAMPLE``) at width 384 and 10 epochs on digits through ``bnsym.sweep`` (a local Dask cluster
of single-threaded workers), each cell cached under ``_build/sweeps/fig3_paper_scale`` so that an interrupted run
resumes, and writes every cell's accuracies, the sweep's wall-clock time and the workers' CPU time. The depths
(20 and 35) are two of the paper's 5, 10, ..., 60 and the batch sizes two of its 4..256, one on each side of where
16 xi(B) crosses depth 35 (16 xi = 27.5 at B = 8, 40.8 at B = 128): the grid that finished within the hour on a
2-core CPU shared with some twenty other processes. The chapter shows the record; it does not rerun it.

    nice -n 10 python benchmarks/fig3_paper_scale.py        # the record (width 384, 10 epochs)
    python benchmarks/fig3_paper_scale.py --smoke           # a tiny grid, cache in a temporary folder
"""

from __future__ import annotations

import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from harness import HERE, parse, row, write

from bnsym import sweep
from bnsym.api import max_trainable_depth
from bnsym.train import LR_PER_EXAMPLE, grid

SIZES = {"default": {"width": 384, "epochs": 10, "n_seeds": 2, "depths": "20,35",
                     "batch_sizes": "8,128", "workers": 2},
         "smoke": {"width": 8, "epochs": 1, "n_seeds": 1, "depths": "2", "batch_sizes": "16", "workers": 1}}
CACHE = HERE.parent / "_build" / "sweeps" / "fig3_paper_scale"


def cost(config: dict) -> float:
    """Relative CPU cost of a cell on a CPU: depth x steps, a step's overhead dominating at small B."""
    return config["depth"] * (1 + 8 / config["batch_size"])


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=1)
    size = args.size
    depths = [int(d) for d in size["depths"].split(",")]
    batch_sizes = [int(b) for b in size["batch_sizes"].split(",")]
    configs = grid(depths, batch_sizes, width=size["width"], epochs=size["epochs"], n_seeds=size["n_seeds"],
                   optimizer="sgd", lr_per_example=LR_PER_EXAMPLE["sgd"])
    configs.sort(key=cost, reverse=True)  # the longest cells first: the last to finish are short
    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(scratch) if args.smoke else CACHE
        started = datetime.now(timezone.utc)
        start = time.perf_counter()
        with sweep.connect(n_workers=size["workers"]) as client:
            result = sweep.run("trainability", configs, cache, client=client)
        wall = time.perf_counter() - start
    assert not result.failures, result.failures
    rows = []
    for record in sorted(result.records, key=lambda r: (r["config"]["depth"], r["config"]["batch_size"])):
        c, r = record["config"], record["result"]
        rows.append(row(f"depth {c['depth']}, B = {c['batch_size']}", "trainability cell (SGD, relu)",
                        [record["seconds"]], ours_cpu=[record["cpu_seconds"]], depth=c["depth"],
                        batch_size=c["batch_size"], test_accuracy=r["test_accuracy"],
                        test_accuracies=r["test_accuracies"], chance=r["chance"],
                        max_trainable_depth=float(max_trainable_depth("relu", c["batch_size"]))))
    question = (f"Fig 3a at width {size['width']} and {size['epochs']} epochs on digits: which cells train, and how "
                f"long does the grid take on {size['workers']} Dask worker(s)?")
    return write("fig3_paper_scale", question, args, rows, started_utc=started.isoformat(timespec="seconds"),
                 sweep_wall_s=wall, executed=result.executed, cached=result.cached,
                 worker_seconds=sum(r["seconds"] for r in result.records),
                 worker_cpu_seconds=sum(r["cpu_seconds"] for r in result.records),
                 lr_per_example=LR_PER_EXAMPLE["sgd"])


if __name__ == "__main__":
    main()
