"""The generated pages: results dashboard, errata and CLI reference, rebuilt on every build.

Each page's source (``book/dashboard.md`` ...) holds its title and introduction; ``source-read`` appends the
generated MyST. These pages are read after every chapter (whose execution writes the records) and re-read on
every build, so an unchanged chapter served from the jupyter cache still feeds them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging

from bnsym import cli
from bnsym.report import CHECKS_DIR_ENV, Check, Erratum, load_checks, load_errata

logger = logging.getLogger(__name__)


def _list_table(header: Sequence[str], rows: Sequence[Sequence[str]], css_class: str) -> str:
    lines = ["```{list-table}", ":header-rows: 1", f":class: {css_class}", ""]
    for row in (header, *rows):
        lines += [f"* - {row[0]}", *(f"  - {cell}" for cell in row[1:])]
    return "\n".join(lines + ["```", ""])


def _link(anchor: str | None, docname: str) -> str:
    if anchor is None:
        return f"{{doc}}`chapter </{docname}>`"
    return f"{{eq}}`{anchor}`" if anchor.startswith("eq-") else f"{{ref}}`cell <{anchor}>`"


def _chapter_docs(env: BuildEnvironment, chapters: set[str]) -> dict[str, str]:
    """Chapter name (a notebook's file name) -> docname, for the chapters that are in the book."""
    docs = {doc.rsplit("/", 1)[-1]: doc for doc in env.found_docs}
    missing = chapters - set(docs)
    if missing:
        logger.info(f"bnsym: records of chapters not in the book are left out: {sorted(missing)}")
    return {chapter: docs[chapter] for chapter in chapters if chapter in docs}


def dashboard(env: BuildEnvironment, checks: list[Check]) -> str:
    """The results dashboard: one row per recorded check."""
    docs = _chapter_docs(env, {c.chapter for c in checks})
    checks = [c for c in checks if c.chapter in docs]
    failed = sum(not c.passed for c in checks)
    rows = [[f"{{doc}}`{c.chapter} </{docs[c.chapter]}>`", c.quantity, f"{c.theory:.6g}", f"{c.estimate:.6g}",
             f"{c.error:.2g}", "" if c.z is None else f"{c.z:.2f}", f"{c.tolerance:.2g} ({c.rule})",
             "pass" if c.passed else "**FAIL**", _link(c.anchor, docs[c.chapter])] for c in checks]
    summary = (f"Checks: {len(checks)} from {len(docs)} chapters; passed: {len(checks) - failed}; failed: {failed}. "
               "Click a column's header to sort by it.\n\n")
    return summary + _list_table(["chapter", "quantity", "theory", "estimate", "SE", "z", "tolerance", "status",
                                  "evidence"], rows, "bnsym-sortable bnsym-dashboard")


def errata(env: BuildEnvironment, records: list[Erratum]) -> str:
    """The errata page: every erratum and ambiguity the chapters state, paper by paper."""
    docs = _chapter_docs(env, {e.chapter for e in records})
    records = sorted((e for e in records if e.chapter in docs), key=lambda e: (e.paper, e.chapter))
    rows = [[f"{{cite:t}}`{e.paper}`", e.location, e.kind, e.original, e.corrected,
             f"{_link(e.evidence, docs[e.chapter])} in {{doc}}`{e.chapter} </{docs[e.chapter]}>`", e.strength]
            for e in records]
    kinds = {kind: sum(e.kind == kind for e in records) for kind in ("erratum", "ambiguity")}
    summary = (f"Errata: {kinds['erratum']}; ambiguities: {kinds['ambiguity']}; from {len(docs)} chapters. "
               "Click a column's header to sort by it.\n\n")
    return summary + _list_table(["paper", "where", "kind", "printed", "corrected", "evidence", "strength"],
                                 rows, "bnsym-sortable bnsym-errata")


def cli_reference(env: BuildEnvironment) -> str:
    """The ``bnsym`` command's help, main parser and each subcommand, from the parser itself."""
    parser = cli._parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = ["## `bnsym`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for name, sub in commands.choices.items():
        parts += [f"## `bnsym {name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def _records_dir() -> str:
    return os.environ[CHECKS_DIR_ENV]


GENERATORS: dict[str, Callable[[BuildEnvironment], str]] = {
    "book/dashboard": lambda env: dashboard(env, load_checks(_records_dir())),
    "book/errata": lambda env: errata(env, load_errata(_records_dir())),
    "book/cli": cli_reference,
}


def _append(app: Sphinx, docname: str, source: list[str]) -> None:
    if docname in GENERATORS:
        source[0] = source[0].rstrip("\n") + "\n\n" + GENERATORS[docname](app.env)


def _read_last(app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
    docnames.sort(key=lambda doc: doc in GENERATORS)  # stable: chapters keep their order, generated pages last


def _always_outdated(app: Sphinx, env: BuildEnvironment, added: set, changed: set, removed: set) -> list[str]:
    return [doc for doc in GENERATORS if doc in env.found_docs]


def setup(app: Sphinx) -> None:
    app.connect("source-read", _append)
    app.connect("env-before-read-docs", _read_last)
    app.connect("env-get-outdated", _always_outdated)
