"""Storage backends: GET by key, conditional create, atomic overwrite, delete.

Each backend keeps to the few operations the log needs, so that what "durable" and "conditional"
mean is spelled out per backend here and nowhere else.

Design: docs/design.md section 6.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from checkpoint.crash import crash_point
from checkpoint.errors import CheckpointError, ConditionalCreateUnsupported, StorageUnavailable

T = TypeVar("T")

# Backends whose create can refuse an existing key atomically on the server (or in the kernel).
_CONDITIONAL_PROTOCOLS = {"s3", "s3a", "gs", "gcs", "memory"}
_S3_PROTOCOLS = {"s3", "s3a"}
# MemoryFileSystem checks and writes in two steps: serialize them within this process.
_MEMORY_LOCK = threading.Lock()


class Store(Protocol):
    """The operations the log needs from storage. Paths are relative to the log's root."""

    url: str

    def get(self, path: str) -> bytes | None:
        """The file's bytes by key, or None if it does not exist (never from a listing)."""

    def create(self, path: str, data: bytes) -> bool:
        """Create the file only if absent, durably; False if it already existed."""

    def put(self, path: str, data: bytes, *, durable: bool) -> None:
        """Replace the file atomically (readers see old or new); fsynced if ``durable``."""

    def delete(self, path: str) -> None:
        """Remove the file if it exists."""

    def sync(self) -> None:
        """Make earlier deletes durable."""


def _guard(path: str, operation: str, call: Callable[[], T]) -> T:
    try:
        return call()
    except CheckpointError:
        raise
    except Exception as e:
        raise StorageUnavailable(path, operation, e) from e


class LocalStore:
    """Local files: temp file, fsync, ``os.link`` (refuses an existing name), fsync directory."""

    def __init__(self, url: str, root: str) -> None:
        self.url = url
        self.root = root
        _guard(root, "mkdir", lambda: self._make_dirs(root))

    def _make_dirs(self, root: str) -> None:
        missing: list[str] = []
        d = os.path.abspath(root)
        while not os.path.isdir(d):
            missing.append(d)
            d = os.path.dirname(d)
        os.makedirs(root, exist_ok=True)
        # A new directory entry is durable only once its parent is fsynced.
        for created in reversed(missing):
            _fsync_dir(os.path.dirname(created))

    def _abs(self, path: str) -> str:
        return os.path.join(self.root, path)

    def get(self, path: str) -> bytes | None:
        def read() -> bytes | None:
            try:
                with open(self._abs(path), "rb") as f:
                    return f.read()
            except FileNotFoundError:
                return None

        return _guard(self._abs(path), "read", read)

    def _write_temp(self, target: str, data: bytes, kind: str, durable: bool = True) -> str:
        directory = os.path.dirname(target)
        os.makedirs(directory, exist_ok=True)
        temp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            half = len(data) // 2
            os.write(fd, data[:half])
            crash_point(f"{kind}.mid_write")
            view = memoryview(data)[half:]
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        return temp

    def create(self, path: str, data: bytes) -> bool:
        target = self._abs(path)

        def create() -> bool:
            kind = _kind(path)
            temp = self._write_temp(target, data, kind)
            crash_point(f"{kind}.after_temp_fsync")
            try:
                # link() fails on an existing name, unlike rename(), which would overwrite.
                os.link(temp, target)
            except FileExistsError:
                return False
            finally:
                os.unlink(temp)
            crash_point(f"{kind}.after_link")
            _fsync_dir(os.path.dirname(target))
            return True

        return _guard(target, "create", create)

    def put(self, path: str, data: bytes, *, durable: bool) -> None:
        target = self._abs(path)

        def put() -> None:
            kind = _kind(path)
            temp = self._write_temp(target, data, kind, durable)
            crash_point(f"{kind}.after_temp_fsync")
            os.replace(temp, target)
            if durable:
                _fsync_dir(os.path.dirname(target))

        _guard(target, "overwrite", put)

    def delete(self, path: str) -> None:
        def delete() -> None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._abs(path))

        _guard(self._abs(path), "delete", delete)

    def sync(self) -> None:
        _guard(self.root, "fsync", lambda: _fsync_dir(os.path.join(self.root, "records")))


def _kind(path: str) -> str:
    """The crash-point label of a file: record, index, probe, pointer or mark."""
    head = path.split("/", 1)[0]
    return {"records": "record", "index": "index", "_probe": "probe"}.get(head, head.strip("_"))


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FsspecStore:
    """An fsspec filesystem; ``conditional`` says whether its create refuses an existing key.

    S3 (s3fs) sends ``If-None-Match: *`` and GCS (gcsfs) ``ifGenerationMatch=0`` for
    ``pipe_file(..., mode="create")``; both answer a refusal with FileExistsError. Without
    ``conditional`` the create is a check followed by a write: two writers can both win.
    """

    def __init__(self, url: str, fs: Any, root: str, *, conditional: bool) -> None:
        self.url = url
        self.fs = fs
        self.root = root.rstrip("/")
        self.conditional = conditional
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.is_s3 = protocol in _S3_PROTOCOLS
        self.is_memory = protocol == "memory"

    def _abs(self, path: str) -> str:
        return f"{self.root}/{path}"

    def _cat(self, target: str) -> bytes | None:
        try:
            # s3fs would first HEAD the object to split a large read; one GET is enough here.
            kwargs = {"max_concurrency": 1} if self.is_s3 else {}
            data = self.fs.cat_file(target, **kwargs)
        except FileNotFoundError:
            return None
        return bytes(data)

    def get(self, path: str) -> bytes | None:
        target = self._abs(path)
        return _guard(target, "read", lambda: self._cat(target))

    def create(self, path: str, data: bytes) -> bool:
        target = self._abs(path)

        def create() -> bool:
            if self.conditional:
                try:
                    if self.is_memory:
                        with _MEMORY_LOCK:
                            self.fs.pipe_file(target, data, mode="create")
                    else:
                        self.fs.pipe_file(target, data, mode="create")
                except FileExistsError:
                    return False
                return True
            # Unconditional (the caller accepted the risk): a window between check and write.
            if self._cat(target) is not None:
                return False
            self.fs.pipe_file(target, data)
            return True

        return _guard(target, "create", create)

    def put(self, path: str, data: bytes, *, durable: bool) -> None:
        target = self._abs(path)
        # One PUT of a whole object is atomic on object stores.
        _guard(target, "overwrite", lambda: self.fs.pipe_file(target, data))

    def delete(self, path: str) -> None:
        target = self._abs(path)

        def delete() -> None:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(target)

        _guard(target, "delete", delete)

    def sync(self) -> None:
        return None


def open_store(
    url: str, storage_options: dict[str, Any] | None, allow_unconditional: bool
) -> Store:
    """The store for ``url``; refuses a backend without conditional create unless allowed."""
    options = dict(storage_options or {})
    protocol = url.split("://", 1)[0] if "://" in url else "file"
    if protocol in _S3_PROTOCOLS:
        # s3fs answers exists()/info() from a listing cache that other writers never refresh.
        options["use_listings_cache"] = False
    fs, root = _guard(url, "open", lambda: fsspec.core.url_to_fs(url, **options))
    if isinstance(fs, LocalFileSystem):
        return LocalStore(url, root)
    name = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    # A filesystem may declare an atomic create-if-absent itself; the probe still checks it.
    conditional = name in _CONDITIONAL_PROTOCOLS or getattr(fs, "atomic_create", False) is True
    if not conditional and not allow_unconditional:
        raise ConditionalCreateUnsupported(
            url, f"fsspec protocol {name!r} has no atomic create-if-absent known to twopc"
        )
    return FsspecStore(url, fs, root, conditional=conditional)


def probe_conditional_create(store: Store) -> str | None:
    """Create a probe key twice; None if the second create was refused, else what happened."""
    key = f"_probe/{uuid.uuid4().hex}"
    try:
        if not store.create(key, b"probe-1"):
            return f"a fresh probe key {key} was reported as existing"
        if store.create(key, b"probe-2"):
            return f"a second create of probe key {key} succeeded (it should have been refused)"
        return None
    finally:
        store.delete(key)
