"""bnsym.sweep against a real LocalCluster of 2 worker processes: completion, a killed worker, the cache,
failures, and identical results with 1 and 2 workers.

The cells are trainability runs of tiny networks (width 8, a few layers, one epoch), a fraction of a second each.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from conftest import HANG_SECONDS, run_cli, wait_until

from bnsym import sweep
from bnsym.cli import main
from bnsym.core.cluster import CONNECT_TIMEOUT
from bnsym.core.store import Store
from bnsym.train.trainability import grid

TINY = {"width": 8, "epochs": 1, "n_seeds": 1}
CONFIGS = grid([2, 3], [16, 64], **TINY)


@pytest.fixture(scope="module")
def client():
    with sweep.connect(n_workers=2) as client:
        yield client


@pytest.fixture(scope="module")
def two_worker_run(client, tmp_path_factory):
    out = tmp_path_factory.mktemp("two")
    return out, sweep.run("trainability", CONFIGS, out, client=client)


def test_a_tiny_grid_completes(two_worker_run):
    out, result = two_worker_run
    assert (result.executed, result.cached, result.failures) == (len(CONFIGS), 0, [])
    assert len(list(out.glob("*.json"))) == len(CONFIGS)
    assert [(row["depth"], row["batch_size"]) for row in result.rows()] == [(c["depth"], c["batch_size"])
                                                                           for c in CONFIGS]
    assert all(0 <= row["test_accuracy"] <= 1 for row in result.rows())


def _ignore_sigint(client) -> set[bool]:
    """Whether each worker ignores SIGINT (a Ctrl-C to the process group made each print a traceback)."""
    return set(client.run(lambda: signal.getsignal(signal.SIGINT) == signal.SIG_IGN).values())


def test_local_workers_keep_glibc_malloc_defaults_and_one_thread(client):
    """Dask's MALLOC_TRIM_THRESHOLD_ would pin glibc's mmap threshold (every large array mapped afresh)."""
    assert set(client.run(os.environ.get, "MALLOC_TRIM_THRESHOLD_").values()) == {None}
    assert set(client.run(os.environ.get, "OMP_NUM_THREADS").values()) == {"1"}
    assert _ignore_sigint(client) == {True}


def test_a_rerun_executes_zero_tasks(two_worker_run):
    out, first = two_worker_run
    again = sweep.run("trainability", CONFIGS, out)  # no client: none is started when nothing is left to run
    assert (again.executed, again.cached) == (0, len(CONFIGS))
    assert again.records == first.records


def _cli_sweep(out, scheduler=None) -> subprocess.CompletedProcess:
    """``bnsym sweep trainability`` over CONFIGS' grid in a fresh process (so no Dask client of this one lives)."""
    command = [sys.executable, "-m", "bnsym.cli", "sweep", "trainability", "--depths", "2:3:1", "--batch-sizes",
               "16,64", "--width", "8", "--epochs", "1", "--seeds", "1", "--out", str(out)]
    return subprocess.run(command + (["--scheduler", scheduler] if scheduler else []), capture_output=True,
                          text=True, timeout=HANG_SECONDS)


def test_the_cli_reruns_a_complete_and_a_partial_sweep(tmp_path):
    first = _cli_sweep(tmp_path)
    assert first.returncode == 0, first.stderr
    assert "4 cells: 4 run, 0 from the cache, 0 failed" in first.stdout
    stored = sorted(tmp_path.glob("*.json"))
    # complete: nothing is left to compute, so no cluster is started; a scheduler address where nothing listens
    # proves that no connection is even tried
    again = _cli_sweep(tmp_path, scheduler="tcp://127.0.0.1:9")
    assert again.returncode == 0, again.stderr
    assert "4 cells: 0 run, 4 from the cache, 0 failed" in again.stdout
    for path in stored[::2]:  # partial: half the cells deleted are computed again on a new local cluster
        path.unlink()
    partial = _cli_sweep(tmp_path)
    assert partial.returncode == 0, partial.stderr
    assert "4 cells: 2 run, 2 from the cache, 0 failed" in partial.stdout
    assert sorted(tmp_path.glob("*.json")) == stored


def test_results_are_identical_with_one_and_two_workers(two_worker_run, tmp_path):
    _, two = two_worker_run
    with sweep.connect(n_workers=1) as one_worker:
        one = sweep.run("trainability", CONFIGS, tmp_path, client=one_worker)
    assert [record["result"] for record in one.records] == [record["result"] for record in two.records]


def test_killing_a_worker_mid_sweep_still_completes(client, tmp_path):
    configs = grid([2, 3, 4, 5], [4, 8], **TINY)  # 8 cells of about a second
    pids = list(client.run(os.getpid).values())
    killed = {}

    def kill_after_first_result():
        while not list(tmp_path.glob("*.json")):
            time.sleep(0.01)
        killed["done_before"] = len(list(tmp_path.glob("*.json")))
        os.kill(pids[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_after_first_result, daemon=True)
    killer.start()
    result = sweep.run("trainability", configs, tmp_path, client=client)
    wait_until(lambda: "done_before" in killed, "the kill after the first record")
    assert killed["done_before"] < len(configs), "the worker was killed only after the sweep had finished"
    assert pids[0] not in client.run(os.getpid).values()
    assert result.failures == [] and len(result.rows()) == len(configs)
    client.wait_for_workers(2, timeout=HANG_SECONDS)
    assert _ignore_sigint(client) == {True}  # the nanny's new worker too


def test_a_failed_task_is_recorded_and_retried(client, tmp_path):
    configs = [{"x": 1}, {"x": 2}]
    result = sweep.run("math:sqrt", configs, tmp_path, client=client)  # sqrt of a dict raises TypeError
    assert len(result.failures) == 2 and all("TypeError" in r["error"] for r in result.failures)
    assert sweep.run("math:sqrt", configs, tmp_path, client=client).executed == 2  # failures are not cached


def test_keys_and_seeds_are_deterministic():
    a, b = sweep.config_key("t", {"x": 1, "y": 2}), sweep.config_key("t", {"y": 2, "x": 1})
    assert a == b != sweep.config_key("t", {"x": 1, "y": 2}, version="2")
    assert sweep.seed_of(a) == int(a[:8], 16)


@pytest.mark.parametrize("task, configs, message", [
    ("nosuchtask", [{}], "registered experiment"),
    ("bnsym.nosuch:f", [{}], "cannot be imported"),
    ("trainability", {"depth": 2}, "list of dicts"),
    ("trainability", [{"depth": 2}], "batch_size"),
    ("trainability", [{"depth": 2, "batch_size": 8, "optimizer": "adam"}], "optimizer"),
    ("trainability", [{"depth": 2, "batch_size": 8, "lr": 0.1}], "unknown trainability settings"),
    ("trainability", [{"depth": 2, "batch_size": 8, "width": float("nan")}], "width"),
])
def test_bad_sweeps_fail_before_anything_runs(tmp_path, task, configs, message):
    with pytest.raises(ValueError, match=message):
        sweep.run(task, configs, tmp_path)
    assert not tmp_path.joinpath("x").exists() and list(tmp_path.iterdir()) == []


def test_corrupt_records_are_reported_moved_aside_and_recomputed(two_worker_run, client, tmp_path):
    """Empty, truncated, non-record and misfiled records (another configuration's record under this key, which once
    made the table show one cell twice) are each named by path, moved aside and computed again."""
    source, first = two_worker_run
    paths = sorted(source.glob("*.json"))
    for path in paths:
        tmp_path.joinpath(path.name).write_text(path.read_text())
    stored = sorted(tmp_path.glob("*.json"))
    stored[0].write_text("")
    stored[1].write_text(stored[1].read_text()[:40])
    stored[2].write_text(json.dumps([1, 2]))
    stored[3].write_text(paths[0].read_text())
    result = sweep.run("trainability", CONFIGS, tmp_path, client=client)
    assert (result.executed, result.cached) == (4, 0)
    assert sorted(line.split(":")[0] for line in result.set_aside) == [f"corrupt sweep record {p}" for p in stored]
    assert len(list(tmp_path.glob("*.corrupt-*"))) == 4
    assert [record["result"] for record in result.records] == [record["result"] for record in first.records]


@pytest.mark.parametrize("result", [{"chance": 0.1}, {"test_accuracy": "high", "chance": 0.1},
                                    {"test_accuracy": 0.5, "chance": None}])
def test_a_record_whose_result_cannot_be_read_is_set_aside_naming_its_file(two_worker_run, client, tmp_path, capsys,
                                                                          result):
    """A record that parses but lacks test_accuracy (or holds a string) blocked every rerun and `sweep show` with a
    message naming no file: `show` skips it naming its path, a rerun moves it aside, naming it, and computes it."""
    source, first = two_worker_run
    for path in source.glob("*.json"):
        tmp_path.joinpath(path.name).write_text(path.read_text())
    bad = tmp_path / sorted(path.name for path in source.glob("*.json"))[0]
    bad.write_text(json.dumps({**json.loads(bad.read_text()), "result": result}))
    assert main(["sweep", "show", str(tmp_path), "--png", str(tmp_path / "map.png")]) == 0
    assert f"skipped {bad}: its result's" in capsys.readouterr().out
    again = sweep.run("trainability", CONFIGS, tmp_path, client=client)
    assert (again.executed, again.cached) == (1, 3) and len(again.set_aside) == 1
    assert again.set_aside[0].startswith(f"corrupt sweep record {bad}: its result's")
    assert [record["result"] for record in again.records] == [record["result"] for record in first.records]


def test_show_of_a_folder_of_unreadable_records_names_each_file(two_worker_run, tmp_path, capsys):
    """When every record is skipped, the error says so and names each skipped file (it said only "the directory
    holds no sweep results")."""
    source, _ = two_worker_run
    bad = sorted(tmp_path / path.name for path in source.glob("*.json"))
    for path in bad:
        path.write_text(json.dumps({**json.loads((source / path.name).read_text()), "result": {"chance": 0.1}}))
    assert main(["sweep", "show", str(tmp_path), "--png", str(tmp_path / "map.png")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no sweep results" in err
    assert all(f"skipped {path}" in err for path in bad)


def test_saves_are_atomic_and_never_follow_a_planted_symlink(tmp_path):
    """Two writers and a reader of one record: every read is a whole record; a symlink planted at the old
    predictable temporary name (or at the record itself) never has its target overwritten."""
    store = Store(tmp_path)
    key = sweep.config_key("t", {"x": 1})
    target = tmp_path / "target.txt"
    target.write_text("precious")
    tmp_path.joinpath(f".{key}.tmp.json").symlink_to(target)
    errors, reads, saves, stop = [], [], {"a": 0, "b": 0}, threading.Event()

    def write(label):
        while not stop.is_set():
            try:
                store.save({"key": key, "task": "t", "config": {"x": 1}, "result": {"by": label}, "error": None})
                saves[label] += 1
            except Exception as error:  # noqa: BLE001 - collected for the assertion
                errors.append(error)

    def read_while_both_write():  # counted, not timed: 200 reads while each writer has saved 50 times or more
        if store.path(key).exists():
            reads.append(json.loads(store.path(key).read_text())["result"]["by"])
        return errors or (len(reads) >= 200 and min(saves.values()) >= 50)

    writers = [threading.Thread(target=write, args=(label,)) for label in "ab"]
    for writer in writers:
        writer.start()
    try:
        wait_until(read_while_both_write, "200 reads during 2 x 50 saves")
    finally:
        stop.set()
        for writer in writers:
            writer.join()
    assert errors == [] and reads and set(reads) <= {"a", "b"}
    assert store.done(key) is not None and store.set_aside == []
    store.path(key).unlink()
    store.path(key).symlink_to(target)
    store.save({"key": key, "task": "t", "config": {"x": 1}, "result": {}, "error": None})
    assert target.read_text() == "precious" and not store.path(key).is_symlink()
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([f".{key}.tmp.json", f"{key}.json",
                                                                        "target.txt"])


def test_show_skips_what_is_not_a_record_and_names_it(two_worker_run, tmp_path, capsys):
    source, _ = two_worker_run
    for path in source.glob("*.json"):
        tmp_path.joinpath(path.name).write_text(path.read_text())
    tmp_path.joinpath("notes.json").write_text('{"comment": "not a record"}')
    tmp_path.joinpath(".0123abcd.tmp.json").write_text('{"key": "0123')  # a save killed half-way (old name)
    assert main(["sweep", "show", str(tmp_path), "--png", str(tmp_path / "map.png")]) == 0
    out = capsys.readouterr().out
    assert f"skipped {tmp_path / 'notes.json'}: not a sweep record" in out and "depth" in out
    assert main(["sweep", "show", str(tmp_path), "--png", str(tmp_path / "no" / "map.png")]) == 2
    assert f"bnsym: error: the heat map cannot be written to {tmp_path / 'no' / 'map.png'}" in capsys.readouterr().err


def test_an_unwritable_out_is_refused_before_any_work(tmp_path):
    """Refused before a cluster is sought: the scheduler address, where nothing listens, is never tried."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=f"out {blocker / 'sub'} is not a writable directory"):
        sweep.run("trainability", CONFIGS, blocker / "sub", scheduler="tcp://127.0.0.1:9")


ARGUMENTS = ["--depths", "2", "--batch-sizes", "8", "--width", "8", "--epochs", "1", "--seeds", "1"]


@pytest.mark.parametrize("change, message", [
    ({"--batch-sizes": "2"}, "B = 2"),  # the heat map's 16 xi line refused it after the cells had trained
    ({"--out": "{tmp}/file"}, "{tmp}/file exists and is not one"),
    ({"--out": "/dev/null"}, "/dev/null exists and is not one"),
    ({"--out": "{tmp}/file/sub"}, "{tmp}/file/sub is not a writable directory"),
    ({"--scheduler": "tcp://127.0.0.1:9"}, "no Dask scheduler answers at tcp://127.0.0.1:9"),
])
def test_bad_sweep_arguments_are_refused_before_a_cluster_and_leave_nothing(capsys, tmp_path, change, message):
    """Every argument and the folder are checked before a cluster is sought (a scheduler address where nothing
    listens proves it: its error would come first), and a refused sweep leaves no folder behind (an empty --out
    was left when a cluster could not be reached)."""
    tmp_path.joinpath("file").write_text("")
    options = {"--out": str(tmp_path / "new" / "out"), "--scheduler": "tcp://127.0.0.1:9",
               **{key: value.format(tmp=tmp_path) for key, value in change.items()}}
    argv = ["sweep", "trainability", *ARGUMENTS, *(item for pair in options.items() for item in pair)]
    status, out, err = run_cli(capsys, argv)
    assert (status, out, err.count("\n")) == (2, "", 1) and message.format(tmp=tmp_path) in err, err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file"]


def test_a_scheduler_that_does_not_answer_fails_fast_naming_the_address(client):
    """A port that accepts but never answers once hung past 75 s; a closed one took 33 s and an internal error."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        for address in (f"tcp://127.0.0.1:{silent.getsockname()[1]}", "tcp://127.0.0.1:9"):
            start = time.monotonic()
            with pytest.raises(ValueError, match=f"no Dask scheduler answers at {address}"):
                with sweep.connect(address):
                    pass
            # a wall time, unavoidably (a wait on a socket): generous, since the hang it guards against was endless
            assert time.monotonic() - start < 20 * CONNECT_TIMEOUT
    with sweep.connect(client.scheduler.address) as live:  # a live scheduler passes the probe
        assert live.run(os.getpid)


def test_a_function_is_a_task_stored_under_its_path(client, tmp_path):
    """A module-level function runs as its "module:function" path does, and shares its cache."""
    configs = [{"x": 1}, {"x": 2}]
    result = sweep.run(dict, configs, tmp_path, client=client)  # dict(config) echoes the configuration
    assert result.failures == [] and {row["x"] for row in result.rows()} == {1, 2}
    assert sweep.run("builtins:dict", configs, tmp_path, client=client).cached == 2


def test_show_of_a_task_without_a_show_function_prints_its_cells(client, tmp_path, capsys):
    """No heat map for a task that registers no show function: a plain table of the settings that vary and the
    scalar results, one row per finished cell."""
    sweep.run(dict, [{"x": 1, "label": "a", "same": 0}, {"x": 2, "label": "b", "same": 0}], tmp_path, client=client)
    assert main(["sweep", "show", str(tmp_path)]) == 0
    header, _, *cells = capsys.readouterr().out.strip().splitlines()
    assert header.split()[:2] == ["x", "label"] and "same" in header  # the settings that vary, then the results
    assert sorted(cell.split()[:2] for cell in cells) == [["1", "a"], ["2", "b"]]


def _nested():
    def task(config: dict) -> dict:
        return config

    return task


@pytest.mark.parametrize("task", [lambda config: config, _nested(), 3])
def test_a_task_the_workers_cannot_import_says_why(task, tmp_path):
    with pytest.raises(ValueError, match="cannot be imported by the workers|must be a function"):
        sweep.run(task, [{"x": 1}], tmp_path)
