"""The writer (librdkafka) over SASL/OAUTHBEARER against a real broker validating JWTs (JWKS): with
librdkafka's own client-credentials flow (`sasl.oauthbearer.method=oidc`) and with a user token
provider (`twopc.oauth.token.provider`), through librdkafka's `oauth_cb` with the producer built off
the caller's thread; the driver commits over OAUTHBEARER too. A provider that fails or hands out an
expired token, and a token of the wrong audience, are clear errors that name the setting; nothing is
written. The Spark guards refuse them on the driver, before any task."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from twopc_testing.oauth import PROVIDER, IdentityProvider
from twopc_testing.secured import oauth_config

from checkpoint import open_log
from twopc.broker import LocalKafka
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TxnState
from twopc.control.oauth import OAuthTokenError
from twopc.driver.call import DriverSettings
from twopc.driver.coordinator import Coordinator
from twopc.executor.producer import build_off_thread, transactional_producer_config
from twopc.executor.rows import Row
from twopc.executor.write_errors import BrokerSecurityError
from twopc.executor.writer import write_partition
from twopc.ops.audit import audit_topic
from twopc.protocol.handle import WriteResult
from twopc.protocol.owner import Owner
from twopc.protocol.pool import transactional_id
from twopc.spark.option_checks import check_at_start
from twopc.spark.options import parse_options

pytestmark = pytest.mark.integration
ROWS = 20


def _provider(kafka: LocalKafka, idp: IdentityProvider, **knobs: object) -> dict[str, str]:
    return oauth_config(kafka, **{"twopc.oauth.token.provider": PROVIDER,
                                  "sasl.oauthbearer.config": idp.provider_config(**knobs)})


def _oidc(kafka: LocalKafka, idp: IdentityProvider) -> dict[str, str]:
    return oauth_config(kafka, **{
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": idp.token_url,
        "sasl.oauthbearer.client.id": idp.client_id,
        "sasl.oauthbearer.client.secret": idp.client_secret, "sasl.oauthbearer.scope": "kafka"})


def _write(config: dict[str, str], prefix: str, topic: str, p: int,
           timeout_ms: int = 60000) -> tuple[WriteResult, list[str]]:
    ids = [f"{prefix}-p{p}-{i}" for i in range(ROWS)]
    result = write_partition(config, transactional_id(prefix, p, 0),
                             [Row(i.encode(), partition=p) for i in ids], batch="0",
                             task_partition=p, attempt=0, default_topic=topic,
                             transaction_timeout_ms=timeout_ms)
    return result, ids


@pytest.mark.parametrize("source", ["provider", "oidc"])
def test_write_and_commit_over_oauthbearer(oauth_kafka: LocalKafka, idp: IdentityProvider,
                                           source: str, tmp_path: Path) -> None:
    config = _oidc(oauth_kafka, idp) if source == "oidc" else _provider(oauth_kafka, idp)
    producer_config = transactional_producer_config(config, "t-0-0", 60000)
    # An oauth_cb (the provider's) makes the constructor wait ~1 s: built off the caller's thread.
    assert build_off_thread(producer_config) == (source == "provider")
    topic = KafkaUnderTest("oauth", oauth_kafka.bootstrap_servers, local=oauth_kafka).create_topic(2)
    prefix = f"oauth{uuid.uuid4().hex[:6]}"
    began = time.monotonic()
    written = [_write(config, prefix, topic, p) for p in range(2)]
    # librdkafka re-authenticates its connections every ~2.5 s here (the broker's 3 s sessions).
    elapsed = time.monotonic() - began
    with ControlClient(config) as control:
        log = open_log((tmp_path / "twopc").as_uri())
        report = Coordinator(log, control, DriverSettings(Owner.jobs(prefix))).commit(
            "0", [r for r, _ in written])
        assert report.status == "committed" and len(report.committed) == 2
        assert control.list_transactions(prefix, states=[TxnState.ONGOING]) == []
    # Read back over the broker's PLAINTEXT listener (the audit's consumer is librdkafka's).
    audit = audit_topic({"bootstrap.servers": oauth_kafka.bootstrap_servers}, topic,
                        [i for _, ids in written for i in ids])
    assert audit.passed and audit.records == 2 * ROWS, audit.summary()
    print(f"{source}: two transactions written in {elapsed:.2f} s")


def test_an_expired_token_fails_the_writer_at_once_naming_the_provider(
        oauth_kafka: LocalKafka, idp: IdentityProvider) -> None:
    topic = KafkaUnderTest("oauth", oauth_kafka.bootstrap_servers, local=oauth_kafka).create_topic(1)
    began = time.monotonic()
    with pytest.raises(BrokerSecurityError) as info:
        _write(_provider(oauth_kafka, idp, lifetime=-300), "oauthx", topic, 0)
    # Not confluent-kafka's "OAuth token not set within 10 seconds timeout".
    assert time.monotonic() - began < 5
    text = str(info.value)
    assert "twopc.oauth.token.provider=twopc_testing.oauth:provide_token" in text
    assert "has expired" in text and "Nothing was written" in text


def test_a_wrong_audience_fails_the_writer_with_the_brokers_refusal(
        oauth_kafka: LocalKafka, idp: IdentityProvider) -> None:
    topic = KafkaUnderTest("oauth", oauth_kafka.bootstrap_servers, local=oauth_kafka).create_topic(1)
    with pytest.raises(BrokerSecurityError) as info:
        _write(_provider(oauth_kafka, idp, audience="someone-else"), "oauthy", topic, 0,
               timeout_ms=5000)
    text = str(info.value)
    assert '{"status":"invalid_token"}' in text, text
    assert "sasl.oauthbearer.expected.audience" in text
    assert "twopc.oauth.token.provider=twopc_testing.oauth:provide_token" in text


@pytest.mark.parametrize("case", ["expired", "audience"])
def test_the_spark_guards_refuse_a_bad_token_on_the_driver(
        oauth_kafka: LocalKafka, idp: IdentityProvider, case: str, tmp_path: Path) -> None:
    knobs = {"lifetime": -300} if case == "expired" else {"audience": "someone-else"}
    options = {
        "kafka.bootstrap.servers": oauth_kafka.sasl_bootstrap_servers,
        "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.oauthbearer.config": idp.provider_config(**knobs),
        # Spark hands the data source lower-cased option names.
        "twopc.oauthtokenprovider": PROVIDER,
        "twopc.checkpoint": (tmp_path / "ckpt").as_uri(), "twopc.transactionalIdPrefix": "g",
    }
    config = parse_options(options, streaming=False)
    with pytest.raises(OAuthTokenError) as info:
        check_at_start(config, streaming=False)
    text = str(info.value)
    # Named as the user set it: the Spark option, not the key the clients read.
    assert f"twopc.oauthTokenProvider={PROVIDER}" in text, text
    assert info.value.setting == f"twopc.oauthTokenProvider={PROVIDER}"
    assert "twopc.oauth.token.provider" not in text
    if case == "expired":
        assert "has expired" in text
    else:
        assert "aud='someone-else'" in text and "invalid_token" in text
