"""bnsym.core.activations: the parser, the numeric callables against the SymPy expression, homogeneity."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch
from conftest import homogeneous

from bnsym.core.activations import KNOWN_ACTIVATIONS, Activation, parse_activation
from bnsym.core.symbols import z

DOCUMENTED = ["relu", "relu^1.5", "relu(beta=2)", "relu(beta=0.5)^2", "leaky_relu(0.2)", "identity", "tanh",
              "tanh(gamma=0.5)", "erf", "erf(gamma=2)", "sin", "sin(gamma=2)", "sin(gamma=0.5)",
              "gelu", "gelu_tanh", "silu", "swish(beta=2)", "softplus", "softplus(beta=2)", "elu", "elu(alpha=0.5)",
              "mish", "hardtanh"]
# every constructor, with parameters on both sides of 1 and of 0
EVERY = DOCUMENTED + ["relu^2", "relu^0.75", "relu(beta=-1)^0.5", "leaky_relu(-0.5)", "cubic", "selu",
                      "tanh(gamma=3)", "erf(gamma=0.5)",
                      "swish(beta=-0.5)", "elu(alpha=2)", "x*sigmoid(1.702*x)", "tanh(x) + x^2/10"]
HOMOGENEOUS_SPECS = ["relu", "relu^1.5", "relu^2", "relu^0.75", "leaky_relu(0.2)", "leaky_relu(-0.5)", "identity"]


def _points_away_from_kinks(phi: Activation, n: int = 200, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).uniform(-4, 4, n)
    for k in phi.kinks:
        x = x[np.abs(x - k) > 1e-3]
    return x


@pytest.mark.parametrize("spec", DOCUMENTED)
def test_documented_strings_parse(spec):
    phi = parse_activation(spec)
    assert isinstance(phi, Activation)
    assert phi.expr.free_symbols <= {z}
    # the name is a canonical spelling that parses back to the same function
    assert sp.simplify(parse_activation(phi.name).expr - phi.expr) == 0
    assert str(phi) == phi.name


def _sympy_values(expr: sp.Expr, x: np.ndarray) -> np.ndarray:
    """expr at each x, evaluated by SymPy itself to 30 digits (independent of any lambdified code)."""
    return np.array([float(expr.evalf(30, subs={z: sp.Float(float(value), 30)})) for value in x])


@pytest.mark.parametrize("spec", EVERY)
def test_numeric_callables_match_sympy(spec):
    """numpy, torch and their derivatives agree with expr and sp.diff(expr) away from the kinks."""
    phi = parse_activation(spec)
    x = _points_away_from_kinks(phi, n=60)
    value, slope = _sympy_values(phi.expr, x), _sympy_values(sp.diff(phi.expr, z), x)
    np.testing.assert_allclose(phi.numpy(x), value, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(phi.numpy_derivative(x), slope, rtol=1e-13, atol=1e-14)
    xt = torch.tensor(x, dtype=torch.float64)
    value_t, slope_t = phi.torch(xt), phi.torch_derivative(xt)
    assert value_t.dtype == slope_t.dtype == torch.float64 and value_t.shape == slope_t.shape == xt.shape
    np.testing.assert_allclose(value_t.numpy(), value, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(slope_t.numpy(), slope, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("spec", EVERY)
def test_numpy_and_torch_agree(spec):
    """The two backends agree on a grid through the kinks, keep float32, and give arrays of the input's shape."""
    phi = parse_activation(spec)
    x = np.linspace(-6, 6, 243).reshape(3, 81)  # holds 0
    for kind in ("", "_derivative"):
        reference = getattr(phi, "numpy" + kind)(x)
        assert reference.shape == x.shape and reference.dtype == np.float64
        result = getattr(phi, "torch" + kind)(torch.tensor(x, dtype=torch.float64))
        np.testing.assert_allclose(result.numpy(), reference, rtol=1e-14, atol=1e-15)
        single = getattr(phi, "torch" + kind)(torch.tensor(x, dtype=torch.float32))
        assert single.dtype == torch.float32 and single.shape == x.shape
        np.testing.assert_allclose(single.numpy(), reference, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("spec", EVERY)
def test_derivative_is_the_derivative(spec):
    """The numeric derivative is the slope of the numeric function (central differences, h = 1e-6)."""
    phi = parse_activation(spec)
    x = _points_away_from_kinks(phi, n=50, seed=1)
    h = 1e-6
    np.testing.assert_allclose(phi.numpy_derivative(x), (phi.numpy(x + h) - phi.numpy(x - h)) / (2 * h),
                               rtol=1e-6, atol=1e-7)


def test_parameters_reach_the_expression():
    assert sp.simplify(parse_activation("relu(beta=2)").expr.subs(z, 1) - 3) == 0
    assert sp.simplify(parse_activation("relu(beta=0.5)^2").expr.subs(z, 1) - sp.Rational(9, 4)) == 0
    assert parse_activation("tanh(gamma=0.5)").expr == sp.tanh(z / 2)
    assert parse_activation("sin(gamma=2)").expr == sp.sin(2 * z)
    assert parse_activation("leaky_relu(0.2)").expr.subs(z, -5) == -1
    assert parse_activation("relu(beta=2)").kinks == (-2.0,)
    # spelling variants: positional / keyword parameter, case, spaces, aliases
    for a, b in [("relu(0.5)", "relu(beta=0.5)"), ("leaky_relu(slope=0.3)", "leaky_relu(0.3)"), ("ReLU", "relu"),
                 (" relu ^ 2 ", "relu^2"), ("tanh(0.5)", "tanh(gamma=0.5)"), ("id", "identity"),
                 ("linear", "identity")]:
        assert parse_activation(a).name == parse_activation(b).name
    phi = parse_activation("tanh")
    assert parse_activation(phi) is phi


@pytest.mark.parametrize("spec", HOMOGENEOUS_SPECS)
def test_degree_and_ab(spec):
    """phi(z) = a max(z,0)^alpha - b max(-z,0)^alpha with a = phi(1), b = -phi(-1) (Prop E.17, corrected sign)."""
    phi = parse_activation(spec)
    assert phi.is_homogeneous
    alpha, (a, b) = phi.degree, phi.ab
    assert a == pytest.approx(float(phi.expr.subs(z, 1))) and b == pytest.approx(-float(phi.expr.subs(z, -1)))
    x = np.linspace(-3, 3, 61)
    np.testing.assert_allclose(phi.numpy(x), homogeneous(alpha, a, b)(x), rtol=1e-14, atol=1e-15)
    for r in (0.3, 2.0, 7.5):
        np.testing.assert_allclose(phi.numpy(r * x), r**alpha * phi.numpy(x), rtol=1e-13, atol=1e-14)
    # the degree is right symbolically too: phi(r z) - r^alpha phi(z) vanishes for r > 0
    r = sp.Symbol("r", positive=True)
    difference = phi.expr.subs(z, r * z) - r ** sp.nsimplify(alpha) * phi.expr
    for value in (-2.5, -0.5, 0.7, 3.0):
        assert abs(float(difference.subs({z: value, r: 1.7}))) < 1e-12


@pytest.mark.parametrize("spec", ["tanh", "erf(gamma=2)", "sin", "relu(beta=2)", "relu(beta=0.5)^2"])
def test_not_homogeneous(spec):
    phi = parse_activation(spec)
    assert not phi.is_homogeneous and phi.degree is None and phi.ab is None
    # and really not: phi(2 z) / phi(z) is not one constant 2^alpha
    x = np.array([0.3, 1.1, 2.0])
    ratio = phi.numpy(2 * x) / phi.numpy(x)
    assert np.ptp(ratio) > 1e-3


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown activation 'swosh'") as info:
        parse_activation("swosh")
    for known in ("relu", "leaky_relu", "identity", "tanh", "erf", "sin"):
        assert known in str(info.value)
    assert "relu^alpha" in KNOWN_ACTIVATIONS


@pytest.mark.parametrize("spec, match", [
    ("relu^0", "power"), ("relu^-1", "power"), ("relu^x", "power 'x' is not a number"), ("relu^nan", "alpha"),
    ("tanh^2", "only relu takes a power"),
    ("tanh(gamma=0)", "gamma = 0"), ("sin(gamma=-0)", "gamma = 0"), ("erf(0)", "gamma = 0"),
    ("leaky_relu", "needs its slope"), ("leaky_relu()", "needs its slope"),
    ("identity(1)", "no parameters"), ("relu(alpha=2)", "beta"), ("relu(1, 2)", "at most one"),
    ("tanh(gamma=abc)", "not a number"), ("relu(beta=inf)", "finite"), ("leaky_relu(slope=nan)", "finite"),
    ("relu(beta=2", "cannot parse"), ("", "cannot parse"),
])
def test_bad_specs(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_activation(spec)


@pytest.mark.parametrize("spec", ["relu^inf", "relu^1e400"])
def test_infinite_power_is_rejected(spec):
    with pytest.raises(ValueError, match="power|alpha"):
        parse_activation(spec)


@pytest.mark.parametrize("spec", [3, None, 1.5])
def test_non_string_spec(spec):
    with pytest.raises(ValueError, match="must be a string"):
        parse_activation(spec)
