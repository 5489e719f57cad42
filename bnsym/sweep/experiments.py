"""Tasks a sweep can run: a registered experiment, or a function the caller passes (or names) in Python.

A task is a function ``task(config: dict) -> dict`` of JSON-ready values, importable on the workers. It may carry
a ``version`` attribute (a string, part of each result's hash: bump it when the task's results change), a
``validate(config)`` attribute (raises ValueError on a bad configuration, before the sweep submits anything) and a
``check_result(result)`` attribute (why a stored result is unusable, or None: such a record is set aside and
computed again); its experiment may name a ``show`` function ``show(records, png_path) -> Table`` for
``bnsym sweep show``.

**Nothing read from a file chooses code.** A record's ``task`` field is looked up in :data:`EXPERIMENTS` only
(:func:`resolve`); a ``"package.module:function"`` path is imported only when a caller passes it to
:func:`bnsym.sweep.run` (``task_function``), never when records are read.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Experiment:
    """A registered experiment: the task and (optionally) the function that tabulates and plots its results."""

    task: str
    show: str | None = None


EXPERIMENTS = {
    "trainability": Experiment("bnsym.train.trainability:run_cell", "bnsym.train.maps:show"),
    "rank_training": Experiment("bnsym.train.rank_training:run_cell"),
    "bjorck_training": Experiment("bnsym.train.bjorck:run_cell"),
    "philipp_training": Experiment("bnsym.train.philipp:run_cell"),
}


def registered(name: object) -> Experiment | None:
    """The experiment registered under ``name`` (its key or its task's path), or None."""
    for key, experiment in EXPERIMENTS.items():
        if name in (key, experiment.task):
            return experiment
    return None


def resolve(name: str) -> Callable[..., Any]:
    """The task of the registered experiment ``name`` (its key or its task's path). Only bnsym's own registry is
    imported from: a name read from a results file never chooses a module to import."""
    experiment = registered(name)
    if experiment is None:
        raise ValueError(f"task {str(name)[:80]!r} is not a registered experiment ({', '.join(EXPERIMENTS)}); "
                         "only these are looked up by name (a results file never chooses code to import)")
    return _import(experiment.task)


def _import(path: str) -> Callable[..., Any]:
    """The function a ``"package.module:function"`` path names (imported)."""
    module, _, function = path.partition(":")
    if not (module and function):
        raise ValueError(f"task must be a registered experiment ({', '.join(EXPERIMENTS)}), a function, or "
                         f"'package.module:function', got {path!r:.80}")
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"task {path!r:.80} cannot be imported: {error}") from None


def task_function(task: str | Callable[..., Any]) -> tuple[str, Callable[..., Any]]:
    """(the name a sweep stores, the function) of a task a caller passes: a registered name, a
    ``"module:function"`` path (imported: the caller chose it), or a module-level function, stored under its
    ``"module:qualname"``, which must import back to that very function (the workers unpickle it by that path)."""
    if isinstance(task, str):
        return task, resolve(task) if registered(task) else _import(task)
    if not callable(task):
        raise ValueError(f"task must be a function, a registered experiment ({', '.join(EXPERIMENTS)}) or "
                         f"'package.module:function', got {task!r:.80}")
    path = f"{getattr(task, '__module__', None)}:{getattr(task, '__qualname__', '')}"
    try:
        found = _import(path)
    except ValueError:
        found = None
    if found is not task:
        raise ValueError(f"task {task!r:.80} cannot be imported by the workers as {path!r}: a sweep task must be a "
                         "module-level function of an importable module (not a lambda, a nested function, or one "
                         "defined in a notebook or a script's __main__)")
    return path, task


def task_name(task: str | Callable[..., Any]) -> str:
    """The name a sweep stores for ``task`` (see ``task_function``)."""
    return task_function(task)[0]


def shower(name: str) -> Callable[..., Any] | None:
    """The ``show`` function of the experiment whose task is ``name`` (a registered name or its task path)."""
    experiment = registered(name)
    return _import(experiment.show) if experiment is not None and experiment.show else None


def version(task: Callable[..., Any]) -> str:
    """The task's ``version`` attribute ("" if it has none)."""
    return str(getattr(task, "version", ""))


def registered_version(name: object) -> str | None:
    """The version of the registered experiment ``name``, or None where ``name`` is not one (then a record's own
    ``version`` field is all there is: nothing named in a file is imported)."""
    return version(resolve(name)) if registered(name) is not None else None
