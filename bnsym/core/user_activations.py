"""Activations a user brings: a formula, a SymPy expression, a torch function or module, a numpy callable.

* **A formula**, ``"x*sigmoid(1.702*x)"``: read by walking Python's syntax tree, never by ``eval``. It may hold
  numbers, one variable (any name; a lone one-letter name such as ``x`` is the identity), ``+ - * / **`` (``^``
  means power), ``pi``, ``e`` and the functions of :data:`FUNCTIONS` (``relu(u)`` is ``max(u, 0)``); anything else
  is refused with what is allowed.
* **A SymPy expression** in any one free symbol: that symbol becomes :data:`~bnsym.core.symbols.z`. A formula or
  expression with a staircase (floor, ceiling, frac), an imaginary or an infinite constant is refused; phi' is its
  derivative almost everywhere (the Dirac deltas of Heaviside and sign dropped, their jumps recorded as kinks).
* **A torch function or elementwise** ``nn.Module`` (``torch.nn.functional.gelu``, ``nn.SiLU()``): phi' by
  autograd. It has no closed-form expression, so its ``expr`` is an undefined function ``phi<k>(z)``, numbered
  to keep the routes' caches apart, and only the numeric routes take it.
* **A numpy callable**: phi' by the complex step, Im phi(x + i h) / h, when phi accepts complex input and the
  step agrees with a finite difference away from the kinks (np.maximum and np.where do: they compare real parts);
  otherwise by fourth-order differences, one-sided near a kink (np.abs of x + ih is a modulus, not a slope).

Every kind is refused unless it acts coordinate by coordinate (a softmax does not), and its kinks are found
(:mod:`bnsym.core.kinks`: a SymPy expression's switching points, a callable's by a scan), so that the quadratures
split there.
"""

from __future__ import annotations

import ast
import itertools
from typing import Callable

import numpy as np

from .activation_type import Activation, lambdified
from .kinks import (
    STEP_FUNCTIONS,
    distinct,
    homogeneous_degree,
    kink_power,
    numeric_kinks,
    refined_corner,
    switching_functions,
    symbolic_kinks,
)
from .lazy import lazy_module

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use

torch = lazy_module("torch")

# SymPy's functions are looked up when a formula is read, so that importing this module does not import SymPy
FUNCTIONS: dict[str, Callable[..., sp.Expr]] = {
    "exp": lambda u: sp.exp(u), "log": lambda u: sp.log(u), "sqrt": lambda u: sp.sqrt(u),
    "abs": lambda u: sp.Abs(u), "tanh": lambda u: sp.tanh(u), "sinh": lambda u: sp.sinh(u),
    "cosh": lambda u: sp.cosh(u), "sin": lambda u: sp.sin(u), "cos": lambda u: sp.cos(u),
    "atan": lambda u: sp.atan(u), "arctan": lambda u: sp.atan(u), "erf": lambda u: sp.erf(u),
    "erfc": lambda u: sp.erfc(u), "sigmoid": lambda u: 1 / (1 + sp.exp(-u)),
    "softplus": lambda u: sp.log(1 + sp.exp(u)), "max": lambda *u: sp.Max(*u), "min": lambda *u: sp.Min(*u),
    "relu": lambda u: sp.Max(u, 0),
}
CONSTANTS = {"pi": "pi", "e": "E"}  # names of SymPy's constants
MAX_FORMULA = 500  # characters: a formula is a line, and a cap keeps the tree walk shallow
MAX_EXPONENT = 64  # |constant exponent|: x^64 already overflows float64 on the BN sphere of large B

_BINARY = {ast.Add: lambda a, b: sp.Add(a, b), ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: sp.Mul(a, b),
           ast.Div: lambda a, b: a / b, ast.Pow: lambda a, b: sp.Pow(a, b)}
_numbering = itertools.count(1)


def from_formula(text: str) -> Activation:
    """The activation of a formula in one variable (see the module docstring)."""
    if len(text) > MAX_FORMULA:
        raise ValueError(f"activation formula is {len(text)} characters long; at most {MAX_FORMULA} are read")
    try:
        tree = ast.parse(text.strip().replace("^", "**"), mode="eval")  # ^ binds as ** does, not as xor
    except SyntaxError:
        raise ValueError(f"cannot parse activation {text!r}: neither a known activation nor a formula "
                         "(e.g. 'x*sigmoid(1.702*x)')") from None
    variables: set[str] = set()
    expr = _build(tree.body, variables, text)
    return _from_one_variable(text.strip(), expr, variables, text)


def from_sympy(expr: sp.Expr) -> Activation:
    """The activation of a SymPy expression in one free symbol."""
    return _from_one_variable(str(expr), expr, {str(s) for s in expr.free_symbols}, str(expr),
                              symbols=expr.free_symbols)


def _from_one_variable(name: str, expr: sp.Expr, variables: set[str], text: str, symbols: set | None = None
                       ) -> Activation:
    from .symbols import z

    if len(variables) != 1:
        raise ValueError(f"activation {text!r} must depend on exactly one variable, "
                         f"found {sorted(variables) or 'none'}")
    (symbol,) = symbols if symbols else (sp.Symbol(variables.pop(), real=True),)
    phi = expr.subs(symbol, z)
    if phi.has(sp.zoo, sp.oo, -sp.oo, sp.nan):
        raise ValueError(f"activation {text!r} holds an infinite or undefined constant")
    if phi.has(sp.I) or phi.is_real is False:
        raise ValueError(f"activation {text!r} is not real-valued")
    steps = sorted({type(f).__name__ for f in phi.atoms(sp.Function) if type(f).__name__ in STEP_FUNCTIONS})
    if steps:
        raise ValueError(f"activation {text!r}: {', '.join(steps)} is a staircase, with infinitely many jumps and "
                         "phi' = 0 between them, so neither the quadratures nor the gradient theory apply")
    try:
        value_np, value_t = _quiet_lambdified(phi)
        value_np(np.linspace(-1.0, 1.0, 3))
        slope_np, slope_t = _slope(phi, z)
    except Exception as error:  # a function that numpy cannot evaluate: SymPy raises many types here
        raise ValueError(f"activation {text!r} cannot be evaluated in float64 numpy ({type(error).__name__}: "
                         f"{error})") from None
    kinks = symbolic_kinks(phi, z)
    if kinks is None:  # the switching points are not a finite set SymPy can list: scan
        kinks = numeric_kinks(value_np, slope_np, text)
    return _with_kinks(name, phi, (value_np, value_t, slope_np, slope_t), kinks)


def _with_kinks(name: str, expr: sp.Expr, callables: tuple[Callable, ...], kinks: tuple[float, ...],
                nearest: float = 1e-9) -> Activation:
    """The activation with its kinks, how phi behaves there (read from ``nearest`` on, :func:`kink_power`), and its
    degree where phi, kinked at 0 only, is a rho_alpha(z) - b rho_alpha(-z) (relu, leaky relu, relu^alpha in any
    form: the closed forms then apply)."""
    value_np, _, slope_np, _ = callables
    degree = homogeneous_degree(value_np) if kinks and max(abs(k) for k in kinks) < 1e-3 else None
    if degree is not None:
        kinks = (0.0,)  # a positive-homogeneous phi is smooth away from 0
    power = kink_power(value_np, slope_np, kinks, nearest, 100.0 if nearest < 1e-6 else 10.0) if kinks else 1.0
    return Activation(name, expr, *callables, degree=degree, kinks=kinks, kink_power=power)


def _slope(phi: sp.Expr, z: sp.Symbol) -> tuple[Callable, Callable]:
    """phi' almost everywhere, lambdified: the Dirac deltas of the jumps of Heaviside and sign dropped (a jump is
    recorded as kink_power 0, which the gradient quantities refuse); taken piece by piece (Max, Abs, sign as a
    Piecewise) where that lambdifies, so that it is not 0 * inf off its piece (Heaviside(z) z^(-1/4) at z < 0)."""
    if phi.has(*switching_functions()):
        try:
            return _evaluable(sp.piecewise_fold(sp.diff(phi.rewrite(sp.Piecewise), z)))
        except Exception:  # SymPy cannot print some folded conditions (And in nfloat): the whole derivative then
            pass
    return _evaluable(sp.diff(phi, z))


def _evaluable(slope: sp.Expr) -> tuple[Callable, Callable]:
    """The lambdified ``slope`` without its Dirac deltas, once evaluated (so that what numpy cannot do raises)."""
    slope_np, slope_t = _quiet_lambdified(slope.replace(sp.DiracDelta, lambda *args: sp.S.Zero))
    slope_np(np.linspace(-1.0, 1.0, 3))
    return slope_np, slope_t


def _quiet_lambdified(expr: sp.Expr) -> tuple[Callable, Callable]:
    """The lambdified numpy and torch callables of ``expr``; numpy's warnings from the discarded branches of a
    ``Piecewise`` (z^1.5 at z < 0 is nan there) silenced."""
    value_np, value_t = lambdified(expr)

    def quiet(x):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return value_np(x)

    return quiet, value_t


def _build(node: ast.AST, variables: set[str], text: str) -> sp.Expr:
    """The SymPy expression of one node of a formula's syntax tree; refuses every node outside the grammar."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return sp.Integer(node.value) if isinstance(node.value, int) else sp.Float(node.value)
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return getattr(sp, CONSTANTS[node.id])
        if node.id in FUNCTIONS:
            raise ValueError(f"activation {text!r}: {node.id} is a function; call it, e.g. {node.id}(x)")
        variables.add(node.id)
        return sp.Symbol(node.id, real=True)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _build(node.operand, variables, text)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _build(node.left, variables, text), _build(node.right, variables, text)
        if isinstance(node.op, ast.Pow) and right.is_number and abs(complex(right)) > MAX_EXPONENT:
            raise ValueError(f"activation {text!r}: a constant exponent must be at most {MAX_EXPONENT} in size "
                             "(a larger power overflows float64 on the batch-norm sphere)")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id not in FUNCTIONS:
            raise ValueError(f"activation {text!r}: unknown function {node.func.id!r}; "
                             f"allowed: {', '.join(FUNCTIONS)}")
        args = [_build(arg, variables, text) for arg in node.args]
        try:
            return FUNCTIONS[node.func.id](*args)
        except TypeError:
            raise ValueError(f"activation {text!r}: {node.func.id} takes other arguments than "
                             f"{len(args)}") from None
    raise ValueError(f"activation {text!r}: {ast.unparse(node)!r} is not allowed in a formula, which holds numbers, "
                     f"one variable, + - * / ** ^, pi, e and the functions {', '.join(FUNCTIONS)}")


def from_callable(f: Callable) -> Activation:
    """The activation of a torch function or elementwise module (phi' by autograd), or of a numpy callable;
    its kinks found by a scan (:func:`~bnsym.core.kinks.numeric_kinks`)."""
    from .symbols import z

    name = getattr(f, "__name__", None) or type(f).__name__
    expr = sp.Function(f"phi{next(_numbering)}")(z)  # an undefined function: only numeric routes apply
    probe = torch.linspace(-3.0, 3.0, 13, dtype=torch.float64, requires_grad=True)
    try:
        out = f(probe)
    except Exception:  # a numpy-only callable may raise anything on a tensor
        out = None
    if isinstance(out, torch.Tensor) and out.requires_grad:
        _check_elementwise(lambda x: f(torch.from_numpy(x)).detach().numpy(), name, out.detach().numpy(),
                           probe.detach().numpy())
        return _torch_activation(f, name, expr)
    return _numpy_activation(f, name, expr)


def _check_elementwise(f: Callable[[np.ndarray], np.ndarray], name: str, values: np.ndarray, x: np.ndarray) -> None:
    """phi applied to a part of an array, reordered, must give that part of the values, reordered: an activation
    acts coordinatewise (a softmax or t - mean(t) passes a reordering alone, not a part)."""
    if values.shape != x.shape:
        raise ValueError(f"activation {name} maps an array of shape {x.shape} to shape {values.shape}; "
                         "an activation acts coordinate by coordinate")
    for part in (x[::-1], x[:5], x[4:5]):
        again = np.asarray(f(part.copy()), dtype=float)
        expected = values[::-1] if part.size == x.size else values[np.isin(x, part)]
        if again.shape != part.shape or not np.allclose(again, expected, rtol=1e-12, atol=1e-12, equal_nan=True):
            raise ValueError(f"activation {name} is not elementwise: its output at a coordinate depends on the "
                             "other coordinates (or their order)")


def _torch_activation(f: Callable, name: str, expr: sp.Expr) -> Activation:
    def slope_t(x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            leaf = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(f(leaf).sum(), leaf)
        return grad

    def through_torch(g: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[np.ndarray], np.ndarray]:
        return lambda x: g(torch.as_tensor(np.asarray(x, dtype=float))).detach().numpy()

    value_np, slope_np = through_torch(f), through_torch(slope_t)
    return _with_kinks(name, expr, (value_np, f, slope_np, slope_t), numeric_kinks(value_np, slope_np, name))


COMPLEX_STEP = 1e-20  # the complex step's h: no cancellation, so h can be far below sqrt(eps)
DIFFERENCE_STEP = 2e-4  # fourth-order differences where the complex step fails: h^4 |phi^(5)| / 30 + 1e-16 |phi| / h
SCAN_RESOLUTION = 1e-4  # kinks located on a difference of step 1e-6 first, then refined


def _numpy_activation(f: Callable, name: str, expr: sp.Expr) -> Activation:
    def value_np(x):
        return np.asarray(f(np.asarray(x, dtype=float)), dtype=float)

    x = np.linspace(-3.0, 3.0, 13)
    try:
        values = value_np(x)
    except Exception as error:
        raise ValueError(f"activation {name} cannot be evaluated on a float64 array: {error}") from None
    _check_elementwise(value_np, name, values, x)
    slope_np, kinks = _complex_step(f, value_np, name)
    exact = slope_np is not None
    if not exact:  # kinks located to 1e-4 on a finite-difference slope, corners then from the pieces
        fine_slope = lambda x: _differences(value_np, x, (), 1e-6)  # noqa: E731
        kinks = numeric_kinks(value_np, fine_slope, name, SCAN_RESOLUTION, 1e-8)
        kinks = distinct([_refined(value_np, fine_slope, k) for k in kinks])
        slope_np = lambda x: _differences(value_np, x, kinks)  # noqa: E731

    def through_numpy(g: Callable[[np.ndarray], np.ndarray]) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda t: torch.as_tensor(g(t.detach().cpu().double().numpy()), dtype=t.dtype, device=t.device)

    # a kink located on a difference may be 2e-4 off (a cusp is not refined): phi' is read from 1e-3 to 0.1 away
    nearest = 1e-9 if exact else 1e-3
    return _with_kinks(name, expr, (value_np, through_numpy(value_np), slope_np, through_numpy(slope_np)), kinks,
                       nearest)


def _refined(value_np: Callable, slope_np: Callable, kink: float) -> float:
    """A kink located to ``SCAN_RESOLUTION`` located again: as a corner of phi, else as one of phi' (a jump of
    phi'', as of softsign), else (a cusp) where it was."""
    again = refined_corner(value_np, kink, within=2 * SCAN_RESOLUTION)
    return again if again != kink else refined_corner(slope_np, kink, within=2 * SCAN_RESOLUTION)


def _complex_step(f: Callable, value_np: Callable, name: str) -> tuple[Callable | None, tuple[float, ...]]:
    """phi'(x) = Im phi(x + i h) / h and the kinks it shows, if phi is analytic in numpy's complex arithmetic away
    from them (checked against a finite difference), else (None, ())."""

    def slope_np(x):
        x = np.asarray(x, dtype=float)
        return np.imag(f(x + 1j * COMPLEX_STEP)) / COMPLEX_STEP

    x = np.linspace(-2.9, 2.9, 59)
    try:
        with np.errstate(all="ignore"):
            kinks = numeric_kinks(value_np, slope_np, name)
            x = x[np.all(np.abs(x[:, None] - np.array([*kinks, np.inf])) > 0.01, axis=1)]
            ok = np.allclose(slope_np(x), _differences(value_np, x, kinks, 1e-6), rtol=1e-6, atol=1e-8)
    except Exception:  # complex input refused (math.exp, ...)
        ok = False
    return (slope_np, kinks) if ok else (None, ())


def _differences(value_np: Callable, x: np.ndarray, kinks: tuple[float, ...], h: float = DIFFERENCE_STEP
                 ) -> np.ndarray:
    """phi'(x) by fourth-order differences of step h (error about h^4 |phi^(5)| + 1e-16 |phi| / h): central, or
    one-sided away from a kink closer than 2.5 h, so that no stencil straddles one."""
    x = np.asarray(x, dtype=float)
    h = h * np.maximum(1.0, np.abs(x))  # relative beyond |x| = 1: x + h is then rounded alike in every binade
    side = np.zeros_like(x)
    for k in kinks:
        side = np.where(np.abs(x - k) < 2.5 * h, np.where(x >= k, 1.0, -1.0), side)
    central = (value_np(x - 2 * h) - 8 * value_np(x - h) + 8 * value_np(x + h) - value_np(x + 2 * h)) / (12 * h)
    if not side.any():
        return central
    s = np.where(side == 0, 1.0, side)
    one_sided = s * (-25 * value_np(x) + 48 * value_np(x + s * h) - 36 * value_np(x + 2 * s * h)
                     + 16 * value_np(x + 3 * s * h) - 3 * value_np(x + 4 * s * h)) / (12 * h)
    return np.where(side == 0, central, one_sided)
