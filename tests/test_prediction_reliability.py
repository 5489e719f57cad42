"""bnsym.reliability (the reliability grid) and its twin side, bnsym.sim.moments: the probes cover every layer kind, the
twin's one-pass moments are unbiased, and the percentiles see a bias that is there and no bias that is not.

Tolerances: k = mc_tolerance(networks, comparisons) standard errors of the mean over independent networks.
"""

from __future__ import annotations

import numpy as np
import pytest

from bnsym import reliability
from bnsym.arch import signal_propagation
from bnsym.core.layers import KINDS
from bnsym.sim import mc_tolerance, mean_and_se
from bnsym.sim.moments import simulate_moments

NETWORKS = 400


def test_every_layer_kind_has_a_probe():
    assert reliability.covered_kinds() == {kind.name for kind in KINDS.values()}


def test_every_probe_is_a_network_the_theory_and_the_twin_take():
    sigma = reliability.input_gram("spread variances", 4)
    for probe in reliability.PROBES:
        theory = reliability.predict(probe, "spread variances", 4)
        twin = simulate_moments(reliability.PROBES[probe], sigma, 8, 2, seed=1, device="cpu")
        assert all(np.isfinite(value) for value, _ in theory.values()), probe
        assert all(np.all(np.isfinite(getattr(twin, name))) for name in reliability.QUANTITIES), probe


@pytest.mark.parametrize("gram", reliability.GRAMS)
def test_input_grams_are_psd_with_the_stated_variances(gram):
    sigma = reliability.input_gram(gram, 6)
    assert np.allclose(sigma, sigma.T) and np.linalg.eigvalsh(sigma)[0] > 0
    if gram != "random data":
        assert np.diag(sigma).min() == pytest.approx(0.25 if gram == "spread variances" else 1.0)


@pytest.mark.parametrize("probes", [1, 3, 5])
def test_one_pass_moments_are_unbiased_where_the_theory_is_exact_at_any_width(probes):
    """A linear network's Gram and gradient statistic have the theory's expectation at every width (products of
    independent Gaussian matrices), so the twin's means must match it within k SE; the gradient estimate from
    ``probes`` backward passes (at most B = 5: exact directions) must too (an estimate off by the factor P, or
    missing the cross terms' cancellation, fails)."""
    sigma = reliability.input_gram("equicorrelated", 5)
    theory = signal_propagation("dense,dense", sigma)
    twin = simulate_moments("dense,dense", sigma, 16, NETWORKS, probes=probes, seed=probes, device="cpu")
    k = mc_tolerance(NETWORKS, 3)
    expected = {"variance": theory.diagonal.value[-1], "covariance": theory.off_diagonal.value[-1],
                "gradient": theory.gradient.value[0]}
    for name, value in expected.items():
        measured = mean_and_se(getattr(twin, name))
        assert abs(measured.value - value) <= k * measured.error, (name, measured, value)


def _row(theory: dict, means: dict, ses: dict, widths=(16, 32, 64)) -> dict:
    return {"probe": "dense", "gram": "equicorrelated", "batch_size": 4, "widths": list(widths), "n_networks": [64] * 3,
            "theory": theory, "theory_error": {name: 0.0 for name in theory}, "mean": means, "se": ses}


def test_the_fitted_correction_removes_an_exact_one_over_width_bias():
    widths = np.array([16.0, 32.0, 64.0])
    theory = {"variance": 2.0, "covariance": 1.0, "gradient": 8.0}
    means = {name: list(value + 3.0 * value / widths) for name, value in theory.items()}
    ses = {name: [1e-9] * 3 for name in theory}
    errors = reliability.relative_errors([_row(theory, means, ses)])
    variance = [e for e in errors if e["quantity"] == "variance"]
    assert [e["error"] for e in variance] == pytest.approx(list(3.0 / widths))
    assert max(e["corrected"] for e in errors) < 1e-6
    covariance = [e for e in errors if e["quantity"] == "covariance"]  # relative to the variance: 3 / (2 n)
    assert [e["error"] for e in covariance] == pytest.approx(list(1.5 / widths))


def test_a_deliberate_bias_shows_in_the_percentiles_and_no_bias_does_not():
    """Twins against the true theory: every percentile of the linear probe's errors is below its noise floor.
    The same twins against the theory times 1.05: the median error is 5 % (within the noise) and resolved."""
    batch, widths = 4, (16, 32, 64)
    config = {"probe": "dense", "gram": "equicorrelated", "batch_size": batch, "widths": list(widths),
              "n_networks": [reliability.networks_per_width(w, batch, 2e6) for w in widths], "seed": 3}
    row = {**config, **reliability.run_cell(config)}
    honest = reliability.percentiles(reliability.relative_errors([row]))
    assert not any(honest[f"resolved{level}"] for level in (50, 90, 99)), honest
    biased = {**row, "theory": {name: 1.05 * value for name, value in row["theory"].items()}}
    found = reliability.percentiles(reliability.relative_errors([biased]))
    assert found["resolved50"] and abs(found["p50"] - 0.05) <= found["noise50"], found
    shown = reliability.summary(reliability.relative_errors([biased]))
    assert all(not r["p50 %"].startswith("<") for r in shown if r["quantity"] != "covariance"), shown


def test_a_quantity_the_twin_holds_exactly_is_shown_as_exact():
    """Batch norm's output has mean diagonal 1 and mean off-diagonal -1 / (B - 1) in every network."""
    config = {"probe": "bn (train)", "gram": "random data", "batch_size": 8, "widths": [8, 16, 32],
              "n_networks": [4, 4, 4], "seed": 1}
    rows = reliability.summary(reliability.relative_errors([{**config, **reliability.run_cell(config)}]))
    shown = {r["quantity"]: r for r in rows}
    assert shown["variance"]["p99 %"] == shown["covariance"]["fit p99 %"] == "exact"
    assert shown["gradient"]["p50 %"] != "exact"


def test_the_grid_caps_the_cost_and_the_batch_of_quadrature_probes():
    cells = reliability.grid([4, 128], [64, 4096], 1e6, 16 * 4096**2)
    assert {len(cell["widths"]) for cell in cells if cell["batch_size"] == 128} == {1}
    assert not [cell for cell in cells if cell["probe"] == "gelu" and cell["batch_size"] == 128]
    assert all(min(cell["n_networks"]) >= 4 for cell in cells)
    assert len({(c["probe"], c["gram"]) for c in cells}) == len(reliability.PROBES) * len(reliability.GRAMS)


@pytest.mark.parametrize("change, names", [
    ({"probe": "conv"}, "probe"),
    ({"gram": "eye"}, "gram"),
    ({"batch_size": 2}, "batch_size"),
    ({"probe": "gelu", "batch_size": 64}, "batch_size"),
    ({"widths": [16, 32]}, "widths"),
    ({"n_networks": [1, 4, 4]}, "n_networks"),
    ({"widths": [16, 0.5, 64]}, "width"),
])
def test_bad_configurations_are_refused_with_the_argument_named(change, names):
    config = {"probe": "relu", "gram": "equicorrelated", "batch_size": 4, "widths": [16, 32, 64],
              "n_networks": [4, 4, 4], **change}
    with pytest.raises(ValueError, match=names):
        reliability.validate(config)


def test_a_gradient_without_a_finite_variance_is_left_out():
    """Train-mode batch norm at B = 4: S has no finite variance (chi^2_3 spreads), so no SE and no error row."""
    row = _row({"variance": 1.0, "covariance": -1 / 3, "gradient": 20.0},
               {"variance": [1.0] * 3, "covariance": [-1 / 3] * 3, "gradient": [19.0, 21.0, 20.0]},
               {"variance": [0.0] * 3, "covariance": [0.0] * 3, "gradient": [1.0] * 3})
    kept = {e["quantity"] for e in reliability.relative_errors([{**row, "probe": "bn (train)"}])}
    assert kept == {"variance", "covariance"}
    assert "gradient" in {e["quantity"] for e in reliability.relative_errors([row])}
