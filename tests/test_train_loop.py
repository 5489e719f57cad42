"""The one training loop (bnsym.train.loop.Optimizer): torch.optim's steps to the last bit, per-network and
layer-wise step sizes, divergence parking."""

from __future__ import annotations

import math

import pytest
import torch

from bnsym.train.loop import Optimizer


def _problem(seed: int = 0, networks: int = 3) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Parameters of ``networks`` small linear regressions (M, 4, 5) and (M, 4), and their inputs."""
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(networks, 4, 5, generator=gen, dtype=torch.float64).requires_grad_(),
              torch.randn(networks, 4, generator=gen, dtype=torch.float64).requires_grad_()]
    return params, torch.randn(7, 5, generator=gen, dtype=torch.float64)


def _losses(params: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Per network (M,): the mean of (W x + b - 1)^2."""
    out = x @ params[0].mT + params[1][:, None, :]
    return (out - 1).square().mean((-2, -1))


@pytest.mark.parametrize("rule, torch_optimizer, options", [
    ("sgd", torch.optim.SGD, {}),
    ("sgd", torch.optim.SGD, {"weight_decay": 0.01}),
    ("momentum", torch.optim.SGD, {"momentum": 0.9}),
    ("rmsprop", torch.optim.RMSprop, {}),
    ("adam", torch.optim.Adam, {}),
    ("adam", torch.optim.Adam, {"weight_decay": 0.01}),
])
def test_a_float_step_size_is_torch_optim_to_the_last_bit(rule, torch_optimizer, options):
    """Five steps of the loop and of torch.optim from the same start give bitwise equal parameters."""
    ours, x = _problem()
    theirs = [p.detach().clone().requires_grad_() for p in ours]
    opt = Optimizer(ours, rule, 0.05, **options)
    reference = torch_optimizer(theirs, lr=0.05, **options)
    for _ in range(5):
        opt.step(_losses(ours, x))
        reference.zero_grad()
        _losses(theirs, x).sum().backward()
        reference.step()
    for p, q in zip(ours, theirs):
        assert torch.equal(p, q)


@pytest.mark.parametrize("rule", ["sgd", "momentum", "rmsprop", "adam"])
def test_every_network_steps_with_its_own_step_size_as_if_alone(rule):
    """Networks side by side, each with its own (M,) step size, end where each would alone with that float step."""
    params, x = _problem()
    rates = torch.tensor([0.01, 0.1, 0.3], dtype=torch.float64)
    opt = Optimizer(params, rule, rates, weight_decay=1e-3)
    for _ in range(4):
        opt.step(_losses(params, x))
    for m, rate in enumerate(rates.tolist()):
        alone = [p[m:m + 1].detach().clone().requires_grad_() for p in _problem()[0]]
        single = Optimizer(alone, rule, torch.tensor([rate], dtype=torch.float64), weight_decay=1e-3)
        for _ in range(4):
            single.step(_losses(alone, x))
        for p, q in zip(params, alone):
            torch.testing.assert_close(p[m:m + 1], q, rtol=0, atol=0)


def test_layer_wise_step_sizes_move_each_group_by_its_own_rate():
    """An (M, G) step size: parameter j moves by rate[:, groups[j]] times its gradient; a zero rate freezes it."""
    params, x = _problem()
    start = [p.detach().clone() for p in params]
    rates = torch.tensor([[0.1, 0.0], [0.0, 0.2], [0.3, 0.3]], dtype=torch.float64)
    grads = Optimizer(params, "sgd", rates).step(_losses(params, x))
    for j, (p, p0, g) in enumerate(zip(params, start, grads)):
        expected = p0 - rates[:, j].view((-1,) + (1,) * (p.ndim - 1)) * g
        assert torch.equal(p.detach(), expected)
    assert torch.equal(params[1][0], start[1][0]) and torch.equal(params[0][1], start[0][1])


def test_a_diverged_network_is_parked_and_does_not_touch_the_others():
    """A step size that blows network 1 up: it stops at its last finite parameters, is reported not alive, and the
    others end exactly where they end without it."""
    params, x = _problem()
    rates = torch.tensor([0.05, 1e6, 0.05], dtype=torch.float64)
    opt = Optimizer(params, "sgd", rates, limit=1e3)
    parked_at = None
    for _ in range(6):
        opt.step(_losses(params, x))
        if not opt.alive[1] and parked_at is None:
            parked_at = [p[1].detach().clone() for p in params]
    assert opt.alive.tolist() == [True, False, True]
    assert all(torch.isfinite(p).all() for p in params)
    opt.step(_losses(params, x))
    assert all(torch.equal(p[1], q) for p, q in zip(params, parked_at))
    alone, _ = _problem()
    keep = Optimizer(alone, "sgd", torch.tensor([0.05, 0.0, 0.05], dtype=torch.float64))
    for _ in range(7):
        keep.step(_losses(alone, x))
    for p, q in zip(params, alone):
        assert torch.equal(p[[0, 2]], q[[0, 2]])


def test_without_a_limit_nothing_is_parked():
    """No limit: a network whose loss is not finite keeps being stepped (its caller reports its non-finite values)."""
    params, x = _problem()
    opt = Optimizer(params, "sgd", torch.tensor([0.05, 1e200, 0.05], dtype=torch.float64))
    for _ in range(4):
        opt.step(_losses(params, x))
    assert opt.alive.all() and not torch.isfinite(params[0][1]).all() and torch.isfinite(params[0][0]).all()


@pytest.mark.parametrize("call, message", [
    (lambda p: Optimizer(p, "lbfgs"), "rule"),
    (lambda p: Optimizer(p, "sgd", groups=[0]), "groups"),
    (lambda p: Optimizer(p, "sgd", torch.ones(2)), r"per network \(3,\).*got shape \(2,\)"),
    (lambda p: Optimizer(p, "sgd", torch.ones(3, 1)), r"per network and group \(3, 2\)"),
    (lambda p: Optimizer(p, "sgd", -0.1), "rate"),
    (lambda p: Optimizer(p, "sgd", float("nan")), "rate"),
    (lambda p: Optimizer([p[0], p[1][:2]], "sgd"), "the same M"),
])
def test_bad_settings_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call(_problem()[0])


def test_parking_limit_inf_parks_only_non_finite_losses():
    params, x = _problem()
    opt = Optimizer(params, "sgd", 1e-3, limit=math.inf)
    opt.step(_losses(params, x) * torch.tensor([1.0, math.inf, 1e300], dtype=torch.float64))
    assert opt.alive.tolist() == [True, False, True]
