"""Regression tests of the input contract (bnsym.core.validation): every case of the reliability issue (#19).

Each hostile input once gave a NaN or inf, a wrong exception, a wrong answer, a hang, a traceback or warnings; now it
gives a ValueError naming the argument, or a correct finite value.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal

import numpy as np
import pytest

import bnsym
from bnsym import dilution
from bnsym.cli import main
from bnsym.core.activations import MAX_GAMMA
from bnsym.core.validation import MAX_BATCH_SIZE, MIN_RELATIVE_VARIANCE


def _message(call) -> str:
    with pytest.raises(ValueError) as info:
        call()
    return str(info.value)


@pytest.mark.parametrize("call, names", [
    # silent NaN or inf
    (lambda: bnsym.gradient_rate("relu", 1e300), "batch size B"),
    (lambda: bnsym.depth_scale("relu", 1e300), "batch size B"),
    (lambda: bnsym.forward_eigenvalues("relu", 1e300), "batch size B"),
    (lambda: bnsym.fixed_point("leaky_relu(1e308)", 8), "activation leaky_relu(1e+308) overflows"),
    (lambda: bnsym.gradient_rate("relu(beta=1e308)", 8), "activation relu(beta=1e+308) overflows"),
    (lambda: bnsym.forward_eigenvalues("relu^1e300", 8), "activation relu^1e+300 overflows"),
    (lambda: dilution.diluted_rate(1.5, 1e200), "k must"),
    (lambda: dilution.normalised_gsc_rate("relu^0.4"), "E[phi'^2] is infinite"),
    (lambda: dilution.quadratic_mean([]), "x must"),
    # the wrong exception
    (lambda: bnsym.fixed_point("relu", 10**400), "batch size B"),
    (lambda: bnsym.gradient_rate("relu", 10**400), "batch size B"),
    (lambda: bnsym.backward_eigenvalues("relu", 10**400), "batch size B"),
    (lambda: bnsym.fixed_point("relu", 8, eps=2**2000), "eps must be a finite number"),
    (lambda: bnsym.fixed_point("tanh(1e-300)", 8), "activation tanh(gamma=1e-300)"),
    (lambda: bnsym.fixed_point("relu(beta=-50)", 8), "activation relu(beta=-50) is constant (= 0)"),
    (lambda: bnsym.backward_eigenvalues("relu", 1e300), "batch size B"),
    (lambda: bnsym.fixed_point("tanh", 8, method="gegenbauer", tol="1e-8"), "tol must be a real number"),
    (lambda: bnsym.gradient_rate("tanh", 8, method="gegenbauer", tol=None), "tol must be a real number"),
    # wrong answers
    (lambda: bnsym.gradient_rate("tanh(1e308)", 8), "|gamma| must be at most"),
    (lambda: bnsym.backward_eigenvalues("relu", 2**63), "batch size B"),
    # bad input accepted
    (lambda: bnsym.parse_activation("tanh(gamma=1,gamma=2)"), "'gamma' is given twice"),
    (lambda: bnsym.fixed_point("tanh", 8, method="gegenbauer", tol=float("inf")), "tol must be a finite number"),
    (lambda: bnsym.bn_kernel("relu", np.eye(6) * (1 + 1j)), "Sigma must be a real"),
    (lambda: dilution.residual_tail_bound(10.5, 0.5, 2), "depth L must be a whole number"),
    (lambda: dilution.effective_depth(-5, 0.5, 0.1), "depth L must be between 0"),
    (lambda: dilution.datapoint_gsc(np.ones((3, 4)), np.ones(5), np.ones(2)), "jacobian"),
    # inconsistency: every function reads B the same way
    (lambda: bnsym.gradient_rate("relu", "8"), "batch size B must be a whole number"),
    (lambda: bnsym.depth_scale("relu", Decimal("8")), "batch size B must be a whole number"),
    (lambda: bnsym.backward_eigenvalues("relu", "8"), "batch size B must be a whole number"),
    (lambda: bnsym.fixed_point("relu", "8"), "batch size B must be a whole number"),
])
def test_hostile_input_is_a_clear_value_error(call, names):
    assert names in _message(call)


def test_linalg_overflow_is_gone():
    """bn_kernel of 1e308 I was a LinAlgError: batch norm is scale invariant, so it equals bn_kernel of I."""
    np.testing.assert_allclose(bnsym.bn_kernel("relu", 1e308 * np.eye(8)), bnsym.bn_kernel("relu", np.eye(8)),
                               rtol=1e-13)


def test_arrays_of_batch_sizes_are_lists_too():
    """Where an array of B is taken, a list is an array of B; one B at a time refuses both."""
    np.testing.assert_array_equal(bnsym.gradient_rate("relu", [8]), bnsym.gradient_rate("relu", np.array([8])))
    np.testing.assert_array_equal(bnsym.fixed_point("relu", [8]).c, bnsym.fixed_point("relu", np.array([8])).c)
    assert "one whole number" in _message(lambda: bnsym.alpha_transition([8]))


def test_the_range_of_batch_sizes_ends_at_its_stated_limit():
    assert np.isfinite(bnsym.gradient_rate("relu", MAX_BATCH_SIZE))
    assert f"{MAX_BATCH_SIZE:.0e}" in _message(lambda: bnsym.gradient_rate("relu", MAX_BATCH_SIZE + 1))


def test_gamma_range():
    assert np.isfinite(bnsym.gradient_rate(f"tanh(gamma={MAX_GAMMA})", 8))
    assert "|gamma|" in _message(lambda: bnsym.parse_activation(f"tanh(gamma={2 * MAX_GAMMA})"))


def test_nearly_constant_activation():
    """relu(beta=b) with b far beyond the sphere is affine there, with mu*/q* ~ 1/b^2: refused below 1e-8."""
    beta = 10 / MIN_RELATIVE_VARIANCE**0.5
    assert "nearly constant" in _message(lambda: bnsym.gradient_rate(f"relu(beta={beta})", 8))
    assert np.isfinite(bnsym.gradient_rate(f"relu(beta={beta / 100})", 8))


def test_effective_depth_costs_grow_linearly():
    """effective_depth(1e5, ...) ran for over a minute (quadratic in depth); now it is one pass of O(L)."""
    start = time.perf_counter()
    depth = dilution.effective_depth(10**5, 0.5, 0.1)
    assert time.perf_counter() - start < 5  # milliseconds when idle; generous for a busy machine
    assert dilution.residual_tail_bound(10**5, 0.5, depth) >= 0.1 > dilution.residual_tail_bound(10**5, 0.5, depth + 1)


def test_effective_depth_with_a_bound_beyond_float64():
    """(1 + p)^L overflows float64; the tails are compared in log space, and the bound itself is refused."""
    assert 0 < dilution.effective_depth(10**4, 0.5, 1.0) < 10**4
    assert "overflows float64" in _message(lambda: dilution.residual_tail_bound(10**4, 0.5, 0))


def _cli(capsys, *arguments: str) -> tuple[int, str, str]:
    status = main(["predict", *arguments])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("arguments", [
    ("--phi", "relu", "-B", "1e300"),
    ("--phi", "relu", "-B", "99999999999999999999999999"),
    ("--phi", "tanh(1e308)", "-B", "8"),
    ("--phi", "leaky_relu(1e308)", "-B", "8"),
    ("--phi", "relu(beta=1e308)", "-B", "8"),
    ("--phi", "relu^1e300", "-B", "8"),
    ("--phi", "relu^0.5", "-B", "8"),
    ("--phi", "tanh(gamma=1,gamma=2)", "-B", "8"),
])
def test_cli_errors_are_one_line_without_warnings(capsys, arguments):
    status, out, err = _cli(capsys, *arguments, "--json")
    assert status == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("bnsym: error:") and "Warning" not in err, err


def test_cli_answers_a_huge_eps(capsys):
    """eps = 1e300 is valid input: gradients vanish by lambda_G ~ 1e-300 per layer, so the depth scale is
    1/log(lambda_G) ~ -1/691 layers. (The maximum trainable depth's error used to be propagated through
    1/(lambda_G - error), which came out negative at this size and was refused as a broken route.)"""
    status, out, _ = _cli(capsys, "--phi", "relu", "-B", "8", "--eps", "1e300", "--json")
    rate = bnsym.gradient_rate("relu", 8, eps=1e300)
    assert status == 0 and json.loads(out)["gradient_rate"] == rate
    assert 0 < rate < 1e-299
    depth = bnsym.max_trainable_depth("relu", 8, eps=1e300, with_error=True)
    assert depth.value == pytest.approx(16 / abs(np.log(rate)), rel=1e-12) and np.isfinite(depth.error)


def test_cli_json_is_strict_for_a_large_power(capsys):
    """--phi relu^100 printed NaN inside --json output; now every value is finite (strict JSON) or an error."""
    status, out, err = _cli(capsys, "--phi", "relu^100", "-B", "8", "--json")
    if status == 0:
        json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in JSON output"))
    else:
        assert len(err.splitlines()) == 1 and err.startswith("bnsym: error:")


def test_cli_an_interrupt_is_one_line(capsys, monkeypatch):
    """Ctrl-C during a sweep printed a 22-line traceback; now one line and exit status 130 (128 + SIGINT)."""
    import bnsym.cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(bnsym.cli, "run_sweep_command", interrupted)
    status = main(["sweep", "show", "anywhere"])
    assert (status, capsys.readouterr().err) == (130, "bnsym: interrupted\n")


def test_cli_identity_at_its_collapse_threshold(capsys):
    """identity, B = 4, eps = 1 (its collapse threshold) ended in an internal ZeroDivisionError."""
    status, out, err = _cli(capsys, "--phi", "identity", "-B", "4", "--eps", "1", "--json")
    assert status == 0, err
    assert all(np.isfinite(value) for value in json.loads(out)["forward_eigenvalues"].values())
