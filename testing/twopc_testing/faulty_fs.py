"""A local filesystem whose reads and writes fail or are slow on command: checkpoint storage faults.

For tests only. Registered with fsspec as protocol ``faulty`` (entry point ``fsspec.specs`` in
pyproject.toml), so ``faulty:///abs/dir`` works in every process that has twopc installed: the
torture driver, driver subprocesses, Spark's JVM-spawned Python workers.

    faulty:///tmp/x/log          the local directory /tmp/x/log, through this filesystem

The faults come from a small JSON control file, re-read on every operation so that a parent
process can switch faults on and off while its children run. Its path is the filesystem's
``control`` option or, when that is absent, the environment variable ``TWOPC_FAULTY_FS`` (set it
before starting subprocesses; no file, or no variable, means no fault). Contents, all optional:

    {"fail": ["read", "write", "delete"],   operations that raise StorageFault (an OSError)
     "delay_s": 0.3,                        every matching operation sleeps this long first
     "match": "records/",                   only paths containing this substring are affected
     "after": 2,                            the first N matching operations of each process pass
     "times": 1,                            then at most N of them fail, counted across every
                                            process and instance that reads this control file
                                            (a transient fault; absent: every later one fails)
     "lose_reply": true}                    a failing operation is carried out first, then
                                            fails (the store did it, the caller cannot know)

``write_control(path, ...)`` writes such a file atomically; ``clear_control(path)`` removes it.

A create that refuses an existing name (``pipe_file(..., mode="create")``) is atomic, through a
temporary file, fsync and ``os.link``, like the checkpoint's local store: the filesystem sets
``atomic_create = True`` and the checkpoint log still probes it for real before using it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractFileSystem

CONTROL_ENV = "TWOPC_FAULTY_FS"
OPERATIONS = ("read", "write", "delete")


class StorageFault(OSError):
    """An injected checkpoint-storage failure (the control file asked for it)."""


@dataclass(frozen=True)
class Faults:
    fail: frozenset[str] = frozenset()
    delay_s: float = 0.0
    match: str = ""
    after: int = 0
    times: int | None = None
    lose_reply: bool = False
    nonce: str = ""  # a new one per write_control: the count of `times` starts again


def write_control(path: str, *, fail: tuple[str, ...] = (), delay_s: float = 0.0,
                  match: str = "", after: int = 0, times: int | None = None,
                  lose_reply: bool = False) -> None:
    """Atomically replace the control file at `path` (readers see the old or the new one)."""
    unknown = sorted(set(fail) - set(OPERATIONS))
    if unknown:
        raise ValueError(f"unknown operations {unknown}; use some of {OPERATIONS}")
    if times is not None and times < 0:
        raise ValueError("times must not be negative")
    temp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(temp, "w") as f:
        json.dump({"fail": list(fail), "delay_s": delay_s, "match": match, "after": after,
                   "times": times, "lose_reply": lose_reply, "nonce": uuid.uuid4().hex}, f)
    os.replace(temp, path)


def clear_control(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def read_control(path: str | None) -> Faults:
    if not path:
        return Faults()
    try:
        with open(path) as f:
            raw = json.load(f)
    except FileNotFoundError:
        return Faults()
    except (OSError, ValueError) as exc:
        raise StorageFault(f"faulty fs: control file {path} is unreadable: {exc}") from exc
    times = raw.get("times")
    return Faults(frozenset(raw.get("fail", ())), float(raw.get("delay_s", 0.0)),
                  str(raw.get("match", "")), int(raw.get("after", 0)),
                  None if times is None else int(times), bool(raw.get("lose_reply", False)),
                  str(raw.get("nonce", "")))


def _take_one_failure(control: str, faults: Faults) -> bool:
    """Count one injected failure against `times` in a file beside the control file (one line per
    failure, so every process and every filesystem instance shares the count). False: spent."""
    if faults.times is None:
        return True
    fired = f"{control}.{faults.nonce}.fired"
    with _fired_lock, open(fired, "a+") as f:
        f.seek(0)
        if len(f.read().splitlines()) >= faults.times:
            return False
        f.write(f"{os.getpid()}\n")
    return True


_fired_lock = threading.Lock()


class FaultyFileSystem(AbstractFileSystem):  # type: ignore[misc]
    """Local files behind ``faulty://``, with failures and delays from the control file."""

    protocol = ("faulty",)
    root_marker = "/"
    atomic_create = True  # pipe_file(mode="create") refuses an existing name atomically

    def __init__(self, control: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.control = control
        self.local = LocalFileSystem()
        self._seen = 0
        self._lock = threading.Lock()

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        text = str(path)
        if text.startswith("faulty://"):
            text = text[len("faulty://"):]
        return "/" + text.lstrip("/") if text else "/"

    def _inject(self, operation: str, path: str) -> bool:
        """Delay or fail `operation` as the control file says. Returns True when the operation
        must be carried out and then fail (`lose_reply`): the caller calls `_lost_reply` after."""
        control = self.control or os.environ.get(CONTROL_ENV)
        faults = read_control(control)
        if faults.match and faults.match not in path:
            return False
        if not faults.fail and not faults.delay_s:
            return False
        with self._lock:
            self._seen += 1
            seen = self._seen
        if seen <= faults.after:
            return False
        if faults.delay_s:
            time.sleep(faults.delay_s)
        if operation not in faults.fail:
            return False
        if control is None or not _take_one_failure(control, faults):
            return False
        if faults.lose_reply:
            return True
        raise StorageFault(f"faulty fs: injected {operation} failure on {path}")

    @staticmethod
    def _lost_reply(operation: str, path: str) -> None:
        raise StorageFault(f"faulty fs: injected {operation} failure on {path}, after the "
                           f"{operation} was carried out (its reply was lost)")

    # ---- what the checkpoint log uses -----------------------------------------------------------

    def cat_file(self, path: str, start: int | None = None, end: int | None = None,
                 **kwargs: Any) -> bytes:
        path = self._strip_protocol(path)
        lost = self._inject("read", path)
        data = bytes(self.local.cat_file(path, start=start, end=end))
        if lost:
            self._lost_reply("read", path)
        return data

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        lost = self._inject("write", path)
        self._write(path, value, mode)
        if lost:
            self._lost_reply("write", path)

    def _write(self, path: str, value: bytes, mode: str) -> None:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        temp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
        with open(temp, "wb") as f:
            f.write(value)
            f.flush()
            os.fsync(f.fileno())
        try:
            if mode == "create":
                # link() refuses an existing name; rename() would overwrite it.
                os.link(temp, path)
            else:
                os.replace(temp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rm_file(self, path: str) -> None:
        path = self._strip_protocol(path)
        lost = self._inject("delete", path)
        self.local.rm_file(path)
        if lost:
            self._lost_reply("delete", path)

    # ---- the rest, unfaulted: listing and metadata --------------------------------------------

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        entries = self.local.ls(self._strip_protocol(path), detail=detail)
        return entries

    def info(self, path: str, **kwargs: Any) -> Any:
        return self.local.info(self._strip_protocol(path))

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        self.local.makedirs(self._strip_protocol(path), exist_ok=exist_ok)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        self.local.mkdir(self._strip_protocol(path), create_parents=create_parents)

    def _rm(self, path: str) -> None:
        self.rm_file(path)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if self._inject("read" if "r" in mode else "write", path):
            # A streamed open has no single moment to lose the reply of: it fails instead.
            raise StorageFault(f"faulty fs: injected failure opening {path}")
        return self.local._open(path, mode=mode, **kwargs)
