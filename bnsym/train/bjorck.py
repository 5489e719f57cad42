"""Bjorck et al.'s training experiments on digits as a sweep task (Table 2, Figs 1, 15-17, App. J), and their reading.

One cell is one way of normalising (:class:`bnsym.sim.bjorck_training.Norm`: the parts of batch norm kept, BN on
the top blocks or the head only, alternating statistics, a warm start) trained at every rate of ``lrs`` with
``n_seeds`` networks per rate, all in one batched run: ``run_cell({"keep": ["mu", "sigma"], "lrs": [0.1, 0.01]})``.
Cells with the same ``seed`` start from the same weights and see the same minibatches, so their differences are
paired per seed. The reading: :func:`stable` (a run that neither diverged nor stayed near chance),
:func:`max_stable_lr` and :func:`best_lr` per seed, and :func:`paired` (mean difference and its standard error
over seeds).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from ..core.digits import digits
from ..core.statistics import mean_and_se
from ..core.validation import (
    check_choice,
    check_flag,
    check_range,
    check_real_array,
    check_seed,
    check_settings,
    check_whole_number,
)
from ..sim.bjorck_training import PARTS, Norm, train_networks

DEFAULTS: dict[str, Any] = {"keep": list(PARTS), "top": None, "head": False, "alternate": False, "warm_epochs": 0,
                            "warm_lr": 1e-4, "lrs": [0.1, 0.01, 0.001], "n_seeds": 2, "blocks": 8, "width": 32,
                            "epochs": 10, "n_evals": 1, "seed": 0}
MAX_BLOCKS, MAX_WIDTH, MAX_EPOCHS, MAX_NETWORKS = 1000, 4096, 10**4, 10**4
STABLE_TRAIN_ACCURACY = 0.2  # a run ending below 20 % training accuracy (chance 10 %) has not learned


def validate(config: Mapping[str, Any]) -> dict:
    """The configuration completed with ``DEFAULTS`` and checked; ValueError naming a bad or unknown setting."""
    c = check_settings(config, DEFAULTS)
    if isinstance(c["keep"], str) or not hasattr(c["keep"], "__iter__"):
        raise ValueError(f"keep must be a list of batch norm's parts ({', '.join(PARTS)}), got {c['keep']!r:.80}")
    c["keep"] = sorted({check_choice(part, "keep", PARTS) for part in c["keep"]}, key=PARTS.index)
    c["blocks"] = check_whole_number(c["blocks"], "blocks", 1, MAX_BLOCKS, "the blocks run one after another")
    if c["top"] is not None:
        c["top"] = check_whole_number(c["top"], "top (blocks with BN)", 0, c["blocks"], "there are only that many")
    c["head"], c["alternate"] = check_flag(c["head"], "head"), check_flag(c["alternate"], "alternate")
    c["width"] = check_whole_number(c["width"], "width", 1, MAX_WIDTH, "a block holds 2 width^2 weights")
    c["epochs"] = check_whole_number(c["epochs"], "epochs", 1, MAX_EPOCHS)
    c["n_evals"] = check_whole_number(c["n_evals"], "n_evals", 1, c["epochs"], "one evaluation per epoch at most")
    c["warm_epochs"] = check_whole_number(c["warm_epochs"], "warm_epochs", 0, MAX_EPOCHS)
    c["warm_lr"] = check_range(c["warm_lr"], "warm_lr", 0.0, 1e6, open_low=True, why="an SGD step size")
    c["lrs"] = [float(lr) for lr in check_real_array(c["lrs"], "lrs", 1, 0.0, 1e6, open_low=True)]
    c["n_seeds"] = check_whole_number(c["n_seeds"], "n_seeds", 1, MAX_NETWORKS, "networks train side by side")
    if len(c["lrs"]) * c["n_seeds"] > MAX_NETWORKS:
        raise ValueError(f"len(lrs) x n_seeds = {len(c['lrs']) * c['n_seeds']} networks exceed {MAX_NETWORKS}")
    c["seed"] = check_seed(c["seed"])
    return c


def run_cell(config: Mapping[str, Any]) -> dict:
    """Train the cell's networks; per rate (axis 0) and seed (axis 1): ``diverged``, final ``train_accuracy`` and
    ``test_accuracy``, and the curves ``train_curve``/``test_curve`` at ``curve_epochs`` (None where diverged)."""
    c = validate(config)
    torch.set_num_threads(1)  # one single-threaded task per worker process
    norm = Norm.keeping(c["keep"], top=c["top"], head=c["head"], alternate=c["alternate"])
    run = train_networks(digits(), c["blocks"], c["width"], norm, np.repeat(c["lrs"], c["n_seeds"]), c["epochs"],
                         c["seed"], c["n_evals"], c["warm_epochs"], c["warm_lr"])
    shape = (len(c["lrs"]), c["n_seeds"])

    def listed(values: np.ndarray, *extra: int) -> list:
        return np.where(np.isnan(values), None, values).reshape(shape + extra).tolist()

    return {"diverged": run.diverged.reshape(shape).tolist(), "curve_epochs": run.epochs.tolist(),
            "train_accuracy": listed(run.train_accuracy[:, -1]), "test_accuracy": listed(run.test_accuracy[:, -1]),
            "train_curve": listed(run.train_accuracy, len(run.epochs)),
            "test_curve": listed(run.test_accuracy, len(run.epochs))}


run_cell.version = "1"  # part of each result's cache key: bump when the results of run_cell change
run_cell.validate = validate


def _array(row: Mapping[str, Any], key: str) -> np.ndarray:
    """A (rates, seeds[, evals]) result of ``row`` as floats, None as NaN."""
    return np.array(row[key], dtype=float)


def stable(row: Mapping[str, Any]) -> np.ndarray:
    """(rates, seeds) bools: the run neither diverged nor ended below ``STABLE_TRAIN_ACCURACY`` training accuracy."""
    return (_array(row, "train_accuracy") > STABLE_TRAIN_ACCURACY) & ~np.array(row["diverged"], dtype=bool)


def max_stable_lr(row: Mapping[str, Any]) -> np.ndarray:
    """Per seed, the largest rate of the cell at which that seed's run is :func:`stable` (NaN if none)."""
    lrs, ok = np.array(row["lrs"], dtype=float), stable(row)
    return np.array([lrs[ok[:, s]].max() if ok[:, s].any() else np.nan for s in range(ok.shape[1])])


def test_accuracy(row: Mapping[str, Any]) -> np.ndarray:
    """(rates, seeds) final test accuracies, a diverged run counted as 0."""
    return np.nan_to_num(_array(row, "test_accuracy"), nan=0.0)


def best_lr(row: Mapping[str, Any]) -> tuple[float, np.ndarray]:
    """The rate of highest mean final test accuracy over seeds (the paper picks by test accuracy), and the seeds'
    test accuracies there."""
    accuracy = test_accuracy(row)
    best = int(np.argmax(accuracy.mean(1)))
    return float(row["lrs"][best]), accuracy[best]


def paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """Mean of a - b over seeds (paired: the same seed, the same initial weights and minibatches), its standard
    error and z = mean / se (inf for a nonzero mean without spread, 0 for none at all)."""
    estimate = mean_and_se(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    z = estimate.value / estimate.error if estimate.error > 0 else (np.inf * np.sign(estimate.value) if estimate.value
                                                                  else 0.0)
    return float(estimate.value), float(estimate.error), float(z)
