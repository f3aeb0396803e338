"""An ended transaction's records read back from the log (copy-forward's read, issue 31 B), on bytes
the real broker wrote: every compression codec of librdkafka, the broker's own recompression
(Java's snappy framing, gzip), other producers' batches in between, reads of several fetches, and
records that are gone."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, Ending, ReadProblem, Record, SpanRecords

pytestmark = pytest.mark.integration


@pytest.fixture
def client(broker: KafkaUnderTest) -> Iterator[ControlClient]:
    c = ControlClient(broker.config())
    yield c
    c.close()


@dataclass
class Written:
    producer_id: int
    epoch: int
    first: dict[int, int]  # partition -> first offset
    records: dict[int, list[tuple[bytes | None, bytes, tuple[tuple[str, bytes | None], ...], int]]]


def rows(n: int, tag: str) -> list[tuple[bytes | None, bytes, list[tuple[str, bytes | None]], int]]:
    base = 1_700_000_000_000
    out: list[tuple[bytes | None, bytes, list[tuple[str, bytes | None]], int]] = []
    for i in range(n):
        key = None if i % 5 == 0 else f"k{i}".encode()
        headers: list[tuple[str, bytes | None]] = []
        if i % 3 == 0:
            headers = [("h", f"v{i}".encode()), ("nul", None), ("é", b"")]
        value = (f"{tag}-{i}-" + "x" * (i % 300)).encode()
        out.append((key, value, headers, base + i * 7))
    return out


def write_txn(broker: KafkaUnderTest, client: ControlClient, topic: str, n: int, *,
              end: str, compression: str = "none", partitions: tuple[int, ...] = (0,),
              interleave: bool = False) -> Written:
    tid = f"rb-{uuid.uuid4().hex[:8]}"
    p = Producer({**broker.config(), "transactional.id": tid, "compression.type": compression,
                  "linger.ms": 5, "batch.num.messages": 37})
    other = Producer({**broker.config(), "linger.ms": 0}) if interleave else None
    p.init_transactions(30)
    p.begin_transaction()
    written: dict[int, list[tuple[bytes | None, bytes, tuple[tuple[str, bytes | None], ...], int]]]
    written = {q: [] for q in partitions}
    first: dict[int, int] = {}

    def on_delivery(err: object, msg: object) -> None:
        assert err is None, err
        q, off = msg.partition(), msg.offset()
        first[q] = min(first.get(q, off), off)

    for i, (key, value, headers, ts) in enumerate(rows(n, compression)):
        q = partitions[i % len(partitions)]
        p.produce(topic, value, key, partition=q, headers=headers or None, timestamp=ts,
                  on_delivery=on_delivery)
        written[q].append((key, value, tuple(headers), ts))
        if other is not None and i % 50 == 25:
            p.flush(30)
            other.produce(topic, b"other", partition=q)
            other.flush(30)
    p.flush(30)
    desc = client.describe_transactions([tid])[tid]
    if end == "abort":
        p.abort_transaction(30)
    else:
        p.commit_transaction(30)
    return Written(desc.producer_id, desc.producer_epoch, first, written)


def as_rows(records: tuple[Record, ...]) -> list[tuple[bytes | None, bytes | None,
                                                       tuple[tuple[str, bytes | None], ...], int]]:
    return [(r.key, r.value, r.headers, r.timestamp) for r in records]


def read(client: ControlClient, topic: str, w: Written, q: int, *, max_bytes: int = 1 << 20,
         expected: int | None = None, topic_id: str | None = None) -> SpanRecords:
    deadline = time.monotonic() + 20
    while True:
        got = client.read_transaction(topic, q, w.first[q], w.producer_id, w.epoch, topic_id,
                                      len(w.records[q]) if expected is None else expected,
                                      max_bytes=max_bytes)
        # The marker lands a few milliseconds after the producer's EndTxn returns.
        if got.problem is not ReadProblem.NO_MARKER or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_aborted_records_read_back_exactly_for_every_codec(
        broker: KafkaUnderTest, client: ControlClient, compression: str) -> None:
    topic = broker.create_topic(2)
    w = write_txn(broker, client, topic, 400, end="abort", compression=compression,
                  partitions=(0, 1), interleave=True)
    topic_id = client.topic_ids([topic])[topic]
    for q in (0, 1):
        got = read(client, topic, w, q, topic_id=topic_id)
        assert got.problem is None, got.describe()
        assert got.ending is Ending.ABORTED
        assert as_rows(got.records) == w.records[q]
        offsets = [r.offset for r in got.records]
        assert offsets[0] == w.first[q] and offsets == sorted(offsets)


@pytest.mark.parametrize("topic_codec", ["snappy", "gzip"])
def test_records_the_broker_recompressed_read_back(
        broker: KafkaUnderTest, client: ControlClient, topic_codec: str) -> None:
    """A topic whose compression.type differs from the producer's is recompressed by the broker
    with Java's codecs: snappy then comes in xerial's framing, not librdkafka's raw block."""
    topic = broker.create_topic(1, config={"compression.type": topic_codec})
    w = write_txn(broker, client, topic, 120, end="abort", compression="none")
    got = read(client, topic, w, 0)
    assert got.problem is None, got.describe()
    assert as_rows(got.records) == w.records[0]


def test_a_small_byte_limit_reads_in_several_fetches_and_a_commit_is_told(
        broker: KafkaUnderTest, client: ControlClient) -> None:
    topic = broker.create_topic(1)
    w = write_txn(broker, client, topic, 300, end="commit", interleave=True)
    got = read(client, topic, w, 0, max_bytes=2048)
    assert got.problem is None, got.describe()
    assert got.ending is Ending.COMMITTED
    assert got.fetches > 3
    assert as_rows(got.records) == w.records[0]


def test_more_records_than_counted_another_epoch_and_gone_records_are_named(
        broker: KafkaUnderTest, client: ControlClient) -> None:
    topic = broker.create_topic(1)
    w = write_txn(broker, client, topic, 50, end="abort")
    too_many = read(client, topic, w, 0, expected=49)
    assert too_many.problem is ReadProblem.TOO_MANY
    w_other = Written(w.producer_id, w.epoch + 7, w.first, w.records)
    assert read(client, topic, w_other, 0).problem is ReadProblem.OTHER_EPOCH
    w_pid = Written(w.producer_id + 1000, w.epoch, w.first, w.records)
    assert read(client, topic, w_pid, 0).problem is ReadProblem.NO_BATCH
    wrong_id = "00000000-0000-0000-0000-000000000001"
    moved = read(client, topic, w, 0, topic_id=wrong_id)
    assert moved.problem is ReadProblem.TOPIC_CHANGED
    admin = AdminClient(broker.config())
    for f in admin.delete_records([TopicPartition(topic, 0, w.first[0] + 1)]).values():
        f.result(30)
    gone = read(client, topic, w, 0)
    assert gone.problem is ReadProblem.BELOW_LOG_START, gone.describe()


def test_an_open_transaction_has_no_marker(broker: KafkaUnderTest,
                                           client: ControlClient) -> None:
    topic = broker.create_topic(1)
    tid = f"rb-{uuid.uuid4().hex[:8]}"
    p = Producer({**broker.config(), "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    first: list[int] = []
    for i in range(5):
        p.produce(topic, f"v{i}".encode(), partition=0,
                  on_delivery=lambda err, msg: first.append(msg.offset()))
    p.flush(30)
    desc = client.describe_transactions([tid])[tid]
    got = client.read_transaction(topic, 0, min(first), desc.producer_id, desc.producer_epoch,
                                  None, 5)
    assert got.problem is ReadProblem.NO_MARKER, got.describe()
    p.abort_transaction(30)
