"""The loopback token endpoint (twopc/control/oauth_relay.py) that serves librdkafka the tokens of
`twopc.oauth.token.provider`, and the choice between it and an `oauth_cb` (`librdkafka_oauth`).
No broker: librdkafka's OIDC client fetches its first token when the client is made."""

from __future__ import annotations

import base64
import json
import multiprocessing
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Producer
from twopc_testing.oauth import OPAQUE_PROVIDER, unsigned_token

from twopc.control import oauth_relay
from twopc.control.oauth import (
    OAuthSettings,
    ProducerOAuthCallback,
    Token,
    TokenSource,
    describe_source,
    librdkafka_config,
    librdkafka_oauth,
    token_source,
)
from twopc.executor.producer import build_off_thread, transactional_producer_config

BASE = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER"}
# The test provider's tokens are unsigned JWTs here: `principal=` is Kafka's unsecured format.
JWT_PROVIDER = "tests.control.test_oauth_relay:jwt_token"
FAILING_PROVIDER = "tests.control.test_oauth_relay:failing_token"


def jwt_token(config: str) -> tuple[str, float]:
    return unsigned_token("relay-user", lifetime_s=600, aud="kafka"), time.time() + 600


def failing_token(config: str) -> tuple[str, float]:
    raise RuntimeError("the identity provider is down")


class _Static(TokenSource):
    """A TokenSource that hands out the given tokens, counting the calls."""

    def __init__(self, *tokens: Token) -> None:
        super().__init__(OAuthSettings("provider", provider="static:tokens"))
        self._queue = list(tokens)
        self.calls = 0

    def token(self, min_remaining_s: float = 2.0) -> Token:
        self.calls += 1
        return self._queue[min(self.calls, len(self._queue)) - 1]


def _post(url: str, secret: str | None, client_id: str = oauth_relay.CLIENT_ID
          ) -> tuple[int, dict[str, Any]]:
    headers = {}
    if secret is not None:
        basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
        headers["Authorization"] = f"Basic {basic}"
    request = urllib.request.Request(url, data=b"grant_type=client_credentials", method="POST",
                                     headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_relay_serves_a_registered_sources_token_to_its_client_only() -> None:
    relay = oauth_relay.relay()
    token = Token(unsigned_token("u", lifetime_s=300), time.time() + 300, time.time())
    source = _Static(token)
    url = relay.register(source)
    assert url.startswith("http://127.0.0.1:") and relay.register(source) == url
    status, body = _post(url, relay.secret)
    assert status == 200 and body["access_token"] == token.access_token
    assert body["token_type"] == "bearer" and 290 <= body["expires_in"] <= 300
    assert _post(url, None)[0] == 401
    assert _post(url, "not-the-secret")[0] == 401
    assert _post(url, relay.secret, client_id="someone")[0] == 401
    assert _post(url.rsplit("/", 1)[0] + "/999", relay.secret)[0] == 404
    assert relay.source_of(url) is source and relay.source_of("http://idp/token") is None


def test_a_failing_provider_is_a_json_error_naming_it_without_secrets() -> None:
    source = token_source(OAuthSettings("provider", "client_secret=Zqsecret99",
                                        provider=FAILING_PROVIDER))
    url = oauth_relay.relay().register(source)
    status, body = _post(url, oauth_relay.relay().secret)
    assert status == 400 and body["error"] == "invalid_grant"
    assert FAILING_PROVIDER in body["error_description"]
    assert "the identity provider is down" in body["error_description"]
    assert "Zqsecret99" not in json.dumps(body)


def test_a_jwt_is_relayed_and_librdkafka_fetches_it_without_waiting() -> None:
    config = {**BASE, "twopc.oauth.token.provider": JWT_PROVIDER}
    settings = librdkafka_oauth(config)
    relay = oauth_relay.relay()
    assert settings["sasl.oauthbearer.method"] == "oidc"
    assert settings["sasl.oauthbearer.client.id"] == oauth_relay.CLIENT_ID
    assert settings["sasl.oauthbearer.client.secret"] == relay.secret
    served = relay.served
    # No oauth_cb: confluent-kafka's constructor waits (sleeps a whole second) only for one.
    client_config = librdkafka_config(config)
    assert "oauth_cb" not in client_config and "twopc.oauth.token.provider" not in client_config
    producer = Producer(client_config)
    deadline = time.monotonic() + 10
    while relay.served == served and time.monotonic() < deadline:
        producer.poll(0.05)
    assert relay.served > served, "librdkafka never asked the relay for the token"
    described = describe_source(settings)
    assert described is not None and JWT_PROVIDER in described and "sub='relay-user'" in described


def test_a_token_that_is_no_jwt_goes_through_oauth_cb_built_off_the_callers_thread() -> None:
    config = {**BASE, "twopc.oauth.token.provider": OPAQUE_PROVIDER}
    settings = librdkafka_oauth(config)
    assert list(settings) == ["oauth_cb"] and isinstance(settings["oauth_cb"], ProducerOAuthCallback)
    _, expiry, principal, extensions = settings["oauth_cb"]("")
    assert principal == "opaque-user" and extensions == {"logicalCluster": "lkc-1"}
    assert expiry == pytest.approx(time.time() + 3600, abs=5)  # milliseconds made seconds
    producer_config = transactional_producer_config(config, "t-0-0", 60000)
    assert build_off_thread(producer_config)
    assert "twopc.oauth.token.provider" not in producer_config
    assert "opaque-user" not in repr(settings["oauth_cb"])


def test_behind_an_http_proxy_the_relay_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    config = {**BASE, "twopc.oauth.token.provider": JWT_PROVIDER}
    monkeypatch.setenv("http_proxy", "http://proxy.example:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert oauth_relay.proxied()
    assert list(librdkafka_oauth(config)) == ["oauth_cb"]
    for no_proxy in ("127.0.0.1", "localhost,127.0.0.0/8", "*"):
        monkeypatch.setenv("no_proxy", no_proxy)
        assert not oauth_relay.proxied(), no_proxy
    monkeypatch.setenv("no_proxy", "localhost,.internal")
    assert oauth_relay.proxied()
    monkeypatch.delenv("http_proxy")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")  # https only: not for us
    assert not oauth_relay.proxied()


def test_relayable_means_a_jwt_with_exp_and_sub() -> None:
    now = time.time()
    assert Token(unsigned_token("a"), now + 60, now).relayable
    no_sub = unsigned_token("a").split(".")
    claims = base64.urlsafe_b64encode(json.dumps({"exp": now + 60}).encode()).rstrip(b"=")
    assert not Token(f"{no_sub[0]}.{claims.decode()}.", now + 60, now).relayable
    assert not Token("aHR0cHM6Ly9rYWZrYS5leGFtcGxlLw", now + 60, now).relayable


def _relay_in_child(queue: Any) -> None:
    relay = oauth_relay.relay()
    queue.put((relay.pid, relay.port))


def test_a_forked_child_starts_its_own_relay() -> None:
    parent = oauth_relay.relay()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_relay_in_child, args=(queue,))
    child.start()
    pid, port = queue.get(timeout=30)
    child.join(30)
    assert pid == child.pid and pid != parent.pid and port != parent.port
    assert oauth_relay.relay() is parent
