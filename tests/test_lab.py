"""``make lab``'s promise: a chapter opened as a notebook (Jupytext, as JupyterLab does) runs top to bottom.

The chapter is converted with Jupytext and executed in a fresh kernel from ``notebooks/``, outside the book
build and without its settings: no ``BNSYM_PROGRESS`` (so progress bars are on, as in Lab) and no records
folder. The book build and nbval test the other chapters; this one stands for all of them.
"""

from __future__ import annotations

import os
from pathlib import Path

import jupytext
import nbclient
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "notebooks" / "07_gradient_scale_dilution.md"  # the quickest at test scale; it draws progress bars


@pytest.mark.slow
def test_a_chapter_runs_as_a_lab_notebook(monkeypatch):
    for name in ("BNSYM_PROGRESS", "BNSYM_CHECKS_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BNSYM_SCALE", "test")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    notebook = jupytext.read(CHAPTER)
    nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(CHAPTER.parent)}}).execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count for cell in code)
    assert not [out for cell in code for out in cell.outputs if out.output_type == "error"]
