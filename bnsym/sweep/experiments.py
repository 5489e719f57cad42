"""Tasks a sweep can run: a registered experiment, any importable ``"package.module:function"``, or that function.

A task is a function ``task(config: dict) -> dict`` of JSON-ready values, importable on the workers. It may carry
a ``version`` attribute (a string, part of each result's hash: bump it when the task's results change) and a
``validate(config)`` attribute (raises ValueError on a bad configuration, before the sweep submits anything); its
experiment may name a ``show`` function ``show(records, png_path) -> Table`` for ``bnsym sweep show``.
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


def resolve(name: str) -> Callable[..., Any]:
    """The function a registered experiment's task names, or that ``"module:function"`` names."""
    if not isinstance(name, str):
        raise ValueError(f"task must be a registered experiment ({', '.join(EXPERIMENTS)}) or "
                         f"'package.module:function', got {name!r:.80}")
    path = EXPERIMENTS[name].task if name in EXPERIMENTS else name
    module, _, function = path.partition(":")
    if not function:
        raise ValueError(f"task must be a registered experiment ({', '.join(EXPERIMENTS)}) or "
                         f"'package.module:function', got {name!r}")
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"task {name!r} cannot be imported: {error}") from None


def task_name(task: str | Callable[..., Any]) -> str:
    """The name a sweep stores and its workers import: a registered name or path as given, or a function's
    ``"module:qualname"``, which must import back to that very function (a worker imports it by that path)."""
    if isinstance(task, str):
        return task
    if not callable(task):
        raise ValueError(f"task must be a function, a registered experiment ({', '.join(EXPERIMENTS)}) or "
                         f"'package.module:function', got {task!r:.80}")
    path = f"{getattr(task, '__module__', None)}:{getattr(task, '__qualname__', '')}"
    try:
        found = resolve(path)
    except ValueError:
        found = None
    if found is not task:
        raise ValueError(f"task {task!r:.80} cannot be imported by the workers as {path!r}: a sweep task must be a "
                         "module-level function of an importable module (not a lambda, a nested function, or one "
                         "defined in a notebook or a script's __main__)")
    return path


def shower(name: str) -> Callable[..., Any] | None:
    """The ``show`` function of the experiment whose task is ``name`` (a registered name or its task path)."""
    for key, experiment in EXPERIMENTS.items():
        if name in (key, experiment.task) and experiment.show:
            return resolve(experiment.show)
    return None


def version(task: Callable[..., Any]) -> str:
    """The task's ``version`` attribute ("" if it has none)."""
    return str(getattr(task, "version", ""))
