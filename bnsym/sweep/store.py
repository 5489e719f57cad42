"""Sweep results on disk: one JSON file per configuration, named by a content hash of (task, version, config).

A record is ``{"key", "task", "config", "result", "error", "seconds", "cpu_seconds"}``: ``result`` is what the task
returned (JSON-ready), ``error`` is None or the failure's text. A rerun skips every configuration that has a record
without an error, so an interrupted sweep resumes where it stopped; failed ones are tried again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping


def config_key(task: str, config: Mapping[str, Any], version: str = "") -> str:
    """sha256 (hex, 24 characters) of the task's name and version and the configuration (keys sorted)."""
    if not (isinstance(task, str) and isinstance(version, str) and isinstance(config, Mapping)):
        raise ValueError(f"task and version must be strings and config a dict, got {task!r:.40}, {version!r:.40} and "
                         f"{config!r:.40}")
    try:
        text = json.dumps({"task": task, "version": version, "config": config}, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"config must be JSON-serialisable (str, int, float, bool, None, lists, dicts): {error}; "
                         f"got {dict(config)!r}") from None
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def seed_of(key: str) -> int:
    """The deterministic seed of a configuration: the first 8 hex digits of its key, as an int (< 2^32)."""
    if not (isinstance(key, str) and re.fullmatch(r"[0-9a-f]{8,}", key)):
        raise ValueError(f"key must be a configuration's key (hex digits, see config_key), got {key!r:.40}")
    return int(key[:8], 16)


class Store:
    """The records of a sweep directory: ``<directory>/<key>.json``."""

    def __init__(self, directory: str | os.PathLike) -> None:
        if not isinstance(directory, (str, os.PathLike)):
            raise ValueError(f"out must be a directory path, got {directory!r:.80}")
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"out must be a directory, but {self.directory} is a file")

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def done(self, key: str) -> dict | None:
        """The record of ``key`` if it exists and holds a result (no error), else None."""
        path = self.path(key)
        if not path.exists():
            return None
        record = json.loads(path.read_text())
        return record if record.get("error") is None else None

    def save(self, record: Mapping[str, Any]) -> None:
        """Write a record atomically (a temporary file renamed), so an interruption leaves no half file."""
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self.path(f".{record['key']}.tmp")
        temporary.write_text(json.dumps(record, sort_keys=True))
        temporary.replace(self.path(record["key"]))

    def records(self) -> list[dict]:
        """Every record of the directory (results and failures), in key order."""
        if not self.directory.is_dir():
            raise ValueError(f"no sweep results at {self.directory}: not a directory")
        return [json.loads(path.read_text()) for path in sorted(self.directory.glob("*.json"))]
