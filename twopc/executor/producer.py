"""The writer's producer: its settings, its start off the caller's thread, and what it reports
(failed deliveries, TLS and SASL failures). docs/design.md section 2, executor steps 3-4.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from checkpoint.redact import redact_text, redact_url
from twopc.control import ControlClient, ControlError
from twopc.control.config import tls_failure_advice
from twopc.control.errors import ConfigError
from twopc.control.oauth import OAuthTokenError, describe_source, librdkafka_oauth
from twopc.executor.checksum import warm_up
from twopc.executor.headroom import make_room, start_describe
from twopc.executor.rows import (
    Columns,
)
from twopc.executor.write_errors import (
    BrokerSecurityError,
    WriterConfigError,
)

log = logging.getLogger("twopc.writer")

STATS_INTERVAL_MS = 10  # small: identification waits for the first sample after the flush


NO_ROW = object()


_OURS = ("on_delivery", "delivery.report.only.error", "dr_cb", "dr_msg_cb")


_MAX_KEPT_FAILURES = 1000


READ_AHEAD_ROWS = 65536  # rows read from the caller while the transaction starts


def transactional_producer_config(user: Mapping[str, Any], transactional_id: str,
                                  timeout_ms: int) -> dict[str, Any]:
    """What the writer gives librdkafka: the user's settings (twopc.* removed) with the
    transactional id, its timeout and idempotence, which makes librdkafka require acks=all.
    WriterConfigError for a setting that contradicts what the writer needs."""
    config = {k: v for k, v in user.items() if not k.startswith("twopc.")}
    for key in _OURS:
        if key in config:
            raise WriterConfigError(f"producer config {key!r} is set, but the writer needs every "
                                    "delivery report itself: remove it")
    given = config.get("transactional.id")
    if given is not None and given != transactional_id:
        raise WriterConfigError(f"producer config transactional.id={given!r} differs from the "
                                f"writer's {transactional_id!r}: remove it from the config")
    given_timeout = config.get("transaction.timeout.ms")
    if given_timeout is not None and int(given_timeout) != timeout_ms:
        raise WriterConfigError(f"producer config transaction.timeout.ms={given_timeout} differs "
                                f"from transaction_timeout_ms={timeout_ms}: give it once")
    if str(config.get("statistics.interval.ms", "1")) == "0":
        raise WriterConfigError("statistics.interval.ms=0 turns off librdkafka's statistics, "
                                "which the writer needs to identify its transaction")
    config.setdefault("statistics.interval.ms", STATS_INTERVAL_MS)
    config.setdefault("linger.ms", 5)
    # The first connection to a broker learned from metadata waits for this backoff (librdkafka
    # default 100 ms, jittered) and the transaction's start waits for that connection (see
    # Starter): 10 ms makes the start ~15 ms instead of ~60. Failed reconnects still back off
    # exponentially up to reconnect.backoff.max.ms.
    config.setdefault("reconnect.backoff.ms", 10)
    try:
        # twopc.oauth.token.provider becomes an oauth_cb (twopc/control/oauth.py), with the
        # first token fetched here: a bad one fails before any producer exists.
        config.update(librdkafka_oauth(user))
    except OAuthTokenError as exc:
        raise BrokerSecurityError(f"transactional id {transactional_id!r}: no OAUTHBEARER "
                                  f"token: {exc}. Nothing was written") from exc
    except ConfigError as exc:
        raise WriterConfigError(str(exc)) from exc
    config["transactional.id"] = transactional_id
    config["transaction.timeout.ms"] = timeout_ms
    config["enable.idempotence"] = True
    return config


@dataclass
class Failure:
    error: KafkaError
    topic: str | None
    partition: int | None
    key: bytes | None
    value: bytes | None


class Deliveries:
    """The failed deliveries. librdkafka reports only those (delivery.report.only.error): what
    was delivered where, the writer asks the partition leaders once (twopc/executor/spans.py) instead of
    taking a Python callback per record, which costs about as much CPU as producing the record."""

    def __init__(self) -> None:
        self.failures: list[Failure] = []
        self.failed = 0

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            return
        self.failed += 1
        if len(self.failures) < _MAX_KEPT_FAILURES:
            self.failures.append(Failure(err, msg.topic(), msg.partition(), msg.key(),
                                          msg.value()))


class SecurityErrors:
    """The TLS and SASL failures librdkafka reports (error_cb, served by poll()): it retries them
    as if the broker were down, so a wrong CA or password would look like a timeout."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        self.user_cb = config.get("error_cb")
        self.seen: list[KafkaError] = []

    def on_error(self, err: KafkaError) -> None:
        # A handshake's failure, not a TLS session that a broker going down broke off.
        failed = err.code() == KafkaError._AUTHENTICATION or (
            err.code() == KafkaError._SSL and "handshake" in err.str().lower())
        if failed and len(self.seen) < 10:
            self.seen.append(err)
        if self.user_cb is not None:
            self.user_cb(err)

    def raise_if_any(self, transactional_id: str) -> None:
        if not self.seen:
            return
        err = self.seen[-1]
        if err.code() == KafkaError._SSL:
            fix = tls_failure_advice(err.str(), self.config)
        elif str(self.config.get("sasl.mechanism", "")).upper() == "OAUTHBEARER":
            # Kafka answers a refused token with only {"status":"invalid_token"}; the brokers'
            # log says why (OAuthBearerValidatorCallbackHandler).
            fix = ("the brokers refused the OAUTHBEARER token: it must be unexpired and carry the "
                   "audience and issuer the brokers expect (sasl.oauthbearer.expected.audience, "
                   "sasl.oauthbearer.expected.issuer); check the token source ("
                   f"{_oauth_source(self.config)})")
        else:
            fix = ("check sasl.mechanism, sasl.username and sasl.password (and that the user "
                   "exists on the brokers)")
        raise BrokerSecurityError(
            f"transactional id {transactional_id!r}: the producer cannot connect to the brokers "
            f"securely ({redact_text(err.str(), self.config)}): {fix}. Nothing was written")


def _oauth_source(config: Mapping[str, Any]) -> str:
    ours = describe_source(config)
    if ours is not None:
        return ours
    if config.get("oauth_cb") is not None:
        return "the producer's oauth_cb"
    if str(config.get("sasl.oauthbearer.method", "")).lower() == "oidc":
        url = redact_url(str(config.get("sasl.oauthbearer.token.endpoint.url")))
        return (f"sasl.oauthbearer.token.endpoint.url={url}, "
                f"sasl.oauthbearer.client.id={config.get('sasl.oauthbearer.client.id')}")
    return "sasl.oauthbearer.config"


def build_off_thread(config: Mapping[str, Any]) -> bool:
    """Whether Producer(config) is slow enough to build on the Starter's thread: with an
    `oauth_cb`, confluent-kafka's constructor waits at least 1 s for the first token (sleeping
    without the GIL), which then overlaps with the caller reading rows ahead. Without one it takes
    ~2 ms, and is built on the caller's thread, where a refused setting raises at once."""
    return config.get("oauth_cb") is not None


class Starter(threading.Thread):
    """The producer's construction if `producer` is None (from `config`: build_off_thread),
    init_transactions and begin_transaction, off the caller's thread (confluent-kafka releases
    the GIL in all three). Before the init, the id's producer id is rotated if the init could
    leave it without the epochs a release needs (headroom.py); the coordinator's description that
    decides it is asked at once, while the producer warms up."""

    def __init__(self, producer: Producer | None, topic: str | None, timeout_s: float,
                 security: SecurityErrors, transactional_id: str, control: ControlClient,
                 config: Mapping[str, Any] | None = None) -> None:
        super().__init__(name="twopc-writer-start", daemon=True)
        self.producer = producer
        self.config = config
        self.topic = topic
        self.timeout_s = timeout_s
        self.security = security
        self.tid = transactional_id
        self.control = control
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            described = start_describe(self.control, self.tid)
            if self.producer is None:
                self.producer = Producer(self.config)
            # librdkafka sends FindCoordinator only through a connected broker it learned from
            # metadata (not a bootstrap one), and when none is up it retries on a 500 ms timer:
            # init_transactions alone took ~5-100 ms or ~510 ms at random. Two metadata requests
            # first (the second waits for a learned broker's connection) make it ~15 ms in all
            # (with reconnect.backoff.ms=10), init itself a few ms. With no default topic, all
            # topics' metadata.
            try:
                self.producer.list_topics(self.topic, min(self.timeout_s, 10.0))
                self.producer.list_topics(self.topic, min(self.timeout_s, 10.0))
            except KafkaException as exc:  # only a warm-up: init_transactions decides ...
                log.debug("metadata before init_transactions failed: %s", exc)
                # ... unless no broker could be reached securely: librdkafka would retry that
                # until the transaction timeout and then say only "timed out".
                self.producer.poll(0)
                self.security.raise_if_any(self.tid)
            try:
                found = described.result()[self.tid]
            except ControlError as exc:
                # The init below meets the same broker and says what is wrong in the producer's
                # terms; identify() still refuses a handle without headroom.
                log.debug("describing %r before init_transactions failed: %s", self.tid, exc)
            else:
                make_room(self.control, self.tid, found, int(self.timeout_s * 1000))
            try:
                self.producer.init_transactions(self.timeout_s)
            except KafkaException:
                self.producer.poll(0)
                self.security.raise_if_any(self.tid)
                raise
            self.producer.begin_transaction()
            # The checksum's hashing imports pandas on first use (~0.25 s, once per Python
            # worker): here it overlaps with the caller reading rows ahead.
            warm_up()
        except BaseException as exc:
            self.error = exc


def read_ahead(rows: Iterator[Any], starter: threading.Thread) -> list[Any]:
    """Rows taken from `rows` while the transaction starts (bounded: they are held in memory)."""
    ahead: list[Any] = []
    count = 0
    while starter.is_alive() and count < READ_AHEAD_ROWS:
        row = next(rows, NO_ROW)
        if row is NO_ROW:
            break
        ahead.append(row)
        count += len(row) if type(row) is Columns else 1
    return ahead

