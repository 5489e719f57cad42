"""Map a list of configurations onto a ``distributed.Client``, caching each result on disk (``bnsym.sweep.store``)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import dask
from distributed import Client, LocalCluster, as_completed
from tqdm import tqdm

from ..core.validation import check_flag, check_whole_number
from .experiments import task_function, version
from .store import Store, config_key, seed_of

POLL_SECONDS = 0.05  # how often the sweep looks for finished cells (and for a Ctrl-C)

SCHEDULER_ENV = "BNSYM_DASK_SCHEDULER"
MAX_WORKERS = 4096  # local worker processes
CONNECT_TIMEOUT = 5  # seconds for a scheduler to answer: a handshake on a live one takes milliseconds


@dataclass(frozen=True)
class SweepResult:
    """One record per configuration, in the order given; how many ran now and how many came from the cache."""

    records: tuple[dict, ...]
    executed: int
    cached: int
    set_aside: tuple[str, ...] = ()

    @property
    def failures(self) -> list[dict]:
        """The records whose task failed (``record["error"]`` says how)."""
        return [record for record in self.records if record["error"] is not None]

    def rows(self) -> list[dict]:
        """Configuration and result merged into one dict per successful record."""
        return [{**record["config"], **record["result"]} for record in self.records if record["error"] is None]


def _probe(address: str) -> None:
    """A Dask scheduler sends its handshake as soon as it accepts a connection: for a TCP address, OSError (or
    TimeoutError) unless some bytes arrive within ``CONNECT_TIMEOUT`` (Dask's own connect waits for ever on a port
    that accepts but never answers)."""
    scheme, _, rest = address.rpartition("://")
    if scheme not in ("", "tcp"):
        return
    host, _, port = rest.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"the scheduler address must be tcp://HOST:PORT, got {address!r}")
    with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=CONNECT_TIMEOUT) as probe:
        if not probe.recv(1):
            raise OSError("the connection was closed without a handshake")


@contextmanager
def connect(scheduler: str | None = None, n_workers: int | None = None) -> Iterator[Client]:
    """A client of the cluster at ``scheduler`` (or ``$BNSYM_DASK_SCHEDULER``), else of a new LocalCluster.

    The LocalCluster has ``n_workers`` (default: one per core) single-threaded worker processes, which ignore
    SIGINT (a Ctrl-C reaches this process alone; a worker restarted later by ``bnsym.sweep.worker_setup``) and log
    errors only (a task's failure is in its record; their warnings were noise, e.g. one per cell cancelled by a Ctrl-C);
    it is closed on exit. An existing cluster is left running.
    """
    if scheduler is not None and not isinstance(scheduler, str):
        raise ValueError(f"scheduler must be a Dask scheduler's address (tcp://HOST:8786) or None, got "
                         f"{scheduler!r:.80}")
    address = scheduler or os.environ.get(SCHEDULER_ENV)
    if address:
        try:
            _probe(address)
            client = Client(address, timeout=f"{CONNECT_TIMEOUT}s")
        except (OSError, TimeoutError, ValueError) as error:
            raise ValueError(f"no Dask scheduler answers at {address} within {CONNECT_TIMEOUT} s "
                             f"({type(error).__name__}: {str(error)[:120]}); start one there, or leave out "
                             f"--scheduler and ${SCHEDULER_ENV} for a local cluster") from None
        with client:
            yield client
        return
    if n_workers is not None:
        n_workers = check_whole_number(n_workers, "n_workers", 1, MAX_WORKERS, "one process each")
    n_workers = n_workers or os.cpu_count() or 1
    with untrimmed_workers(), _workers_ignore_sigint():
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                               silence_logs=logging.ERROR, preload=[f"{__package__}.worker_setup"])
    with cluster, Client(cluster) as client:
        yield client


@contextmanager
def _workers_ignore_sigint() -> Iterator[None]:
    """Worker processes started inside inherit SIGINT ignored (Python keeps an inherited SIG_IGN), so that a Ctrl-C
    in a terminal, sent to the whole process group, reaches only this process: each worker used to print a
    traceback. Meanwhile this thread blocks SIGINT, so that a Ctrl-C during the start is held, not lost: it is
    delivered once the previous handler is back. Outside the main thread signals cannot be set, and Windows has
    no signal masks: no-op there."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@contextmanager
def untrimmed_workers() -> Iterator[None]:
    """Dask worker processes spawned inside keep glibc's adaptive malloc (and Dask's thread limits). Dask's nanny
    gives its workers ``MALLOC_TRIM_THRESHOLD_`` = 64 KiB, which also freezes glibc's mmap threshold: every array
    above 128 KiB is then mapped and faulted in afresh (small torch training tasks took 2.7x the CPU time, a
    BN-NNGP prior 1.6 to 2x the time of this process)."""
    environ = {name: value for name, value in dask.config.get("distributed.nanny.pre-spawn-environ", {}).items()
               if name != "MALLOC_TRIM_THRESHOLD_"}
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
        yield


def execute(task: Callable[[dict], dict], config: Mapping[str, Any]) -> dict:
    """Run one task (the function itself, sent to the worker by reference) on a worker: ``{"result", "error",
    "seconds", "cpu_seconds"}`` (wall-clock and the worker process's CPU time); an exception, or a result the task's
    ``check_result`` rejects, becomes the error's text."""
    start, cpu = time.perf_counter(), time.process_time()
    try:
        result, error = task(dict(config)), None
        if not isinstance(result, dict):
            raise ValueError(f"the task returned {type(result).__name__}, not a dict")
        json.dumps(result, allow_nan=False)  # NaN or inf would be written as bare tokens that are not JSON
        why = getattr(task, "check_result", lambda _: None)(result)
        if why:
            raise ValueError(f"the task's result is unusable: {why}")
    except Exception as exc:  # noqa: BLE001 - a failed configuration is recorded, the sweep goes on
        result, error = None, "".join(traceback.format_exception_only(exc)).strip()
    return {"result": result, "error": error, "seconds": time.perf_counter() - start,
            "cpu_seconds": time.process_time() - cpu}


def _show_progress(progress: bool | None) -> bool:
    """An explicit choice, else a bar only where stderr is a terminal (never in an executed notebook)."""
    return sys.stderr.isatty() if progress is None else check_flag(progress, "progress")


def keyed(task: str | Callable[..., Any], configs: Sequence[Mapping[str, Any]]) -> list[tuple[str, dict]]:
    """(key, configuration) pairs; a configuration without ``"seed"`` gets the seed of its key.

    Each configuration goes through the task's ``validate`` attribute, if it has one, before anything runs.
    """
    if isinstance(configs, (Mapping, str)) or not isinstance(configs, Iterable) \
            or not all(isinstance(config, Mapping) for config in configs):
        raise ValueError("configs must be a list of dicts, one per task")
    name, function = task_function(task)
    stamp, validate = version(function), getattr(function, "validate", None)
    pairs = []
    for config in configs:
        if validate is not None:
            validate(config)
        key = config_key(name, config, stamp)
        pairs.append((key, dict(config) if "seed" in config else {**config, "seed": seed_of(key)}))
    return pairs


def run(task: str | Callable[..., Any], configs: Sequence[Mapping[str, Any]], out: str | os.PathLike,
        client: Client | None = None, scheduler: str | None = None, progress: bool | None = None) -> SweepResult:
    """Run ``task`` on every configuration not already stored under ``out``; store and return all records.

    ``client``: an open :class:`distributed.Client`; without one, :func:`connect` (``scheduler`` or a LocalCluster)
    is opened for this sweep only, and only if something is left to compute. A failed task (an exception, or a
    worker lost more often than Dask allows) is recorded with its error and the sweep goes on. ``task``: a registered
    experiment, a ``"module:function"`` path, or a module-level function (stored under its path). Every argument
    and ``out`` are checked before a cluster starts; ``out`` is locked while the sweep runs (a second sweep on it
    waits, see ``bnsym.sweep.store``), and a sweep that fails before saving a record leaves no folder behind.
    """
    name, function = task_function(task)
    store = Store(out)
    pairs = keyed(task, configs)
    show_bar = _show_progress(progress)
    stamp, check = version(function), getattr(function, "check_result", None)
    with store.writing(), _interrupt_between_records() as interrupted:  # waiting for the lock, Ctrl-C stops it
        records = {key: store.done(key, stamp, check) for key, _ in pairs}
        pending = {key: config for key, config in pairs if records[key] is None}
        if pending:
            with nullcontext(client) if client is not None else connect(scheduler) as live:
                if interrupted():  # a Ctrl-C while the cluster started
                    raise KeyboardInterrupt
                _compute(name, function, pending, live, store, records, show_bar, interrupted)
    ordered = tuple(records[key] for key, _ in pairs)
    return SweepResult(ordered, executed=len(pending), cached=len(pairs) - len(pending),
                       set_aside=tuple(store.set_aside))


def _compute(name: str, task: Callable[..., Any], pending: Mapping[str, dict], client: Client, store: Store,
             records: dict, show_bar: bool, interrupted: Callable[[], bool]) -> None:
    """Submit every pending configuration to ``client``; store each record as it arrives; ``show_bar``: a progress
    bar; ``interrupted()``: whether a Ctrl-C came, checked between records."""
    futures = {client.submit(execute, task, config, key=f"bnsym-sweep-{key}", pure=False): key
               for key, config in pending.items()}
    bar = tqdm(total=len(futures), desc=f"sweep {name}", disable=not show_bar)
    completed = as_completed(futures)
    while not completed.is_empty():
        if interrupted():
            raise KeyboardInterrupt
        if not completed.has_ready():
            time.sleep(POLL_SECONDS)
            continue
        for future in completed.next_batch(block=False):
            key = futures[future]
            try:
                outcome = future.result()
            except Exception as exc:  # noqa: BLE001 - e.g. KilledWorker: recorded, the sweep goes on
                outcome = {"result": None, "error": f"{type(exc).__name__}: {exc}", "seconds": None,
                           "cpu_seconds": None}
            records[key] = {"key": key, "task": name, "version": version(task), "config": pending[key], **outcome}
            store.save(records[key])
            future.release()
            bar.update()
    bar.close()


@contextmanager
def _interrupt_between_records() -> Iterator[Callable[[], bool]]:
    """Ctrl-C (SIGINT) noted, and raised as KeyboardInterrupt by the caller between records: raised inside Dask's
    own waiting it could leave the client's event loop half-way (a fresh-clone run hung for over 240 s; another
    printed a NameError from ``distributed.utils``). Outside the main thread signals cannot be caught: no-op there."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    caught = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: caught.set())
    try:
        yield caught.is_set
    finally:
        signal.signal(signal.SIGINT, previous)
