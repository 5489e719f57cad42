"""Bjorck et al.'s training experiments on digits (chapters 12 and 12c): the digit ResNet of
:mod:`bnsym.sim.digit_resnet` trained on the one loop (:class:`bnsym.train.loop.Optimizer`), the sweep task of
Table 2, Figs 1, 15-17 and App. J, and its reading.

:func:`train_networks` trains many networks at once, one learning rate each, by SGD with the paper's momentum
0.9, weight decay 5e-4 and batch 128, the rate divided by 10 at 50 % and 75 % of training (App. B); a run that
reaches a minibatch loss above 10^3 (or a non-finite one) has diverged and is parked (Sec. 3.4). ``warm_epochs``
at ``warm_lr`` come first (the warm start of App. J). Test predictions use the statistics of the whole training
set (population statistics) in place of the running averages. :func:`train_grid` (Fig. 1), :func:`loss_along_step`
and :func:`loss_along_gradient` (Fig. 24) train or probe the plain-BN networks of chapter 12.

One cell is one way of normalising (:class:`bnsym.sim.digit_resnet.Norm`: the parts of batch norm kept, BN on
the top blocks or the head only, alternating statistics, a warm start) trained at every rate of ``lrs`` with
``n_seeds`` networks per rate, all in one batched run: ``run_cell({"keep": ["mu", "sigma"], "lrs": [0.1, 0.01]})``.
Cells with the same ``seed`` start from the same weights and see the same minibatches, so their differences are
paired per seed. The reading: :func:`stable` (a run that neither diverged nor stayed near chance),
:func:`max_stable_lr` and :func:`best_lr` per seed, and :func:`paired` (mean difference and its standard error
over seeds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..core.device import configure_torch, generator
from ..core.digits import Digits, digits
from ..core.statistics import FAMILY_ERROR, Verdict, mean_and_se, paired_verdict
from ..core.validation import (
    check_choice,
    check_flag,
    check_range,
    check_real_array,
    check_seed,
    check_settings,
    check_whole_number,
)
from ..sim.digit_resnet import PARTS, Norm, forward, init_params, init_resnets, resnet_logits
from .loop import Optimizer

DEFAULTS: dict[str, Any] = {"keep": list(PARTS), "top": None, "head": False, "alternate": False, "warm_epochs": 0,
                            "warm_lr": 1e-4, "lrs": [0.1, 0.01, 0.001], "n_seeds": 2, "blocks": 8, "width": 32,
                            "epochs": 10, "n_evals": 1, "seed": 0}
DIVERGED_LOSS = 1e3  # the paper's divergence criterion: a minibatch loss above 10^3
MOMENTUM, WEIGHT_DECAY, BATCH = 0.9, 5e-4, 128  # the paper's SGD (App. B)
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


run_cell.version = "2"  # part of each result's cache key: bump when the results of run_cell change
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

# --- training the digit ResNet of bnsym.sim.digit_resnet on the one loop --------------------------------------------


@torch.no_grad()
def accuracies(params: Sequence[torch.Tensor], data: Digits, norm: Norm) -> tuple[torch.Tensor, torch.Tensor]:
    """Train and test accuracy (C,) each, every site normalised with the training set's statistics."""
    logits_train, references = forward(params, data.x_train, norm)
    logits_test, _ = forward(params, data.x_test, norm, references)
    return tuple((logits.nan_to_num().argmax(-1) == y).float().mean(-1)
                 for logits, y in ((logits_train, data.y_train), (logits_test, data.y_test)))


def decay(done: float) -> float:
    """The factor of the learning rate after the fraction ``done`` of training: 1, then 0.1 from 50 % and 0.01 from
    75 % (App. B)."""
    return 1.0 if done < 0.5 else 0.1 if done < 0.75 else 0.01


@dataclass(frozen=True)
class Training:
    """Per network (axis 0): its learning rate, whether it diverged, and train and test accuracy at each
    evaluation (axis 1, after ``epochs[i]`` epochs; NaN once diverged)."""

    lr: np.ndarray
    diverged: np.ndarray
    epochs: np.ndarray
    train_accuracy: np.ndarray
    test_accuracy: np.ndarray


def train_networks(data: Digits, blocks: int, width: int, norm: Norm, lrs: Sequence[float], epochs: int,
                   seed: int, n_evals: int = 1, warm_epochs: int = 0, warm_lr: float = 1e-4) -> Training:
    """Train one network per entry of ``lrs`` (fresh Xavier weights each) for ``epochs`` epochs after
    ``warm_epochs`` at ``warm_lr``; evaluate ``n_evals`` times, evenly spaced, the last at the end."""
    configure_torch()
    device = data.x_train.device
    gen = generator(seed, device)
    lr = torch.as_tensor(np.asarray(lrs, dtype=np.float32), device=device)
    params = [p.requires_grad_() for p in init_params(len(lr), blocks, width, gen, device)]
    opt = Optimizer(params, "momentum", lr, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY, limit=DIVERGED_LOSS)
    per_epoch = len(data.y_train) // BATCH
    warm, total = warm_epochs * per_epoch, (warm_epochs + epochs) * per_epoch
    evals = {warm + round((i + 1) * epochs / n_evals) * per_epoch: i for i in range(n_evals)}
    curves = torch.full((2, len(lr), n_evals), float("nan"), device=device)
    stale = None
    for step in range(total):
        opt.rate = torch.full_like(lr, warm_lr) if step < warm else lr * decay((step - warm) / (total - warm))
        index = torch.randperm(len(data.y_train), generator=gen, device=device)[:BATCH]
        recompute = not norm.alternate or stale is None or step % 2 == 0
        logits, taken = forward(params, data.x_train[index], norm, None if recompute else stale)
        if recompute:
            stale = [h.detach() for h in taken]
        opt.step(F.cross_entropy(logits.transpose(1, 2), data.y_train[index].expand(len(lr), -1),
                                 reduction="none").mean(1))  # a dropped gamma or beta gets a zero gradient
        if step + 1 in evals:
            for row, accuracy in enumerate(accuracies(params, data, norm)):
                curves[row, :, evals[step + 1]] = torch.where(opt.alive, accuracy, float("nan"))
    done_epochs = np.array([round((i + 1) * epochs / n_evals) for i in range(n_evals)])
    train_acc, test_acc = curves.cpu().numpy()
    return Training(np.asarray(lrs, dtype=float), ~opt.alive.cpu().numpy(), done_epochs, train_acc, test_acc)


def _loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per network, (C,)."""
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2), y.expand(logits.shape[0], -1),
                                             reduction="none").mean(1)


@dataclass(frozen=True)
class TrainingGrid:
    """Per configuration: learning rate, BN flag, seed, whether it diverged (loss > 10^3 or not finite),
    and final train/test accuracy (NaN if diverged)."""

    lr: np.ndarray
    batch_norm: np.ndarray
    seed: np.ndarray
    diverged: np.ndarray
    train_accuracy: np.ndarray
    test_accuracy: np.ndarray


def train_grid(data: Digits, blocks: int, width: int, lrs: np.ndarray, n_networks: int, steps: int,
               batch: int = 128, momentum: float = 0.9, weight_decay: float = 5e-4, seed: int = 0) -> TrainingGrid:
    """SGD (the paper's momentum and weight decay, :class:`bnsym.train.loop.Optimizer`; a diverged network is parked)
    on ``n_networks`` networks per (lr, BN or not), all at once as one
    batched net."""
    x_train, y_train, x_test, y_test = data.x_train, data.y_train, data.x_test, data.y_test
    device = x_train.device
    grid = np.array([(lr, bn, s) for bn in (False, True) for lr in lrs for s in range(n_networks)], dtype=object)
    lr_t = torch.as_tensor(grid[:, 0].astype(float), dtype=torch.float32, device=device)
    bn_t = torch.as_tensor(grid[:, 1].astype(bool), device=device)
    params = [p.requires_grad_() for p in init_resnets(len(grid), blocks, width, seed, device)]
    opt = Optimizer(params, "momentum", lr_t, momentum=momentum, weight_decay=weight_decay, limit=DIVERGED_LOSS)
    gen = generator(seed + 1, device)
    for _ in range(steps):
        index = torch.randint(len(y_train), (batch,), generator=gen, device=device)
        opt.step(_loss(resnet_logits(params, x_train[index], bn_t)[0], y_train[index]))
    alive = opt.alive
    with torch.no_grad():
        accuracy = [(resnet_logits(params, xs, bn_t)[0].argmax(-1) == ys).float().mean(1) for xs, ys in
                    ((x_train, y_train), (x_test, y_test))]
    nan = torch.tensor(float("nan"), device=device)
    train_acc, test_acc = (torch.where(alive, a, nan).cpu().numpy() for a in accuracy)
    return TrainingGrid(grid[:, 0].astype(float), grid[:, 1].astype(bool), grid[:, 2].astype(int),
                        ~alive.cpu().numpy(), train_acc, test_acc)


def loss_along_step(data: Digits, blocks: int, width: int, lr: float, batch_norm: bool, ts: np.ndarray,
                    batch: int = 128, seed: int = 0) -> tuple[np.ndarray, np.ndarray, float]:
    """Batch loss l(t) = L(theta - t lr g) and the per-block mean x^2 along the step, at initialisation.

    Returns (loss (T,), block moments (T, blocks), |g|^2) for one network; the first-order prediction is
    l(0) - t lr |g|^2.
    """
    x_train, y_train = data.x_train, data.y_train
    device = x_train.device
    index = torch.randint(len(y_train), (batch,), generator=generator(seed + 1, device), device=device)
    xb, yb = x_train[index], y_train[index]
    bn = torch.tensor([batch_norm], device=device)
    params = [p.requires_grad_() for p in init_resnets(1, blocks, width, seed, device)]
    grads = torch.autograd.grad(_loss(resnet_logits(params, xb, bn)[0], yb).sum(), params)
    t = torch.as_tensor(np.asarray(ts, dtype=np.float32), device=device)
    with torch.no_grad():
        path = [p.detach() - t.view((-1,) + (1,) * (p.ndim - 1)) * lr * g for p, g in zip(params, grads)]
        logits, moments = resnet_logits(path, xb, bn.expand(len(t)), record=True)
        losses = _loss(logits, yb)
    squared_norm = float(sum(g.square().sum() for g in grads))
    block_moments = torch.stack(moments, -1).cpu().numpy() if moments else np.zeros((len(t), 0))
    return losses.cpu().numpy(), block_moments, squared_norm


def loss_along_gradient(data: Digits, blocks: int, width: int, lr: dict[bool, float], distances: np.ndarray,
                        n_networks: int, probe_batches: tuple[int, ...] = (1, 5), batch: int = 128,
                        momentum: float = 0.9, weight_decay: float = 5e-4, seed: int = 0) -> dict:
    """Fig. 24: the minibatch loss L(theta - s g/|g|) along the gradient direction of that minibatch, at distances
    s, for the minibatches ``probe_batches`` (1 = at initialisation) of SGD with the paper's momentum and weight
    decay, ``n_networks`` networks without and with BN, each trained at its ``lr[batch_norm]``.

    Returns {(batch_norm, probe): losses (n_networks, S)}; the loss at s = 0 is the batch's loss itself.
    """
    x_train, y_train = data.x_train, data.y_train
    device = x_train.device
    flags = [False] * n_networks + [True] * n_networks
    bn_t = torch.tensor(flags, device=device)
    lr_t = torch.tensor([lr[f] for f in flags], dtype=torch.float32, device=device)
    params = [p.requires_grad_() for p in init_resnets(len(flags), blocks, width, seed, device)]
    opt = Optimizer(params, "momentum", lr_t, momentum=momentum, weight_decay=weight_decay)
    s = torch.as_tensor(np.asarray(distances, dtype=np.float32), device=device)
    gen = generator(seed + 1, device)
    found = {}
    for step in range(1, max(probe_batches) + 1):
        index = torch.randint(len(y_train), (batch,), generator=gen, device=device)
        grads = torch.autograd.grad(_loss(resnet_logits(params, x_train[index], bn_t)[0], y_train[index]).sum(),
                                    params)
        with torch.no_grad():
            if step in probe_batches:
                norm = torch.sqrt(sum(g.square().flatten(1).sum(1) for g in grads))  # (C,)
                path = [(p[:, None] - s.view((1, -1) + (1,) * (p.ndim - 1))
                         * (g / norm.view((-1,) + (1,) * (g.ndim - 1)))[:, None]).flatten(0, 1)
                        for p, g in zip(params, grads)]
                losses = _loss(resnet_logits(path, x_train[index], bn_t.repeat_interleave(len(s)))[0],
                               y_train[index]).view(len(flags), len(s)).cpu().numpy()
                for bn in (False, True):
                    found[bn, step] = losses[bn * n_networks:(bn + 1) * n_networks]
        opt.apply(grads)
    return found


# --- the claims of chapter 12c, each as per-seed paired differences with the paper's effect -------------------------

#: Chapter 12c's ways of normalising: name -> the cell's settings (``DEFAULTS`` for the rest). The warm start's
#: rate is the unnormalised network's best rate, known only after its cell: :func:`warm_start`.
VARIANTS: dict[str, dict] = {
    "γ β μ σ²": dict(keep=list(PARTS)), "γ μ σ²": dict(keep=["gamma", "mu", "sigma"]),
    "β μ σ²": dict(keep=["beta", "mu", "sigma"]), "μ σ²": dict(keep=["mu", "sigma"]), "σ²": dict(keep=["sigma"]),
    "μ": dict(keep=["mu"]), "none": dict(keep=[]), "BN on top": dict(keep=list(PARTS), top=0, head=True),
    "alternating": dict(keep=list(PARTS), alternate=True)}
#: The accuracy difference the paper calls a benefit (E12: the affine parameters add about 0.6 %), in points; the
#: effect of the accuracy claims for which the paper prints no number.
ACCURACY_EFFECT = 0.6


def warm_start(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, dict]:
    """The warm-start variant (App. J): the unnormalised network first trains one epoch at its own best rate."""
    return {"warm start": dict(keep=[], warm_epochs=1, warm_lr=best_lr(rows["none"])[0])}


def share(top: np.ndarray, plain: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Per seed, the fraction of full BN's gain over none that BN on top recovers (NaN where there is no gain)."""
    gain = full - plain
    return np.where(gain > 0, (top - plain) / np.where(gain > 0, gain, 1.0), np.nan)


def claims(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[np.ndarray, float, bool]]:
    """Chapter 12c's claims: name -> (per-seed differences signed so that the claim predicts > 0, the paper's effect
    in their units, whether the claim is the negation "no difference of that size"). Accuracies in points at each
    variant's best rate, rates as log10 of the maximal stable rate (Tables 2, 3: e.g. 0.1 with mu and sigma^2,
    0.01 with sigma^2 alone, 0.003 with mu alone, 0.01 warm or alternating, 3.0 with BN); a seed without a stable
    rate or without a gain to share is left out."""
    acc = {name: 100 * best_lr(row)[1] for name, row in rows.items()}
    rate = {name: np.log10(max_stable_lr(row)) for name, row in rows.items()}
    lr_plain = best_lr(rows["none"])[0]

    def at_plain(name: str, key: str) -> np.ndarray:
        return 100 * np.nan_to_num(_array(rows[name], key)[list(rows[name]["lrs"]).index(lr_plain)], nan=0.0)

    gap = {name: at_plain(name, "train_accuracy") - at_plain(name, "test_accuracy") for name in ("γ β μ σ²", "none")}
    full, plain, top = "γ β μ σ²", "none", "BN on top"
    return {
        "E12: γ, β add test accuracy": (acc[full] - acc["μ σ²"], ACCURACY_EFFECT, False),
        "E12: dropping μ lowers the best test accuracy": (acc["μ σ²"] - acc["σ²"], ACCURACY_EFFECT, False),
        "E12: dropping μ lowers the maximal stable rate": (rate["μ σ²"] - rate["σ²"], np.log10(0.1 / 0.01), False),
        "E12: dropping σ² lowers the best test accuracy": (acc["μ σ²"] - acc["μ"], ACCURACY_EFFECT, False),
        "E12: dropping σ² lowers the maximal stable rate": (rate["μ σ²"] - rate["μ"], np.log10(0.1 / 0.003), False),
        "E5: BN on top recovers most (> 1/2) of BN's gain in test accuracy":
            (share(acc[top], acc[plain], acc[full]) - 0.5, 2 / 3 - 1 / 2, False),
        "E5: BN on top recovers most (> 1/2) of BN's gain in log maximal stable rate":
            (share(rate[top], rate[plain], rate[full]) - 0.5, 2 / 3 - 1 / 2, False),
        "E11: a warm start lifts the unnormalised maximal rate": (rate["warm start"] - rate[plain], 2.0, False),
        "E11: ... but stays below batch norm's": (rate[full] - rate["warm start"], np.log10(3.0 / 0.01), False),
        "E9: alternating statistics cap the rate below batch norm's":
            (rate[full] - rate["alternating"], np.log10(3.0 / 0.01), False),
        "E2: at the unnormalised rate, BN's train-test gap is larger": (gap[full] - gap[plain], ACCURACY_EFFECT, False),
        "E2: at the unnormalised rate, BN is no better on test":
            (at_plain(full, "test_accuracy") - at_plain(plain, "test_accuracy"), ACCURACY_EFFECT, True)}


def claim_verdicts(rows: Mapping[str, Mapping[str, Any]],
                   false_alarm: float = FAMILY_ERROR) -> dict[str, Verdict | None]:
    """:func:`paired_verdict` of each of :func:`claims` (finite seeds only), the family held at ``false_alarm``;
    None for a claim with fewer than 2 finite seeds (no standard error)."""
    found = claims(rows)
    verdicts: dict[str, Verdict | None] = {}
    for name, (differences, effect, negated) in found.items():
        finite = differences[np.isfinite(differences)]
        verdict = paired_verdict(finite, effect, len(found), false_alarm) if finite.size >= 2 else None
        verdicts[name] = verdict.negated() if negated and verdict is not None else verdict
    return verdicts
