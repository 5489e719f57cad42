"""Sphinx extension of the bnsym book: generated pages, offline MathJax, notebook downloads.

Registered in book/_config.yml (``sphinx: local_extensions``). At every build it

- sets ``BNSYM_PROGRESS=0`` (no progress bar in an executed page), one thread per kernel unless the caller
  set it, and ``BNSYM_CHECKS_DIR`` to the ``checks`` folder inside the jupyter cache (records live and die
  with the cached outputs that wrote them);
- generates the results dashboard, the errata page and the CLI reference from the records and the parser
  (:mod:`.pages`), re-reading those pages on every build, after every chapter;
- ships MathJax with the HTML (:mod:`.assets`) and offers each chapter's executed ``.ipynb`` for download.
"""

from __future__ import annotations

import os
from pathlib import Path

from sphinx.application import Sphinx

from . import assets, pages

__version__ = "1.0"


# One BLAS/OpenMP/torch thread per kernel: on a shared 2-core machine the second thread mostly spin-waits
# (chapter 7's Table 1 networks: 49 CPU-s with torch's two threads, 4 CPU-s with one).
_ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _environment(app: Sphinx) -> None:
    os.environ["BNSYM_PROGRESS"] = "0"
    for name in _ONE_THREAD:
        os.environ.setdefault(name, "1")
    os.environ.setdefault("BNSYM_CHECKS_DIR", str(checks_dir(app)))


def checks_dir(app: Sphinx) -> Path:
    """The folder of the check and erratum records: ``checks`` inside the book's jupyter cache."""
    return Path(app.env.mystnb_config.execution_cache_path) / "checks"


def setup(app: Sphinx) -> dict:
    app.setup_extension("myst_nb")
    app.connect("builder-inited", _environment, priority=900)  # after myst-nb has set the cache path
    pages.setup(app)
    assets.setup(app)
    return {"version": __version__, "parallel_read_safe": False, "parallel_write_safe": True}
