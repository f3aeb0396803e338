"""SASL/OAUTHBEARER's pure parts (twopc/control/oauth.py): the client's initial response (RFC 7628),
the server's error challenge, token expiry in seconds or milliseconds, the token source settings and
their errors, and the Spark option that names a token provider."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twopc_testing.oauth import PROVIDER, b64url, unsigned_token

from twopc.control import ConfigError
from twopc.control.config import settings_from_config
from twopc.control.oauth import (
    ERROR_ACK,
    OAuthTokenError,
    Token,
    TokenSource,
    initial_response,
    jwt_claims,
    normalize_expiry,
    oauth_settings,
    parse_extensions,
    refusal_message,
    server_error,
)
from twopc.spark.errors import OptionError
from twopc.spark.options import parse_options

BASE = {"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER"}


def test_initial_response_is_rfc7628s_client_first_message() -> None:
    assert initial_response("abc.def.ghi") == b"n,,\x01auth=Bearer abc.def.ghi\x01\x01"
    assert initial_response("t", (("logicalCluster", "lkc-1"), ("identityPoolId", "pool-2"))) == \
        b"n,,\x01auth=Bearer t\x01logicalCluster=lkc-1\x01identityPoolId=pool-2\x01\x01"
    assert initial_response("t", authzid="alice") == b"n,a=alice,\x01auth=Bearer t\x01\x01"
    assert ERROR_ACK == b"\x01"


@given(st.text(alphabet="ABCXYZabcxyz0123456789-_.~+/", min_size=1, max_size=200))
def test_the_token_is_the_value_of_auth(token: str) -> None:
    message = initial_response(token).decode()
    gs2, _, rest = message.partition("\x01")
    assert gs2 == "n,," and rest.endswith("\x01\x01")
    pairs = dict(p.split("=", 1) for p in rest[:-2].split("\x01"))
    assert pairs == {"auth": f"Bearer {token}"}


def test_extensions_are_parsed_and_checked() -> None:
    assert parse_extensions("logicalCluster=lkc-1, identityPoolId=pool-2") == (
        ("logicalCluster", "lkc-1"), ("identityPoolId", "pool-2"))
    assert parse_extensions(None) == ()
    for bad in ("auth=x", "no-equals", "bad_key=1", "k="):
        with pytest.raises(ConfigError, match=r"sasl\.oauthbearer\.extensions"):
            parse_extensions(bad)


def test_the_servers_error_challenge_is_json() -> None:
    assert server_error(b'{"status":"invalid_token"}') == {"status": "invalid_token"}
    assert server_error(b'{"status":"insufficient_scope", "scope":"kafka"}')["scope"] == "kafka"
    assert server_error(b"not json") == {"status": "not json"}


def test_jwt_claims_and_non_jwts() -> None:
    claims = {"sub": "w", "aud": "a", "exp": 5}
    token = f"{b64url(b'{}')}.{b64url(json.dumps(claims).encode())}.sig"
    assert jwt_claims(token) == claims
    assert jwt_claims("aHR0cHM6Ly9rYWZrYS51cy1lYXN0LTEuYW1hem9uYXdzLmNvbS8") is None  # MSK IAM
    assert jwt_claims("a.!!!.c") is None


def test_expiry_in_seconds_or_milliseconds() -> None:
    now = time.time()
    assert normalize_expiry(now + 60, "p") == pytest.approx(now + 60)
    assert normalize_expiry(int((now + 60) * 1000), "p") == pytest.approx(now + 60, abs=0.01)
    for bad in ("soon", None, True):
        with pytest.raises(OAuthTokenError, match="expiry"):
            normalize_expiry(bad, "p")


def test_settings_need_exactly_one_token_source() -> None:
    with pytest.raises(ConfigError, match="exactly one token source"):
        settings_from_config(BASE)
    with pytest.raises(ConfigError, match="exactly one token source"):
        settings_from_config({**BASE, "twopc.oauth.token.provider": PROVIDER,
                              "sasl.oauthbearer.method": "oidc"})
    with pytest.raises(ConfigError, match=r"sasl\.oauthbearer\.client\.secret"):
        settings_from_config({**BASE, "sasl.oauthbearer.method": "oidc",
                              "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
                              "sasl.oauthbearer.client.id": "c"})
    with pytest.raises(ConfigError, match="cannot be loaded"):
        settings_from_config({**BASE, "twopc.oauth.token.provider": "no_such_module:f"})
    with pytest.raises(ConfigError, match="module:function"):
        settings_from_config({**BASE, "twopc.oauth.token.provider": "justamodule"})
    s = settings_from_config({**BASE, "twopc.oauth.token.provider": PROVIDER,
                              "sasl.oauthbearer.config": "region=eu-west-1"})
    assert s.oauth is not None and s.oauth.method == "provider"
    assert s.oauth.oauthbearer_config == "region=eu-west-1" and s.sasl_username is None


def test_the_token_source_caches_until_80_percent_of_the_lifetime() -> None:
    source = TokenSource(oauth_settings({**BASE, "enable.sasl.oauthbearer.unsecure.jwt": "true",
                                         "sasl.oauthbearer.config": "principal=a lifeSeconds=3"}))
    first = source.token()
    assert source.token() is first and jwt_claims(first.access_token)["sub"] == "a"  # type: ignore[index]
    time.sleep(2.5)
    assert source.token() is not first and source.fetches == 2


def test_an_expired_token_is_refused_by_its_own_exp() -> None:
    token = unsigned_token("a", lifetime_s=-10)
    with pytest.raises(OAuthTokenError, match="has expired"):
        from twopc.control.oauth import _refuse_expired

        _refuse_expired(Token(token, time.time() + 60, time.time()),
                        oauth_settings({**BASE, "twopc.oauth.token.provider": PROVIDER}))


def test_the_spark_option_carries_the_provider_to_both_halves() -> None:
    options = {"kafka.bootstrap.servers": "b:9092", "kafka.sasl.mechanism": "OAUTHBEARER",
               "kafka.security.protocol": "SASL_SSL", "twopc.oauthtokenprovider": PROVIDER,
               "twopc.checkpoint": "file:///tmp/x", "twopc.transactionalIdPrefix": "p"}
    config = parse_options(options, streaming=False)
    assert config.producer_config["twopc.oauth.token.provider"] == PROVIDER
    with pytest.raises(OptionError, match="OAUTHBEARER"):
        parse_options({**options, "kafka.sasl.mechanism": "PLAIN"}, streaming=False)


def test_a_refusal_says_what_the_token_held_and_where_it_came_from() -> None:
    settings = oauth_settings({**BASE, "twopc.oauth.token.provider": PROVIDER})
    jwt = Token(unsigned_token("w", aud="other"), time.time() + 60, time.time())
    text = refusal_message("b1:9098", "invalid_token", jwt, settings)
    assert "refused the OAUTHBEARER token (invalid_token)" in text and "aud='other'" in text
    assert "sasl.oauthbearer.expected.audience" in text and PROVIDER in text
    msk = Token("aHR0cHM6Ly9rYWZrYS5ldS13ZXN0LTEuYW1hem9uYXdzLmNvbS8", time.time() + 900, time.time())
    assert "kafka-cluster:Connect" in refusal_message("b1:9098", "invalid_token", msk, settings)


@pytest.mark.parametrize(("extra", "named"), [
    ({"sasl.oauthbearer.grant.type": "urn:ietf:params:oauth:grant-type:jwt-bearer"},
     "sasl.oauthbearer.grant.type=urn:ietf:params:oauth:grant-type:jwt-bearer"),
    ({"sasl.oauthbearer.assertion.private.key.file": "/keys/k.pem"},
     "sasl.oauthbearer.assertion.private.key.file"),
    ({"sasl.oauthbearer.metadata.authentication.type": "azure_imds"},
     "sasl.oauthbearer.metadata.authentication.type=azure_imds"),
    ({"sasl.oauthbearer.metadata.authentication.type": "aws_iam"},
     "sasl.oauthbearer.metadata.authentication.type=aws_iam"),
    ({"https.certificate.location": "/certs/client.pem"}, "https.certificate.location"),
    ({"https.key.location": "/certs/client.key"}, "https.key.location"),
])
def test_what_the_control_client_cannot_do_is_refused_by_name(extra: dict[str, str],
                                                              named: str) -> None:
    oidc = {**BASE, "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
            "sasl.oauthbearer.client.id": "c", "sasl.oauthbearer.client.secret": "Zqsecret42"}
    with pytest.raises(ConfigError) as info:
        settings_from_config({**oidc, **extra})
    text = str(info.value)
    assert named in text, text
    assert "twopc.oauth.token.provider=module:function" in text  # the setting to use instead
    assert "twopc.oauthTokenProvider" in text
    assert "Zqsecret42" not in text
    # The default grant, and `none`, are what the control client does.
    settings_from_config({**oidc, "sasl.oauthbearer.grant.type": "client_credentials",
                          "sasl.oauthbearer.metadata.authentication.type": "none"})


def test_librdkafkas_aliases_and_https_ca_pem_are_taken() -> None:
    s = settings_from_config({**BASE, "sasl.oauthbearer.method": "oidc",
                              "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
                              "sasl.oauthbearer.client.credentials.client.id": "c",
                              "sasl.oauthbearer.client.credentials.client.secret": "s",
                              "https.ca.pem": "-----BEGIN CERTIFICATE-----"})
    assert s.oauth is not None and (s.oauth.client_id, s.oauth.client_secret) == ("c", "s")
    assert s.oauth.https_ca_pem == "-----BEGIN CERTIFICATE-----"


def test_no_repr_or_error_shows_a_token_or_a_client_secret() -> None:
    jwt = unsigned_token("writer", aud="kafka")
    token = Token(jwt, time.time() + 60, time.time())
    assert jwt not in repr(token) and jwt.split(".")[1] not in repr(token) and "***" in repr(token)
    s = settings_from_config({**BASE, "sasl.oauthbearer.method": "oidc",
                              "sasl.oauthbearer.token.endpoint.url":
                                  "https://user:Zqpass77@idp.example/token?client_secret=Zqq",
                              "sasl.oauthbearer.client.id": "writer-app",
                              "sasl.oauthbearer.client.secret": "Zqsecret42",
                              "sasl.oauthbearer.config": "clientSecret=Zqcfg55"})
    for shown in (repr(s), repr(s.oauth), s.oauth.source if s.oauth else ""):
        for secret in ("Zqsecret42", "Zqpass77", "Zqcfg55", "Zqq"):
            assert secret not in shown, (secret, shown)
    assert "idp.example/token" in repr(s.oauth) and "writer-app" in repr(s.oauth)
    # Where the token comes from is named, not masked: errors must say which setting made it.
    config = parse_options({"kafka.bootstrap.servers": "b:9092", "kafka.sasl.mechanism":
                            "OAUTHBEARER", "kafka.security.protocol": "SASL_SSL",
                            "twopc.oauthTokenProvider": PROVIDER,
                            "twopc.checkpoint": "/chk/x", "twopc.transactionalIdPrefix": "p"},
                           streaming=False)
    assert PROVIDER in repr(config)
    assert refusal_message("b:1", "invalid_token", token,
                           oauth_settings({**BASE, "twopc.oauth.token.provider": PROVIDER})
                           ).count(jwt) == 0


def test_an_error_is_relabelled_with_the_spark_option() -> None:
    err = OAuthTokenError(f"the OAUTHBEARER token from twopc.oauth.token.provider={PROVIDER} has "
                          "expired", f"twopc.oauth.token.provider={PROVIDER}")
    spark = err.relabel(f"twopc.oauthTokenProvider={PROVIDER}")
    assert str(spark).startswith(f"the OAUTHBEARER token from twopc.oauthTokenProvider={PROVIDER}")
    assert spark.setting == f"twopc.oauthTokenProvider={PROVIDER}"


def test_the_spark_guards_name_the_spark_option_the_user_set() -> None:
    from twopc.spark.option_checks import spark_named

    provider = OAuthTokenError(f"the OAUTHBEARER token from twopc.oauth.token.provider={PROVIDER} "
                               "has expired", f"twopc.oauth.token.provider={PROVIDER}")
    assert spark_named(provider).setting == f"twopc.oauthTokenProvider={PROVIDER}"
    oidc_source = ("sasl.oauthbearer.token.endpoint.url=https://idp.example/token with "
                   "sasl.oauthbearer.client.id=writer")
    oidc = spark_named(OAuthTokenError(f"the token endpoint refused {oidc_source}", oidc_source))
    assert str(oidc) == ("the token endpoint refused kafka.sasl.oauthbearer.token.endpoint.url="
                         "https://idp.example/token with kafka.sasl.oauthbearer.client.id=writer")
