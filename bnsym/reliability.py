"""How far to trust a prediction of :mod:`bnsym.arch` at a finite width: the relative error of its forward variance,
covariance and gradient statistic against the finite twin, per layer kind, over input Grams, batch sizes and widths
(in the style of Kedia et al. 2024, who publish the 50th, 90th and 99th percentiles of such errors).

The comparison sits above both sides: the theory (:func:`bnsym.arch.signal_propagation`) and the twin
(:func:`bnsym.sim.moments.simulate_moments`) never import each other, this module reads both.

* A **probe** is a small network that exercises one layer kind twice (``PROBES``): ``dense, X, dense, X``, so that
  the second X acts on a finite-width input (a single layer after the first Dense sees exactly Gaussian inputs and
  has no finite-width bias). The quantities (``QUANTITIES``) are the output's mean diagonal K_aa ("variance"), its
  mean off-diagonal K_ab ("covariance") and the gradient statistic S after the first Dense ("gradient"), which
  back-propagates through every layer of the probe.
* The **relative error** of a quantity at width n is ``|mean - theory| / scale``, its standard error SE / scale, where
  scale is the theory of the quantity itself, except for the covariance, whose scale is the variance (an error in
  units of correlation: a covariance can be 0).
* The **fitted 1/width correction**: the means over widths fitted as a + b / n by weighted least squares
  (``extrapolate_to_infinite_width``); the corrected prediction at width n is theory + b / n, and its error what
  remains. The intercept a against the theory checks that the theory is the infinite-width limit.
* A percentile of errors is only meaningful where the Monte Carlo noise is well below it: :func:`percentiles`
  reports the same percentile of the noise floors k SE beside it (k from ``mc_tolerance``), and calls the error
  **resolved** only where it is above that floor.

``run_cell`` is a sweep task (``bnsym.sweep.run``): one probe, one input Gram and one batch size, every width.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .arch import signal_propagation
from .core.layers import KINDS, parse_architecture, walk
from .core.statistics import extrapolate_to_infinite_width, mc_tolerance, mean_and_se
from .core.validation import check_choice, check_whole_number
from .sim.moments import simulate_moments

#: The probe network of each layer kind (and variant) as a spec string: the kind twice, each after a Dense.
PROBES = {
    "dense": "dense,dense",
    "relu": "dense,relu,dense,relu",
    "erf": "dense,erf,dense,erf",
    "selu": "dense,selu,dense,selu",
    "gelu": "dense,gelu,dense,gelu",
    "bn (train)": "dense,bn,dense,bn",
    "bn (eval)": "dense,bn(mode=eval),dense,bn(mode=eval)",
    "ln": "dense,ln,dense,ln",
    "rms": "dense,rms,dense,rms",
    "res": "dense,res(relu,dense),res(relu,dense)",
}
#: The largest batch size of a probe where it is smaller than the grid's: gelu's kernel is a Gauss-Hermite
#: quadrature per pair of examples, B^2 x degree^2 values (B = 128 at degree 512: 4e9 floats, beyond memory).
MAX_BATCH = {"gelu": 16}
QUANTITIES = ("variance", "covariance", "gradient")
#: The smallest batch size at which a probe's gradient statistic has a finite variance, where there is one: a
#: train-mode batch norm's Jacobian grows like 1/r, r^2 ~ chi^2_(B-1) the spread of its Gaussian input over the batch,
#: and E[r^-4] is finite only for B - 1 > 4. Below it a mean over networks has no standard error to trust.
GRADIENT_MIN_BATCH = {"bn (train)": 6}
GRAMS = ("equicorrelated", "random data", "spread variances")
VERSION = "1"
FALSE_ALARM = 0.01  # the chance that noise alone makes some percentile of a table's row look resolved
HELD = 1e-12  # a twin's SE below this fraction of the scale is rounding: the quantity is held exactly


def covered_kinds() -> set[str]:
    """The spec names of the layer kinds (:data:`bnsym.core.layers.KINDS`) that some probe contains."""
    kinds = {cls: kind.name for cls, kind in KINDS.items()}
    return {kinds[type(layer)] for spec in PROBES.values() for layer in walk(parse_architecture(spec))}


def input_gram(name: str, batch: int) -> np.ndarray:
    """The B x B input Gram ``name`` (``GRAMS``): "equicorrelated" unit variances and correlation 1/2; "random
    data" the Gram x x^T / (2B) of B standard normal points in dimension 2B (seed 0); "spread variances"
    variances from 1/4 to 4 (geometric) with correlation 1/5."""
    check_choice(name, "gram", GRAMS)
    batch = check_whole_number(batch, "batch size B", 4, 4096)
    if name == "random data":
        points = np.random.default_rng(0).standard_normal((batch, 2 * batch))
        return points @ points.T / (2 * batch)
    correlation, variances = (0.5, np.ones(batch)) if name == "equicorrelated" else (0.2, np.geomspace(0.25, 4, batch))
    scale = np.sqrt(variances)
    return np.outer(scale, scale) * ((1 - correlation) * np.eye(batch) + correlation)


def predict(probe: str, gram: str, batch: int) -> dict[str, tuple[float, float]]:
    """The theory's (value, error) of each quantity for a probe on the Gram ``gram`` of ``batch`` examples."""
    result = signal_propagation(PROBES[probe], input_gram(gram, batch))
    parts = {"variance": result.diagonal, "covariance": result.off_diagonal}
    values = {name: (float(e.value[-1]), float(e.error[-1])) for name, e in parts.items()}
    return {**values, "gradient": (float(result.gradient.value[0]), float(result.gradient.error[0]))}


def networks_per_width(width: int, batch: int, work: float = 2.5e8, least: int = 4) -> int:
    """Networks at one width: ``work`` / (n^2 B), at least ``least``. A network costs about n^2 (its square
    weights) x B (the batch through them), so each width costs the same, and the small widths, where the
    finite-width bias is largest, get the most networks (the SE falls like 1 / sqrt(networks x n x B))."""
    return max(least, round(work / (width**2 * batch)))


def grid(batch_sizes: Sequence[int], widths: Sequence[int], work: float, max_square: float | None = None,
         probes: Sequence[str] = tuple(PROBES), grams: Sequence[str] = GRAMS, backward_passes: int = 4) -> list[dict]:
    """The sweep's configurations: one per (probe, Gram, batch size B), each with the widths n where B n^2 <=
    ``max_square`` (the cost of a network; None: every width) and ``networks_per_width`` twins at each; a probe's
    ``MAX_BATCH`` leaves out larger B."""
    cells = []
    for probe in probes:
        for gram in grams:
            for batch in batch_sizes:
                if batch > MAX_BATCH.get(probe, batch):
                    continue
                chosen = [w for w in widths if max_square is None or batch * w**2 <= max_square]
                cells.append({"probe": probe, "gram": gram, "batch_size": batch, "widths": chosen,
                              "n_networks": [networks_per_width(w, batch, work) for w in chosen],
                              "probes": backward_passes})
    return cells


def validate(config: Mapping[str, Any]) -> None:
    """ValueError on a configuration ``run_cell`` cannot run (before a sweep submits anything)."""
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a dict, got {type(config).__name__}")
    check_choice(config.get("probe"), "probe", tuple(PROBES))
    check_choice(config.get("gram"), "gram", GRAMS)
    check_whole_number(config.get("batch_size"), "batch_size", 4, MAX_BATCH.get(config["probe"], 4096))
    widths, networks = config.get("widths"), config.get("n_networks")
    if not (isinstance(widths, (list, tuple)) and isinstance(networks, (list, tuple)) and len(widths) == len(networks)
            and len(widths) >= 3):
        raise ValueError("widths and n_networks must be lists of the same length, at least 3 (the 1/width fit), got "
                         f"{widths!r:.80} and {networks!r:.80}")
    for width, count in zip(widths, networks):
        check_whole_number(width, "width", 2, 2**14)
        check_whole_number(count, "n_networks", 2, 2**16)
    check_whole_number(config.get("probes", 4), "probes", 1, 4096)


def run_cell(config: Mapping[str, Any]) -> dict:
    """One probe, Gram and batch size: the theory, and at every width the twin's mean and SE of each quantity.

    ``config``: ``probe`` (a key of ``PROBES``), ``gram`` (of ``GRAMS``), ``batch_size``, ``widths`` and
    ``n_networks`` (lists, one count per width), optional ``probes`` (backward passes per network, default 4) and
    ``seed``."""
    validate(config)
    probe, batch = config["probe"], int(config["batch_size"])
    theory = predict(probe, config["gram"], batch)
    sigma = input_gram(config["gram"], batch)
    means: dict[str, list[float]] = {name: [] for name in QUANTITIES}
    errors: dict[str, list[float]] = {name: [] for name in QUANTITIES}
    for width, count in zip(config["widths"], config["n_networks"]):
        twin = simulate_moments(PROBES[probe], sigma, int(width), int(count), probes=int(config.get("probes", 4)),
                                seed=int(config.get("seed", 0)) % 2**40 + int(width), device="cpu")
        for name in QUANTITIES:
            estimate = mean_and_se(getattr(twin, name))
            means[name].append(float(estimate.value))
            errors[name].append(float(estimate.error))
    return {"theory": {name: value for name, (value, _) in theory.items()},
            "theory_error": {name: error for name, (_, error) in theory.items()}, "mean": means, "se": errors}


run_cell.version = VERSION
run_cell.validate = validate


def _scale(result: Mapping[str, Any], name: str) -> float:
    """What a quantity's error is relative to: its theory, the variance's for the covariance."""
    return abs(result["theory"]["variance" if name == "covariance" else name])


def relative_errors(rows: Sequence[Mapping[str, Any]]) -> list[dict]:
    """One dict per (row, quantity, width): ``held`` (the twin holds the quantity exactly: its SE is rounding, below
    ``HELD`` of the scale, e.g. a normalised variance), ``error`` ``|mean - theory| / scale`` and ``se`` (the twin's and
    the theory's errors in quadrature, / scale), raw and after the fitted 1/width correction (``corrected``,
    ``corrected_se``: the intercept's SE), and the fit's ``intercept_z`` (a - theory) / SE(a). ``rows``: a config
    merged with its ``run_cell`` result (``SweepResult.rows()``). A gradient below its probe's
    ``GRADIENT_MIN_BATCH`` is left out (no finite variance, no standard error)."""
    out = []
    for row in rows:
        widths = np.asarray(row["widths"], dtype=float)
        for name in QUANTITIES:
            if name == "gradient" and row["batch_size"] < GRADIENT_MIN_BATCH.get(row["probe"], 0):
                continue
            theory, scale = row["theory"][name], _scale(row, name)
            means, ses = np.asarray(row["mean"][name]), np.asarray(row["se"][name])
            held = ses.max() <= HELD * scale  # the twin holds it exactly (rounding aside): no noise, no bias to fit
            ses = np.zeros_like(ses) if held else ses
            se = np.hypot(ses, row["theory_error"][name])
            if not held:
                intercept, intercept_se, slope = extrapolate_to_infinite_width(widths, means, ses)
                intercept_se = float(np.hypot(intercept_se, row["theory_error"][name]))
            else:
                intercept, intercept_se, slope = float(means[-1]), 0.0, 0.0
            corrected = np.abs(means - theory - slope / widths) / scale
            z = (intercept - theory) / intercept_se if intercept_se > 0 else 0.0
            for i, width in enumerate(row["widths"]):
                out.append({"held": bool(held), "networks": int(row["n_networks"][i]),
                            "fit_networks": int(min(row["n_networks"])), "probe": row["probe"], "gram": row["gram"],
                            "batch_size": row["batch_size"],
                            "width": int(width), "quantity": name, "error": float(abs(means[i] - theory) / scale),
                            "se": float(se[i] / scale), "corrected": float(corrected[i]),
                            "corrected_se": float(np.hypot(se[i], intercept_se) / scale), "intercept_z": float(z),
                            "intercept_se": intercept_se / scale})
    return out


def percentiles(errors: Sequence[Mapping[str, Any]], levels: Sequence[float] = (50, 90, 99),
                corrected: bool = False, false_alarm: float = FALSE_ALARM) -> dict[str, float]:
    """The ``levels`` percentiles of the errors (raw, or after the 1/width correction) and of their noise floors,
    as ``p50``, ``noise50``, ...; ``resolved50`` says whether that percentile is above its noise floor.

    The noise floor of one error is k SE, k = ``mc_tolerance(networks, len(errors), false_alarm)``: without any
    bias, every error is below its floor with probability 1 - false_alarm, and then every percentile of the errors
    is below the same percentile of the floors (order statistics are monotone). A resolved percentile is a bias."""
    key = "corrected" if corrected else "error"
    values = np.array([e[key] for e in errors])
    floors = np.array([mc_tolerance(e["fit_networks" if corrected else "networks"], len(errors), false_alarm)
                       * e["corrected_se" if corrected else "se"] for e in errors])
    out: dict[str, float] = {}
    for level in levels:
        error, floor = float(np.percentile(values, level)), float(np.percentile(floors, level))
        out |= {f"p{level:g}": error, f"noise{level:g}": floor, f"resolved{level:g}": bool(error > floor)}
    return out


def summary(errors: Sequence[Mapping[str, Any]], levels: Sequence[float] = (50, 90, 99)) -> list[dict]:
    """One row per (probe, quantity): the percentiles of the raw and the corrected errors, in percent, each shown
    as a number where resolved and as "< floor" (its noise floor, :func:`percentiles`) where not, "exact" where the
    twin holds the quantity exactly (no spread over networks, e.g. a normalised variance); the configurations
    counted."""
    rows = []
    for probe in dict.fromkeys(e["probe"] for e in errors):
        for name in QUANTITIES:
            chosen = [e for e in errors if e["probe"] == probe and e["quantity"] == name]
            row: dict[str, Any] = {"kind": probe, "quantity": name, "n": len(chosen)}
            exact = all(e["held"] for e in chosen)  # held exactly by the twin: its error is rounding
            for label, corrected in (("", False), ("fit ", True)):
                found = percentiles(chosen, levels, corrected)
                for level in levels:
                    row[f"{label}p{level:g} %"] = "exact" if exact else _shown(found, level)
            rows.append(row)
    return rows


def _shown(found: Mapping[str, float], level: float) -> str:
    """A percentile in percent, or "< floor" where the noise floor is above it."""
    if found[f"resolved{level:g}"]:
        return f"{100 * found[f'p{level:g}']:.2g}"
    return f"< {100 * found[f'noise{level:g}']:.1g}"
