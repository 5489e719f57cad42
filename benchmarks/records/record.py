"""What the stored records share: a sweep on a local Dask cluster of single-threaded workers, and the JSON file.

A record is a run too large for a chapter's budget at book scale (more networks per arm), made once by a script
``benchmarks/records/<name>.py`` and stored as ``benchmarks/records/<name>.json``: the exact command that
reproduces it, the sizes, the sweep's wall-clock and CPU time, and a small summary (final accuracies per network,
no weights). The chapter shows the record beside its live run and takes its verdict from the record.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from bnsym import sweep

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = ROOT / "_build" / "sweeps" / "records"  # git-ignored: an interrupted record resumes


def run(name: str, task: str, configs: Sequence[Mapping[str, Any]], workers: int = 2) -> tuple[list[dict], dict]:
    """The sweep's rows (config and result merged, in order) and its cost: wall-clock and worker CPU seconds."""
    start = time.perf_counter()
    with sweep.connect(n_workers=workers) as client:
        result = sweep.run(task, configs, CACHE / name, client=client)
    if result.failures:
        raise RuntimeError(f"{name}: {len(result.failures)} cells failed: {result.failures}")
    cost = {"workers": workers, "wall_s": time.perf_counter() - start,
            "worker_cpu_s": sum(r["cpu_seconds"] for r in result.records), "executed": result.executed,
            "cached": result.cached}
    return result.rows(), cost


def write(name: str, question: str, sizes: Mapping[str, Any], cost: Mapping[str, Any], **summary: Any) -> dict:
    """Write ``benchmarks/records/<name>.json`` with the command that made it (run from the repository root)."""
    script = Path(sys.argv[0]).resolve()
    command = " ".join(["OMP_NUM_THREADS=1 PYTHONPATH=.", "python", str(script.relative_to(ROOT)),
                        *map(shlex.quote, sys.argv[1:])])
    record = {"name": name, "question": question, "command": command,
              "made_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "sizes": dict(sizes),
              "cost": dict(cost), **summary}
    (HERE / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def load(name: str) -> dict:
    """A stored record."""
    return json.loads((HERE / f"{name}.json").read_text())
