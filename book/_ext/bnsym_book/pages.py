"""The generated pages: results dashboard, reproduction status, errata and CLI reference, rebuilt on every build.

Each page's source (``book/dashboard.md`` ...) holds its title and introduction; ``source-read`` appends the
generated MyST. These pages are read after every chapter (whose execution writes the records) and re-read on
every build, so an unchanged chapter served from the jupyter cache still feeds them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import yaml
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging

from bnsym import cli
from bnsym.core.statistics import VERDICTS
from bnsym.report import CHECKS_DIR_ENV, ITEM_STATUSES, Check, Erratum, Item, load_checks, load_errata, load_items

from . import calibration

logger = logging.getLogger(__name__)

#: The registry of the papers' numbered items (see its header), next to the book's pages.
REGISTRY = Path(__file__).resolve().parents[2] / "registry.yml"


def _list_table(header: Sequence[str], rows: Sequence[Sequence[str]], css_class: str) -> str:
    lines = ["```{list-table}", ":header-rows: 1", f":class: {css_class}", ""]
    for row in (header, *rows):
        lines += [f"* - {row[0]}", *(f"  - {cell}" for cell in row[1:])]
    return "\n".join(lines + ["```", ""])


def _link(anchor: str | None, docname: str) -> str:
    if anchor is None:
        return f"{{doc}}`chapter </{docname}>`"
    return f"{{eq}}`{anchor}`" if anchor.startswith("eq-") else f"{{ref}}`cell <{anchor}>`"


def _evidence(label: str) -> str:
    """A link to a MyST label, named by the label (an equation's by its number)."""
    return f"{{eq}}`{label}`" if label.startswith("eq-") else f"{{ref}}`{label} <{label}>`"


def _chapter_docs(env: BuildEnvironment, chapters: set[str]) -> dict[str, str]:
    """Chapter name (a notebook's file name) -> docname, for the chapters that are in the book."""
    docs = {doc.rsplit("/", 1)[-1]: doc for doc in env.found_docs}
    missing = chapters - set(docs)
    if missing:
        logger.info(f"bnsym: records of chapters not in the book are left out: {sorted(missing)}")
    return {chapter: docs[chapter] for chapter in chapters if chapter in docs}


def _chapter_summary(checks: list[Check], docs: dict[str, str]) -> str:
    """Per chapter: checks, passed, those with a standard error, their largest abs(z) and KS distance."""
    rows = []
    for chapter in sorted(docs):
        mine = [c for c in checks if c.chapter == chapter]
        n_se, ks = calibration.family(mine)
        z = calibration.z_scores(mine)
        rows.append([f"{{doc}}`{chapter} </{docs[chapter]}>`", str(len(mine)), str(sum(c.passed for c in mine)),
                     str(n_se), f"{np.max(np.abs(z)):.2f}" if z.size else "", ks])
    return _list_table(["chapter", "checks", "passed", "SE checks", "largest abs(z)", "KS D (p)"], rows,
                       "bnsym-sortable bnsym-chapter-summary")


def dashboard(env: BuildEnvironment, checks: list[Check]) -> str:
    """The results dashboard: per chapter a summary, the calibration figure, then one row per recorded check."""
    docs = _chapter_docs(env, {c.chapter for c in checks})
    checks = [c for c in checks if c.chapter in docs]
    failed = sum(not c.passed for c in checks)
    rows = [[f"{{doc}}`{c.chapter} </{docs[c.chapter]}>`", c.quantity, f"{c.theory:.6g}", f"{c.estimate:.6g}",
             f"{c.error:.2g}", "" if c.z is None else f"{c.z:.2f}", f"{c.tolerance:.2g} ({c.rule})",
             "pass" if c.passed else "**FAIL**", _link(c.anchor, docs[c.chapter])] for c in checks]
    summary = (f"Checks: {len(checks)} from {len(docs)} chapters; passed: {len(checks) - failed}; failed: {failed}. "
               "Click a column's header to sort by it.\n\n")
    return ("## Per chapter\n\n" + summary + _chapter_summary(checks, docs) + "\n## Calibration\n\n"
            + calibration.section(checks) + "## Every check\n\n"
            + _list_table(["chapter", "quantity", "theory", "estimate", "SE", "z", "tolerance", "status",
                           "evidence"], rows, "bnsym-sortable bnsym-dashboard"))


def load_registry(path: Path = REGISTRY) -> dict[str, list[dict]]:
    """The registry: paper key -> its items (``item``, ``title`` and, where no chapter records it, ``missing``)."""
    return yaml.safe_load(path.read_text())


def item_status(records: Sequence[Item]) -> str:
    """The status an item shows: the last of :data:`~bnsym.report.ITEM_STATUSES` that any chapter records (its
    weakest link), else missing. An item whose theory is derived but whose experiment is a substitute shows as
    substituted; a derivation and a simulation check of it together show as checked."""
    return max((r.status for r in records), key=ITEM_STATUSES.index) if records else "missing"


def status(env: BuildEnvironment, items: list[Item], registry: dict[str, list[dict]]) -> str:
    """The reproduction-status page: per paper the counts per status and per verdict, then every item with its
    evidence, and for an empirical claim its verdict(s) and networks per arm."""
    docs = _chapter_docs(env, {i.chapter for i in items})
    known = {(paper, entry["item"]) for paper, entries in registry.items() for entry in entries}
    for record in items:
        if (record.paper, record.item) not in known:
            logger.warning(f"bnsym: {record.chapter} records {record.paper} {record.item!r}, "
                           "which book/registry.yml does not list")
    counts, rows = [], []
    for paper, entries in registry.items():
        tally = dict.fromkeys(ITEM_STATUSES, 0)
        verdicts = dict.fromkeys(VERDICTS, 0)
        for entry in entries:
            records = [r for r in items if (r.paper, r.item) == (paper, entry["item"]) and r.chapter in docs]
            if not records and "missing" not in entry:
                logger.warning(f"bnsym: no chapter records {paper} {entry['item']!r} and the registry does not mark "
                               "it missing")
            shown = item_status(records)
            tally[shown] += 1
            evidence = "; ".join(f"{_evidence(r.evidence)} in {{doc}}`{r.chapter} </{docs[r.chapter]}>` ({r.status})"
                                 for r in records)
            why = "; ".join(r.why for r in records if r.why) if records else entry.get("missing", "")
            judged = [r for r in records if r.verdict is not None]
            for r in judged:
                verdicts[r.verdict] += 1
            verdict = "; ".join(f"{r.verdict} ({r.resolution})" for r in judged)
            networks = "; ".join(str(r.networks) for r in records if r.networks is not None)
            rows.append([f"{{cite:t}}`{paper}`", entry["item"], entry["title"], shown, verdict, networks, evidence,
                         why])
        counts.append([f"{{cite:t}}`{paper}`", str(len(entries)), *(str(tally[s]) for s in ITEM_STATUSES),
                       *(str(verdicts[v]) for v in VERDICTS)])
    return ("## Counts per paper\n\n"
            + _list_table(["paper", "items", *ITEM_STATUSES, *(f"verdict: {v}" for v in VERDICTS)], counts,
                          "bnsym-status-counts")
            + "\n## Every item\n\nClick a column's header to sort by it.\n\n"
            + _list_table(["paper", "item", "title", "status", "verdict", "networks", "evidence", "why"], rows,
                          "bnsym-sortable bnsym-status"))


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
    "book/status": lambda env: status(env, load_items(_records_dir()), load_registry()),
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
