"""Training batch-normalised MLPs on scikit-learn's digits: the harness of the trainability chapter (Sec. 4).

* ``bnsym.train.networks``: BN MLPs with many seeds in one tensor, ghost batch norm, population-statistics
  evaluation; ``bnsym.train.loop``: SGD / RMSProp training on the digits split of ``bnsym.core.digits``;
* :mod:`.dynamics`: per-layer norms over the first SGD steps (Fig 4);
* ``bnsym.train.trainability``: the sweep task of Figs 3 and 5 and the 16 xi analysis; :mod:`.maps`: accuracy
  maps;
* ``bnsym.train.rank_training``: the sweep task of Daneshmand et al.'s training experiments (rank pre-training,
  broken and uncentred batch norm, gradient alignment) and its verdicts;
* ``bnsym.train.bjorck``: the sweep task of Bjorck et al.'s training variants (chapter 12c) and its reading;
* ``bnsym.train.philipp``: Philipp et al.'s architectures on digits (a substitute for CIFAR-10), single against
  layer-wise step sizes, the sweep task ``philipp_training`` of chapter 7c.
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
