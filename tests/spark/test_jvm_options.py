"""format("kafka")'s `kafka.*` options (the Java producer's) read as librdkafka's: translated where
librdkafka has an equivalent, refused with the setting to use where it has none. Pure, and
librdkafka itself (a producer made, never connected) for the names that pass."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import KafkaException, Producer
from hypothesis import given
from hypothesis import strategies as st

from twopc.control.config import settings_from_config
from twopc.spark.errors import OptionError
from twopc.spark.jvm_options import (
    JAVA_PARTITIONER,
    REFUSED,
    RENAMED,
    SHARED,
    librdkafka_settings,
    parse_jaas,
)
from twopc.spark.options import parse_options

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9", "twopc.checkpoint": "file:///tmp/x",
        "twopc.transactionalIdPrefix": "orders"}

# A value librdkafka accepts for each name that passes unchanged or is produced here.
SAMPLES = {
    "bootstrap.servers": "127.0.0.1:9", "client.id": "c", "client.dns.lookup": "use_all_dns_ips",
    "acks": "all", "retries": "5", "compression.type": "zstd", "batch.size": "16384",
    "linger.ms": "5", "delivery.timeout.ms": "30000", "request.timeout.ms": "30000",
    "retry.backoff.ms": "100", "retry.backoff.max.ms": "1000", "reconnect.backoff.ms": "50",
    "reconnect.backoff.max.ms": "1000", "max.in.flight.requests.per.connection": "5",
    "metadata.max.age.ms": "300000", "connections.max.idle.ms": "540000",
    "socket.connection.setup.timeout.ms": "10000", "enable.metrics.push": "false",
    "metadata.recovery.strategy": "rebootstrap", "metadata.recovery.rebootstrap.trigger.ms": "300000",
    "security.protocol": "PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.kerberos.service.name": "kafka",
    "sasl.kerberos.kinit.cmd": "kinit", "sasl.kerberos.min.time.before.relogin": "60000",
    "ssl.key.password": "p", "ssl.endpoint.identification.algorithm": "none",
    "ssl.cipher.suites": "ECDHE-RSA-AES128-GCM-SHA256", "queue.buffering.max.kbytes": "32768",
    "message.max.bytes": "1048576", "socket.send.buffer.bytes": "0",
    "socket.receive.buffer.bytes": "0", "compression.level": "3", "partitioner": JAVA_PARTITIONER,
    "sasl.username": "u", "sasl.password": "p", "ssl.ca.location": "/nonexistent/ca.pem",
    "ssl.ca.pem": "", "transaction.timeout.ms": "60000", "transactional.id": "t",
}


@pytest.mark.parametrize("name", sorted(SHARED | set(RENAMED.values()) | {
    "compression.level", "partitioner", "sasl.username", "sasl.password", "ssl.ca.location"}))
def test_every_name_passed_to_librdkafka_is_one_it_knows(name: str) -> None:
    config = {"bootstrap.servers": "127.0.0.1:9", "transactional.id": "t",
              "transaction.timeout.ms": "60000", name: SAMPLES[name]}
    try:
        Producer(config)
    except KafkaException as exc:  # only an unknown name fails here: a bad file comes later
        assert "No such configuration property" not in str(exc), exc


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_java_only_setting_is_refused_naming_what_to_do(name: str) -> None:
    with pytest.raises(OptionError) as caught:
        librdkafka_settings({"bootstrap.servers": "b:1", name: "x"})
    text = str(caught.value)
    assert text.startswith(f"option kafka.{name} is a Java producer setting: ")
    assert "remove it" in text or "kafka.ssl." in text, text


def test_renamed_settings_and_their_units() -> None:
    out = librdkafka_settings({
        "bootstrap.servers": "b:1", "buffer.memory": "33554432", "max.request.size": "2097152",
        "send.buffer.bytes": "-1", "receive.buffer.bytes": "65536", "compression.type": "zstd",
        "compression.zstd.level": "9", "compression.gzip.level": "4",
        "ssl.endpoint.identification.algorithm": "", "acks": "all", "linger.ms": "20"})
    assert out == {
        "bootstrap.servers": "b:1", "queue.buffering.max.kbytes": "32768",
        "message.max.bytes": "2097152", "socket.send.buffer.bytes": "0",
        "socket.receive.buffer.bytes": "65536", "compression.type": "zstd",
        "compression.level": "9",  # the chosen codec's level; Java ignores the others too
        "ssl.endpoint.identification.algorithm": "none", "acks": "all", "linger.ms": "20",
        "partitioner": JAVA_PARTITIONER}
    assert librdkafka_settings({"buffer.memory": "1025"})["queue.buffering.max.kbytes"] == "2"
    with pytest.raises(OptionError, match=re.escape("kafka.buffer.memory must be an integer")):
        librdkafka_settings({"buffer.memory": "32m"})
    with pytest.raises(OptionError, match=re.escape(
            "disagree: kafka.max.request.size is Java's name for kafka.message.max.bytes")):
        librdkafka_settings({"max.request.size": "2", "message.max.bytes": "3"})


def test_the_partitioner_is_the_java_default_unless_chosen() -> None:
    assert librdkafka_settings({})["partitioner"] == "murmur2_random"
    assert librdkafka_settings({"partitioner": "consistent"})["partitioner"] == "consistent"
    java = "org.apache.kafka.clients.producer.internals.DefaultPartitioner"
    assert librdkafka_settings({"partitioner.class": java}) == {"partitioner": "murmur2_random"}
    with pytest.raises(OptionError, match=r"kafka\.partitioner\.class is a Java "
                                          r"producer setting: a Java class.*murmur2_random"):
        librdkafka_settings({"partitioner.class": "com.example.MyPartitioner"})


def test_truststores_and_keystores() -> None:
    pem = librdkafka_settings({"ssl.truststore.type": "PEM",
                               "ssl.truststore.location": "/etc/ca.pem"})
    assert pem == {"ssl.ca.location": "/etc/ca.pem", "partitioner": JAVA_PARTITIONER}
    inline = librdkafka_settings({"ssl.truststore.type": "pem",
                                  "ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----"})
    assert inline["ssl.ca.pem"] == "-----BEGIN CERTIFICATE-----"
    for more, kind in (({}, "JKS"), ({"ssl.truststore.type": "PKCS12"}, "PKCS12")):
        with pytest.raises(OptionError) as caught:
            librdkafka_settings({"ssl.truststore.location": "/etc/t.jks",
                                 "ssl.truststore.password": "secret", **more})
        text = str(caught.value)
        assert f"kafka.ssl.truststore.location is a Java producer setting: a {kind} truststore" \
            in text and "kafka.ssl.ca.location" in text and "keytool -exportcert" in text
        assert "secret" not in text
    with pytest.raises(OptionError, match="a PEM truststore has no password"):
        librdkafka_settings({"ssl.truststore.type": "PEM", "ssl.truststore.location": "/c",
                             "ssl.truststore.password": "x"})
    with pytest.raises(OptionError) as caught:
        librdkafka_settings({"ssl.keystore.location": "/etc/k.jks", "ssl.keystore.password": "s"})
    text = str(caught.value)
    assert "kafka.ssl.certificate.location and kafka.ssl.key.location" in text
    assert "openssl pkcs12 -in keystore.p12 -nokeys" in text and "keytool -importkeystore" in text


def test_java_cipher_suite_names_are_refused() -> None:
    with pytest.raises(OptionError, match="OpenSSL's names"):
        librdkafka_settings({"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"})
    ours = {"ssl.cipher.suites": "ECDHE-RSA-AES128-GCM-SHA256"}
    assert librdkafka_settings(ours)["ssl.cipher.suites"] == ours["ssl.cipher.suites"]


# ---- sasl.jaas.config ----------------------------------------------------------------------


@pytest.mark.parametrize(("jaas", "username", "password"), [
    (f'{PLAIN} required username="alice" password="alice-secret";', "alice", "alice-secret"),
    (f"{PLAIN} required username='alice' password='p;w=1 \"q\"';", "alice", 'p;w=1 "q"'),
    (f'{PLAIN} required\n  username=alice\n  password="a\\"b\\\\c";', "alice", 'a"b\\c'),
    (f'// a comment\n{PLAIN} /* flag: */ REQUIRED username="u" password="\\101\\t";', "u", "A\t"),
    (f'{SCRAM} required username="u" password="p" ;', "u", "p"),
])
def test_plain_and_scram_jaas_become_username_and_password(jaas: str, username: str,
                                                           password: str) -> None:
    mechanism = "SCRAM-SHA-512" if SCRAM in jaas else "PLAIN"
    out = librdkafka_settings({"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                               "sasl.jaas.config": jaas})
    assert out == {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                   "sasl.username": username, "sasl.password": password,
                   "partitioner": JAVA_PARTITIONER}


def test_plain_login_implies_its_mechanism_and_scram_needs_one() -> None:
    plain = librdkafka_settings({"sasl.jaas.config": f'{PLAIN} required username="u" password="p";'})
    assert plain["sasl.mechanism"] == "PLAIN"
    scram = {"sasl.jaas.config": f'{SCRAM} required username="u" password="p";'}
    with pytest.raises(OptionError, match=re.escape(
            "needs kafka.sasl.mechanism SCRAM-SHA-256 or SCRAM-SHA-512 (none is given)")):
        librdkafka_settings(scram)
    with pytest.raises(OptionError, match="not PLAIN"):
        librdkafka_settings({**scram, "sasl.mechanism": "PLAIN"})


@pytest.mark.parametrize(("jaas", "needle"), [
    ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
     "kafka.sasl.oauthbearer.method=oidc"),
    ("software.amazon.msk.auth.iam.IAMLoginModule required;",
     "twopc.oauthTokenProvider=aws_msk_iam_sasl_signer.MSKAuthTokenProvider:generate_auth_token"),
    ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k";',
     "kafka.sasl.kerberos.keytab"),
    ("com.example.Mine required;", "only the PLAIN and SCRAM login modules"),
    (f'{SCRAM} required username="u" password="p" tokenauth="true";', "delegation token"),
    (f'{SCRAM} required username="u";', "has no password"),
    (f'{PLAIN} required username="u" password="p"', "not ended by ';'"),
    (f'{PLAIN} username="u" password="p";', "needs a control flag"),
    (f'{PLAIN} required username password="p";', "no value for option 'username'"),
    (f'{PLAIN} required username="u" password="p"; {PLAIN} required username="v" password="q";',
     "more than one login module"),
    ("", "names no login module"),
])
def test_other_jaas_is_refused_saying_why(jaas: str, needle: str) -> None:
    with pytest.raises(OptionError) as caught:
        librdkafka_settings({"sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": jaas})
    assert needle in str(caught.value)
    assert '"p"' not in str(caught.value) and '"q"' not in str(caught.value)


def test_jaas_credentials_must_agree_with_sasl_username() -> None:
    jaas = f'{PLAIN} required username="u" password="p";'
    assert librdkafka_settings({"sasl.jaas.config": jaas, "sasl.username": "u"})["sasl.username"] \
        == "u"
    with pytest.raises(OptionError, match=re.escape(
            "kafka.sasl.jaas.config and kafka.sasl.username disagree")):
        librdkafka_settings({"sasl.jaas.config": jaas, "sasl.username": "v"})


@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
               max_size=40),
       st.sampled_from(['"', "'"]))
def test_any_password_quoted_as_java_reads_it_comes_back(password: str, quote: str) -> None:
    escaped = password.replace("\\", "\\\\").replace(quote, "\\" + quote)
    module, options = parse_jaas(f"{PLAIN} required username=u password={quote}{escaped}{quote};")
    assert module == PLAIN and options == {"username": "u", "password": password}


def test_the_driver_and_the_control_client_read_the_translation() -> None:
    """parse_options translates once: the producer's and the control client's settings alike."""
    config = parse_options({**BASE, "kafka.security.protocol": "SASL_SSL",
                            "kafka.sasl.mechanism": "SCRAM-SHA-512",
                            "kafka.sasl.jaas.config": f'{SCRAM} required username="w" '
                                                      'password="s3";',
                            "kafka.ssl.truststore.type": "PEM",
                            "kafka.ssl.truststore.location": "/etc/ca.pem",
                            "kafka.buffer.memory": "1048576"}, streaming=True)
    assert "sasl.jaas.config" not in config.producer_config
    assert config.producer_config["queue.buffering.max.kbytes"] == "1024"
    settings = settings_from_config(config.control_config())
    assert (settings.sasl_mechanism, settings.sasl_username, settings.sasl_password) == (
        "SCRAM-SHA-512", "w", "s3")
    assert settings.ssl_ca_location == "/etc/ca.pem"
    with pytest.raises(OptionError, match=re.escape(
            "kafka.max.block.ms is a Java producer setting")):
        parse_options({**BASE, "kafka.max.block.ms": "60000"}, streaming=False)


def test_java_delivery_timeout_above_the_transaction_timeout_says_so() -> None:
    """Java's delivery.timeout.ms (librdkafka's alias of message.timeout.ms) defaults to 120 s;
    a transactional librdkafka producer wants it within the transaction timeout."""
    from twopc.spark.option_checks import check_producer_config

    config = parse_options({**BASE, "kafka.delivery.timeout.ms": "120000"}, streaming=False)
    with pytest.raises(OptionError) as caught:
        check_producer_config(config)
    assert "kafka.delivery.timeout.ms, or kafka.message.timeout.ms, must be at most " \
           "twopc.transactionTimeoutMs=60000" in str(caught.value)
    fits = parse_options({**BASE, "kafka.delivery.timeout.ms": "30000"}, streaming=False)
    check_producer_config(fits)


OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTH_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
JAVA_OAUTH = {
    "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
    "sasl.login.callback.handler.class": OAUTH_HANDLER,
    "sasl.oauthbearer.token.endpoint.url": "https://idp.example/oauth2/token",
    "sasl.jaas.config": f'{OAUTH_MODULE} required clientId="writer" clientSecret="Zqsecret42" '
                        'scope="kafka" extension_logicalCluster="lkc-1" '
                        'extension_identityPoolId="pool-2";',
}


@pytest.mark.parametrize("handler", [
    OAUTH_HANDLER, "org.apache.kafka.common.security.oauthbearer.secured."
                   "OAuthBearerLoginCallbackHandler"])  # Kafka 3.x's name
def test_javas_oauth_client_credentials_become_librdkafkas_oidc(handler: str) -> None:
    out = librdkafka_settings({"bootstrap.servers": "127.0.0.1:9", **JAVA_OAUTH,
                               "sasl.login.callback.handler.class": handler})
    assert "sasl.jaas.config" not in out and "sasl.login.callback.handler.class" not in out
    assert {k: v for k, v in out.items() if k.startswith("sasl.oauthbearer.")} == {
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "writer",
        "sasl.oauthbearer.client.secret": "Zqsecret42", "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/oauth2/token",
        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2"}
    Producer({**out, "transactional.id": "t"})  # librdkafka knows every name (never connects)
    settings = settings_from_config(out)  # and so does the control client
    assert settings.oauth is not None and settings.oauth.method == "oidc"
    assert (settings.oauth.client_id, settings.oauth.client_secret) == ("writer", "Zqsecret42")
    assert dict(settings.oauth.extensions) == {"logicalCluster": "lkc-1", "identityPoolId": "pool-2"}


@pytest.mark.parametrize(("change", "needle"), [
    ({"sasl.login.callback.handler.class": None}, "makes unsigned tokens"),
    ({"sasl.jaas.config": None}, "has nothing to log in with"),
    ({"sasl.mechanism": "PLAIN"}, "needs kafka.sasl.mechanism OAUTHBEARER, not PLAIN"),
    ({"sasl.oauthbearer.token.endpoint.url": None}, "needs kafka.sasl.oauthbearer.token.endpoint"),
    ({"sasl.jaas.config": f'{OAUTH_MODULE} required clientId="writer";'}, "has no clientSecret"),
    ({"sasl.jaas.config": f'{OAUTH_MODULE} required clientId="w" clientSecret="Zqsecret42" '
                          'unsecuredLoginStringClaim_sub="Zqsub";'},
     "option(s) unsecuredLoginStringClaim_sub"),
    ({"sasl.jaas.config": f'{PLAIN} required username="u" password="Zqsecret42";'},
     "it serves OAuthBearerLoginModule"),
    ({"sasl.oauthbearer.client.secret": "other"},
     "kafka.sasl.jaas.config and kafka.sasl.oauthbearer.client.secret disagree"),
])
def test_javas_oauth_settings_that_cannot_be_translated_say_why(change: dict[str, str | None],
                                                                 needle: str) -> None:
    given = {**JAVA_OAUTH, **{k: v for k, v in change.items() if v is not None}}
    for key in [k for k, v in change.items() if v is None]:
        del given[key]
    with pytest.raises(OptionError) as caught:
        librdkafka_settings(given)
    assert needle in str(caught.value), caught.value
    assert "Zqsecret42" not in str(caught.value) and "Zqsub" not in str(caught.value)
