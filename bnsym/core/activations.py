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
    tanh, tanh(gamma=0.5), erf, erf(gamma=2), sin, sin(gamma=0.5), selu,
    gelu, gelu_tanh, silu, swish(beta=2), softplus, softplus(beta=2), elu, elu(alpha=0.5), mish, hardtanh

with torch's defaults where a parameter is left out. Anything else a user brings, a formula such as
``"x*sigmoid(1.702*x)"``, a SymPy expression in any one symbol, a torch function or elementwise module, or a numpy
callable, is read by :mod:`bnsym.core.user_activations`.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

import numpy as np
from scipy.special import erf, expit

from . import user_activations
from .activation_type import Activation, Deferred
from .lazy import lazy_module

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use

torch = lazy_module("torch")

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
    "gelu",
    "gelu_tanh",
    "silu",
    "swish(beta=...)",
    "softplus(beta=...)",
    "elu(alpha=...)",
    "mish",
    "hardtanh",
)

MAX_GAMMA = 3.0
WHY_MAX_GAMMA = (
    "phi(gamma z) tends to a step function as |gamma| grows, whose gradient rate diverges, and the quadratures "
    "stop resolving its transition of width 1/gamma (measured for tanh and erf, B = 4 to 1e6: the spherical "
    "routes' relative error estimates stay below 1e-3 up to gamma = 3, reach 1e-2 at gamma = 5 and 3e-2 at 10)"
)
SELU_SCALE = 1.0507  # c_pos of Philipp et al. (section I.1), after Klambauer et al. (2017)
SELU_ALPHA = 1.6733  # c_neg = SELU_SCALE * SELU_ALPHA


def _num(value: float) -> str:
    """Shortest readable spelling of a parameter (2.0 -> '2', 0.25 -> '0.25')."""
    return f"{value:g}"


def relu(alpha: float = 1.0, beta: float = 0.0) -> Activation:
    """phi(z) = max(z + beta, 0)^alpha; positive-homogeneous of degree alpha when beta = 0."""
    if not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"relu power alpha must be a finite number > 0, got {alpha} "
                         "(max(z, 0)^alpha is no activation otherwise)")

    def expr():
        from .symbols import z

        a_s, b_s = sp.nsimplify(alpha), sp.nsimplify(beta)
        return sp.Piecewise(((z + b_s) ** a_s, z + b_s > 0), (0, True))

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
        expr=Deferred(expr),  # built when a route asks for it: the closed forms of relu need no SymPy
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
    def expr():
        from .symbols import z

        return sp.Piecewise((z, z > 0), (sp.nsimplify(slope) * z, True))

    # Hand-written, not lambdified: numpy.select (the lambdified Piecewise) is twice as slow as np.where, and
    # the lambdified slope is torch.where(z > 0, 1, slope) on Python numbers, float32 whatever the input.
    return Activation(
        name=f"leaky_relu({_num(slope)})",
        expr=Deferred(expr),
        numpy=lambda x: np.where(np.asarray(x) > 0, x, slope * np.asarray(x)),
        torch=lambda x: torch.where(x > 0, x, slope * x),
        numpy_derivative=lambda x: np.where(np.asarray(x) > 0, 1.0, slope),
        torch_derivative=lambda x: torch.where(x > 0, torch.ones_like(x), slope * torch.ones_like(x)),
        degree=1.0,
        kinks=(0.0,),
    )


def identity() -> Activation:
    """phi(z) = z: degree 1, (a, b) = (1, 1) since z = rho_1(z) - rho_1(-z)."""
    from .symbols import z

    return Activation.from_expr("identity", z, degree=1.0)


def cubic() -> Activation:
    """phi(z) = z^3: a polynomial, so its Gegenbauer series is finite (degrees 1 and 3)."""
    from .symbols import z

    return Activation.from_expr("cubic", z**3)


def _scaled_smooth(name: str, gamma: float) -> Activation:
    """phi(z) = f(gamma z) for f in {tanh, erf, sin}: smooth, not homogeneous.

    Hand-written, as relu is, with the formula built when a route asks for it: lambdifying it imported SymPy
    (0.2 s of CPU) for the first bn_kernel("tanh", Sigma) of a process, whose spherical route needs none.
    """
    def expr():
        from .symbols import z

        return {"tanh": sp.tanh, "erf": sp.erf, "sin": sp.sin}[name](sp.nsimplify(gamma) * z)

    # phi'(z) = gamma f'(gamma z): tanh' = 1 - tanh^2, erf' = 2 exp(-u^2) / sqrt(pi), sin' = cos
    value_np, slope_np = {
        "tanh": (np.tanh, lambda u: 1 - np.tanh(u) ** 2),
        "erf": (erf, lambda u: 2 / math.sqrt(math.pi) * np.exp(-u * u)),
        "sin": (np.sin, np.cos),
    }[name]
    value_t, slope_t = {
        "tanh": (lambda u: torch.tanh(u), lambda u: 1 - torch.tanh(u) ** 2),
        "erf": (lambda u: torch.erf(u), lambda u: 2 / math.sqrt(math.pi) * torch.exp(-u * u)),
        "sin": (lambda u: torch.sin(u), lambda u: torch.cos(u)),
    }[name]
    return Activation(
        name=name if gamma == 1 else f"{name}(gamma={_num(gamma)})",
        expr=Deferred(expr),
        numpy=lambda x: value_np(gamma * np.asarray(x, dtype=float)),
        torch=lambda x: value_t(gamma * x),
        numpy_derivative=lambda x: gamma * slope_np(gamma * np.asarray(x, dtype=float)),
        torch_derivative=lambda x: gamma * slope_t(gamma * x),
    )


def _exponential_linear(name: str, expr: sp.Expr, scale: float, alpha: float) -> Activation:
    """phi(z) = scale z for z >= 0, scale alpha (e^z - 1) for z < 0 (ELU and SeLU)."""

    # Hand-written, not lambdified: expm1 keeps e^z - 1 accurate for z just below 0, and clamping z <= 0
    # inside the exponential stops e^z overflowing on the discarded branch (an inf there makes the autograd
    # gradient of torch.where nan, and numpy warn).
    def value_t(x: torch.Tensor) -> torch.Tensor:
        return scale * torch.where(x >= 0, x, alpha * torch.expm1(torch.clamp(x, max=0.0)))

    def deriv_t(x: torch.Tensor) -> torch.Tensor:
        return scale * torch.where(x >= 0, torch.ones_like(x), alpha * torch.exp(torch.clamp(x, max=0.0)))

    def value_np(x):
        x = np.asarray(x, dtype=float)
        return scale * np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0.0)))

    def deriv_np(x):
        x = np.asarray(x, dtype=float)
        return scale * np.where(x >= 0, 1.0, alpha * np.exp(np.minimum(x, 0.0)))

    return Activation(name, expr, value_np, value_t, deriv_np, deriv_t, kinks=(0.0,))


def selu() -> Activation:
    """SeLU of the paper (I.1): c_pos a for a >= 0, c_pos c_neg' (e^a - 1) for a < 0."""
    from .symbols import z

    lam, alp = sp.Float(SELU_SCALE), sp.Float(SELU_ALPHA)
    expr = sp.Piecewise((lam * z, z >= 0), (lam * alp * (sp.exp(z) - 1), True))
    return _exponential_linear("selu", expr, SELU_SCALE, SELU_ALPHA)


def elu(alpha: float = 1.0) -> Activation:
    """ELU (Clevert et al. 2016): z for z >= 0, alpha (e^z - 1) for z < 0; torch's default alpha = 1."""
    from .symbols import z

    expr = sp.Piecewise((z, z >= 0), (sp.nsimplify(alpha) * (sp.exp(z) - 1), True))
    return _exponential_linear("elu" if alpha == 1 else f"elu(alpha={_num(alpha)})", expr, 1.0, alpha)


def gelu() -> Activation:
    """GELU (Hendrycks & Gimpel 2016): z Phi(z) = z (1 + erf(z / sqrt 2)) / 2, torch's exact form."""
    from .symbols import z

    return Activation.from_expr("gelu", z * (1 + sp.erf(z / sp.sqrt(2))) / 2)


def gelu_tanh() -> Activation:
    """GELU's tanh approximation, torch's ``approximate="tanh"``: z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))) / 2."""
    from .symbols import z

    c, a = math.sqrt(2 / math.pi), 0.044715
    inner = sp.sqrt(2 / sp.pi) * (z + sp.Rational(44715, 10**6) * z**3)

    # Hand-written, not lambdified: (1 + tanh u) / 2 = sigmoid(2 u) keeps the digits that 1 + tanh u loses for
    # u << 0 (z below -3, where phi ~ 1e-9); the slope is sigmoid(2u) + 2 z u' sigmoid(2u) sigmoid(-2u).
    def value_np(x):
        x = np.asarray(x, dtype=float)
        return x * expit(2 * c * (x + a * x**3))

    def deriv_np(x):
        x = np.asarray(x, dtype=float)
        u = c * (x + a * x**3)
        return expit(2 * u) * (1 + 2 * x * c * (1 + 3 * a * x**2) * expit(-2 * u))

    def deriv_t(x):
        u = c * (x + a * x**3)
        return torch.sigmoid(2 * u) * (1 + 2 * x * c * (1 + 3 * a * x**2) * torch.sigmoid(-2 * u))

    return Activation("gelu_tanh", z * (1 + sp.tanh(inner)) / 2, value_np,
                      lambda x: x * torch.sigmoid(2 * c * (x + a * x**3)), deriv_np, deriv_t)


def swish(beta: float = 1.0) -> Activation:
    """Swish (Ramachandran et al. 2017): z sigmoid(beta z); beta = 1 is SiLU (Elfwing et al. 2018)."""
    from .symbols import z

    b_s = sp.nsimplify(beta)

    # Hand-written, not lambdified: the lambdified z / (1 + e^(-beta z)) overflows e^(-beta z) for beta z below
    # -709 (numpy warns, torch's slope becomes inf / inf = nan), and its slope loses digits where sigmoid -> 1;
    # expit / torch.sigmoid and s (1 - s) = sigmoid(u) sigmoid(-u) do not.
    def deriv_np(x):
        u = beta * np.asarray(x, dtype=float)
        return expit(u) * (1 + u * expit(-u))

    def deriv_t(x):
        u = beta * x
        return torch.sigmoid(u) * (1 + u * torch.sigmoid(-u))

    return Activation(
        name="silu" if beta == 1 else f"swish(beta={_num(beta)})",
        expr=z / (1 + sp.exp(-b_s * z)),
        numpy=lambda x: np.asarray(x, dtype=float) * expit(beta * np.asarray(x, dtype=float)),
        torch=lambda x: x * torch.sigmoid(beta * x),
        numpy_derivative=deriv_np,
        torch_derivative=deriv_t,
    )


def softplus(beta: float = 1.0) -> Activation:
    """Softplus: log(1 + e^(beta z)) / beta, beta > 0; torch's default beta = 1."""
    from .symbols import z

    if not beta > 0:
        raise ValueError(f"softplus needs beta > 0, got {beta} (log(1 + e^(beta z)) / beta is not softplus otherwise)")

    # Hand-written, not lambdified: log(1 + e^u) overflows for u above 709; logaddexp(0, u) does not. torch's own
    # softplus is not used, since it switches to the identity above u = 20, 2e-9 away.
    return Activation(
        name="softplus" if beta == 1 else f"softplus(beta={_num(beta)})",
        expr=sp.log(1 + sp.exp(sp.nsimplify(beta) * z)) / sp.nsimplify(beta),
        numpy=lambda x: np.logaddexp(0.0, beta * np.asarray(x, dtype=float)) / beta,
        torch=lambda x: torch.logaddexp(torch.zeros_like(x), beta * x) / beta,
        numpy_derivative=lambda x: expit(beta * np.asarray(x, dtype=float)),
        torch_derivative=lambda x: torch.sigmoid(beta * x),
    )


def mish() -> Activation:
    """Mish (Misra 2019): z tanh(softplus(z))."""
    from .symbols import z

    # Hand-written, not lambdified, for softplus's reason; the slope is tanh(s) + z sech(s)^2 sigmoid(z),
    # s = softplus(z).
    def value_np(x):
        x = np.asarray(x, dtype=float)
        return x * np.tanh(np.logaddexp(0.0, x))

    def deriv_np(x):
        x = np.asarray(x, dtype=float)
        s = np.logaddexp(0.0, x)
        with np.errstate(over="ignore"):  # cosh(s) = inf for s > 710: sech^2 = 0, as it should
            return np.tanh(s) + x * expit(x) / np.cosh(s) ** 2

    def deriv_t(x):
        s = torch.logaddexp(torch.zeros_like(x), x)
        return torch.tanh(s) + x * torch.sigmoid(x) / torch.cosh(s) ** 2

    return Activation(
        name="mish",
        expr=z * sp.tanh(sp.log(1 + sp.exp(z))),
        numpy=value_np,
        torch=lambda x: x * torch.tanh(torch.logaddexp(torch.zeros_like(x), x)),
        numpy_derivative=deriv_np,
        torch_derivative=deriv_t,
    )


def hardtanh() -> Activation:
    """Hardtanh: z clipped to [-1, 1] (torch's defaults)."""
    from .symbols import z

    # Hand-written, not lambdified, for leaky_relu's reasons (numpy.select, and a torch slope of the wrong dtype).
    return Activation(
        name="hardtanh",
        expr=sp.Piecewise((-1, z < -1), (z, z <= 1), (1, True)),
        numpy=lambda x: np.clip(np.asarray(x, dtype=float), -1.0, 1.0),
        torch=lambda x: torch.clamp(x, -1.0, 1.0),
        numpy_derivative=lambda x: np.where(np.abs(np.asarray(x, dtype=float)) < 1, 1.0, 0.0),
        torch_derivative=lambda x: torch.where(x.abs() < 1, torch.ones_like(x), torch.zeros_like(x)),
        kinks=(-1.0, 1.0),
    )


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


def parse_activation(spec: object) -> Activation:
    """Turn what a user names as phi into an :class:`Activation`: a string such as ``"relu^1.5"``,
    ``"tanh(gamma=0.5)"`` or a formula ``"x*sigmoid(1.702*x)"``; a SymPy expression in one symbol; a torch function
    or elementwise ``nn.Module``; or a numpy callable (see :mod:`bnsym.core.user_activations`).

    Activations are immutable, so each string is parsed (and its SymPy forms built) once per process.
    """
    if isinstance(spec, Activation):
        return spec
    if isinstance(spec, str):
        return _parse_string(spec)
    if isinstance(spec, sp.Expr):
        return user_activations.from_sympy(spec)
    if callable(spec):
        return user_activations.from_callable(spec)
    raise ValueError(f"activation must be a string, an Activation, a SymPy expression or a callable, "
                     f"got {type(spec).__name__}")


@lru_cache(maxsize=256)
def _parse_string(spec: str) -> Activation:
    match = _SPEC.match(spec.lower())
    known = "; known: " + ", ".join(KNOWN_ACTIVATIONS)
    if not (match and match["base"] in _BUILT_IN) or _is_call(match, user_activations.FUNCTIONS):
        if re.fullmatch(r"\s*[A-Za-z_]\w+\s*", spec):  # a one-letter name is a formula, the identity
            raise ValueError(f"unknown activation {spec!r}{known}; or a formula in one variable, "
                             "e.g. 'x*sigmoid(1.702*x)'")
        return user_activations.from_formula(spec)  # "x*sigmoid(1.702*x)", "x^2", "tanh(x) + x/10"
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
    if base in _NO_PARAMETERS:
        if positional or keywords:
            raise ValueError(f"activation {spec!r}: {base} takes no parameters")
        return _NO_PARAMETERS[base]()
    if base in ("swish", "softplus", "elu"):
        key = "alpha" if base == "elu" else "beta"
        return {"swish": swish, "softplus": softplus, "elu": elu}[base](
            _one_parameter(spec, positional, keywords, key, 1.0))
    gamma = _one_parameter(spec, positional, keywords, "gamma", 1.0)  # the rest of _BUILT_IN: tanh, erf, sin
    if gamma == 0:
        raise ValueError(f"activation {spec!r}: gamma = 0 makes phi constant, "
                         "and batch norm of a constant is undefined")
    if abs(gamma) > MAX_GAMMA:
        raise ValueError(f"activation {spec!r}: |gamma| must be at most {MAX_GAMMA:g}: {WHY_MAX_GAMMA}")
    return _scaled_smooth(base, gamma)


_NO_PARAMETERS = {"gelu": gelu, "gelu_tanh": gelu_tanh, "silu": swish, "mish": mish, "hardtanh": hardtanh}
_BUILT_IN = {"relu", "leaky_relu", "leakyrelu", "identity", "id", "linear", "cubic", "selu", "swish", "softplus",
             "elu", "tanh", "erf", "sin", *_NO_PARAMETERS}


def _is_call(match: re.Match, functions: dict) -> bool:
    """``tanh(x)`` or ``erf(x / 2)``: a whitelisted function of a formula, not a built-in's parameters."""
    args = match["args"] or ""
    if match["base"] not in functions or not args.strip() or "=" in args:
        return False
    try:
        [float(part) for part in args.split(",")]
    except ValueError:
        return True
    return False
