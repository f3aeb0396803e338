"""Heavier control-client tests with their own brokers: a SASL/SCRAM listener, and a 3-broker
cluster whose transaction coordinator is SIGKILLed in the middle of a commit phase.

Marked slow (each starts its own Kafka): `pytest -m slow tests/control/test_control_cluster.py`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.control.helpers import open_txn, read_committed
from twopc.broker import BrokerSpec, LocalKafka
from twopc.control import AuthenticationError, ControlClient, EndTxnRequest, OutcomeKind

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def sasl_kafka() -> Iterator[LocalKafka]:
    with LocalKafka(BrokerSpec(sasl_users={"alice": "alice-secret"})) as kafka:
        yield kafka


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_sasl_end_to_end(sasl_kafka: LocalKafka, mechanism: str) -> None:
    from twopc.broker.under_test import KafkaUnderTest

    plain = KafkaUnderTest("sasl", sasl_kafka.bootstrap_servers, local=sasl_kafka)
    topic = plain.create_topic(2)
    txn = open_txn(sasl_kafka.bootstrap_servers, topic)
    config = {"bootstrap.servers": sasl_kafka.sasl_bootstrap_servers,
              "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
              "sasl.username": "alice", "sasl.password": "alice-secret",
              "transactional.id": "producer-only-key-is-ignored"}
    with ControlClient(config) as client:
        assert client.describe_transactions([txn.transactional_id])[
            txn.transactional_id].producer_id == txn.producer_id
        out = client.end_txns([EndTxnRequest(txn.transactional_id, txn.producer_id, txn.epoch,
                                             True)])
        assert out[txn.transactional_id].kind is OutcomeKind.COMMITTED
    assert len(read_committed(sasl_kafka.bootstrap_servers, topic)) == 20


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_wrong_credentials_are_a_clear_error(sasl_kafka: LocalKafka, mechanism: str) -> None:
    config = {"bootstrap.servers": sasl_kafka.sasl_bootstrap_servers,
              "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
              "sasl.username": "alice", "sasl.password": "wrong"}
    with ControlClient(config) as client, pytest.raises(AuthenticationError,
                                                          match=r"alice.*sasl\.password"):
        client.api_versions()


def test_coordinator_killed_mid_commit_phase() -> None:
    with LocalKafka(BrokerSpec(brokers=3, heap_mb=384)) as kafka:
        from twopc.broker.under_test import KafkaUnderTest

        topic = KafkaUnderTest("3", kafka.bootstrap_servers, local=kafka).create_topic(3)
        txns = [open_txn(kafka.bootstrap_servers, topic, count=5, id_prefix=f"k{i}-")
                for i in range(16)]
        with ControlClient({"bootstrap.servers": kafka.bootstrap_servers,
                            "socket.timeout.ms": "10000"}) as client:
            described = client.describe_transactions([t.transactional_id for t in txns])
            coordinators = {d.coordinator_id for d in described.values()}
            victim = max(coordinators, key=lambda n: sum(
                d.coordinator_id == n for d in described.values()))
            reqs = [EndTxnRequest(t.transactional_id, t.producer_id, t.epoch, True)
                    for t in txns]
            on_victim = [r for r in reqs if described[r.transactional_id].coordinator_id == victim]
            assert on_victim, "no transaction is coordinated by the busiest broker"
            # The commit phase: the first half goes out, then the busiest coordinator is
            # SIGKILLed while the rest (at least one of them on it, with its address still
            # cached by the client) are sent.
            later = {r.transactional_id for r in on_victim[-max(1, len(on_victim) // 2):]}
            first = [r for r in reqs if r.transactional_id not in later]
            second = [r for r in reqs if r.transactional_id in later]
            outcomes = client.end_txns(first, precheck=False)
            kafka.kill(victim)
            outcomes.update(client.end_txns(second, precheck=False))
            assert not kafka.broker(victim).alive()
            assert len(outcomes) == 16
            assert all(o.committed for o in outcomes.values()), outcomes
        seen = read_committed(kafka.bootstrap_servers, topic, timeout_s=90)
        assert len(seen) == 16 * 5
