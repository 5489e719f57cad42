"""The bnsym console command: JSON output equals the Python API, bad input is one line on stderr."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_SECONDS
from conftest import run_cli as _run

import bnsym
from bnsym.cli import cache

ROOT = Path(__file__).resolve().parents[1]
BAD_ARGUMENTS = {
    "batch size 1": (["--phi", "relu", "--batch-size", "1"], "B = 1 leaves batch norm undefined"),
    "batch size 3, eps > 0": (["--phi", "relu", "--batch-size", "3", "--eps", "0.1"], "not derived here"),
    "batch size 8.5": (["--phi", "relu", "--batch-size", "8.5"], "whole number"),
    "batch size -2": (["--phi", "relu", "--batch-size", "-2"], "positive"),
    "batch size abc": (["--phi", "relu", "--batch-size", "abc"], "whole number"),
    "unknown activation": (["--phi", "swosh", "--batch-size", "8"], "unknown activation"),
    "eps -1": (["--phi", "relu", "--batch-size", "8", "--eps", "-1"], "eps"),
    "eps nan": (["--phi", "relu", "--batch-size", "8", "--eps", "nan"], "eps"),
    "unknown method": (["--phi", "relu", "--batch-size", "8", "--method", "qmc"], "unknown method"),
    "sigma_w2 0": (["--phi", "relu", "--batch-size", "8", "--eps", "0.1", "--sigma-w2", "0"], "sigma_w2"),
    "sigma_w2 abc": (["--phi", "relu", "--batch-size", "8", "--sigma-w2", "abc"], "sigma_w2"),
    "missing --batch-size": (["--phi", "relu"], "--batch-size"),
    "missing --phi": (["--batch-size", "8"], "--phi"),
}




@pytest.mark.parametrize("spec, batch", [("relu", 8), ("tanh", 5), ("relu^1.5", 16), ("leaky_relu(0.2)", 6)])
def test_predict_json_equals_the_api(capsys, spec, batch):
    status, out, err = _run(capsys, ["predict", "--phi", spec, "--batch-size", str(batch), "--json"])
    assert status == 0 and err == ""
    result = json.loads(out)
    point = bnsym.fixed_point(spec, batch)
    assert result["phi"] == bnsym.parse_activation(spec).name and result["batch_size"] == batch and result["eps"] == 0
    fixed = result["fixed_point"]
    assert fixed["q"] == point.q and fixed["c"] == point.c and fixed["mu"] == point.mu
    assert fixed["method"] == point.method and fixed["error"] == point.error


def test_predict_options(capsys):
    status, out, _ = _run(capsys, ["predict", "--phi", "tanh", "-B", "8.0", "--eps", "0.5", "--method", "radial",
                                   "--sigma-w2", "2", "--json"])
    assert status == 0
    result = json.loads(out)
    point = bnsym.fixed_point("tanh", 8, eps=0.5, sigma_w2=2.0, method="radial")
    assert result["batch_size"] == 8 and result["eps"] == 0.5 and result["sigma_w2"] == 2.0
    assert result["fixed_point"]["q"] == point.q and result["fixed_point"]["c"] == point.c
    assert result["fixed_point"]["method"] == "radial" and result["fixed_point"]["collapsed"] is False
    assert result["forward_eigenvalues"] == bnsym.forward_eigenvalues("tanh", 8, eps=0.5, sigma_w2=2.0)
    assert result["gradient_rate"] == bnsym.gradient_rate("tanh", 8, eps=0.5, sigma_w2=2.0)


@pytest.mark.parametrize("spec, eps", [("tanh", 0.5), ("relu", 0.1), ("relu", 10.0), ("relu(beta=2)", 1e300)])
def test_predict_eps_keys_are_never_null(capsys, spec, eps):
    """Every key has a value with eps > 0, past the collapse too, and the JSON is strict (no NaN or Infinity)."""
    status, out, err = _run(capsys, ["predict", "--phi", spec, "-B", "8", "--eps", str(eps), "--json"])
    assert status == 0 and err == ""
    result = json.loads(out, parse_constant=lambda name: pytest.fail(f"non-strict JSON constant {name}"))

    def no_nulls(value, path):
        if isinstance(value, dict):
            for key, item in value.items():
                no_nulls(item, f"{path}.{key}")
        else:
            assert value is not None, path
    no_nulls(result, "result")
    assert result["fixed_point"]["collapsed"] == (eps > bnsym.collapse_eps(spec, 8))


@pytest.mark.parametrize("spec", ["relu", "tanh"])
def test_predict_text_names_every_json_quantity_once(capsys, spec):
    """Each line of the text is one quantity of --json, under its JSON name, with its value (10 digits)."""
    _, text, err = _run(capsys, ["predict", "--phi", spec, "--batch-size", "8"])
    status, out, _ = _run(capsys, ["predict", "--phi", spec, "--batch-size", "8", "--json"])
    assert status == 0 and err == ""
    result = json.loads(out)
    lines = text.splitlines()
    assert [line.split(" ")[0].rstrip(":") for line in lines] == list(result)
    assert f"gradient_rate = {bnsym.gradient_rate(spec, 8):.10g}" in lines
    point = bnsym.fixed_point(spec, 8)
    assert f"q = {point.q:.10g}, c = {point.c:.10g}" in text
    lam = bnsym.forward_eigenvalues(spec, 8)
    assert f"forward_eigenvalues: G = {lam['G']:.10g}, L = {lam['L']:.10g}, M = {lam['M']:.10g}" in lines


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_bad_input_is_one_line_on_stderr(capsys, case):
    arguments, match = BAD_ARGUMENTS[case]
    status, out, err = _run(capsys, ["predict", *arguments, "--json"])
    assert status != 0 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bnsym: error:"), err
    assert match in lines[0] and "Traceback" not in err


def test_no_command(capsys):
    status, out, err = _run(capsys, [])
    assert status != 0 and len(err.splitlines()) == 1 and err.startswith("bnsym: error:")


def _console_script() -> Path:
    script = Path(sys.executable).parent / "bnsym"
    return script if script.exists() else ROOT / ".venv" / "bin" / "bnsym"


def test_console_script():
    """The installed entry point, run as a user runs it (one case: importing torch makes each run ~2.5 s)."""
    bad = subprocess.run([str(_console_script()), "predict", "--phi", "relu", "--batch-size", "1", "--json"],
                         capture_output=True, text=True, timeout=HANG_SECONDS, cwd=ROOT)
    assert bad.returncode != 0 and bad.stdout == ""
    lines = bad.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bnsym: error:") and "B = 1 leaves" in lines[0], bad.stderr


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_infinite_power_is_an_error(capsys):
    status, out, err = _run(capsys, ["predict", "--phi", "relu^inf", "--batch-size", "8", "--json"])
    assert status != 0 and err.startswith("bnsym: error:")


@pytest.mark.parametrize("spec, batch", [("relu", 8), ("tanh", 5), ("identity", 6)])
def test_predict_json_gradient_keys_equal_the_api(capsys, spec, batch):
    status, out, _ = _run(capsys, ["predict", "--phi", spec, "--batch-size", str(batch), "--json"])
    assert status == 0
    result = json.loads(out)
    assert result["gradient_rate"] == bnsym.gradient_rate(spec, batch)
    assert result["backward_eigenvalues"] == bnsym.backward_eigenvalues(spec, batch)
    assert result["depth_scale"] == bnsym.depth_scale(spec, batch)


@pytest.mark.parametrize("batch", [2, 3])
def test_predict_small_batches(capsys, batch):
    """B = 2, 3: the fixed point and lambda_G (0; infinite as null, with the note), nothing that needs B >= 4."""
    status, out, _ = _run(capsys, ["predict", "--phi", "tanh", "--batch-size", str(batch), "--json"])
    assert status == 0
    result = json.loads(out)
    assert result["fixed_point"]["q"] == bnsym.fixed_point("tanh", batch).q
    assert result["gradient_rate"] == (0.0 if batch == 2 else None) and "App. J" in result["note"]
    assert "forward_eigenvalues" not in result and "cross_batch" not in result


def test_predict_json_backward_eigenvalues_with_eps(capsys):
    """Below the collapse all three backward eigenvalues; past it lambda_G alone (L, M are not derived there)."""
    for eps, keys in ((0.2, {"G", "L", "M"}), (5.0, {"G"})):
        status, out, _ = _run(capsys, ["predict", "--phi", "relu", "--batch-size", "8", "--eps", str(eps), "--json"])
        assert status == 0
        result = json.loads(out)
        assert set(result["backward_eigenvalues"]) == keys
        if keys == {"G", "L", "M"}:
            assert result["backward_eigenvalues"] == bnsym.backward_eigenvalues("relu", 8, eps)


@pytest.mark.parametrize("spec, batch", [("relu", 8), ("tanh", 5), ("relu^2", 8), ("identity", 16)])
def test_predict_json_forward_eigenvalues(capsys, spec, batch):
    """The forward eigenvalues equal the API's; depth scales -1/log(lambda), null where lambda >= 1; strict JSON."""
    status, out, _ = _run(capsys, ["predict", "--phi", spec, "--batch-size", str(batch), "--json"])
    assert status == 0
    result = json.loads(out)
    expected = bnsym.forward_eigenvalues(spec, batch)
    assert result["forward_eigenvalues"] == expected
    for key, lam in expected.items():
        scale = result["depth_scales"][key]
        if lam >= 1:
            assert scale is None
        elif lam == 0:
            assert scale == 0.0
        else:
            assert np.exp(-1 / scale) == pytest.approx(lam, rel=1e-12)
    json.dumps(result, allow_nan=False)


SWEEP_ERRORS = {
    "bad depth range": (["sweep", "trainability", "--depths", "5:x", "--batch-sizes", "8"], "--depths"),
    "zero step": (["sweep", "trainability", "--depths", "5:60:0", "--batch-sizes", "8"], "--depths"),
    "bad batch list": (["sweep", "trainability", "--depths", "5", "--batch-sizes", "8,a"], "--batch-sizes"),
    "bad optimizer": (["sweep", "trainability", "--depths", "5", "--batch-sizes", "8", "--optimizer", "adam"],
                      "optimizer"),
    "no results": (["sweep", "show", "/nonexistent/bnsym-sweep"], "no sweep results"),
    "missing --depths": (["sweep", "trainability", "--batch-sizes", "8"], "--depths"),
}


@pytest.mark.parametrize("case", SWEEP_ERRORS)
def test_sweep_bad_input_is_one_line_on_stderr(capsys, case):
    argv, fragment = SWEEP_ERRORS[case]
    status, out, err = _run(capsys, argv)
    assert status == 2 and out == ""
    assert err.startswith("bnsym: error:") and fragment in err and err.count("\n") == 1


def test_sweep_show_prints_the_table_and_writes_the_png(capsys, tmp_path):
    from bnsym.sweep import Store, config_key
    from bnsym.sweep.experiments import resolve, version

    store = Store(tmp_path)
    for depth, accuracy in ((5, 0.9), (50, 0.1)):  # records must hash to their keys to be shown
        config = {"depth": depth, "batch_size": 8, "seed": 1}
        key = config_key("trainability", config, version(resolve("trainability")))
        store.save({"key": key, "task": "trainability", "config": config, "error": None, "seconds": 1.0,
                    "result": {"test_accuracy": accuracy, "chance": 0.1}})
    status, out, err = _run(capsys, ["sweep", "show", str(tmp_path)])
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["depth", "batch_size", "test", "accuracy", "trains"]
    assert [line.split()[-1] for line in lines[2:4]] == ["True", "False"]
    assert (tmp_path / "heatmap.png").stat().st_size > 0


def test_import_and_help_need_no_theory():
    """`import bnsym` and `bnsym --help` import neither torch, SymPy nor SciPy (about 3 s of CPU): the public names
    are imported on first use, and the commands import the theory they run."""
    probe = ("import sys, bnsym, bnsym.cli, bnsym.sweep; bnsym.cli._parser().format_help(); "
             "print(sorted(m for m in ('torch', 'sympy', 'scipy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=HANG_SECONDS, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
    import bnsym.sweep

    assert bnsym.gradient_rate("relu", 8) > 1 and callable(bnsym.sweep.run) and "fixed_point" in dir(bnsym)


def _children_cpu_seconds() -> float:
    """User + system CPU time of this process's finished children (a child's own work, however loaded the machine)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_predict_again_is_fast_identical_and_imports_no_theory(tmp_path):
    """The second `bnsym predict` reads the answer the first computed (bnsym.cli.cache): the same bytes, without torch,
    SymPy or SciPy (about 0.2 s of CPU; importing torch alone costs over 1 s). Its CPU time is measured, not its
    wall time, so that a loaded machine cannot fail it."""
    env = {**os.environ, "BNSYM_CACHE_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    argv = ["predict", "--phi", "relu", "--batch-size", "32"]
    first = subprocess.run([str(_console_script()), *argv], capture_output=True, text=True, timeout=HANG_SECONDS,
                           env=env)
    assert first.returncode == 0 and first.stderr == "", first.stderr
    cpu = _children_cpu_seconds()
    again = subprocess.run([str(_console_script()), *argv], capture_output=True, text=True, timeout=HANG_SECONDS,
                           env=env)
    cpu = _children_cpu_seconds() - cpu
    assert again.stdout == first.stdout and cpu < 1.0, (cpu, again.stdout, again.stderr)
    probe = ("import sys; from bnsym.cli import main; main(%r); "
             "print('imported:', sorted({'torch', 'sympy', 'scipy'} & set(sys.modules)))" % argv)
    seen = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=HANG_SECONDS, env=env)
    assert seen.stdout == first.stdout + "imported: []\n", seen.stdout + seen.stderr


def test_cached_answer_tracks_the_code_and_survives_corruption(tmp_path, monkeypatch):
    """An answer is computed once per (arguments, code version); a corrupt record is set aside and recomputed."""
    monkeypatch.setenv("BNSYM_CACHE_DIR", str(tmp_path))
    calls = []

    def compute() -> dict:
        calls.append(1)
        return {"value": 0.1 + 0.2, "order": {"z": 1, "a": 2}}

    first = cache.cached("probe", {"x": "1"}, compute)
    assert cache.cached("probe", {"x": "1"}, compute) == first and len(calls) == 1
    assert list(cache.cached("probe", {"x": "1"}, compute)["order"]) == ["z", "a"]  # the order computed
    cache.cached("probe", {"x": "2"}, compute)
    assert len(calls) == 2
    (record,) = [path for path in (tmp_path / "probe").glob("*.json")
                 if json.loads(path.read_text())["config"] == {"x": "1"}]
    record.write_text(record.read_text()[:30])
    assert cache.cached("probe", {"x": "1"}, compute) == first and len(calls) == 3
    assert list((tmp_path / "probe").glob("*.corrupt-*"))
    monkeypatch.setattr(cache, "code_version", lambda: "another version")
    cache.cached("probe", {"x": "1"}, compute)
    assert len(calls) == 4


@pytest.mark.parametrize("blocked", ["", "probe"])
def test_unwritable_cache_still_answers(tmp_path, monkeypatch, blocked):
    """A file where the cache folder, or its task's folder, should be: the answer is computed all the same."""
    (tmp_path / "probe").write_text("not a folder")
    monkeypatch.setenv("BNSYM_CACHE_DIR", str(tmp_path / "probe" if blocked == "" else tmp_path))
    assert cache.cached("probe", {}, lambda: {"v": 1}) == {"v": 1}
