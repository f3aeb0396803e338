"""`twopc check` against a real broker that has what it asks for, and one that lacks it (ACLs)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from twopc.broker import BrokerSpec, LocalKafka
from twopc.testing.brokers import KafkaUnderTest

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
