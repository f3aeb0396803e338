"""Guards at start (docs/design.md section 4, guard 1), run on the driver before the first task writes.

The cluster checks are the driver's (`twopc.driver.startup_guards.check_at_start`); this adds what
only the Spark options can tell: a producer setting that librdkafka refuses, a trigger interval too
long for the transaction timeout, and a source that is not rate-limited.

The query's trigger: a Python data source's streamWriter() sees only the query's options (with
checkpointLocation and queryName) in a driver-side worker without a SparkContext, and Spark's
offsets log and its confs do not record the trigger; so kafka2pc takes it from the option
twopc.triggerIntervalMs. The foreachBatch sink runs in the driver's own process and reads it from
the running query in Spark's JVM (`query_trigger_ms`).
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaException, Producer

from twopc.control.oauth import TOKEN_PROVIDER_KEY, OAuthTokenError
from twopc.driver import startup_guards
from twopc.protocol.clock import DEFAULT_MARGIN_MS
from twopc.protocol.pool import transactional_id
from twopc.spark.errors import OptionError, TriggerIntervalError
from twopc.spark.options import (
    OAUTH_TOKEN_PROVIDER,
    RATE_LIMITED,
    TIMEOUT,
    TRIGGER,
    SinkConfig,
)
from twopc.spark.reuse import client_for, release_client

_log = logging.getLogger(__name__)


def check_producer_config(config: SinkConfig) -> None:
    """A bad `kafka.*` option fails here, once, on the driver, rather than in every task: the
    producer is made as the tasks make theirs (transactional, so idempotent: librdkafka then
    refuses acks other than all), and dropped unused."""
    from twopc.executor.producer import transactional_producer_config
    from twopc.executor.write_errors import WriterConfigError

    try:
        Producer(transactional_producer_config(
            config.producer_config, transactional_id(config.prefix, 0, 0),
            config.transaction_timeout_ms))
    except WriterConfigError as exc:
        if isinstance(exc.__cause__, OAuthTokenError):  # no token: not a bad option's fault
            raise exc.__cause__ from exc.__cause__.__cause__
        raise _not_valid(exc, config) from None
    except KafkaException as exc:
        raise _not_valid(exc, config) from None


def _not_valid(exc: Exception, config: SinkConfig) -> OptionError:
    detail = str(exc.args[0] if exc.args else exc)
    if "message.timeout.ms" in detail:  # Java's delivery.timeout.ms (120 s by default)
        detail += (f": kafka.delivery.timeout.ms, or kafka.message.timeout.ms, must be at most "
                   f"{TIMEOUT}={config.transaction_timeout_ms}; lower it or leave it out (it "
                   "then follows the transaction timeout)")
    return OptionError(f"a kafka.* option is not valid for the producer: {detail}")


def spark_named(exc: OAuthTokenError) -> OAuthTokenError:
    """`exc` naming the token source by the Spark option the user set (twopc.oauthTokenProvider,
    kafka.sasl.oauthbearer.*), not by the librdkafka-style key both halves read."""
    setting = exc.setting
    if setting.startswith(f"{TOKEN_PROVIDER_KEY}="):
        return exc.relabel(OAUTH_TOKEN_PROVIDER + setting[len(TOKEN_PROVIDER_KEY):])
    renamed = setting.replace("sasl.oauthbearer.", "kafka.sasl.oauthbearer.")
    if renamed.startswith("enable.sasl."):
        renamed = f"kafka.{renamed}"
    return exc.relabel(renamed)


def check_trigger(config: SinkConfig, trigger_ms: int, source: str) -> None:
    """TriggerIntervalError, naming `source` (where the interval comes from) and the fix, if the
    trigger interval is too long for the transaction timeout (startup_guards)."""
    margin = DEFAULT_MARGIN_MS if config.margin_ms is None else config.margin_ms
    problem = startup_guards.trigger_interval_problem(trigger_ms, config.transaction_timeout_ms,
                                                      margin)
    if problem is not None:
        raise TriggerIntervalError(f"{source}: {problem}")


def query_trigger_ms(session: Any, query_id: str) -> int | None:
    """The processing-time trigger interval of the running query `query_id`, read from Spark's
    JVM in the driver's process (py4j: the query's StreamExecution.trigger()); None when it has
    none (availableNow, once) or it cannot be read (Spark Connect, a query of another session)."""
    from pyspark.sql import SparkSession

    for candidate in (session, SparkSession.builder.getOrCreate()):
        # foreachBatch hands a clone of the query's session, whose query manager is not the one
        # that started the query: the session the query was started from is the default one.
        try:
            query = candidate.streams.get(query_id)
            if query is None:
                continue
            trigger = query._jsq.streamingQuery().trigger()
            if not trigger.getClass().getSimpleName().endswith("ProcessingTimeTrigger"):
                return None
            return int(trigger.intervalMs())
        except Exception as exc:  # an API this Spark lacks: the trigger is not known
            _log.debug("twopc: the trigger of query %s cannot be read: %s", query_id, exc)
            return None
    return None


def check_at_start(config: SinkConfig, *, streaming: bool) -> None:
    if streaming and config.trigger_interval_ms is not None:
        check_trigger(config, config.trigger_interval_ms, f"option {TRIGGER}")
    try:
        check_producer_config(config)
        # The process's kept client, which the driver side takes next: a new one here cost a
        # second connection set-up in every cold planning process (benchmarks/bench_cold_start.py).
        control = client_for(config)
        healthy = False
        try:
            startup_guards.check_at_start(control, config.producer_config,
                                          config.transaction_timeout_ms)
            healthy = True
        finally:
            release_client(config, control, healthy=healthy)
    except OAuthTokenError as exc:
        raise spark_named(exc) from exc.__cause__
    if streaming and not config.source_rate_limited:
        _log.warning(
            "twopc: a transaction stays open for the whole micro-batch plus its commit (%s=%d ms). "
            "Rate-limit the source (maxOffsetsPerTrigger / maxFilesPerTrigger) so that the first batch "
            "after an outage cannot outgrow the timeout, then set %s=true to silence this warning",
            TIMEOUT, config.transaction_timeout_ms, RATE_LIMITED,
        )
