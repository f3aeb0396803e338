"""twopc's control client over SASL/OAUTHBEARER against a real broker validating JWTs (JWKS): the
token from a user provider or the client-credentials grant, ApiVersions and DescribeTransactions
after authenticating, re-authentication on a long-lived connection (KIP-368) with fresh tokens,
and the errors of an expired or wrong-audience token, which name the setting that made it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from twopc_testing.oauth import PROVIDER, IdentityProvider
from twopc_testing.secured import oauth_config

from twopc.broker import LocalKafka
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import AuthenticationError, ControlClient, TxnState
from twopc.control.connection import BrokerConnection
from twopc.control.oauth import OAuthTokenError, token_source

pytestmark = pytest.mark.integration


def _provider_config(kafka: LocalKafka, idp: IdentityProvider, **knobs: object) -> dict[str, str]:
    return oauth_config(kafka, **{"twopc.oauth.token.provider": PROVIDER,
                                  "sasl.oauthbearer.config": idp.provider_config(**knobs)})


def _oidc_config(kafka: LocalKafka, idp: IdentityProvider, **extra: str) -> dict[str, str]:
    return oauth_config(kafka, **{
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": idp.token_url,
        "sasl.oauthbearer.client.id": idp.client_id,
        "sasl.oauthbearer.client.secret": idp.client_secret, **extra})


def _connections(control: ControlClient) -> list[BrokerConnection]:
    """The connections to the (one) broker by node id: the bootstrap one is used for metadata."""
    return [c for pool in control._cluster._pools.values() for c in pool]


@pytest.mark.parametrize("source", ["provider", "provider-ms", "oidc"])
def test_control_client_authenticates_with_oauthbearer(oauth_kafka: LocalKafka,
                                                       idp: IdentityProvider, source: str) -> None:
    config = {"provider": _provider_config(oauth_kafka, idp),
              "provider-ms": _provider_config(oauth_kafka, idp, unit="ms"),
              "oidc": _oidc_config(oauth_kafka, idp, **{"sasl.oauthbearer.scope": "kafka"}),
              }[source]
    with ControlClient(config) as control:
        assert control.require_supported_broker().supported
        tid = f"oauth-{uuid.uuid4().hex[:8]}"
        # FindCoordinator and DescribeTransactions, on the coordinator's own connection.
        assert control.describe_transactions([tid])[tid].state is TxnState.UNKNOWN_ID
        assert control.list_transactions(tid) == []
        (conn,) = _connections(control)
        assert conn.authentications == 1
        # The broker bounds the session by connections.max.reauth.ms (or the token's expiry).
        assert 0 < conn.session_lifetime_ms <= 3000


def test_a_long_lived_connection_reauthenticates_with_fresh_tokens(oauth_kafka: LocalKafka,
                                                                    idp: IdentityProvider) -> None:
    # Tokens of 4 s: each re-authentication (every ~2.5 s by the broker's 3 s session, or 85-95%
    # of what is left of the token) needs a new one; the connection stays the same throughout.
    config = _provider_config(oauth_kafka, idp, lifetime=4)
    with ControlClient(config) as control:
        control.list_transactions("oauth-reauth")
        (conn,) = _connections(control)
        source = token_source(control._settings.oauth)  # type: ignore[arg-type]
        fetched_before = source.fetches
        deadline = time.monotonic() + 9
        while time.monotonic() < deadline:
            # The broker would close the connection at the first request after the session
            # expired; every request here succeeds on the same connection.
            control.list_transactions("oauth-reauth", states=[TxnState.ONGOING])
            time.sleep(0.5)
        assert _connections(control) == [conn] and conn.alive
        assert conn.authentications >= 3, conn.authentications
        assert source.fetches > fetched_before


def test_an_idle_connection_past_its_session_reauthenticates_first(oauth_kafka: LocalKafka,
                                                                    idp: IdentityProvider) -> None:
    with ControlClient(_provider_config(oauth_kafka, idp)) as control:
        control.list_transactions("oauth-idle")
        (conn,) = _connections(control)
        time.sleep(3.5)  # past the 3 s session: the broker would drop any request but SaslHandshake
        control.list_transactions("oauth-idle")
        assert _connections(control) == [conn] and conn.authentications == 2


def test_an_expired_token_is_refused_before_any_broker_sees_it(oauth_kafka: LocalKafka,
                                                               idp: IdentityProvider) -> None:
    with ControlClient(_provider_config(oauth_kafka, idp, lifetime=-120)) as control, \
            pytest.raises(OAuthTokenError) as info:
        control.list_transactions("x")
    text = str(info.value)
    assert "twopc.oauth.token.provider=twopc_testing.oauth:provide_token" in text
    assert "has expired" in text and "expired 1" in text
    assert info.value.setting.startswith("twopc.oauth.token.provider")


def test_a_token_expired_by_exp_but_not_by_its_stated_expiry_is_refused_too(
        oauth_kafka: LocalKafka, idp: IdentityProvider) -> None:
    # The endpoint says expires_in=-120 and the JWT's exp agrees; via oidc the claim decides.
    idp.token_lifetime_s = -120
    try:
        with ControlClient(_oidc_config(oauth_kafka, idp)) as control, \
                pytest.raises(OAuthTokenError, match=r"sasl\.oauthbearer\.token\.endpoint\.url="):
            control.list_transactions("x")
    finally:
        idp.token_lifetime_s = 3600


def test_a_wrong_audience_is_the_brokers_refusal_with_the_tokens_claims(
        oauth_kafka: LocalKafka, idp: IdentityProvider) -> None:
    with ControlClient(_provider_config(oauth_kafka, idp, audience="someone-else")) as control, \
            pytest.raises(OAuthTokenError) as info:
        control.list_transactions("x")
    text = str(info.value)
    assert "refused the OAUTHBEARER token (invalid_token)" in text
    assert "aud='someone-else'" in text and "sasl.oauthbearer.expected.audience" in text
    assert "twopc.oauth.token.provider=" in text


def test_wrong_client_credentials_name_the_client(oauth_kafka: LocalKafka,
                                                  idp: IdentityProvider) -> None:
    config = _oidc_config(oauth_kafka, idp, **{"sasl.oauthbearer.client.secret": "wrong"})
    with ControlClient(config) as control, pytest.raises(AuthenticationError) as info:
        control.list_transactions("x")
    assert "refused client sasl.oauthbearer.client.id=twopc-writer (HTTP 401: invalid_client" \
        in str(info.value)


def _check(kafka: LocalKafka, topic: str, config: dict[str, str]) -> tuple[int, dict[str, Any]]:
    settings = [a for k, v in config.items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    proc = subprocess.run(
        [sys.executable, "-m", "twopc.cli", "check", "--bootstrap-servers",
         config["bootstrap.servers"], "--json", "--topic", topic, "--prefix", "job", *settings],
        capture_output=True, text=True, timeout=180, check=False)
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.parametrize("case", ["good", "wrong-audience"])
def test_twopc_check_connects_with_oauthbearer(oauth_kafka: LocalKafka, idp: IdentityProvider,
                                               case: str) -> None:
    topic = KafkaUnderTest("oauth", oauth_kafka.bootstrap_servers, local=oauth_kafka).create_topic(1)
    knobs = {} if case == "good" else {"audience": "someone-else"}
    code, report = _check(oauth_kafka, topic, _provider_config(oauth_kafka, idp, **knobs))
    items = {i["name"]: i for i in report["items"]}
    if case == "good":
        assert items["broker version"]["status"] == "OK", report
        assert items["transactional id ACLs"]["status"] == "OK", report
        assert items["producer acks"]["status"] == "OK", report
    else:
        assert code == 2 and list(items) == ["connection"], report
        assert "aud='someone-else'" in items["connection"]["detail"]
        assert "twopc.oauth.token.provider" in items["connection"]["fix"]
