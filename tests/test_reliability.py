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
import torch

import bnsym
from bnsym import arch, dilution, nngp, products, rank, sweep
from bnsym.cli import main
from bnsym.core.activations import MAX_GAMMA
from bnsym.core.validation import MAX_BATCH_SIZE, MIN_RELATIVE_VARIANCE
from bnsym.dilution import shallow


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
    cpu = time.process_time()
    depth = dilution.effective_depth(10**5, 0.5, 0.1)
    assert time.process_time() - cpu < 5  # milliseconds of CPU; the old quadratic pass took over a minute
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
    import bnsym.cli.command

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(bnsym.cli.command, "run_sweep_command", interrupted)
    status = main(["sweep", "show", "anywhere"])
    assert (status, capsys.readouterr().err) == (130, "bnsym: interrupted\n")


def test_cli_identity_at_its_collapse_threshold(capsys):
    """identity, B = 4, eps = 1 (its collapse threshold) ended in an internal ZeroDivisionError."""
    status, out, err = _cli(capsys, "--phi", "identity", "-B", "4", "--eps", "1", "--json")
    assert status == 0, err
    assert all(np.isfinite(value) for value in json.loads(out)["forward_eigenvalues"].values())


@pytest.mark.parametrize("eps", [1e3, 1e60])
def test_a_homogeneous_phi_that_never_collapses_at_a_large_eps(capsys, eps):
    """relu^0.75 at B = 4 and eps = 1000 was refused as 'not resolved': the moment table's absolute errors, of
    order 1e-7 at tau = 1, were charged against q* ~ 1e-11 (a homogeneous phi's moments at tau are those at 1 times
    tau^alpha, so their errors scale too). At eps = 1e60 q* stopped at the end of a search grid, with no error.
    Check against eps = 1e6: q* scales exactly as eps^(-alpha / (1 - alpha)) = eps^-3 and c* is fixed."""
    reference = bnsym.fixed_point("relu^0.75", 4, eps=1e6)
    point = bnsym.fixed_point("relu^0.75", 4, eps=eps)
    assert point.q * eps**3 == pytest.approx(reference.q * 1e18, rel=1e-6)
    assert point.c == pytest.approx(reference.c, rel=1e-6) and not point.collapsed
    status, out, err = _cli(capsys, "--phi", "relu^0.75", "-B", "4", "--eps", f"{eps:g}", "--json")
    assert status == 0, err
    assert json.loads(out)["gradient_rate"] == pytest.approx(bnsym.gradient_rate("relu^0.75", 4, eps=1e6), rel=1e-6)


def test_a_fixed_point_below_float64_is_refused():
    """At eps = 1e300 relu^0.75's q* ~ 1e-900 is not a float64: a clear refusal, not NaN or 'collapsed'."""
    assert "below float64's range" in _message(lambda: bnsym.fixed_point("relu^0.75", 4, eps=1e300))


@pytest.mark.parametrize("eps", ["1", "1e300"])
def test_cli_identity_at_and_far_beyond_its_collapse(capsys, eps):
    status, out, err = _cli(capsys, "--phi", "identity", "-B", "4", "--eps", eps, "--json")
    assert status == 0, err
    result = json.loads(out)
    assert result["fixed_point"]["collapsed"] == (float(eps) > result["collapse_eps"])
    assert all(0 <= value <= 1 for value in result["forward_eigenvalues"].values())


# ---- issue 33, category D: one ValueError for bad input over the new surface, and valid input accepted


def test_half_precision_tensors_are_numbers():
    """numpy has no bfloat16: np.asarray raised TypeError for such a tensor (and float16 needs no refusal either).
    Half precision becomes float32, exactly, so the answer is that of the float32 tensor."""
    from bnsym import nngp, products

    x = torch.tensor([[0.5, 1.0], [1.5, -2.0]])
    for half in (torch.float16, torch.bfloat16):
        np.testing.assert_array_equal(nngp.input_covariance(x.to(half), x.to(half)), nngp.input_covariance(x, x))
        np.testing.assert_array_equal(products.fuss_catalan_density(x[0].to(half), 2),
                                      products.fuss_catalan_density(x[0], 2))


@pytest.mark.parametrize("call, names", [
    # absurd sizes: capped with the limit and why (were MemoryError or RuntimeError)
    (lambda: nngp.fill_batches(10**9, 4), "held at once"),
    (lambda: rank.uniform_sampler(10**9, 0.5), "width d"),
    (lambda: rank.stationary_alpha(1e308, np.ones(1), np.ones(1)), "width d"),
    # overflow: OverflowError, or inf / NaN returned
    (lambda: rank.residual_gap_series(4, 1e308), "not finite"),
    (lambda: rank.second_moment(1e300 * np.ones((2, 3))), "overflows"),
    (lambda: products.ginibre_sampler(3, gamma=1e308), "overflow"),
    (lambda: shallow.theorem1_update_bound(10.0, 1e308), "not finite"),
    (lambda: shallow.theorem2_bound(10, 0.5, 1.0, 1e308), "not finite"),
    (lambda: shallow.variance_map("tanh", 1e308, 1.0), "not finite"),
    (lambda: shallow.resnet_gsc(1.0, 0.5, 5.0, alpha=1e-300), "not finite"),
    (lambda: shallow.resnet_gsc(1e308, 0.5, 5.0), "not finite"),
    (lambda: shallow.resnet_gsc_limit(1.0, 1e308), "not finite"),
    (lambda: shallow.residual_orders([1e300, 1e300]), "not finite"),
    (lambda: shallow.infinite_depth_orders(1e308, 1.5, 5), "not finite"),
    (lambda: shallow.unnormalised_gsc_rate("tanh", 5e-324), "not finite"),
    # TypeError from scikit-learn's checks and from iterating a non-list
    (lambda: nngp.BatchNormNNGPRegressor().fit(np.ones((8, 2)), "abc"), "X, y"),
    (lambda: nngp.BatchNormNNGPRegressor().fit({"a": 1}, np.ones(8)), "X, y"),
    (lambda: arch.ntk_cross(arch.Dense(), np.eye(8), None), "a batch size"),
    # OSError: a path the file system refuses
    (lambda: sweep.Store("x" * 10_000), "not a usable path"),
])
def test_bad_input_to_the_new_surface_is_a_value_error(call, names):
    assert names in _message(call)


def test_theorem2_rate_beyond_the_square_of_float64():
    """sqrt(1 + delta eps^2) at eps = 1e308 is 1e308 sqrt(delta), finite: eps^2 overflowed to inf."""
    assert shallow.theorem2_rate(0.25, 1e308) == pytest.approx(0.5e308, rel=1e-15)


def test_numpy_integers_are_batch_sizes_of_ntk_cross():
    """sizes as a numpy array of np.int64 (what np.split or a shape gives) is a list of batch sizes."""
    net = arch.serial(arch.Dense(), arch.BatchNorm(), arch.Activation("relu"))
    x = np.random.default_rng(0).standard_normal((16, 16))
    gram = x @ x.T / 16
    np.testing.assert_array_equal(arch.ntk_cross(net, gram, np.array([8, 8]), points=2**10, replicates=8),
                                  arch.ntk_cross(net, gram, [8, 8], points=2**10, replicates=8))
    np.testing.assert_array_equal(arch.ntk_cross(net, gram, torch.tensor([8.0, 8.0], dtype=torch.bfloat16),
                                                 points=2**10, replicates=8),
                                  arch.ntk_cross(net, gram, [8, 8], points=2**10, replicates=8))


def test_a_test_batch_far_larger_than_the_training_batches():
    """X_test 1e300 times the training inputs was refused ('a batch's centred covariance is zero'): the data set was
    scaled as one, so the training batches underflowed. Each batch is normalised on its own, so each is now
    rescaled on its own, and a full test batch gives the same prior at any scale."""
    X = np.random.default_rng(1).standard_normal((8, 3))
    at = {scale: nngp.bn_nngp_prior("relu", X, 2, 4, X_test=scale * X[:4], nodes=6).cross for scale in (1.0, 1e300)}
    np.testing.assert_allclose(at[1e300], at[1.0], rtol=1e-12)


def test_parameter_ratio_is_scale_free():
    """||W||_F ||x|| / (||W x|| sqrt(n)) of 1e300 W was inf / inf = NaN: W and x are rescaled by powers of 2 first."""
    w = np.random.default_rng(2).standard_normal((4, 6))
    x = w[0] + 1.0
    assert shallow.parameter_ratio(1e300 * w, 1e-300 * x) == pytest.approx(shallow.parameter_ratio(w, x), rel=1e-14)


@pytest.mark.parametrize("scale", [1e-150, 1e-300, 5e-324, 1e300])
def test_rank_bounds_of_a_tiny_or_huge_identity(scale):
    """rank_lower_bound(1e-150 I) claimed 'H = 0' (M = H H^T / N underflowed): r and the numerical rank are scale
    free, and both are d for a multiple of the identity (Lemma 1's equality case), down to the smallest subnormal."""
    assert rank.rank_lower_bound(scale * np.eye(4)) == 4 and rank.numerical_rank(scale * np.eye(4)) == 4


def test_two_batches_whose_variances_differ_by_1e12():
    """Refused as 'all inputs identical' once: each batch of the BN-NNGP is normalised on its own, so a data set
    whose first batch is 1e6 times the second has the prior of the unscaled one."""
    X = np.random.default_rng(3).standard_normal((8, 3))
    scaled = X.copy()
    scaled[:4] *= 1e6
    np.testing.assert_allclose(nngp.bn_nngp_prior("relu", scaled, 2, 4, nodes=6).train,
                               nngp.bn_nngp_prior("relu", X, 2, 4, nodes=6).train, rtol=1e-9)
