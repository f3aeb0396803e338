"""Request encoders and response decoders for the few Kafka APIs the control plane needs.

Each layout follows Apache Kafka's JSON message definitions
(clients/src/main/resources/common/message) for the versions listed in CLIENT_VERSIONS.
Pure: bytes in, dataclasses out.

Design: docs/design.md section 3.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from twopc.control.errors import UnsupportedBrokerError
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
ISOLATION_READ_UNCOMMITTED = 0
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


def expect_end(r: Reader) -> None:
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
        expect_end(e)
        versions[key] = (low, high)

    r.array(entry)
    r.int32()  # throttle
    features: dict[str, int] = {}
    tags = r.tags()
    if 2 in tags:  # FinalizedFeatures: name, max version level, min version level
        fr = Reader(tags[2], flexible=True)

        def feature(e: Reader) -> None:
            name, max_level, _ = e.string(), e.int16(), e.int16()
            expect_end(e)
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
        expect_end(b)
        return info

    brokers = r.array(broker)
    cluster_id = r.nullable_string()
    controller = r.int32()

    def partition(p: Reader) -> PartitionInfo:
        info = PartitionInfo(p.int16(), p.int32(), p.int32(), p.int32())
        p.array(Reader.int32)  # replicas
        p.array(Reader.int32)  # isr
        p.array(Reader.int32)  # offline
        expect_end(p)
        return info

    def topic(t: Reader) -> TopicInfo:
        error, name, topic_id = t.int16(), t.nullable_string(), t.uuid()
        t.bool()  # internal
        parts = tuple(t.array(partition))
        t.int32()  # authorized operations
        expect_end(t)
        return TopicInfo(error, name, topic_id, parts)

    topics = r.array(topic)
    expect_end(r)
    return MetadataResponse(tuple(brokers), cluster_id, controller, tuple(topics))


# --- FindCoordinator -------------------------------------------------------------------------

@dataclass(frozen=True)
class CoordinatorAddress:
    """A FindCoordinator answer for one key: the broker that coordinates it (or why none does)."""

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


def decode_find_coordinator(version: int, r: Reader, keys: Sequence[str]) -> list[CoordinatorAddress]:
    r.int32()  # throttle
    if version >= 4:
        def one(c: Reader) -> CoordinatorAddress:
            coord = CoordinatorAddress(c.string(), c.int32(), c.string(), c.int32(), c.int16(),
                                c.nullable_string())
            expect_end(c)
            return coord

        out = r.array(one)
        expect_end(r)
        return out
    error, message = r.int16(), r.nullable_string()
    node, host, port = r.int32(), r.string(), r.int32()
    expect_end(r)
    return [CoordinatorAddress(keys[0], node, host, port, error, message)]


# --- InitProducerId and EndTxn -------------------------------------------------------------


# --- AddPartitionsToTxn (client versions 0-3 only) -------------------------------------------


# --- DescribeTransactions and ListTransactions ---------------------------------------------


# --- Fetch -----------------------------------------------------------------------------------


# --- ListOffsets ---------------------------------------------------------------------------


# --- DescribeProducers -------------------------------------------------------------------------


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
    expect_end(r)
    return SaslAuthenticateResponse(error, message, data, lifetime)
