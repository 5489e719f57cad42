"""Public names imported on first use (PEP 562), so that ``import bnsym`` and ``bnsym --help`` do not pay for
torch, SymPy and SciPy (about 3 s of CPU) before anything needs them; and modules imported on first use, so that a
route that needs no torch (the closed forms of relu) does not pay for it."""

from __future__ import annotations

import sys
from importlib import import_module
from importlib.util import find_spec
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


class _ImportedOnFirstUse(ModuleType):
    """Stands for the module of its name: the first attribute read imports it (thread-safe: the import system locks
    each module), and every read is the real module's attribute, so nothing is copied that could go stale."""

    def __getattr__(self, attribute: str) -> Any:
        return getattr(sys.modules.get(self.__name__) or import_module(self.__name__), attribute)

    def __reduce__(self) -> tuple[Callable[[str], ModuleType], tuple[str]]:
        """Pickled as the import of its module (a function shipped to a Dask worker may refer to the stand-in)."""
        return import_module, (self.__name__,)


def lazy_module(name: str) -> ModuleType:
    """The module ``name`` where it is imported already, else a stand-in that imports it on first use, for heavy
    dependencies that only some routes need (torch: about 1.5 s of CPU): ``torch = lazy_module("torch")`` in place
    of ``import torch``."""
    return sys.modules.get(name) or _ImportedOnFirstUse(name)


def is_tensor(value: object) -> bool:
    """Whether ``value`` is a torch tensor, without importing torch (about 1 s of CPU): where torch is not imported
    yet, nothing can be one."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)
