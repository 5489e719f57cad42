"""Tables and checks for the book.

Tables: one helper instead of hand-formatted ``print(f"{...:>9s}")`` blocks.

:func:`table` takes rows (dicts, one per line of the table) and returns a :class:`Table` that a notebook
displays as HTML (the book, JupyterLab), and a terminal or a test log prints as aligned plain text. Numbers
are formatted per column with a format spec (``{"z": ".2f", "error": ".1e"}``); others with ``:.6g``.

Checks: a chapter makes one :class:`CheckLog` and asserts each theory-vs-simulation comparison with
``log.check(...)``, the call that also records it for the book's results dashboard. ``log.erratum(...)``
states an erratum (or ambiguity) of a paper on the page and records it for the book's errata page.
``log.item(...)`` records how a numbered item of a paper (a theorem, a figure panel, a table) is reproduced,
for the book's reproduction-status page (the items are listed in ``book/registry.yml``).
"""

from __future__ import annotations

import html
import json
import numbers
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .core.estimate import Estimate
from .core.statistics import FAMILY_ERROR, Verdict, paired_verdict


def _format(value: Any, spec: str | None) -> str:
    if value is None:
        return ""
    if spec is not None:
        return format(value, spec)
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(value)
    return format(value, ".6g")


@dataclass(frozen=True)
class Table:
    """Rows of a table with their column order and number formats; shown as HTML, printed as text."""

    rows: tuple[Mapping[str, Any], ...]
    columns: tuple[str, ...]
    formats: Mapping[str, str] = field(default_factory=dict)
    caption: str | None = None

    def cells(self) -> list[list[str]]:
        """The formatted cells, one list per row, in column order."""
        return [[_format(row.get(col), self.formats.get(col)) for col in self.columns] for row in self.rows]

    def __str__(self) -> str:
        cells = self.cells()
        widths = [max([len(col), *(len(line[i]) for line in cells)]) for i, col in enumerate(self.columns)]

        def line(values: Sequence[str]) -> str:
            return "  ".join(v.rjust(w) for v, w in zip(values, widths)).rstrip()

        text = [line(self.columns), line(["-" * w for w in widths]), *(line(row) for row in cells)]
        return "\n".join(([self.caption] if self.caption else []) + text)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(col)}</th>" for col in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in self.cells())
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return f'<table class="bnsym-table">{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
          formats: Mapping[str, str] | None = None, caption: str | None = None) -> Table:
    """A :class:`Table` of ``rows`` (dicts); ``columns`` defaults to the keys of the first row, in order."""
    rows = tuple(rows)
    if columns is None:
        if not rows:
            raise ValueError("a table with no rows needs its columns")
        columns = tuple(rows[0])
    unknown = set(formats or {}) - set(columns)
    if unknown:
        raise ValueError(f"formats name columns the table does not have: {sorted(unknown)}")
    return Table(rows, tuple(columns), dict(formats or {}), caption)


# --- Checks: every theory-vs-simulation comparison of the book, asserted and recorded by one call ------------

CHECKS_DIR_ENV = "BNSYM_CHECKS_DIR"


@dataclass(frozen=True)
class Check:
    r"""One asserted comparison, :math:`|\hat\theta - \theta| \le \text{tolerance}` for the estimate
    :math:`\hat\theta` and the theory :math:`\theta`, with :math:`z = (\hat\theta - \theta) / \text{error}`.

    ``error`` is the standard error of the difference, or, with ``bound``, an error bound of a deterministic
    route (quadrature, series, finite differences); ``tolerance`` is what the assertion allowed, ``atol`` its
    absolute part, and ``rule`` says where it came from (e.g. ``"4.1 SE (t, n=64, m=12)"``, ``"1e-10 abs"``).
    """

    chapter: str
    quantity: str
    theory: float
    estimate: float
    error: float
    tolerance: float
    rule: str
    passed: bool
    anchor: str | None = None
    atol: float = 0.0
    bound: bool = False

    @property
    def z(self) -> float | None:
        """The difference in standard errors; None where the error is 0 (an exact comparison)."""
        return (self.estimate - self.theory) / self.error if self.error > 0 else None

    @property
    def calibrates(self) -> bool:
        """Whether z is a Monte Carlo z-score: the error is a standard error (not a ``bound``) and sets at least
        half the tolerance (``atol <= k * error``). Exact comparisons, error bounds of deterministic routes and
        mostly absolute allowances (rounding) measure no Monte Carlo noise: their z is left out."""
        return self.error > 0 and not self.bound and self.atol <= self.tolerance - self.atol


ERRATA_SUFFIX = ".errata.jsonl"
#: How strong an erratum's evidence is: a SymPy identity, or a numerical comparison.
STRENGTHS = ("proven symbolically", "shown numerically")
ERRATUM_KINDS = ("erratum", "ambiguity")
ITEMS_SUFFIX = ".items.jsonl"
#: How a numbered item of a paper is reproduced (``log.item``'s ``status``; the registry's ``missing``).
ITEM_STATUSES = ("derived", "checked against simulation", "substituted", "not reproducible", "missing")


@dataclass(frozen=True)
class Erratum:
    """An erratum or ambiguity of a paper: what it states, what holds, and the evidence (a MyST label)."""

    chapter: str
    paper: str
    location: str
    original: str
    corrected: str
    evidence: str
    strength: str
    kind: str = "erratum"

    @property
    def title(self) -> str:
        return f"{self.kind.capitalize()}: {{cite:t}}`{self.paper}`, {self.location}"

    def _repr_markdown_(self) -> str:
        return (f":::{{admonition}} {self.title}\n:class: {'warning' if self.kind == 'erratum' else 'note'}\n\n"
                f"**Printed.** {self.original}\n\n**Corrected.** {self.corrected}\n\n"
                f"**Evidence.** {{{'eq' if self.evidence.startswith('eq-') else 'ref'}}}`{self.evidence}` "
                f"({self.strength}).\n:::\n")

    def _repr_html_(self) -> str:
        rows = (("Printed", self.original), ("Corrected", self.corrected),
                ("Evidence", f"{self.evidence} ({self.strength})"))
        body = "".join(f"<p><b>{name}.</b> {html.escape(text)}</p>" for name, text in rows)
        return (f'<div class="bnsym-erratum"><p><b>{html.escape(self.kind.capitalize())}: {html.escape(self.paper)}, '
                f"{html.escape(self.location)}</b></p>{body}</div>")


@dataclass(frozen=True)
class Item:
    """How a chapter reproduces a numbered item of a paper: ``status`` (one of :data:`ITEM_STATUSES`), the
    evidence (a MyST label of the chapter) and, for ``substituted``, ``not reproducible`` or ``missing``, why.
    For an empirical claim: its ``verdict`` (one of :data:`bnsym.core.statistics.VERDICTS`), ``networks`` (the
    independent networks per arm) and the ``resolution`` (:attr:`bnsym.core.statistics.Verdict.resolution`)."""

    chapter: str
    paper: str
    item: str
    status: str
    evidence: str
    why: str | None = None
    verdict: str | None = None
    networks: int | None = None
    resolution: str | None = None


class CheckLog:
    """The checks of one chapter. ``log.check(...)`` asserts a comparison and records it.

    Records go to ``$BNSYM_CHECKS_DIR/<chapter>.jsonl`` (errata to ``<chapter>.errata.jsonl``) when that
    variable is set (the book build sets it; the results dashboard and the errata page are built from these
    files; items to ``<chapter>.items.jsonl``, for the reproduction-status page), and always to ``log.records``,
    ``log.errata`` and ``log.items``. Creating the log starts the chapter's files
    afresh, so re-running a notebook replaces its records.
    """

    def __init__(self, chapter: str, directory: str | os.PathLike | None = None) -> None:
        if not chapter or "/" in chapter:
            raise ValueError(f"chapter must be a plain name such as '01_bsb1_fixed_point', got {chapter!r}")
        self.chapter = chapter
        self.records: list[Check] = []
        self.errata: list[Erratum] = []
        self.items: list[Item] = []
        directory = directory if directory is not None else os.environ.get(CHECKS_DIR_ENV)
        self.path = Path(directory) / f"{chapter}.jsonl" if directory else None
        self.errata_path = Path(directory) / f"{chapter}{ERRATA_SUFFIX}" if directory else None
        self.items_path = Path(directory) / f"{chapter}{ITEMS_SUFFIX}" if directory else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            for path in (self.path, self.errata_path, self.items_path):
                path.write_text("")

    def check(self, quantity: str, theory: float | Estimate, estimate: float | Estimate, error: float | None = None, *,
              k: float | None = None, atol: float = 0.0, rule: str | None = None,
              anchor: str | None = None, bound: bool = False) -> Check:
        r"""Assert :math:`|\hat\theta - \theta| \le k\,\text{error} + \text{atol}`; record and return the
        :class:`Check`.

        ``theory`` and ``estimate`` are floats or :class:`~bnsym.core.estimate.Estimate` (an Estimate brings its
        error, e.g. ``mean_and_se(samples)``; the errors of both sides add in quadrature, unless ``error`` is
        given). ``k`` is the number of standard errors allowed, from
        :func:`bnsym.sim.mc_tolerance` for Monte Carlo; ``atol`` an absolute allowance (rounding, a quadrature
        bound). ``bound=True`` says that ``error`` is an error bound of a deterministic route (quadrature,
        series, finite differences), not a standard error: ``k`` is then a plain factor, and the dashboard
        leaves the check's z out of its calibration. ``anchor`` is the MyST label of the section or figure that
        shows the comparison.
        Raises AssertionError (after recording) when the comparison fails.
        """
        theory_value, theory_error = _value_and_error(theory, "theory")
        estimate_value, estimate_error = _value_and_error(estimate, "estimate")
        if error is None:
            error = float(np.hypot(theory_error, estimate_error))
        if not (np.isfinite(error) and error >= 0):
            raise ValueError(f"{quantity}: error must be finite and >= 0, got {error}")
        if error > 0 and k is None:
            raise ValueError(f"{quantity}: a comparison with a standard error needs k (e.g. from mc_tolerance)")
        if not (np.isfinite(atol) and atol >= 0):
            raise ValueError(f"{quantity}: atol must be finite and >= 0, got {atol}")
        k = 0.0 if k is None else float(k)
        tolerance = k * error + atol
        if rule is None:
            parts = (f"{k:.2f} {'error bound' if bound else 'SE'}" if error > 0 else "",
                     f"{atol:.1e} abs" if atol else "")
            rule = " + ".join(part for part in parts if part) or "exact"
        difference = abs(estimate_value - theory_value)
        record = Check(self.chapter, quantity, theory_value, estimate_value, float(error), float(tolerance), rule,
                       bool(difference <= tolerance), anchor, float(atol), bool(bound))
        self.records.append(record)
        if self.path is not None:
            with self.path.open("a") as file:
                file.write(json.dumps({**asdict(record), "z": record.z}) + "\n")
        if not record.passed:
            raise AssertionError(f"{self.chapter}: {quantity}: estimate {estimate_value:.6g} vs theory "
                                 f"{theory_value:.6g}, |difference| {difference:.3g} > tolerance {tolerance:.3g} "
                                 f"({rule})")
        return record

    def erratum(self, paper: str, location: str, original: str, corrected: str, *, evidence: str,
                strength: str, kind: str = "erratum") -> Erratum:
        """Record an erratum (or, with ``kind="ambiguity"``, an ambiguity) of a paper and return it for display.

        ``paper`` is the paper's key in ``book/references.bib``; ``location`` where it is (``"Thm 6"``);
        ``original`` what the paper states and ``corrected`` what holds (MyST markdown, math in ``$...$``);
        ``evidence`` the MyST label of the section, figure or equation that shows it; ``strength`` one of
        :data:`STRENGTHS`. Displayed as the last expression of a cell, it renders as an admonition.
        """
        for name, value in (("paper", paper), ("location", location), ("original", original),
                            ("corrected", corrected), ("evidence", evidence)):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"an erratum needs a non-empty {name}, got {value!r}")
        if strength not in STRENGTHS:
            raise ValueError(f"strength must be one of {STRENGTHS}, got {strength!r}")
        if kind not in ERRATUM_KINDS:
            raise ValueError(f"kind must be one of {ERRATUM_KINDS}, got {kind!r}")
        record = Erratum(self.chapter, paper, location, original, corrected, evidence, strength, kind)
        self.errata.append(record)
        if self.errata_path is not None:
            with self.errata_path.open("a") as file:
                file.write(json.dumps(asdict(record)) + "\n")
        return record

    def item(self, paper: str, item: str, *, status: str, evidence: str, why: str | None = None,
             verdict: Verdict | None = None, networks: int | None = None) -> Item:
        """Record how this chapter reproduces ``item`` (``"Thm 7"``, ``"Fig. 5b"``) of ``paper`` (its key in
        ``book/references.bib``); the item must be listed in ``book/registry.yml``.

        ``status`` is one of :data:`ITEM_STATUSES`: ``derived`` (a derivation in the chapter), ``checked against
        simulation`` (a ``log.check`` compares it with a simulation), ``substituted`` (reproduced on other data
        or a smaller model, e.g. digits for MNIST; ``why`` says what), ``not reproducible`` (``why`` says why)
        or ``missing``. ``evidence`` is the MyST label of the section, figure or equation that shows it.

        An empirical claim brings its ``verdict``, computed by :func:`bnsym.core.statistics.paired_verdict` (a
        typed string is refused), and ``networks``, the independent networks per arm (taken from the verdict; a
        different number is refused).
        """
        for name, value in (("paper", paper), ("item", item), ("evidence", evidence)):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"an item needs a non-empty {name}, got {value!r}")
        if status not in ITEM_STATUSES:
            raise ValueError(f"status must be one of {ITEM_STATUSES}, got {status!r}")
        if status in ("substituted", "not reproducible", "missing") and not (isinstance(why, str) and why.strip()):
            raise ValueError(f"an item that is {status!r} needs why")
        if verdict is not None and not isinstance(verdict, Verdict):
            raise ValueError(f"verdict must be computed by paired_verdict (a Verdict), got {verdict!r}")
        if verdict is not None:
            if networks not in (None, verdict.networks):
                raise ValueError(f"networks is {networks}, but the verdict was reached on {verdict.networks}")
            networks = verdict.networks
        if networks is not None and not (isinstance(networks, numbers.Integral) and networks >= 1):
            raise ValueError(f"networks is the number of independent networks per arm, >= 1, got {networks!r}")
        record = Item(self.chapter, paper, item, status, evidence, why,
                      verdict.verdict if verdict is not None else None, None if networks is None else int(networks),
                      verdict.resolution if verdict is not None else None)
        self.items.append(record)
        if self.items_path is not None:
            with self.items_path.open("a") as file:
                file.write(json.dumps(asdict(record)) + "\n")
        return record

    def table(self, caption: str | None = None, checks: Sequence[Check] | None = None) -> Table:
        """The recorded checks (or only ``checks``, e.g. the rows of one figure's z-table: theory, measurement,
        SE, z = (measurement - theory) / SE and the tolerance) as a :class:`Table`."""
        checks = self.records if checks is None else checks
        rows = [{"quantity": c.quantity, "theory": c.theory, "estimate": c.estimate, "SE": c.error, "z": c.z,
                 "tolerance": c.tolerance, "status": "pass" if c.passed else "FAIL"} for c in checks]
        return table(rows, ["quantity", "theory", "estimate", "SE", "z", "tolerance", "status"],
                     {"SE": ".2g", "z": ".2f", "tolerance": ".2g"}, caption)


def _value_and_error(x: float | Estimate, name: str) -> tuple[float, float]:
    value, error = (x.value, x.error) if isinstance(x, Estimate) else (x, 0.0)
    value, error = float(value), float(error)
    if not np.isfinite(value):
        raise ValueError(f"the {name} of a check must be finite, got {value}")
    return value, error


#: Stored records of runs too large for a chapter's budget (``benchmarks/records/<name>.json``, each with its script).
RECORDS_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "records"


def load_record(name: str, directory: str | os.PathLike = RECORDS_DIR) -> dict | None:
    """The stored record ``<name>.json`` of a larger run, or None where this checkout has none (a chapter then takes
    its verdicts from its own, smaller run, and says so)."""
    path = Path(directory) / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def load_checks(directory: str | os.PathLike) -> list[Check]:
    """Every check recorded under ``directory`` (one ``<chapter>.jsonl`` per chapter), chapter by chapter."""
    checks = []
    for path in sorted(Path(directory).glob("*.jsonl")):
        if path.name.endswith((ERRATA_SUFFIX, ITEMS_SUFFIX)):
            continue
        for line in path.read_text().splitlines():
            fields = json.loads(line)
            fields.pop("z", None)
            checks.append(Check(**fields))
    return checks


def load_errata(directory: str | os.PathLike) -> list[Erratum]:
    """Every erratum recorded under ``directory`` (one ``<chapter>.errata.jsonl`` per chapter), chapter by chapter."""
    return [Erratum(**json.loads(line)) for path in sorted(Path(directory).glob(f"*{ERRATA_SUFFIX}"))
            for line in path.read_text().splitlines()]


def load_items(directory: str | os.PathLike) -> list[Item]:
    """Every item recorded under ``directory`` (one ``<chapter>.items.jsonl`` per chapter), chapter by chapter."""
    return [Item(**json.loads(line)) for path in sorted(Path(directory).glob(f"*{ITEMS_SUFFIX}"))
            for line in path.read_text().splitlines()]


# --- A chapter's family of training claims: per-network differences -> three-way verdicts -----------------------------


def claim_verdicts(claims: Mapping[str, tuple[np.ndarray, float]], n_comparisons: int | None = None,
                   false_alarm: float = FAMILY_ERROR) -> dict[str, Verdict | None]:
    r""":func:`~bnsym.core.statistics.paired_verdict` of each claim ``name -> (differences, effect)``: the per-network
    differences :math:`d_i`, signed so that the claim predicts :math:`d > 0`, against the paper's effect (0 for a
    direction without a size). A diverged network's NaN is dropped; the family (``n_comparisons`` claims, by default
    those of ``claims``; more where a chapter's family spans several calls) is held at ``false_alarm``. None for a
    claim with fewer than 2 finite networks (no standard error: not resolved)."""
    family = len(claims) if n_comparisons is None else n_comparisons
    if family < len(claims):
        raise ValueError(f"the family of {family} comparisons cannot hold these {len(claims)} claims")
    verdicts: dict[str, Verdict | None] = {}
    for name, (differences, effect) in claims.items():
        d = np.asarray(differences, dtype=float)
        finite = d[np.isfinite(d)]
        verdicts[name] = paired_verdict(finite, effect, family, false_alarm) if finite.size >= 2 else None
    return verdicts


def pointing(difference: float) -> str:
    """Which way a mean difference, signed in a claim's direction, points: a description beside a verdict, never
    a verdict itself."""
    return "the claim's way" if difference > 0 else "against the claim" if difference < 0 else "neither way"


def verdict_table(claims: Mapping[str, tuple[np.ndarray, float]], verdicts: Mapping[str, Verdict | None],
                  caption: str | None = None) -> Table:
    r"""One row per claim of :func:`claim_verdicts`: mean :math:`\bar d`, its SE and :math:`k\,SE`, the networks per
    arm (finite) and those dropped (NaN: diverged), the paper's effect, which way the mean points, and the verdict
    ("not resolved" without one)."""
    rows = []
    for name, (differences, effect) in claims.items():
        d = np.asarray(differences, dtype=float)
        finite, verdict = d[np.isfinite(d)], verdicts[name]
        mean = float(finite.mean()) if finite.size else None
        rows.append({"claim": name, "mean d": mean, "SE": verdict.se if verdict else None,
                     "k SE": verdict.k * verdict.se if verdict else None, "networks": int(finite.size),
                     "dropped (NaN)": int(d.size - finite.size), "paper's effect": effect,
                     "mean points": pointing(mean) if mean is not None else None,
                     "verdict": verdict.verdict if verdict else "not resolved"})
    return table(rows, formats={"mean d": "+.3g", "SE": ".2g", "k SE": ".2g", "paper's effect": ".3g"},
                 caption=caption)
