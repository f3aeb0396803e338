"""checkpoint: a durable, append-only log of msgpack records on any fsspec filesystem.

Knows nothing of Kafka or Spark. See docs/checkpoint.md for the layout, guarantees and errors.
"""

from checkpoint.errors import (
    AppendGap,
    CheckpointError,
    ConditionalCreateUnsupported,
    InvalidPurge,
    InvalidRecord,
    KeyExists,
    LogCorrupt,
    LogNotFound,
    RecordBeyondEnd,
    RecordCorrupt,
    RecordExists,
    RecordMissing,
    RecordPurged,
    StorageUnavailable,
    UnsupportedFormatVersion,
)
from checkpoint.log import Index, Log, open_log
from checkpoint.record import Record

__all__ = [
    "AppendGap",
    "CheckpointError",
    "ConditionalCreateUnsupported",
    "Index",
    "InvalidPurge",
    "InvalidRecord",
    "KeyExists",
    "Log",
    "LogCorrupt",
    "LogNotFound",
    "Record",
    "RecordBeyondEnd",
    "RecordCorrupt",
    "RecordExists",
    "RecordMissing",
    "RecordPurged",
    "StorageUnavailable",
    "UnsupportedFormatVersion",
    "open_log",
]
