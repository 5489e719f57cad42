"""Sweep results on disk: one JSON file per configuration, named by a content hash of (task, version, config).

A record is ``{"key", "task", "config", "result", "error", "seconds", "cpu_seconds"}``: ``result`` is what the task
returned (JSON-ready), ``error`` is None or the failure's text. A rerun skips every configuration that has a record
without an error, so an interrupted sweep resumes where it stopped; failed ones are tried again.

A record is trusted only if it is checked against the key it is stored under (``check_record``): a file that is
not JSON, lacks a field, or holds another configuration's record is *corrupt*; a sweep reports it by its path, moves
it aside (``<key>.json.corrupt-<random>``) and computes its configuration again. Records are written to a temporary
file of an unpredictable name, created exclusively (never through a planted symlink), and renamed over the record:
a reader sees the old record or the new one, never half of one. A record may also carry the ``version`` its key was
made with; a task's ``check_result`` attribute (see :mod:`.experiments`) makes a record whose result it rejects
(e.g. a trainability result without a numeric ``test_accuracy``) corrupt too.

**One sweep at a time per directory.** A sweep holds ``<directory>/.lock`` (``fcntl.flock``) while it reads and
writes records (:meth:`Store.writing`); a second sweep on the same directory *waits* for the first to finish
(saying so once on stderr, with the holder's pid) and then finds its results cached. Where ``fcntl`` is missing
(Windows) there is no lock: records are still written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

try:
    import fcntl
except ImportError:  # Windows: no lock between sweeps
    fcntl = None

FIELDS = ("key", "task", "config", "result", "error")
LOCK_NAME = ".lock"


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


def check_record(record: object, key: str, version: str,
                 check_result: Callable[[dict], str | None] | None = None) -> str | None:
    """Why ``record`` (parsed JSON) is not the record of ``key`` for a task of ``version``, or None if it is: a dict
    with the fields, whose key is ``key`` and whose task and configuration hash to it (the configuration as given,
    or without the ``"seed"`` the sweep adds), a dict result where it has no error, which ``check_result`` (if
    given) accepts."""
    if not isinstance(record, dict) or any(field not in record for field in FIELDS):
        return f"not a sweep record (a JSON object with the fields {', '.join(FIELDS)})"
    if record["key"] != key:
        return f"it holds the record of key {str(record['key'])[:40]!r}, not of {key!r}"
    config, task = record["config"], record["task"]
    if not (isinstance(task, str) and isinstance(config, dict)):
        return "its task is not a name or its config not a dict"
    unseeded = {name: value for name, value in config.items() if name != "seed"}
    try:
        keys = {config_key(task, config, version), config_key(task, unseeded, version)}
    except ValueError as error:
        return str(error)
    if key not in keys:
        return "its task and config do not hash to the key it is stored under"
    if record["error"] is None and not isinstance(record["result"], dict):
        return "it has no error but its result is not a dict"
    if record["error"] is not None and not isinstance(record["error"], str):
        return "its error is not a text"
    if record["error"] is None and check_result is not None:
        return check_result(record["result"])
    return None


class Store:
    """The records of a sweep directory: ``<directory>/<key>.json``. ``set_aside`` lists one line per corrupt
    record met (its path, why, and where it was moved)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        if not isinstance(directory, (str, os.PathLike)):
            raise ValueError(f"out must be a directory path, got {directory!r:.80}")
        self.directory = Path(directory)
        try:
            is_file = self.directory.exists() and not self.directory.is_dir()
        except OSError as error:  # e.g. a name longer than the file system allows
            raise ValueError(f"out {str(directory)[:80]!r} is not a usable path ({error.strerror or error})") from None
        if is_file:
            raise ValueError(f"out must be a directory, but {self.directory} exists and is not one")
        self.set_aside: list[str] = []

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    @contextmanager
    def writing(self, notice: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> Iterator[None]:
        """Create the directory (ValueError if it cannot hold files: results that cannot be saved would be lost)
        and hold its lock (see the module docstring; ``notice`` is told once if another sweep holds it). If the
        body raises before any record is saved, the folders it created are removed again: nothing is left behind."""
        made = [folder for folder in (self.directory, *self.directory.parents) if not folder.exists()][::-1]
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            handle = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as error:
            self._remove(made)
            raise ValueError(f"out {self.directory} is not a writable directory ({error.strerror or error}): the "
                             "results could not be saved") from None
        try:
            self._lock(handle, notice)
            yield
        except BaseException:
            if made and not any(self.directory.glob("[!.]*.json")):
                os.close(handle)
                handle = None
                self._remove(made)
            raise
        finally:
            if handle is not None:
                os.close(handle)  # releases the lock

    def _lock(self, handle: int, notice: Callable[[str], None]) -> None:
        """Take the exclusive lock of the open lock file, waiting (after one ``notice``) while another sweep holds
        it; then write this process's pid into it."""
        if fcntl is None:
            return
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(handle, 40, 0).decode(errors="replace").strip() or "another process"
            notice(f"waiting for the sweep writing to {self.directory} ({holder}) to finish; its results are then "
                   "read from the cache")
            fcntl.flock(handle, fcntl.LOCK_EX)
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"pid {os.getpid()}".encode(), 0)

    def _remove(self, made: list[Path]) -> None:
        """Remove the lock file and the folders in ``made`` (outermost first) that are left empty."""
        if made and os.path.lexists(self.directory / LOCK_NAME):
            os.unlink(self.directory / LOCK_NAME)
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                return

    def _read(self, path: Path, version: str,
              check_result: Callable[[dict], str | None] | None = None) -> tuple[dict | None, str | None]:
        """(record, None) or (None, why it is corrupt)."""
        try:
            if path.is_symlink() or not path.is_file():
                return None, "not a regular file"
            record = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as error:
            return None, f"unreadable ({type(error).__name__}: {str(error)[:80]})"
        why = check_record(record, path.stem, version, check_result)
        return (None, why) if why else (record, None)

    def _move_aside(self, path: Path, why: str) -> None:
        """Rename a corrupt record to a fresh ``<name>.corrupt-<random>`` and note it in ``set_aside``."""
        handle, aside = tempfile.mkstemp(prefix=f"{path.name}.corrupt-", dir=self.directory)
        os.close(handle)
        try:
            os.replace(path, aside)
        except OSError as error:
            os.unlink(aside)
            raise ValueError(f"corrupt sweep record {path} ({why}) cannot be moved aside: {error}") from None
        self.set_aside.append(f"corrupt sweep record {path}: {why}; moved to {aside}, computed again")

    def done(self, key: str, version: str = "", check_result: Callable[[dict], str | None] | None = None
             ) -> dict | None:
        """The record of ``key`` if it exists, is intact and holds a result (no error) that ``check_result`` (if
        given) accepts, else None; a corrupt one is moved aside (see the module docstring)."""
        path = self.path(key)
        if not os.path.lexists(path):
            return None
        record, why = self._read(path, version, check_result)
        if why is not None:
            self._move_aside(path, why)
            return None
        return record if record["error"] is None else None

    def save(self, record: Mapping[str, Any]) -> None:
        """Write a record atomically: a temporary file (unpredictable name, created with O_EXCL) renamed over it.
        Its dicts keep their order (the command line's cached answers read back in the order computed)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        text = json.dumps(record, allow_nan=False)
        handle, temporary = tempfile.mkstemp(prefix=f".{record['key']}.", suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(handle, "w") as file:
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path(record["key"]))
        except BaseException:
            if os.path.lexists(temporary):
                os.unlink(temporary)
            raise

    def records(self, version_of: Callable[[str], str | None] = lambda task: None,
                check_of: Callable[[str], Callable[[dict], str | None] | None] = lambda task: None) -> list[dict]:
        """Every intact record of the directory (results and failures), in key order. ``version_of(task)`` gives the
        version each record's key was made with (None: the record's own ``version`` field, else ""), ``check_of
        (task)`` its result check (see ``check_record``). Other files (corrupt records, other JSON, temporary
        files) are skipped and noted in ``set_aside``, not moved: reading changes nothing."""
        if not self.directory.is_dir():
            raise ValueError(f"no sweep results at {self.directory}: not a directory")
        records = []
        for path in sorted(self.directory.glob("[!.]*.json")):
            try:
                stored = json.loads(path.read_text())
                task = stored.get("task")
                version = version_of(task) if isinstance(task, str) else None
                version = stored.get("version", "") if version is None else version
                check = check_of(task) if isinstance(task, str) else None
            except (OSError, UnicodeDecodeError, ValueError, AttributeError):
                version, check = "", None
            record, why = self._read(path, version if isinstance(version, str) else "", check)
            if why is None:
                records.append(record)
            else:
                self.set_aside.append(f"skipped {path}: {why}")
        return records
