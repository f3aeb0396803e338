"""The exactly-once audit: read a topic back as a read_committed consumer and count every record id.

This is the proof the project's claims rest on (and what `twopc verify` runs on users' topics): each
expected id exactly once, none missing, and no partition whose last stable offset lags its high
watermark (an open transaction that holds read_committed consumers back).

Design: docs/design.md section 7.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from twopc.control.oauth import librdkafka_config

IdOf = Callable[[Message], str | None]


def id_from_value(msg: Message) -> str | None:
    value = msg.value()
    return value.decode() if isinstance(value, bytes) else None


def id_from_key(msg: Message) -> str | None:
    key = msg.key()
    return key.decode() if isinstance(key, bytes) else None


def id_from_header(name: str) -> IdOf:
    def extract(msg: Message) -> str | None:
        for k, v in msg.headers() or []:
            if k == name and v is not None:
                return v.decode() if isinstance(v, bytes) else str(v)
        return None

    return extract


@dataclass(frozen=True)
class PartitionLag:
    partition: int
    last_stable_offset: int
    high_watermark: int


@dataclass
class AuditReport:
    topic: str
    records: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    without_id: int = 0
    expected: int | None = None
    missing: list[str] = field(default_factory=list)
    lagging: list[PartitionLag] = field(default_factory=list)

    @property
    def duplicates(self) -> dict[str, int]:
        return {k: n for k, n in self.counts.items() if n > 1}

    @property
    def unique(self) -> int:
        return len(self.counts)

    @property
    def passed(self) -> bool:
        return not self.duplicates and not self.missing and not self.lagging and not self.without_id

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"{verdict}: topic {self.topic}: {self.records} records read (read_committed), "
            f"{self.unique} distinct ids, {len(self.duplicates)} duplicated, {len(self.missing)} "
            f"missing, {self.without_id} without an id, {len(self.lagging)} partitions with an open "
            "transaction (last stable offset below high watermark)"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "passed": self.passed,
            "records": self.records,
            "distinct_ids": self.unique,
            "expected": self.expected,
            "duplicates": dict(sorted(self.duplicates.items())[:100]),
            "duplicate_count": len(self.duplicates),
            "missing": self.missing[:100],
            "missing_count": len(self.missing),
            "without_id": self.without_id,
            "lagging_partitions": [vars(lag) for lag in self.lagging],
        }


def partition_offsets(
    config: Mapping[str, str], topic: str, retry_s: float = 30.0
) -> dict[int, tuple[int, int]]:
    """partition -> (last stable offset, high watermark), asked with ListOffsets at both isolation levels.

    Retriable answers (a leader still being elected after a broker restart) are retried for `retry_s`.
    """
    deadline = time.monotonic() + retry_s
    while True:
        try:
            return _partition_offsets(config, topic)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            transient = isinstance(err, KafkaError) and (
                err.retriable() or err.code() in _TRANSIENT_CODES
            )
            if not transient or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


_TRANSIENT_CODES = frozenset({
    KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH,
})


def _partition_offsets(config: Mapping[str, str], topic: str) -> dict[int, tuple[int, int]]:
    # log_level 3: librdkafka otherwise reports its own clean-up of answered requests at info level.
    admin = AdminClient({**librdkafka_config(config), "log_level": 3})
    md = admin.list_topics(topic, timeout=10)
    tmeta = md.topics.get(topic)
    if tmeta is None or tmeta.error is not None:
        raise KafkaException(tmeta.error if tmeta else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    parts = sorted(tmeta.partitions)
    result: dict[int, list[int]] = {p: [0, 0] for p in parts}
    for slot, level in enumerate((IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED)):
        request = {TopicPartition(topic, p): OffsetSpec.latest() for p in parts}
        futures = admin.list_offsets(request, isolation_level=level, request_timeout=15)
        for tp, fut in futures.items():
            result[tp.partition][slot] = fut.result().offset
    return {p: (v[0], v[1]) for p, v in result.items()}


def wait_until_stable(config: Mapping[str, str], topic: str, timeout_s: float) -> bool:
    """Wait (bounded) until no partition's last stable offset lags its high watermark.

    A committed transaction's markers are written after `commit_transaction()` returns, and after a
    coordinator restart only once it has reloaded its log; an audit taken in that window sees an open
    transaction that is in fact decided.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if all(lso == hw for lso, hw in partition_offsets(config, topic).values()):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def audit_topic(
    config: Mapping[str, str],
    topic: str,
    expected_ids: Iterable[str] | None = None,
    id_of: IdOf = id_from_value,
    timeout_s: float = 60.0,
    settle_s: float = 30.0,
) -> AuditReport:
    """Read `topic` to its last stable offset with read_committed and count ids.

    `settle_s` first waits (bounded) for open transactions to end: EndTxn answers before the commit
    markers are written, so an audit right after a commit may otherwise see a transaction still open
    and none of its records (a loaded machine stretches that window to seconds). 0 takes the topic as
    it is now, for a test that expects a transaction to be open.
    """
    if settle_s > 0:
        wait_until_stable(config, topic, settle_s)
    report = AuditReport(topic)
    offsets = partition_offsets(config, topic)
    report.lagging = [
        PartitionLag(p, lso, hw) for p, (lso, hw) in sorted(offsets.items()) if lso < hw
    ]
    consumer = Consumer(
        {
            **{k: v for k, v in librdkafka_config(config).items()
               if not k.startswith("transaction")},
            "group.id": f"twopc-audit-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            # A partition's end shows as a fetch that comes back empty, which the broker holds
            # for fetch.wait.max.ms (500 by default) before it answers.
            "fetch.wait.max.ms": 10,
        }
    )
    try:
        pending = {p for p, (lso, _) in offsets.items() if lso > 0}
        # From each partition's log start, not offset 0: retention (or deleted records) moves it,
        # and offset 0 is then out of range (auto.offset.reset=error raised).
        # The topic's metadata first: assigned before it knows a partition's leader, librdkafka
        # retries the log-start lookup on a fixed half-second timer. Only a speed-up: a failure
        # here (a broker restarting) leaves the consumer to find the leaders itself.
        with contextlib.suppress(KafkaException):
            consumer.list_topics(topic, timeout=10)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(pending)])
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"audit of {topic} did not reach the end of partitions {pending}"
                )
            # consume() returns only when it has its 1,000 messages or at its timeout: a short
            # timeout, so that the last partition's EOF ends the read without a second's idling.
            for msg in consumer.consume(1000, timeout=0.05):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        # Read to its end: stop fetching it (with a 10 ms fetch wait, an ended
                        # partition would be asked again a hundred times a second meanwhile).
                        consumer.pause([TopicPartition(topic, msg.partition())])
                        continue
                    raise KafkaException(err)
                report.records += 1
                rid = id_of(msg)
                if rid is None:
                    report.without_id += 1
                else:
                    report.counts[rid] += 1
    finally:
        consumer.close()
    if expected_ids is not None:
        expected = list(expected_ids)
        report.expected = len(expected)
        report.missing = sorted(set(expected) - set(report.counts))
    return report
