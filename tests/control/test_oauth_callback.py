"""How librdkafka gets `twopc.oauth.token.provider`'s tokens (twopc/control/oauth.py,
`librdkafka_oauth`): an `oauth_cb` over the process's TokenSource, the first token fetched before
any client exists, and the writer's producer built off the caller's thread because confluent-kafka's
constructor waits ~1 s for that callback. No broker."""

from __future__ import annotations

import time

import pytest
from twopc_testing.oauth import OPAQUE_PROVIDER

from twopc.control import ConfigError
from twopc.control.oauth import (
    OAuthTokenError,
    ProducerOAuthCallback,
    describe_source,
    librdkafka_config,
    librdkafka_oauth,
)
from twopc.executor.producer import build_off_thread, transactional_producer_config
from twopc.executor.write_errors import BrokerSecurityError

BASE = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER"}
FAILING_PROVIDER = "tests.control.test_oauth_callback:failing_token"
OAUTH_SOURCE = f"twopc.oauth.token.provider={OPAQUE_PROVIDER}"


def failing_token(config: str) -> tuple[str, float]:
    raise RuntimeError(f"the identity provider is down (called with {config!r})")


def test_a_provider_becomes_an_oauth_cb_that_hands_librdkafka_its_token() -> None:
    config = {**BASE, "twopc.oauth.token.provider": OPAQUE_PROVIDER}
    settings = librdkafka_oauth(config)
    assert list(settings) == ["oauth_cb"] and isinstance(settings["oauth_cb"], ProducerOAuthCallback)
    _, expiry, principal, extensions = settings["oauth_cb"]("")
    assert principal == "opaque-user" and extensions == {"logicalCluster": "lkc-1"}
    assert expiry == pytest.approx(time.time() + 3600, abs=5)  # milliseconds made seconds
    assert "opaque-user" not in repr(settings["oauth_cb"])
    described = describe_source(settings)
    assert described is not None and OAUTH_SOURCE in described
    client = librdkafka_config(config)  # AdminClient, Consumer: librdkafka refuses twopc.* keys
    assert "twopc.oauth.token.provider" not in client and "oauth_cb" in client


def test_the_writers_producer_is_built_off_the_callers_thread_only_with_an_oauth_cb() -> None:
    with_cb = transactional_producer_config({**BASE, "twopc.oauth.token.provider": OPAQUE_PROVIDER},
                                            "t-0-0", 60000)
    assert build_off_thread(with_cb) and "twopc.oauth.token.provider" not in with_cb
    oidc = transactional_producer_config(
        {**BASE, "sasl.oauthbearer.method": "oidc",
         "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
         "sasl.oauthbearer.client.id": "c", "sasl.oauthbearer.client.secret": "s"}, "t-0-0", 60000)
    assert not build_off_thread(oidc)


def test_a_failing_provider_fails_before_any_client_naming_it() -> None:
    config = {**BASE, "twopc.oauth.token.provider": FAILING_PROVIDER,
              "sasl.oauthbearer.config": "region=eu-west-1 clientSecret=Zqsecret42"}
    with pytest.raises(OAuthTokenError) as info:
        librdkafka_oauth(config)
    assert FAILING_PROVIDER in str(info.value) and "identity provider is down" in str(info.value)
    # What the provider said is kept, but not a secret of its argument that it quoted.
    assert "region=eu-west-1" in str(info.value) and "Zqsecret42" not in str(info.value)
    with pytest.raises(BrokerSecurityError, match="Nothing was written") as writer:
        transactional_producer_config(config, "t-0-0", 60000)
    assert FAILING_PROVIDER in str(writer.value)


def test_a_provider_needs_oauthbearer_and_no_oauth_cb_beside_it() -> None:
    with pytest.raises(ConfigError, match=r"sasl\.mechanism=OAUTHBEARER"):
        librdkafka_oauth({**BASE, "sasl.mechanism": "PLAIN",
                          "twopc.oauth.token.provider": OPAQUE_PROVIDER})
    with pytest.raises(ConfigError, match="give one"):
        librdkafka_oauth({**BASE, "twopc.oauth.token.provider": OPAQUE_PROVIDER,
                          "oauth_cb": lambda _config: ("t", 0.0)})
