"""Issue 33, secrets: no repr, str or error shows a password, a key, a client secret, a storage
secret or the credentials of a checkpoint URL. One helper decides (checkpoint/redact.py)."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import checkpoint.errors as ce
from checkpoint import open_log
from checkpoint.redact import is_secret_key, redact_url
from twopc.control.config import settings_from_config
from twopc.errors import InconsistentLog, LogOwnershipLost, PrefixChanged, QueryMismatch
from twopc.spark.errors import OptionError
from twopc.spark.options import parse_options

secret_values = st.text(string.ascii_letters + string.digits, min_size=6, max_size=24).map(
    lambda s: "Zq" + s)

_BASE = {"kafka.bootstrap.servers": "b:9092", "twopc.checkpoint": "/chk/x",
         "twopc.transactionalIdPrefix": "p"}

SECRET_OPTIONS = ("kafka.sasl.password", "kafka.ssl.key.password", "kafka.ssl.keystore.password",
                  "kafka.sasl.oauthbearer.client.secret", "kafka.sasl.jaas.config",
                  "kafka.ssl.key.pem", "twopc.storage.secret", "twopc.storage.key",
                  "twopc.storage.token", "twopc.storage.password")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(SECRET_OPTIONS), secret_values)
def test_sink_options_never_show_a_secret(name: str, secret: str) -> None:
    try:
        config = parse_options({**_BASE, name: secret}, streaming=True)
    except OptionError as refused:  # a Java-only setting, or a jaas config that is only a secret
        assert name in ("kafka.ssl.keystore.password", "kafka.sasl.jaas.config"), refused
        assert secret not in str(refused)
        return
    assert secret not in repr(config) and secret not in str(config)
    assert "***" in repr(config)


_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


@settings(max_examples=60, deadline=None)
@given(secret_values, st.sampled_from([
    f'{_PLAIN} required username="u" password="{{s}}";',  # translated: kafka.sasl.password
    f'{_PLAIN} required username="u" "{{s}}";',  # a value without its name
    f'{_PLAIN} required username="u" password="{{s}}"',  # no ';'
    "{s} required;",  # the secret where the module belongs
    f'{_PLAIN} {{s}} password="x";',  # the secret where the flag belongs
]))
def test_a_jaas_config_never_shows_its_password(secret: str, template: str) -> None:
    try:
        config = parse_options({**_BASE, "kafka.sasl.jaas.config": template.format(s=secret)},
                               streaming=True)
    except OptionError as refused:
        assert secret not in str(refused), refused
        return
    assert config.producer_config["sasl.password"] == secret
    assert secret not in repr(config) and secret not in str(config)


@settings(max_examples=40, deadline=None)
@given(secret_values, secret_values)
def test_storage_options_json_never_shows_a_secret(a: str, b: str) -> None:
    raw = json.dumps({"client_kwargs": {"aws_secret_access_key": a}, "token": b, "anon": False})
    config = parse_options({**_BASE, "twopc.storageOptions": raw}, streaming=True)
    assert config.storage_options["token"] == b  # kept for use, hidden from view
    assert a not in repr(config) and b not in repr(config)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(("kafka.sasl.password", "kafka.ssl.key.password",
                        "kafka.sasl.oauthbearer.client.secret")), secret_values)
def test_copy_forward_settings_never_show_a_secret(name: str, secret: str) -> None:
    """Copy-forward's producer settings are the sink's (spark/reuse.py): they reach the driver's
    settings, whose repr must mask them as SinkConfig's does."""
    from twopc.driver.call import DriverSettings
    from twopc.protocol.copies import RepairSettings
    from twopc.protocol.owner import Owner
    from twopc.spark.reuse import _settings

    config = parse_options({**_BASE, name: secret}, streaming=True)
    settings = _settings(config, Owner.query("q-1", "p"))
    assert settings.repair.producer_config is not None
    assert secret in settings.repair.producer_config.values()  # kept for use, hidden from view
    for shown in (repr(settings), str(settings), repr(settings.repair),
                  repr(DriverSettings(Owner.query("q", "p"), repair=RepairSettings(
                      producer_config={name.removeprefix("kafka."): secret})))):
        assert secret not in shown
    assert "***" in repr(settings.repair)


@settings(max_examples=40, deadline=None)
@given(secret_values, secret_values)
def test_control_settings_never_show_a_password(password: str, key_password: str) -> None:
    s = settings_from_config({"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL",
                              "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
                              "sasl.password": password, "ssl.key.password": key_password})
    assert password not in repr(s) and key_password not in repr(s) and password not in str(s)
    assert s.sasl_password == password


@settings(max_examples=40, deadline=None)
@given(secret_values)
def test_errors_never_echo_url_credentials(secret: str) -> None:
    url = f"s3://AKIAUSER:{secret}@bucket/chk"
    errors: list[Exception] = [
        ce.RecordExists(url, 3), ce.KeyExists(url, "k"), ce.RecordCorrupt(url, "bad"),
        ce.UnsupportedFormatVersion(url, 9, 1), ce.ConditionalCreateUnsupported(url, "x"),
        ce.StorageUnavailable(url, "read", OSError(f"could not reach {url}")),
        ce.LogNotFound(url), ce.LogCorrupt(url, "x"), ce.RecordMissing(url, 1, 0, 3),
        ce.RecordPurged(url, 1, 2), ce.InvalidPurge(url, 3, 1), ce.RecordBeyondEnd(url, 9, 1),
        ce.AppendGap(url, 4), InconsistentLog(url, 2, "bad"), LogOwnershipLost(url, 2),
        QueryMismatch(url, "a", "b"), PrefixChanged(url, "a", "b", "p", "q")]
    for exc in errors:
        assert secret not in str(exc) and secret not in repr(exc), type(exc).__name__
        assert "s3://AKIAUSER:***@bucket/chk" in str(exc), str(exc)
        assert secret not in str(getattr(exc, "path", "")) + str(getattr(exc, "url", ""))


def test_a_log_opened_with_credentials_in_its_url_hides_them() -> None:
    log = open_log("memory://user:Zqhunter2hunter2@host/hostile-secrets", read_only=True)
    with pytest.raises(ce.RecordBeyondEnd) as info:
        log.read(4)
    assert "hunter2" not in str(info.value) and "memory://user:***@host" in str(info.value)


def test_url_and_key_rules() -> None:
    assert redact_url("https://u:p@h/x?sig=abc&a=1") == "https://u:***@h/x?sig=***&a=1"
    assert redact_url("gs://tok@b/x") == "gs://***@b/x"
    assert redact_url("/plain/path") == "/plain/path"
    for key in ("sasl.password", "ssl.key.pem", "sasl.oauthbearer.config", "secret", "key",
                "account_key", "connection_string", "clientSecret"):
        assert is_secret_key(key), key
    for key in ("ssl.key.location", "sasl.username", "bootstrap.servers", "ssl.certificate.pem",
                "anon", "endpoint_url"):
        assert not is_secret_key(key), key
    # OAuth: tokens and secrets masked; where a token comes from shown (errors name it).
    for key in ("sasl.oauthbearer.client.secret", "access_token", "client_secret",
                "sasl.oauthbearer.client.credentials.client.secret",
                "sasl.oauthbearer.assertion.private.key.passphrase"):
        assert is_secret_key(key), key
    for key in ("sasl.oauthbearer.token.endpoint.url", "token_endpoint_url",
                "twopc.oauthTokenProvider", "twopc.oauth.token.provider",
                "sasl.oauthbearer.client.id", "sasl.oauthbearer.jwks.endpoint.url"):
        assert not is_secret_key(key), key


def test_storage_error_names_the_cause_and_what_to_check() -> None:
    denied = ce.StorageUnavailable("/chk", "read", PermissionError(13, "Permission denied"))
    missing = ce.StorageUnavailable("/chk", "read", FileNotFoundError(2, "No such file"))
    down = ce.StorageUnavailable("s3://b/chk", "read", ConnectionError("connection refused"))
    assert "Permission denied" in str(denied) and "permission" in str(denied).split(";")[1]
    assert "No such file" in str(missing) and "check the URL" in str(missing)
    assert "connection refused" in str(down) and "network" in str(down)
    assert len({str(denied).split(":", 1)[1], str(missing).split(":", 1)[1],
                str(down).split(":", 1)[1]}) == 3
    assert "see the cause" not in str(denied)
