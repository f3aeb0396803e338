"""librdkafka-style configuration to client settings."""

from __future__ import annotations

import pytest

from twopc.control.client import version_hint
from twopc.control.config import settings_from_config
from twopc.control.errors import ConfigError
from twopc.control.transactions import prefix_pattern


def test_producer_config_is_accepted() -> None:
    s = settings_from_config({
        "bootstrap.servers": "a:1, SASL_SSL://b:2", "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p",
        "transactional.id": "ignored", "linger.ms": 5, "ssl.endpoint.identification.algorithm":
        "none", "socket.timeout.ms": "5000"})
    assert s.bootstrap == (("a", 1), ("b", 2))
    assert s.uses_ssl and s.uses_sasl and s.sasl_mechanism == "SCRAM-SHA-512"
    assert not s.ssl_check_hostname and s.request_timeout_s == 5.0


@pytest.mark.parametrize(("config", "message"), [
    ({}, "bootstrap.servers is required"),
    ({"bootstrap.servers": "nohost"}, "HOST:PORT"),
    ({"bootstrap.servers": "a:1", "security.protocol": "tls"}, "security.protocol"),
    ({"bootstrap.servers": "a:1", "security.protocol": "SASL_PLAINTEXT",
      "sasl.mechanism": "GSSAPI", "sasl.username": "u", "sasl.password": "p"}, "GSSAPI"),
    ({"bootstrap.servers": "a:1", "security.protocol": "SASL_PLAINTEXT"}, "sasl.username"),
    ({"bootstrap.servers": "a:1", "security.protocol": "SSL",
      "ssl.keystore.location": "k.p12"}, "ssl.keystore.location"),
    ({"bootstrap.servers": "a:1", "socket.timeout.ms": "soon"}, "socket.timeout.ms"),
])
def test_bad_config_names_the_key(config: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_from_config(config)


def test_prefix_pattern_escapes_punctuation() -> None:
    assert prefix_pattern("app.q-1") == "^app\\.q\\-1.*"


def test_version_hint() -> None:
    assert version_hint({66: (0, 2)}, {"transaction.version": 2}).at_least == ">=4.1"
    assert version_hint({26: (0, 5), 66: (0, 1)}, {}).at_least == ">=4.0"
    assert version_hint({66: (0, 1)}, {}).at_least == ">=3.8"
    old = version_hint({24: (0, 3)}, {})
    assert not old.supported
