"""The BN-NNGP prior's cost model: time against n on 1 and 2 local Dask workers, its exponent and parallel efficiency.

Times ``bnsym.nngp.bn_nngp_priors(..., client=...)`` on n generated standard normal inputs (d = 64; the cost does not
depend on their values), batches of B, depth L: k = n / B batches make k (k - 1) / 2 pairs of batches, each iterated
through L cross-batch layer maps, so the time should grow as n^2 once the pairs dominate. Each worker count has its
own LocalCluster of single-threaded worker processes (glibc's adaptive malloc kept:
``bnsym.core.cluster.untrimmed_workers``), started (and warmed up) before timing. Reported: the time at
each n, the exponent p of a least-squares fit time = c n^p over the sizes run, and the parallel efficiency
t(1 worker) / (2 t(2 workers)); and the CPU seconds of the workers (summed), whose exponent is steadier than the wall
clock's on a busy machine (the CPU-time ratio, 1 worker's over 2 workers', is the work that distributing adds).
Sizes whose predicted time (the last measured one times (n / n_last)^2) would take the whole run past ``budget``
seconds are not run, and the JSON says so.

    python benchmarks/nngp_scaling.py                     # n = 256 ... 4096, B = 32, L = 10 (within the budget)
    python benchmarks/nngp_scaling.py --set budget=3600   # a larger time budget, seconds
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np
from distributed import Client, LocalCluster
from harness import fitted_exponent, parse, row, time_interleaved, write

from bnsym.core.cluster import untrimmed_workers
from bnsym.nngp import bn_nngp_priors

SIZES = {"default": {"n": "256,512,1024,2048,4096", "batch": 32, "depth": 10, "budget": 600.0},
         "smoke": {"n": "32,64", "batch": 16, "depth": 2, "budget": 60.0}}
WORKERS = (1, 2)
FEATURES = 64


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=1)
    sizes = [int(n) for n in args.size["n"].split(",")]
    batch, depth, budget = args.size["batch"], args.size["depth"], args.size["budget"]
    x = np.random.default_rng(0).standard_normal((max(sizes), FEATURES))
    with untrimmed_workers():
        clusters = {w: LocalCluster(n_workers=w, threads_per_worker=1, processes=True, dashboard_address=":0")
                    for w in WORKERS}
    clients = {w: Client(cluster) for w, cluster in clusters.items()}
    rows, skipped, times, cpu_times = [], [], {w: {} for w in WORKERS}, {w: {} for w in WORKERS}
    try:
        for client in clients.values():  # untimed: import bnsym and lambdify the kernels on every worker
            bn_nngp_priors("relu", x[: 4 * batch], [1], batch, device=args.device, client=client, chunk_batches=1)
        start, last = time.perf_counter(), None
        for n in sizes:
            spent = time.perf_counter() - start
            if last is not None:
                predicted = sum(min(times[w][last]) for w in WORKERS) * args.repeats * (n / last) ** 2
                if spent + predicted > budget:
                    skipped.append({"n": n, "predicted_s": predicted, "spent_s": spent})
                    continue
            names = {w: f"{w} worker{'s' if w > 1 else ''}" for w in WORKERS}
            cpu = {w: [] for w in WORKERS}
            cases = {names[w]: (lambda w=w: _timed_on_workers(clients[w], cpu[w], x[:n], batch, depth, args.device))
                     for w in WORKERS}
            timed = time_interleaved(cases, args.repeats, warmup=False)
            for w in WORKERS:
                times[w][n], cpu_times[w][n] = timed[names[w]], cpu[w]
            k = -(-n // batch)
            speedup = float(np.median(timed["1 worker"]) / np.median(timed["2 workers"]))
            rows.append(row(f"n = {n} ({k} batches, {k * (k - 1) // 2} pairs of batches per layer)", "2 workers",
                            timed["2 workers"], "1 worker", timed["1 worker"], n=n, batches=k,
                            ours_cpu=cpu[2], peer_cpu=cpu[1], parallel_efficiency=speedup / 2))
            last = n
    finally:
        for w in WORKERS:
            clients[w].close()
            clusters[w].close()
    exponents = {f"{w} worker{'s' if w > 1 else ''}": fitted_exponent(times[w]) for w in WORKERS}
    cpu_exponents = {f"{w} worker{'s' if w > 1 else ''}": fitted_exponent(cpu_times[w]) for w in WORKERS}
    efficiency = [line["parallel_efficiency"] for line in rows]
    question = (f"How does the BN-NNGP prior's time grow with n (B = {batch}, depth {depth}), and how much do 2 local "
                "workers gain over 1?")
    return write("nngp_scaling", question, args, rows, fitted_exponent=exponents, expected_exponent=2.0,
                 fitted_exponent_of_worker_cpu_time=cpu_exponents,
                 parallel_efficiency_at_largest_n=efficiency[-1] if efficiency else None,
                 not_run=skipped, budget_s=budget,
                 workers="LocalCluster, single-threaded worker processes (torch on one thread per task)")


def _timed_on_workers(client: Client, cpu: list[float], x: np.ndarray, batch: int, depth: int, device: str) -> None:
    """The prior of x on ``client``; appends the CPU seconds its workers spent (summed) to ``cpu``."""
    before = client.run(time.process_time)
    bn_nngp_priors("relu", x, [depth], batch, device=device, client=client)
    after = client.run(time.process_time)
    cpu.append(sum(after[worker] - before[worker] for worker in after))


if __name__ == "__main__":
    main()
