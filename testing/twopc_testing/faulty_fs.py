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
     "after": 2}                            the first N matching operations of each process pass

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


def write_control(path: str, *, fail: tuple[str, ...] = (), delay_s: float = 0.0,
                  match: str = "", after: int = 0) -> None:
    """Atomically replace the control file at `path` (readers see the old or the new one)."""
    unknown = sorted(set(fail) - set(OPERATIONS))
    if unknown:
        raise ValueError(f"unknown operations {unknown}; use some of {OPERATIONS}")
    temp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(temp, "w") as f:
        json.dump({"fail": list(fail), "delay_s": delay_s, "match": match, "after": after}, f)
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
    return Faults(frozenset(raw.get("fail", ())), float(raw.get("delay_s", 0.0)),
                  str(raw.get("match", "")), int(raw.get("after", 0)))


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

    def _inject(self, operation: str, path: str) -> None:
        faults = read_control(self.control or os.environ.get(CONTROL_ENV))
        if faults.match and faults.match not in path:
            return
        if not faults.fail and not faults.delay_s:
            return
        with self._lock:
            self._seen += 1
            seen = self._seen
        if seen <= faults.after:
            return
        if faults.delay_s:
            time.sleep(faults.delay_s)
        if operation in faults.fail:
            raise StorageFault(f"faulty fs: injected {operation} failure on {path}")

    # ---- what the checkpoint log uses -----------------------------------------------------------

    def cat_file(self, path: str, start: int | None = None, end: int | None = None,
                 **kwargs: Any) -> bytes:
        path = self._strip_protocol(path)
        self._inject("read", path)
        return bytes(self.local.cat_file(path, start=start, end=end))

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        self._inject("write", path)
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
        self._inject("delete", path)
        self.local.rm_file(path)

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
        self._inject("read" if "r" in mode else "write", path)
        return self.local._open(path, mode=mode, **kwargs)
