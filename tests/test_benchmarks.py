"""Every benchmark script runs at its smallest size and writes its JSON record (a check that they work, not timing)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import harness  # noqa: E402


@pytest.mark.parametrize("script", harness.scripts(), ids=lambda p: p.stem)
def test_benchmark_runs_at_smoke_size(script, tmp_path):
    output = tmp_path / f"{script.stem}.json"
    result = harness.load(script).main(["--smoke", "--output", str(output)])
    assert json.loads(output.read_text()) == json.loads(json.dumps(result, default=float))
    assert result["benchmark"] == script.stem and result["rows"] and result["config"]["smoke"]
    for key in ("processor", "cpu_count", "torch", "numpy", "load_average_1_5_15_min"):
        assert key in result["machine"]
    for line in result["rows"]:
        assert {"case", "ours"} <= set(line)
        if "peer_median_s" in line:
            assert line["ratio"] == pytest.approx(line["peer_median_s"] / line["ours_median_s"])


def test_every_committed_result_has_a_script():
    """benchmarks/results/*.json (and gpu/*.json, run with --device cuda) is what the book shows: each comes from a
    script that still exists, at its full size."""
    stems = {p.stem for p in harness.scripts()}
    for result in [*(BENCHMARKS / "results").glob("*.json"), *(BENCHMARKS / "results" / "gpu").glob("*.json")]:
        assert result.stem in stems, f"{result.name} has no benchmarks/{result.stem}.py"
        record = json.loads(result.read_text())
        assert record["benchmark"] == result.stem and not record["config"]["smoke"]
        assert record["machine"]["device"].startswith("cuda") == (result.parent.name == "gpu"), result


def test_every_stored_record_has_its_script_and_command():
    """benchmarks/records/*.json (the larger runs behind the chapters' verdicts): each names the command that
    reproduces it, a script that still exists, and is small (summaries, not weights). A record is written by its
    script in records/ (``record.write``), or by a benchmark of benchmarks/ in the harness's format (the reliability
    grid of chapter 15)."""
    records = BENCHMARKS / "records"
    for path in records.glob("*.json"):
        record = json.loads(path.read_text())
        by_harness = "benchmark" in record
        script = (BENCHMARKS if by_harness else records) / f"{path.stem}.py"
        assert script.exists() and record["benchmark" if by_harness else "name"] == path.stem, path.name
        assert str(script.relative_to(BENCHMARKS.parent)) in record["command"], record["command"]
        cpu = record["worker_cpu_seconds"] if by_harness else record["cost"]["worker_cpu_s"]
        assert cpu > 0 and path.stat().st_size < 200_000, path.name
