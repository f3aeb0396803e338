"""The rows a task writes (a row that cannot be sent is a RowError: twopc/executor/write_errors.py).

A row is a `Row` or a plain mapping with the same field names. The writer reads `Row` fields on its
hot path directly; mappings go through `fields_of`, which is strict about names: a misspelt field
("header") would otherwise drop data without a word. `Columns` is a block of rows given by column
(value and key only, the writer's default topic): the columnar path from Arrow, with no object per
row; it writes exactly the records the equivalent `Row`s would, with the same checksum.

Design: docs/design.md section 2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twopc.executor.write_errors import RowError

Headers = tuple[tuple[str, bytes | None], ...]
# value, key, topic, partition (-1: the partitioner chooses), headers (None: none), timestamp (0: now)
Fields = tuple[Any, Any, str | None, int, list[tuple[str, Any]] | None, int]

ROW_FIELDS = ("value", "key", "topic", "partition", "headers", "timestamp_ms")


@dataclass(frozen=True, slots=True)
class Row:
    value: bytes
    key: bytes | None = None
    topic: str | None = None
    partition: int | None = None
    headers: Headers = ()
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Columns:
    """Rows by column: row i is (values[i], keys[i]), written to the writer's default topic, the
    partitioner choosing the partition, with no headers and the producer's timestamp."""

    values: Sequence[bytes]
    keys: Sequence[bytes | None] | None = None  # None: no row has a key

    def __post_init__(self) -> None:
        if self.keys is not None and len(self.keys) != len(self.values):
            raise ValueError(f"Columns: {len(self.values)} values but {len(self.keys)} keys")

    def __len__(self) -> int:
        return len(self.values)


def fields_of(row: Mapping[str, Any], index: int) -> Fields:
    """The produce arguments of a mapping row."""
    unknown = set(row) - set(ROW_FIELDS)
    if unknown:
        raise RowError(index, row.get("key"), f"unknown field(s) {sorted(unknown)}; a row has "
                       f"{', '.join(ROW_FIELDS)}")
    partition = row.get("partition")
    timestamp = row.get("timestamp_ms")
    return (row.get("value"), row.get("key"), row.get("topic"),
            -1 if partition is None else partition, produce_headers(row.get("headers"), index,
                                                                    row.get("key")),
            0 if timestamp is None else timestamp)


def produce_headers(headers: Any, index: int, key: object) -> list[tuple[str, Any]] | None:
    """Headers as confluent-kafka takes them (a list), None when there are none."""
    if not headers:
        return None
    items = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    for item in items:
        if (not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str)
                or not (item[1] is None or isinstance(item[1], (bytes, str)))):
            raise RowError(index, key, f"header {item!r} is not a (str, bytes | str | None) pair")
    return items


def encode_headers(headers: Sequence[tuple[str, Any]]) -> bytes:
    """An unambiguous byte string of an ordered header list (for the checksum)."""
    parts: list[bytes] = []
    for name, value in headers:
        raw_name = name.encode()
        parts.append(len(raw_name).to_bytes(4, "little") + raw_name)
        if value is None:
            parts.append(b"\xff\xff\xff\xff")
        else:
            raw = value.encode() if isinstance(value, str) else bytes(value)
            parts.append(len(raw).to_bytes(4, "little") + raw)
    return b"".join(parts)


def check_value(index: int, value: object, key: object) -> None:
    """Why a value confluent-kafka refused (or that we refuse) cannot be sent; raises RowError."""
    if value is None:
        raise RowError(index, key, "the value is None (twopc writes no tombstones: a None value "
                       "usually means a missing column); give bytes or str")
    if not isinstance(value, (bytes, str)):
        raise RowError(index, key, f"the value is a {type(value).__name__}; give bytes or str")


def check_partition(index: int, partition: object, key: object) -> None:
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < -1:
        raise RowError(index, key, f"partition {partition!r} is not a partition number (an int "
                       ">= 0, or None to let the partitioner choose)")
