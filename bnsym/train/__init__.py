"""Training networks: the one loop (``bnsym.train.loop.Optimizer``: SGD, momentum with weight decay, RMSProp, Adam,
a step size per network or per network and layer, divergence parking) and each paper's experiment on it.

* ``bnsym.train.networks``: BN MLPs with many seeds in one tensor, ghost batch norm, population-statistics
  evaluation; ``bnsym.train.loop``: the loop, and SGD / RMSProp training of those MLPs on the digits split of
  ``bnsym.core.digits`` (Yang et al. Sec. 4);
* :mod:`.dynamics`: per-layer norms over the first SGD steps (Fig 4);
* ``bnsym.train.trainability``: the sweep task of Figs 3 and 5 and the 16 xi analysis; :mod:`.maps`: accuracy
  maps;
* ``bnsym.train.rank_training``: the sweep task of Daneshmand et al.'s training experiments (rank pre-training,
  broken and uncentred batch norm, gradient alignment) and its verdicts;
* ``bnsym.train.daneshmand``: Daneshmand et al.'s MLPs trained on digits (rank pre-training, then SGD);
* ``bnsym.train.bjorck``: Bjorck et al.'s digit ResNet trained (chapter 12: learning-rate grid, loss along the
  gradient; chapter 12c: the sweep task of the training variants and its reading);
* ``bnsym.train.tangent``: finite twins trained in the kernel regime on fixed BN batches (chapter 09b);
* ``bnsym.train.philipp``: Philipp et al.'s architectures on digits (a substitute for CIFAR-10), single against
  layer-wise step sizes, the sweep task ``philipp_training`` of chapter 7c.
"""

from .loop import Optimizer, Run, train
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

__all__ = ["LR_PER_EXAMPLE", "MARGIN", "Optimizer", "Run", "best_factor", "grid", "line_agreement",
           "readout_matched_lr", "run_cell", "train", "trains"]
