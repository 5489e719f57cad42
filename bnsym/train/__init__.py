"""Training batch-normalised MLPs on scikit-learn's digits: the harness of the trainability chapter (Sec. 4).

* ``bnsym.train.networks``: BN MLPs with many seeds in one tensor, ghost batch norm, population-statistics
  evaluation; ``bnsym.train.loop``: SGD / RMSProp training on the digits split of ``bnsym.core.digits``;
* :mod:`.dynamics`: per-layer norms over the first SGD steps (Fig 4);
* ``bnsym.train.trainability``: the sweep task of Figs 3 and 5 and the 16 xi analysis; :mod:`.maps`: accuracy
  maps.
"""

from .loop import Run, train
from .trainability import (
    LR_PER_EXAMPLE,
    MARGIN,
    best_factor,
    grid,
    line_agreement,
    readout_matched_lr,
    run_cell,
    trains,
)

__all__ = ["LR_PER_EXAMPLE", "MARGIN", "Run", "best_factor", "grid", "line_agreement", "readout_matched_lr", "run_cell",
           "train", "trains"]
