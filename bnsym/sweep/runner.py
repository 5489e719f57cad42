"""Map a list of configurations onto a ``distributed.Client``, caching each result on disk (``bnsym.core.store``)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from distributed import Client, as_completed
from tqdm import tqdm

from ..core.cluster import connect
from ..core.store import Store, config_key, seed_of
from ..core.validation import check_flag
from .experiments import task_function, version

POLL_SECONDS = 0.05  # how often the sweep looks for finished cells (and for a Ctrl-C)


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
    waits, see ``bnsym.core.store``), and a sweep that fails before saving a record leaves no folder behind.
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
