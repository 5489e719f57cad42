"""Public names imported on first use (PEP 562), so that ``import bnsym`` and ``bnsym --help`` do not pay for
torch, SymPy and SciPy (about 3 s of CPU) before anything needs them; and modules executed on first use, so that a
route that needs no torch (the closed forms of relu) does not pay for it."""

from __future__ import annotations

import sys
from importlib import import_module
from importlib.util import LazyLoader, find_spec, module_from_spec
from types import ModuleType
from typing import Any, Callable


def lazy_attributes(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``exports`` maps each public name to the module (relative to
    the package) that defines it; any other name that is a submodule is imported as such."""
    namespace = import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(import_module(f".{exports[name]}", package), name)
        elif not name.startswith("__") and find_spec(f"{package}.{name}") is not None:
            value = import_module(f".{name}", package)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value  # later lookups find it without this hook
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__


def lazy_module(name: str) -> ModuleType:
    """The module ``name``, executed on first use of one of its attributes (``importlib.util.LazyLoader``), for
    heavy dependencies that only some routes need (torch: about 1.5 s of CPU); the module itself where it is
    imported already. Used as ``torch = lazy_module("torch")`` in place of ``import torch``."""
    if name in sys.modules:
        return sys.modules[name]
    spec = find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    spec.loader = LazyLoader(spec.loader)
    module = module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
