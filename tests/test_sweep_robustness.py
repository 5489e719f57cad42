"""The sweep cache under attack, on a real LocalCluster of 2 worker processes (issue 33): corrupt, truncated,
duplicated and symlinked records, two sweeps at once on one folder, a sweep killed while it saves, and Ctrl-C.

Nothing is lost or overwritten, and every message names its file. The task is ``builtins:dict``, which echoes its
configuration (microseconds), so the cells cost nothing and the test exercises the store alone; the subprocesses
connect to this module's cluster instead of starting their own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bnsym import sweep
from bnsym.sweep.experiments import resolve, version
from bnsym.sweep.store import Store

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


def _sweep_process(out: Path, n: int, address: str) -> subprocess.Popen:
    """A sweep of _configs(n) in a new process, on the cluster at ``address``."""
    code = ("import sys; from bnsym import sweep; "
            f"r = sweep.run({TASK!r}, [{{'x': i}} for i in range({n})], sys.argv[1], scheduler=sys.argv[2]); "
            "print(r.executed, r.cached, len(r.set_aside))")
    return subprocess.Popen([sys.executable, "-c", code, str(out), address], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


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
    """Two processes sweep the same configurations into one folder at once: both finish, every record is whole
    and its own, and a third sweep finds everything cached."""
    n = 30
    runs = [_sweep_process(tmp_path, n, client.scheduler.address) for _ in range(2)]
    outputs = [run.communicate(timeout=120) for run in runs]
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
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("[!.]*.json"))) < 5 and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.005)
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=30)
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


def test_ctrl_c_during_a_sweep_prints_one_line(client, tmp_path):
    """SIGINT while cells are computed: exit status 130 and one line, no traceback; the records saved remain."""
    # 399 cells: on a quiet machine 24 finished between the first record and the interrupt (exit 0)
    command = [sys.executable, "-m", "bnsym.cli", "sweep", "trainability", "--depths", "2:400:1", "--batch-sizes",
               "16", "--width", "8", "--epochs", "1", "--seeds", "1", "--out", str(tmp_path),
               "--scheduler", client.scheduler.address]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 90
    while not list(tmp_path.glob("[!.]*.json")) and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.01)
    assert run.poll() is None, "the sweep ended before it could be interrupted"
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=240)  # closing the client took over 60 s once, under a load average of 7
    assert (run.returncode, err) == (130, "bnsym: interrupted\n")
    store = Store(tmp_path)
    records = store.records(lambda task: version(resolve(task)))
    assert store.set_aside == [] and len(records) == len(list(tmp_path.glob("[!.]*.json"))) > 0
