"""Chapter 12c's claims (E2, E5, E9, E11, E12) at the chapter's book-scale network, with 16 networks per arm.

The chapter trains 4 seeds per rate and variant at book scale; a verdict needs at least 8 networks per arm. This
record trains every variant of ``bnsym.train.bjorck.VARIANTS`` and the warm start at the chapter's book sizes
(12 blocks of width 32, 6 epochs, the 7 rates 1 ... 0.001, seed 2018) with ``n_seeds`` networks per rate, through
``bnsym.sweep`` on 2 single-threaded workers, and stores each cell's final accuracies and divergences (no curves):
the chapter recomputes every claim's verdict from them with ``bnsym.train.bjorck.claim_verdicts``.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/records/bjorck_ablations.py
"""

from __future__ import annotations

import dataclasses

from record import run, write

from bnsym import scale
from bnsym.train import bjorck

SEED = 2018  # the chapter's
N_SEEDS = 16
KEYS = ("lrs", "diverged", "train_accuracy", "test_accuracy")  # what the claims read: no curves


def main() -> dict:
    sizes = scale.SCALES["book"].products.training
    common = dict(blocks=sizes.depth, width=sizes.width, epochs=sizes.epochs, n_seeds=N_SEEDS, n_evals=1,
                  lrs=list(sizes.learning_rates), seed=SEED)
    rows, cost = run("bjorck_ablations", "bjorck_training", [{**common, **v} for v in bjorck.VARIANTS.values()])
    named = dict(zip(bjorck.VARIANTS, rows))
    warm, warm_cost = run("bjorck_ablations", "bjorck_training",
                          [{**common, **v} for v in bjorck.warm_start(named).values()])
    named["warm start"] = warm[0]
    cost = {key: cost[key] + warm_cost[key] if key != "workers" else cost[key] for key in cost}
    return write("bjorck_ablations", "Chapter 12c's claims with 16 networks per arm at the book's network",
                 {**dataclasses.asdict(sizes), "n_networks": N_SEEDS, "seed": SEED}, cost,
                 rows={name: {key: row[key] for key in KEYS} for name, row in named.items()})


if __name__ == "__main__":
    main()
