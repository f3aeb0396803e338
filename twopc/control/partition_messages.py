"""Wire format of the partition leaders' requests: Fetch, ListOffsets, DescribeProducers (Kafka's
message definitions under clients/src/main/resources/common/message/).

Design: docs/design.md section 3.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from twopc.control.errors import ProtocolError
from twopc.control.messages import ISOLATION_READ_COMMITTED, expect_end
from twopc.control.protocol import Reader, Writer


@dataclass(frozen=True)
class FetchPartition:
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...] | None  # (producer id, first offset)
    records: bytes | None


@dataclass(frozen=True)
class FetchTarget:
    """One partition of a Fetch request: its topic (by name up to v12, by id from v13), where to
    start, and at most how many bytes past the first batch."""

    topic: str | uuid.UUID
    partition: int
    offset: int
    max_bytes: int


def encode_fetch(version: int, topic: str | uuid.UUID, partition: int, offset: int,
                 max_bytes: int, leader_epoch: int = -1,
                 isolation: int = ISOLATION_READ_COMMITTED) -> bytes:
    """A one-partition, session-less fetch that does not wait for data (read_committed unless
    `isolation` says otherwise)."""
    return encode_fetch_many(version, [FetchTarget(topic, partition, offset, max_bytes)],
                             max_bytes, leader_epoch, isolation)


def encode_fetch_many(version: int, targets: Sequence[FetchTarget], max_bytes: int,
                      leader_epoch: int = -1,
                      isolation: int = ISOLATION_READ_COMMITTED) -> bytes:
    """A session-less fetch of many partitions that does not wait for data; `max_bytes` bounds
    the whole answer (the broker still returns the first partition's first batch whole)."""
    by_topic: dict[str | uuid.UUID, list[FetchTarget]] = {}
    for t in targets:
        if version >= 13 and not isinstance(t.topic, uuid.UUID):
            raise ValueError("Fetch v13+ addresses topics by id")
        if version < 13 and not isinstance(t.topic, str):
            raise ValueError("Fetch v12 addresses topics by name")
        by_topic.setdefault(t.topic, []).append(t)
    w = Writer(True)
    w.int32(-1).int32(0).int32(1).int32(max_bytes).int8(isolation)
    w.int32(0).int32(-1)  # no fetch session

    def part(pw: Writer, t: FetchTarget) -> None:
        pw.int32(t.partition).int32(leader_epoch).int64(t.offset).int32(-1).int64(-1)
        pw.int32(t.max_bytes).tags()

    def one_topic(tw: Writer, item: tuple[str | uuid.UUID, list[FetchTarget]]) -> None:
        topic, parts = item
        if isinstance(topic, uuid.UUID):
            tw.uuid(topic)
        else:
            tw.string(topic)
        tw.array(parts, part).tags()

    w.array(list(by_topic.items()), one_topic)
    w.array([], Writer.int32)  # forgotten topics
    w.string("")  # rack id
    return w.tags().getvalue()


def decode_fetch(version: int, r: Reader) -> tuple[int, list[FetchPartition]]:
    top, found = decode_fetch_many(version, r)
    return top, [p for _, p in found]


def decode_fetch_many(version: int, r: Reader
                      ) -> tuple[int, list[tuple[str | uuid.UUID, FetchPartition]]]:
    """(top-level error code, each partition answered with its topic: a name up to v12, an id
    from v13)."""
    r.int32()
    top_error = r.int16()
    r.int32()  # session id

    def aborted(a: Reader) -> tuple[int, int]:
        out = (a.int64(), a.int64())
        expect_end(a)
        return out

    def part(p: Reader) -> FetchPartition:
        index, error, hw, lso, lso_start = p.int32(), p.int16(), p.int64(), p.int64(), p.int64()
        aborted_txns = p.nullable_array(aborted)
        p.int32()  # preferred read replica
        records = p.nullable_bytes()
        expect_end(p)
        return FetchPartition(index, error, hw, lso, lso_start,
                              None if aborted_txns is None else tuple(aborted_txns), records)

    parts: list[tuple[str | uuid.UUID, FetchPartition]] = []

    def topic(t: Reader) -> None:
        name: str | uuid.UUID = t.uuid() if version >= 13 else t.string()
        parts.extend((name, p) for p in t.array(part))
        expect_end(t)

    r.array(topic)
    expect_end(r)
    return top_error, parts


EARLIEST = -2


LATEST = -1


def encode_list_offsets(version: int, topic: str, partition: int, timestamp: int) -> bytes:
    """Where one partition starts (EARLIEST) or ends (LATEST, the high watermark)."""
    def part(pw: Writer, _: int) -> None:
        pw.int32(partition).int32(-1).int64(timestamp).tags()

    def one(tw: Writer, name: str) -> None:
        tw.string(name).array([0], part).tags()

    w = Writer(True).int32(-1).int8(0).array([topic], one)
    return w.tags().getvalue()


def decode_list_offsets(version: int, r: Reader) -> tuple[int, int]:
    """(error code, offset) of the single partition asked for."""
    r.int32()
    found: list[tuple[int, int]] = []

    def part(p: Reader) -> None:
        p.int32()
        error, _, offset = p.int16(), p.int64(), p.int64()
        p.int32()  # leader epoch
        expect_end(p)
        found.append((error, offset))

    def topic(t: Reader) -> None:
        t.string()
        t.array(part)
        expect_end(t)

    r.array(topic)
    expect_end(r)
    if len(found) != 1:
        raise ProtocolError(f"ListOffsets answered for {len(found)} partitions, asked for 1")
    return found[0]


def encode_list_offsets_latest(version: int, partitions: Sequence[tuple[str, int]],
                               isolation: int = ISOLATION_READ_COMMITTED) -> bytes:
    """LATEST of many partitions at once; at read_committed that is each one's last stable offset."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)

    def part(pw: Writer, partition: int) -> None:
        pw.int32(partition).int32(-1).int64(LATEST).tags()

    def one(tw: Writer, item: tuple[str, list[int]]) -> None:
        tw.string(item[0]).array(sorted(set(item[1])), part).tags()

    w = Writer(True).int32(-1).int8(isolation).array(sorted(by_topic.items()), one)
    return w.tags().getvalue()


def decode_list_offsets_all(version: int, r: Reader) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (error code, offset) for every partition answered."""
    r.int32()
    out: dict[tuple[str, int], tuple[int, int]] = {}

    def topic(t: Reader) -> None:
        name = t.string()

        def part(p: Reader) -> None:
            index, error, _, offset = p.int32(), p.int16(), p.int64(), p.int64()
            p.int32()  # leader epoch
            expect_end(p)
            out[(name, index)] = (error, offset)

        t.array(part)
        expect_end(t)

    r.array(topic)
    expect_end(r)
    return out


@dataclass(frozen=True)
class ActiveProducer:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True)
class ProducerState:
    topic: str
    partition: int
    error_code: int
    error_message: str | None
    producers: tuple[ActiveProducer, ...]


def encode_describe_producers(version: int, partitions: Sequence[tuple[str, int]]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)

    def one(tw: Writer, name: str) -> None:
        tw.string(name).array(by_topic[name], Writer.int32).tags()

    return Writer(True).array(list(by_topic), one).tags().getvalue()


def decode_describe_producers(version: int, r: Reader) -> list[ProducerState]:
    r.int32()
    out: list[ProducerState] = []

    def producer(a: Reader) -> ActiveProducer:
        p = ActiveProducer(a.int64(), a.int32(), a.int32(), a.int64(), a.int32(), a.int64())
        expect_end(a)
        return p

    def topic(t: Reader) -> None:
        name = t.string()

        def part(p: Reader) -> None:
            index, error, message = p.int32(), p.int16(), p.nullable_string()
            producers = tuple(p.array(producer))
            expect_end(p)
            out.append(ProducerState(name, index, error, message, producers))

        t.array(part)
        expect_end(t)

    r.array(topic)
    expect_end(r)
    return out

