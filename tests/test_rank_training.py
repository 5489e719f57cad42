"""The training experiments of Daneshmand et al. (chapter 11b): the gradient alignment of Fig. 10 against the
per-example gradients built one by one, the digits training with its test metrics and centring switch, and the sweep
task with its analysis."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bnsym import rank, sweep
from bnsym.core.estimate import Estimate
from bnsym.train import rank_training as rt
from bnsym.train.daneshmand import train_digits


def _batch(n=3, d=5, k=4, p=7, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(n, d, p, generator=gen, dtype=torch.float64),
            torch.randn(n, k, p, generator=gen, dtype=torch.float64))


def _mean_offdiagonal(c: torch.Tensor) -> float:
    p = c.shape[0]
    return float((c.abs().sum() - c.diagonal().abs().sum()) / (p * (p - 1)))


def test_gradient_alignment_matches_the_gradients_built_one_by_one():
    """The batched identity cos = cos(e_i, e_j) cos(h_i, h_j) (eq. 97) against explicit outer-product gradients."""
    H, errors = _batch()
    whole, row = rank.gradient_alignment(H, errors), rank.gradient_alignment(H, errors, row=0)
    for i in range(H.shape[0]):
        explicit = rank.last_layer_gradient_cosines(H[i], errors[i])
        assert whole[i] == pytest.approx(_mean_offdiagonal(explicit["frobenius"]), rel=1e-12)
        assert row[i] == pytest.approx(_mean_offdiagonal(explicit["row0"]), rel=1e-12)


def test_gradient_alignment_of_rank_one_and_zero_gradients():
    """Prop. 19: a rank-one H aligns every row's gradients (|cos| = 1); zero gradients are left out, and with fewer
    than two nonzero ones every gradient lies on one line (1)."""
    H, errors = _batch(p=6)
    rank_one = H[:, :, :1] * torch.linspace(-2, 3, 6, dtype=torch.float64)  # column 1 is 0 (coefficient 0)
    rank_one[:, :, 2] = 0
    assert torch.allclose(rank.gradient_alignment(rank_one, errors, row=1), torch.ones(3, dtype=torch.float64))
    lone = torch.zeros_like(H)
    lone[:, :, 0] = 1
    assert torch.equal(rank.gradient_alignment(lone, errors), torch.ones(3, dtype=torch.float64))
    scaled = rank.gradient_alignment(1e-300 * H, 1e300 * errors)
    assert torch.allclose(scaled, rank.gradient_alignment(H, errors), rtol=1e-12)


@pytest.mark.parametrize("call, message", [
    (lambda: rank.gradient_alignment(torch.ones(2, 3, 4), torch.ones(2, 5, 3)), "same P >= 2"),
    (lambda: rank.gradient_alignment(torch.ones(2, 3, 1), torch.ones(2, 5, 1)), "same P >= 2"),
    (lambda: rank.gradient_alignment(torch.ones(2, 3, 4), torch.ones(2, 5, 4), row=5), "row .* between 0 and 4"),
    (lambda: rank.gradient_alignment(torch.ones(3, 4), torch.ones(5, 4)), "n x d x P"),
    (lambda: train_digits(1, False, [0.1], 0, rank_bound=rank.differentiable_rank_bound, n_samples=1,
                                     batch=1, alignment=rank.gradient_alignment), "n_samples >= 2"),
    (lambda: train_digits(1, False, [0.1], 0, rank_bound=rank.differentiable_rank_bound, alignment=1),
     "alignment must be None or a function"),
    (lambda: train_digits(1, False, [0.1], 0, rank_bound=rank.differentiable_rank_bound, pretrain_lr=0),
     "pretrain_lr .* must hold numbers in \\(0"),
    (lambda: rt.run_cell({"depth": 2, "model": "bn"}), "needs \\['lr'\\]"),
    (lambda: rt.run_cell({"depth": 2, "model": "resnet", "lr": 0.1}), "model must be one of"),
    (lambda: rt.run_cell({"depth": 2, "model": "bn", "lr": 0.1, "momentum": 0.9}), "unknown rank-training"),
])
def test_arguments_follow_the_input_contract(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_training_records_test_metrics_and_centring_matters():
    torch.set_num_threads(1)
    kw = dict(depth=3, bn=True, lrs=[0.1], epochs=1, rank_bound=rank.differentiable_rank_bound, width=16, n_networks=2,
              n_samples=256, alignment=rank.gradient_alignment)
    centred, uncentred = train_digits(**kw), train_digits(**kw, centre=False)
    for run in (centred, uncentred):
        assert run.test_loss.shape == run.test_accuracy.shape == run.alignment.shape == (2, 2)
        assert np.all((run.test_accuracy >= 0) & (run.test_accuracy <= 1))
        assert np.all((run.alignment >= 0) & (run.alignment <= 1 + 1e-12))
    assert not np.array_equal(centred.rank_bound, uncentred.rank_bound)
    assert np.isnan(train_digits(**{**kw, "alignment": None}).alignment).all()


def test_the_sweep_task_is_registered_and_deterministic():
    torch.set_num_threads(1)
    assert sweep.resolve("rank_training") is rt.run_cell
    config = {"depth": 2, "model": "pretrained", "lr": 0.05, "width": 8, "epochs": 1, "n_seeds": 2, "n_train": 128,
              "pretrain_steps": 3}
    first = rt.run_cell(config)
    assert set(first) == set(rt.SERIES)
    assert all(np.asarray(first[name]).shape == (2, 2) for name in rt.SERIES)
    assert first == rt.run_cell(config)
    layerwise = rt.run_cell({**config, "model": "pretrained_layerwise"})
    assert layerwise["rank_bound"] != first["rank_bound"]  # another objective, another pre-trained network


def test_best_rows_difference_and_verdict():
    rows = [{"depth": 10, "model": "bn", "lr": lr, "train_loss": [[2, loss], [2, loss + 0.1]],
             "test_accuracy": [[0.1, acc], [0.1, acc + 0.02]]} for lr, loss, acc in ((0.1, 0.5, 0.8), (0.01, 1.0, 0.6))]
    rows.append({"depth": 10, "model": "vanilla", "lr": 0.1, "train_loss": [[2, np.inf], [2, 2.3]],
                 "test_accuracy": [[0.1, 0.1], [0.1, 0.12]]})
    best = rt.best_rows(rows)
    assert best[10, "bn"]["lr"] == 0.1
    diff = rt.difference(best[10, "bn"], best[10, "vanilla"], "test_accuracy")
    assert diff.value == pytest.approx(0.7) and diff.error == pytest.approx(np.hypot(0.01, 0.01))
    assert rt.verdict(diff, 3.0) == "holds"
    assert rt.verdict(Estimate(-diff.value, diff.error, "m"), 3.0) == "does not hold"
    assert rt.verdict(Estimate(0.01, 0.01, "m"), 3.0) == "not resolved"
    with pytest.raises(ValueError, match="diverged"):
        rt.difference(best[10, "bn"], best[10, "vanilla"], "train_loss")


def test_tolerance_is_the_pooled_student_quantile():
    from scipy import stats

    assert rt.tolerance(4, 3) == pytest.approx(stats.t.ppf(1 - rt.FALSE_ALARM / 6, df=6), rel=1e-6)


def test_a_diverged_network_gets_nan_alignment_and_the_others_train_on():
    """A network whose rate blows its weights up has a non-finite last layer: its alignment (like its rank bound) is
    NaN and its loss inf, while the network beside it in the same batch keeps finite values (the book-scale sweep of
    chapter 11b stopped at the alignment's input check instead)."""
    run = train_digits(3, lrs=[0.01, 1e6], epochs=1, rank_bound=rank.differentiable_rank_bound, width=16, batch=64,
                       n_networks=1, n_samples=256, alignment=rt._alignments, bn=False)
    assert np.isinf(run.loss[1, -1]) and np.isnan(run.alignment[1, -1]).all()
    assert np.isfinite(run.loss[0]).all() and np.isfinite(run.alignment[0]).all()


def test_a_diverged_cell_is_a_result_with_none_not_a_failed_task():
    """A diverged network's values are not finite; the sweep runner refuses NaN and inf (not JSON), so the book-scale
    sweep of chapter 11b failed its cell. Now they are None, read back as NaN, and the rate counts as the worst."""
    from bnsym.sweep.runner import execute

    config = {"depth": 3, "model": "vanilla", "lr": 1e6, "width": 16, "epochs": 1, "n_seeds": 2, "n_train": 256}
    record = execute(rt.run_cell, config)
    assert record["error"] is None, record["error"]
    diverged = {**config, **record["result"]}
    assert np.isnan(rt.final(diverged, "train_loss")).all() and None in diverged["rank_bound"][0]
    finite = {**config, "lr": 0.01, "train_loss": [[2.3, 2.0]] * 2}
    assert rt.best_rows([diverged, finite])[3, "vanilla"] is finite  # the diverged rate loses, first or not
    assert rt.best_rows([finite, diverged])[3, "vanilla"] is finite
