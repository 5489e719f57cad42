"""Activations a user brings (bnsym.core.user_activations) and the built-ins GELU, SiLU/swish, softplus, ELU, mish,
hardtanh: their theory against independent quadrature and mean-field Monte Carlo, and the readers' contracts."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch
from conftest import sphere_fixed_point
from test_backward import _mean_field_rayleigh

import bnsym
from bnsym.core.activations import parse_activation
from bnsym.sim import mc_tolerance, mean_and_se

NEW = ["gelu", "gelu_tanh", "silu", "swish(beta=2)", "softplus", "softplus(beta=2)", "elu", "elu(alpha=0.5)", "mish",
       "hardtanh"]
TORCH_TWINS = {  # torch's own module for each built-in: the same function, torch's defaults
    "gelu": torch.nn.GELU(), "gelu_tanh": torch.nn.GELU(approximate="tanh"), "silu": torch.nn.SiLU(),
    "softplus": torch.nn.Softplus(threshold=1e9), "elu": torch.nn.ELU(), "mish": torch.nn.Mish(),
    "hardtanh": torch.nn.Hardtanh(),
}
BATCH = 8
DRAWS = 200_000


@pytest.mark.parametrize("spec", sorted(TORCH_TWINS))
def test_built_ins_are_torchs_functions(spec):
    x = torch.linspace(-6, 6, 241, dtype=torch.float64)
    torch.testing.assert_close(parse_activation(spec).torch(x), TORCH_TWINS[spec](x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec", NEW)
def test_fixed_point_and_gradient_rate_against_independent_methods(spec):
    """q*, c* against the 1-D sphere quadrature of conftest (an independent route, to 1e-6); lambda_G against a
    mean-field Monte Carlo of the backward map at Sigma* (h ~ N(0, Sigma*), J by hand), |z| <= k from mc_tolerance
    over the three eigen-directions of every activation here."""
    phi = parse_activation(spec)
    point = bnsym.fixed_point(phi, BATCH)
    q, c = sphere_fixed_point(phi.numpy, BATCH, phi.kinks)
    assert point.q == pytest.approx(q, rel=1e-6) and point.c == pytest.approx(c, rel=1e-6, abs=1e-8)
    sigma = q * ((1 - c) * np.eye(BATCH) + c * np.ones((BATCH, BATCH)))
    mean, se = _mean_field_rayleigh(phi.numpy, phi.numpy_derivative, BATCH, sigma, n=DRAWS, seed=3)["G"]
    rate = bnsym.gradient_rate(phi, BATCH, with_error=True)
    assert abs(rate.value - mean) <= mc_tolerance(DRAWS, len(NEW)) * np.hypot(se, rate.error)


NETWORKS, WIDTH = 128, 256  # finite networks per activation; one layer each


@pytest.mark.parametrize("spec", NEW)
def test_fixed_point_and_gradient_rate_against_finite_networks(spec):
    """Theory against finite networks (bnsym.sim) at B = 8, one random layer of width N fed the Gram Sigma*: its
    pre-activations are then exactly N(0, Sigma*) row by row, so the mean over networks of its output Gram's mean
    diagonal and off-diagonal estimate q* and q* c* (Sigma* is a fixed point: V(Sigma*) = Sigma*), and the mean of
    its backward operator's Rayleigh quotient in the G direction estimates lambda_G, all three without finite-width
    bias (chapters 1 and 4). SE across networks; k from mc_tolerance over the three checks of every activation."""
    phi, seed = parse_activation(spec), 10 * NEW.index(spec)  # independent draws per activation
    point = bnsym.fixed_point(phi, BATCH)
    sigma = torch.as_tensor(point.matrix)
    x0 = bnsym.sim.inputs_with_gram(sigma, WIDTH, NETWORKS, seed=seed, device="cpu")
    layer = bnsym.sim.simulate_forward(phi, x0, depth=1, seed=seed + 1, sampler="weights", device="cpu")[:, 1].numpy()
    off_diagonal = ~np.eye(BATCH, dtype=bool)
    estimates = {"q*": (point.q, point.error, mean_and_se(np.diagonal(layer, axis1=1, axis2=2).mean(-1))),
                 "q* c*": (point.q * point.c, point.error, mean_and_se(layer[:, off_diagonal].mean(-1)))}
    quotients = bnsym.sim.backward_rayleigh(phi, sigma.expand(NETWORKS, BATCH, BATCH), WIDTH, seed=seed + 2,
                                           device="cpu")
    rate = bnsym.gradient_rate(phi, BATCH, with_error=True)
    estimates["lambda_G"] = (rate.value, rate.error, mean_and_se(quotients["G"]))
    k = mc_tolerance(NETWORKS, 3 * len(NEW))
    z = {name: (simulated.value - theory) / np.hypot(simulated.error, error)
         for name, (theory, error, simulated) in estimates.items()}
    print(f"{spec}: z = " + ", ".join(f"{name} {value:+.2f} (SE/value {est[2].error / abs(est[0]):.1e})"
                                      for (name, value), est in zip(z.items(), estimates.values())) + f", k = {k:.2f}")
    assert all(abs(value) <= k for value in z.values()), (z, k)


def test_formula_sympy_torch_and_numpy_forms_agree():
    """GELU written five ways gives one gradient rate (the numeric routes' errors apart)."""
    t = sp.Symbol("t")
    forms = ["gelu", "x*(1 + erf(x/sqrt(2)))/2", t * (1 + sp.erf(t / sp.sqrt(2))) / 2, torch.nn.functional.gelu,
             torch.nn.GELU()]
    rates = [bnsym.gradient_rate(form, 16, with_error=True) for form in forms]
    for rate in rates[1:]:
        assert abs(rate.value - rates[0].value) <= 3 * (rate.error + rates[0].error) + 1e-12
    assert bnsym.gradient_rate("x*sigmoid(1.702*x)", 16) != rates[0].value  # the sigmoid approximation differs


def test_formula_with_max_and_min_runs_in_torch():
    """The torch printer writes Python's max(0, z), which refuses a tensor: the twin must get torch.maximum."""
    phi = parse_activation("max(x, 0) + min(x, 0.5*x) - max(x, 1, -x)")
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)
    torch.testing.assert_close(phi.torch(x), torch.from_numpy(phi.numpy(x.numpy())), rtol=1e-15, atol=1e-15)
    assert phi.torch(x.float()).dtype == torch.float32


def test_numpy_callable_slope_by_complex_step_or_differences():
    analytic = parse_activation(lambda x: np.tanh(x) + 0.1 * x)
    x = np.linspace(-3, 3, 31)
    np.testing.assert_allclose(analytic.numpy_derivative(x), 1 / np.cosh(x) ** 2 + 0.1, rtol=1e-12)
    kinked = parse_activation(lambda x: np.abs(x - 0.3))  # np.abs of x + ih is a modulus: no complex step
    np.testing.assert_allclose(kinked.numpy_derivative(x + 0.05), np.sign(x - 0.25), rtol=1e-10)


def test_simulators_take_a_torch_module():
    sigma = bnsym.fixed_point("silu", BATCH).matrix
    x0 = bnsym.sim.inputs_with_gram(sigma, 64, 4, seed=0, device="cpu")
    runs = [bnsym.sim.simulate_gradients(phi, x0, 2, sampler="gram", seed=1, device="cpu")
            for phi in ("silu", torch.nn.SiLU())]
    torch.testing.assert_close(runs[0].gradients, runs[1].gradients, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "spec, match",
    [
        ("rellu", "unknown activation"),
        ("x*y", "exactly one variable"),
        ("3", "exactly one variable"),
        ("__import__('os').system('true')", "is not allowed|unknown function"),
        ("x**1000", "exponent"),
        ("foo(x)", "unknown function 'foo'"),
        ("exp", "unknown activation"),
        ("xx", "unknown activation"),
        ("x +", "cannot parse activation"),
        ("x+" * 300 + "x", "at most 500"),
        (lambda x: x[:2], "shape"),
        (lambda x: np.cumsum(x), "not elementwise"),
        (sp.Symbol("a") * sp.Symbol("b"), "exactly one variable"),
        (3.0, "must be a string"),
        ("softplus(beta=-1)", "beta > 0"),
    ],
)
def test_what_cannot_be_an_activation_says_why(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_activation(spec)


def test_the_cli_takes_a_formula(capsys):
    from bnsym.cli import main

    assert main(["predict", "--phi", "x*sigmoid(1.702*x)", "--batch-size", "16"]) in (0, None)
    assert "x*sigmoid(1.702*x)" in capsys.readouterr().out


def test_the_cli_says_its_version(capsys):
    from importlib import metadata

    from bnsym.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"bnsym {metadata.version('bnsym')}"
