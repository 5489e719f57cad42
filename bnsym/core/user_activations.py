"""Activations a user brings: a formula, a SymPy expression, a torch function or module, a numpy callable.

* **A formula**, ``"x*sigmoid(1.702*x)"``: read by walking Python's syntax tree, never by ``eval``. It may hold
  numbers, one variable (any name), ``+ - * / **`` (``^`` means power), ``pi``, ``e`` and the functions of
  :data:`FUNCTIONS`; anything else is refused with what is allowed.
* **A SymPy expression** in any one free symbol: that symbol becomes :data:`~bnsym.core.symbols.z`.
* **A torch function or elementwise** ``nn.Module`` (``torch.nn.functional.gelu``, ``nn.SiLU()``): phi' by
  autograd. It has no closed-form expression, so its ``expr`` is an undefined function ``phi<k>(z)``, numbered
  to keep the routes' caches apart, and only the numeric routes take it.
* **A numpy callable**: phi' by the complex step, Im phi(x + i h) / h, when phi accepts complex input and the
  step agrees with a central difference; otherwise phi' raises, so gradient quantities are refused with the
  reason while forward quantities still work.
"""

from __future__ import annotations

import ast
import itertools
from typing import Callable

import numpy as np

from .activation_type import Activation
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
    if phi.is_real is False:
        raise ValueError(f"activation {text!r} is not real-valued")
    return Activation.from_expr(name, phi)


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
    """The activation of a torch function or elementwise module (phi' by autograd), or of a numpy callable."""
    from .symbols import z

    name = getattr(f, "__name__", None) or type(f).__name__
    expr = sp.Function(f"phi{next(_numbering)}")(z)  # an undefined function: only numeric routes apply
    probe = torch.linspace(-3.0, 3.0, 13, dtype=torch.float64, requires_grad=True)
    try:
        out = f(probe)
    except Exception:  # a numpy-only callable may raise anything on a tensor
        out = None
    if isinstance(out, torch.Tensor) and out.requires_grad:
        _check_elementwise(f, name, out.detach().numpy(), probe.detach().numpy(), torch_input=True)
        return _torch_activation(f, name, expr)
    return _numpy_activation(f, name, expr)


def _check_elementwise(f: Callable, name: str, values: np.ndarray, x: np.ndarray, torch_input: bool) -> None:
    """phi applied to a reversed array must give the reversed values: an activation acts coordinatewise."""
    if values.shape != x.shape:
        raise ValueError(f"activation {name} maps an array of shape {x.shape} to shape {values.shape}; "
                         "an activation acts coordinate by coordinate")
    flipped = x[::-1].copy()
    again = f(torch.from_numpy(flipped)).detach().numpy() if torch_input else np.asarray(f(flipped), dtype=float)
    if not np.allclose(again, values[::-1], rtol=1e-12, atol=1e-12, equal_nan=True):
        raise ValueError(f"activation {name} is not elementwise: reordering its input changes each output")


def _torch_activation(f: Callable, name: str, expr: sp.Expr) -> Activation:
    def slope_t(x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            leaf = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(f(leaf).sum(), leaf)
        return grad

    def through_torch(g: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[np.ndarray], np.ndarray]:
        return lambda x: g(torch.as_tensor(np.asarray(x, dtype=float))).detach().numpy()

    return Activation(name, expr, through_torch(f), f, through_torch(slope_t), slope_t)


COMPLEX_STEP = 1e-20  # the complex step's h: no cancellation, so h can be far below sqrt(eps)


def _numpy_activation(f: Callable, name: str, expr: sp.Expr) -> Activation:
    def value_np(x):
        return np.asarray(f(np.asarray(x, dtype=float)), dtype=float)

    x = np.linspace(-3.0, 3.0, 13)
    try:
        values = value_np(x)
    except Exception as error:
        raise ValueError(f"activation {name} cannot be evaluated on a float64 array: {error}") from None
    _check_elementwise(f, name, values, x, torch_input=False)
    slope_np = _complex_step(f, name, value_np)

    def through_numpy(g: Callable[[np.ndarray], np.ndarray]) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda t: torch.as_tensor(g(t.detach().cpu().double().numpy()), dtype=t.dtype, device=t.device)

    return Activation(name, expr, value_np, through_numpy(value_np), slope_np, through_numpy(slope_np))


def _complex_step(f: Callable, name: str, value_np: Callable) -> Callable[[np.ndarray], np.ndarray]:
    """phi'(x) = Im phi(x + i h) / h if phi is analytic in numpy's complex arithmetic (checked against a central
    difference), else a function that refuses with the reason."""

    def slope_np(x):
        x = np.asarray(x, dtype=float)
        return np.imag(f(x + 1j * COMPLEX_STEP)) / COMPLEX_STEP

    x, h = np.linspace(-2.9, 2.9, 11), 1e-6
    try:
        with np.errstate(all="ignore"):
            ok = np.allclose(slope_np(x), (value_np(x + h) - value_np(x - h)) / (2 * h), rtol=1e-5, atol=1e-7)
    except Exception:  # complex input refused (np.maximum, math.exp, ...)
        ok = False
    if ok:
        return slope_np

    def refuse(x):
        raise ValueError(f"activation {name}: phi' is unknown (a numpy callable whose complex step Im phi(x + ih)/h "
                         "fails or disagrees with its slope), so gradient quantities cannot use it; pass a torch "
                         "function or a formula instead")

    return refuse
