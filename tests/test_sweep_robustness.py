"""The sweep cache under attack, on a real LocalCluster of 2 worker processes (issues 33 and 41): corrupt,
truncated, duplicated and symlinked records, a record naming a module to import, two sweeps at once on one folder,
a sweep killed while it saves, and Ctrl-C (to the process, and to its whole process group).

Nothing is lost or overwritten, and every message names its file. The task is ``builtins:dict``, passed to
``sweep.run`` by the caller (the only way a task outside bnsym's registry is imported), which echoes its
configuration (microseconds), so the cells cost nothing and the test exercises the store alone; the subprocesses
connect to this module's cluster instead of starting their own. Nothing here waits for a guessed time: each test
waits for the condition it needs, up to ``HANG_SECONDS``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_SECONDS, wait_until

from bnsym import sweep
from bnsym.cli import main
from bnsym.core.store import Store
from bnsym.sweep.experiments import registered_version

TASK = "builtins:dict"


def _configs(n: int) -> list[dict]:
    return [{"x": i} for i in range(n)]


@pytest.fixture(scope="module")
def client():
    with sweep.connect(n_workers=2) as client:
        yield client


def _intact(out: Path, n: int) -> None:
    """Every configuration of _configs(n) has its own intact record, holding its own result; nothing else is a
    record, and no temporary file is left."""
    store = Store(out)
    for config in _configs(n):
        key = sweep.config_key(TASK, config)
        record = store.done(key)
        assert record is not None and record["result"]["x"] == config["x"], key
    assert store.set_aside == []
    assert len(list(out.glob("[!.]*.json"))) == n and not list(out.glob(".*.tmp"))


def _sweep_process(out: Path, n: int, address: str, stderr=subprocess.PIPE) -> subprocess.Popen:
    """A sweep of _configs(n) in a new process, on the cluster at ``address``."""
    code = ("import sys; from bnsym import sweep; "
            f"r = sweep.run({TASK!r}, [{{'x': i}} for i in range({n})], sys.argv[1], scheduler=sys.argv[2]); "
            "print(r.executed, r.cached, len(r.set_aside))")
    return subprocess.Popen([sys.executable, "-c", code, str(out), address], stdout=subprocess.PIPE,
                            stderr=stderr, text=True)


def _records(out: Path) -> list[Path]:
    return list(out.glob("[!.]*.json"))


def test_corrupt_truncated_duplicated_and_symlinked_records(client, tmp_path):
    """Each bad file is named by its path, moved aside (a symlink itself, never its target) and recomputed."""
    out, n = tmp_path / "out", 6
    first = sweep.run(TASK, _configs(n), out, client=client)
    paths = [Store(out).path(record["key"]) for record in first.records]
    precious = tmp_path / "precious.json"
    kept = paths[4].read_text()
    precious.write_text(kept)  # a valid record, outside the folder, that must not be touched
    paths[0].write_bytes(b"\x00\xff garbage")
    paths[1].write_text(paths[1].read_text()[:25])  # truncated
    paths[2].write_text("")
    paths[3].write_text(paths[5].read_text())  # a duplicate: x = 5's record under x = 3's name
    paths[4].unlink()
    paths[4].symlink_to(precious)
    again = sweep.run(TASK, _configs(n), out, client=client)
    assert (again.executed, again.cached) == (5, 1)
    named = sorted(line.split(":")[0] for line in again.set_aside)
    assert named == sorted(f"corrupt sweep record {path}" for path in paths[:5])
    assert precious.read_text() == kept
    assert [record["result"] for record in again.records] == [record["result"] for record in first.records]
    assert len(list(out.glob("*.corrupt-*"))) == 5
    _intact(out, n)


def test_two_sweeps_at_once_on_one_folder(client, tmp_path):
    """Two processes sweep the same configurations into one folder at once: both finish (one waits for the other's
    lock), every record is whole and its own, and a third sweep finds everything cached."""
    n = 30
    runs = [_sweep_process(tmp_path, n, client.scheduler.address) for _ in range(2)]
    outputs = [run.communicate(timeout=HANG_SECONDS) for run in runs]
    for run, (out, err) in zip(runs, outputs):
        assert run.returncode == 0, err
        executed, cached, set_aside = map(int, out.split())
        assert executed + cached == n and set_aside == 0
    _intact(tmp_path, n)
    assert sweep.run(TASK, _configs(n), tmp_path).cached == n  # no client needed: nothing left to compute


def test_a_sweep_killed_while_it_saves_loses_nothing(client, tmp_path):
    """SIGKILL a sweep process as its records arrive: each record on disk is whole (a save is a rename), and a
    rerun computes exactly the ones missing."""
    n = 300
    run = _sweep_process(tmp_path, n, client.scheduler.address)
    wait_until(lambda: len(_records(tmp_path)) >= 5 or run.poll() is not None, "the sweep's fifth record")
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=HANG_SECONDS)
    saved = {path.name for path in tmp_path.glob("[!.]*.json")}
    assert 0 < len(saved) < n, f"{len(saved)} of {n} records were saved before the kill: it came too late"
    store = Store(tmp_path)
    for name in saved:
        assert store.done(name.removesuffix(".json")) is not None, name
    for leftover in tmp_path.glob(".*.tmp"):  # a save killed before its rename: not a record, never read as one
        leftover.unlink()
    rerun = sweep.run(TASK, _configs(n), tmp_path, client=client)
    assert rerun.set_aside == () and rerun.cached >= len(saved) and rerun.executed + rerun.cached == n
    _intact(tmp_path, n)


@pytest.mark.parametrize("whom", ["process", "process group"])
def test_ctrl_c_during_a_sweep_prints_one_line(client, tmp_path, whom):
    """SIGINT while cells are computed: exit status 130 and one line, no traceback; the records saved remain.
    "process group": a Ctrl-C in a terminal, sent to the sweep's own LocalCluster as well (its worker processes
    each printed a traceback, about 70 lines in all); "process": to the sweep alone, its cluster elsewhere."""
    # 399 cells: the sweep is still running when its first record appears (on a quiet machine 24 more finished
    # between the first record and the interrupt), however loaded the machine, since both slow down alike
    command = [sys.executable, "-m", "bnsym.cli", "sweep", "trainability", "--depths", "2:400:1", "--batch-sizes",
               "16", "--width", "8", "--epochs", "1", "--seeds", "1", "--out", str(tmp_path)]
    if whom == "process":
        command += ["--scheduler", client.scheduler.address]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                           start_new_session=True)
    wait_until(lambda: _records(tmp_path) or run.poll() is not None, "the sweep's first record")
    assert run.poll() is None, "the sweep ended before it could be interrupted"
    if whom == "process":
        run.send_signal(signal.SIGINT)
    else:
        os.killpg(run.pid, signal.SIGINT)
    _, err = run.communicate(timeout=HANG_SECONDS)
    assert (run.returncode, err) == (130, "bnsym: interrupted\n")
    store = Store(tmp_path)
    records = store.records(registered_version)
    assert store.set_aside == [] and len(records) == len(_records(tmp_path)) > 0


def test_show_never_imports_a_module_a_record_names(tmp_path, monkeypatch, capsys):
    """A results folder someone else wrote names a module as its task: `sweep show` made it import it. Now a record's
    task is looked up in bnsym's registry only: the module is never imported, a record that cannot be checked
    without it is skipped naming its file, and sweep.resolve refuses the name."""
    site, trace = tmp_path / "site", tmp_path / "imported"
    site.mkdir()
    site.joinpath("planted_task.py").write_text(f"import pathlib\npathlib.Path({str(trace)!r}).write_text('x')\n"
                                                "def f(config):\n    return config\nf.version = '9'\n")
    monkeypatch.syspath_prepend(str(site))
    out = tmp_path / "out"
    store = Store(out)
    paths = {}
    for label, stamp in (("plain", ""), ("versioned", "9")):  # the second hashes only with the module's version
        config = {"label": label}
        key = sweep.config_key("planted_task:f", config, stamp)
        store.save({"key": key, "task": "planted_task:f", "config": config, "result": {"y": 1}, "error": None})
        paths[label] = store.path(key)
    assert main(["sweep", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert f"skipped {paths['versioned']}: its task and config do not hash" in shown
    assert "\ny\n" in shown  # the other record's table, read without importing anything
    with pytest.raises(ValueError, match="not a registered experiment"):
        sweep.resolve("planted_task:f")
    assert not trace.exists() and "planted_task" not in sys.modules


def test_a_second_sweep_on_a_folder_waits_for_the_first(client, tmp_path):
    """The store's lock: while one sweep holds a folder, a second sweep on it says once that it waits, writes
    nothing, and runs (finding what the first stored) when the first is done."""
    log = tmp_path / "stderr.txt"
    out = tmp_path / "out"
    with Store(out).writing(), log.open("w") as stderr:
        run = _sweep_process(out, 3, client.scheduler.address, stderr=stderr)
        wait_until(lambda: "waiting" in log.read_text() or run.poll() is not None, "the second sweep's notice")
        assert run.poll() is None and _records(out) == [], log.read_text()
    stdout, _ = run.communicate(timeout=HANG_SECONDS)
    assert run.returncode == 0 and stdout.split() == ["3", "0", "0"], log.read_text()
    assert log.read_text().count("\n") == 1 and f"waiting for the sweep writing to {out} (pid {os.getpid()})" \
        in log.read_text()
    _intact(out, 3)
