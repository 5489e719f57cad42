"""The calibration of the dashboard's checks: do their z-scores look standard normal?

A check's z is (estimate - theory) / SE. Where the SE is an honest Monte Carlo standard error and the theory is
right, z is close to standard normal (Student-t for few draws). A distribution much narrower than that means
overstated standard errors: the checks could hardly fail. A much wider one means understated errors, or a bias.
Only checks whose z is a standard-error z-score enter (:attr:`bnsym.report.Check.calibrates`).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from scipy.special import ndtri

from bnsym.core.statistics import ks_normal
from bnsym.report import Check

ALT = "Histogram of the observed z-scores against the standard normal density, and their QQ plot"


def z_scores(checks: Sequence[Check]) -> np.ndarray:
    """The z of every check that calibrates (has a standard error that sets at least half its tolerance)."""
    return np.array([c.z for c in checks if c.calibrates], dtype=float)


def figure_png(z: np.ndarray) -> bytes:
    """Histogram of ``z`` over the standard normal density, and the QQ plot of ``z`` against it, as PNG."""
    figure = Figure(figsize=(9, 3.6), dpi=110)
    hist, qq = figure.subplots(1, 2)
    grid = np.linspace(-5, 5, 401)
    clipped = np.clip(z, -6, 6)
    hist.hist(clipped, bins=np.linspace(-6, 6, 49), density=True, color="C0", alpha=0.6, label="observed z")
    hist.plot(grid, np.exp(-grid**2 / 2) / np.sqrt(2 * np.pi), "k-", label="standard normal")
    hist.set(xlabel="z (clipped to [-6, 6])", ylabel="density", title=f"{z.size} checks")
    hist.legend(fontsize=8)
    n = z.size
    expected = ndtri((np.arange(1, n + 1) - 0.5) / n)
    qq.plot(expected, np.sort(clipped), ".", color="C0", markersize=3)
    limit = max(4.0, float(np.max(np.abs(expected))))
    qq.plot([-limit, limit], [-limit, limit], "k--", linewidth=1, label="z = normal quantile")
    qq.set(xlabel="standard normal quantile", ylabel="observed z, sorted (clipped)", title="QQ plot",
           ylim=(-max(6.0, limit), max(6.0, limit)))
    qq.legend(fontsize=8)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def section(checks: Sequence[Check]) -> str:
    """The MyST of the calibration section: the KS statistic, the figure (inline PNG) and its caption."""
    z = z_scores(checks)
    if z.size == 0:
        return "No check with a Monte Carlo standard error was recorded in this build.\n\n"
    statistic, p_value = ks_normal(z)
    inside = float(np.mean(np.abs(z) <= 1))
    bounds = sum(c.bound for c in checks)
    text = (f"Of {len(checks)} checks, {z.size} compare against a Monte Carlo standard error; the others are exact "
            f"comparisons, comparisons with the error bound of a deterministic route ({bounds}), or have a mostly "
            f"absolute tolerance. Their z-scores: mean {np.mean(z):.2f}, standard deviation "
            f"{np.std(z):.2f} (1 for a standard normal), {inside:.0%} within one standard error (68% for a standard "
            f"normal); Kolmogorov-Smirnov distance to the standard normal D = {statistic:.3f} (p = {p_value:.2g}, "
            f"n = {z.size}).\n\n")
    png = base64.b64encode(figure_png(z)).decode()
    caption = (f"Observed z of {z.size} checks against the standard normal: histogram (left) and QQ plot (right). "
               f"Kolmogorov-Smirnov D = {statistic:.3f}, p = {p_value:.2g}. Points below the diagonal on the right "
               "and above it on the left mean a distribution too wide; the reverse, too narrow.")
    figure = (f'<figure class="bnsym-calibration" id="calibration-figure"><img alt="{html.escape(ALT)}" '
              f'src="data:image/png;base64,{png}"><figcaption>{html.escape(caption)}</figcaption></figure>')
    return text + "```{raw} html\n" + figure + "\n```\n\n"


def family(checks: Sequence[Check]) -> tuple[int, str]:
    """(number of calibrating checks, 'D (p)' of their KS test, or '' when none) for one family of checks."""
    z = z_scores(checks)
    if z.size == 0:
        return 0, ""
    statistic, p_value = ks_normal(z)
    return int(z.size), f"{statistic:.2f} ({p_value:.1g})"
