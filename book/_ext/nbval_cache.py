"""pytest plugin: the notebooks nbval executes fill the book's jupyter cache, so the book build reuses them.

``pytest --nbval-lax -p nbval_cache --nbval-cache=_build/.jupyter_cache _nbtest`` (the Makefile's ``nbtest``):
after every cell of a converted notebook ``_nbtest/NAME.ipynb`` has passed, the plugin reads its source
``notebooks/NAME.md`` the way the book does (myst-nb's reader), attaches nbval's outputs cell by cell and stores
the result in the jupyter cache. myst-nb's ``execute_notebooks: cache`` matches a notebook by its code cells,
so the book build then renders these outputs instead of executing the chapter a second time. A notebook with
a failed or skipped cell, or whose code cells differ from its source's, is not stored (the book executes it).
With ``--nbval-cache-missing-only`` (the Makefile's ``book``) a notebook whose source the cache already holds is
not collected, so an unchanged rebuild executes nothing.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

import nbformat
import pytest
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from myst_nb.core.read import read_myst_markdown_notebook
from nbval.plugin import IPyNbCell


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nbval-cache", "store notebooks executed by nbval in the book's jupyter cache")
    group.addoption("--nbval-cache", default=None, help="the jupyter cache folder of the book build")
    group.addoption("--nbval-cache-sources", default="notebooks", help="folder of the notebooks' MyST sources")
    group.addoption("--nbval-cache-missing-only", action="store_true",
                    help="skip the notebooks that the cache already holds with the same code cells")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With --nbval-cache-missing-only: ignore a converted notebook whose source is cached with the same code."""
    if collection_path.suffix != ".ipynb" or not config.getoption("nbval_cache_missing_only"):
        return None
    cache_dir = config.getoption("nbval_cache")
    source = Path(config.getoption("nbval_cache_sources")) / f"{collection_path.stem}.md"
    if not cache_dir or not Path(cache_dir).exists() or not source.exists():
        return None
    notebook = read_myst_markdown_notebook(source.read_text(), add_source_map=True, path=source)
    try:
        get_cache(str(cache_dir)).match_cache_notebook(notebook)
    except KeyError:
        return None
    return True


_runs: dict[str, dict] = {}  # notebook path -> {"outputs": [...], "seconds": float, "ok": bool}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = (yield).get_result()
    if not isinstance(item, IPyNbCell) or not item.config.getoption("nbval_cache"):
        return
    run = _runs.setdefault(str(item.parent.path), {"outputs": [], "seconds": 0.0, "ok": True})
    if report.when == "call":
        run["outputs"].append(getattr(item, "test_outputs", []))
        run["seconds"] += report.duration
    run["ok"] = run["ok"] and report.outcome == "passed"


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if not isinstance(item, IPyNbCell) or not item.config.getoption("nbval_cache"):
        return
    if nextitem is not None and nextitem.parent is item.parent:
        return
    run = _runs.pop(str(item.parent.path), None)
    cells = [cell for cell in item.parent.nb.cells if cell.cell_type == "code"]
    if run is None or not run["ok"] or len(run["outputs"]) != len(cells):
        return
    source = Path(item.config.getoption("nbval_cache_sources")) / f"{item.parent.path.stem}.md"
    _store(Path(item.config.getoption("nbval_cache")), source, cells, run)


def _store(cache_dir: Path, source: Path, executed: list, run: dict) -> None:
    notebook = read_myst_markdown_notebook(source.read_text(), add_source_map=True, path=source)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    if [c.source.strip() for c in code] != [c.source.strip() for c in executed]:
        print(f"nbval_cache: {source} and its converted notebook differ in their code cells; not cached")
        return
    for count, (cell, outputs) in enumerate(zip(code, run["outputs"]), start=1):
        cell.execution_count = count
        cell.outputs = [nbformat.from_dict({**out, "execution_count": count} if out.output_type == "execute_result"
                                           else out) for out in outputs]
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".nbval_cache.lock", "w") as lock:  # pytest-xdist workers share the cache's database
        fcntl.flock(lock, fcntl.LOCK_EX)
        get_cache(str(cache_dir)).cache_notebook_bundle(
            CacheBundleIn(notebook, str(source.resolve()), data={"execution_seconds": run["seconds"]}),
            check_validity=False, overwrite=True)
