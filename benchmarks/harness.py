"""What every benchmark script shares: the command line, thread control, interleaved timing, the JSON record.

A benchmark is one file ``benchmarks/<name>.py`` with a ``main(argv) -> dict`` that calls :func:`parse`,
times its cases with :func:`time_interleaved` under :func:`threads`, and hands rows built by :func:`row`
to :func:`write`, which adds the machine and writes ``benchmarks/results/<name>.json``. Adding a file is
all it takes: ``make bench`` (``python benchmarks/harness.py``), the smoke test and the book page find it.

    python benchmarks/harness.py            # every benchmark at its default size
    python benchmarks/harness.py --smoke    # every benchmark at its smallest size (seconds), results in a temp dir
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import scipy
import torch
from threadpoolctl import threadpool_limits

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def scripts() -> list[Path]:
    """The benchmark scripts: every ``benchmarks/*.py`` except this file."""
    return sorted(p for p in HERE.glob("*.py") if p.name != Path(__file__).name)


def load(script: Path):
    """Import a benchmark script as a module (its ``main(argv)`` runs it)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))  # the scripts import this module by name
    spec.loader.exec_module(module)
    return module


def parse(doc: str, sizes: Mapping[str, Mapping[str, object]], argv: Sequence[str] | None,
          default_threads: Sequence[int] = (1, 2), default_repeats: int = 5,
          options: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """The common command line; ``sizes`` maps "default" and "smoke" to the script's size parameters; ``options``
    adds a script's own options to the parser.

    ``--smoke`` picks the smallest size and one repeat; ``--set key=value`` overrides one size parameter.
    The result is ``args.size`` (a dict), ``args.threads``, ``args.repeats``, ``args.device``, ``args.output``.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0], epilog=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="smallest size, one repeat (a check that it runs)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"override a size parameter of {dict(sizes['default'])}")
    parser.add_argument("--threads", type=int, nargs="+", default=list(default_threads),
                        help="CPU thread counts to time (each pins the process to that many cores)")
    parser.add_argument("--repeats", type=int, default=default_repeats, help="timed repeats per case")
    parser.add_argument("--device", default="cpu", help="torch device for simulations (cpu, cuda)")
    parser.add_argument("--output", type=Path, default=None, help="JSON file (default benchmarks/results/)")
    if options is not None:
        options(parser)
    args = parser.parse_args(argv)
    size = dict(sizes["smoke" if args.smoke else "default"])
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in size:
            raise SystemExit(f"--set {item}: unknown size parameter {key!r}; known: {', '.join(size)}")
        size[key] = type(size[key])(value)
    args.size = size
    if args.smoke:
        args.repeats = 1
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available to torch here")
    return args


@contextlib.contextmanager
def threads(count: int) -> Iterator[int]:
    """Run on ``count`` CPU threads: torch, the BLAS/OpenMP pools, and (on Linux) the process pinned to
    ``count`` cores, so that numpy's and scipy's single-threaded code also stays there."""
    previous_torch = torch.get_num_threads()
    pinned = hasattr(os, "sched_getaffinity")
    previous_cpus = os.sched_getaffinity(0) if pinned else None
    count = min(count, len(previous_cpus) if pinned else os.cpu_count() or 1)
    try:
        if pinned:
            os.sched_setaffinity(0, sorted(previous_cpus)[:count])
        torch.set_num_threads(count)
        with threadpool_limits(limits=count):
            yield count
    finally:
        torch.set_num_threads(previous_torch)
        if pinned:
            os.sched_setaffinity(0, previous_cpus)


def synchronizer(device: str) -> Callable[[], None]:
    """A function that waits for the device's queued work (a no-op on the CPU)."""
    return torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)


class Timings(dict):
    """Wall-clock seconds per case (the dict), and ``cpu``: the process CPU seconds of the same runs, which on a
    busy machine show the work done rather than the share of the CPU obtained (all threads summed)."""

    cpu: dict[str, list[float]]


def time_interleaved(cases: Mapping[str, Callable[[], object]], repeats: int,
                     sync: Callable[[], None] = lambda: None, warmup: bool = True) -> Timings:
    """Wall-clock (and CPU) seconds of each case, ``repeats`` times, the cases taking turns (ABAB..., rotated each
    round) so that a change of machine load hits all of them alike. One untimed warm-up call each first."""
    names = list(cases)
    if warmup:
        for name in names:
            cases[name]()
            sync()
    times = Timings({name: [] for name in names})
    times.cpu = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start, start_cpu = time.perf_counter(), time.process_time()
            cases[name]()
            sync()
            times[name].append(time.perf_counter() - start)
            times.cpu[name].append(time.process_time() - start_cpu)
    return times


def summary(times: Sequence[float]) -> dict[str, float]:
    """min, median and max of a list of timings."""
    return {"min": min(times), "median": statistics.median(times), "max": max(times)}


def fitted_exponent(times: Mapping[int, Sequence[float]]) -> float | None:
    """p of a least-squares fit log t = log c + p log n over the median time at each size n (None below two sizes)."""
    if len(times) < 2:
        return None
    n = np.array(sorted(times), dtype=float)
    t = np.array([statistics.median(times[int(size)]) for size in n])
    return float(np.polyfit(np.log(n), np.log(t), 1)[0])


def row(case: str, ours: str, ours_times: Sequence[float], peer: str | None = None,
        peer_times: Sequence[float] | None = None, target: str | None = None, met: bool | None = None,
        ours_cpu: Sequence[float] | None = None, peer_cpu: Sequence[float] | None = None, **extra: object) -> dict:
    """One line of a result: our timing, the peer's (if any), the ratios peer / ours, the target and more.

    ``ratio`` is the ratio of medians, ``ratio_of_minima`` that of the fastest runs (the least disturbed);
    with the CPU times (``Timings.cpu``), ``cpu_ratio`` is the ratio of their medians.
    """
    out: dict[str, object] = {"case": case, "ours": ours, **{f"ours_{k}_s": v for k, v in summary(ours_times).items()}}
    if peer_times is not None:
        peer_summary = summary(peer_times)
        out.update({"peer": peer, **{f"peer_{k}_s": v for k, v in peer_summary.items()}})
        out["ratio"] = peer_summary["median"] / out["ours_median_s"]
        out["ratio_of_minima"] = peer_summary["min"] / out["ours_min_s"]
    if ours_cpu is not None:
        out["ours_cpu_median_s"] = statistics.median(ours_cpu)
    if peer_cpu is not None:
        out["peer_cpu_median_s"] = statistics.median(peer_cpu)
        out["cpu_ratio"] = out["peer_cpu_median_s"] / out["ours_cpu_median_s"]
    out.update(extra)
    if target is not None:
        out["target"] = target
        out["met"] = met
    out["repeats"] = len(ours_times)
    return out


def machine(device: str = "cpu") -> dict:
    """The machine and the software versions a result was measured with."""
    info = {
        "platform": platform.platform(),
        "processor": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "load_average_1_5_15_min": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "torch": torch.__version__,
        "device": str(device),
        "gpu": None,
        "cuda": torch.version.cuda,
    }
    if str(device).startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def _cpu_name() -> str:
    """The CPU model from /proc/cpuinfo where there is one, else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def write(name: str, question: str, args: argparse.Namespace, rows: Sequence[dict], **extra: object) -> dict:
    """Add the machine (load average at the end of the run) and the configuration; write and return the JSON."""
    result = {
        "benchmark": name,
        "question": question,
        "config": {**args.size, "threads": args.threads, "repeats": args.repeats, "device": args.device,
                   "smoke": args.smoke,
                   "timing": "wall clock (and process CPU time), cases interleaved; min / median / max of repeats"},
        "machine": machine(args.device),
        "rows": list(rows),
        **extra,
    }
    output = args.output or RESULTS / f"{name}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2, default=float) + "\n")
    for line in rows:
        timing = f" {line['ours_median_s'] * 1e3:.3g} ms" if "ours_median_s" in line else ""
        ratio = f", ratio {line['ratio']:.1f}x (minima {line['ratio_of_minima']:.1f}x)" if "ratio" in line else ""
        errors = "".join(f", {key} {line[key]:.1e}" if isinstance(line[key], float) else f", {key} {line[key]}"
                         for key in ("ours_error", "peer_error") if key in line)
        mark = "" if line.get("met") is None else ("  [target met]" if line["met"] else "  [target NOT met]")
        threads_note = f" [{line['threads']} thread(s)]" if "threads" in line else ""
        print(f"{name}: {line['case']}{threads_note}: {line['ours']}{timing} vs {line.get('peer')}"
              f"{ratio}{errors}{mark}")
    print(f"wrote {output}")
    return result


def main(argv: Sequence[str] | None = None) -> None:
    """Run every benchmark script in turn, passing the arguments on; with --smoke, write to a temporary folder."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory() as scratch:
        for script in scripts():
            print(f"== {script.name}", flush=True)
            extra = ["--output", str(Path(scratch) / f"{script.stem}.json")] if "--smoke" in argv else []
            start = time.perf_counter()
            load(script).main(argv + extra)
            print(f"== {script.name}: {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
