"""`twopc check` against a real broker that has what it asks for, and one that lacks it (ACLs)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from twopc.broker import BrokerSpec, LocalKafka
from twopc.broker.under_test import KafkaUnderTest

pytestmark = pytest.mark.integration


def _check(bootstrap: str, *args: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "twopc.cli", "check", "--bootstrap-servers", bootstrap, "--json", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


def _status(report: dict, name: str) -> str:
    return next(i["status"] for i in report["items"] if i["name"] == name)


def test_check_passes_on_a_capable_broker(broker: KafkaUnderTest, topic: str) -> None:
    code, report = _check(broker.bootstrap_servers, "--topic", topic, "--prefix", "job")
    assert code == 0, report
    assert _status(report, "broker version") == "OK"
    assert _status(report, "transactional id ACLs") == "OK"
    assert _status(report, "durability") == "WARN"  # the test broker has replication 1


@pytest.mark.all_variants
def test_check_reports_acks_live_replicas_and_kip939(broker: KafkaUnderTest, topic: str) -> None:
    """On every broker variant: acks is all (librdkafka's default, forced by idempotence), each
    partition's live in-sync replicas are counted, and KIP-939 (InitProducerId v6) is not offered
    by Apache Kafka 4.3.1 or 3.9.2 as configured by default, which the control client agrees
    with."""
    from twopc.control import ControlClient

    code, report = _check(broker.bootstrap_servers, "--topic", topic, "--prefix", "job")
    assert code == 0, report
    items = {i["name"]: i for i in report["items"]}
    assert items["producer acks"]["status"] == "OK", items["producer acks"]
    assert "acks=all" in items["producer acks"]["detail"]
    replicas = items["in-sync replicas"]
    assert replicas["status"] == "OK" and "4 partitions, every replica in sync" in \
        replicas["detail"], replicas
    assert items["transaction log replicas"]["status"] == "OK", items["transaction log replicas"]
    kip = items["KIP-939"]
    assert kip["status"] == "OK" and kip["detail"].startswith("not offered"), kip
    with ControlClient(broker.config()) as control:
        assert control.api_versions()[22][1] < 6
        assert not control.broker_version_hint().two_phase_commit_offered


def test_check_fails_on_acks_other_than_all(broker: KafkaUnderTest, topic: str) -> None:
    code, report = _check(broker.bootstrap_servers, "--topic", topic, "--prefix", "job",
                          "-X", "acks=1")
    assert code == 1, report
    item = next(i for i in report["items"] if i["name"] == "producer acks")
    assert item["status"] == "FAIL" and "acks=1" in item["detail"], item
    assert "remove acks" in item["fix"], item


def test_check_fails_on_timeout_and_missing_topic(broker: KafkaUnderTest) -> None:
    code, report = _check(broker.bootstrap_servers, "--topic", "no-such-topic", "--prefix", "job",
                          "--transaction-timeout-ms", "99999999")
    assert code == 1
    assert _status(report, "transaction timeout") == "FAIL"
    assert _status(report, "topic") == "FAIL"


@pytest.fixture(scope="module")
def acl_broker() -> Iterator[LocalKafka]:
    """A broker with an authorizer and a SASL user that has no ACLs at all."""
    spec = BrokerSpec(
        sasl_users={"admin": "admin-secret", "alice": "alice-secret"},
        extra_properties={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS;User:admin",
            "allow.everyone.if.no.acl.found": "false",
        },
    )
    with LocalKafka(spec) as kafka:
        yield kafka


def test_check_fails_without_acls(acl_broker: LocalKafka) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap_servers})
    admin.create_topics([NewTopic("secured", 1, 1)])["secured"].result(30)
    code, report = _check(
        acl_broker.sasl_bootstrap_servers, "--topic", "secured", "--prefix", "job",
        "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256",
        "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret",
    )
    assert code == 1, report
    acl_items = [i for i in report["items"] if "ACL" in i["name"] or i["name"] == "topic"]
    assert any(i["status"] == "FAIL" for i in acl_items), report
    assert _status(report, "transactional id ACLs") == "FAIL"


ALICE = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
         "sasl.username": "alice", "sasl.password": "alice-secret"}


def test_the_writer_needs_read_on_the_topic_and_check_says_so(acl_broker: LocalKafka) -> None:
    """WRITE and DESCRIBE on the topic and the transactional ids are not enough: the writer asks
    the leaders (DescribeProducers, READ) what its transaction wrote. Without READ, `check` fails
    and names it, and a write fails with SpanError, its transaction aborted, nothing visible."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    from twopc.control import ControlClient, TxnState
    from twopc.executor.rows import Row
    from twopc.executor.write_errors import SpanError
    from twopc.executor.writer import write_partition
    from twopc.ops.audit import audit_topic

    admin_config = {"bootstrap.servers": acl_broker.bootstrap_servers}  # ANONYMOUS: a super user
    admin = AdminClient(admin_config)
    admin.create_topics([NewTopic("guarded", 2, 1)])["guarded"].result(30)

    def grant(kind: ResourceType, name: str, pattern: ResourcePatternType,
              *ops: AclOperation) -> None:
        bindings = [AclBinding(kind, name, pattern, "User:alice", "*", op, AclPermissionType.ALLOW)
                    for op in ops]
        for future in admin.create_acls(bindings).values():
            future.result(30)

    grant(ResourceType.TRANSACTIONAL_ID, "guard", ResourcePatternType.PREFIXED,
          AclOperation.WRITE, AclOperation.DESCRIBE)
    grant(ResourceType.TOPIC, "guarded", ResourcePatternType.LITERAL,
          AclOperation.WRITE, AclOperation.DESCRIBE)
    alice_args = [arg for k, v in ALICE.items() for arg in ("-X", f"{k}={v}")]
    sasl = acl_broker.sasl_bootstrap_servers

    code, report = _check(sasl, "--topic", "guarded", "--prefix", "guard", *alice_args)
    topic_acls = next(i for i in report["items"] if i["name"] == "topic ACLs")
    assert code == 1 and topic_acls["status"] == "FAIL", report
    assert "grant READ on topic guarded" in topic_acls["fix"], topic_acls
    assert _status(report, "transactional id ACLs") == "OK"

    config = {"bootstrap.servers": sasl, **ALICE}
    rows = [Row(f"r-{i}".encode()) for i in range(50)]

    def write(tid: str) -> object:
        return write_partition(config, tid, rows, batch="1", task_partition=0, attempt=0,
                               default_topic="guarded", transaction_timeout_ms=60_000)

    with pytest.raises(SpanError, match="grant READ on topic guarded"):
        write("guard-0-0")
    with ControlClient(admin_config) as control:
        assert control.describe_transactions(["guard-0-0"])["guard-0-0"].state in (
            TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
    denied = audit_topic(admin_config, "guarded")
    assert denied.records == 0 and denied.passed, denied.summary()

    grant(ResourceType.TOPIC, "guarded", ResourcePatternType.LITERAL, AclOperation.READ)
    code, report = _check(sasl, "--topic", "guarded", "--prefix", "guard", *alice_args)
    assert _status(report, "topic ACLs") == "OK", report
    result = write("guard-0-1")
    assert result.rows == len(rows) and result.handle is not None
    assert sum(s.record_count for s in result.handle.spans) == len(rows)


@pytest.mark.slow
@pytest.mark.only_variants("kafka4-3node")
def test_check_reads_the_live_isr_of_a_replicated_cluster(broker: KafkaUnderTest) -> None:
    """Replication 3 and min.insync.replicas 2 pass; with one broker SIGKILLed the same topic is
    under-replicated (WARN), a topic that needs 3 in-sync replicas cannot be written (FAIL), and
    so is the transaction log's state (WARN); once the broker is back, all is OK again."""
    import time

    from twopc.control import ControlClient

    if not broker.replicated or broker.local is None:
        pytest.fail(f"this test kills one broker of a replicated cluster; {broker.variant} is not one")
    topic = broker.create_topic(3)
    strict = broker.create_topic(3, config={"min.insync.replicas": "3"})
    code, report = _check(broker.bootstrap_servers, "--topic", topic, "--prefix", "job")
    assert code == 0, report
    assert _status(report, "durability") == _status(report, "in-sync replicas") == "OK", report
    with ControlClient(broker.config()) as control:
        victim = broker.victim(control, "leader", partitions=[(topic, 0)])
    assert victim is not None
    broker.kill(victim)
    try:
        deadline = time.monotonic() + 90
        while not any(entry.startswith(f"{strict}[") for entry in broker.local.under_replicated()):
            assert time.monotonic() < deadline, "the controller never shrank the ISR"
            time.sleep(0.5)
        code, report = _check(broker.bootstrap_servers, "--topic", topic, "--prefix", "job")
        assert code == 0, report
        isr = next(i for i in report["items"] if i["name"] == "in-sync replicas")
        assert isr["status"] == "WARN" and "under-replicated" in isr["detail"], isr
        assert _status(report, "transaction log replicas") == "WARN", report
        code, report = _check(broker.bootstrap_servers, "--topic", strict, "--prefix", "job")
        assert code == 1, report
        isr = next(i for i in report["items"] if i["name"] == "in-sync replicas")
        assert isr["status"] == "FAIL" and "NOT_ENOUGH_REPLICAS" in isr["fix"], isr
        assert "min.insync.replicas 3" in isr["detail"], isr
    finally:
        broker.restart(victim)
    code, report = _check(broker.bootstrap_servers, "--topic", strict, "--prefix", "job")
    assert code == 0 and _status(report, "in-sync replicas") == "OK", report
