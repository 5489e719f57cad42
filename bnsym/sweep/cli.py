"""``bnsym sweep trainability ...`` and ``bnsym sweep show DIR``: the sweep runner on the command line.

Only the parser is built at import; Dask and torch are imported when a sweep command runs, so that
``bnsym predict`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path

SHOW_PNG = "heatmap.png"
MAX_VALUES = 10**5  # values of one list (a grid's axis)


def int_list(text: str, name: str) -> list[int]:
    """``"4,8,16"`` or ``"start:stop:step"`` (stop included) as a list of positive ints; ValueError naming ``name``."""
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a string such as 4,8,16 or 5:60:5, got {text!r:.80}")
    try:
        if ":" in text:
            start, stop, step = (int(part) for part in text.split(":"))
            if step < 1 or len(range(start, stop + 1, step)) > MAX_VALUES:
                raise ValueError
            values = list(range(start, stop + 1, step))
        else:
            values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{name} must be a comma list (4,8,16) or start:stop:step with step >= 1 "
                         f"(stop included, at most {MAX_VALUES:,} values), got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{name} must name at least one value, all >= 1, got {text!r}")
    return values


def add_sweep_parser(commands: argparse._SubParsersAction, parser_class: type) -> None:
    """The ``sweep`` command and its two sub-commands."""
    sweep = commands.add_parser("sweep", help="run a grid of training runs on Dask, or show its results")
    kinds = sweep.add_subparsers(dest="sweep_command", required=True, parser_class=parser_class)
    train = kinds.add_parser("trainability", help="test accuracy over depth x batch size (Yang et al. Fig 3)")
    train.add_argument("--depths", required=True, help="e.g. 5:60:5 (stop included) or 5,10,20")
    train.add_argument("--batch-sizes", required=True, help="e.g. 4,8,16,32,64,128")
    train.add_argument("--phi", default="relu", help="activation (default relu)")
    train.add_argument("--optimizer", default="sgd", help="sgd or rmsprop (default sgd)")
    train.add_argument("--ghost-batch", type=int, default=None,
                       help="examples per step, BN over sub-batches of the batch size (ghost batch norm)")
    train.add_argument("--width", type=int, default=None, help="width N (default 128)")
    train.add_argument("--epochs", type=int, default=None, help="epochs (default 2)")
    train.add_argument("--seeds", type=int, default=None, help="networks per cell, trained at once (default 2)")
    train.add_argument("--scheduler", default=None,
                       help="address of a running Dask scheduler, e.g. tcp://HOST:8786 (default: "
                       "$BNSYM_DASK_SCHEDULER, else a local cluster with one worker per core)")
    train.add_argument("--out", default="bnsym-sweeps/trainability", help="results directory (resumable cache)")
    show = kinds.add_parser("show", help="print a sweep's table and write its heat map PNG")
    show.add_argument("directory", help="the sweep's results directory (its --out)")
    show.add_argument("--png", default=None, help=f"where to write the heat map (default DIR/{SHOW_PNG})")


def run_sweep_command(args: argparse.Namespace) -> str:
    """Run the parsed ``sweep`` command; the text to print. ValueError on bad input, before any cluster starts."""
    from ..core.store import Store
    from .experiments import registered, registered_version, resolve, shower

    if args.sweep_command == "show":
        store = Store(args.directory)
        records = store.records(registered_version,  # a record's task is looked up, never imported
                                lambda task: getattr(resolve(task), "check_result", None) if registered(task) else None)
        try:
            shown = _show(records, Path(args.png or Path(args.directory) / SHOW_PNG), shower)
        except ValueError as error:  # the files skipped are the reason there is nothing to show: name them
            raise ValueError("; ".join([str(error), *store.set_aside])) from None
        return "\n".join([*store.set_aside, shown])
    import numpy as np

    from ..api import max_trainable_depth
    from ..train.trainability import grid
    from .runner import run

    options = {"phi": args.phi, "optimizer": args.optimizer, "ghost_batch": args.ghost_batch, "width": args.width,
               "epochs": args.epochs, "n_seeds": args.seeds}
    configs = grid(int_list(args.depths, "--depths"), int_list(args.batch_sizes, "--batch-sizes"),
                   **{key: value for key, value in options.items() if value is not None})
    # the heat map's 16 xi line, drawn after the sweep: what it refuses (e.g. B < 4) is refused before any training
    max_trainable_depth(args.phi, np.array(sorted({config["batch_size"] for config in configs})))
    result = run("trainability", configs, args.out, scheduler=args.scheduler)
    summary = f"{len(result.records)} cells: {result.executed} run, {result.cached} from the cache, " \
              f"{len(result.failures)} failed; results in {args.out}"
    failures = [*result.set_aside, *(f"failed: {record['config']}: {record['error']}" for record in result.failures)]
    done = [record for record in result.records if record["error"] is None]
    png = Path(args.out) / SHOW_PNG
    return "\n".join([summary, *failures, *([_show(done, png, shower)] if done else [])])


def _show(records: list[dict], png: Path, shower) -> str:
    tasks = sorted({record["task"] for record in records})
    if not tasks:
        raise ValueError("the directory holds no sweep results")
    if len(tasks) > 1:
        raise ValueError(f"the directory mixes tasks {tasks}: show one task's results per directory")
    show = shower(tasks[0])
    if show is None:
        return str(_plain_table(records))
    try:
        shown = show(records, png)
    except OSError as error:
        raise ValueError(f"the heat map cannot be written to {png}: {error.strerror or error}") from None
    return f"{shown}\nheat map: {png}"


def _plain_table(records: list[dict]) -> object:
    """A task without a show function: one row per finished cell, the settings that vary and the scalar results."""
    from ..report import table

    done = [record for record in records if record["error"] is None]
    if not done:
        raise ValueError("the sweep has no successful results to show")
    varying = [key for key in done[0]["config"] if len({repr(record["config"].get(key)) for record in done}) > 1]
    scalar = (bool, int, float, str)
    rows = [{**{key: record["config"].get(key) for key in varying},
             **{key: value for key, value in record["result"].items() if isinstance(value, scalar)}} for record in done]
    return table(rows, formats={key: ".4g" for key, value in rows[0].items() if isinstance(value, float)})
