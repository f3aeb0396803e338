"""TLS against a real broker with SSL (mutual TLS) and SASL_SSL listeners, certificates made at test
time (twopc/broker/tls.py): the writer (librdkafka), twopc's control client, the coordinator and the
audit work over both; `twopc check` works over SSL; a wrong CA, or no client certificate where the
listener requires one, is a clear typed error naming the setting to fix, and leaves nothing written:
no record in Kafka, no intent in the checkpoint log."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from twopc_testing.secured import secured_configs

from checkpoint import open_log
from twopc.broker import LocalKafka
from twopc.broker.tls import make_ca
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TlsError, TxnState
from twopc.driver.call import DriverSettings
from twopc.driver.coordinator import Coordinator
from twopc.executor.rows import Row
from twopc.executor.write_errors import BrokerSecurityError
from twopc.executor.writer import write_partition
from twopc.ops.audit import audit_topic
from twopc.protocol.handle import WriteResult
from twopc.protocol.log_records import Prepared, from_body
from twopc.protocol.owner import Owner
from twopc.protocol.pool import transactional_id

pytestmark = pytest.mark.integration

PROTOCOLS = ("SSL", "SASL_SSL")
ROWS = 25


def _topic(kafka: LocalKafka, partitions: int = 2) -> str:
    return KafkaUnderTest("tls", kafka.bootstrap_servers, local=kafka).create_topic(partitions)


def _write(config: dict[str, str], prefix: str, topic: str, p: int) -> tuple[WriteResult, list[str]]:
    ids = [f"{prefix}-p{p}-{i}" for i in range(ROWS)]
    result = write_partition(config, transactional_id(prefix, p, 0),
                             [Row(i.encode(), partition=p) for i in ids], batch="0",
                             task_partition=p, attempt=0, default_topic=topic,
                             transaction_timeout_ms=60000)
    return result, ids


def _coordinator(tmp_path: Path, control: ControlClient, prefix: str) -> Coordinator:
    return Coordinator(open_log((tmp_path / "twopc").as_uri()), control,
                       DriverSettings(Owner.jobs(prefix)))


def _wrong_ca(config: dict[str, str], tmp_path: Path) -> dict[str, str]:
    other = make_ca(tmp_path / "other-ca", name="some other CA")
    return {**config, "ssl.ca.location": str(other.cert_path)}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_write_commit_and_audit_over_tls(tls_kafka: LocalKafka, protocol: str,
                                         tmp_path: Path) -> None:
    config = secured_configs(tls_kafka)[protocol]
    topic = _topic(tls_kafka)
    prefix = f"tls{uuid.uuid4().hex[:6]}"
    written = [_write(config, prefix, topic, p) for p in range(2)]
    with ControlClient(config) as control:
        hint = control.require_supported_broker()
        assert hint.supported
        report = _coordinator(tmp_path, control, prefix).commit("0", [r for r, _ in written])
        assert report.status == "committed" and len(report.committed) == 2
        assert control.list_transactions(prefix, states=[TxnState.ONGOING]) == []
    audit = audit_topic(config, topic, [i for _, ids in written for i in ids])
    assert audit.passed and audit.records == 2 * ROWS, audit.summary()


def test_a_wrong_ca_is_a_clear_error_in_the_control_client(tls_kafka: LocalKafka,
                                                           tmp_path: Path) -> None:
    for protocol, config in secured_configs(tls_kafka).items():
        bad = _wrong_ca(config, tmp_path / protocol)
        with ControlClient(bad) as control, pytest.raises(TlsError) as info:
            control.api_versions()  # at once: a TlsError is not retried as if the broker were down
        message = str(info.value)
        assert "not signed by a CA this client trusts" in message, message
        assert f"ssl.ca.location={bad['ssl.ca.location']}" in message, message


def test_a_listener_that_wants_a_client_certificate_says_so(tls_kafka: LocalKafka) -> None:
    config = secured_configs(tls_kafka)["SSL"]
    anonymous = {k: v for k, v in config.items()
                 if k not in ("ssl.certificate.location", "ssl.key.location", "ssl.key.password")}
    with ControlClient(anonymous) as control, pytest.raises(
            TlsError, match=r"requires a client certificate: set ssl\.certificate\.location"):
        control.api_versions()


def test_a_wrong_ca_is_a_clear_error_in_the_writer_and_writes_nothing(
        tls_kafka: LocalKafka, tmp_path: Path) -> None:
    config = secured_configs(tls_kafka)["SASL_SSL"]
    topic = _topic(tls_kafka)
    prefix = f"ca{uuid.uuid4().hex[:6]}"
    bad = _wrong_ca(config, tmp_path)
    with pytest.raises(BrokerSecurityError) as info:  # not a timeout of init_transactions
        _write(bad, prefix, topic, 0)
    message = str(info.value)
    assert "not signed by a CA this client trusts" in message, message
    assert f"ssl.ca.location={bad['ssl.ca.location']}" in message, message
    with ControlClient(config) as control:
        tid = transactional_id(prefix, 0, 0)
        assert control.describe_transactions([tid])[tid].state is TxnState.UNKNOWN_ID
    nothing = audit_topic(config, topic, [])
    assert nothing.passed and nothing.records == 0, nothing.summary()


def test_a_wrong_ca_at_commit_writes_no_intent(tls_kafka: LocalKafka, tmp_path: Path) -> None:
    """The commit path: the control client cannot reach the coordinators, so the check before the
    intent fails with TlsError and the log holds no `prepared` record; with the right CA the same
    batch commits."""
    config = secured_configs(tls_kafka)["SSL"]
    topic = _topic(tls_kafka)
    prefix = f"cc{uuid.uuid4().hex[:6]}"
    written = [_write(config, prefix, topic, p) for p in range(2)]
    with ControlClient(_wrong_ca(config, tmp_path)) as control, pytest.raises(
            TlsError, match=r"ssl\.ca\.location="):
        _coordinator(tmp_path, control, prefix).commit("0", [r for r, _ in written])
    log = open_log((tmp_path / "twopc").as_uri())
    assert not [r for r in log.records() if isinstance(from_body(r.body), Prepared)]
    with ControlClient(config) as control:
        assert _coordinator(tmp_path, control, prefix).commit(
            "0", [r for r, _ in written]).status == "committed"
    audit = audit_topic(config, topic, [i for _, ids in written for i in ids])
    assert audit.passed, audit.summary()


def _check(config: dict[str, str], topic: str) -> tuple[int, dict]:
    args = [arg for k, v in config.items() if k != "bootstrap.servers"
            for arg in ("-X", f"{k}={v}")]
    proc = subprocess.run(
        [sys.executable, "-m", "twopc.cli", "check", "--bootstrap-servers",
         config["bootstrap.servers"], "--topic", topic, "--prefix", "tlscheck", "--json", *args],
        capture_output=True, text=True, timeout=180, check=False)
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_check_over_tls(tls_kafka: LocalKafka, protocol: str) -> None:
    config = secured_configs(tls_kafka)[protocol]
    code, report = _check(config, _topic(tls_kafka))
    assert code == 0, report
    status = {i["name"]: i["status"] for i in report["items"]}
    assert status["broker version"] == status["transactional id ACLs"] == "OK", report


def test_check_with_a_wrong_ca_says_what_to_fix(tls_kafka: LocalKafka, tmp_path: Path) -> None:
    config = _wrong_ca(secured_configs(tls_kafka)["SSL"], tmp_path)
    code, report = _check(config, "any-topic")
    assert code == 2, report
    [item] = report["items"]
    assert item["name"] == "connection" and item["status"] == "FAIL", report
    assert "ssl.ca.location" in item["fix"], item
