"""Sweeps: a grid of configurations mapped onto a Dask cluster, each result cached on disk under its hash.

Write a task once, as an importable function of one JSON-ready dict, and run any list of configurations::

    from bnsym import sweep

    configs = [{"depth": d, "batch_size": b} for d in (5, 10, 20) for b in (8, 32)]
    result = sweep.run("trainability", configs, out="_build/sweeps/mine")  # or "package.module:function"
    result.rows()       # one dict per configuration: the config merged with the task's result
    result.failures     # records whose task raised (their "error" says what); the others are unaffected

* **Where it runs.** ``run`` opens :func:`connect` for the sweep: the cluster at ``scheduler=`` or at
  ``$BNSYM_DASK_SCHEDULER`` (e.g. ``tcp://HOST:8786``, a dask-jobqueue or Kubernetes cluster), else a
  LocalCluster with one single-threaded worker process per core. Pass ``client=`` to reuse an open client
  for several sweeps (``with sweep.connect(n_workers=2) as client: ...``).
* **Cache and resume.** Each result is ``<out>/<key>.json`` with key = sha256 of (task, its ``version``
  attribute, config); a rerun computes only what is missing or failed, so an interrupted sweep resumes. A second
  sweep on the same ``out`` waits for the first (a lock file, see ``bnsym.core.store``).
* **Safety.** Reading results never imports code: a record's ``task`` is looked up in ``EXPERIMENTS`` only; a
  ``"module:function"`` path is imported only when the caller passes it to ``run``.
* **Ctrl-C.** Stops the sweep between records with one line (``bnsym: interrupted``), also when the terminal
  sends it to the local cluster's worker processes, which ignore it; the records saved so far remain.
* **Seeds.** A configuration without ``"seed"`` gets one from its key: results are deterministic per
  configuration, whichever worker runs them.
* **Progress.** A bar where stderr is a terminal (``progress=True`` forces it), never in an executed notebook.
* **A new experiment.** A function ``task(config: dict) -> dict`` in an importable module; run it by its
  ``"module:function"`` path, or register it in ``EXPERIMENTS`` (with a ``show`` function for
  ``bnsym sweep show DIR``). ``trainability`` (``bnsym.train.trainability``) is the first;
  ``rank_training`` (``bnsym.train.rank_training``, Daneshmand et al.'s training experiments) the second.

Command line: ``bnsym sweep trainability --depths 5:60:5 --batch-sizes 4,8,16,32,64,128 [--scheduler ADDR]
[--out DIR]`` and ``bnsym sweep show DIR``.
"""

from ..core.lazy import lazy_attributes

__getattr__, __dir__ = lazy_attributes(__name__, {
    "EXPERIMENTS": "experiments", "Experiment": "experiments", "resolve": "experiments",
    "task_name": "experiments", "SCHEDULER_ENV": ".core.cluster",
    "SweepResult": "runner", "connect": ".core.cluster", "execute": "runner", "run": "runner", "Store": ".core.store",
    "config_key": ".core.store", "seed_of": ".core.store",
})
__all__ = ["EXPERIMENTS", "SCHEDULER_ENV", "Experiment", "Store", "SweepResult", "config_key", "connect", "execute",
           "resolve", "run", "seed_of", "task_name"]
