"""OAUTHBEARER over SASL_SSL, on the OAuth broker's TLS listener, which has Kafka's unsecured-JWS
validator (unsigned tokens; development brokers only): librdkafka's built-in unsecured token
(`enable.sasl.oauthbearer.unsecure.jwt`) for the writer and the same for twopc's control client,
which commits; the token's expiry bounds the session (KIP-368) where the broker sets no
connections.max.reauth.ms."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from checkpoint import open_log
from twopc.broker import LocalKafka
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient
from twopc.driver.call import DriverSettings
from twopc.driver.coordinator import Coordinator
from twopc.executor.rows import Row
from twopc.executor.writer import write_partition
from twopc.protocol.owner import Owner
from twopc.protocol.pool import transactional_id

pytestmark = pytest.mark.integration


def _config(kafka: LocalKafka, life_s: int = 3600) -> dict[str, str]:
    assert kafka.tls is not None
    return {"bootstrap.servers": kafka.sasl_ssl_bootstrap_servers,
            "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": "true",
            "sasl.oauthbearer.config": f"principal=alice lifeSeconds={life_s}",
            **kafka.tls.client_config()}


def test_unsecured_tokens_over_sasl_ssl(oauth_kafka: LocalKafka, tmp_path: Path) -> None:
    config = _config(oauth_kafka)
    topic = KafkaUnderTest("oauth-tls", oauth_kafka.bootstrap_servers,
                           local=oauth_kafka).create_topic(1)
    prefix = f"unsec{uuid.uuid4().hex[:6]}"
    result = write_partition(config, transactional_id(prefix, 0, 0),
                             [Row(f"r{i}".encode(), partition=0) for i in range(10)], batch="0",
                             task_partition=0, attempt=0, default_topic=topic,
                             transaction_timeout_ms=60000)
    with ControlClient(config) as control:
        coordinator = Coordinator(open_log((tmp_path / "twopc").as_uri()), control,
                                  DriverSettings(Owner.jobs(prefix)))
        report = coordinator.commit("0", [result])
        assert report.status == "committed"


def test_the_tokens_expiry_bounds_the_session(oauth_kafka: LocalKafka) -> None:
    with ControlClient(_config(oauth_kafka, life_s=60)) as control:
        control.list_transactions("x")
        (conn,) = [c for pool in control._cluster._pools.values() for c in pool]
        assert 50_000 < conn.session_lifetime_ms <= 60_000
