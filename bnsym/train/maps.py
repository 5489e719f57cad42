"""Accuracy maps of trainability grids (Figs 3 and 5) and ``bnsym sweep show`` for the trainability experiment."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np

from ..api import max_trainable_depth
from ..report import Table, table
from .trainability import DEFAULTS, GRID_KEYS, check_rows, trains


def accuracy_grid(rows: Sequence[Mapping[str, Any]], x: str = "batch_size") -> tuple[list, list, np.ndarray]:
    """(x values, depths, accuracy[depth, x]) of a grid's rows; NaN where a cell is missing or failed."""
    rows = check_rows(rows, (x, "depth", "test_accuracy"))
    xs = sorted({row[x] for row in rows})
    depths = sorted({row["depth"] for row in rows})
    accuracy = np.full((len(depths), len(xs)), np.nan)
    for row in rows:
        accuracy[depths.index(row["depth"]), xs.index(row[x])] = row["test_accuracy"]
    return xs, depths, accuracy


def accuracy_map(ax, rows: Sequence[Mapping[str, Any]], x: str = "batch_size",
                 line: Sequence[float] | None = None, line_label: str = "16 xi", x_label: str | None = None):
    """Draw the test accuracy over depth (vertical) and ``x`` (one column per value), and a depth line per column."""
    xs, depths, accuracy = accuracy_grid(rows, x)
    d = np.asarray(depths, float)
    y_edges = np.concatenate([[d[0] - (d[1] - d[0]) / 2 if len(d) > 1 else d[0] - 1],
                              (d[1:] + d[:-1]) / 2, [d[-1] + (d[-1] - d[-2]) / 2 if len(d) > 1 else d[0] + 1]])
    mesh = ax.pcolormesh(np.arange(len(xs) + 1) - 0.5, y_edges, accuracy, vmin=0, vmax=1, cmap="viridis")
    if line is not None:
        ax.plot(np.arange(len(xs)), np.minimum(line, y_edges[-1]), "w--", lw=2, label=line_label)
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xticks(np.arange(len(xs)), [f"{v:g}" for v in xs])
    ax.set_xlabel(x_label or x)
    ax.set_ylabel("depth L")
    ax.set_ylim(y_edges[0], y_edges[-1])
    return mesh


def _groups(rows: Sequence[Mapping[str, Any]]) -> dict[tuple, list[Mapping[str, Any]]]:
    """Rows grouped by every setting other than the grid's (depth, batch size) and the seed."""
    groups: dict[tuple, list] = {}
    for row in rows:
        setting = tuple((key, row.get(key, default)) for key, default in DEFAULTS.items())
        groups.setdefault(setting, []).append(row)
    return groups


def show(records: Sequence[Mapping[str, Any]], png_path: str | os.PathLike) -> Table:
    """The table of a trainability sweep's cells, and its heat maps (one per setting) with 16 xi(B) at eps = 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [{**record["config"], **record["result"]} for record in records if record["error"] is None]
    if not rows:
        raise ValueError("the sweep has no successful trainability results to show")
    groups = _groups(rows)
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4), squeeze=False)
    for ax, (setting, group) in zip(axes[0], groups.items()):
        settings = dict(setting)
        xs, _, _ = accuracy_grid(group)
        line = max_trainable_depth(settings["phi"], np.array(xs))
        mesh = accuracy_map(ax, group, line=line, line_label="16 xi (eps = 0)", x_label="batch size B")
        ax.set_title(", ".join(f"{k}={v}" for k, v in settings.items() if v != DEFAULTS[k]) or "defaults", fontsize=8)
    fig.colorbar(mesh, ax=axes[0].tolist(), label="test accuracy")
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    cells = sorted(rows, key=lambda row: tuple(str(row.get(k)) for k in DEFAULTS) + (row["depth"], row["batch_size"]))
    flags = trains(cells)
    varying = [k for k in DEFAULTS if len({str(row.get(k, DEFAULTS[k])) for row in rows}) > 1]
    return table([{**{k: row.get(k, DEFAULTS[k]) for k in varying}, **{k: row[k] for k in GRID_KEYS},
                   "test accuracy": row["test_accuracy"], "trains": bool(flag)} for row, flag in zip(cells, flags)],
                 formats={"test accuracy": ".3f"})
