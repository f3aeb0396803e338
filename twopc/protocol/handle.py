"""What a task hands to the driver: a pre-committed transaction (a handle), or why there is none.

Handles travel in Spark's commit messages (pickle) and in the checkpoint log (msgpack), so they are
small frozen dataclasses with an explicit, versioned plain-data form: the log outlives code versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class HandleFormatError(ValueError):
    """A stored handle or result could not be read back (unknown field layout or corrupt values)."""


@dataclass(frozen=True)
class PartitionSpan:
    """The records one transaction wrote to one Kafka partition: the offset of its first record and
    how many (from the partition leader: twopc/executor/spans.py). `last_offset` is None: the leader does not
    tell it, and the writer takes no delivery report per record; logs written by earlier versions
    carry it."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int | None
    record_count: int
    topic_id: str | None = None  # the topic's id at write time: a re-created topic is not ours

    def to_obj(self) -> list[Any]:
        return [
            self.topic,
            self.partition,
            self.first_offset,
            self.last_offset,
            self.record_count,
            self.topic_id,
        ]

    @classmethod
    def from_obj(cls, obj: Any) -> PartitionSpan:
        try:
            topic, partition, first, last, count, topic_id = obj
            return cls(
                str(topic),
                int(partition),
                int(first),
                None if last is None else int(last),
                int(count),
                None if topic_id is None else str(topic_id),
            )
        except (TypeError, ValueError) as exc:
            raise HandleFormatError(f"bad partition span {obj!r}: {exc}") from exc


@dataclass(frozen=True)
class Handle:
    """One pre-committed Kafka transaction: enough to finish it from any process, and to check it."""

    transactional_id: str
    producer_id: int
    epoch: int
    spans: tuple[PartitionSpan, ...]
    record_count: int
    checksum: str  # order-insensitive multiset hash of (key, value, headers), hex
    start_ms: int  # the coordinator's txnStartTimestamp (DescribeTransactions)
    timeout_ms: int
    task_partition: int  # Spark's partition id p
    attempt: int  # Spark's attempt number a
    writer_clock_ms: (
        int  # the writer's wall clock when it identified the transaction (skew estimate)
    )
    # Added after format 1 was first written: optional keys of the same format (a log written
    # before has neither; code before ignores them). None when unknown.
    writer_host: str | None = None  # the executor's host name, to name a wrong clock
    writer_elapsed_ms: int | None = None  # the writer's monotonic time from before the
    # transaction began to its clock reading: bounds what that reading can say (protocol/clock.py)

    def to_obj(self) -> dict[str, Any]:
        return {
            "v": 1,
            "tid": self.transactional_id,
            "pid": self.producer_id,
            "epoch": self.epoch,
            "spans": [s.to_obj() for s in self.spans],
            "n": self.record_count,
            "sum": self.checksum,
            "start": self.start_ms,
            "timeout": self.timeout_ms,
            "p": self.task_partition,
            "a": self.attempt,
            "clock": self.writer_clock_ms,
            "host": self.writer_host,
            "elapsed": self.writer_elapsed_ms,
        }

    @classmethod
    def from_obj(cls, obj: Any) -> Handle:
        if not isinstance(obj, dict) or obj.get("v") != 1:
            raise HandleFormatError(f"unknown handle format {obj!r:.200}")
        try:
            return cls(
                transactional_id=str(obj["tid"]),
                producer_id=int(obj["pid"]),
                epoch=int(obj["epoch"]),
                spans=tuple(PartitionSpan.from_obj(s) for s in obj["spans"]),
                record_count=int(obj["n"]),
                checksum=str(obj["sum"]),
                start_ms=int(obj["start"]),
                timeout_ms=int(obj["timeout"]),
                task_partition=int(obj["p"]),
                attempt=int(obj["a"]),
                writer_clock_ms=int(obj["clock"]),
                writer_host=None if obj.get("host") is None else str(obj["host"]),
                writer_elapsed_ms=None if obj.get("elapsed") is None else int(obj["elapsed"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise HandleFormatError(f"bad handle {obj!r:.200}: {exc}") from exc

    @property
    def deadline_ms(self) -> int:
        """When the coordinator will abort the transaction, on the coordinator's clock."""
        return self.start_ms + self.timeout_ms


class ResultKind(str, Enum):
    PRECOMMITTED = "precommitted"  # a handle: an open transaction awaiting the driver's decision
    EMPTY = "empty"  # no rows: no transaction was opened
    SKIPPED = "skipped"  # the batch was already committed by this query: nothing written


@dataclass(frozen=True)
class WriteResult:
    """A task's commit message (must pickle): what it did for batch `batch`."""

    kind: ResultKind
    batch: str
    task_partition: int
    attempt: int
    handle: Handle | None = None
    rows: int = 0

    def to_obj(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "batch": self.batch,
            "p": self.task_partition,
            "a": self.attempt,
            "rows": self.rows,
            "handle": self.handle.to_obj() if self.handle else None,
        }

    @classmethod
    def from_obj(cls, obj: Any) -> WriteResult:
        try:
            return cls(
                ResultKind(obj["kind"]),
                str(obj["batch"]),
                int(obj["p"]),
                int(obj["a"]),
                Handle.from_obj(obj["handle"]) if obj.get("handle") else None,
                int(obj.get("rows", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise HandleFormatError(f"bad write result {obj!r:.200}: {exc}") from exc
