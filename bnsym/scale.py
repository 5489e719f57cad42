"""Run sizes: ``BNSYM_SCALE=test`` (seconds, CI), ``book`` (default, minutes on a laptop CPU), ``paper`` (GPU).

Notebooks take every simulation size from :func:`current`, so one notebook is a fast test in CI, a
book page, and a paper-scale run on a GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    """Sizes of the Monte Carlo runs: network width N, number of independent networks, depth."""

    name: str
    width: int
    n_networks: int
    depth: int


SCALES = {
    "test": Scale("test", width=256, n_networks=8, depth=12),
    "book": Scale("book", width=1024, n_networks=32, depth=30),
    "paper": Scale("paper", width=1000, n_networks=200, depth=50),
}


def current() -> Scale:
    """The scale named by the environment variable BNSYM_SCALE (default ``book``)."""
    name = os.environ.get("BNSYM_SCALE", "book").strip().lower()
    if name not in SCALES:
        raise ValueError(f"BNSYM_SCALE={name!r} is not a known scale; use one of {', '.join(SCALES)}")
    return SCALES[name]
