"""Wire format of the transaction coordinator's requests: InitProducerId, EndTxn,
AddPartitionsToTxn, DescribeTransactions, ListTransactions (Kafka's message definitions under
clients/src/main/resources/common/message/).

Design: docs/design.md section 3.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from twopc.control.errors import ProtocolError
from twopc.control.messages import ApiKey, expect_end, is_flexible
from twopc.control.protocol import Reader, Writer


@dataclass(frozen=True)
class InitProducerIdResponse:
    error_code: int
    producer_id: int
    producer_epoch: int


def encode_init_producer_id(version: int, transactional_id: str, timeout_ms: int) -> bytes:
    # ProducerId/Epoch -1: a fresh initialization, which fences whoever holds the id now.
    w = Writer(True).string(transactional_id).int32(timeout_ms)
    if version >= 3:
        w.int64(-1).int16(-1)
    return w.tags().getvalue()


def decode_init_producer_id(version: int, r: Reader) -> InitProducerIdResponse:
    r.int32()
    out = InitProducerIdResponse(r.int16(), r.int64(), r.int16())
    expect_end(r)
    return out


def encode_end_txn(version: int, transactional_id: str, producer_id: int, epoch: int,
                   commit: bool) -> bytes:
    if version > 4:
        raise ValueError("EndTxn v5+ would finish the transaction with transaction-version-2 rules")
    w = Writer(is_flexible(ApiKey.END_TXN, version))
    return (w.string(transactional_id).int64(producer_id).int16(epoch).bool(commit).tags()
            .getvalue())


def decode_end_txn(version: int, r: Reader) -> int:
    r.int32()
    code = r.int16()
    expect_end(r)
    return code


ADD_PARTITIONS_MAX_VERSION = 3


@dataclass(frozen=True)
class AddPartitionsToTxnResponse:
    results: tuple[tuple[str, int, int], ...]  # (topic, partition, error code)

    @property
    def error_code(self) -> int:
        """The answer's deciding code: the first error that is not OPERATION_NOT_ATTEMPTED (the
        broker's filler for the partitions it skipped because another one failed), else 0."""
        codes = [code for _, _, code in self.results if code != 0]
        real = [c for c in codes if c != _OPERATION_NOT_ATTEMPTED]
        return (real or codes or [0])[0]


_OPERATION_NOT_ATTEMPTED = 55


def encode_add_partitions_to_txn(version: int, transactional_id: str, producer_id: int,
                                 epoch: int, partitions: Sequence[tuple[str, int]]) -> bytes:
    if not 0 <= version <= ADD_PARTITIONS_MAX_VERSION:
        raise ValueError("AddPartitionsToTxn v4+ is the brokers' batched verification request, "
                         "not a client's")
    by_topic: dict[str, list[int]] = {}
    for name, partition in partitions:
        by_topic.setdefault(name, []).append(partition)

    def one(tw: Writer, item: tuple[str, list[int]]) -> None:
        tw.string(item[0]).array(sorted(set(item[1])), Writer.int32).tags()

    w = Writer(is_flexible(ApiKey.ADD_PARTITIONS_TO_TXN, version))
    w.string(transactional_id).int64(producer_id).int16(epoch)
    return w.array(sorted(by_topic.items()), one).tags().getvalue()


def decode_add_partitions_to_txn(version: int, r: Reader) -> AddPartitionsToTxnResponse:
    r.int32()  # throttle
    out: list[tuple[str, int, int]] = []

    def topic(t: Reader) -> None:
        name = t.string()

        def part(p: Reader) -> None:
            index, code = p.int32(), p.int16()
            expect_end(p)  # tagged fields exist only in flexible versions; a no-op before
            out.append((name, index, code))

        t.array(part)
        expect_end(t)

    r.array(topic)
    expect_end(r)
    return AddPartitionsToTxnResponse(tuple(out))


@dataclass(frozen=True)
class TxnStateEntry:
    error_code: int
    transactional_id: str
    state: str
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...]


def encode_describe_transactions(version: int, ids: Sequence[str]) -> bytes:
    return Writer(True).array(list(ids), Writer.string).tags().getvalue()


# An entry's timeout (int32), start time (int64), producer id (int64) and epoch (int16).
_ENTRY_FIXED = struct.Struct(">iqqh")


def decode_describe_transactions(version: int, r: Reader) -> list[TxnStateEntry]:
    r.int32()

    def topic(t: Reader) -> list[tuple[str, int]]:
        name = t.string()
        parts = t.array(Reader.int32)
        expect_end(t)
        return [(name, p) for p in parts]

    def entry(e: Reader) -> TxnStateEntry:
        error, tid, state = e.int16(), e.string(), e.string()
        timeout, start, pid, epoch = e.fields(_ENTRY_FIXED)
        if e.flexible and e.peek(2) == b"\x01\x00":
            # No partitions and no tagged fields: most of a batch pool's ids (commit path).
            e.raw(2)
            parts: tuple[tuple[str, int], ...] = ()
        else:
            parts = tuple(sorted(tp for t in e.array(topic) for tp in t))
            expect_end(e)
        return TxnStateEntry(error, tid, state, timeout, start, pid, epoch, parts)

    out = r.array(entry)
    expect_end(r)
    return out


class TxnStateBrief(NamedTuple):
    """An entry of a DescribeTransactions answer cut to what a sweep asks: is the id open?"""

    error_code: int
    transactional_id: str
    state: str


def decode_describe_states(version: int, r: Reader) -> list[TxnStateBrief]:
    """Each entry's error code, id and state (`decode_describe_transactions`, the rest skipped).
    A commit's sweep describes its batch's whole pool (513 ids for 64 partitions), decoded on the
    control client's thread while the commit's EndTxns wait for that thread: an entry of the
    usual shapes (strings under 127 bytes, no tagged fields, and no partitions or one topic's:
    `_after_topics`) is read in place here, a few times faster than in full; any other takes the
    general path, same answer."""
    r.int32()
    count = r.uvarint() - 1  # a compact array: the version is flexible from 0
    if count > r.remaining:
        raise ProtocolError(f"array count {count} exceeds the {r.remaining} bytes left")
    data, end = r.data, len(r.data)
    out: list[TxnStateBrief] = []
    try:
        for _ in range(count):
            pos = r.pos
            n_id = data[pos + 2] if pos + 2 < end else 0
            at_state = pos + 2 + n_id  # where the state's length is, if the id's took one byte
            n_state = data[at_state] if 0 < n_id < 0x80 and at_state < end else 0
            tail = at_state + n_state + _ENTRY_FIXED.size  # the topics' count, then the tags'
            after = _after_topics(data, tail, end) if 0 < n_state < 0x80 else -1
            if after >= 0:
                out.append(TxnStateBrief(int.from_bytes(data[pos:pos + 2], "big", signed=True),
                                         str(data[pos + 3:at_state], "utf-8"),
                                         str(data[at_state + 1:at_state + n_state], "utf-8")))
                r.pos = after
                continue
            error, tid, state = r.int16(), r.string(), r.string()
            r.fields(_ENTRY_FIXED)
            r.array(_skip_topic)
            expect_end(r)
            out.append(TxnStateBrief(error, tid, state))
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"string is not UTF-8: {exc}") from exc
    expect_end(r)
    return out


def _after_topics(data: memoryview, at: int, end: int) -> int:
    """Where an entry ends, read in place from its topics' count at `at`, for the shapes a pool
    answers with: no topic (an id not open), or one topic of fewer than 127 partitions (an open
    transaction of the batch, one per task), each with a one-byte name length and no tagged
    fields; -1 for any other shape (the general path reads it)."""
    if at + 1 >= end:
        return -1
    if data[at] == 1:  # no topic
        return at + 2 if data[at + 1] == 0 else -1
    if data[at] != 2:
        return -1
    n_name = data[at + 1]
    if not 0 < n_name < 0x80 or at + 1 + n_name >= end:
        return -1
    str(data[at + 2:at + 1 + n_name], "utf-8")  # unread, yet refused as the general path does
    n_parts = data[at + 1 + n_name] - 1
    tags = at + 2 + n_name + 4 * n_parts  # the topic's tagged fields, then the entry's
    if not 0 <= n_parts < 0x7f or tags + 1 >= end or data[tags] != 0 or data[tags + 1] != 0:
        return -1
    return tags + 2


def _skip_topic(t: Reader) -> None:
    t.string()
    t.array(Reader.int32)
    expect_end(t)


@dataclass(frozen=True)
class ListTransactionsResponse:
    error_code: int
    unknown_state_filters: tuple[str, ...]
    transactions: tuple[tuple[str, int, str], ...]  # (transactional id, producer id, state)


def encode_list_transactions(version: int, states: Sequence[str],
                             id_pattern: str | None = None,
                             producer_ids: Sequence[int] = ()) -> bytes:
    """`producer_ids`: only the transactional ids these producer ids belong to (every version
    filters by producer id; empty: no filter)."""
    w = Writer(True).array(list(states), Writer.string).array(list(producer_ids), Writer.int64)
    if version >= 1:
        w.int64(-1)
    if version >= 2:
        w.string(id_pattern)
    return w.tags().getvalue()


def decode_list_transactions(version: int, r: Reader) -> ListTransactionsResponse:
    r.int32()
    error = r.int16()
    unknown = tuple(r.array(Reader.string))

    def entry(e: Reader) -> tuple[str, int, str]:
        out = (e.string(), e.int64(), e.string())
        expect_end(e)
        return out

    txns = tuple(r.array(entry))
    expect_end(r)
    return ListTransactionsResponse(error, unknown, txns)

