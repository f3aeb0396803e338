"""`log_checks` of many spans at once, on the real broker: one fetch per partition from its lowest
span answers the spans above it (the broker then lists earlier aborted transactions of the same
producer id too), and the partitions of one leader share a Fetch request. Every verdict must equal
the one a fetch at the span itself gives (`log_check`), and the truth.

The log holds what makes a ranged fetch hard: one producer id's aborted transaction between its
committed ones at the same epoch (librdkafka's transactions keep the epoch), the same producer id
at a bumped epoch after an aborted one (a new producer on the id), an outside abort
(`kafka-transactions.sh abort`) of a transaction that is then committed (ABORT then COMMIT marker
of one producer id), plain idempotent batches between, and an open transaction at the end that
holds the last stable offset back.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer
from twopc_testing.kafka_tools import abort_hanging

from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, LogCheckRequest, LogOutcome, UnknownReason
from twopc.control import faults as f
from twopc.control import log_checks as lc

pytestmark = pytest.mark.integration

PARTITIONS = 3


@dataclass(frozen=True)
class Span:
    partition: int
    offset: int
    producer_id: int
    epoch: int
    expected: LogOutcome


@pytest.fixture
def client(broker: KafkaUnderTest) -> Iterator[ControlClient]:
    with ControlClient(broker.config()) as c:
        yield c


class Writer:
    """One transactional id's producer; each transaction's first offset per partition."""

    def __init__(self, broker: KafkaUnderTest, client: ControlClient, topic: str,
                 tid: str | None = None) -> None:
        self.tid = tid or f"rng-{uuid.uuid4().hex[:8]}"
        self.topic, self.client = topic, client
        self.p = Producer({**broker.config(), "transactional.id": self.tid, "linger.ms": 2})
        self.p.init_transactions(30)

    def write(self, n: int = 3, partitions: tuple[int, ...] = tuple(range(PARTITIONS))
              ) -> tuple[int, int, dict[int, int]]:
        first: dict[int, int] = {}

        def delivered(err: object, msg: object) -> None:
            assert err is None, err
            q, off = msg.partition(), msg.offset()  # type: ignore[attr-defined]
            first[q] = min(first.get(q, off), off)

        self.p.begin_transaction()
        for q in partitions:
            for i in range(n):
                self.p.produce(self.topic, f"{self.tid}-{i}".encode(), partition=q,
                               on_delivery=delivered)
        self.p.flush(30)
        d = self.client.describe_transactions([self.tid])[self.tid]
        return d.producer_id, d.producer_epoch, first


def spans_of(pid: int, epoch: int, first: dict[int, int], outcome: LogOutcome,
             except_for: dict[int, LogOutcome] | None = None) -> list[Span]:
    return [Span(q, off, pid, epoch, (except_for or {}).get(q, outcome))
            for q, off in sorted(first.items())]


def plain(broker: KafkaUnderTest, topic: str) -> None:
    p = Producer({**broker.config(), "enable.idempotence": True})
    for q in range(PARTITIONS):
        p.produce(topic, b"plain", partition=q)
    p.flush(30)


def test_one_fetch_per_leader_answers_every_span_as_a_fetch_at_each_span(
        broker: KafkaUnderTest, make_topic: Callable[..., str], client: ControlClient) -> None:
    topic = make_topic(partitions=PARTITIONS)
    spans: list[Span] = []
    a = Writer(broker, client, topic)
    for end in ("commit", "abort", "commit", "abort", "commit"):
        pid, epoch, first = a.write()
        if end == "commit":
            a.p.commit_transaction(30)
        else:
            a.p.abort_transaction(30)
        spans += spans_of(pid, epoch, first, LogOutcome.COMMITTED if end == "commit"
                          else LogOutcome.ABORTED)
        plain(broker, topic)
    # The same id on a new producer: same producer id, next epoch, after an aborted attempt.
    b = Writer(broker, client, topic)
    pid, epoch, first = b.write()
    b.p.abort_transaction(30)
    spans += spans_of(pid, epoch, first, LogOutcome.ABORTED)
    b2 = Writer(broker, client, topic, tid=b.tid)
    pid2, epoch2, first = b2.write()
    assert (pid2, epoch2) == (pid, epoch + 1), "a new producer on the id bumps its epoch"
    b2.p.commit_transaction(30)
    spans += spans_of(pid2, epoch2, first, LogOutcome.COMMITTED)
    # Aborted from outside in partition 1, then committed: aborted there, committed elsewhere.
    c = Writer(broker, client, topic)
    pid, epoch, first = c.write()
    abort_hanging(broker.bootstrap_servers, topic, 1, first[1])
    c.p.commit_transaction(30)
    spans += spans_of(pid, epoch, first, LogOutcome.COMMITTED, {1: LogOutcome.ABORTED})
    # More of producer a after that: its id's aborted entries lie below these.
    pid, epoch, first = a.write()
    a.p.commit_transaction(30)
    spans += spans_of(pid, epoch, first, LogOutcome.COMMITTED)
    # Left open: its spans, and one committed after it, are not stable yet.
    d = Writer(broker, client, topic)
    pid_d, epoch_d, first_d = d.write()
    e = Writer(broker, client, topic)
    pid, epoch, first = e.write()
    e.p.commit_transaction(30)
    spans += spans_of(pid_d, epoch_d, first_d, LogOutcome.NOT_YET_STABLE)
    spans += spans_of(pid, epoch, first, LogOutcome.NOT_YET_STABLE)
    # Wait for every marker before the open transaction: then nothing moves between the looks.
    deadline = time.monotonic() + 30
    while client.last_stable_offsets([(topic, q) for q in first_d]) != {
            (topic, q): off for q, off in first_d.items()}:
        assert time.monotonic() < deadline, "markers never landed"
        time.sleep(0.05)
    real_id = client.topic_ids([topic])[topic]
    checks = [LogCheckRequest(topic, s.partition, s.offset, s.producer_id, s.epoch, real_id)
              for s in spans]
    # Not ours at those offsets: another epoch of the same producer id, another producer.
    odd = [LogCheckRequest(topic, s.partition, s.offset, s.producer_id, s.epoch + 1, real_id)
           for s in spans[:3]]
    odd += [LogCheckRequest(topic, spans[0].partition, spans[0].offset, spans[0].producer_id + 99,
                            spans[0].epoch, None)]
    alone = [client.log_check(c.topic, c.partition, c.offset, c.producer_id, c.epoch, c.topic_id)
             for c in checks + odd]
    for s, r in zip(spans, alone, strict=False):
        assert r.outcome is s.expected, (s, r.describe())
    assert [r.reason for r in alone[len(spans):]] == [UnknownReason.OTHER_EPOCH] * 3 + [
        UnknownReason.OTHER_PRODUCER]

    def verdicts(results: list) -> list[tuple[LogOutcome, UnknownReason | None]]:
        return [(r.outcome, r.reason) for r in results]

    # Every Fetch request counted (a 0 s delay fires on each, changing nothing).
    with f.injected(f.FaultPlan((f.Fault("FETCH", f.Action.DELAY),))) as plan:
        together = client.log_checks(checks + odd)
    assert verdicts(together) == verdicts(alone)
    # One leader: one request for the spans named by topic id, one for the one named by name.
    assert len(plan.fired) == 2, f"Fetch requests: {len(plan.fired)}"
    # A byte limit that reaches one batch at a time: many rounds, the same verdicts.
    limit = lc.SPANS_MAX_BYTES
    lc.SPANS_MAX_BYTES = 1
    try:
        with f.injected(f.FaultPlan((f.Fault("FETCH", f.Action.DELAY),))) as plan:
            small = client.log_checks(checks + odd)
    finally:
        lc.SPANS_MAX_BYTES = limit
    assert verdicts(small) == verdicts(alone)
    assert len(plan.fired) > 1
    # Asked in another order: answers still in the order asked.
    backwards = client.log_checks(list(reversed(checks)))
    assert verdicts(backwards) == list(reversed(verdicts(alone[:len(checks)])))


def test_a_partition_that_fails_leaves_the_others_answered(
        broker: KafkaUnderTest, make_topic: Callable[..., str], client: ControlClient) -> None:
    topic = make_topic(partitions=2)
    w = Writer(broker, client, topic)
    pid, epoch, first = w.write(partitions=(0, 1))
    w.p.commit_transaction(30)
    checks = [LogCheckRequest(topic, q, off, pid, epoch) for q, off in sorted(first.items())]
    deadline = time.monotonic() + 30
    while any(r.outcome is LogOutcome.NOT_YET_STABLE for r in client.log_checks(checks)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    missing = LogCheckRequest(topic, 7, 0, pid, epoch)  # no such partition
    got = client.log_checks([checks[0], missing, checks[1]], budget_s=1.0)
    assert [r.outcome for r in got] == [LogOutcome.COMMITTED, LogOutcome.UNKNOWN,
                                        LogOutcome.COMMITTED], [r.describe() for r in got]
    assert got[1].reason is UnknownReason.FETCH_ERROR
