"""What the broker refuses is never reported as success (issue 17, items 3 and 7).

A real broker with an authorizer: the driver runs as a SASL user (alice) whose ACLs the tests
change, the tasks as a super user. Refused requests are real broker answers, no fault injection:

- a fence refused (no WRITE on a losing attempt's transactional id) must fail the commit, the
  sweep of recovery and Spark's abort, and lose nothing already committed (item 7);
- a stranded commit (markers dropped by a broker SIGKILL) whose partitions the driver cannot read
  (DescribeProducers refused) or whose release the broker refuses (no WRITE on the topic) must
  not look settled nor be reported released; the next job must not take its id; once the ACL is
  fixed, recovery releases it and the audit finds every record exactly once (item 3).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.broker.test_restart_mid_commit import _stranded_commit
from tests.driver.support import Scenario
from twopc.broker import BrokerSpec, LocalKafka
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TxnState
from twopc.errors import CommitUnverified, FenceFailed, StrandedUnreleased
from twopc.log.session import Session
from twopc.ops.audit import audit_topic, wait_until_stable
from twopc.protocol.handle import Handle, PartitionSpan
from twopc.protocol.log_records import Committed, Prepared
from twopc.spark.driver import job_owner
from twopc.spark.options import SinkConfig
from twopc.spark.task import task_write

pytestmark = pytest.mark.integration

ALICE = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
         "sasl.username": "alice", "sasl.password": "alice-secret"}
T = TypeVar("T")


@pytest.fixture(scope="module")
def acl_kafka() -> Iterator[KafkaUnderTest]:
    """Kafka 4.3.1 with an authorizer: the PLAINTEXT listener's ANONYMOUS is a super user, the
    SASL listener's alice has only the ACLs a test grants."""
    spec = BrokerSpec(
        sasl_users={"alice": "alice-secret"},
        extra_properties={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        },
    )
    local = LocalKafka(spec).start()
    try:
        yield KafkaUnderTest("kafka4-acl", local.bootstrap_servers, local=local,
                             startup_seconds=local.startup_seconds)
    finally:
        local.stop()


class Acls:
    """alice's ACLs, granted and denied by the super user."""

    def __init__(self, kafka: KafkaUnderTest) -> None:
        self.admin = AdminClient(kafka.config())

    def set(self, permission: AclPermissionType, kind: ResourceType, name: str,
            *ops: AclOperation, prefixed: bool = False) -> None:
        pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
        bindings = [AclBinding(kind, name, pattern, "User:alice", "*", op, permission)
                    for op in ops]
        for future in self.admin.create_acls(bindings).values():
            future.result(30)

    def allow(self, kind: ResourceType, name: str, *ops: AclOperation,
              prefixed: bool = False) -> None:
        self.set(AclPermissionType.ALLOW, kind, name, *ops, prefixed=prefixed)

    def deny(self, kind: ResourceType, name: str, *ops: AclOperation) -> None:
        self.set(AclPermissionType.DENY, kind, name, *ops)


def alice(kafka: KafkaUnderTest) -> ControlClient:
    assert kafka.local is not None
    return ControlClient({"bootstrap.servers": kafka.local.sasl_bootstrap_servers, **ALICE})


def _open(control: ControlClient, tid: str) -> bool:
    return control.describe_transactions([tid])[tid].state is TxnState.ONGOING


def outcome(call: Callable[[], T]) -> T | Exception:
    """What a driver call did: its result, or the error it raised (checked after the audit)."""
    try:
        return call()
    except Exception as exc:  # the tests assert on the type
        return exc


def test_a_fence_the_broker_refuses_is_never_reported_as_success(
        acl_kafka: KafkaUnderTest, tmp_path: Path) -> None:
    scenario = Scenario(acl_kafka, (acl_kafka.create_topic(2), acl_kafka.create_topic(2)),
                        str(tmp_path / "log"))
    acls = Acls(acl_kafka)
    acls.allow(ResourceType.TRANSACTIONAL_ID, scenario.prefix, AclOperation.WRITE,
               AclOperation.DESCRIBE, prefixed=True)
    for topic in scenario.topics:
        acls.allow(ResourceType.TOPIC, topic, AclOperation.DESCRIBE, AclOperation.READ)
    results = scenario.write("0")
    [orphan] = scenario.write("0", [scenario.txn("0", 1, attempt=1, tag="-orphan")],
                             timeout_ms=120_000)
    assert orphan.handle is not None
    lost_id = orphan.handle.transactional_id
    acls.deny(ResourceType.TRANSACTIONAL_ID, lost_id, AclOperation.WRITE)

    with alice(acl_kafka) as control:
        coord = scenario.driver(control)
        with pytest.raises(FenceFailed) as committed:
            coord.commit("0", results)
        assert committed.value.failures == {lost_id: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}
        assert "batch 0 is committed" in str(committed.value)
        assert coord.is_committed("0")  # nothing committed is lost
        with pytest.raises(FenceFailed) as swept:  # recovery's sweep meets the same refusal
            coord.recover()
        assert set(swept.value.failures) == {lost_id}
        with pytest.raises(FenceFailed) as aborted:  # Spark's abort() naming it
            coord.abort("0", [orphan])
        assert set(aborted.value.failures) == {lost_id}
        assert _open(control, lost_id)
    with ControlClient(acl_kafka.config()) as control:  # a principal allowed to fence it
        assert scenario.driver(control).recover().orphans_fenced == (lost_id,)
    scenario.expect("0")
    scenario.audit()


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the broker kills that strand a commit are retried (up to 15 restarts)
def test_a_stranded_commit_that_cannot_be_released_holds_its_id_until_it_is(
        acl_kafka: KafkaUnderTest, tmp_path: Path) -> None:
    prefix = f"s{uuid.uuid4().hex[:8]}"
    stuck = _stranded_commit(acl_kafka, acl_kafka.create_topic, f"{prefix}-0-0")
    jobs = Scenario(acl_kafka, (acl_kafka.create_topic(2), acl_kafka.create_topic(2)),
                    str(tmp_path / "log"), prefix=prefix, owner_id=prefix, owner_kind="job")
    acls = Acls(acl_kafka)
    acls.allow(ResourceType.TRANSACTIONAL_ID, prefix, AclOperation.WRITE, AclOperation.DESCRIBE,
               prefixed=True)
    for topic in jobs.topics:
        acls.allow(ResourceType.TOPIC, topic, AclOperation.DESCRIBE, AclOperation.READ)
    acls.allow(ResourceType.TOPIC, stuck.topic, AclOperation.DESCRIBE)  # no READ, no WRITE

    with alice(acl_kafka) as control:
        topic_id = control.topic_ids([stuck.topic])[stuck.topic]
        spans = tuple(PartitionSpan(stuck.topic, p, first, None, 1, topic_id)
                      for p, first in sorted(stuck.first_offsets.items()))
        handle = Handle(stuck.transactional_id, stuck.producer_id, stuck.epoch, spans,
                        len(stuck.ids), "c", 0, 60000, 0, 0, 0)
        coord = jobs.driver(control)
        coord.bind()
        session = Session(coord.log)  # job-0 as its commit() recorded it: intent, committed
        session.append(Committed("job-0", session.append(Prepared("job-0", (handle,))), ()))

        # 1. DescribeProducers refused (no READ): the stranded handle must not look settled.
        unreadable = outcome(coord.recover)
        acls.allow(ResourceType.TOPIC, stuck.topic, AclOperation.READ)
        # 2. The release refused (no WRITE on the topic: AddPartitionsToTxn fails): the next
        # job's commit and recovery must say so.
        job1 = jobs.write("job-1", [jobs.txn("job-1", p) for p in (1, 2)])
        committed = outcome(lambda: coord.commit("job-1", job1))
        recovered = outcome(coord.recover)
        # 3. The next job's task for Spark partition 0 writes to the stuck partition, and the job
        # fails: Spark's abort() fences what it pre-committed. On the stranded id, its ABORT
        # markers would end the stranded records as aborted.
        config = SinkConfig({"bootstrap.servers": acl_kafka.bootstrap_servers}, jobs.log_url,
                            prefix, topic=stuck.topic)
        rows = pa.RecordBatch.from_pydict({
            "value": [f"job-2-{i}" for i in range(5)],
            "partition": pa.array([min(stuck.stuck)] * 5, pa.int32())})
        task = task_write(config, job_owner(config), "job-2", [rows], task_partition=0,
                          attempt=0)
        assert task.handle is not None
        aborted = outcome(lambda: coord.abort("job-2", [task]))
        # 4. The ACL is fixed: recovery releases the stranded commit.
        acls.allow(ResourceType.TOPIC, stuck.topic, AclOperation.WRITE)
        released = outcome(coord.recover)

    assert wait_until_stable(acl_kafka.config(), stuck.topic, 60)
    audit = audit_topic(acl_kafka.config(), stuck.topic, expected_ids=stuck.ids)
    assert audit.passed and audit.records == len(stuck.ids), audit.summary()
    jobs.expected = {jobs.topic_of(p): set(jobs.ids("job-1", p)) for p in (1, 2)}
    jobs.audit()

    assert isinstance(unreadable, StrandedUnreleased), unreadable
    assert "TOPIC_AUTHORIZATION_FAILED" in str(unreadable) and "DescribeProducers" in str(
        unreadable)
    assert isinstance(committed, CommitUnverified), committed
    assert coord.is_committed("job-1")
    assert isinstance(recovered, StrandedUnreleased), recovered
    assert stuck.transactional_id in str(recovered) and "add_partitions" in str(recovered)
    assert task.handle.transactional_id != stuck.transactional_id
    assert not isinstance(aborted, Exception), aborted
    assert not isinstance(released, Exception), released
    assert released.stranded.released == (stuck.transactional_id,), released.summary()
