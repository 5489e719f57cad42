"""Tables for the book: one helper instead of hand-formatted ``print(f"{...:>9s}")`` blocks.

:func:`table` takes rows (dicts, one per line of the table) and returns a :class:`Table` that a notebook
displays as HTML (the book, JupyterLab), and a terminal or a test log prints as aligned plain text. Numbers
are formatted per column with a format spec (``{"z": ".2f", "error": ".1e"}``); others with ``:.6g``.
"""

from __future__ import annotations

import html
import numbers
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


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
