"""The trainability experiment (Yang et al. 2019, Sec. 4, Figs 3 and 5) as a sweep task, and its analysis.

One cell of a grid is one configuration: ``run_cell({"depth": 20, "batch_size": 8, ...})`` trains
``n_seeds`` BN MLPs on digits (:func:`bnsym.train.loop.train`) and returns their test accuracies. A cell
*trains* when its mean test accuracy is more than ``MARGIN`` above chance. The paper predicts that
networks deeper than 16 xi(B) = 16 / log lambda_G(B) do not train (R19); :func:`line_agreement` counts how
often that holds on a grid, and :func:`best_factor` finds the factors c for which "trains iff depth < c xi"
misclassifies fewest cells.

Learning rate: lr = ``lr_per_example`` x (examples per step), the paper's linear scaling. The paper's 1e-5 B
is for 10 epochs of 60000 MNIST images; on 1437 digits for an epoch or two it leaves shallow networks near
chance, so the default is the optimiser's entry of ``LR_PER_EXAMPLE``, the best of the chapter's
learning-rate check (depth 8 and 24, B = 8 and 32, one epoch). :func:`readout_matched_lr` rescales it for another
phi so that the read-out's step stays that of relu (Fig 5b's shifted relus need a tenth of relu's rate).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..core.validation import (
    MAX_BATCH_SIZE,
    check_range,
    check_real_array,
    check_settings,
    check_whole_number,
)
from .loop import MAX_DEPTH, MAX_LR, check_network, check_training, train

LR_PER_EXAMPLE = {"sgd": 1e-2, "rmsprop": 1e-4}  # lr / B per optimiser, from the chapter's learning-rate check
MARGIN = 0.10  # a cell trains when its test accuracy exceeds chance by more than 10 points
DEFAULTS: dict[str, Any] = {"phi": "relu", "width": 128, "eps": 1e-3, "optimizer": "sgd",
                            "lr_per_example": None, "epochs": 2, "ghost_batch": None, "n_seeds": 2}
GRID_KEYS = ("depth", "batch_size")


def run_cell(config: Mapping[str, Any]) -> dict:
    """Train the configuration's seeds; ``{"test_accuracy": mean, "test_accuracies": [...], "chance", ...}``.

    ``config`` needs ``depth`` and ``batch_size``; the other keys default to ``DEFAULTS`` (``seed``: 0;
    ``lr_per_example``: the optimiser's ``LR_PER_EXAMPLE``).
    """
    c = validate(config)
    # One single-threaded task per worker process: more threads would oversubscribe the cores, and these
    # small products run fastest on one thread.
    torch.set_num_threads(1)
    run = train(c["phi"], c["depth"], c["width"], c["batch_size"], optimizer=c["optimizer"], eps=c["eps"],
                lr=c["lr_per_example"] * (c["ghost_batch"] or c["batch_size"]), epochs=c["epochs"],
                ghost_batch=c["ghost_batch"], n_seeds=c["n_seeds"], seed=c["seed"])
    return {"test_accuracy": float(run.test_accuracy.mean()), "test_accuracies": run.test_accuracy.tolist(),
            "train_loss": [float(x) for x in run.train_loss], "chance": run.chance}


def validate(config: Mapping[str, Any]) -> dict:
    """The configuration completed with ``DEFAULTS`` and checked (whole numbers as ints); ValueError naming a
    bad or unknown setting."""
    c = check_settings(config, DEFAULTS, GRID_KEYS, "trainability")
    if isinstance(c["optimizer"], str) and c["optimizer"] in LR_PER_EXAMPLE and c["lr_per_example"] is None:
        c["lr_per_example"] = LR_PER_EXAMPLE[c["optimizer"]]
    step_batch = c["batch_size"] if c["ghost_batch"] is None else c["ghost_batch"]
    (c["depth"], c["width"], c["batch_size"], step_batch, c["optimizer"], c["lr_per_example"], c["epochs"],
     c["n_seeds"]) = check_training(c["depth"], c["width"], c["batch_size"], step_batch, c["optimizer"],
                                    c["lr_per_example"], c["epochs"], c["n_seeds"])
    if c["ghost_batch"] is not None:
        c["ghost_batch"] = step_batch
    _, c["eps"], c["seed"], _, _ = check_network(c["phi"], c["batch_size"], c["eps"], c["seed"], torch.float32, "cpu")
    return c


def check_result(result: Mapping[str, Any]) -> str | None:
    """Why a stored result cannot be read as a cell (None if it can): its ``test_accuracy`` and ``chance`` must be
    numbers in [0, 1]. The sweep store sets such a record aside, naming its file, and computes it again."""
    for name in ("test_accuracy", "chance"):
        value = result.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            return f"its result's {name} is {str(value)[:40]!r}, not a number in [0, 1]"
    return None


run_cell.version = "2"  # part of each result's cache key: bump when the results of run_cell change
run_cell.validate = validate  # the sweep runner checks every configuration before submitting any
run_cell.check_result = check_result  # a stored result it rejects is set aside and computed again


def readout_matched_lr(phi: str, batch_size: int, eps: float = 1e-3, lr_per_example: float | None = None,
                       reference: str = "relu") -> float:
    """The learning rate per example for ``phi`` that gives the read-out the step ``lr_per_example`` gives it with
    ``reference`` (default: the SGD entry of ``LR_PER_EXAMPLE``, chosen for relu).

    The read-out W^{L+1} sees the last layer's output x^L, whose squared norm is N q* per example (q* the diagonal
    of the BSB1 fixed point Sigma*, Thm 4 / R16); its SGD step moves the logits by about lr N q* times the
    softmax error. Keeping lr q* fixed keeps that step fixed: c(phi) = c(reference) q*(reference) / q*(phi).
    relu(z + 2) has q* = 5.0 against relu's 0.50 (B = 32), so it gets a tenth of relu's rate.
    """
    from ..api import fixed_point

    base = LR_PER_EXAMPLE["sgd"] if lr_per_example is None else lr_per_example
    base = check_range(base, "lr_per_example", 0.0, MAX_LR, open_low=True, why="a learning rate is positive")
    q_phi, q_reference = (fixed_point(spec, batch_size, eps=eps).q for spec in (phi, reference))
    if not q_phi > 0:
        raise ValueError(f"phi = {phi!r} has q* = {q_phi:g} at B = {batch_size}, eps = {eps:g}: its read-out sees a "
                         "zero signal, and no learning rate matches the reference's step")
    return float(base * q_reference / q_phi)


def grid(depths: Sequence[int], batch_sizes: Sequence[int], **settings: Any) -> list[dict]:
    """Configurations of a depth x batch-size grid, ``settings`` shared (e.g. ``optimizer="rmsprop"``)."""
    depths = [check_whole_number(d, "depths", 1, MAX_DEPTH) for d in check_real_array(depths, "depths", 1)]
    batch_sizes = [check_whole_number(b, "batch_sizes", 2, MAX_BATCH_SIZE, "batch norm of one example is 0")
                   for b in check_real_array(batch_sizes, "batch_sizes", 1)]
    return [{"depth": d, "batch_size": b, **settings} for d in depths for b in batch_sizes]


def check_rows(rows: object, keys: Sequence[str]) -> list[Mapping[str, Any]]:
    """``rows``, a non-empty list of dicts (one per cell) that all have ``keys``."""
    if isinstance(rows, (Mapping, str)) or not hasattr(rows, "__iter__"):
        raise ValueError(f"rows must be a list of dicts, one per cell, got {rows!r:.80}")
    rows = list(rows)
    if not rows or not all(isinstance(row, Mapping) and set(keys) <= set(row) for row in rows):
        raise ValueError(f"rows must be a non-empty list of dicts with keys {', '.join(keys)}")
    return rows


def trains(rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """Whether each cell's mean test accuracy exceeds its chance level by more than ``MARGIN``."""
    rows = check_rows(rows, ("test_accuracy", "chance"))
    accuracy = check_real_array([row["test_accuracy"] for row in rows], "test_accuracy", low=0.0, high=1.0)
    chance = check_real_array([row["chance"] for row in rows], "chance", low=0.0, high=1.0)
    return accuracy > chance + MARGIN


def _cells(depths: object, line: object, trained: object, line_name: str) -> tuple[np.ndarray, ...]:
    """Depths, a line (max depths or xi: > 0, inf allowed) and the trained flags, one of each per cell."""
    depths = check_real_array(depths, "depths", 1, low=0.0)
    line = check_real_array(line, line_name, 1, low=0.0, open_low=True, infinite_ok=True)
    flags = np.asarray(trained)
    if flags.dtype != bool or not depths.shape == line.shape == flags.shape:
        raise ValueError(f"depths, {line_name} and trained must be arrays of one shape (trained of bools), got "
                         f"shapes {depths.shape}, {line.shape} and {flags.shape} ({flags.dtype})")
    return depths, line, flags


def line_agreement(depths: np.ndarray, max_depths: np.ndarray, trained: np.ndarray) -> dict[str, float | int]:
    """Fractions of the cells above the line (depth > max depth) and below it that train; NaN for a side without
    cells (a fraction of no cells is undefined)."""
    depths, max_depths, trained = _cells(depths, max_depths, trained, "max_depths")
    above = depths > max_depths
    return {"n_above": int(above.sum()), "n_below": int((~above).sum()),
            "train_above": float(trained[above].mean()) if above.any() else float("nan"),
            "train_below": float(trained[~above].mean()) if (~above).any() else float("nan")}


def best_factor(depths: np.ndarray, xi: np.ndarray, trained: np.ndarray) -> tuple[float, float, int]:
    """(low, high, errors): every c in (low, high] makes "trains iff depth < c xi" miss ``errors`` cells, the fewest.

    The rule changes only where c crosses a ratio depth / xi, so scanning the intervals between those ratios is
    exact; of several best intervals the one of smallest c is returned. ``high`` is inf when the best rule
    predicts every cell to train.
    """
    depths, xi, trained = _cells(depths, xi, trained, "xi")
    ratios = depths / xi
    # c in (bounds[j], bounds[j + 1]] predicts "trains" where ratio <= bounds[j]; xi = inf gives ratio 0, below any c
    bounds = np.concatenate([[0.0], np.unique(ratios[ratios > 0]), [np.inf]])
    errors = [int(np.sum((ratios <= bounds[j]) != trained)) for j in range(len(bounds) - 1)]
    best = int(np.argmin(errors))
    return float(bounds[best]), float(bounds[best + 1]), errors[best]
