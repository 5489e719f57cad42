"""Daneshmand et al.'s Claim 5 (rank pre-training, Algorithm 1, lets vanilla SGD beat batch norm on deep MLPs) with
8 networks per arm, the paper's width, longer pre-training and fewer collapsed layers.

The chapter's book scale (width 48, 6 epochs, 75 Adam steps of pre-training, depths 10 to 50) trains networks
whose batch is at rank one before pre-training starts, where the gradient of r(H_L) vanishes. This record trains
pre-trained and batch-norm MLPs at the paper's width 128 and batch 64, with 4x the pre-training (300
steps), for 10 epochs, at depths 6 and 10 (fewer layers to collapse), at each rate of 0.03, 0.1, 0.3, 8 seeds per
cell, through ``bnsym.sweep`` on 2 single-threaded workers (float32: the training loop has no float64 option).
It stores each seed's final test accuracy and training loss and the r(H_L) the pre-training reached.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/records/daneshmand_pretraining.py
"""

from __future__ import annotations

from record import run, write

from bnsym.train import rank_training as rt

SIZES = {"depths": [6, 10], "models": ["pretrained", "bn"], "lrs": [0.03, 0.1, 0.3],
         "width": 128, "batch": 64, "epochs": 10, "n_seeds": 8, "pretrain_steps": 300}
KEYS = ("train_loss", "test_accuracy", "rank_bound")


def main() -> dict:
    configs = rt.grid(SIZES["depths"], SIZES["models"], SIZES["lrs"], width=SIZES["width"], batch=SIZES["batch"],
                      epochs=SIZES["epochs"], n_seeds=SIZES["n_seeds"], pretrain_steps=SIZES["pretrain_steps"])
    rows, cost = run("daneshmand_pretraining", "rank_training", configs)
    summary = [{**{key: row[key] for key in rt.GRID_KEYS},
                **{key: [[values[0], values[-1]] for values in row[key]] for key in KEYS}} for row in rows]
    return write("daneshmand_pretraining", "Claim 5: does rank pre-training beat batch norm at depths 6 and 10?",
                 SIZES, cost, rows=summary)


if __name__ == "__main__":
    main()
