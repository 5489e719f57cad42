"""bnsym.report (tables, the check log) and bnsym.core.statistics (mc_tolerance's false-alarm rate, mean_and_se)."""

import numpy as np
import pytest

from bnsym.core.estimate import Estimate
from bnsym.core.statistics import mean_and_se
from bnsym.report import CheckLog, table
from bnsym.sim import mc_tolerance


def test_table_text_and_html():
    t = table([{"phi": "relu", "B": 4, "z": 1.234}, {"phi": "tanh", "B": 16, "z": -0.5}], formats={"z": ".2f"})
    lines = str(t).splitlines()
    assert lines[0].split() == ["phi", "B", "z"] and lines[2].split() == ["relu", "4", "1.23"]
    assert "<td>-0.50</td>" in t._repr_html_() and t.rows[1]["B"] == 16


def test_table_rejects_unknown_format_column():
    with pytest.raises(ValueError, match="formats name columns"):
        table([{"a": 1}], formats={"b": ".2f"})


@pytest.mark.parametrize("n_draws, n_comparisons", [(8, 1), (8, 5), (32, 3)])
def test_mc_tolerance_has_its_false_alarm_rate(n_draws, n_comparisons):
    """Simulate families of t statistics of normal draws: P(any |t| > k) must be false_alarm = 0.05
    (Bonferroni: at most)."""
    rng = np.random.default_rng(n_draws + n_comparisons)
    families = 40_000
    draws = rng.standard_normal((families, n_comparisons, n_draws))
    t = draws.mean(-1) / (draws.std(-1, ddof=1) / np.sqrt(n_draws))
    rate = np.mean(np.any(np.abs(t) > mc_tolerance(n_draws, n_comparisons, false_alarm=0.05), axis=1))
    se = np.sqrt(0.05 * 0.95 / families)
    assert rate < 0.05 + 5 * se  # Bonferroni is conservative
    assert rate > 0.05 * (1 - 0.05) - 5 * se  # and nearly exact for small rates: 1 - (1 - a/m)^m >= a (1 - a)


def test_mc_tolerance_rejects_bad_input():
    with pytest.raises(ValueError, match="at least 2 draws"):
        mc_tolerance(1)
    with pytest.raises(ValueError, match="probability"):
        mc_tolerance(8, false_alarm=0.0)


def test_mean_and_se_is_an_estimate_that_a_check_takes_whole():
    samples = np.array([1.0, 2.0, 4.0, 9.0])
    n = len(samples)
    mean = sum(samples) / n
    se = (sum((s - mean) ** 2 for s in samples) / (n - 1) / n) ** 0.5
    estimate = mean_and_se(samples)
    assert isinstance(estimate, Estimate)
    assert tuple(estimate) == pytest.approx((mean, se), rel=1e-15)
    columns = mean_and_se(np.stack([samples, 2 * samples], axis=1))
    np.testing.assert_allclose(columns.value, [mean, 2 * mean], rtol=1e-15)
    np.testing.assert_allclose(columns.error, [se, 2 * se], rtol=1e-15)
    check = CheckLog("99_demo").check("mean", mean + se, estimate, k=1.5)
    assert check.error == estimate.error and check.z == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="at least 2 samples"):
        mean_and_se(samples[:1])


def test_check_log_asserts_records_and_reloads(tmp_path):
    from bnsym.report import load_checks

    log = CheckLog("99_demo", directory=tmp_path)
    ok = log.check("q*", 1.0, Estimate(1.02, 0.01, "mc"), k=3.0, anchor="fig-99-demo")
    assert ok.passed and abs(ok.z - 2.0) < 1e-12 and ok.tolerance == pytest.approx(0.03)
    exact = log.check("identity", 0.5, 0.5 + 1e-13, atol=1e-12)
    assert exact.z is None and exact.rule == "1.0e-12 abs"
    with pytest.raises(AssertionError, match="q\\* far"):
        log.check("q* far", 1.0, 1.1, 0.01, k=3.0)
    assert [c.passed for c in load_checks(tmp_path)] == [True, True, False]
    assert "FAIL" in str(log.table())
    CheckLog("99_demo", directory=tmp_path)  # a re-run starts the chapter afresh
    assert load_checks(tmp_path) == []


def test_check_needs_k_for_a_standard_error():
    with pytest.raises(ValueError, match="needs k"):
        CheckLog("99_demo").check("q*", 1.0, 1.0, 0.1)
    with pytest.raises(ValueError, match="must be finite"):
        CheckLog("99_demo").check("q*", 1.0, float("nan"), 0.1, k=2)


def test_erratum_renders_and_reloads(tmp_path):
    from bnsym.report import CheckLog, load_checks, load_errata

    log = CheckLog("99_demo", directory=tmp_path)
    log.check("identity", 0.5, 0.5, atol=1e-12)
    erratum = log.erratum("yang2019meanfield", "Thm 6", "$v^*$", r"$\mu^*$", evidence="sec-99-demo",
                          strength="proven symbolically")
    text = erratum._repr_markdown_()
    assert text.startswith(":::{admonition} Erratum: {cite:t}`yang2019meanfield`, Thm 6")
    assert "{ref}`sec-99-demo` (proven symbolically)" in text and "&lt;" not in erratum._repr_html_()
    assert load_errata(tmp_path) == [erratum] and len(load_checks(tmp_path)) == 1
    CheckLog("99_demo", directory=tmp_path)
    assert load_errata(tmp_path) == []


def test_erratum_links_an_equation_with_eq():
    """An equation label needs MyST's eq role (ref cannot target it), as the errata page's links do."""
    from bnsym.report import CheckLog

    erratum = CheckLog("99_demo").erratum("yang2019meanfield", "eq. (9)", "a", "b", evidence="eq-demo",
                                          strength="shown numerically", kind="ambiguity")
    assert "{eq}`eq-demo` (shown numerically)" in erratum._repr_markdown_()


@pytest.mark.parametrize("change, message", [({"strength": "likely"}, "strength must be"),
                                             ({"kind": "typo"}, "kind must be"), ({"original": " "}, "non-empty")])
def test_erratum_rejects_bad_input(change, message):
    from bnsym.report import CheckLog

    fields = dict(paper="p", location="Thm 1", original="a", corrected="b", evidence="sec-x",
                  strength="shown numerically")
    with pytest.raises(ValueError, match=message):
        CheckLog("99_demo").erratum(**{**fields, **change})


@pytest.mark.parametrize("scale, shift, n", [(1.0, 0.0, 400), (0.5, 0.0, 400), (1.0, 0.3, 50), (2.0, 0.0, 7)])
def test_ks_normal_agrees_with_scipy(scale, shift, n):
    """The KS statistic of synthetic z-scores, well calibrated, too narrow, biased and too wide, against scipy."""
    from scipy.stats import kstest

    from bnsym.core.statistics import ks_normal

    z = shift + scale * np.random.default_rng(n).standard_normal(n)
    statistic, p_value = ks_normal(z)
    reference = kstest(z, "norm", method="exact")
    assert statistic == pytest.approx(reference.statistic, rel=1e-12)
    assert p_value == pytest.approx(reference.pvalue, rel=1e-8)
    with pytest.raises(ValueError, match="finite z-score"):
        ks_normal(np.array([0.0, np.nan]))


def test_ks_normal_flags_a_narrow_family():
    """Overstated standard errors (z shrunk by 3) are detected at the size of a chapter's family."""
    from bnsym.core.statistics import ks_normal

    z = np.random.default_rng(3).standard_normal(100)
    assert ks_normal(z)[1] > 1e-3 and ks_normal(z / 3)[1] < 1e-3


def test_only_standard_error_checks_calibrate():
    log = CheckLog("99_demo")
    assert log.check("mc", 1.0, Estimate(1.01, 0.01, "mc"), k=3.0, atol=0.02).calibrates  # atol <= k SE
    assert not log.check("rounding", 1.0, Estimate(1.0, 1e-9, "mc"), k=3.0, atol=1e-6).calibrates
    assert not log.check("exact", 1.0, 1.0, atol=1e-12).calibrates
    quadrature = log.check("quadrature", 1.0, Estimate(1.0 + 1e-9, 1e-9, "spherical"), k=3.0, bound=True)
    assert quadrature.rule == "3.00 error bound" and quadrature.z == pytest.approx(1.0) and not quadrature.calibrates


def test_item_records_and_reloads(tmp_path):
    from bnsym.report import load_checks, load_items

    log = CheckLog("99_demo", directory=tmp_path)
    log.check("q*", 1.0, Estimate(1.0, 0.1, "mc"), k=3.0)
    item = log.item("yang2019meanfield", "Thm 7", status="checked against simulation", evidence="sec-99-demo")
    log.item("yang2019meanfield", "Fig. 3a", status="substituted", evidence="fig-99-demo", why="digits for MNIST")
    assert load_items(tmp_path) == log.items and log.items[0] == item and len(load_checks(tmp_path)) == 1
    CheckLog("99_demo", directory=tmp_path)
    assert load_items(tmp_path) == []


@pytest.mark.parametrize("change, message", [({"status": "derived and checked"}, "status must be"),
                                             ({"status": "substituted"}, "needs why"), ({"item": ""}, "non-empty")])
def test_item_rejects_bad_input(change, message):
    fields = dict(paper="yang2019meanfield", item="Thm 7", status="derived", evidence="sec-x")
    with pytest.raises(ValueError, match=message):
        CheckLog("99_demo").item(**{**fields, **change})


def test_squared_bias_is_unbiased_with_an_honest_error():
    """Draws with a known mean offset: S is unbiased over replications and its jackknife error matches its spread,
    where the plain squared distance of the mean is biased up by the noise."""
    from bnsym.core.statistics import squared_bias

    rng = np.random.default_rng(7)
    offset = np.full((4, 5), 0.02)
    truth = float(np.sum(offset**2))
    # correlated entries: a common factor in every draw, so subtracting summed squared SEs would not be exact
    draws = rng.standard_normal((250, 200, 1, 1)) + 0.5 * rng.standard_normal((250, 200, 4, 5)) + offset
    estimates = [squared_bias(d, np.zeros((4, 5))) for d in draws]
    values = np.array([e.value for e in estimates])
    assert abs(values.mean() - truth) < 4 * values.std(ddof=1) / np.sqrt(len(values))
    assert np.mean([e.error for e in estimates]) == pytest.approx(values.std(ddof=1), rel=0.25)
    naive = np.mean([np.sum(d.mean(0) ** 2) for d in draws])
    assert naive > truth + 10 * values.std(ddof=1) / np.sqrt(len(values))
    with pytest.raises(ValueError, match="n_groups"):
        squared_bias(draws[0], np.zeros((4, 5)), n_groups=2)
    with pytest.raises(ValueError, match="shape of one draw"):
        squared_bias(draws[0], np.zeros(5))


def test_check_log_table_of_some_checks():
    """A figure's z-table: only the checks passed in, each with its z = (estimate - theory) / SE."""
    log = CheckLog("demo")
    log.check("first", 1.0, Estimate(1.1, 0.1, "mc"), k=3.0)
    second = log.check("second", 2.0, Estimate(1.8, 0.1, "mc"), k=3.0)
    rows = log.table(checks=[second]).rows
    assert [row["quantity"] for row in rows] == ["second"]
    assert rows[0]["z"] == pytest.approx(-2.0)
    assert len(log.table().rows) == 2


def test_paired_verdict_three_ways_and_no_verdict_on_few_networks():
    from bnsym.core.statistics import MIN_NETWORKS, mc_tolerance, paired_verdict

    offsets = np.linspace(-1, 1, MIN_NETWORKS)  # mean 0, SE known: the verdict moves with the shift alone
    se = offsets.std(ddof=1) / np.sqrt(MIN_NETWORKS)
    k = mc_tolerance(MIN_NETWORKS, 3, 0.05)
    assert paired_verdict(offsets + 1.01 * k * se, effect=10.0, n_comparisons=3).verdict == "holds"
    refuted = paired_verdict(offsets + 0.0, effect=1.01 * k * se, n_comparisons=3)
    assert refuted.verdict == "does not hold" and refuted.k == pytest.approx(k) and refuted.networks == MIN_NETWORKS
    assert paired_verdict(offsets, effect=0.99 * k * se, n_comparisons=3).verdict == "not resolved"
    assert refuted.needed_se == pytest.approx(refuted.effect / (2 * k)) and refuted.negated().verdict == "holds"
    few = paired_verdict(offsets[:MIN_NETWORKS - 1] + 100, effect=100.0)  # any z: too few networks to say
    assert few.verdict == "not resolved" and few.networks == MIN_NETWORKS - 1


def test_a_direction_without_a_size_fails_only_where_the_opposite_is_resolved():
    from bnsym.core.statistics import MIN_NETWORKS, mc_tolerance, paired_verdict

    offsets = np.linspace(-1, 1, MIN_NETWORKS)
    k = mc_tolerance(MIN_NETWORKS, 2, 0.05) * offsets.std(ddof=1) / np.sqrt(MIN_NETWORKS)  # k SE
    assert [paired_verdict(offsets + shift, 0.0, 2).verdict for shift in (-1.01 * k, -0.99 * k, 0.99 * k, 1.01 * k)] \
        == ["does not hold", "not resolved", "not resolved", "holds"]
    assert "direction, no size" in paired_verdict(offsets, 0.0).resolution


@pytest.mark.parametrize("differences, effect, message", [([1.0, np.nan, 2.0], 1.0, "non-finite"),
                                                          ([[1.0, 2.0]], 1.0, "1-d"), ([1.0, 2.0], -1.0, ">= 0"),
                                                          ([1.0], 1.0, "at least 2")])
def test_paired_verdict_rejects_bad_input(differences, effect, message):
    from bnsym.core.statistics import paired_verdict

    with pytest.raises(ValueError, match=message):
        paired_verdict(differences, effect)


def test_a_resolved_verdict_on_few_networks_is_refused():
    from bnsym.core.statistics import Verdict

    with pytest.raises(ValueError, match="at least 8 networks"):
        Verdict("holds", 1.0, 0.1, 3.0, 0.5, networks=4, n_comparisons=1, false_alarm=0.05)


def test_item_records_a_computed_verdict_and_its_networks(tmp_path):
    from bnsym.core.statistics import paired_verdict
    from bnsym.report import load_items

    log = CheckLog("99_demo", directory=tmp_path)
    verdict = paired_verdict(np.linspace(0.5, 1.5, 8), effect=0.6)
    item = log.item("bjorck2018understanding", "E12", status="substituted", evidence="sec-99", why="digits",
                    verdict=verdict)
    assert (item.verdict, item.networks, item.resolution) == ("holds", 8, verdict.resolution)
    assert load_items(tmp_path) == [item]
    plain = log.item("bjorck2018understanding", "E5", status="substituted", evidence="sec-99", why="d", networks=3)
    assert plain.verdict is None and plain.networks == 3
    with pytest.raises(ValueError, match="computed by paired_verdict"):
        log.item("bjorck2018understanding", "E12", status="derived", evidence="sec-99", verdict="holds")
    with pytest.raises(ValueError, match="reached on 8"):
        log.item("bjorck2018understanding", "E12", status="derived", evidence="sec-99", verdict=verdict, networks=16)


def test_claim_verdicts_drop_diverged_networks_and_hold_the_family():
    from bnsym.core.statistics import MIN_NETWORKS, mc_tolerance, paired_verdict
    from bnsym.report import claim_verdicts, pointing, verdict_table

    d = np.linspace(1.0, 2.0, MIN_NETWORKS + 2)
    d[:2] = np.nan  # two diverged networks
    claims = {"up": (d, 0.0), "down": (-d, 0.5), "one network": (np.array([np.nan, 3.0]), 0.0)}
    verdicts = claim_verdicts(claims)
    finite = d[np.isfinite(d)]
    assert verdicts["up"] == paired_verdict(finite, 0.0, n_comparisons=3)
    assert verdicts["up"].k == pytest.approx(mc_tolerance(MIN_NETWORKS, 3, 0.05))
    assert (verdicts["up"].verdict, verdicts["down"].verdict) == ("holds", "does not hold")
    assert verdicts["one network"] is None  # no standard error: not resolved
    rows = verdict_table(claims, verdicts).rows
    assert [(r["networks"], r["dropped (NaN)"], r["verdict"]) for r in rows] == [
        (MIN_NETWORKS, 2, "holds"), (MIN_NETWORKS, 2, "does not hold"), (1, 1, "not resolved")]
    assert rows[2]["mean d"] == 3.0 and rows[2]["SE"] is None and rows[2]["mean points"] == pointing(3.0)
    assert (pointing(0.1), pointing(-0.1), pointing(0.0)) == ("the claim's way", "against the claim", "neither way")
    assert claim_verdicts(claims, n_comparisons=5)["up"].n_comparisons == 5  # a family spanning several calls
    with pytest.raises(ValueError, match="cannot hold"):
        claim_verdicts(claims, n_comparisons=2)
