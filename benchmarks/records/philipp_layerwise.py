"""Philipp et al.'s Table 2 claim (layer-wise step sizes train the exploding architectures better than one step
size) at the paper's depth, where they explode, with 8 networks per architecture.

The chapter's book scale (depth 16) leaves three of the four exploding architectures with GSC(L, 0) below 2; at
depth 50 (the paper's 51 layers less one) batch-ReLU's is about 5000 and the normalised tanh networks' 35 to 65.
This record trains the four (``bnsym.train.philipp.EXPLODING``) at depth 50, width 32, ``EPOCHS`` epochs, 8
networks each, both schemes from the same initial weights, through ``bnsym.sweep`` on 2 single-threaded workers,
and stores each network's final training error per scheme: the chapter computes the verdicts with
``bnsym.train.philipp.layerwise_gain`` and ``bnsym.core.statistics.paired_verdict``.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/records/philipp_layerwise.py
"""

from __future__ import annotations

import numpy as np
from record import run, write

from bnsym.train import philipp

SIZES = {"depth": 50, "width": 32, "epochs": 8, "n_seeds": 8, "n_probe": 256, "batch_size": 128}


def main() -> dict:
    configs = [{"phi": phi, "norm": norm, "matrix": matrix, "skip": skip, **SIZES}
               for phi, norm, matrix, skip in philipp.EXPLODING]
    rows, cost = run("philipp_layerwise", "philipp_training", configs)
    summary = [{**{key: row[key] for key in ("phi", "norm", "matrix", "skip")},
                "gsc_init": float(np.exp(np.log(np.asarray(row["gsc_init"], dtype=float)[:, 0]).mean())),
                **{scheme: {"error": [[e[-1]] for e in row[scheme]["error"]], "values": row[scheme]["values"],
                            "best": row[scheme]["best"]} for scheme in philipp.SCHEMES}} for row in rows]
    return write("philipp_layerwise", "Table 2: do layer-wise step sizes beat one step size at depth 50?", SIZES,
                 cost, rows=summary)


if __name__ == "__main__":
    main()
