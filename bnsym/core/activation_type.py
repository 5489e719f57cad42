"""The :class:`Activation` type: a coordinatewise phi as one SymPy expression with numpy and torch callables.

The built-in activations and the name parser live in :mod:`bnsym.core.activations`, what a user brings (formulas,
SymPy expressions, callables) in :mod:`bnsym.core.user_activations`; both build this type.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property, reduce
from typing import Callable

import numpy as np

from .lazy import lazy_module

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use

torch = lazy_module("torch")


@dataclass(frozen=True)
class Deferred:
    """A SymPy expression built when first read: ``build()`` gives it (see :class:`Activation`'s ``expr``)."""

    build: Callable[[], sp.Expr]


class _BuiltOnFirstRead:
    """A field that reads as a SymPy expression: given a :class:`Deferred`, its ``build()`` on the first read, kept.

    So a hand-written activation (relu) imports no SymPy (about 0.3 s of CPU) until a route asks for its formula.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, instance: object, owner: type | None = None) -> sp.Expr:
        if instance is None:
            raise AttributeError(self.slot[1:])  # no class-level default: the dataclass field is required
        value = instance.__dict__[self.slot]
        if isinstance(value, Deferred):
            value = instance.__dict__[self.slot] = value.build()
        return value

    def __set__(self, instance: object, value: sp.Expr | Deferred) -> None:
        instance.__dict__[self.slot] = value


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: the routes' caches key on the object
class Activation:
    """A coordinatewise nonlinearity phi with its symbolic and numeric forms (``expr`` may be given as a
    ``bnsym.core.activation_type.Deferred``, built when first read)."""

    name: str
    expr: sp.Expr = _BuiltOnFirstRead()
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
        from .symbols import z

        value_np, value_t = lambdified(expr)
        slope_np, slope_t = lambdified(sp.diff(expr, z))
        return cls(name, expr, value_np, value_t, slope_np, slope_t, degree=degree, kinks=kinks)

    @cached_property
    def ab(self) -> tuple[float, float] | None:
        """(a, b) = (phi(1), -phi(-1)) for positive-homogeneous phi = a rho_alpha(z) - b rho_alpha(-z) (Prop E.17),
        from the numeric phi (a hand-written phi builds no SymPy expression for them)."""
        if self.degree is None:
            return None
        return float(self.numpy(1.0)), -float(self.numpy(-1.0))

    @property
    def derivative(self) -> sp.Expr:
        """phi'(z) as a SymPy expression."""
        from .symbols import z

        return sp.diff(self.expr, z)

    @property
    def is_homogeneous(self) -> bool:
        return self.degree is not None

    def __str__(self) -> str:
        return self.name


def lambdified(expr: sp.Expr) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[torch.Tensor], torch.Tensor]]:
    """numpy and torch callables of ``expr`` by ``sympy.lambdify``.

    Numeric constants are evaluated first, inside products too (``sp.nfloat``; ``evalf`` leaves sqrt(2) z / 2):
    the torch printer spells sqrt(2) as torch.sqrt of a Python int, which torch rejects. A constant (the slope of
    the identity) lambdifies to a bare number, so it is broadcast to the argument's shape and dtype. ``Max`` and
    ``Min`` become ``torch.maximum`` and ``torch.minimum`` (the torch printer writes max and min, which torch reads as
    torch.max and torch.min: they refuse a number beside a tensor). The torch callable is lambdified on its first call.
    """
    from .symbols import z

    numeric = sp.nfloat(expr, 17)
    if not numeric.free_symbols:
        constant = float(numeric)
        return (lambda x: np.full(np.shape(x), constant)), (lambda x: torch.full_like(x, constant))
    f_np = sp.lambdify(z, numeric, modules=["scipy", "numpy"])
    return (lambda x: f_np(np.asarray(x, dtype=float))), _built_on_first_call(
        lambda: sp.lambdify(z, numeric, modules=[{"max": _elementwise("maximum"), "min": _elementwise("minimum")},
                                                 "torch"]))


def _elementwise(name: str) -> Callable[..., torch.Tensor]:
    """torch.maximum or torch.minimum over any number of arguments, numbers taken as tensors like the first tensor."""
    def apply(*args):
        like = next(a for a in args if isinstance(a, torch.Tensor))
        tensors = [a if isinstance(a, torch.Tensor) else torch.as_tensor(a, dtype=like.dtype, device=like.device)
                   for a in args]
        return reduce(getattr(torch, name), tensors)

    return apply


def _built_on_first_call(build: Callable[[], Callable]) -> Callable:
    """The function ``build()`` returns, built when first called: lambdifying for torch imports torch (about 1.5 s
    of CPU), which the theory's numpy routes never need. Built under a lock, since SymPy is not thread-safe."""
    lock, built = threading.Lock(), []

    def function(x):
        if not built:
            with lock:
                if not built:
                    built.append(build())
        return built[0](x)

    return function
