"""Loaded by every worker process of a local cluster as it starts (Dask's ``preload``, see :func:`.cluster.connect`):
SIGINT ignored, so that a Ctrl-C in a terminal, sent to the whole process group, reaches the sweep's own process
alone. The workers started with the cluster inherit this already; a worker the nanny restarts later does not."""

import signal
import threading

if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
