"""What a task hands to the driver: a pre-committed transaction (a handle), or why there is none.

Handles travel in Spark's commit messages (pickle) and in the checkpoint log (msgpack), so they are
small frozen dataclasses with an explicit, versioned plain-data form: the log outlives code versions.

Design: docs/design.md section 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from twopc.protocol import plain as pd


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
            topic, partition, first, last, count, topic_id = pd.row(obj, "partition span", 6)
            return cls(
                pd.text(topic, "span topic"),
                pd.integer(partition, "span partition", 0, pd.INT32_MAX),
                pd.integer(first, "span first offset"),
                pd.opt_integer(last, "span last offset"),
                pd.integer(count, "span record count"),
                pd.opt_text(topic_id, "span topic id"),
            )
        except ValueError as exc:
            raise HandleFormatError(f"bad partition span {obj!r:.200}: {exc}") from exc


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
        if not isinstance(obj, dict) or type(obj.get("v")) is not int or obj.get("v") != 1:
            raise HandleFormatError(f"unknown handle format {obj!r:.200}")
        try:
            def get(key: str) -> Any:
                return pd.field(obj, key, f"handle field {key!r}")

            return cls(
                transactional_id=pd.text(get("tid"), "transactional id (tid)"),
                producer_id=pd.integer(get("pid"), "producer id (pid)"),
                epoch=pd.integer(get("epoch"), "epoch", 0, pd.INT16_MAX),
                spans=tuple(PartitionSpan.from_obj(s) for s in pd.items(get("spans"), "spans")),
                record_count=pd.integer(get("n"), "record count (n)"),
                checksum=pd.text(get("sum"), "checksum (sum)"),
                start_ms=pd.integer(get("start"), "start time (start)"),
                timeout_ms=pd.integer(get("timeout"), "timeout", 1, pd.INT32_MAX),
                task_partition=pd.integer(get("p"), "Spark partition (p)", 0, pd.INT32_MAX),
                attempt=pd.integer(get("a"), "attempt (a)", 0, pd.INT32_MAX),
                writer_clock_ms=pd.integer(get("clock"), "writer clock (clock)", pd.INT64_MIN),
                writer_host=pd.opt_text(obj.get("host"), "writer host (host)"),
                writer_elapsed_ms=pd.opt_integer(obj.get("elapsed"), "writer elapsed (elapsed)"),
            )
        except ValueError as exc:
            if isinstance(exc, HandleFormatError):
                raise
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
            obj = pd.mapping(obj, "write result")
            handle = obj.get("handle")
            return cls(
                ResultKind(pd.text(pd.field(obj, "kind", "kind"), "kind")),
                pd.text(pd.field(obj, "batch", "batch"), "batch"),
                pd.integer(pd.field(obj, "p", "Spark partition (p)"), "Spark partition (p)", 0,
                           pd.INT32_MAX),
                pd.integer(pd.field(obj, "a", "attempt (a)"), "attempt (a)", 0, pd.INT32_MAX),
                None if handle is None else Handle.from_obj(handle),
                pd.integer(obj.get("rows", 0), "rows"),
            )
        except ValueError as exc:
            if isinstance(exc, HandleFormatError):
                raise
            raise HandleFormatError(f"bad write result {obj!r:.200}: {exc}") from exc
