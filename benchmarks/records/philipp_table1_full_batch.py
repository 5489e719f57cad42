"""Philipp et al.'s Table 1, the batch-norm rows at the paper's batch of 10,000 points (all points in one batch).

Chapter 7 simulates every row of Table 1 at the book's batch of 2,000 points, where batch-norm rows differ from the
paper's by a known direction (their GSC falls as the batch grows). This record runs the eleven batch-norm rows at
B = 10,000, depth 50, 8 networks and datasets each (``bnsym.sim.philipp.table1_cell``, cells of 4 seeds) through
``bnsym.sweep`` on 2 single-threaded workers, and stores each network's GSC(L, 0), St. Dev. and sign diversity.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/records/philipp_table1_full_batch.py
"""

from __future__ import annotations

from record import run, write

N_POINTS, N_SEEDS, PER_CELL = 10_000, 8, 4
ROWS = [("relu", "batch", "gaussian", "none", "100"), ("tanh", "batch", "gaussian", "none", "100"),
        ("relu", "batch", "gaussian", "none", "200"), ("relu", "batch", "gaussian", "none", "100/200"),
        ("relu", "batch", "orthogonal", "none", "100"), ("tanh", "batch", "orthogonal", "none", "100"),
        ("relu", "batch", "looks-linear", "none", "100"), ("relu", "batch", "gaussian", "identity", "100"),
        ("tanh", "batch", "gaussian", "identity", "100"), ("relu", "batch", "gaussian", "gaussian", "100"),
        ("tanh", "batch", "gaussian", "gaussian", "100")]
FIELDS = ("phi", "norm", "matrix", "skip", "width")
METRICS = ("gsc", "std", "sign_diversity")


def main() -> dict:
    configs = [{**dict(zip(FIELDS, row)), "n_points": N_POINTS, "seeds": list(range(first, first + PER_CELL))}
               for row in ROWS for first in range(0, N_SEEDS, PER_CELL)]
    cells, cost = run("philipp_table1_full_batch", "bnsym.sim.philipp:table1_cell", configs)
    rows = []
    for row in ROWS:
        mine = [cell for cell in cells if tuple(cell[key] for key in FIELDS) == row]
        rows.append({**dict(zip(FIELDS, row)), **{m: [v for cell in mine for v in cell[m]] for m in METRICS}})
    return write("philipp_table1_full_batch", "Table 1's batch-norm rows at the paper's batch of 10,000 points",
                 {"n_points": N_POINTS, "n_seeds": N_SEEDS, "depth": 50}, cost, rows=rows)


if __name__ == "__main__":
    main()
