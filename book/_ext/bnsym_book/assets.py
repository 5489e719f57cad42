"""What the HTML needs beyond Sphinx: MathJax shipped with the book, its CSS and JS, notebook downloads."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

STATIC = Path(__file__).resolve().parents[2] / "_static"
MATHJAX_ENTRY = "mathjax/tex-chtml.js"
# MathJax's other ready-made bundles and its SVG output are never loaded by tex-chtml.js.
_UNUSED = ("tex-mml-chtml.js", "tex-chtml-full.js", "tex-chtml-full-speech.js", "tex-svg.js", "tex-svg-full.js",
           "tex-mml-svg.js", "mml-chtml.js", "mml-svg.js", "node-main.js", "svg")


def mathjax_source() -> Path:
    """MathJax 3's es5 folder, from the pip package django-static-mathjax (import name ``mathjax``)."""
    spec = importlib.util.find_spec("mathjax")
    folder = Path(spec.origin).parent / "static" / "mathjax" / "es5" if spec and spec.origin else None
    if folder is None or not (folder / "tex-chtml.js").is_file():
        raise ExtensionError("MathJax is not installed: the book ships it instead of loading it from a CDN. "
                             "Install the book extra: pip install -c constraints.txt -e '.[book]'")
    return folder


def _configure(app: Sphinx, config) -> None:
    mathjax_source()  # fail early, before any notebook runs
    config.mathjax_path = MATHJAX_ENTRY
    config.html_static_path = [*config.html_static_path, str(STATIC)]


def _copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    source = mathjax_source()
    target = Path(app.outdir) / "_static" / "mathjax"
    version = json.loads((source.parent / "package.json").read_text())["version"]
    stamp = target / ".version"
    if stamp.is_file() and stamp.read_text() == version:
        return
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, ignore=lambda folder, names: [n for n in names if n in _UNUSED])
    stamp.write_text(version)


def _offer_ipynb(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Put the executed notebook of a chapter into _sources, where the theme's download menu links to it."""
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if doctree is None or not executed.is_file() or context.get("page_source_suffix") != ".md":
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(executed, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def setup(app: Sphinx) -> None:
    app.connect("config-inited", _configure)
    app.connect("build-finished", _copy_mathjax)
    app.connect("html-page-context", _offer_ipynb, priority=500)  # before the theme builds its download menu
    app.add_css_file("bnsym.css")
    app.add_js_file("bnsym_sortable.js")
