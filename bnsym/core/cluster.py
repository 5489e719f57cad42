"""The Dask cluster connection: a client of the scheduler at ``$BNSYM_DASK_SCHEDULER``, else of a LocalCluster."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from contextlib import contextmanager
from typing import Iterator

import dask
from distributed import Client, LocalCluster

from .validation import check_whole_number

SCHEDULER_ENV = "BNSYM_DASK_SCHEDULER"
MAX_WORKERS = 4096  # local worker processes
CONNECT_TIMEOUT = 5  # seconds for a scheduler to answer: a handshake on a live one takes milliseconds


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
    SIGINT (a Ctrl-C reaches this process alone; a worker restarted later by ``bnsym.core.worker_setup``) and log
    critical errors only (a task's failure is in its record; their warnings and errors were noise: one per cell
    cancelled by a Ctrl-C, and a heartbeat's traceback when the scheduler closes under a worker still running);
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
                               silence_logs=logging.CRITICAL, preload=[f"{__package__}.worker_setup"])
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
