"""Encoders and decoders of the consumer-group offset APIs twopc needs to commit a query's source
offsets inside its transactions (twopc.commitSourceOffsets, docs/spark.md).

Layouts follow Apache Kafka's JSON message definitions (AddOffsetsToTxnRequest.json,
TxnOffsetCommitRequest.json, OffsetFetchRequest.json, OffsetCommitRequest.json) for the flexible
versions in messages.CLIENT_VERSIONS only. Pure: bytes in, values out.

- AddOffsetsToTxn (25, v3-4): adds the group's `__consumer_offsets` partition to a transaction;
  sent to the transaction coordinator with the transaction's producer id and epoch.
- TxnOffsetCommit (28, v3-4): writes the offsets into that transaction, at the group coordinator.
  Generation -1 and an empty member id: the commit of a "simple" group (no members), as the admin
  client's. Never v5 (a transaction-version-2 client's request, see messages.CLIENT_VERSIONS).
- OffsetFetch (9, v7): a group's committed offsets; `require_stable` makes a partition whose
  offsets wait in an open transaction answer UNSTABLE_OFFSET_COMMIT instead of the old value.
- OffsetCommit (8, v8-9): a plain (non-transactional) commit. The driver no longer sends it (a
  batch that wrote no record commits its offsets in a transaction of its own: a late copy of a
  plain commit could move the group back; twopc/driver/source_offsets.py `commit_alone`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from twopc.control.protocol import Reader, Writer

# (topic, partition, offset): the offset is the next one to read, as a consumer commits it.
TopicOffset = tuple[str, int, int]
TopicPartition = tuple[str, int]


def _by_topic(offsets: Sequence[TopicOffset]) -> list[tuple[str, list[tuple[int, int]]]]:
    topics: dict[str, dict[int, int]] = {}
    for topic, partition, offset in offsets:
        topics.setdefault(topic, {})[partition] = offset
    return [(t, sorted(parts.items())) for t, parts in sorted(topics.items())]


def _offset_topics(w: Writer, offsets: Sequence[TopicOffset]) -> Writer:
    """Topics -> partitions (index, offset, leader epoch -1, metadata null): the same layout in
    TxnOffsetCommit and OffsetCommit."""
    def part(pw: Writer, item: tuple[int, int]) -> None:
        pw.int32(item[0]).int64(item[1]).int32(-1).string(None).tags()

    def topic(tw: Writer, item: tuple[str, list[tuple[int, int]]]) -> None:
        tw.string(item[0]).array(item[1], part).tags()

    return w.array(_by_topic(offsets), topic)


def _partition_errors(r: Reader) -> dict[TopicPartition, int]:
    """Topics -> partitions (index, error code), as TxnOffsetCommit and OffsetCommit answer."""
    out: dict[TopicPartition, int] = {}

    def topic(t: Reader) -> None:
        name = t.string()

        def part(p: Reader) -> None:
            index, code = p.int32(), p.int16()
            p.tags()
            out[(name, index)] = code

        t.array(part)
        t.tags()

    r.array(topic)
    r.tags()
    return out


# --- AddOffsetsToTxn -----------------------------------------------------------------------------

def encode_add_offsets_to_txn(version: int, transactional_id: str, producer_id: int, epoch: int,
                              group_id: str) -> bytes:
    return (Writer(True).string(transactional_id).int64(producer_id).int16(epoch)
            .string(group_id).tags().getvalue())


def decode_add_offsets_to_txn(version: int, r: Reader) -> int:
    r.int32()  # throttle
    code = r.int16()
    r.tags()
    return code


# --- TxnOffsetCommit -----------------------------------------------------------------------------

def encode_txn_offset_commit(version: int, transactional_id: str, group_id: str, producer_id: int,
                             epoch: int, offsets: Sequence[TopicOffset]) -> bytes:
    if version > 4:
        raise ValueError("TxnOffsetCommit v5+ is a transaction-version-2 client's request")
    w = Writer(True).string(transactional_id).string(group_id).int64(producer_id).int16(epoch)
    w.int32(-1).string("").string(None)  # generation, member id, group instance id: no member
    return _offset_topics(w, offsets).tags().getvalue()


def decode_txn_offset_commit(version: int, r: Reader) -> dict[TopicPartition, int]:
    r.int32()  # throttle
    return _partition_errors(r)


# --- OffsetCommit (plain) ------------------------------------------------------------------------

def encode_offset_commit(version: int, group_id: str, offsets: Sequence[TopicOffset]) -> bytes:
    w = Writer(True).string(group_id).int32(-1).string("").string(None)
    return _offset_topics(w, offsets).tags().getvalue()


def decode_offset_commit(version: int, r: Reader) -> dict[TopicPartition, int]:
    r.int32()  # throttle
    return _partition_errors(r)


# --- OffsetFetch ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class FetchedOffset:
    offset: int  # -1: the group has no committed offset for the partition
    error_code: int
    metadata: str | None = None


@dataclass(frozen=True)
class GroupOffsetsResponse:
    error_code: int
    partitions: dict[TopicPartition, FetchedOffset]


def encode_offset_fetch(version: int, group_id: str,
                        partitions: Sequence[TopicPartition] | None,
                        require_stable: bool) -> bytes:
    """`partitions` None: every partition the group has an offset for."""
    w = Writer(True).string(group_id)
    if partitions is None:
        w.array(None, Writer.string)
    else:
        topics: dict[str, set[int]] = {}
        for name, partition in partitions:
            topics.setdefault(name, set()).add(partition)

        def one(tw: Writer, item: tuple[str, set[int]]) -> None:
            tw.string(item[0]).array(sorted(item[1]), Writer.int32).tags()

        w.array(sorted(topics.items()), one)
    return w.bool(require_stable).tags().getvalue()


def decode_offset_fetch(version: int, r: Reader) -> GroupOffsetsResponse:
    r.int32()  # throttle
    found: dict[TopicPartition, FetchedOffset] = {}

    def topic(t: Reader) -> None:
        name = t.string()

        def part(p: Reader) -> None:
            index, offset = p.int32(), p.int64()
            p.int32()  # committed leader epoch
            metadata, code = p.nullable_string(), p.int16()
            p.tags()
            found[(name, index)] = FetchedOffset(offset, code, metadata)

        t.array(part)
        t.tags()

    r.array(topic)
    code = r.int16()
    r.tags()
    return GroupOffsetsResponse(code, found)
