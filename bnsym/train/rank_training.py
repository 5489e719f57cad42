"""Daneshmand et al. 2020's training experiments (Figs. 4-7 and 10-13) on digits, as a sweep task, and their analysis.

One cell is one configuration: ``run_cell({"depth": 30, "model": "pretrained", "lr": 0.03, ...})`` trains
``n_seeds`` ReLU MLPs at once (:func:`bnsym.train.daneshmand.train_digits`) and returns, per seed and epoch, the
training and test loss, the test accuracy, the rank lower bound r(H_L) (eq. 4) and the mean |cos| of the last
layer's per-example gradients (Fig. 10), of the whole read-out and of one row. The models (``MODELS``):

* ``vanilla``: PyTorch's default init, no batch norm; ``pretrained``: the same after Algorithm 1 (Adam steps
  maximising r(H_L), rate 1e-3); ``pretrained_layerwise``: maximising the sum of r(H_l) over the hidden layers
  (the paper's Fig. 6 "layer-wise", rate ``LAYERWISE_LR``);
* ``bn``: batch norm with centring; ``bn_uncentred``: without (Fig. 7); ``bn_asymmetric``: with centring, weights
  U[0, 2/sqrt(fan_in)] (Figs. 5, 13).

:func:`best_rows` keeps, per depth and model, the learning rate with the lowest mean final training loss (the
paper's grid search); :func:`difference` compares two models over their seeds, :func:`verdict` with k from
:func:`tolerance` says whether a claim holds.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..core.estimate import Estimate
from ..core.validation import check_choice, check_settings
from ..rank import differentiable_rank_bound, gradient_alignment
from ..sim import mc_tolerance, mean_and_se
from . import daneshmand

LAYERWISE_LR = 1e-2  # Adam's rate for the layer-wise pre-training: 1e-3 barely moves r(H_l); 3e-2 kills layers
MODELS = {"vanilla": dict(bn=False), "pretrained": dict(bn=False),
          "pretrained_layerwise": dict(bn=False, layerwise=True, pretrain_lr=LAYERWISE_LR), "bn": dict(bn=True),
          "bn_uncentred": dict(bn=True, centre=False), "bn_asymmetric": dict(bn=True, init="asymmetric")}
DEFAULTS: dict[str, Any] = {"width": 128, "batch": 64, "epochs": 10, "n_seeds": 4, "n_train": None,
                            "pretrain_steps": 75}
GRID_KEYS = ("depth", "model", "lr")
FALSE_ALARM = 1e-2  # chance that noise alone decides some verdict of a family of comparisons
SERIES = ("train_loss", "test_loss", "test_accuracy", "rank_bound", "alignment", "row_alignment")


def validate(config: Mapping[str, Any]) -> dict:
    """The configuration completed with ``DEFAULTS`` and ``seed`` 0; ValueError naming a bad or unknown setting (the
    sizes themselves are checked by the simulator)."""
    c = check_settings(config, DEFAULTS, GRID_KEYS, "rank-training")
    c["model"] = check_choice(c["model"], "model", MODELS)
    return c


def run_cell(config: Mapping[str, Any]) -> dict:
    """Train the cell's seeds; ``{series: [[value per epoch] per seed]}`` for each of ``SERIES`` (epoch 0: before
    SGD, after any pre-training)."""
    c = validate(config)
    torch.set_num_threads(1)  # one single-threaded task per worker process: small products, shared cores
    run = daneshmand.train_digits(
        c["depth"], lrs=[c["lr"]], epochs=c["epochs"], rank_bound=differentiable_rank_bound, width=c["width"],
        batch=c["batch"], n_networks=c["n_seeds"], n_samples=c["n_train"], seed=c["seed"],
        pretrain_steps=c["pretrain_steps"] if c["model"].startswith("pretrained") else 0, alignment=_alignments,
        **MODELS[c["model"]])
    values = (run.loss, run.test_loss, run.test_accuracy, run.rank_bound, run.alignment[..., 0],
              run.alignment[..., 1])
    return {name: _json(np.asarray(value, dtype=float)) for name, value in zip(SERIES, values)}


def _json(values: np.ndarray) -> list:
    """Nested lists of floats, None where a value is not finite (a diverged network): JSON has no NaN or inf, and
    the sweep runner refuses them (:func:`final` reads None back as NaN)."""
    return np.where(np.isfinite(values), values, None).tolist()


def _alignments(H: torch.Tensor, errors: torch.Tensor) -> torch.Tensor:
    """(n, 2): the gradient alignment of the whole read-out and of its row 0 (Prop. 19's row)."""
    return torch.stack([gradient_alignment(H, errors), gradient_alignment(H, errors, row=0)], -1)


run_cell.version = "2"  # part of each result's cache key: bump when the results of run_cell change
run_cell.validate = validate


def grid(depths: Sequence[int], models: Sequence[str], lrs: Sequence[float], **settings: Any) -> list[dict]:
    """Configurations of a depth x model x learning-rate grid, ``settings`` shared."""
    return [validate({"depth": int(d), "model": m, "lr": float(lr), **settings})
            for d in depths for m in models for lr in lrs]


def best_rows(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[int, str], Mapping[str, Any]]:
    """Per (depth, model), the row whose learning rate reaches the lowest mean final training loss (a diverged
    seed's loss, inf or NaN, counts as inf, so a rate that loses any seed loses to one that loses none)."""
    def loss(row: Mapping[str, Any]) -> float:
        return float(np.nan_to_num(final(row, "train_loss"), nan=np.inf).mean())

    best: dict[tuple[int, str], Mapping[str, Any]] = {}
    for row in rows:
        key = (row["depth"], row["model"])
        if key not in best or loss(row) < loss(best[key]):
            best[key] = row
    return best


def final(row: Mapping[str, Any], series: str) -> np.ndarray:
    """The seeds' values of ``series`` after the last epoch (NaN where a seed diverged)."""
    return np.asarray(row[series], dtype=float)[:, -1]


def difference(a: Mapping[str, Any], b: Mapping[str, Any], series: str) -> Estimate:
    """Mean over seeds of a's final ``series`` minus b's, with its standard error (independent seeds: the errors add
    in quadrature)."""
    va, vb = final(a, series), final(b, series)
    if not (np.isfinite(va).all() and np.isfinite(vb).all()):
        raise ValueError(f"a seed's final {series} is not finite (it diverged): no mean to compare")
    ea, eb = mean_and_se(va), mean_and_se(vb)
    return Estimate(float(ea.value - eb.value), float(np.hypot(ea.error, eb.error)), "difference of sample means")


def verdict(diff: Estimate, k: float) -> str:
    """"holds" when ``diff`` (the claim's predicted direction positive) exceeds k standard errors, "does not hold"
    when it is below -k, "not resolved" between."""
    if diff.value > k * diff.error:
        return "holds"
    return "does not hold" if diff.value < -k * diff.error else "not resolved"


def tolerance(n_seeds: int, n_comparisons: int) -> float:
    """k for :func:`verdict` over a family of ``n_comparisons`` differences of two means of ``n_seeds`` seeds each:
    (difference - truth) / SE is Student-t with 2 (n_seeds - 1) degrees of freedom (pooled), Bonferroni over the
    family at ``FALSE_ALARM``."""
    return mc_tolerance(2 * n_seeds - 1, n_comparisons, FALSE_ALARM)
