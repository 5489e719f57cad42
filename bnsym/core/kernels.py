"""Numeric kernels lambdified from the SymPy derivations, with their generated code kept in the package.

A derivation takes seconds of SymPy (the closed forms of relu's answers about 5 s); the code that
``sympy.lambdify`` writes from it does not change until the derivation or SymPy does. So a kernel is declared by
the function that builds it::

    @lambdified(modules="numpy")
    def _rate_kernel():
        return (alpha, B), derive_rate().result        # or {name: (arguments, expression), ...}

and calling ``_rate_kernel()`` returns the callable (a dict of them for a dict), compiled from the code stored in
:mod:`bnsym.core.generated_kernels`, without SymPy and without deriving. That code is what
``sympy.lambdify(arguments, expression, modules, cse=True)`` writes, with the names it uses recorded by their
module (numpy, scipy.special, ...), so the callable is the one lambdify returns, number for number. A kernel not
stored there yet (declared since the file was last written) is derived and lambdified as before.

One source of truth: the derivation. ``python -m bnsym.generate`` derives every declared kernel and writes
:mod:`bnsym.core.generated_kernels` anew; the tests derive them again and require the stored code to be identical.
The stored code is trusted at run time: after changing a derivation, write the file again (the tests fail until
then).
"""

from __future__ import annotations

import builtins
import inspect
import re
from functools import cache
from importlib import import_module
from types import CodeType, ModuleType
from typing import Any, Callable

Build = Callable[[], Any]
# a name of lambdified code -> (module, attribute) it is read from ("" for the module itself), or (None, the
# repr of a number)
Origin = tuple[str | None, str]
# where lambdify's namespaces take their names from, searched in this order
SOURCE_MODULES = ("numpy", "scipy.special", "math")
NUMBERS = {"int": int, "float": float, "complex": complex}
GENERATED = "bnsym.core.generated_kernels"
REGISTRY: dict[str, "Kernel"] = {}


class Kernel:
    """A declared kernel: ``build()`` gives (arguments, expression) or a dict of them; calling the kernel gives the
    callable (or dict of callables), from the stored code where it is stored, else by deriving."""

    def __init__(self, build: Build, modules: object, cse: bool) -> None:
        self.build, self.modules, self.cse = build, modules, cse
        self.key = f"{build.__module__}.{build.__qualname__}"
        self.__doc__, self.__wrapped__ = build.__doc__, build
        REGISTRY[self.key] = self

    @cache
    def __call__(self) -> Callable | dict[str, Callable]:
        stored = _stored()
        parts = [key for key in stored if key == self.key or key.startswith(self.key + ":")]
        if parts:
            functions = {key.partition(":")[2]: _compile(*stored[key]) for key in parts}
        else:
            functions = {part: function for part, (function, _, _) in self.derive().items()}
        return functions[""] if list(functions) == [""] else functions

    def derive(self) -> dict[str, tuple[Callable, dict[str, Origin], str]]:
        """{part: (callable, origins of its names, source)} by SymPy; part "" for a single kernel."""
        import sympy as sp

        built = self.build()
        parts = built if isinstance(built, dict) else {"": built}
        result = {}
        for part, (arguments, expression) in parts.items():
            if not isinstance(part, str) or ":" in part:
                raise TypeError(f"kernel {self.key}: parts are named by strings without ':', got {part!r}")
            function = sp.lambdify(arguments, expression, modules=self.modules, cse=self.cse)
            result[part] = (function, _origins(function), _numbered(inspect.getsource(function)))
        return result


def _numbered(source: str) -> str:
    """``source`` with lambdify's stand-ins for arguments that are no identifiers (``Dummy_43``, numbered by the
    process's count of SymPy Dummies) renamed ``dummy_0``, ``dummy_1``, ... in order of appearance."""
    names = dict.fromkeys(re.findall(r"\b_?Dummy_\d+\b", source))
    return re.sub(r"\b_?Dummy_\d+\b", lambda match: f"dummy_{list(names).index(match[0])}", source)


def lambdified(modules: object = "numpy", cse: bool = True) -> Callable[[Build], Kernel]:
    """Declare a kernel (see the module docstring): ``modules`` and ``cse`` as for ``sympy.lambdify``."""
    return lambda build: Kernel(build, modules, cse)


@cache
def _stored() -> dict[str, tuple[dict[str, Origin], str]]:
    from . import generated_kernels

    return generated_kernels.KERNELS


def _compile(origins: dict[str, Origin], source: str) -> Callable:
    """The function defined by ``source``, its names read from their modules as lambdify's namespace had them."""
    namespace: dict[str, Any] = {}
    for name, (module, attribute) in origins.items():
        if module is None:
            namespace[name] = NUMBERS[attribute.partition(":")[0]](attribute.partition(":")[2])
        else:
            value = import_module(module)
            namespace[name] = value if attribute == "" else getattr(value, attribute)
    name = source.partition("(")[0].removeprefix("def ")
    exec(compile(source, f"<generated kernel {name}>", "exec"), namespace)
    return namespace[name]


def _names(code: CodeType) -> set[str]:
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            names |= _names(constant)
    return names


def _origins(function: Callable) -> dict[str, Origin]:
    """Where each global name of a lambdified function comes from (ValueError for a name outside the numeric
    modules, e.g. a SymPy function lambdify could not translate)."""
    origins: dict[str, Origin] = {}
    for name in sorted(_names(function.__code__)):
        if name not in function.__globals__:
            if hasattr(builtins, name) or name in function.__code__.co_varnames:
                continue
            raise ValueError(f"{function.__name__} uses {name!r}, which its namespace lacks")
        value = function.__globals__[name]
        origins[name] = _origin(name, value)
    return origins


def _origin(name: str, value: Any) -> Origin:
    if isinstance(value, ModuleType):
        return value.__name__, ""
    for module_name in SOURCE_MODULES:
        module = import_module(module_name)
        for attribute in (name, getattr(value, "__name__", None)):
            if attribute and getattr(module, attribute, None) is value:
                return module_name, attribute
    if type(value).__name__ in NUMBERS:
        return None, f"{type(value).__name__}:{value!r}"
    raise ValueError(f"the lambdified name {name!r} ({value!r}) is in none of {SOURCE_MODULES}")
