"""The `kafka.*` options of Spark's built-in Kafka sink, read as librdkafka's. Pure.

Spark's `format("kafka")` hands its `kafka.*` options to the Java producer; kafka2pc hands them to
librdkafka (confluent-kafka) and to twopc's control client, which reads librdkafka's names
(twopc/control/config.py). A job switching from `format("kafka")` keeps its options: the Java
settings that librdkafka has under another name or form are translated here, and those it has no
equivalent for are refused, each naming the librdkafka setting to use instead. Names that both
clients share (`acks`, `linger.ms`, `security.protocol`, `sasl.mechanism`, ...: SHARED) and
librdkafka's own names pass unchanged; librdkafka refuses what it does not know when the driver
makes its producer at start (option_checks.check_producer_config).

Checked against librdkafka's CONFIGURATION.md (2.16) and Kafka's ProducerConfig, SaslConfigs
and SslConfigs (4.x); tests/spark/test_jvm_options.py makes a librdkafka producer with every
name this module passes or produces.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from twopc.spark.errors import OptionError

# Java producer settings librdkafka takes under the same name and meaning (tested).
SHARED = frozenset({
    "bootstrap.servers", "client.id", "client.dns.lookup", "acks", "retries", "compression.type",
    "batch.size", "linger.ms", "delivery.timeout.ms", "request.timeout.ms", "retry.backoff.ms",
    "retry.backoff.max.ms", "reconnect.backoff.ms", "reconnect.backoff.max.ms",
    "max.in.flight.requests.per.connection", "metadata.max.age.ms", "connections.max.idle.ms",
    "socket.connection.setup.timeout.ms", "enable.metrics.push", "metadata.recovery.strategy",
    "metadata.recovery.rebootstrap.trigger.ms", "security.protocol", "sasl.mechanism",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "ssl.cipher.suites",
})

# The Java producer's default partitioner (murmur2 of the key, sticky for null keys) as
# librdkafka names it: the same key lands in the same partition as with format("kafka").
JAVA_PARTITIONER = "murmur2_random"
_JAVA_PARTITIONERS = {
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner": JAVA_PARTITIONER,
}

_PEM_KEYS = ("give the client certificate and its key as PEM files: kafka.ssl.certificate.location "
             "and kafka.ssl.key.location (kafka.ssl.key.password for an encrypted key). From a "
             "PKCS12 keystore: `openssl pkcs12 -in keystore.p12 -nokeys -out client.pem` and "
             "`openssl pkcs12 -in keystore.p12 -nocerts -out client.key`; a JKS one first "
             "`keytool -importkeystore -srckeystore keystore.jks -destkeystore keystore.p12 "
             "-deststoretype PKCS12`")
_PEM_CA = ("give the CA certificate(s) as a PEM file: kafka.ssl.ca.location (or inline, "
           "kafka.ssl.ca.pem). From a JKS or PKCS12 truststore: `keytool -exportcert -rfc "
           "-keystore truststore.jks -alias <alias> -file ca.pem` (or `openssl pkcs12 -in "
           "truststore.p12 -nokeys -out ca.pem`); a PEM truststore is taken as it is "
           "(kafka.ssl.truststore.type=PEM)")
_JSSE = "a Java security (JSSE) setting: librdkafka uses OpenSSL; remove it"
_JAVA_CLASS = ("a Java class, which librdkafka cannot load: give the mechanism's librdkafka "
               "settings instead (kafka.sasl.username and kafka.sasl.password for PLAIN and SCRAM, "
               "kafka.sasl.oauthbearer.* for OAUTHBEARER, or a Python token provider: "
               "twopc.oauthTokenProvider=module:function, as for AWS MSK IAM); remove it")
_METRICS = ("librdkafka has no JMX metrics; twopc's figures are on TwopcProgressListener and the "
            "`twopc` log lines; remove it")
_LOGIN_REFRESH = "Java's login refresh: librdkafka refreshes credentials itself; remove it"
_PARTITIONER_CLASS = (
    "a Java class, which librdkafka cannot load: choose kafka.partitioner (random, consistent, "
    "consistent_random, murmur2, murmur2_random: the Java default's, fnv1a, fnv1a_random) or write "
    "a partition column")
_PARTITIONING = ("librdkafka has no equivalent: choose kafka.partitioner (murmur2_random is the "
                 "Java default's, random ignores keys) or write a partition column; remove it")

# Java settings librdkafka has no equivalent for, each with what to do instead.
REFUSED: dict[str, str] = {
    "max.block.ms": (
        "librdkafka's produce() never blocks: twopc's writer waits for queue space itself, within "
        "the task's budget (twopc.taskBudgetMs) and the transaction timeout; the queue's size is "
        "kafka.queue.buffering.max.kbytes / kafka.queue.buffering.max.messages; remove it"),
    "metadata.max.idle.ms": (
        "librdkafka refreshes the metadata of the topics it writes every "
        "kafka.topic.metadata.refresh.interval.ms; remove it"),
    "interceptor.classes": (
        "Java classes cannot run in librdkafka, whose interceptors are C plugins "
        "(kafka.plugin.library.paths); remove it"),
    "partitioner.ignore.keys": _PARTITIONING,
    "partitioner.adaptive.partitioning.enable": _PARTITIONING,
    "partitioner.availability.timeout.ms": _PARTITIONING,
    "socket.connection.setup.timeout.max.ms": (
        "librdkafka has one connection set-up timeout, kafka.socket.connection.setup.timeout.ms; "
        "remove it"),
    "metric.reporters": _METRICS,
    "metrics.num.samples": _METRICS,
    "metrics.sample.window.ms": _METRICS,
    "metrics.recording.level": _METRICS,
    "auto.include.jmx.reporter": _METRICS,
    "transaction.two.phase.commit.enable": (
        "twopc runs the two-phase commit itself (KIP-939 is not used); remove it"),
    "ssl.protocol": ("librdkafka negotiates the newest TLS version that OpenSSL and the brokers "
                     "share; remove it"),
    "ssl.enabled.protocols": ("librdkafka negotiates the newest TLS version that OpenSSL and the "
                              "brokers share; remove it"),
    "ssl.provider": _JSSE,
    "security.providers": _JSSE,
    "ssl.engine.factory.class": _JSSE,
    "ssl.keymanager.algorithm": _JSSE,
    "ssl.trustmanager.algorithm": _JSSE,
    "ssl.secure.random.implementation": _JSSE,
    "ssl.keystore.location": _PEM_KEYS,
    "ssl.keystore.password": _PEM_KEYS,
    "ssl.keystore.type": _PEM_KEYS,
    "ssl.keystore.certificate.chain": _PEM_KEYS,
    "ssl.keystore.key": _PEM_KEYS,
    "sasl.client.callback.handler.class": _JAVA_CLASS,
    "sasl.login.callback.handler.class": _JAVA_CLASS,
    "sasl.login.class": _JAVA_CLASS,
    "sasl.kerberos.ticket.renew.window.factor": (
        "librdkafka renews the ticket with kafka.sasl.kerberos.kinit.cmd every "
        "kafka.sasl.kerberos.min.time.before.relogin; remove it"),
    "sasl.kerberos.ticket.renew.jitter": (
        "librdkafka renews the ticket with kafka.sasl.kerberos.kinit.cmd every "
        "kafka.sasl.kerberos.min.time.before.relogin; remove it"),
    "sasl.login.refresh.window.factor": _LOGIN_REFRESH,
    "sasl.login.refresh.window.jitter": _LOGIN_REFRESH,
    "sasl.login.refresh.min.period.seconds": _LOGIN_REFRESH,
    "sasl.login.refresh.buffer.seconds": _LOGIN_REFRESH,
    "sasl.login.connect.timeout.ms": _LOGIN_REFRESH,
    "sasl.login.read.timeout.ms": _LOGIN_REFRESH,
    "sasl.login.retry.backoff.ms": _LOGIN_REFRESH,
    "sasl.login.retry.backoff.max.ms": _LOGIN_REFRESH,
}

# Java settings librdkafka has under another name (the value is converted where its unit differs).
RENAMED = {
    "buffer.memory": "queue.buffering.max.kbytes",  # bytes -> KiB
    "max.request.size": "message.max.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",  # -1 (the OS's) -> 0
    "receive.buffer.bytes": "socket.receive.buffer.bytes",  # -1 (the OS's) -> 0
}
_CODECS = ("gzip", "lz4", "zstd")  # compression.<codec>.level -> compression.level
_TRUSTSTORE = ("ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
               "ssl.truststore.certificates")
_JAAS_KEY = "sasl.jaas.config"
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# Kafka's client-credentials login handler (Kafka 3.x's name, deprecated in 4, and 4's): what
# librdkafka's sasl.oauthbearer.method=oidc does, so with OAuthBearerLoginModule it is translated.
_OAUTH_LOGIN_HANDLERS = frozenset({
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
})
_OAUTH_HANDLER_KEY = "sasl.login.callback.handler.class"
_OAUTH_INSTEAD = ("kafka.sasl.oauthbearer.method=oidc with kafka.sasl.oauthbearer.client.id, "
                  "kafka.sasl.oauthbearer.client.secret and "
                  "kafka.sasl.oauthbearer.token.endpoint.url, or a Python token provider: "
                  "twopc.oauthTokenProvider=module:function")
_OTHER_MODULES = {
    "software.amazon.msk.auth.iam.IAMLoginModule": (
        "AWS MSK IAM from Python is OAUTHBEARER with aws-msk-iam-sasl-signer-python's signer: "
        "kafka.sasl.mechanism=OAUTHBEARER, twopc.oauthTokenProvider="
        "aws_msk_iam_sasl_signer.MSKAuthTokenProvider:generate_auth_token and "
        "kafka.sasl.oauthbearer.config=<the cluster's region> (README, Run it on a cluster)"),
    "com.sun.security.auth.module.Krb5LoginModule": (
        "GSSAPI (Kerberos) takes librdkafka's kafka.sasl.kerberos.keytab and "
        "kafka.sasl.kerberos.principal, but twopc's control client does not support GSSAPI: use "
        "PLAIN or SCRAM"),
}


def _refuse(key: str, why: str) -> OptionError:
    return OptionError(f"option kafka.{key} is a Java producer setting: {why}")


def _integer(key: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise OptionError(f"option kafka.{key} must be an integer, got {raw[:40]!r}") from None


def _converted(key: str, raw: str) -> str:
    if key == "buffer.memory":
        size = _integer(key, raw)
        if size < 1024:
            raise OptionError(f"option kafka.buffer.memory={size} is below librdkafka's smallest "
                              "queue (kafka.queue.buffering.max.kbytes=1, 1024 bytes)")
        return str(math.ceil(size / 1024))
    if key in ("send.buffer.bytes", "receive.buffer.bytes"):
        size = _integer(key, raw)
        return "0" if size == -1 else str(size)
    return raw


def _put(out: dict[str, str], key: str, value: str, source: str) -> None:
    """Set librdkafka's `key` from the Java option `source`, unless it is given otherwise."""
    given = out.get(key)
    if given is not None and given != value:
        raise OptionError(f"options kafka.{source} and kafka.{key} disagree: kafka.{source} is "
                          f"Java's name for kafka.{key}; give one of them")
    out[key] = value


def librdkafka_settings(producer: Mapping[str, str]) -> dict[str, str]:
    """`producer` (the `kafka.*` options, prefix removed) with Java's settings translated into
    librdkafka's; OptionError for a Java setting librdkafka has no equivalent for, naming what
    to set instead. The Java producer's default partitioner unless one is chosen."""
    out = dict(producer)
    # Kafka's own OAuth login handler is translated with the jaas config (_oauth_jaas), not refused.
    oauth_handler = out.get(_OAUTH_HANDLER_KEY, "").strip() in _OAUTH_LOGIN_HANDLERS
    if oauth_handler:
        out.pop(_OAUTH_HANDLER_KEY)
    for key in [k for k in out if k in REFUSED]:
        raise _refuse(key, REFUSED[key])
    cipher = out.get("ssl.cipher.suites", "")
    if any(name.strip().startswith(("TLS_", "SSL_")) for name in cipher.split(",")):
        raise OptionError("option kafka.ssl.cipher.suites names Java (IANA) cipher suites; "
                          "librdkafka takes OpenSSL's names (`openssl ciphers -stdname` lists "
                          "both), e.g. ECDHE-RSA-AES128-GCM-SHA256")
    if "partitioner.class" in out:
        chosen = _JAVA_PARTITIONERS.get(out.pop("partitioner.class").strip())
        if chosen is None:
            raise _refuse("partitioner.class", _PARTITIONER_CLASS)
        _put(out, "partitioner", chosen, "partitioner.class")
    for java, ours in RENAMED.items():
        if java in out:
            _put(out, ours, _converted(java, out.pop(java)), java)
    codec = out.get("compression.type", out.get("compression.codec", "none")).strip().lower()
    for name in _CODECS:
        level = out.pop(f"compression.{name}.level", None)
        if level is not None and name == codec:  # Java, too, reads only the chosen codec's
            _put(out, "compression.level", level.strip(), f"compression.{name}.level")
    if out.get("ssl.endpoint.identification.algorithm", "https").strip() == "":
        out["ssl.endpoint.identification.algorithm"] = "none"  # Java's way to turn it off
    _truststore(out)
    _jaas(out, oauth_handler)
    out.setdefault("partitioner", JAVA_PARTITIONER)
    return out


def _truststore(out: dict[str, str]) -> None:
    """A PEM truststore is librdkafka's CA file or string; JKS and PKCS12 ones are refused."""
    given = {k: out.pop(k) for k in _TRUSTSTORE if k in out}
    if not given:
        return
    kind = given.get("ssl.truststore.type", "JKS").strip().upper()  # Java's default type: JKS
    if kind != "PEM":
        key = "ssl.truststore.location" if "ssl.truststore.location" in given else next(iter(given))
        raise _refuse(key, f"a {kind} truststore, which librdkafka cannot read: {_PEM_CA}")
    if "ssl.truststore.password" in given:
        raise _refuse("ssl.truststore.password", "a PEM truststore has no password; remove it")
    if "ssl.truststore.location" in given:
        _put(out, "ssl.ca.location", given["ssl.truststore.location"], "ssl.truststore.location")
    if "ssl.truststore.certificates" in given:
        _put(out, "ssl.ca.pem", given["ssl.truststore.certificates"],
             "ssl.truststore.certificates")


def _jaas(out: dict[str, str], oauth_handler: bool) -> None:
    """sasl.jaas.config of the PLAIN and SCRAM login modules: librdkafka's username and
    password (sasl.mechanism stays: SCRAM needs it; PLAIN's login module implies it); of the
    OAUTHBEARER one with Kafka's login handler (`oauth_handler`): _oauth_jaas."""
    raw = out.pop(_JAAS_KEY, None)
    if raw is None:
        if oauth_handler:
            raise _refuse(_OAUTH_HANDLER_KEY, f"without kafka.{_JAAS_KEY} (OAuthBearerLoginModule "
                          f"with clientId and clientSecret) it has nothing to log in with; give "
                          f"{_OAUTH_INSTEAD}")
        return
    module, options = parse_jaas(raw)
    if module == _OAUTH_MODULE:
        _oauth_jaas(out, options, oauth_handler)
        return
    if oauth_handler:
        raise _refuse(_OAUTH_HANDLER_KEY, f"it serves OAuthBearerLoginModule, not {module}; "
                      "remove it")
    mechanisms = _LOGIN_MODULES.get(module)
    if mechanisms is None:
        why = _OTHER_MODULES.get(module, "twopc translates only the PLAIN and SCRAM login modules "
                                 "(into kafka.sasl.username and kafka.sasl.password)")
        raise _refuse(_JAAS_KEY, f"login module {module}: {why}")
    mechanism = (out.get("sasl.mechanism") or out.get("sasl.mechanisms") or "").strip().upper()
    if not mechanism and mechanisms == ("PLAIN",):
        mechanism = out["sasl.mechanism"] = "PLAIN"
    if mechanism not in mechanisms:
        raise OptionError(
            f"option kafka.{_JAAS_KEY} uses {module.rsplit('.', 1)[-1]}, which needs "
            f"kafka.sasl.mechanism {' or '.join(mechanisms)}"
            + (f", not {mechanism}" if mechanism else " (none is given)"))
    if options.get("tokenauth", "").strip().lower() == "true":
        raise _refuse(_JAAS_KEY, "SCRAM with a delegation token (tokenauth=true) needs a SCRAM "
                      "extension that librdkafka does not send; use a SCRAM user's credentials")
    for name in ("username", "password"):
        if name not in options:
            raise OptionError(f"option kafka.{_JAAS_KEY}: the login module has no {name}=...; "
                              f"give it, or kafka.sasl.{name} instead of kafka.{_JAAS_KEY}")
        _put(out, f"sasl.{name}", options[name], _JAAS_KEY)


def _oauth_jaas(out: dict[str, str], options: Mapping[str, str], handler: bool) -> None:
    """OAuthBearerLoginModule with Kafka's client-credentials login handler: librdkafka's
    `sasl.oauthbearer.method=oidc` (clientId, clientSecret, scope, extension_NAME options;
    sasl.oauthbearer.token.endpoint.url has the same name in both). Without the handler the Java
    client makes unsecured (unsigned) tokens, which no production broker takes: refused."""
    if not handler:
        raise _refuse(_JAAS_KEY, f"OAuthBearerLoginModule without kafka.{_OAUTH_HANDLER_KEY}="
                      "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler "
                      f"makes unsigned tokens, for development brokers only; give {_OAUTH_INSTEAD}")
    mechanism = (out.get("sasl.mechanism") or out.get("sasl.mechanisms") or "").strip().upper()
    if mechanism != "OAUTHBEARER":
        raise OptionError(f"option kafka.{_JAAS_KEY} uses OAuthBearerLoginModule, which needs "
                          f"kafka.sasl.mechanism OAUTHBEARER"
                          + (f", not {mechanism}" if mechanism else " (none is given)"))
    known = {"clientId", "clientSecret", "scope"}
    unknown = sorted(k for k in options if k not in known and not k.startswith("extension_"))
    if unknown:  # names only: values may be secrets
        raise _refuse(_JAAS_KEY, f"OAuthBearerLoginModule option(s) {', '.join(unknown)}: twopc "
                      "translates clientId, clientSecret, scope and extension_NAME only; give "
                      f"{_OAUTH_INSTEAD}")
    for name in ("clientId", "clientSecret"):
        if not options.get(name):
            raise OptionError(f"option kafka.{_JAAS_KEY}: OAuthBearerLoginModule has no "
                              f"{name}=...; give it")
    if not out.get("sasl.oauthbearer.token.endpoint.url"):
        raise OptionError(f"option kafka.{_JAAS_KEY} (OAuthBearerLoginModule) needs "
                          "kafka.sasl.oauthbearer.token.endpoint.url, the token endpoint")
    _put(out, "sasl.oauthbearer.method", "oidc", _JAAS_KEY)
    _put(out, "sasl.oauthbearer.client.id", options["clientId"], _JAAS_KEY)
    _put(out, "sasl.oauthbearer.client.secret", options["clientSecret"], _JAAS_KEY)
    if options.get("scope"):
        _put(out, "sasl.oauthbearer.scope", options["scope"], _JAAS_KEY)
    extensions = [f"{k[len('extension_'):]}={v}" for k, v in options.items()
                  if k.startswith("extension_")]
    if extensions:
        _put(out, "sasl.oauthbearer.extensions", ",".join(extensions), _JAAS_KEY)


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


class _Tokens:
    """Kafka's JAAS tokenizer (org.apache.kafka.common.security.JaasConfig, a StreamTokenizer):
    words of any characters but whitespace and ; = ' " /; strings in single or double quotes with
    backslash escapes, ended by their quote or the line's end; comments from / to the line's end
    and /* ... */."""

    SPECIAL = ";='\"/"

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def next(self) -> tuple[str, str] | None:
        """(kind, text): kind 'word', 'quoted' or the character ';' or '='; None at the end."""
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if ord(char) <= 32:
                self.pos += 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                self.pos = len(text) if end < 0 else end + 2
            elif char == "/":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end + 1
            elif char in ";=":
                self.pos += 1
                return char, char
            elif char in "'\"":
                return "quoted", self._quoted(char)
            else:
                start = self.pos
                while self.pos < len(text) and ord(text[self.pos]) > 32 \
                        and text[self.pos] not in self.SPECIAL:
                    self.pos += 1
                return "word", text[start:self.pos]
        return None

    def _quoted(self, quote: str) -> str:
        text, out = self.text, []
        self.pos += 1
        while self.pos < len(text) and text[self.pos] not in (quote, "\n", "\r"):
            char = text[self.pos]
            self.pos += 1
            if char != "\\" or self.pos >= len(text):
                out.append(char)
                continue
            char = text[self.pos]
            self.pos += 1
            if char in "01234567":
                digits, limit = char, (3 if char <= "3" else 2)
                while len(digits) < limit and self.pos < len(text) and text[self.pos] in "01234567":
                    digits += text[self.pos]
                    self.pos += 1
                out.append(chr(int(digits, 8)))
            else:
                out.append(_ESCAPES.get(char, char))
        if self.pos < len(text) and text[self.pos] == quote:
            self.pos += 1
        return "".join(out)


# A Java class's binary name: lower-case packages, then the class. Only such a word is echoed.
_JAVA_CLASS_RE = re.compile(r"^(?:[a-z_][a-z0-9_]*\.)+[A-Z][A-Za-z0-9_$]*$")


_JAAS_NAMES = ("username", "password", "tokenauth")


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """The login module and its options of a `sasl.jaas.config` value, parsed as Kafka's Java
    client parses it: `<LoginModule> <flag> (<name>=<value>)*;`, one login module. OptionError
    naming what is wrong (never the values: they hold the password)."""
    where = f"option kafka.{_JAAS_KEY}"
    tokens = _Tokens(text)
    first = tokens.next()
    if first is None or first[0] == ";" or first[0] == "=":
        raise OptionError(f"{where} names no login module; expected '<LoginModule> required "
                          "username=\"...\" password=\"...\";'")
    module = first[1]
    if not _JAVA_CLASS_RE.match(module):
        # Not a class name: maybe the password itself, pasted alone. Never echoed.
        raise OptionError(f"{where} does not start with a login module's class name; expected "
                          "'<LoginModule> required username=\"...\" password=\"...\";'")
    flag = tokens.next()
    if flag is None or flag[1].lower() not in ("required", "requisite", "sufficient", "optional"):
        raise OptionError(f"{where}: the login module {module} needs a control flag (required)")
    options: dict[str, str] = {}
    while True:
        token = tokens.next()
        if token is None:
            raise OptionError(f"{where} is not ended by ';'")
        if token[0] == ";":
            break
        if token[0] not in ("word", "quoted"):
            raise OptionError(f"{where}: a '{token[0]}' where an option name was expected")
        equals, value = tokens.next(), tokens.next()
        if equals is None or equals[0] != "=" or value is None or value[0] not in ("word",
                                                                                   "quoted"):
            if token[1] in _JAAS_NAMES:
                raise OptionError(f"{where}: no value for option {token[1]!r}")
            # Another word is not echoed: a value misplaced there may be the password.
            raise OptionError(f"{where}: option {len(options) + 1} of the login module has no "
                              "'=value' (name=\"value\" pairs, then ';')")
        options[token[1]] = value[1]
    if tokens.next() is not None:
        raise OptionError(f"{where} holds more than one login module; a Kafka client takes one")
    return module, options
