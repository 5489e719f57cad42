"""Activation functions phi: one SymPy expression each, with numpy and torch callables.

An :class:`Activation` carries everything the theory needs about phi:

* ``expr``: the SymPy expression in the symbol :data:`z` (the source of truth for derivations);
* ``numpy`` / ``torch`` and ``numpy_derivative`` / ``torch_derivative``: fast callables, lambdified from
  ``expr`` (:meth:`Activation.from_expr`) unless a hand-written form is faster or numerically safer, as for
  the piecewise relu, leaky_relu and selu (each says why);
* ``degree``: the degree alpha of positive homogeneity, phi(r z) = r^alpha phi(z) for r > 0
  (None if phi is not positive-homogeneous), and then ``ab`` = (a, b), read off ``expr``, with
  phi(z) = a rho_alpha(z) - b rho_alpha(-z), rho_alpha(z) = max(z, 0)^alpha (Yang et al. 2019, Prop E.17,
  with the corrected sign b = -phi(-1));
* ``kinks``: the points where phi is not smooth (quadrature splits there), and ``kink_power``: phi behaves like
  |z - kink|^kink_power on one side of each (1 for a corner), so E[phi'^2] is finite only for kink_power > 1/2.

Parameters must be finite and given once; tanh, erf and sin take 0 < |gamma| <= ``MAX_GAMMA`` (``WHY_MAX_GAMMA``
says why; the input contract of :mod:`bnsym.core.validation` lists every other bound).

Strings understood by :func:`parse_activation`::

    relu, relu^1.5, relu(beta=2), relu(beta=0.5)^2, leaky_relu(0.2), identity, cubic,
    tanh, tanh(gamma=0.5), erf, erf(gamma=2), sin, sin(gamma=0.5), selu
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Callable

import numpy as np
import sympy as sp
import torch

from .symbols import z

KNOWN_ACTIVATIONS = (
    "relu",
    "relu^alpha",
    "relu(beta=...)",
    "leaky_relu(slope)",
    "identity",
    "cubic",
    "tanh(gamma=...)",
    "erf(gamma=...)",
    "sin(gamma=...)",
    "selu",
)

MAX_GAMMA = 3.0
WHY_MAX_GAMMA = (
    "phi(gamma z) tends to a step function as |gamma| grows, whose gradient rate diverges, and the quadratures "
    "stop resolving its transition of width 1/gamma (measured for tanh and erf, B = 4 to 1e6: the spherical "
    "routes' relative error estimates stay below 1e-3 up to gamma = 3, reach 1e-2 at gamma = 5 and 3e-2 at 10)"
)
SELU_SCALE = 1.0507  # c_pos of Philipp et al. (section I.1), after Klambauer et al. (2017)
SELU_ALPHA = 1.6733  # c_neg = SELU_SCALE * SELU_ALPHA


@dataclass(frozen=True)
class Activation:
    """A coordinatewise nonlinearity phi with its symbolic and numeric forms."""

    name: str
    expr: sp.Expr
    numpy: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    torch: Callable[[torch.Tensor], torch.Tensor] = field(repr=False)
    numpy_derivative: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    torch_derivative: Callable[[torch.Tensor], torch.Tensor] = field(repr=False)
    degree: float | None = None
    kinks: tuple[float, ...] = ()
    kink_power: float = 1.0

    @classmethod
    def from_expr(cls, name: str, expr: sp.Expr, degree: float | None = None,
                  kinks: tuple[float, ...] = ()) -> Activation:
        """An activation whose four numeric callables are lambdified from ``expr`` and its derivative."""
        value_np, value_t = _lambdified(expr)
        slope_np, slope_t = _lambdified(sp.diff(expr, z))
        return cls(name, expr, value_np, value_t, slope_np, slope_t, degree=degree, kinks=kinks)

    @cached_property
    def ab(self) -> tuple[float, float] | None:
        """(a, b) = (phi(1), -phi(-1)) for positive-homogeneous phi = a rho_alpha(z) - b rho_alpha(-z) (Prop E.17)."""
        if self.degree is None:
            return None
        return float(self.expr.subs(z, 1)), -float(self.expr.subs(z, -1))

    @property
    def derivative(self) -> sp.Expr:
        """phi'(z) as a SymPy expression."""
        return sp.diff(self.expr, z)

    @property
    def is_homogeneous(self) -> bool:
        return self.degree is not None

    def __str__(self) -> str:
        return self.name


def _lambdified(expr: sp.Expr) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[torch.Tensor], torch.Tensor]]:
    """numpy and torch callables of ``expr`` by ``sympy.lambdify``.

    Numeric constants are evaluated first: the torch printer spells 2/sqrt(pi) as torch.sqrt of a Python
    float, which torch rejects. A constant (the slope of the identity) lambdifies to a bare number, so it
    is broadcast to the argument's shape and dtype.
    """
    numeric = expr.evalf(17)
    if not numeric.free_symbols:
        constant = float(numeric)
        return (lambda x: np.full(np.shape(x), constant)), (lambda x: torch.full_like(x, constant))
    f_np = sp.lambdify(z, numeric, modules=["scipy", "numpy"])
    f_t = sp.lambdify(z, numeric, modules="torch")
    return (lambda x: f_np(np.asarray(x, dtype=float))), f_t


def _num(value: float) -> str:
    """Shortest readable spelling of a parameter (2.0 -> '2', 0.25 -> '0.25')."""
    return f"{value:g}"


def relu(alpha: float = 1.0, beta: float = 0.0) -> Activation:
    """phi(z) = max(z + beta, 0)^alpha; positive-homogeneous of degree alpha when beta = 0."""
    if not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"relu power alpha must be a finite number > 0, got {alpha} "
                         "(max(z, 0)^alpha is no activation otherwise)")
    a_s, b_s = sp.nsimplify(alpha), sp.nsimplify(beta)
    expr = sp.Piecewise(((z + b_s) ** a_s, z + b_s > 0), (0, True))

    # Hand-written, not lambdified: the Piecewise lambdifies to numpy.select over both branches (z^alpha at
    # z < 0 is nan) and to torch.where, 10x (numpy) to 50x (torch) slower than np.maximum / torch.clamp;
    # the lambdified torch slope of relu is int64 whatever the input; and r^(alpha - 1) at r = 0 must give
    # the one-sided slope 0, not inf (alpha < 1) or nan, nor a nan gradient through the discarded branch.
    def positive_part_np(x):
        return np.maximum(np.asarray(x, dtype=float) + beta, 0.0)

    def value_np(x):
        return positive_part_np(x) ** alpha

    def deriv_np(x):
        r = positive_part_np(x)
        return np.where(r > 0, alpha * np.where(r > 0, r, 1.0) ** (alpha - 1.0), 0.0)

    def value_t(x):
        positive = torch.relu(x + beta if beta else x)  # relu itself in one pass: the simulators call it per layer
        return positive if alpha == 1 else positive**alpha

    def deriv_t(x):
        if alpha == 1:  # the step function, written as floats in one pass: the Monte Carlo backward calls it per layer
            return torch.gt(x, -beta, out=torch.empty_like(x))
        r = torch.clamp(x + beta, min=0.0)
        return torch.where(r > 0, alpha * torch.where(r > 0, r, torch.ones_like(r)) ** (alpha - 1.0),
                           torch.zeros_like(r))

    name = "relu" if beta == 0 else f"relu(beta={_num(beta)})"
    if alpha != 1:
        name += f"^{_num(alpha)}"
    return Activation(
        name=name,
        expr=expr,
        numpy=value_np,
        torch=value_t,
        numpy_derivative=deriv_np,
        torch_derivative=deriv_t,
        degree=float(alpha) if beta == 0 else None,
        kinks=(0.0 - float(beta),),
        kink_power=float(alpha),
    )


def leaky_relu(slope: float) -> Activation:
    """phi(z) = z for z > 0, slope * z otherwise: degree 1, (a, b) = (1, slope)."""
    s_s = sp.nsimplify(slope)
    # Hand-written, not lambdified: numpy.select (the lambdified Piecewise) is twice as slow as np.where, and
    # the lambdified slope is torch.where(z > 0, 1, slope) on Python numbers, float32 whatever the input.
    return Activation(
        name=f"leaky_relu({_num(slope)})",
        expr=sp.Piecewise((z, z > 0), (s_s * z, True)),
        numpy=lambda x: np.where(np.asarray(x) > 0, x, slope * np.asarray(x)),
        torch=lambda x: torch.where(x > 0, x, slope * x),
        numpy_derivative=lambda x: np.where(np.asarray(x) > 0, 1.0, slope),
        torch_derivative=lambda x: torch.where(x > 0, torch.ones_like(x), slope * torch.ones_like(x)),
        degree=1.0,
        kinks=(0.0,),
    )


def identity() -> Activation:
    """phi(z) = z: degree 1, (a, b) = (1, 1) since z = rho_1(z) - rho_1(-z)."""
    return Activation.from_expr("identity", z, degree=1.0)


def cubic() -> Activation:
    """phi(z) = z^3: a polynomial, so its Gegenbauer series is finite (degrees 1 and 3)."""
    return Activation.from_expr("cubic", z**3)


def _scaled_smooth(name: str, gamma: float) -> Activation:
    """phi(z) = f(gamma z) for f in {tanh, erf, sin}: smooth, not homogeneous."""
    f = {"tanh": sp.tanh, "erf": sp.erf, "sin": sp.sin}[name]
    return Activation.from_expr(name if gamma == 1 else f"{name}(gamma={_num(gamma)})", f(sp.nsimplify(gamma) * z))


def selu() -> Activation:
    """SeLU of the paper (I.1): c_pos a for a >= 0, c_pos c_neg' (e^a - 1) for a < 0."""
    lam, alp = sp.Float(SELU_SCALE), sp.Float(SELU_ALPHA)
    expr = sp.Piecewise((lam * z, z >= 0), (lam * alp * (sp.exp(z) - 1), True))

    # Hand-written, not lambdified: expm1 keeps e^z - 1 accurate for z just below 0, and clamping z <= 0
    # inside the exponential stops e^z overflowing on the discarded branch (an inf there makes the autograd
    # gradient of torch.where nan, and numpy warn).
    def value_t(x: torch.Tensor) -> torch.Tensor:
        return SELU_SCALE * torch.where(x >= 0, x, SELU_ALPHA * torch.expm1(torch.clamp(x, max=0.0)))

    def deriv_t(x: torch.Tensor) -> torch.Tensor:
        return SELU_SCALE * torch.where(x >= 0, torch.ones_like(x), SELU_ALPHA * torch.exp(torch.clamp(x, max=0.0)))

    def value_np(x):
        x = np.asarray(x, dtype=float)
        return SELU_SCALE * np.where(x >= 0, x, SELU_ALPHA * np.expm1(np.minimum(x, 0.0)))

    def deriv_np(x):
        x = np.asarray(x, dtype=float)
        return SELU_SCALE * np.where(x >= 0, 1.0, SELU_ALPHA * np.exp(np.minimum(x, 0.0)))

    return Activation("selu", expr, value_np, value_t, deriv_np, deriv_t, kinks=(0.0,))


_SPEC = re.compile(r"^\s*(?P<base>[a-z_]+)\s*(?:\((?P<args>[^()]*)\))?\s*(?:\^\s*(?P<power>[^\s]+))?\s*$")


def _parse_args(args: str | None, spec: str) -> tuple[list[float], dict[str, float]]:
    positional: list[float] = []
    keywords: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in (args or "").split(","))):
        key, _, value = part.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"activation {spec!r}: parameter {part!r} is not a number") from None
        if not math.isfinite(number):
            raise ValueError(f"activation {spec!r}: parameter {part!r} must be finite")
        if key.strip() in keywords:
            raise ValueError(f"activation {spec!r}: parameter {key.strip()!r} is given twice")
        if key:
            keywords[key.strip()] = number
        else:
            positional.append(number)
    return positional, keywords


def _one_parameter(spec: str, positional: list[float], keywords: dict[str, float], key: str, default: float) -> float:
    """The single parameter `key` of an activation, given by position or by name."""
    unknown = set(keywords) - {key}
    if unknown or len(positional) + len(keywords) > 1:
        raise ValueError(f"activation {spec!r}: expected at most one parameter {key!r}, "
                         f"got {positional or ''}{keywords or ''}")
    return positional[0] if positional else keywords.get(key, default)


def parse_activation(spec: str | Activation) -> Activation:
    """Turn a string such as ``"relu^1.5"`` or ``"tanh(gamma=0.5)"`` into an :class:`Activation`.

    Activations are immutable, so each string is parsed (and its SymPy forms built) once per process.
    """
    if isinstance(spec, Activation):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"activation must be a string or an Activation, got {type(spec).__name__}")
    return _parse_string(spec)


@lru_cache(maxsize=256)
def _parse_string(spec: str) -> Activation:
    match = _SPEC.match(spec.lower())
    known = "; known: " + ", ".join(KNOWN_ACTIVATIONS)
    if not match:
        raise ValueError(f"cannot parse activation {spec!r}{known}")
    base, power = match["base"], match["power"]
    positional, keywords = _parse_args(match["args"], spec)
    if power is not None and base != "relu":
        raise ValueError(f"activation {spec!r}: only relu takes a power (relu^alpha)")
    if base == "relu":
        try:
            alpha = float(power) if power is not None else 1.0
        except ValueError:
            raise ValueError(f"activation {spec!r}: power {power!r} is not a number") from None
        return relu(alpha=alpha, beta=_one_parameter(spec, positional, keywords, "beta", 0.0))
    if base in ("leaky_relu", "leakyrelu"):
        if not positional and not keywords:
            raise ValueError(f"activation {spec!r}: leaky_relu needs its slope, e.g. leaky_relu(0.2)")
        return leaky_relu(_one_parameter(spec, positional, keywords, "slope", 0.0))
    if base in ("identity", "id", "linear"):
        if positional or keywords:
            raise ValueError(f"activation {spec!r}: identity takes no parameters")
        return identity()
    if base == "cubic":
        if positional or keywords:
            raise ValueError(f"activation {spec!r}: cubic takes no parameters")
        return cubic()
    if base == "selu":
        if positional or keywords:
            raise ValueError(f"activation {spec!r}: selu takes no parameters (its constants are Klambauer et al.'s)")
        return selu()
    if base in ("tanh", "erf", "sin"):
        gamma = _one_parameter(spec, positional, keywords, "gamma", 1.0)
        if gamma == 0:
            raise ValueError(f"activation {spec!r}: gamma = 0 makes phi constant, "
                             "and batch norm of a constant is undefined")
        if abs(gamma) > MAX_GAMMA:
            raise ValueError(f"activation {spec!r}: |gamma| must be at most {MAX_GAMMA:g}: {WHY_MAX_GAMMA}")
        return _scaled_smooth(base, gamma)
    raise ValueError(f"unknown activation {spec!r}{known}")
