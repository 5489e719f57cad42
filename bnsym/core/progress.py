"""Progress bars: shown in a terminal and in JupyterLab, never in the built book or under a test.

One switch decides for the whole library and the chapters. ``BNSYM_PROGRESS=0`` turns bars off and
``BNSYM_PROGRESS=1`` on; unset, they show when stderr is a terminal or the code runs in a Jupyter kernel (a
front end such as JupyterLab draws them). The book build and the notebook tests set ``BNSYM_PROGRESS=0``, so
no executed page carries a bar.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable

from tqdm import tqdm

PROGRESS_ENV = "BNSYM_PROGRESS"
_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def progress_enabled() -> bool:
    """Whether progress bars show here: ``$BNSYM_PROGRESS`` if set, else a terminal or a Jupyter kernel."""
    setting = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if setting in _ON:
        return True
    if setting in _OFF:
        return False
    if setting:
        raise ValueError(f"{PROGRESS_ENV} must be one of {_ON + _OFF} or unset, got {setting!r}")
    return _stderr_is_terminal() or _in_kernel()


def _stderr_is_terminal() -> bool:
    return bool(getattr(sys.stderr, "isatty", None) and sys.stderr.isatty())


def _in_kernel() -> bool:
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return type(shell).__name__ == "ZMQInteractiveShell"


def progress_bar(iterable: Iterable[Any] | None = None, *, show: bool = True, **options: Any) -> tqdm:
    """A tqdm bar over ``iterable`` (or a manual one with ``total=``), drawn only if ``show`` and
    :func:`progress_enabled`. ``options`` go to tqdm (``desc``, ``total``, ...)."""
    return tqdm(iterable, disable=not (show and progress_enabled()), **options)
