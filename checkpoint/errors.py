"""Typed errors of the checkpoint log. Every error is a :class:`CheckpointError`.

Design: docs/design.md section 6.
"""

from __future__ import annotations

from checkpoint.redact import redact_url, redact_urls_in

# Every path and URL an error shows (and keeps) has its credentials masked (checkpoint/redact.py).


class CheckpointError(Exception):
    """Base class of every error the checkpoint package raises."""


class RecordExists(CheckpointError):
    """Another writer already created this sequence number: the caller lost the race.

    The caller must re-read the log (``log.last()``) and decide again; the log never retries an
    append at a higher number on its own, because the number is the fence between writers.
    """

    def __init__(self, path: str, seq: int) -> None:
        path = redact_url(path)
        super().__init__(
            f"record {seq} already exists at {path}: another writer appended it first; "
            "re-read the log before deciding again"
        )
        self.path = path
        self.seq = seq


class KeyExists(CheckpointError):
    """An index entry with this key already exists (index entries are created once)."""

    def __init__(self, path: str, key: str) -> None:
        path = redact_url(path)
        super().__init__(f"index key {key!r} already exists at {path}: index entries are created "
                         "once; read it with index.get")
        self.path = path
        self.key = key


class RecordCorrupt(CheckpointError):
    """A stored file is torn, truncated, altered or not a checkpoint file at all.

    It is never skipped and never read as something else; ``path`` names the file and ``reason``
    says what check failed.
    """

    def __init__(self, path: str, reason: str) -> None:
        path = redact_url(path)
        super().__init__(f"corrupt checkpoint file {path}: {reason}. It is never skipped: restore "
                         "the file from a backup of the storage")
        self.path = path
        self.reason = reason


class UnsupportedFormatVersion(CheckpointError):
    """A file was written by a newer format version than this code understands: upgrade."""

    def __init__(self, path: str, version: int, supported: int) -> None:
        path = redact_url(path)
        super().__init__(
            f"{path} has checkpoint format version {version}, this code reads versions up to "
            f"{supported}: upgrade twopc/checkpoint before using this log"
        )
        self.path = path
        self.version = version
        self.supported = supported


class ConditionalCreateUnsupported(CheckpointError):
    """The storage cannot create a file only if it does not exist, so two writers could both win.

    Opening such a log needs ``allow_unconditional_create=True``, which accepts that risk.
    """

    RISK = (
        "without a conditional create, two writers appending at once can both 'win' the same "
        "sequence number and the later one silently replaces the earlier record (a lost commit "
        "decision, and duplicate or lost data downstream)"
    )

    def __init__(self, url: str, detail: str) -> None:
        url = redact_url(url)
        super().__init__(
            f"storage at {url} does not support conditional create ({detail}); risk: {self.RISK}. "
            "Use a backend that does (local files, S3 with If-None-Match, GCS), or pass "
            "allow_unconditional_create=True only if a single writer is guaranteed"
        )
        self.url = url
        self.detail = detail


class StorageUnavailable(CheckpointError):
    """The storage failed (network, permissions, a missing path, ...); the message says what the
    storage answered and what to check; the underlying error is also ``__cause__``."""

    def __init__(self, path: str, operation: str, cause: BaseException | None = None) -> None:
        path = redact_url(path)
        what = "see the cause" if cause is None else describe_cause(cause)
        advice = "" if cause is None else f"; {storage_advice(cause)}"
        super().__init__(f"storage error during {operation} of {path}: {what}{advice}")
        self.path = path
        self.operation = operation


def describe_cause(cause: BaseException) -> str:
    """`Type: text` of a storage library's error, its URLs' credentials masked."""
    text = redact_urls_in(str(cause)).strip() or "(no message)"
    return f"{type(cause).__name__}: {text}"


def storage_advice(cause: BaseException) -> str:
    """What to check, from the kind of storage error."""
    name = type(cause).__name__.lower()
    if isinstance(cause, PermissionError) or "credential" in name or "accessdenied" in name \
            or "forbidden" in name:
        return ("permission denied: check the file permissions, or the storage credentials "
                "(storage options, the environment's credentials) and their rights on the path")
    if isinstance(cause, (FileNotFoundError, NotADirectoryError)) or "nosuchbucket" in name:
        return "a part of the path does not exist: check the URL (a bucket, a parent directory)"
    if isinstance(cause, (ConnectionError, TimeoutError)) or "timeout" in name \
            or "connect" in name or "endpoint" in name:
        return ("the storage could not be reached: check its endpoint and the network, then "
                "retry")
    if isinstance(cause, ImportError):
        return "the fsspec backend for this URL is not installed (s3fs for s3://, gcsfs for gs://)"
    if isinstance(cause, (ValueError, TypeError)):
        return "check the URL and the storage options"
    if isinstance(cause, OSError):
        return "the storage refused the operation: check the path, free space and permissions"
    return "fix the storage or its credentials, then retry"


class LogNotFound(CheckpointError):
    """A read-only open found no log at the URL (a local directory that does not exist)."""

    def __init__(self, url: str) -> None:
        url = redact_url(url)
        super().__init__(f"no checkpoint log at {url}: the directory does not exist; check the "
                         "URL (a typo? a relative path resolved from another directory?)")
        self.url = url


class LogCorrupt(CheckpointError):
    """The log as a whole is inconsistent (for example a record missing below its end)."""

    def __init__(self, path: str, reason: str) -> None:
        path = redact_url(path)
        super().__init__(f"checkpoint log {path} is corrupt: {reason}. Do not append to it: "
                         "investigate the storage and restore the log from a backup")
        self.path = path
        self.reason = reason


class RecordMissing(LogCorrupt):
    """A record between the low-water mark and the end of the log is missing.

    This is corruption, never the end of the log: taking it for the end would let the next
    append fork the log.
    """

    def __init__(self, path: str, seq: int, low_water_mark: int, end: int) -> None:
        path = redact_url(path)
        super().__init__(
            path,
            f"record {seq} is missing but the log holds records from {low_water_mark} to {end}",
        )
        self.seq = seq
        self.low_water_mark = low_water_mark
        self.end = end


class RecordPurged(CheckpointError):
    """The record asked for is below the low-water mark: it was purged on purpose."""

    def __init__(self, path: str, seq: int, low_water_mark: int) -> None:
        path = redact_url(path)
        super().__init__(
            f"record {seq} of {path} is below the low-water mark {low_water_mark} (purged): "
            f"read from record {low_water_mark} on"
        )
        self.path = path
        self.seq = seq
        self.low_water_mark = low_water_mark


class InvalidPurge(CheckpointError):
    """A purge would remove the latest record, which must always stay (it fixes the end)."""

    def __init__(self, path: str, below: int, last: int | None) -> None:
        path = redact_url(path)
        super().__init__(
            f"cannot purge {path} below {below}: the latest record is {last}, and the latest "
            "record is never purged (without it the log would look empty and fork)"
        )
        self.path = path
        self.below = below
        self.last = last


class RecordBeyondEnd(CheckpointError):
    """The record asked for is after the latest record: it has not been written (yet)."""

    def __init__(self, path: str, seq: int, last: int | None) -> None:
        path = redact_url(path)
        super().__init__(f"record {seq} of {path} does not exist: the latest record is {last}; "
                         "nothing was written there yet, read up to the latest record")
        self.path = path
        self.seq = seq
        self.last = last


class AppendGap(CheckpointError):
    """An append named a number that is not right after an existing record.

    Appending there would leave a hole that readers must report as corruption; read
    ``log.last()`` and append at ``last.seq + 1`` (0 for an empty log).
    """

    def __init__(self, path: str, seq: int) -> None:
        path = redact_url(path)
        super().__init__(
            f"cannot append record {seq} to {path}: record {seq - 1} does not exist; "
            "append at last().seq + 1 (0 for an empty log)"
        )
        self.path = path
        self.seq = seq


class InvalidRecord(CheckpointError, ValueError):
    """A body, key or number given to the log is not acceptable (not msgpack-able, ...)."""
