"""Bjorck et al.'s training variants on digits: batch norm's parts, its placement, alternating statistics, the warm
start, and the reading of a sweep cell."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bnsym.core.digits import digits
from bnsym.sim import bjorck
from bnsym.sim.digit_resnet import EPS, PARTS, Norm, forward, init_params, normalise
from bnsym.sweep import resolve
from bnsym.train import bjorck as cells
from bnsym.train.bjorck import accuracies, decay, train_networks

ROUNDING = 1e-5  # float32 comparisons of two orders of the same arithmetic


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)  # tiny products: threads only add overhead


def _params(n_networks=3, blocks=2, width=8, seed=0):
    return init_params(n_networks, blocks, width, torch.Generator().manual_seed(seed), "cpu")


@pytest.mark.parametrize("parts", [PARTS, ("mu", "sigma"), ("sigma",), ("mu",), ("gamma", "beta"), ()])
def test_each_part_of_batch_norm_against_torch(parts):
    """N(h) with the parts kept against torch's own batch norm (F.batch_norm) and the batch moments by hand."""
    gen = torch.Generator().manual_seed(1)
    h = 3 * torch.randn(2, 64, 5, generator=gen, dtype=torch.float64) + 1.5
    gamma, beta = torch.rand(2, 5, generator=gen, dtype=torch.float64) + 0.5, torch.randn(2, 5, generator=gen,
                                                                                            dtype=torch.float64)
    mean, var = h.mean(1, keepdim=True), h.var(1, unbiased=False, keepdim=True)
    expected = h
    if "mu" in parts and "sigma" in parts:  # torch's batch norm, channels second: (B, n) per network
        expected = torch.stack([F.batch_norm(h[i], None, None, training=True, eps=EPS) for i in range(2)])
    elif "mu" in parts:
        expected = h - mean
    elif "sigma" in parts:
        expected = h / torch.sqrt(var + EPS)
    expected = expected * (gamma[:, None] if "gamma" in parts else 1) + (beta[:, None] if "beta" in parts else 0)
    assert torch.allclose(normalise(h, Norm.keeping(parts), gamma, beta, None), expected, rtol=0, atol=1e-12)


def _by_blocks(params: list[torch.Tensor], x: torch.Tensor, bn: torch.Tensor) -> torch.Tensor:
    """The digit ResNet composed by hand from sim.bjorck's residual_block (BN per network where ``bn``)."""
    w_in, w_blocks, w_out, b_out = params[:4]
    h = x @ w_in.mT
    for block in range(w_blocks.shape[1]):
        h = bjorck.residual_block(h, w_blocks[:, block, 0], w_blocks[:, block, 1], bn[:, None, None], EPS)
    return h @ w_out.mT + b_out[:, None, :]


def test_full_and_no_batch_norm_equal_the_network_composed_by_hand():
    """With every part (gamma = 1, beta = 0) or none, the forward is the ResNet-v1 composed from residual blocks,
    BN on or off; resnet_logits (chapter 12) picks BN per network."""
    params = _params()
    x = digits().x_train[:32]
    for norm, flag in ((Norm(), True), (Norm.keeping(()), False)):
        logits, _ = forward(params, x, norm)
        assert torch.allclose(logits, _by_blocks(params, x, torch.full((3,), flag)), rtol=0, atol=ROUNDING)
    mixed = torch.tensor([True, False, True])
    logits, moments = bjorck.resnet_logits(params[:4], x, mixed, record=True)
    assert torch.allclose(logits, _by_blocks(params, x, mixed), rtol=0, atol=ROUNDING)
    assert len(moments) == params[1].shape[1] and moments[0].shape == (3,)


def test_placement_of_batch_norm():
    assert Norm().sites(3) == [True] * 6 + [False]
    assert Norm(top=1).sites(3) == [False] * 4 + [True] * 2 + [False]
    assert Norm(top=0, head=True).sites(3) == [False] * 6 + [True]
    params = _params(blocks=3)
    x = digits().x_train[:16]
    _, taken = forward(params, x, Norm(top=1, head=True))
    assert len(taken) == 3  # two sites of the top block and the head


def test_population_statistics_make_a_test_prediction_independent_of_the_others():
    params, data = _params(), digits()
    _, references = forward(params, data.x_train, Norm())
    alone, _ = forward(params, data.x_test[:1], Norm(), references)
    together, _ = forward(params, data.x_test[:7], Norm(), references)
    assert torch.allclose(alone[:, 0], together[:, 0], rtol=0, atol=ROUNDING)
    own, _ = forward(params, data.x_train, Norm())  # the reference set itself: its own statistics
    assert torch.allclose(forward(params, data.x_train, Norm(), references)[0], own, rtol=0, atol=ROUNDING)
    train_accuracy, _ = accuracies(params, data, Norm())
    assert torch.equal(train_accuracy, (own.argmax(-1) == data.y_train).float().mean(-1))


def test_training_learns_and_is_deterministic():
    data = digits()
    runs = [train_networks(data, 2, 16, Norm(), [0.1, 0.1], 2, seed=4, n_evals=2) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].test_accuracy, runs[1].test_accuracy)
    assert np.all(runs[0].test_accuracy[:, -1] > 0.6) and not runs[0].diverged.any()
    np.testing.assert_array_equal(runs[0].epochs, [1, 2])


def test_divergence_is_flagged_and_parks_the_run():
    run = train_networks(digits(), 3, 16, Norm.keeping(()), [1e3, 0.01], 1, seed=0)
    assert run.diverged.tolist() == [True, False]
    assert np.isnan(run.test_accuracy[0]).all() and np.isfinite(run.test_accuracy[1]).all()


def test_alternating_statistics_and_the_warm_start_change_training():
    data = digits()
    plain = train_networks(data, 2, 8, Norm(), [0.3], 1, seed=2)
    alternating = train_networks(data, 2, 8, Norm(alternate=True), [0.3], 1, seed=2)
    assert not np.array_equal(plain.test_accuracy, alternating.test_accuracy)  # the switch is live
    cold = train_networks(data, 2, 8, Norm.keeping(()), [0.01], 1, seed=2)
    warm = train_networks(data, 2, 8, Norm.keeping(()), [0.01], 1, seed=2, warm_epochs=1, warm_lr=0.01)
    assert not np.array_equal(cold.test_accuracy, warm.test_accuracy)


def test_learning_rate_schedule():
    """The paper's steps: the rate divided by 10 at 50 % and by 100 at 75 % of training."""
    assert [decay(done) for done in (0, 0.49, 0.5, 0.74, 0.75, 0.99)] == [1, 1, 0.1, 0.1, 0.01, 0.01]


def test_sweep_cell_is_registered_json_ready_and_read_back():
    assert resolve("bjorck_training") is cells.run_cell
    row = cells.run_cell({"keep": ["mu", "sigma"], "blocks": 2, "width": 8, "epochs": 2, "n_evals": 2,
                          "lrs": [1e3, 0.1], "n_seeds": 2, "seed": 5})
    json.dumps(row, allow_nan=False)
    row["lrs"] = [1e3, 0.1]
    assert row["diverged"] == [[True, True], [False, False]]
    assert np.all(cells.max_stable_lr(row) == 0.1)
    lr, accuracy = cells.best_lr(row)
    assert lr == 0.1 and accuracy.shape == (2,)
    assert np.all(cells.test_accuracy(row)[0] == 0)  # a diverged run counts as 0


def test_paired_difference():
    mean, se, z = cells.paired([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    assert (mean, se) == pytest.approx((2.0, 1 / np.sqrt(3)))
    assert z == pytest.approx(2 * np.sqrt(3))
    assert cells.paired([1.0, 1.0], [0.0, 0.0])[2] == np.inf and cells.paired([1.0, 1.0], [1.0, 1.0])[2] == 0


@pytest.mark.parametrize("config, match", [
    ({"keep": ["mu", "scale"]}, "keep"), ({"keep": "mu"}, "keep"), ({"top": 9, "blocks": 4}, "top"),
    ({"lrs": [0.1, -1]}, "lrs"), ({"n_evals": 5, "epochs": 2}, "n_evals"), ({"lr": 0.1}, "unknown"),
    ({"head": "yes"}, "head"), ({"width": 0}, "width"), ({"warm_lr": 0}, "warm_lr"), ([1], "dict")])
def test_bad_cells_are_refused(config, match):
    with pytest.raises(ValueError, match=match):
        cells.validate(config)


def _row(lrs, train, test, diverged=None):
    """A sweep row of final accuracies, (rates, seeds)."""
    train, test = np.asarray(train, dtype=float), np.asarray(test, dtype=float)
    return {"lrs": lrs, "train_accuracy": train.tolist(), "test_accuracy": test.tolist(),
            "diverged": np.zeros(train.shape, bool).tolist() if diverged is None else diverged}


def test_claims_are_signed_paired_differences_with_the_papers_effects():
    """Every variant equal except the affine parameters' +1 point: E12's affine claim holds on 8 networks, the
    claims with no difference are refuted where the paper's effect is excluded, and never resolved on 4."""
    lrs, seeds = [1.0, 0.1, 0.01], 8
    spread = np.linspace(0.80, 0.82, seeds)  # per-seed accuracy, the same seeds in every variant
    base = _row(lrs, np.tile(spread, (3, 1)), np.tile(spread, (3, 1)))
    rows = {name: base for name in [*cells.VARIANTS, "warm start"]}
    rows["γ β μ σ²"] = _row(lrs, np.tile(spread, (3, 1)), np.tile(spread + 0.01, (3, 1)))
    found = cells.claims(rows)
    np.testing.assert_allclose(found["E12: γ, β add test accuracy"][0], 1.0, atol=1e-9)
    assert found["E12: γ, β add test accuracy"][1] == cells.ACCURACY_EFFECT
    assert found["E12: dropping μ lowers the maximal stable rate"][1] == pytest.approx(1.0)  # log10(0.1 / 0.01)
    verdicts = cells.claim_verdicts(rows)
    assert verdicts["E12: γ, β add test accuracy"].verdict == "holds"
    assert verdicts["E12: dropping μ lowers the best test accuracy"].verdict == "does not hold"
    few = cells.claim_verdicts({name: {**row, **{key: np.asarray(row[key])[:, :4].tolist()
                                                 for key in ("train_accuracy", "test_accuracy", "diverged")}}
                                for name, row in rows.items()})
    assert {v.verdict for v in few.values() if v is not None} == {"not resolved"}
