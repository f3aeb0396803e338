"""Client settings from the librdkafka-style configuration users already give the producer. Pure.

Producer-only keys (transactional.id, linger.ms, ...) are ignored, so one dict serves both paths.

Design: docs/design.md section 3.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from checkpoint.redact import redacted_repr
from twopc.control.errors import ConfigError
from twopc.control.oauth import OAuthSettings, oauth_settings

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_UNSUPPORTED_SSL_KEYS = ("ssl.keystore.location", "ssl.engine.location", "ssl.providers")


@dataclass(frozen=True)
class ClientSettings:
    bootstrap: tuple[tuple[str, int], ...]
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_ca_location: str | None = None
    ssl_ca_pem: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = None
    ssl_check_hostname: bool = True
    ssl_verify: bool = True
    client_id: str = "twopc-control"
    request_timeout_s: float = 30.0
    connect_timeout_s: float = 10.0
    retry_backoff_s: float = 0.02
    retry_backoff_max_s: float = 1.0
    # How long retriable errors (coordinator moves, CONCURRENT_TRANSACTIONS) are retried.
    retry_timeout_s: float = 60.0
    connections_per_broker: int = 8
    # A stranded commit's release is a transaction of its own (ControlClient.release_stranded):
    # cut short before its EndTxn, it must stay open until a later check commits it, so it asks
    # for the broker's default maximum (transaction.max.timeout.ms), not the producer's minute.
    release_timeout_ms: int = 900000
    # sasl.mechanism=OAUTHBEARER: where the tokens come from (twopc/control/oauth.py).
    oauth: OAuthSettings | None = None

    def __repr__(self) -> str:
        return redacted_repr(self)  # sasl_password, ssl_key_password: masked

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")


def parse_host_port(entry: str) -> tuple[str, int]:
    text = entry.strip()
    for scheme in ("PLAINTEXT://", "SSL://", "SASL_PLAINTEXT://", "SASL_SSL://"):
        if text.upper().startswith(scheme):
            text = text[len(scheme):]
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdigit():
        raise ConfigError(f"bootstrap.servers entry {entry!r} is not HOST:PORT: give the host "
                          "and the port of a broker's listener, e.g. kafka-1:9092")
    if not 1 <= int(port) <= 65535:
        raise ConfigError(f"bootstrap.servers entry {entry!r}: port {int(port)} is not a TCP port "
                          "(1 to 65535)")
    return host.strip("[]"), int(port)


def _ms(cfg: Mapping[str, str], key: str, default_ms: float) -> float:
    raw = cfg.get(key)
    if raw is None:
        return default_ms / 1000.0
    try:
        value = float(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key}={raw!r} is not a number of milliseconds") from exc
    if value <= 0:
        raise ConfigError(f"{key} must be positive, not {raw!r}")
    return value / 1000.0


def _bool(cfg: Mapping[str, str], key: str, default: bool) -> bool:
    raw = cfg.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigError(f"{key}={raw!r} must be true or false")


def settings_from_config(config: Mapping[str, object]) -> ClientSettings:
    cfg = {k: str(v) for k, v in config.items() if v is not None}
    servers = cfg.get("bootstrap.servers") or cfg.get("metadata.broker.list")
    if not servers:
        raise ConfigError("bootstrap.servers is required (HOST:PORT[,HOST:PORT...])")
    bootstrap = tuple(parse_host_port(s) for s in servers.split(",") if s.strip())
    protocol = cfg.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"security.protocol={protocol!r}: expected one of "
                          f"{', '.join(SECURITY_PROTOCOLS)}")
    mechanism = (cfg.get("sasl.mechanism") or cfg.get("sasl.mechanisms") or "PLAIN").upper()
    if protocol.startswith("SASL_"):
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(f"sasl.mechanism={mechanism!r} is not supported by twopc's control "
                              f"client; use one of {', '.join(SASL_MECHANISMS)}")
        if mechanism != "OAUTHBEARER" and (not cfg.get("sasl.username")
                                           or "sasl.password" not in cfg):
            raise ConfigError(f"security.protocol={protocol} needs sasl.username and "
                              "sasl.password")
    if protocol in ("SSL", "SASL_SSL"):
        for key in _UNSUPPORTED_SSL_KEYS:
            if key in cfg:
                raise ConfigError(f"{key} is not supported by twopc's control client; give PEM "
                                  "files with ssl.ca.location, ssl.certificate.location and "
                                  "ssl.key.location")
    algorithm = cfg.get("ssl.endpoint.identification.algorithm", "https").lower()
    if algorithm not in ("https", "none"):
        raise ConfigError("ssl.endpoint.identification.algorithm must be https or none")
    oauth = None
    if protocol.startswith("SASL_") and mechanism == "OAUTHBEARER":
        oauth = oauth_settings(cfg, _ms(cfg, "socket.connection.setup.timeout.ms", 10000))
    per_broker = cfg.get("twopc.control.connections.per.broker", "8")
    if not per_broker.isdigit() or not 1 <= int(per_broker) <= 16:
        raise ConfigError("twopc.control.connections.per.broker must be between 1 and 16")
    return ClientSettings(
        bootstrap=bootstrap,
        security_protocol=protocol,
        sasl_mechanism=mechanism,
        sasl_username=cfg.get("sasl.username"),
        sasl_password=cfg.get("sasl.password"),
        ssl_ca_location=cfg.get("ssl.ca.location"),
        ssl_ca_pem=cfg.get("ssl.ca.pem"),
        ssl_certificate_location=cfg.get("ssl.certificate.location"),
        ssl_key_location=cfg.get("ssl.key.location"),
        ssl_key_password=cfg.get("ssl.key.password"),
        ssl_check_hostname=algorithm == "https",
        ssl_verify=_bool(cfg, "enable.ssl.certificate.verification", True),
        client_id=cfg.get("client.id", "twopc-control"),
        request_timeout_s=_ms(cfg, "socket.timeout.ms", 30000),
        connect_timeout_s=_ms(cfg, "socket.connection.setup.timeout.ms", 10000),
        retry_backoff_s=_ms(cfg, "retry.backoff.ms", 20),
        retry_backoff_max_s=_ms(cfg, "retry.backoff.max.ms", 1000),
        retry_timeout_s=_ms(cfg, "twopc.control.retry.timeout.ms", 60000),
        connections_per_broker=int(per_broker),
        release_timeout_ms=int(_ms(cfg, "twopc.control.release.timeout.ms", 900000) * 1000),
        oauth=oauth,
    )


def tls_failure_advice(reason: str, config: Mapping[str, object]) -> str:
    """What to change after a failed TLS handshake, from its reason (Python's ssl module's or
    librdkafka's text) and the librdkafka-style client settings in `config`. Pure."""
    text = reason.lower()
    ca = config.get("ssl.ca.location")
    trusted = (f"the CA in ssl.ca.location={ca}" if ca and str(ca) != "probe"
               else "the CA given in ssl.ca.pem" if config.get("ssl.ca.pem")
               else "the system's default CAs (no ssl.ca.location given)")
    if "mismatch" in text or "doesn't match" in text or "not valid for" in text:
        return ("the broker's certificate does not name the address the client connected to: "
                "add that host name or IP address to the certificate's subject alternative names, "
                "or connect by a name it holds (only if you accept the risk: "
                "ssl.endpoint.identification.algorithm=none)")
    if "expired" in text or "not yet valid" in text:
        return ("the broker's certificate is expired or not yet valid: renew it (and check the "
                "clocks of the brokers and of this machine)")
    # An alert from the broker about this client's certificate (Kafka's JVM answers a missing one
    # with "bad certificate" too).
    refused = ("certificate required" in text or "peer did not return a certificate" in text
               or "alert handshake failure" in text or "alert bad certificate" in text
               or "alert_bad_certificate" in text or "unknown ca" in text
               or "certificate unknown" in text or "certificate_unknown" in text)
    if refused and not config.get("ssl.certificate.location"):
        return ("the broker requires a client certificate: set ssl.certificate.location and "
                "ssl.key.location (and ssl.key.password if the key is encrypted) to a certificate "
                "signed by a CA the brokers trust")
    if refused:
        return ("the broker refused this client's certificate: the certificate in "
                "ssl.certificate.location must be signed by a CA in the brokers' truststore")
    if "verify failed" in text or "could not be verified" in text or "self-signed" in text \
            or "issuer" in text or "signature failure" in text:
        return (f"the broker's certificate is not signed by a CA this client trusts ({trusted}): "
                "set ssl.ca.location to the PEM file of the CA that signed the brokers' "
                "certificates (or give it inline in ssl.ca.pem)")
    if "wrong version number" in text or "record layer" in text or "packet length" in text:
        return ("the port did not answer TLS: check security.protocol and that bootstrap.servers "
                "names the brokers' SSL or SASL_SSL listener")
    return ("check the ssl.* settings: ssl.ca.location (the CA that signed the brokers' "
            "certificates), ssl.certificate.location and ssl.key.location (a client certificate, "
            "if the listener requires one)")
