"""Found by the torture run (tests/torture): a broker SIGKILLed mid-commit dropped a committed
batch's markers (twopc/driver/stranded.py).

1. kafka4-tv0 seed 20261125, kafka4-tv2 seed 20261136: the query went on, and nothing but a
   restart's recover() released the stranded commit, so the partition's last stable offset stayed
   below it, hiding that batch and every later record of the partition.
2. kafka4-tv2 seeds 20261146, 20261188, 20261223, kafka4-tv0 seed 20261156: the next batch wrote
   on the same transactional ids and failed; recovery fenced its open transactions before it
   released the stranded commit, and the fence's ABORT markers (one producer id, one open
   transaction per partition) ended the stranded records as aborted: a committed batch lost.
commit() now returns only once its own markers landed or were released, and every fence (recovery's
sweep, abort, the guard) releases stranded commits first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from checkpoint import open_log
from tests.broker.test_restart_mid_commit import StuckCommit, _producer, _stranded_commit
from tests.driver.support import Scenario
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient
from twopc.log.session import Session
from twopc.ops.audit import audit_topic, wait_until_stable
from twopc.protocol.handle import Handle, PartitionSpan, ResultKind, WriteResult
from twopc.protocol.log_records import Committed, Prepared, Released, from_body

pytestmark = [pytest.mark.integration, pytest.mark.only_variants("kafka4-tv2", "kafka4-tv0")]


def test_the_next_commit_releases_an_earlier_batchs_stranded_commit(
        broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path) -> None:
    stuck, scenario = _stuck_and_scenario(broker, make_topic, tmp_path)
    with ControlClient(broker.config()) as control:
        handle = _handle_of(stuck, control)
        coord = scenario.driver(control)
        coord.bind()
        session = Session(coord.log)
        # Batch 0 as commit() records it: the intent, then committed (EndTxn had answered).
        session.append(Committed("0", session.append(Prepared("0", (handle,))), ()))
        # The query goes on without a restart: batch 1 writes elsewhere and commits.
        assert coord.commit("1", scenario.write("1")).status == "committed"
        records = [from_body(r.body) for r in open_log(scenario.log_url).records()]
        [released] = [r for r in records if isinstance(r, Released)]
        assert released.ids == (stuck.transactional_id,) and released.batches == ("0",)
    assert wait_until_stable(broker.config(), stuck.topic, 60)
    audit = audit_topic(broker.config(), stuck.topic, expected_ids=stuck.ids)
    assert audit.passed and audit.records == len(stuck.ids), audit.summary()
    scenario.expect("1")
    scenario.audit()


def test_a_commit_releases_its_own_stranded_markers_before_a_later_fence_can_abort_them(
        broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path) -> None:
    stuck, scenario = _stuck_and_scenario(broker, make_topic, tmp_path)
    with ControlClient(broker.config()) as control:
        handle = _handle_of(stuck, control)
        coord = scenario.driver(control)
        coord.bind()
        # The driver recorded its intent and ended the transaction, then died; the restarted
        # driver's commit of that batch finds the coordinator done. It must not return with the
        # partitions still held open.
        session = Session(coord.log)
        session.append(Prepared("0", (handle,)))
        result = WriteResult(ResultKind.PRECOMMITTED, "0", 0, 0, handle, len(stuck.ids))
        assert coord.commit("0", [result]).status == "already_committed"
        records = [from_body(r.body) for r in open_log(scenario.log_url).records()]
        assert [r.batches for r in records if isinstance(r, Released)] == [("0",)]
        # The next batch's task writes on the same transactional id to the same partitions, and
        # dies; its transaction is fenced (by recovery's sweep, abort(), or the broker's
        # timeout). Its ABORT markers must find nothing of batch 0 still open.
        for partition in sorted(stuck.stuck):
            _producer(broker, stuck.topic, stuck.transactional_id, "open", 1,
                      f"orphan-{partition}-", partition)
        fenced = control.fence([stuck.transactional_id])[stuck.transactional_id]
        assert fenced.error is None, fenced
    assert wait_until_stable(broker.config(), stuck.topic, 60)
    audit = audit_topic(broker.config(), stuck.topic, expected_ids=stuck.ids)
    assert audit.passed and audit.records == len(stuck.ids), audit.summary()


def _stuck_and_scenario(broker: KafkaUnderTest, make_topic: Callable[..., str],
                        tmp_path: Path) -> tuple[StuckCommit, Scenario]:
    """A commit the broker's kill stranded (the kill is retried until markers are dropped), and a
    scenario whose prefix covers its transactional id."""
    stuck = _stranded_commit(broker, make_topic)
    return stuck, Scenario(broker, (make_topic(2), make_topic(2)), str(tmp_path / "log"),
                           prefix=stuck.transactional_id.rsplit("-", 1)[0])


def _handle_of(stuck: StuckCommit, control: ControlClient) -> Handle:
    topic_id = control.topic_ids([stuck.topic])[stuck.topic]
    spans = tuple(PartitionSpan(stuck.topic, p, first, first, 1, topic_id)
                  for p, first in sorted(stuck.first_offsets.items()))
    return Handle(stuck.transactional_id, stuck.producer_id, stuck.epoch, spans,
                  len(stuck.ids), "c", 0, 60000, 0, 0, 0)
