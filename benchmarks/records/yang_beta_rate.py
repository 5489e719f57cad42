"""Yang et al.'s Fig. 5b on digits with the learning rate controlled: is it the shift beta or the rate that lets the
networks train deeper? 8 networks per cell.

Chapter 10 trains relu(z + 2) at the rate c(2) matched to the read-out (a tenth of the chapter's c, about) and ReLU
at the full c, and finds the paper's direction. This record adds ReLU at the reduced rate c(2): every depth of the
book's grid (width 64, one epoch, B = 32, eps = 1e-3) for beta in {0, 2} at c and at c(2), 8 networks per cell,
through ``bnsym.sweep`` on 2 single-threaded workers, and stores each network's test accuracy.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/records/yang_beta_rate.py
"""

from __future__ import annotations

from record import run, write

from bnsym import scale
from bnsym.train import LR_PER_EXAMPLE, readout_matched_lr

BETAS = (0.0, 2.0)
N_SEEDS = 8


def main() -> dict:
    sizes = scale.SCALES["book"].trainability
    batch = sizes.maps.batch_size
    rates = {"c": LR_PER_EXAMPLE["sgd"], "c(2)": readout_matched_lr("relu(beta=2)", batch, eps=1e-3)}
    arms = [(beta, rate) for beta in BETAS for rate in rates]
    configs = [{"depth": depth, "batch_size": batch, "phi": f"relu(beta={beta:g})", "eps": 1e-3,
                "lr_per_example": rates[rate], "width": sizes.grid.width, "epochs": sizes.grid.epochs,
                "n_seeds": N_SEEDS} for beta, rate in arms for depth in sizes.grid.depths]
    rows, cost = run("yang_beta_rate", "trainability", configs)
    summary = [{"beta": beta, "rate": rate, "lr_per_example": rates[rate], "depth": row["depth"],
                "test_accuracies": row["test_accuracies"], "chance": row["chance"]}
               for (beta, rate), row in zip([arm for arm in arms for _ in sizes.grid.depths], rows)]
    return write("yang_beta_rate", "Fig. 5b: beta = 0 and 2 at the full and the read-out-matched rate",
                 {"depths": list(sizes.grid.depths), "width": sizes.grid.width, "epochs": sizes.grid.epochs,
                  "batch_size": batch, "n_seeds": N_SEEDS, "eps": 1e-3, "rates": rates}, cost, rows=summary)


if __name__ == "__main__":
    main()
