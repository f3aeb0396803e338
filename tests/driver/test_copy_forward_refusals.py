"""Copy-forward's refusals against a real broker (issue 31 B): a decided transaction aborted by
the broker whose records the log no longer holds is never copied, and never silently replaced by
the re-run's rows. Under `copy` the commit raises CopyForwardFailed; under `auto` the re-run
repair takes over and, since the re-run differs, raises DataLossError; both name why the records
cannot be copied. The retention case (delete_records) is in test_copy_forward.py; here the
compacted topic and the re-created topic.

How copy-forward sees each (twopc/control/partitions.py `read_transaction`, readback.py `Scan`):
- compaction is not refused on the topic's config: a compacted topic whose cleaner has not yet
  reached the aborted records is copied like any other (they verify). Once the cleaner has dropped
  them (it drops aborted transactions' batches), the read finds no batch of the transaction at its
  first offset: `ReadProblem.NO_BATCH`, "(compacted, or another producer)";
- a re-created topic by its topic id: the handle records each span's topic id, and the read
  compares it with the topic's id now (`ReadProblem.TOPIC_CHANGED`, "deleted or re-created").

A count or checksum that does not match the handle has no honest real-broker cause (the records of
one producer id and epoch up to its marker are what that producer wrote; the writer's producer is
gone once the handle exists): verify_copy's mismatches are covered by the unit tests
(tests/protocol/test_copies.py) and the read's "more records than counted" on real broker bytes
by tests/control/test_readback.py."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from tests.driver.support import Scenario
from tests.driver.test_copy_forward import (
    assert_records_exact,
    decided_then_timed_out,
    driver,
    handles_of,
    refused_loudly,
    rerun_with_other_rows,
)
from twopc.control import ControlClient, KafkaApiError
from twopc.protocol.copies import RepairPolicy
from twopc.protocol.handle import Handle, PartitionSpan

pytestmark = pytest.mark.integration

LOST = 3  # the Spark partition whose transaction times out: the only writer of its partition


def lost_span(results: list[Handle], p: int = LOST) -> tuple[Handle, PartitionSpan]:
    [lost] = [h for h in results if h.task_partition == p]
    [span] = lost.spans
    return lost, span


def alter_topic(scenario: Scenario, topic: str, **configs: str) -> None:
    admin = AdminClient(scenario.broker.config())
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    for f in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)]).values():
        f.result(30)


def test_a_compacted_topic_is_copied_until_its_cleaner_drops_the_records(
        scenario: Scenario, control: ControlClient) -> None:
    """cleanup.policy=compact alone refuses nothing: the aborted records are still in the
    partition's active segment, where the cleaner never goes, and they verify."""
    results = decided_then_timed_out(scenario, control, (LOST,))
    _, span = lost_span(handles_of(results))
    alter_topic(scenario, span.topic, cleanup_policy="compact")
    report = driver(scenario, control, RepairPolicy.COPY).commit(
        "0", rerun_with_other_rows(scenario))
    assert report.status == "copied" and len(report.committed) == 1, report
    scenario.expect("0")
    scenario.audit()
    assert_records_exact(scenario)


def first_offset_readable(scenario: Scenario, span: PartitionSpan) -> int | None:
    """The offset of the first record at or after the span's first offset, read_uncommitted
    (None: nothing within the poll)."""
    c = Consumer({**scenario.broker.config(), "group.id": f"cleaned-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_uncommitted", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(span.topic, span.partition, span.first_offset)])
        msg = c.poll(5)
        return None if msg is None or msg.error() else msg.offset()
    finally:
        c.close()


def test_records_the_cleaner_dropped_are_refused_naming_compaction(
        scenario: Scenario, control: ControlClient) -> None:
    results = decided_then_timed_out(scenario, control, (LOST,))
    _, span = lost_span(handles_of(results))
    assert first_offset_readable(scenario, span) == span.first_offset
    # Compacted, and a segment that rolls at the next append (the rich records are stamped an
    # hour back; a segment rolls once its records span segment.ms): a transaction of another id,
    # aborted (invisible to the audit), appended to the partition closes the segment holding the
    # lost records, which the cleaner may then clean (never the active segment).
    alter_topic(scenario, span.topic, cleanup_policy="compact", segment_ms="60000",
                min_cleanable_dirty_ratio="0.01")
    p = Producer({**scenario.broker.config(), "transactional.id": f"roll-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(span.topic, b"roll", b"roll", partition=span.partition)
    p.flush(30)
    p.abort_transaction(30)
    # The cleaner drops the aborted transaction's batches (it looks every 15 s,
    # log.cleaner.backoff.ms): the first record at or after the lost first offset moves on.
    deadline = time.monotonic() + 120
    while first_offset_readable(scenario, span) == span.first_offset:
        assert time.monotonic() < deadline, "the cleaner did not drop the aborted records"
        time.sleep(2)
    refused_loudly(scenario, control, "compacted", visible=(0, 1, 2))


def recreate(scenario: Scenario, control: ControlClient, topic: str, partitions: int) -> str:
    """Delete `topic`, create it again under its name; its new topic id once the broker serves
    it."""
    admin = AdminClient(scenario.broker.config())
    admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
    deadline = time.monotonic() + 60
    while True:  # the deletion completes in the background: TOPIC_ALREADY_EXISTS meanwhile
        try:
            scenario.broker.create_topic(partitions, name=topic)
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    while True:  # created on the controller; the broker's metadata follows a moment later
        try:
            return control.topic_ids([topic])[topic]
        except KafkaApiError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_recreated_topic_is_refused_naming_it(scenario: Scenario,
                                                control: ControlClient) -> None:
    """Spark partitions 1 and 3 (both on topics[1], which holds nothing visible) lost; the topic
    is deleted and created again under its name, with the same partitions, before the re-run."""
    lost = (1, 3)
    topic = scenario.topics[1]
    assert {scenario.topic_of(p) for p in lost} == {topic}
    results = handles_of(decided_then_timed_out(scenario, control, lost))
    before = control.topic_ids([topic])[topic]
    assert {lost_span(results, p)[1].topic_id for p in lost} == {before}
    assert recreate(scenario, control, topic, 2) != before
    refused_loudly(scenario, control, "re-created", visible=(0, 2))
