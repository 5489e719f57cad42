"""bnsym.arch and ``bnsym arch`` on hostile input: infinite moments said as such (not "not resolved"), deep
nesting and absurd sizes refused up front with the limit and why, malformed batch sizes refused, and the CLI's
--plot checked before any work."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_cli

import bnsym.cli.command
from bnsym import arch
from bnsym.arch import parse_architecture

B = 8
FACTOR = np.random.default_rng(0).standard_normal((B, 2))
RANK_ONE, RANK_TWO = np.outer(FACTOR[:, 0], FACTOR[:, 0]), FACTOR @ FACTOR.T


@pytest.mark.parametrize(("sigma0", "infinite"), [(RANK_ONE, 4), (RANK_TWO, 1)])
def test_a_batch_norm_of_a_gaussian_spread_over_two_dimensions_has_an_infinite_gradient(sigma0, infinite):
    """At a Sigma0 of rank d <= 2, r^2 = |G h|^2 of the first BN's input is a chi-square with d degrees of freedom
    and E[r^-2] diverges: S is inf below that BN (at rank 1 also below the second, whose input spans two
    dimensions: relu of the two-point law of the first BN's output), with the reason; finite above. It was
    refused as "not resolved ... (raise points)"."""
    result = arch.signal_propagation("dense,bn,relu*3", sigma0)
    s = result.gradient.value
    assert np.all(np.isinf(s[:infinite])) and np.all(np.isfinite(s[infinite:]))
    assert "rank" in result.gradient.note and "eps > 0" in result.gradient.note


@pytest.mark.parametrize("method", ["auto", "qmc"])
def test_the_tangent_kernel_at_a_rank_two_input_is_refused_as_infinite(method):
    """Both routes (the Laplace MLP route and the sampled one) say why; more points cannot help."""
    with pytest.raises(ValueError, match="tangent kernel is infinite") as refused:
        arch.ntk("dense,bn,relu*3", RANK_TWO, method=method)
    assert "raise points" not in str(refused.value) and "rank 2" in str(refused.value)


@pytest.mark.parametrize("spec", ["(" * 6000 + "dense" + ")" * 6000, "dense," + "res(" * 3000 + "dense" + ")" * 3000])
def test_deeply_nested_specs_are_refused_with_the_limit(spec):
    with pytest.raises(ValueError, match="nest more than 100 deep"):
        parse_architecture(spec)


def test_nesting_up_to_the_limit_is_read():
    assert len(parse_architecture("(" * 100 + "dense" + ")" * 100)) == 1
    assert len(parse_architecture("dense," + "res(" * 99 + "dense" + ")" * 99)) == 2


def test_ntk_cross_refuses_nested_sizes():
    """sizes=((4, 4),) was flattened to (4, 4) and answered."""
    sigma = 0.7 * np.eye(B) + 0.3
    with pytest.raises(ValueError, match="flat sequence of batch sizes"):
        arch.ntk_cross("dense,bn,relu*2", sigma, sizes=((4, 4),))


ABSURD = {
    "B = 4096 with a batch norm": (lambda: arch.kernel("dense,bn,relu", np.eye(4096)), "Laplace route"),
    "B = 4096 tangent kernel": (lambda: arch.ntk("dense,bn,relu", np.eye(4096)), "Laplace route"),
    "2000 residual blocks": (lambda: arch.signal_propagation("dense,res(bn,relu,dense)*2000", np.eye(B)),
                             "the samples of the layers"),
    "huge sampling": (lambda: arch.kernel("dense,relu", np.eye(B), points=2**20, replicates=1024),
                      "the samples of the layers"),
    "nested repeats": (lambda: arch.kernel("dense," + "res(" * 20 + "dense" + ")*4" * 20, np.eye(B)),
                       "more than 10,000 layers"),
    "repeats of repeats": (lambda: parse_architecture("(dense*10000)*10000"), "above 1,000,000"),
}


@pytest.mark.parametrize("name", list(ABSURD))
def test_absurd_sizes_are_refused_up_front(name):
    """Each was a MemoryError after 20-50 s, a crash, or a walk over 4^20 layers: now a ValueError naming the
    limit and why (the memory checks of bnsym.core.validation: 8 GiB of float64)."""
    call, match = ABSURD[name]
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(("plot", "match"), [(".", "is a directory"), ("spp", "no extension"),
                                             ("no/such/folder/spp.png", "does not exist")])
def test_cli_plot_path_is_checked_before_computing(capsys, monkeypatch, plot, match):
    """--plot <a directory> exited 0 and wrote <directory>.png beside it; a bad path is one error line, exit 2,
    before the prediction runs."""

    def not_run(*args, **kwargs):
        raise AssertionError("the prediction ran before --plot was checked")

    monkeypatch.setattr(bnsym.cli.command, "arch_prediction", not_run)
    status, out, err = run_cli(capsys, ["arch", "dense,bn,relu", "-B", "4", "--plot", plot])
    assert status == 2 and out == "" and len(err.splitlines()) == 1 and match in err, err


def test_cli_plot_is_written(capsys, tmp_path):
    path = tmp_path / "spp.png"
    status, _, err = run_cli(capsys, ["arch", "dense,bn,relu", "-B", "4", "--plot", str(path)])
    assert status == 0 and path.stat().st_size > 0, err


def test_cli_text_says_why_a_value_is_inf(capsys):
    status, out, _ = run_cli(capsys, ["arch", "dense,relu,bn", "-B", "4"])
    lines = out.splitlines()
    assert status == 0 and any(line.endswith("inf") for line in lines) and "is infinite at layers" in lines[-1]
