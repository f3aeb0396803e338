"""Issue 30, item 5: one unreadable partition must not block every commit.

After every commit the driver checks the markers of every committed batch the log still holds
(stranded commits: docs/design.md section 8). A partition among an older batch's spans whose leader
is down cannot be read; the check then failed every new commit with CommitUnverified, even those
of batches that never touched it. Now only the commit's own batch can fail it: the older batch's
id stays held (no task takes it) and later checks look again.

On the replicated cluster (`kafka4-3node`): topic A has one replica, on the broker the test kills;
topic B has three. Batch 0 writes to both, batch 1 (written while A is offline) to B only.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.driver.support import Scenario
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient
from twopc.log.session import Session
from twopc.ops.audit import audit_topic, wait_until_stable

pytestmark = [pytest.mark.integration, pytest.mark.only_variants("kafka4-3node")]


def _topic_on_one_broker(broker: KafkaUnderTest, node_id: int) -> str:
    name = f"one-replica-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    # confluent-kafka wants the partition count with an assignment, and no replication factor.
    admin.create_topics([NewTopic(name, 2, -1, replica_assignment=[[node_id], [node_id]],
                                  config={"min.insync.replicas": "1"})])[name].result(60)
    return name


def test_a_commit_that_does_not_touch_an_unreadable_partition_succeeds(
        broker: KafkaUnderTest, control: ControlClient, tmp_path: Path) -> None:
    assert broker.local is not None and len(broker.local.brokers) == 3
    b = broker.create_topic(2)
    # A prefix whose transaction coordinators leave one broker free: that one is killed. (Kafka
    # places an id by its Java hash mod the 3 partitions of __transaction_state: ids ending -0-0,
    # -1-0 and -1-1 always land on three different ones; -1-3 lands with -1-0.)
    for _ in range(100):
        # Spark partition 0 writes to A, 1 to B (Scenario.topic_of).
        scenario = Scenario(broker, ("", b), str(tmp_path / "log"), partitions=2)
        ids = [scenario.txn("0", p)["tid"] for p in range(scenario.partitions)]
        ids += [scenario.txn("1", 1, slot=3)["tid"]]
        coordinators = set(control.coordinators(ids).values())
        free = [n.node_id for n in broker.local.brokers if n.node_id not in coordinators]
        if free:
            break
    assert free, f"every broker coordinates one of {ids}"
    victim = free[0]
    a = _topic_on_one_broker(broker, victim)
    scenario.topics = (a, b)
    driver = scenario.driver(control, stranded_wait_ms=3000)

    assert driver.commit("0", scenario.write("0")).status == "committed"
    scenario.expect("0")
    broker.kill(victim)
    try:
        # Batch 1 writes only to topic B (Spark partition 1), with another slot.
        txns = [scenario.txn("1", 1, slot=3)]
        results = scenario.write("1", txns)
        began = time.monotonic()
        report = scenario.driver(control, stranded_wait_ms=3000).commit("1", results)
        took = time.monotonic() - began
        assert report.status == "committed", report
        print(f"commit of batch 1 with topic {a} offline: {took:.1f} s")
        state = Session(driver.log).state
        # Batch 0's id on the offline partition stays held, no task takes it.
        assert scenario.txn("0", 0)["tid"] in state.stranded, state.stranded
        scenario.expected.setdefault(b, set()).update(scenario.ids("1", 1))
    finally:
        broker.restart(victim)
    # The leader is back: the next check proves batch 0's records committed and clears the holds.
    report = scenario.driver(control).recover()
    assert not Session(driver.log).state.stranded, report.summary()
    for topic in scenario.topics:
        assert wait_until_stable(broker.config(), topic, 60)
        audit = audit_topic(broker.config(), topic, sorted(scenario.expected[topic]))
        assert audit.passed and set(audit.counts) == scenario.expected[topic], audit.summary()
