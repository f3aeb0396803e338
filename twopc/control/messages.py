"""Request encoders and response decoders for the few Kafka APIs the control plane needs.

Each layout follows Apache Kafka's JSON message definitions
(clients/src/main/resources/common/message) for the versions listed in CLIENT_VERSIONS.
Pure: bytes in, dataclasses out.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from twopc.control.errors import ProtocolError, UnsupportedBrokerError
from twopc.control.protocol import Reader, Writer


class ApiKey(IntEnum):
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    FIND_COORDINATOR = 10
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    END_TXN = 26
    # Consumer group offsets inside a transaction (twopc.commitSourceOffsets): group_messages.py.
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    ADD_OFFSETS_TO_TXN = 25
    TXN_OFFSET_COMMIT = 28
    SASL_AUTHENTICATE = 36
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


# The first flexible version of each API (None: never flexible).
FLEXIBLE_FROM: dict[ApiKey, int | None] = {
    ApiKey.FETCH: 12, ApiKey.LIST_OFFSETS: 6, ApiKey.METADATA: 9, ApiKey.FIND_COORDINATOR: 3,
    ApiKey.SASL_HANDSHAKE: None,
    ApiKey.API_VERSIONS: 3, ApiKey.INIT_PRODUCER_ID: 2, ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.END_TXN: 3,
    ApiKey.SASL_AUTHENTICATE: 2, ApiKey.DESCRIBE_PRODUCERS: 0, ApiKey.DESCRIBE_TRANSACTIONS: 0,
    ApiKey.LIST_TRANSACTIONS: 0,
    ApiKey.OFFSET_COMMIT: 8, ApiKey.OFFSET_FETCH: 6, ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.TXN_OFFSET_COMMIT: 3,
}

# Versions this client can encode. EndTxn stops at 4: version 5 selects the KIP-890 (transaction
# version 2) semantics, which librdkafka-started transactions must never be finished with.
# AddPartitionsToTxn stops at 3 for the same reason: 0-3 are the client's (old-semantics) versions,
# 4+ the brokers' own verification requests.
CLIENT_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.FETCH: (12, 13), ApiKey.LIST_OFFSETS: (7, 7), ApiKey.METADATA: (12, 12),
    ApiKey.FIND_COORDINATOR: (3, 4),
    ApiKey.SASL_HANDSHAKE: (1, 1), ApiKey.API_VERSIONS: (3, 3), ApiKey.INIT_PRODUCER_ID: (3, 5),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3), ApiKey.END_TXN: (0, 4), ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0), ApiKey.LIST_TRANSACTIONS: (0, 2),
    # TxnOffsetCommit stops at 4: version 5 is for transaction-version-2 clients (it adds the
    # offsets partition to the transaction implicitly), and librdkafka starts transactions the old
    # way; AddOffsetsToTxn comes first instead, as for any old-style transaction.
    ApiKey.OFFSET_COMMIT: (8, 9), ApiKey.OFFSET_FETCH: (7, 7), ApiKey.ADD_OFFSETS_TO_TXN: (3, 4),
    ApiKey.TXN_OFFSET_COMMIT: (3, 4),
}

COORDINATOR_KEY_GROUP = 0
COORDINATOR_KEY_TRANSACTION = 1
ISOLATION_READ_COMMITTED = 1


def is_flexible(api: ApiKey, version: int) -> bool:
    first = FLEXIBLE_FROM[api]
    return first is not None and version >= first


def negotiate(api: ApiKey, broker: tuple[int, int] | None, ceiling: int | None = None) -> int:
    """The highest version both sides speak (capped by `ceiling`), or UnsupportedBrokerError."""
    low, high = CLIENT_VERSIONS[api]
    if ceiling is not None:
        high = min(high, ceiling)
    if broker is None:
        raise UnsupportedBrokerError(f"the broker does not offer {api.name} (API key {int(api)})")
    best = min(high, broker[1])
    if best < max(low, broker[0]):
        raise UnsupportedBrokerError(
            f"no common version of {api.name}: broker offers {broker[0]}-{broker[1]}, this client "
            f"speaks {low}-{high}; twopc needs Apache Kafka 3.6 or newer")
    return best


def request_header(api: ApiKey, version: int, correlation_id: int, client_id: str) -> bytes:
    # Header v1, or v2 (v1 + tagged fields) for flexible versions; the client id stays a classic
    # string in both.
    w = Writer().int16(int(api)).int16(version).int32(correlation_id).string(client_id)
    if is_flexible(api, version):
        w.raw(b"\x00")
    return w.getvalue()


def response_body(api: ApiKey, version: int, frame: bytes) -> tuple[int, Reader]:
    """Splits a response frame into its correlation id and a reader positioned on the body."""
    head = Reader(frame, flexible=is_flexible(api, version) and api != ApiKey.API_VERSIONS)
    correlation_id = head.int32()
    head.tags()  # response header v1; ApiVersions always answers with header v0
    body = Reader(frame[head.pos:], flexible=is_flexible(api, version))
    return correlation_id, body


def _end(r: Reader) -> None:
    r.tags()


# --- ApiVersions -----------------------------------------------------------------------------

@dataclass(frozen=True)
class ApiVersionsResponse:
    error_code: int
    versions: dict[int, tuple[int, int]]
    finalized_features: dict[str, int] = field(default_factory=dict)


def encode_api_versions(version: int, software_version: str) -> bytes:
    return (Writer(True).string("twopc-control").string(software_version).tags().getvalue())


def decode_api_versions(version: int, r: Reader) -> ApiVersionsResponse:
    error_code = r.int16()
    if error_code != 0 and r.remaining < 4:
        return ApiVersionsResponse(error_code, {})
    versions: dict[int, tuple[int, int]] = {}

    def entry(e: Reader) -> None:
        key, low, high = e.int16(), e.int16(), e.int16()
        _end(e)
        versions[key] = (low, high)

    r.array(entry)
    r.int32()  # throttle
    features: dict[str, int] = {}
    tags = r.tags()
    if 2 in tags:  # FinalizedFeatures: name, max version level, min version level
        fr = Reader(tags[2], flexible=True)

        def feature(e: Reader) -> None:
            name, max_level, _ = e.string(), e.int16(), e.int16()
            _end(e)
            features[name] = max_level

        fr.array(feature)
    return ApiVersionsResponse(error_code, versions, features)


# --- Metadata --------------------------------------------------------------------------------

@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class PartitionInfo:
    error_code: int
    partition: int
    leader: int
    leader_epoch: int


@dataclass(frozen=True)
class TopicInfo:
    error_code: int
    name: str | None
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True)
class MetadataResponse:
    brokers: tuple[BrokerInfo, ...]
    cluster_id: str | None
    controller_id: int
    topics: tuple[TopicInfo, ...]


def encode_metadata(version: int, topics: Sequence[str] | None) -> bytes:
    w = Writer(True)

    def topic(tw: Writer, name: str) -> None:
        tw.uuid(None).string(name).tags()

    w.array(None if topics is None else list(topics), topic)
    w.bool(False).bool(False)  # no auto-creation, no authorized operations
    return w.tags().getvalue()


def decode_metadata(version: int, r: Reader) -> MetadataResponse:
    r.int32()  # throttle

    def broker(b: Reader) -> BrokerInfo:
        info = BrokerInfo(b.int32(), b.string(), b.int32(), b.nullable_string())
        _end(b)
        return info

    brokers = r.array(broker)
    cluster_id = r.nullable_string()
    controller = r.int32()

    def partition(p: Reader) -> PartitionInfo:
        info = PartitionInfo(p.int16(), p.int32(), p.int32(), p.int32())
        p.array(Reader.int32)  # replicas
        p.array(Reader.int32)  # isr
        p.array(Reader.int32)  # offline
        _end(p)
        return info

    def topic(t: Reader) -> TopicInfo:
        error, name, topic_id = t.int16(), t.nullable_string(), t.uuid()
        t.bool()  # internal
        parts = tuple(t.array(partition))
        t.int32()  # authorized operations
        _end(t)
        return TopicInfo(error, name, topic_id, parts)

    topics = r.array(topic)
    _end(r)
    return MetadataResponse(tuple(brokers), cluster_id, controller, tuple(topics))


# --- FindCoordinator -------------------------------------------------------------------------

@dataclass(frozen=True)
class Coordinator:
    key: str
    node_id: int
    host: str
    port: int
    error_code: int
    error_message: str | None


def encode_find_coordinator(version: int, keys: Sequence[str],
                            key_type: int = COORDINATOR_KEY_TRANSACTION) -> bytes:
    w = Writer(True)
    if version >= 4:
        w.int8(key_type).array(list(keys), Writer.string)
    else:
        if len(keys) != 1:
            raise ValueError("FindCoordinator before v4 takes exactly one key")
        w.string(keys[0]).int8(key_type)
    return w.tags().getvalue()


def decode_find_coordinator(version: int, r: Reader, keys: Sequence[str]) -> list[Coordinator]:
    r.int32()  # throttle
    if version >= 4:
        def one(c: Reader) -> Coordinator:
            coord = Coordinator(c.string(), c.int32(), c.string(), c.int32(), c.int16(),
                                c.nullable_string())
            _end(c)
            return coord

        out = r.array(one)
        _end(r)
        return out
    error, message = r.int16(), r.nullable_string()
    node, host, port = r.int32(), r.string(), r.int32()
    _end(r)
    return [Coordinator(keys[0], node, host, port, error, message)]


# --- InitProducerId and EndTxn -------------------------------------------------------------

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
    _end(r)
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
    _end(r)
    return code


# --- AddPartitionsToTxn (client versions 0-3 only) -------------------------------------------

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
            _end(p)  # tagged fields exist only in flexible versions; a no-op before
            out.append((name, index, code))

        t.array(part)
        _end(t)

    r.array(topic)
    _end(r)
    return AddPartitionsToTxnResponse(tuple(out))


# --- DescribeTransactions and ListTransactions ---------------------------------------------

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


def decode_describe_transactions(version: int, r: Reader) -> list[TxnStateEntry]:
    r.int32()

    def topic(t: Reader) -> list[tuple[str, int]]:
        name = t.string()
        parts = t.array(Reader.int32)
        _end(t)
        return [(name, p) for p in parts]

    def entry(e: Reader) -> TxnStateEntry:
        error, tid, state = e.int16(), e.string(), e.string()
        timeout, start, pid, epoch = e.int32(), e.int64(), e.int64(), e.int16()
        parts = tuple(sorted(tp for t in e.array(topic) for tp in t))
        _end(e)
        return TxnStateEntry(error, tid, state, timeout, start, pid, epoch, parts)

    out = r.array(entry)
    _end(r)
    return out


@dataclass(frozen=True)
class ListTransactionsResponse:
    error_code: int
    unknown_state_filters: tuple[str, ...]
    transactions: tuple[tuple[str, int, str], ...]  # (transactional id, producer id, state)


def encode_list_transactions(version: int, states: Sequence[str],
                             id_pattern: str | None = None) -> bytes:
    w = Writer(True).array(list(states), Writer.string).array([], Writer.int64)
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
        _end(e)
        return out

    txns = tuple(r.array(entry))
    _end(r)
    return ListTransactionsResponse(error, unknown, txns)


# --- Fetch -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class FetchPartition:
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...] | None  # (producer id, first offset)
    records: bytes | None


def encode_fetch(version: int, topic: str | uuid.UUID, partition: int, offset: int,
                 max_bytes: int, leader_epoch: int = -1) -> bytes:
    """A one-partition, session-less, read_committed fetch that does not wait for data."""
    w = Writer(True)
    w.int32(-1).int32(0).int32(1).int32(max_bytes).int8(ISOLATION_READ_COMMITTED)
    w.int32(0).int32(-1)  # no fetch session

    def part(pw: Writer, _: int) -> None:
        pw.int32(partition).int32(leader_epoch).int64(offset).int32(-1).int64(-1).int32(max_bytes)
        pw.tags()

    def one_topic(tw: Writer, t: str | uuid.UUID) -> None:
        if version >= 13:
            if not isinstance(t, uuid.UUID):
                raise ValueError("Fetch v13+ addresses topics by id")
            tw.uuid(t)
        else:
            if not isinstance(t, str):
                raise ValueError("Fetch v12 addresses topics by name")
            tw.string(t)
        tw.array([0], part).tags()

    w.array([topic], one_topic)
    w.array([], Writer.int32)  # forgotten topics
    w.string("")  # rack id
    return w.tags().getvalue()


def decode_fetch(version: int, r: Reader) -> tuple[int, list[FetchPartition]]:
    r.int32()
    top_error = r.int16()
    r.int32()  # session id

    def aborted(a: Reader) -> tuple[int, int]:
        out = (a.int64(), a.int64())
        _end(a)
        return out

    def part(p: Reader) -> FetchPartition:
        index, error, hw, lso, lso_start = p.int32(), p.int16(), p.int64(), p.int64(), p.int64()
        aborted_txns = p.nullable_array(aborted)
        p.int32()  # preferred read replica
        records = p.nullable_bytes()
        _end(p)
        return FetchPartition(index, error, hw, lso, lso_start,
                              None if aborted_txns is None else tuple(aborted_txns), records)

    parts: list[FetchPartition] = []

    def topic(t: Reader) -> None:
        if version >= 13:
            t.uuid()
        else:
            t.string()
        parts.extend(t.array(part))
        _end(t)

    r.array(topic)
    _end(r)
    return top_error, parts


# --- ListOffsets ---------------------------------------------------------------------------

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
        _end(p)
        found.append((error, offset))

    def topic(t: Reader) -> None:
        t.string()
        t.array(part)
        _end(t)

    r.array(topic)
    _end(r)
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
            _end(p)
            out[(name, index)] = (error, offset)

        t.array(part)
        _end(t)

    r.array(topic)
    _end(r)
    return out


# --- DescribeProducers -------------------------------------------------------------------------

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
        _end(a)
        return p

    def topic(t: Reader) -> None:
        name = t.string()

        def part(p: Reader) -> None:
            index, error, message = p.int32(), p.int16(), p.nullable_string()
            producers = tuple(p.array(producer))
            _end(p)
            out.append(ProducerState(name, index, error, message, producers))

        t.array(part)
        _end(t)

    r.array(topic)
    _end(r)
    return out


# --- SASL --------------------------------------------------------------------------------------

def encode_sasl_handshake(version: int, mechanism: str) -> bytes:
    return Writer().string(mechanism).getvalue()


def decode_sasl_handshake(version: int, r: Reader) -> tuple[int, list[str]]:
    return r.int16(), r.array(Reader.string)


def encode_sasl_authenticate(version: int, auth_bytes: bytes) -> bytes:
    w = Writer(is_flexible(ApiKey.SASL_AUTHENTICATE, version))
    return w.blob(auth_bytes).tags().getvalue()


@dataclass(frozen=True)
class SaslAuthenticateResponse:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    # v1+ (KIP-368): how long the broker keeps the session after this, in ms; 0 = no limit. Past
    # it the broker closes the connection at the next request that is not a SaslHandshake.
    session_lifetime_ms: int = 0


def decode_sasl_authenticate(version: int, r: Reader) -> SaslAuthenticateResponse:
    error, message, data = r.int16(), r.nullable_string(), r.nullable_bytes() or b""
    lifetime = r.int64() if version >= 1 else 0
    _end(r)
    return SaslAuthenticateResponse(error, message, data, lifetime)
