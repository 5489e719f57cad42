"""Public names imported on first use (PEP 562), so that ``import bnsym`` and ``bnsym --help`` do not pay for
torch, SymPy and SciPy (about 3 s of CPU) before anything needs them."""

from __future__ import annotations

from importlib import import_module
from importlib.util import find_spec
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
