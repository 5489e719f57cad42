"""Answers of the command line kept on disk: ``bnsym predict`` derives its answer once per (arguments, code), and
answers the same question again without importing torch, SymPy or SciPy (about 3 s of CPU) or deriving anything.

* **Where.** ``$BNSYM_CACHE_DIR``, else the user's cache directory: ``$XDG_CACHE_HOME/bnsym`` or
  ``~/.cache/bnsym`` (``%LOCALAPPDATA%\\bnsym\\cache`` on Windows); one folder per task.
* **Key.** sha256 of the task, its arguments as given and a version (:func:`code_version`): a digest of bnsym's
  source and the versions of Python, numpy, SciPy, SymPy and torch. A changed formula, or a new SymPy that derives
  it differently, never serves an old number; the stored answer is the JSON the computation returned, so every
  number reads back bit for bit.
* **Safety.** Records are sweep records (:mod:`bnsym.core.store`): written to a temporary file and renamed over
  the record (concurrent writers leave one whole record), checked against their key when read, and a corrupt one
  is moved aside and computed again. A cache that cannot be read or written is passed by: the answer is computed.
"""

from __future__ import annotations

import hashlib
import os
import platform
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.store import Store, config_key

DEPENDENCIES = ("numpy", "scipy", "sympy", "torch")


def cache_directory() -> Path:
    """``$BNSYM_CACHE_DIR`` if set, else the platform's per-user cache folder for bnsym."""
    if os.environ.get("BNSYM_CACHE_DIR"):
        return Path(os.environ["BNSYM_CACHE_DIR"])
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "bnsym" / "cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bnsym"


@cache
def code_version() -> str:
    """sha256 of every ``.py`` file of the bnsym package (path and bytes) and the versions of Python and of
    :data:`DEPENDENCIES` (a few ms)."""
    digest = hashlib.sha256(platform.python_version().encode())
    for name in DEPENDENCIES:
        digest.update(f"{name}={metadata.version(name)}".encode())
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cached(task: str, arguments: Mapping[str, Any], compute: Callable[[], dict]) -> dict:
    """``compute()`` (a JSON-ready dict), or the answer stored for (task, arguments, :func:`code_version`).

    An exception of ``compute`` propagates and stores nothing.
    """
    version = code_version()
    key = config_key(task, dict(arguments), version)
    try:
        store = Store(cache_directory() / task)
        record = store.done(key, version)
    except (OSError, RuntimeError, ValueError):  # no home folder, a file in the way, an unreadable cache, or a
        store = record = None  # corrupt record that cannot be moved aside
    if record is not None:
        return record["result"]
    result = compute()
    try:
        if store is not None:
            store.save({"key": key, "task": task, "config": dict(arguments), "result": result, "error": None})
    except (OSError, ValueError):  # a read-only or full disk: the answer stands without the cache
        pass
    return result
